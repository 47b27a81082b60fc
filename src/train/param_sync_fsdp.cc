// train/param_sync_fsdp.cc — FSDP over MPI (dist/fsdp.h) behind the trainer's ParamSync.
//
// Every Linear / GroupedLinear weight is sharded (32-row aligned) and gathered quantized per
// its recipe; embeddings, norms and the router are replicated with all-reduced gradients.
// The model reports each module's end of forward and the start and end of its backward
// through its module hook: FSDP drops gathered weights as the gather mode says, lends a
// full-size gradient buffer for the backward and reduce-scatters it right after (ZeRO-3), and
// polls the collectives in flight. Checkpoints gather whole tensors
// to rank 0 and use the one-process format; loading scatters them back (any world size).
#include <algorithm>
#include <cstring>
#include <map>

#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/dist/fsdp.h"
#include "mxtrain/profile.h"
#include "train/param_sync.h"

namespace mxtrain {
namespace {

using dist::ShardField;

class FsdpSync : public ParamSync {
 public:
  FsdpSync(GPT& model, const TrainConfig& cfg) : comm_(dist::Comm::world()) {
    comm_.check_consistent("training config", cfg.source_text);
    dist::FsdpOptions o;
    o.mxfp8_gather = dist::parse_mxfp8_gather(cfg.fsdp.mxfp8_gather);
    o.auto_prefetch = cfg.fsdp.prefetch > 0;
    o.prefetch_depth = std::max(1, cfg.fsdp.prefetch);
    o.progress_thread = cfg.fsdp.progress_thread;
    fsdp_ = std::make_unique<dist::Fsdp>(comm_, o);
    std::vector<const Parameter*> sharded;
    for (const ModuleInfo& m : model.quantizable_modules()) {
      int idx;
      if (GroupedLinear* g = model.grouped_linear(m.module)) {
        idx = fsdp_->add(*g);
        sharded.push_back(&g->weight);
      } else {
        Linear* l = model.linear(m.module);
        MXT_CHECK(l, "FSDP: module `", m.module, "` not found in the model");
        idx = fsdp_->add(*l);
        sharded.push_back(&l->weight);
        if (!l->bias.shape.empty()) sharded.push_back(&l->bias);
      }
      index_[m.module] = idx;
    }
    for (Parameter* p : model.parameters()) {
      params_.push_back({p->name, p->shape});
      if (std::find(sharded.begin(), sharded.end(), p) == sharded.end()) fsdp_->add_replicated(*p);
    }
    // At every module boundary: drop or lend/reduce as the event says, then drive the
    // collectives in flight (prefetched gathers, gradient reduce-scatters).
    model.set_module_hook([this](const std::string& module, ModuleEvent e) {
      MXT_PROFILE(communication, none);
      const int i = index_.at(module);
      switch (e) {
        case ModuleEvent::forward_done: fsdp_->post_forward(i); break;
        case ModuleEvent::backward_start: fsdp_->pre_backward(i); break;
        case ModuleEvent::backward_done: fsdp_->post_backward(i); break;
      }
      fsdp_->poll();
    });
  }

  int rank() const override { return comm_.rank(); }
  int world() const override { return comm_.size(); }
  void begin_step() override { fsdp_->reset_stats(); }
  void reduce_gradients() override { fsdp_->reduce_gradients(); }
  bool grads_finite() override { return fsdp_->grads_finite(); }
  double grad_sum_squares() override { return fsdp_->grad_sum_squares(); }
  void check_same(const std::string& what, const std::string& value) override {
    comm_.check_consistent(what, value);
  }
  double sum_over_ranks(double x) override {
    comm_.allreduce_sum(&x, 1);
    return x;
  }
  int64_t max_over_ranks(int64_t x) override {
    comm_.allreduce_max(&x, 1);
    return x;
  }
  void max_over_ranks(float* x, size_t n) override { comm_.allreduce_max(x, n); }
  std::vector<OptimView> views() override {
    std::vector<OptimView> out;
    for (dist::ShardView& s : fsdp_->shards())
      out.push_back({s.value.data(), s.grad.data(), s.m.data(), s.v.data(),
                     int64_t(s.value.size()), s.decay, s.version});
    return out;
  }
  CommCounters counters() const override {
    const dist::FsdpStats& s = fsdp_->stats();
    return {s.allgather_bytes,   s.reduce_scatter_bytes,   s.allreduce_bytes,
            s.allgather_ms,      s.reduce_scatter_ms,      s.allreduce_ms,
            s.allgather_span_ms, s.reduce_scatter_span_ms};
  }

  std::string save(const std::string& dir, const TrainConfig& cfg, const TrainerState& st,
                   const std::vector<io::NamedTensor>& extra) override {
    // Whole tensors on rank 0, in the model's parameter order.
    std::vector<Parameter> full(params_.size());
    std::vector<FloatBuffer> m(params_.size()), v(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      full[i].name = params_[i].first;
      full[i].shape = params_[i].second;
      full[i].value = fsdp_->gather_full(full[i].name, ShardField::value);
      m[i] = fsdp_->gather_full(full[i].name, ShardField::m);
      v[i] = fsdp_->gather_full(full[i].name, ShardField::v);
    }
    std::string written;
    if (rank() == 0) {
      std::vector<Parameter*> ptrs;
      for (Parameter& p : full) ptrs.push_back(&p);
      written = save_training_checkpoint(dir, cfg, ptrs, m, v, st, extra);
    }
    comm_.barrier();
    return written;
  }

  TrainerState load(const std::string& dir, const TrainConfig& cfg,
                    std::vector<io::NamedTensor>& extra) override {
    std::vector<Parameter> full(params_.size());
    std::vector<FloatBuffer> m(params_.size()), v(params_.size());
    TrainerState st;
    std::string error;
    if (rank() == 0) {
      std::vector<Parameter*> ptrs;
      for (size_t i = 0; i < params_.size(); ++i) {
        full[i].init(params_[i].first, params_[i].second);
        ptrs.push_back(&full[i]);
      }
      try {
        st = load_training_checkpoint(dir, cfg, ptrs, m, v, &extra);
      } catch (const Error& e) {
        error = e.what();
      }
    }
    // Rank 0's outcome reaches every rank before any rank waits on tensor data.
    int64_t hdr[6] = {int64_t(error.size()), st.step,       st.opt_steps,
                      st.skipped,          st.world_size, st.global_batch};
    comm_.broadcast(hdr, sizeof hdr, 0);
    if (hdr[0] > 0) {
      error.resize(size_t(hdr[0]));
      comm_.broadcast(error.data(), error.size(), 0);
      MXT_FAIL(error);
    }
    st = {hdr[1], hdr[2], hdr[3], hdr[4], hdr[5]};
    const bool root = rank() == 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const std::string& name = params_[i].first;
      fsdp_->scatter_full(name, ShardField::value, root ? full[i].value.data() : nullptr);
      fsdp_->scatter_full(name, ShardField::m, root ? m[i].data() : nullptr);
      fsdp_->scatter_full(name, ShardField::v, root ? v[i].data() : nullptr);
    }
    broadcast_tensors(extra);
    return st;
  }

 private:
  // Rank 0's tensors on every rank: count, then per tensor its name, shape and data.
  void broadcast_tensors(std::vector<io::NamedTensor>& ts) {
    int64_t n = int64_t(ts.size());
    comm_.broadcast(&n, sizeof n, 0);
    ts.resize(size_t(n));
    for (io::NamedTensor& t : ts) {
      int64_t hdr[2] = {int64_t(t.name.size()), int64_t(t.shape.size())};
      comm_.broadcast(hdr, sizeof hdr, 0);
      t.name.resize(size_t(hdr[0]));
      t.shape.resize(size_t(hdr[1]));
      comm_.broadcast(t.name.data(), t.name.size(), 0);
      comm_.broadcast(t.shape.data(), sizeof(int64_t) * t.shape.size(), 0);
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;
      t.data.resize(size_t(numel));
      comm_.broadcast(t.data.data(), sizeof(float) * t.data.size(), 0);
    }
  }

  dist::Comm& comm_;
  std::unique_ptr<dist::Fsdp> fsdp_;
  std::map<std::string, int> index_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> params_;
};

}  // namespace

std::unique_ptr<ParamSync> make_fsdp_sync(GPT& model, const TrainConfig& cfg) {
  return std::make_unique<FsdpSync>(model, cfg);
}

}  // namespace mxtrain
