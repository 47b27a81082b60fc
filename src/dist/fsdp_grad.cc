// dist/fsdp_grad.cc — the gradient, optimizer and checkpoint side of dist/fsdp.h:
// reduce-scatter of full gradients into shards (mean over ranks), all-reduce of replicated
// gradients, the ShardView list the optimizer runs on, global gradient norm / finiteness,
// and whole-tensor gather/scatter for single-file checkpoints.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "dist/fsdp_internal.h"
#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain::dist {

namespace {

// Σ x² in double in a fixed order (thread-count independent), and the finite check: the
// elementwise kernels of nn/ops.h.
double sum_sq(const float* x, size_t n) { return sum_squares_elements(x, int64_t(n)); }
bool finite(const float* x, size_t n) { return all_finite_elements(x, int64_t(n)); }

}  // namespace

void Fsdp::pre_backward(int i) {
  Module& M = mod(i);
  MXT_CHECK(M.lent < 0, "FSDP: pre_backward(", i, ") twice without post_backward");
  GradState& g = *gs_;
  Parameter& w = *M.weight;
  // The buffer this module had last time when it is free (consecutive modules then keep
  // to different buffers, each sized for its own modules: e.g. fc1's while fc2's is in
  // flight), else the free one with the least capacity that holds the gradient, else the
  // largest free one (it grows), else a new one. A buffer stays busy while a reduce-scatter
  // sends from it.
  const size_t need = size_t(w.numel());
  size_t k = g.pool.size();
  if (M.home >= 0 && !g.pool_busy[size_t(M.home)]) k = size_t(M.home);
  for (size_t j = 0; j < g.pool.size() && k != size_t(M.home); ++j) {
    if (g.pool_busy[j]) continue;
    const size_t cj = g.pool[j].capacity();
    if (k == g.pool.size()) {
      k = j;
      continue;
    }
    const size_t ck = g.pool[k].capacity();
    if ((cj >= need && (ck < need || cj < ck)) || (ck < need && cj > ck)) k = j;
  }
  if (k == g.pool.size()) {
    g.pool.emplace_back();
    g.pool_busy.push_back(0);
  }
  M.home = int(k);
  MXT_CHECK(w.grad.empty(), "FSDP: layer '", M.name, "' holds its own gradient (",
            w.grad.size(), " values); pre_backward lends one");
  g.pool[k].resize(size_t(w.numel()));  // within capacity after the first step
  std::swap(w.grad, g.pool[k]);
  w.clear_grad();  // the layer's wgrad writes it
  g.pool_busy[k] = 1;
  M.lent = int(k);
}

// Starts the reduce-scatter of module i's full gradient `full` [numel] into its shard grad,
// after completing the one in flight. The result is written into the shard grad when it is
// the first since reduce_gradients(), else it lands in the slot's buffer and is added when
// the slot is finished.
void Fsdp::start_reduce(int i, const float* full, int pool_index) {
  Module& M = mod(i);
  finish_reduce();
  GradSlot& s = gs_->rs;
  // A layout without padding rows is its own reduce-scatter input: the lent buffer is sent
  // as it is (kept busy until completion) instead of being copied.
  const bool direct = pool_index >= 0 && M.layout.padded_numel() == M.layout.numel();
  const float* send = full;
  if (!direct) {
    s.send.resize(size_t(M.layout.padded_numel()));
    pad_full(M.layout, full, s.send.data());
    send = s.send.data();
  }
  s.pool_index = direct ? pool_index : -1;
  s.add = M.shard_grad_live;
  float* dst = M.grad.data();
  if (s.add) {
    s.recv.resize(M.grad.size());
    dst = s.recv.data();
  }
  M.shard_grad_live = true;
  s.req = comm_.ireduce_scatter_sum(send, dst, size_t(M.layout.shard_numel()));
  s.module = i;
  stats_.reduce_scatter_bytes += s.req.bytes();
}

void Fsdp::finish_reduce() {
  GradSlot& s = gs_->rs;
  if (s.module < 0) return;
  s.req.wait();
  stats_.reduce_scatter_ms += s.req.ms();
  stats_.reduce_scatter_span_ms += s.req.span_ms();
  if (s.pool_index >= 0) gs_->pool_busy[size_t(s.pool_index)] = 0;  // sent: free again
  s.pool_index = -1;
  Module& M = mod(s.module);
  if (s.add) {
    float* g = M.grad.data();
    const float* r = s.recv.data();
    for (size_t j = 0; j < M.grad.size(); ++j) g[j] += r[j];
  }
  s.module = -1;
}

void Fsdp::reduce_gradients() {
  const int W = opt_.grad_divisor > 0 ? opt_.grad_divisor : comm_.size();
  // The step's micro-batches are done: copies kept for them are freed before the optimizer
  // step makes them stale (and before a checkpoint gathers whole tensors).
  for (int i = 0; i < num_modules(); ++i)
    if (mod(i).keep_caches) {
      drop(i, true);
      mod(i).keep_caches = false;
    }
  // Sharded: modules whose backward ran without pre_backward reduce-scatter their own
  // full-size grads now; then every reduce-scatter in flight completes.
  for (size_t i = 0; i < modules_.size(); ++i) {
    Module& M = *modules_[i];
    const Parameter& w = *M.weight;
    MXT_CHECK(M.lent < 0, "FSDP: layer '", M.name, "' is between pre_backward and post_backward");
    if (w.grad.empty()) continue;
    MXT_CHECK(w.grad.size() == size_t(w.numel()), "FSDP: layer '", M.name, "' gradient holds ",
              w.grad.size(), " values, expected ", w.numel());
    start_reduce(int(i), w.grad.data(), -1);
  }
  finish_reduce();
  for (auto& mp : modules_) {
    Module& M = *mp;
    if (!M.shard_grad_live)  // no contribution this step: a zero gradient
      std::fill(M.grad.begin(), M.grad.end(), 0.f);
    else if (W > 1)
      for (float& g : M.grad) g /= float(W);
    M.shard_grad_live = false;  // the optimizer reads it; the next result starts a new sum
  }
  // Replicated: one all-reduce over all of them.
  size_t total = 0;
  for (auto& r : replicated_) {
    MXT_CHECK(r->p->grad.size() == size_t(r->p->numel()), "FSDP: parameter '", r->p->name,
              "' gradient holds ", r->p->grad.size(), " values, expected ", r->p->numel());
    total += r->p->grad.size();
  }
  if (total == 0) return;
  std::vector<float> buf(total);
  size_t off = 0;
  for (auto& r : replicated_) {
    std::memcpy(buf.data() + off, r->p->grad.data(), sizeof(float) * r->p->grad.size());
    off += r->p->grad.size();
  }
  const CollCounter before = comm_.stats()[Coll::allreduce];
  comm_.allreduce_sum(buf.data(), total);
  const CollCounter& after = comm_.stats()[Coll::allreduce];
  stats_.allreduce_bytes += after.bytes - before.bytes;
  stats_.allreduce_ms += after.ms - before.ms;
  off = 0;
  for (auto& r : replicated_) {
    float* g = r->p->grad.data();
    for (size_t j = 0; j < r->p->grad.size(); ++j) g[j] = W > 1 ? buf[off + j] / float(W) : buf[off + j];
    off += r->p->grad.size();
  }
}

std::vector<ShardView> Fsdp::shards() {
  std::vector<ShardView> out;
  for (auto& mp : modules_) {
    Module& M = *mp;
    ShardView s;
    s.name = M.weight->name;
    s.value = M.value;
    s.grad = M.grad;
    s.m = M.m;
    s.v = M.v;
    s.numel_valid = M.layout.valid_rows(comm_.rank()) * M.layout.cols;
    s.decay = true;
    s.replicated = false;
    s.version = &M.weight->version;
    out.push_back(std::move(s));
  }
  for (auto& r : replicated_) {
    ShardView s;
    s.name = r->p->name;
    s.value = r->p->value;
    s.grad = r->p->grad;
    s.m = r->m;
    s.v = r->v;
    s.numel_valid = r->p->numel();
    s.decay = r->p->shape.size() >= 2;
    s.replicated = true;
    s.version = &r->p->version;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<double> Fsdp::module_grad_sum_squares() {
  std::vector<double> s;
  for (auto& m : modules_) s.push_back(sum_sq(m->grad.data(), m->grad.size()));
  if (!s.empty()) comm_.allreduce_sum(s.data(), s.size());
  return s;
}

double Fsdp::replicated_grad_sum_squares() {
  double rep = 0;  // identical on every rank after reduce_gradients(): count once
  for (auto& r : replicated_) rep += sum_sq(r->p->grad.data(), r->p->grad.size());
  return rep;
}

double Fsdp::grad_sum_squares() {
  double sharded = 0;
  for (auto& m : modules_) sharded += sum_sq(m->grad.data(), m->grad.size());
  comm_.allreduce_sum(&sharded, 1);
  return sharded + replicated_grad_sum_squares();
}

double Fsdp::grad_sum_squares_checked() {
  // s[1]: the sum of every rank's copy of the replicated gradients, read for finiteness only
  // (the norm takes this rank's copy, as grad_sum_squares() does).
  double s[2] = {0, replicated_grad_sum_squares()};
  for (auto& m : modules_) s[0] += sum_sq(m->grad.data(), m->grad.size());
  const double replicated = s[1];
  comm_.allreduce_sum(s, 2);
  return s[0] + replicated + 0.0 * s[1];
}

bool Fsdp::grads_finite() {
  int64_t bad = 0;
  for (auto& m : modules_)
    if (!finite(m->grad.data(), m->grad.size())) bad = 1;
  for (auto& r : replicated_)
    if (!finite(r->p->grad.data(), r->p->grad.size())) bad = 1;
  comm_.allreduce_max(&bad, 1);
  return bad == 0;
}

void Fsdp::bump_versions() {
  for (auto& m : modules_) ++m->weight->version;
  for (auto& r : replicated_) ++r->p->version;
}

// ---- checkpoints ------------------------------------------------------------------------------

std::vector<FsdpParamInfo> Fsdp::params() const {
  std::vector<FsdpParamInfo> out;
  for (size_t i = 0; i < modules_.size(); ++i)
    out.push_back({modules_[i]->weight->name, modules_[i]->weight->shape, true, int(i)});
  for (auto& r : replicated_) out.push_back({r->p->name, r->p->shape, false, -1});
  return out;
}

FloatBuffer Fsdp::gather_full(const std::string& name, ShardField field, int root) {
  for (auto& mp : modules_) {
    Module& M = *mp;
    if (M.weight->name != name) continue;
    const ShardLayout& L = M.layout;
    const size_t sn = size_t(L.shard_numel());
    std::vector<float> all(comm_.rank() == root ? sn * size_t(comm_.size()) : 0);
    comm_.gather(M.field(field).data(), all.data(), sizeof(float) * sn, root);
    if (comm_.rank() != root) return {};
    FloatBuffer full(size_t(L.numel()));
    for (int r = 0; r < comm_.size(); ++r) place_shard(L, r, all.data() + sn * size_t(r), full.data());
    return full;
  }
  for (auto& rp : replicated_)
    if (rp->p->name == name) return comm_.rank() == root ? rp->field(field) : FloatBuffer{};
  MXT_FAIL("FSDP: no parameter named '", name, "' (see Fsdp::params())");
}

void Fsdp::scatter_full(const std::string& name, ShardField field, const float* full, int root) {
  MXT_CHECK(comm_.rank() != root || full != nullptr, "FSDP scatter_full('", name,
            "'): the root rank must pass the whole tensor");
  for (auto& mp : modules_) {
    Module& M = *mp;
    if (M.weight->name != name) continue;
    std::vector<float> buf(size_t(M.layout.numel()));
    if (comm_.rank() == root) std::memcpy(buf.data(), full, sizeof(float) * buf.size());
    comm_.broadcast(buf.data(), sizeof(float) * buf.size(), root);
    slice_shard(M.layout, comm_.rank(), buf.data(), M.field(field).data());
    if (field == ShardField::value) ++M.weight->version;
    return;
  }
  for (auto& rp : replicated_) {
    if (rp->p->name != name) continue;
    FloatBuffer& dst = rp->field(field);
    dst.resize(size_t(rp->p->numel()));
    if (comm_.rank() == root) std::memcpy(dst.data(), full, sizeof(float) * dst.size());
    comm_.broadcast(dst.data(), sizeof(float) * dst.size(), root);
    if (field == ShardField::value) ++rp->p->version;
    return;
  }
  MXT_FAIL("FSDP: no parameter named '", name, "' (see Fsdp::params())");
}

}  // namespace mxtrain::dist
