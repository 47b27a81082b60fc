// train/param_sync_mesh.cc — the trainer's ParamSync for a tensor- and expert-parallel mesh
// (dist/mesh.h; docs/distributed.md, "Parallel layouts").
//
// Every rank holds its slices whole (Parameter::split): tensor-parallel weights a slice per
// tp rank, expert weights E/ep experts per ep rank, the rest replicated. After the
// micro-batches each gradient is summed over the ranks that hold the same slice and computed
// different data, then divided by the data-parallel size dp (the loss is the mean over the
// global batch of micro_batch_size x dp x grad_accum sequences), in place, parameter by
// parameter:
//   replicated, and tensor-parallel slices     sum over dp()
//   replicated with a partial gradient (the    sum over every rank: the tp group's parts,
//   norms, embedding and head under sequence   then the dp replicas
//   parallelism)
//   expert slices                              sum over edp(): an expert's gradient already
//                                              holds every ep rank's tokens (the dispatch
//                                              brought them), the edp replicas saw other data
// AdamW then runs on every rank's own slices, identically on the replicas. Checkpoints hold whole tensors: rank 0 gathers each
// slice set and writes the one-process format; loading broadcasts whole tensors and every rank
// keeps its slice — so a checkpoint resumes at any layout, or in one process.
#include <cstring>

#include "mxtrain/common.h"
#include "mxtrain/profile.h"
#include "mxtrain/train/optim.h"
#include "train/param_sync.h"

namespace mxtrain {
namespace {

using dist::Coll;
using dist::Comm;

// What a gradient is summed over (see above).
enum class Reduce : uint8_t { dp, world, edp };

Reduce reduction(const Parameter& p) {
  if (p.split.expert()) return Reduce::edp;
  if (p.split.partial_grad) return Reduce::world;
  return Reduce::dp;
}

class MeshSync : public ParamSync {
 public:
  MeshSync(GPT& model, dist::Mesh& mesh) : mesh_(mesh), params_(model.parameters()) {
    for (Parameter* p : params_) {
      m_.emplace_back(p->numel(), 0.f);
      v_.emplace_back(p->numel(), 0.f);
    }
  }

  int rank() const override { return mesh_.dp_rank(); }
  int world() const override { return mesh_.dp_size(); }
  void begin_step() override { counters_ = {}; }

  void reduce_gradients() override {
    const uint64_t before = reduce_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    for (Reduce r : {Reduce::dp, Reduce::world, Reduce::edp}) reduce_group(r);
    const float inv = 1.f / float(mesh_.dp_size());
    if (mesh_.dp_size() > 1)
      for (Parameter* p : params_) {
        float* g = p->grad.data();
        const int64_t n = p->numel();
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) g[i] *= inv;
      }
    counters_.allreduce_bytes += reduce_bytes() - before;
    counters_.allreduce_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  bool grads_finite() override {
    int64_t bad = 0;
    for (Parameter* p : params_)
      if (!all_finite(p->grad.data(), p->numel())) bad = 1;
    mesh_.world().allreduce_max(&bad, 1);
    return bad == 0;
  }

  // Σ grad² over the whole model, each element once: a slice counts on the one rank of its
  // replicas that has data-parallel (or expert-data-parallel) rank 0, a replicated tensor on
  // world rank 0 alone.
  double grad_sum_squares() override {
    double s = 0;
    for (Parameter* p : params_)
      if (counted(*p)) s += sum_squares(p->grad.data(), p->numel());
    mesh_.world().allreduce_sum(&s, 1);
    return s;
  }
  // One read of every gradient and one all-reduce: s[0] sums the counted gradients (the
  // norm), s[1] the replicas counted elsewhere, read only for their finiteness. Both sums are
  // of squares, so over the ranks each is non-finite exactly when one of its gradients is
  // anywhere, and 0 · s[1] turns a non-finite s[1] into NaN while adding exactly +0 otherwise:
  // the same value as grad_sum_squares() when every rank's gradients are finite.
  double grad_sum_squares_checked() override {
    double s[2] = {0, 0};
    for (Parameter* p : params_) s[counted(*p) ? 0 : 1] += sum_squares(p->grad.data(), p->numel());
    mesh_.world().allreduce_sum(s, 2);
    return s[0] + 0.0 * s[1];
  }

  std::vector<OptimView> views() override {
    std::vector<OptimView> out;
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = *params_[i];
      out.push_back({p.value.data(), p.grad.data(), m_[i].data(), v_[i].data(), p.numel(),
                     p.full_shape().size() >= 2, &p.version});
    }
    return out;
  }

  double sum_over_ranks(double x) override {
    mesh_.dp().allreduce_sum(&x, 1);
    return x;
  }
  double sum_over_processes(double x) override {
    mesh_.world().allreduce_sum(&x, 1);
    return x;
  }
  int64_t max_over_ranks(int64_t x) override {
    mesh_.world().allreduce_max(&x, 1);
    return x;
  }
  void max_over_ranks(float* x, size_t n) override { mesh_.world().allreduce_max(x, n); }
  void check_same(const std::string& what, const std::string& value) override {
    mesh_.world().check_consistent(what, value);
  }
  CommCounters counters() const override { return counters_; }

  std::string save(const std::string& dir, const TrainConfig& cfg, const TrainerState& st,
                   const std::vector<io::NamedTensor>& extra) override {
    const bool root = mesh_.rank() == 0;
    std::vector<Parameter> full(params_.size());
    std::vector<FloatBuffer> m(params_.size()), v(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const Parameter& p = *params_[i];
      full[i].name = p.name;
      full[i].shape = p.full_shape();
      full[i].value = whole(p, p.value);
      m[i] = whole(p, m_[i]);
      v[i] = whole(p, v_[i]);
    }
    std::string written;
    if (root) {
      std::vector<Parameter*> ptrs;
      for (Parameter& p : full) ptrs.push_back(&p);
      written = save_training_checkpoint(dir, cfg, ptrs, m, v, st, extra);
    }
    mesh_.world().barrier();
    return written;
  }

  TrainerState load(const std::string& dir, const TrainConfig& cfg,
                    std::vector<io::NamedTensor>& extra) override {
    Comm& world = mesh_.world();
    const bool root = world.rank() == 0;
    std::vector<Parameter> full(params_.size());
    std::vector<FloatBuffer> m(params_.size()), v(params_.size());
    TrainerState st;
    std::string error;
    if (root) {
      std::vector<Parameter*> ptrs;
      for (size_t i = 0; i < params_.size(); ++i) {
        full[i].init(params_[i]->name, params_[i]->full_shape());
        ptrs.push_back(&full[i]);
      }
      try {
        st = load_training_checkpoint(dir, cfg, ptrs, m, v, &extra);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    // Rank 0's outcome reaches every rank before any rank waits on tensor data.
    int64_t hdr[7] = {int64_t(error.size()), st.step,         st.opt_steps,
                      st.skipped,          st.world_size,   st.global_batch,
                      int64_t(st.validation_due)};
    world.broadcast(hdr, sizeof hdr, 0);
    if (hdr[0] > 0) {
      error.resize(size_t(hdr[0]));
      world.broadcast(error.data(), error.size(), 0);
      MXT_FAIL(error);
    }
    st = {hdr[1], hdr[2], hdr[3], hdr[4], hdr[5], hdr[6] != 0};
    FloatBuffer buf;
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = *params_[i];
      keep_slice(p, root ? full[i].value : buf, p.value);
      keep_slice(p, root ? m[i] : buf, m_[i]);
      keep_slice(p, root ? v[i] : buf, v_[i]);
      ++p.version;  // quantized copies of the old value are stale
    }
    int64_t n = int64_t(extra.size());
    world.broadcast(&n, sizeof n, 0);
    if (n > 0)
      MXT_FAIL("checkpoint ", dir, " holds training state this layout does not restore (",
               n, " tensor(s), e.g. delayed-scaling histories); resume it in one process or "
               "with --fsdp");
    return st;
  }

 private:
  // Whether this rank's copy of p counts in the norm (grad_sum_squares()).
  bool counted(const Parameter& p) const {
    return p.split.expert()                   ? mesh_.edp_rank() == 0
           : p.split.over(ParamSplit::Over::tp) ? mesh_.dp_rank() == 0
                                                : mesh_.rank() == 0;
  }
  uint64_t reduce_bytes() const {
    return mesh_.dp().stats()[Coll::allreduce].bytes +
           mesh_.world().stats()[Coll::allreduce].bytes +
           mesh_.edp().stats()[Coll::allreduce].bytes;
  }

  // The gradients of one reduction group, each all-reduced in place (no packed copy: the
  // memory a rank holds stays that of its own slices).
  void reduce_group(Reduce r) {
    Comm& c = r == Reduce::dp ? mesh_.dp() : r == Reduce::world ? mesh_.world() : mesh_.edp();
    if (c.size() == 1) return;
    for (Parameter* p : params_)
      if (reduction(*p) == r) c.allreduce_sum(p->grad.data(), p->grad.size());
  }

  // Collective over the slice's group: the whole tensor from every rank's slice (`local` is
  // this rank's: the value or a moment), on every rank of the group.
  FloatBuffer whole(const Parameter& p, const FloatBuffer& local) {
    if (!p.split.sliced()) return local;
    Comm& c = p.split.expert() ? mesh_.emp() : mesh_.tp();
    const size_t n = local.size();
    FloatBuffer all(n * size_t(c.size())), out(size_t(numel(p.full_shape())));
    c.allgather(local.data(), all.data(), n * sizeof(float));
    for (int r = 0; r < c.size(); ++r)
      place_slice(member_split(p.split, r), all.data() + n * size_t(r), out.data());
    return out;
  }

  // The split of member r of the slice's group (tp: its tp rank; emp: etp rank r % etp, ep
  // rank r / etp, dist/mesh.h).
  ParamSplit member_split(const ParamSplit& s, int r) const {
    const int etp = mesh_.shape().etp;
    return s.expert() ? s.at(0, r / etp, r % etp) : s.at(r, 0, 0);
  }

  // Collective over the world: rank 0's whole tensor `full` reaches every rank, which keeps
  // its slice in `dst` (whole when not sliced).
  void keep_slice(const Parameter& p, FloatBuffer& full, FloatBuffer& dst) {
    const size_t n = size_t(numel(p.full_shape()));
    if (full.size() != n) full.resize(n);
    mesh_.world().broadcast(full.data(), n * sizeof(float), 0);
    if (p.split.sliced())
      slice_of(p.split, full.data(), dst.data());
    else
      std::memcpy(dst.data(), full.data(), n * sizeof(float));
  }

  static int64_t numel(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }

  dist::Mesh& mesh_;
  std::vector<Parameter*> params_;
  std::vector<FloatBuffer> m_, v_;
  CommCounters counters_;
};

}  // namespace

std::unique_ptr<ParamSync> make_mesh_sync(GPT& model, dist::Mesh& mesh) {
  return std::make_unique<MeshSync>(model, mesh);
}

}  // namespace mxtrain
