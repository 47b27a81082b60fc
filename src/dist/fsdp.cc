// dist/fsdp.cc — FSDP setup and the weight path of dist/fsdp.h: sharding the layers' weights,
// the providers the layers call, pre-all-gather packing, non-blocking gathers with
// prefetch of the neighbouring module, rebuild into the layers' caches, and resharding.
// Gradients, optimizer views and checkpoints are in fsdp_grad.cc.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <sstream>
#include <vector>

#include "dist/fsdp_internal.h"
#include "mxtrain/common.h"
#include "mxtrain/dist/mesh.h"
#include "mxtrain/profile.h"

namespace mxtrain::dist {

const char* mxfp8_gather_name(Mxfp8Gather m) {
  return m == Mxfp8Gather::on_demand ? "on-demand" : "all";
}

Mxfp8Gather parse_mxfp8_gather(const std::string& s) {
  if (s == "on-demand") return Mxfp8Gather::on_demand;
  if (s == "all") return Mxfp8Gather::all;
  MXT_FAIL("unknown mxfp8 all-gather mode '", s, "'; valid modes: on-demand, all");
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

// ---- setup ----------------------------------------------------------------------------------

Fsdp::Fsdp(Comm& comm, FsdpOptions opt)
    : comm_(comm), coll_(comm_collectives(comm)), opt_(opt), gs_(std::make_unique<GradState>()) {
  MXT_CHECK(opt_.prefetch_depth >= 1, "FSDP: prefetch_depth must be >= 1, got ",
            opt_.prefetch_depth, " (turn prefetch off with auto_prefetch = false)");
  std::ostringstream os;
  os << "world=" << comm_.size() << " mxfp8_gather=" << mxfp8_gather_name(opt_.mxfp8_gather)
     << " bf16_reshard_after_forward=" << opt_.bf16_reshard_after_forward
     << " broadcast_initial=" << opt_.broadcast_initial
     << " progress_thread=" << opt_.progress_thread;
  comm_.check_consistent("FSDP options", os.str());
  if (opt_.progress_thread) comm_.start_progress_thread();
  else comm_.stop_progress_thread();
}

Fsdp::~Fsdp() {
  // While an exception unwinds, pending gathers are abandoned rather than waited for: the
  // other ranks may never join them (dist/comm.h, "Errors").
  const bool unwinding = std::uncaught_exceptions() > 0;
  for (auto& m : modules_) {
    for (auto& s : m->slots) {
      if (!s.pending || unwinding) continue;
      try {
        s.req.wait();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mxtrain: FSDP all-gather of '%s' failed at shutdown: %s\n",
                     m->name.c_str(), e.what());
      }
    }
    if (m->linear) m->linear->set_weight_provider(nullptr);
    if (m->grouped) m->grouped->set_weight_provider(nullptr);
  }
}

int Fsdp::num_modules() const { return int(modules_.size()); }
int Fsdp::world() const { return comm_.size(); }
int Fsdp::rank() const { return comm_.rank(); }

Fsdp::Module& Fsdp::mod(int i) {
  MXT_CHECK(i >= 0 && i < num_modules(), "FSDP module index ", i, " outside [0, ",
            num_modules(), ")");
  return *modules_[size_t(i)];
}
const Fsdp::Module& Fsdp::mod(int i) const { return const_cast<Fsdp*>(this)->mod(i); }
const ShardLayout& Fsdp::layout(int i) const { return mod(i).layout; }
const std::string& Fsdp::module_name(int i) const { return mod(i).name; }

int Fsdp::add_module(std::unique_ptr<Module> m) {
  Parameter& w = *m->weight;
  const int index = num_modules();
  std::ostringstream desc;
  desc << m->name << " " << shape_str(w.shape) << " recipe=" << m->recipe().name;
  comm_.check_consistent("FSDP module " + std::to_string(index) + " (name, shape, recipe)",
                         desc.str());
  const int64_t n = w.numel();
  MXT_CHECK(w.value.size() == size_t(n), "FSDP: layer '", m->name, "' weight ",
            shape_str(w.shape), " holds ", w.value.size(), " values, expected ", n,
            " — add each layer once, before its values are dropped");
  if (opt_.broadcast_initial && comm_.size() > 1)
    comm_.broadcast(w.value.data(), sizeof(float) * size_t(n), 0);
  m->layout = ShardLayout::make(w.shape, comm_.size(), m->recipe().role(Role::weight));
  const size_t sn = size_t(m->layout.shard_numel());
  m->value.assign(sn, 0.f);
  slice_shard(m->layout, comm_.rank(), w.value.data(), m->value.data());
  m->grad.assign(sn, 0.f);
  m->m.assign(sn, 0.f);
  m->v.assign(sn, 0.f);
  // No full-size gradient is kept: pre_backward lends one while the layer's backward runs.
  FloatBuffer().swap(w.grad);
  if (opt_.free_full_values) FloatBuffer().swap(w.value);
  for (int64_t e = 0; e < m->num_caches(); ++e) m->cache(e).clear();
  modules_.push_back(std::move(m));
  return index;
}

int Fsdp::add(Linear& layer) {
  auto m = std::make_unique<Module>();
  m->name = layer.name();
  m->linear = &layer;
  m->weight = &layer.weight;
  const int index = add_module(std::move(m));
  layer.set_weight_provider(
      [this, index](Use use, QuantizedWeight& c) { provide(index, use, 0, c); });
  if (!layer.bias.shape.empty() && layer.bias.numel() > 0) add_replicated(layer.bias);
  return index;
}

int Fsdp::add(GroupedLinear& layer) {
  auto m = std::make_unique<Module>();
  m->name = layer.name();
  m->grouped = &layer;
  m->weight = &layer.weight;
  const int index = add_module(std::move(m));
  layer.set_weight_provider([this, index](Use use, int64_t e, QuantizedWeight& c) {
    provide(index, use, e, c);
  });
  return index;
}

void Fsdp::add_replicated(Parameter& p) {
  comm_.check_consistent(
      "FSDP replicated parameter " + std::to_string(replicated_.size()) + " (name, shape)",
      p.name + " " + shape_str(p.shape));
  const size_t n = size_t(p.numel());
  MXT_CHECK(p.value.size() == n, "FSDP: parameter '", p.name, "' ", shape_str(p.shape),
            " holds ", p.value.size(), " values, expected ", n);
  if (opt_.broadcast_initial && comm_.size() > 1)
    comm_.broadcast(p.value.data(), sizeof(float) * n, 0);
  if (p.grad.size() != n) p.grad.assign(n, 0.f);
  auto r = std::make_unique<Replicated>();
  r->p = &p;
  r->m.assign(n, 0.f);
  r->v.assign(n, 0.f);
  replicated_.push_back(std::move(r));
}

// ---- gathers --------------------------------------------------------------------------------

// What the gather for `use` carries: the copies the use reads (copies_needed), and with
// fsdp.mxfp8_gather: all, forward also brings the copies dgrad reads.
int Fsdp::kind_for(int i, Use use) const {
  const Recipe& r = mod(i).recipe();
  CopySet c = copies_needed(r, Role::weight, use);
  if (use == Use::forward && opt_.mxfp8_gather == Mxfp8Gather::all)
    c |= copies_needed(r, Role::weight, Use::dgrad);
  return c.bits();
}

bool Fsdp::cache_has(int i, Use use) const {
  auto& M = const_cast<Module&>(mod(i));
  const CopySet need = copies_needed(M.recipe(), Role::weight, use);
  for (int64_t e = 0; e < M.num_caches(); ++e) {
    const QuantizedWeight& c = M.cache(e);
    if (c.version != M.weight->version || !c.has_all(need)) return false;
  }
  return true;
}

void Fsdp::start_gather(int i, int k) {
  Module& M = mod(i);
  GatherSlot& s = M.slots[size_t(k)];
  MXT_DCHECK(!s.pending);
  const CopySet copies = CopySet::from_bits(uint8_t(k));
  const uint64_t ver = M.weight->version;
  const TensorFormat& f = M.recipe().role(Role::weight);
  const size_t P = packed_bytes(M.layout, copies);
  if (s.send_version != ver || s.send.size() != P || !(s.send_format == f)) {
    s.send.resize(P);
    const float* scales =
        M.layout.tensor_scale || M.layout.second_scale ? tensor_scales(M) : nullptr;
    pack_shard(M.layout, comm_.rank(), M.value.data(), copies, f, s.send.data(), scales,
               scales ? M.group_amax.data() : nullptr);
    if (scales && M.layout.tensor_scale && f.source == ScaleSource::amax_history)
      for (int64_t g = 0; g < M.layout.groups; ++g) M.weight_history(g)->record(M.group_amax[size_t(g)]);
    s.send_version = ver;
    s.send_format = f;
    ++stats_.shard_quantizations;
  }
  s.recv.resize(P * size_t(comm_.size()));
  s.req = comm_.iallgather(s.send.data(), s.recv.data(), P);
  s.version = ver;
  s.pending = true;
  s.ready = false;
  s.rebuilt.assign(size_t(M.num_caches()), 0);
  s.rebuilt_count = 0;
  ++stats_.allgather_calls;
  stats_.allgather_bytes += s.req.bytes();
  if (comm_.size() > 1) stats_.allgather_payload_bytes += uint64_t(s.recv.size());
}

// The scale of each group of a per-tensor weight, agreed by every rank before any quantizes
// its shard: from the group's amax over all ranks (current scaling: an all-reduce, once per
// parameter version), or the layer's amax history, which every rank holds alike. A 4-bit
// weight that is a tensor- or expert-tensor-parallel slice agrees its amax over the slice's
// group too, through the layer's own agreement: the maximum over the data-parallel replicas,
// then over the slices, is the whole weight's amax, as one process has it.
const float* Fsdp::tensor_scales(Module& M) {
  const TensorFormat& f = M.recipe().role(Role::weight);
  const int64_t G = M.layout.groups;
  M.group_scales.resize(size_t(G));
  M.group_amax.resize(size_t(G));
  if (M.layout.second_scale) {  // 4-bit (NVFP4): the agreed amax, from which each rank's
                                // quantizer derives the tensor scale
    shard_group_amax(M.layout, comm_.rank(), M.value.data(), M.group_scales.data(), true);
    // NaN wins as in one process's fp4_amax (nn/parallel.h): MPI's MAX of floats would leave
    // a NaN's fate to the reduction order.
    allreduce_amax(*coll_, M.group_scales.data(), int(G));
    if (const AmaxAgree& slices = M.layer_agree()) slices(M.group_scales.data(), int(G));
  } else if (f.source == ScaleSource::amax_history) {
    for (int64_t g = 0; g < G; ++g) M.group_scales[size_t(g)] = M.weight_history(g)->scale();
  } else {
    shard_group_amax(M.layout, comm_.rank(), M.value.data(), M.group_amax.data());
    comm_.allreduce_max(M.group_amax.data(), size_t(G));
    for (int64_t g = 0; g < G; ++g)
      M.group_scales[size_t(g)] = tensor_scale(M.group_amax[size_t(g)], {f.elem, f.amax_epsilon});
  }
  return M.group_scales.data();
}

void Fsdp::wait_gather(int i, int k) {
  GatherSlot& s = mod(i).slots[size_t(k)];
  if (!s.pending) return;
  s.pending = false;
  s.req.wait();
  stats_.allgather_ms += s.req.ms();
  stats_.allgather_span_ms += s.req.span_ms();
  s.ready = true;
}

void Fsdp::poll() {
  for (auto& m : modules_)
    for (GatherSlot& s : m->slots)
      if (s.pending) s.req.test();  // completion is still taken by wait_gather
  if (gs_->rs.module >= 0) gs_->rs.req.test();
}

void Fsdp::set_input_grad_needed(int i, bool needed) { mod(i).input_grad_needed = needed; }

void Fsdp::prefetch(int i, Use use) {
  Module& M = mod(i);
  if (use == Use::dgrad && !M.input_grad_needed) return;
  if (cache_has(i, use)) return;
  const int k = kind_for(i, use);
  GatherSlot& s = M.slots[size_t(k)];
  const uint64_t ver = M.weight->version;
  if ((s.pending || s.ready) && s.version == ver) return;
  if (s.pending) wait_gather(i, k);  // a stale gather (older version): finish and discard
  start_gather(i, k);
}

void Fsdp::provide(int i, Use use, int64_t e, QuantizedWeight& cache) {
  MXT_PROFILE(communication, none);  // inside the layer's product: gathering is not the product
  Module& M = mod(i);
  const int k = kind_for(i, use);
  GatherSlot& s = M.slots[size_t(k)];
  const uint64_t ver = M.weight->version;
  if (!((s.ready || s.pending) && s.version == ver)) {
    if (s.pending) wait_gather(i, k);  // stale
    start_gather(i, k);
  }
  if (opt_.auto_prefetch)
    for (int d = 1; d <= opt_.prefetch_depth; ++d) {
      const int next = use == Use::forward ? i + d : i - d;
      if (next < 0 || next >= num_modules()) break;
      prefetch(next, use);
    }
  wait_gather(i, k);
  unpack_group(M.layout, CopySet::from_bits(uint8_t(k)), M.recipe().role(Role::weight),
               s.recv.data(), e, cache);
  if (!s.rebuilt[size_t(e)]) {
    s.rebuilt[size_t(e)] = 1;
    ++s.rebuilt_count;
  }
  if (s.rebuilt_count == M.num_caches()) {
    // Every expert has its copy: the gathered buffer is no longer needed.
    std::vector<uint8_t>().swap(s.recv);
    s.ready = false;
  }
}

void Fsdp::fetch(int i, Use use) {
  Module& M = mod(i);
  const uint64_t ver = M.weight->version;
  for (int64_t e = 0; e < M.num_caches(); ++e) {
    QuantizedWeight& c = M.cache(e);
    if (c.version != ver) c.clear();
    if (c.has_all(copies_needed(M.recipe(), Role::weight, use))) continue;
    provide(i, use, e, c);
    c.version = ver;
  }
}

void Fsdp::drop(int i, bool caches) {
  Module& M = mod(i);
  for (auto& s : M.slots) {
    if (s.pending) continue;  // a prefetch in flight stays
    std::vector<uint8_t>().swap(s.recv);
    s.ready = false;
  }
  if (caches)
    for (int64_t e = 0; e < M.num_caches(); ++e) M.cache(e).clear();
}

// The gathered weight is kept for backward when what forward gathered serves dgrad too (one
// payload: mxfp8-32x32's tiles, mxfp8 with mxfp8_gather all), except that a BF16 weight is
// resharded when fsdp's bf16_reshard_after_forward says so; otherwise it is dropped and
// gathered again for dgrad.
void Fsdp::post_forward(int i) {
  const Recipe& r = mod(i).recipe();
  const bool serves_dgrad = CopySet::from_bits(uint8_t(kind_for(i, Use::forward)))
                                .contains(copies_needed(r, Role::weight, Use::dgrad));
  const bool reshard = !r.role(Role::weight).quantized() ? opt_.bf16_reshard_after_forward
                                                          : !serves_dgrad;
  drop(i, reshard);
  Module& M = mod(i);
  M.keep_caches = !reshard;
  // The copies kept serve the backward and every later micro-batch of this version (they
  // are not dropped after backward either), so this rank's packed shard will not be
  // gathered again before the next optimizer step: it is freed rather than held through the
  // backward. A resharded weight keeps it, so its next gathers in this version (dgrad, the
  // next micro-batch's forward) do not quantize the shard again.
  if (M.keep_caches) {
    GatherSlot& s = M.slots[size_t(kind_for(i, Use::forward))];
    if (!s.pending) std::vector<uint8_t>().swap(s.send);
  }
}

void Fsdp::post_backward(int i) {
  for (int k = 0; k < kNumGatherSlots; ++k) wait_gather(i, k);
  // Copies kept from forward stay for the next micro-batch of this version (a version bump
  // invalidates them; the next fetch replaces them).
  drop(i, !mod(i).keep_caches);
  Module& M = mod(i);
  if (M.lent < 0) return;
  Parameter& w = *M.weight;
  const int k = M.lent;
  start_reduce(i, w.grad.data(), k);
  // Back to the pool (the layer holds none); free at once unless the reduce-scatter sends
  // straight from it (then finish_reduce frees it). The swap keeps the storage where it is.
  std::swap(w.grad, gs_->pool[size_t(k)]);
  if (gs_->rs.pool_index != k) gs_->pool_busy[size_t(k)] = 0;
  M.lent = -1;
}

void Fsdp::release_all() {
  for (int i = 0; i < num_modules(); ++i) {
    for (int k = 0; k < kNumGatherSlots; ++k) wait_gather(i, k);
    drop(i, true);
  }
}

}  // namespace mxtrain::dist
