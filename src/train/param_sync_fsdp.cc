// train/param_sync_fsdp.cc — FSDP over MPI (dist/fsdp.h) behind the trainer's ParamSync.
//
// Every Linear / GroupedLinear weight is sharded (32-row aligned) and gathered quantized per
// its recipe; embeddings, norms and the router are replicated with all-reduced gradients.
// With a parallel layout (dist/mesh.h) the layers hold their tensor- or expert-parallel slices
// and FSDP shards those: dense slices and the replicated parameters over the data-parallel
// ranks that hold the same slice (mesh.dp()), expert slices over the expert-data-parallel
// ranks (mesh.edp(), their mean still over dp); under sequence parallelism the replicated
// parameters' partial gradients are first summed over the tensor-parallel group.
// Each sharded layer reports the end of its forward and the start and end of its backward to
// the hook FSDP gives it (nn/linear.h, LayerHook): FSDP drops gathered weights as the gather
// mode says, lends a full-size gradient buffer for the backward and reduce-scatters it right
// after (ZeRO-3), and polls the collectives in flight. Checkpoints gather whole tensors
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
  FsdpSync(GPT& model, const TrainConfig& cfg, dist::Mesh* mesh)
      : comm_(dist::Comm::world()), mesh_(mesh) {
    comm_.check_consistent("training config", cfg.source_text);
    dist::FsdpOptions o;
    o.mxfp8_gather = dist::parse_mxfp8_gather(cfg.fsdp.mxfp8_gather);
    o.auto_prefetch = cfg.fsdp.prefetch > 0;
    o.prefetch_depth = std::max(1, cfg.fsdp.prefetch);
    o.progress_thread = cfg.fsdp.progress_thread;
    fsdp_ = std::make_unique<dist::Fsdp>(mesh ? mesh->dp() : comm_, o);
    if (mesh && cfg.model.moe_num_experts > 0) {  // experts over their own replicas
      dist::FsdpOptions oe = o;
      oe.grad_divisor = mesh->dp_size();  // the mean over the global batch
      experts_ = std::make_unique<dist::Fsdp>(mesh->edp(), oe);
    }
    std::vector<const Parameter*> sharded;
    for (const ModuleInfo& m : model.quantizable_modules()) {
      if (GroupedLinear* g = model.grouped_linear(m.module)) {
        dist::Fsdp& f = experts_ ? *experts_ : *fsdp_;
        g->set_hook(hook(f, f.add(*g)));
        module_weights_[&f].push_back(&g->weight);
        sharded.push_back(&g->weight);
      } else {
        Linear* l = model.linear(m.module);
        MXT_CHECK(l, "FSDP: module `", m.module, "` not found in the model");
        l->set_hook(hook(*fsdp_, fsdp_->add(*l)));
        module_weights_[fsdp_.get()].push_back(&l->weight);
        sharded.push_back(&l->weight);
        if (!l->bias.shape.empty()) sharded.push_back(&l->bias);
      }
    }
    for (Parameter* p : model.parameters()) {
      params_.push_back(p);
      if (std::find(sharded.begin(), sharded.end(), p) == sharded.end()) fsdp_->add_replicated(*p);
    }
  }

  // Module i of f's hook: at every boundary of the module's passes, drop or lend/reduce as the
  // event says, then drive the collectives in flight (prefetched gathers, gradient
  // reduce-scatters).
  LayerHook hook(dist::Fsdp& f, int i) {
    return [this, &f, i](ModuleEvent e) {
      MXT_PROFILE(communication, none);
      switch (e) {
        case ModuleEvent::forward_done: f.post_forward(i); break;
        case ModuleEvent::backward_start: f.pre_backward(i); break;
        case ModuleEvent::backward_done: f.post_backward(i); break;
      }
      for (dist::Fsdp* g : fsdps()) g->poll();
    };
  }

  // The data-parallel rank and size (the ranks of a tensor-parallel group share micro-batches).
  int rank() const override { return mesh_ ? mesh_->dp_rank() : comm_.rank(); }
  int world() const override { return mesh_ ? mesh_->dp_size() : comm_.size(); }
  void begin_step() override {
    for (dist::Fsdp* f : fsdps()) f->reset_stats();
  }
  void reduce_gradients() override {
    // Sequence parallelism: a replicated parameter's gradient is this rank's part of the
    // tensor-parallel group's sum — summed before FSDP's data-parallel mean for the replicated
    // parameters, after it (on the shards, alike on every tp rank) for a sharded one (the LM
    // head), whose gradient FSDP has already reduce-scattered.
    const bool sp = mesh_ && mesh_->tp().size() > 1;
    if (sp)
      for (Parameter* p : params_)
        if (p->split.partial_grad && !is_module_weight(*p))
          mesh_->tp().allreduce_sum(p->grad.data(), p->grad.size());
    for (dist::Fsdp* f : fsdps()) f->reduce_gradients();
    if (sp)
      for (dist::ShardView& v : fsdp_->shards())
        if (!v.replicated && partial(v.name)) mesh_->tp().allreduce_sum(v.grad.data(), v.grad.size());
  }
  bool grads_finite() override {
    bool ok = true;
    for (dist::Fsdp* f : fsdps()) ok &= f->grads_finite();
    int64_t bad = ok ? 0 : 1;
    if (mesh_) comm_.allreduce_max(&bad, 1);
    return bad == 0;
  }
  // Σ grad² over the whole model, each element once: a sharded sum counts on the ranks of
  // data-parallel (expert-data-parallel) rank 0 — once per tensor- (expert-) parallel slice —
  // the replicated parameters on world rank 0.
  double grad_sum_squares() override {
    if (!mesh_) return fsdp_->grad_sum_squares();
    double s = comm_.rank() == 0 ? fsdp_->replicated_grad_sum_squares() : 0.0;
    for (dist::Fsdp* f : fsdps()) {
      const std::vector<double> per = f->module_grad_sum_squares();
      const std::vector<Parameter*>& w = module_weights_[f];
      for (size_t i = 0; i < per.size(); ++i)
        if (counted(w[i]->split)) s += per[i];
    }
    comm_.allreduce_sum(&s, 1);
    return s;
  }
  // One read of every gradient (grad_sum_squares() with the finite check; param_sync.h):
  // what grad_sum_squares() does not count is summed in s[1], read only for its finiteness,
  // which 0 · s[1] carries into the result (NaN when not finite, exactly +0 otherwise).
  double grad_sum_squares_checked() override {
    if (!mesh_) return fsdp_->grad_sum_squares_checked();
    double s[2] = {0, 0};
    for (dist::Fsdp* f : fsdps()) {
      s[f == fsdp_.get() && comm_.rank() == 0 ? 0 : 1] += f->replicated_grad_sum_squares();
      const std::vector<double> per = f->module_grad_sum_squares();
      const std::vector<Parameter*>& w = module_weights_[f];
      for (size_t i = 0; i < per.size(); ++i) s[counted(w[i]->split) ? 0 : 1] += per[i];
    }
    comm_.allreduce_sum(s, 2);
    return s[0] + 0.0 * s[1];
  }
  void check_same(const std::string& what, const std::string& value) override {
    comm_.check_consistent(what, value);
  }
  double sum_over_ranks(double x) override {
    (mesh_ ? mesh_->dp() : comm_).allreduce_sum(&x, 1);
    return x;
  }
  double sum_over_processes(double x) override {
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
    for (dist::Fsdp* f : fsdps())
      for (dist::ShardView& s : f->shards())
        out.push_back({s.value.data(), s.grad.data(), s.m.data(), s.v.data(),
                       int64_t(s.value.size()), s.decay, s.version});
    return out;
  }
  CommCounters counters() const override {
    CommCounters c;
    for (const dist::Fsdp* f : {fsdp_.get(), experts_.get()}) {
      if (!f) continue;
      const dist::FsdpStats& s = f->stats();
      c.allgather_bytes += s.allgather_bytes;
      c.reduce_scatter_bytes += s.reduce_scatter_bytes;
      c.allreduce_bytes += s.allreduce_bytes;
      c.allgather_ms += s.allgather_ms;
      c.reduce_scatter_ms += s.reduce_scatter_ms;
      c.allreduce_ms += s.allreduce_ms;
      c.allgather_span_ms += s.allgather_span_ms;
      c.reduce_scatter_span_ms += s.reduce_scatter_span_ms;
    }
    return c;
  }

  std::string save(const std::string& dir, const TrainConfig& cfg, const TrainerState& st,
                   const std::vector<io::NamedTensor>& extra) override {
    // Whole tensors on world rank 0, in the model's parameter order.
    std::vector<Parameter> full(params_.size());
    std::vector<FloatBuffer> m(params_.size()), v(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const Parameter& p = *params_[i];
      full[i].name = p.name;
      full[i].shape = p.full_shape();
      full[i].value = whole(p, ShardField::value);
      m[i] = whole(p, ShardField::m);
      v[i] = whole(p, ShardField::v);
    }
    std::string written;
    if (comm_.rank() == 0) {
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
    if (comm_.rank() == 0) {
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
    comm_.broadcast(hdr, sizeof hdr, 0);
    if (hdr[0] > 0) {
      error.resize(size_t(hdr[0]));
      comm_.broadcast(error.data(), error.size(), 0);
      MXT_FAIL(error);
    }
    st = {hdr[1], hdr[2], hdr[3], hdr[4], hdr[5], hdr[6] != 0};
    for (size_t i = 0; i < params_.size(); ++i) {
      const Parameter& p = *params_[i];
      keep(p, ShardField::value, full[i].value);
      keep(p, ShardField::m, m[i]);
      keep(p, ShardField::v, v[i]);
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

  bool is_module_weight(const Parameter& p) const {
    for (const auto& [f, ws] : module_weights_)
      if (std::find(ws.begin(), ws.end(), &p) != ws.end()) return true;
    return false;
  }
  bool partial(const std::string& name) const {
    for (const Parameter* p : params_)
      if (p->name == name) return p->split.partial_grad;
    return false;
  }

  // Under a mesh, whether this rank's sum of a sharded module counts in the norm: a slice on
  // the root of its FSDP replicas, a module whole on every tp rank (the LM head) on world rank
  // 0 alone.
  bool counted(const ParamSplit& sp) const {
    return sp.expert()                   ? mesh_->edp_rank() == 0
           : sp.over(ParamSplit::Over::tp) ? mesh_->dp_rank() == 0
                                           : comm_.rank() == 0;
  }
  std::vector<dist::Fsdp*> fsdps() {
    std::vector<dist::Fsdp*> v{fsdp_.get()};
    if (experts_) v.push_back(experts_.get());
    return v;
  }
  dist::Fsdp& owner(const Parameter& p) {
    return experts_ && p.split.expert() ? *experts_ : *fsdp_;
  }
  // The group a parameter's layout slices are spread over, and whether this rank takes part
  // in assembling the whole tensor (the FSDP root of its slice: data-parallel rank 0 for a
  // tensor-parallel slice, expert-data-parallel rank 0 for an expert slice).
  dist::Comm* slice_group(const Parameter& p, bool* assembles) {
    *assembles = false;
    if (!mesh_ || !p.split.sliced()) return nullptr;
    if (!p.split.expert()) {
      *assembles = mesh_->dp_rank() == 0;
      return &mesh_->tp();
    }
    *assembles = mesh_->edp_rank() == 0;
    return &mesh_->emp();
  }

  // Collective: the whole tensor (value or moment) on world rank 0 (empty elsewhere): FSDP
  // gathers this rank's slice to its root, and the roots of the slices put them together.
  FloatBuffer whole(const Parameter& p, ShardField field) {
    FloatBuffer local = owner(p).gather_full(p.name, field);
    bool assembles = false;
    dist::Comm* g = slice_group(p, &assembles);
    if (!g || !assembles) return comm_.rank() == 0 ? local : FloatBuffer{};
    const size_t n = local.size();
    FloatBuffer all(n * size_t(g->size()));
    g->gather(local.data(), all.data(), n * sizeof(float), 0);
    if (comm_.rank() != 0) return {};
    FloatBuffer out(size_t(numel(p.full_shape())));
    const int etp = mesh_->shape().etp;  // emp members: ep rank r / etp, etp rank r % etp
    for (int r = 0; r < g->size(); ++r)
      place_slice(p.split.expert() ? p.split.at(0, r / etp, r % etp) : p.split.at(r, 0, 0),
                  all.data() + n * size_t(r), out.data());
    return out;
  }

  // Collective: world rank 0's whole tensor reaches every rank, which hands its slice to FSDP.
  void keep(const Parameter& p, ShardField field, FloatBuffer& whole_on_root) {
    if (!mesh_) {
      owner(p).scatter_full(p.name, field, comm_.rank() == 0 ? whole_on_root.data() : nullptr);
      return;
    }
    const size_t n = size_t(numel(p.full_shape()));
    whole_on_root.resize(n);
    comm_.broadcast(whole_on_root.data(), n * sizeof(float), 0);
    FloatBuffer slice(size_t(p.numel()));
    if (p.split.sliced())
      slice_of(p.split, whole_on_root.data(), slice.data());
    else
      slice = whole_on_root;
    owner(p).scatter_full(p.name, field, slice.data());
  }

  static int64_t numel(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }

  dist::Comm& comm_;
  dist::Mesh* mesh_ = nullptr;
  std::unique_ptr<dist::Fsdp> fsdp_, experts_;
  std::map<dist::Fsdp*, std::vector<Parameter*>> module_weights_;  // in add() order
  std::vector<Parameter*> params_;
};

}  // namespace

std::unique_ptr<ParamSync> make_fsdp_sync(GPT& model, const TrainConfig& cfg, dist::Mesh* mesh) {
  return std::make_unique<FsdpSync>(model, cfg, mesh);
}

}  // namespace mxtrain
