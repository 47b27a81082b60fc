// nn/transformer.cc — the GPT model (nn/transformer.h): deterministic initialisation, the
// FP32 reference path, and the forward/backward pass of one micro-batch. Config checks and the
// module description are in transformer_config.cc.
//
// The pass reads top to bottom like llm.c's: every activation the backward needs lives in a
// per-layer buffer that is reused across micro-batches (grown when B·T grows, never shrunk);
// the backward walks the layers in reverse with one set of shared scratch gradients.
//
// What is saved between forward and backward (docs/design.md, "Saved for backward"): the
// inputs of the Linears (ln1, ln2, h, lnf) are needed only by those Linears' wgrad — no
// elementwise backward reads them — so when a Linear keeps its own copy (bf16: BF16;
// mxfp8 with defer_backward_quant off: FP8 colwise) the FP32 input is written into one shared
// scratch buffer and overwritten by the next one. Only a Linear with defer on (which keeps a
// reference and quantizes at backward), the FP32 reference path, and an MoE block (its router
// backward reads its input) get a per-layer FP32 input. The attention output atty is always
// per layer: attention's backward reads it (with the row log-sum-exp lse) besides proj's
// wgrad. SwiGLU's input (fc1's output) is per layer in FP32, or per layer in FP8 only
// (set_swiglu_input: fp8, or follow_fc1 where fc1 quantizes its input; nn/fp8_activation.h),
// its FP32 form living in the backward's dfc1_ scratch between fc1 and SwiGLU. GEMMs go
// through Linear/GroupedLinear in the precision the resolver chose; attention multiplies BF16
// operands (FP32 in the reference mode); everything else is FP32 (nn/ops.h, nn/moe.h).
#include "mxtrain/nn/transformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "mxtrain/common.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {

// ---- initialisation -------------------------------------------------------------------------

namespace {

// splitmix64's output function of a state.
uint64_t splitmix_out(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // splitmix64's increment

// N(0, std^2) values from a stream keyed by (seed, parameter name): independent of creation
// order and thread count, identical on every rank. Element pair (2q, 2q+1) is one Box-Muller
// draw from the stream's calls 2q and 2q+1 (splitmix64: call c reads state s0 + (c+1)·gamma),
// so any range of the tensor can be made on its own: out [n] = elements [begin, begin + n).
void normal_values(const std::string& name, float std, uint64_t seed, int64_t begin, int64_t n,
                   float* out) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the name
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  const uint64_t s0 = seed ^ (h * kGamma);
  const int64_t end = begin + n;
  for (int64_t q = begin / 2; 2 * q < end; ++q) {  // the pairs the range touches
    const uint64_t c = uint64_t(2 * q);
    const double u1 = (double(splitmix_out(s0 + (c + 1) * kGamma) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = double(splitmix_out(s0 + (c + 2) * kGamma) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
    if (2 * q >= begin) out[2 * q - begin] = float(std * r * std::cos(a));
    if (2 * q + 1 >= begin && 2 * q + 1 < end) out[2 * q + 1 - begin] = float(std * r * std::sin(a));
  }
}

void init_normal(Parameter& p, float std, uint64_t seed) {
  normal_values(p.name, std, seed, 0, int64_t(p.value.size()), p.value.data());
}

// A slice of a whole tensor initialised like init_normal: each of its contiguous runs is made
// from the whole tensor's stream at its offset (nothing of the whole tensor is materialised).
void init_normal_slice(Parameter& p, const ParamSplit& split, float std, uint64_t seed) {
  if (!split.sliced()) {
    init_normal(p, std, seed);
    return;
  }
  for (const SliceRun& r : slice_runs(split))
    normal_values(p.name, std, seed, r.whole, r.length, p.value.data() + r.local);
  p.split = split;
}

// The split of a tensor-parallel weight: `dim` of its whole shape, in `parts` blocks.
ParamSplit tp_split(const ModelParallel& par, std::vector<int64_t> full_shape, int dim,
                    int parts) {
  ParamSplit s;
  if (par.tp_size() == 1) return s;
  s.cuts.push_back({ParamSplit::Over::tp, dim, parts, par.tp_size(), par.tp_rank()});
  s.full_shape = std::move(full_shape);
  return s;
}

// The split of an expert weight [E, out, in]: E / ep experts, and under expert-tensor
// parallelism the etp slice of its hidden dimension `dim` (in `parts` blocks: fc1's gate and
// up).
ParamSplit expert_split(const ModelParallel& par, std::vector<int64_t> full_shape, int dim,
                        int parts) {
  ParamSplit s;
  if (par.ep_size() > 1)
    s.cuts.push_back({ParamSplit::Over::ep, 0, 1, par.ep_size(), par.ep_rank()});
  if (par.etp_size() > 1)
    s.cuts.push_back({ParamSplit::Over::etp, dim, parts, par.etp_size(), par.etp_rank()});
  if (s.sliced()) s.full_shape = std::move(full_shape);
  return s;
}

void init_ones(Parameter& p, std::string name, int64_t n) {
  p.init(std::move(name), {n});
  std::fill(p.value.begin(), p.value.end(), 1.f);
}

// Full-size gradient, by shape.
void ensure_grad(Parameter& p) {
  if (p.grad.size() != size_t(p.numel())) p.grad.assign(size_t(p.numel()), 0.f);
}

// A Linear's forward: through its recipe, or (fp32 reference) y = x · W^T in FP32.
void linear_forward(bool ref, Linear& l, const float* x, int64_t N, float* y, LinearSaved& s) {
  if (!ref) {
    l.forward(x, N, y, s);
    return;
  }
  const int64_t in = l.in_features(), out = l.out_features();
  MXT_CHECK(int64_t(l.weight.value.size()) == out * in, "'", l.name(),
            "': the FP32 reference needs the full weight in weight.value");
  s = LinearSaved{};
  gemm_f32(false, true, N, out, in, x, in, l.weight.value.data(), in, y, out, false);
}

// Its backward: dx written, dW accumulated (written after clear_grad()). x is the forward's
// input, still alive.
void linear_backward(bool ref, Linear& l, LinearSaved& s, const float* x, int64_t N,
                     const float* dy, float* dx) {
  if (!ref) {
    l.backward(s, dy, dx);
    return;
  }
  const int64_t in = l.in_features(), out = l.out_features();
  ensure_grad(l.weight);
  gemm_f32(false, false, N, in, out, dy, out, l.weight.value.data(), in, dx, in, false);
  gemm_f32(true, false, out, in, N, dy, out, x, in, l.weight.grad.data(), in,
           l.weight.take_grad_accumulate());
}

}  // namespace

// What a layer's attention block keeps for backward: the RMSNorm output (when qkv keeps no
// copy of its own), rstd, the qkv projection (unrotated: attention rotates q and k as it
// reads them), the attention output and row log-sum-exp, and the two Linears' saved copies.
struct GPT::AttnActs {
  FloatBuffer ln1, rstd1, qkv_out, lse, atty;
  LinearSaved s_qkv, s_proj;
  QTensor sp_ln1;  // sequence parallel, rowwise wire: qkv's gathered input copy
};

// What a layer's MLP keeps: the RMSNorm output (when fc1 keeps no copy; always on MoE layers,
// whose router backward reads it) and rstd, fc1's output (SwiGLU's input) in FP32 or FP8,
// SwiGLU's output (when fc2 keeps no copy), and the Linears' saved copies.
struct GPT::MlpActs {
  FloatBuffer ln2, rstd2, fc1_out, h;
  Fp8Activation fc1_out8;  // fc1_out kept in FP8 instead (swiglu_input fp8)
  LinearSaved s_fc1, s_fc2;
  QTensor sp_ln2;  // sequence parallel, rowwise wire: fc1's gathered input copy
};

struct GPT::Layer {
  bool moe = false;
  Parameter attn_norm, mlp_norm;
  Linear qkv, proj, fc1, fc2;      // fc1/fc2 unused on MoE layers
  std::unique_ptr<MoELayer> experts;
  FloatBuffer resid_mid;  // the residual stream after attention (the MLP's input); shared
                          // (shared_resid_mid_) when the whole layer is recomputed
  AttnActs attn;          // empty when the attention block is recomputed (shared_attn_)
  MlpActs mlp;            // empty when the whole layer is recomputed (shared_mlp_)
};

// Where a pass finds one block's tensors [N, width]: the layer's own buffers, the set shared
// by the layers under recompute, or scratch (lin_in_, branch_, dfc1_ without recompute; the
// arena with it).
struct GPT::AttnView {
  float *ln1, *rstd1, *qkv_out, *lse, *atty, *branch;
  float* branch_s;   // sequence parallel: this rank's rows of the reduce-scattered branch
  QTensor* sp_in;    // sequence parallel: qkv's gathered input copy, when kept
  float* resid_mid;  // the block's output
  LinearSaved *s_qkv, *s_proj;
};
struct GPT::MlpView {
  float* resid_mid;  // the block's input
  float *ln2, *rstd2, *a, *h, *branch;  // a: fc1's FP32 output
  float* branch_s;   // sequence parallel: this rank's rows of the reduce-scattered branch
  QTensor* sp_in;    // sequence parallel: fc1's gathered input copy, when kept
  Fp8Activation* a8;                    // set: SwiGLU's input is kept here in FP8
  LinearSaved *s_fc1, *s_fc2;
};
// The backward's scratch gradients: the RMSNorm input gradient of the MLP, the attention block
// and the final norm, proj's dx, dqkv, fc1's output gradient, fc2's dx.
struct GPT::Grads {
  float *dln_mlp, *dln_attn, *dln_head, *dbranch, *dqkv, *dfc1, *dh;
};

namespace {

// The arena of the recompute modes, in columns of N rows (each region is an [N, width] matrix
// starting at N * offset). The MLP phases use [a = dfc1 = branch : 2F][ln2 = h = dh = dln :
// max(F, D)] (fc2 writes its output over a, which is dead by then); the attention phases
// [qkv : 3D][atty : D][ln1 = branch = dbranch : D][dqkv : 3D], dln over qkv once attention's
// backward has read it. A region is reused only once what was there is dead (the order is in
// the header of this file).
struct ArenaLayout {
  int64_t mlp_h, atty, attn_branch, dqkv, width;
};
ArenaLayout arena_layout(const ModelConfig& c) {
  const int64_t D = c.d_model, F = c.d_ff, mF = std::max<int64_t>(F, D);
  return {2 * F, 3 * D, 4 * D, 5 * D, std::max(8 * D, 2 * F + mF)};
}

float* grow(FloatBuffer& b, int64_t n) {
  if (b.size() != size_t(n)) b.resize(size_t(n));
  return b.data();
}

}  // namespace

GPT::GPT(const ModelConfig& cfg, const LinearPrecisionFn& resolver, uint64_t seed,
         const ModelParallel& parallel)
    : cfg_(cfg), par_(parallel) {
  MXT_CHECK(bool(resolver), "GPT: no precision resolver given");
  const std::vector<ModuleInfo> mods = describe_modules(cfg_);  // validates
  const int tp = par_.tp_size();
  MXT_CHECK(cfg_.n_heads % tp == 0 && cfg_.d_ff % tp == 0, "tensor parallelism ", tp,
            " must divide model.n_heads (", cfg_.n_heads, ") and model.d_ff (", cfg_.d_ff, ")");
  MXT_CHECK(tp == 1 || cfg_.moe_num_experts == 0 || par_.sequence_parallel,
            "tensor parallelism on an MoE model needs sequence parallelism (each rank routes "
            "its own share of the tokens)");
  Dl_ = cfg_.d_model / tp;
  Hl_ = cfg_.n_heads / tp;
  Fl_ = cfg_.d_ff / tp;
  sp_ = par_.sequence_parallel && tp > 1;
  auto prec = [&](const std::string& module) {
    for (const ModuleInfo& m : mods)
      if (m.module == module) {
        LinearPrecision p = resolver(m);
        p.validate();
        return p;
      }
    MXT_FAIL("GPT: internal error, module ", module, " not described");
  };
  const int64_t D = cfg_.d_model, V = cfg_.vocab_size;
  const float std0 = cfg_.init_std;
  const float std_out = float(cfg_.init_std / std::sqrt(2.0 * cfg_.n_layers));

  embed_.init("embed.weight", {V, D});
  init_normal(embed_, std0, seed);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    auto L = std::make_unique<Layer>();
    const std::string p = "layers." + std::to_string(i);
    init_ones(L->attn_norm, p + ".attention.norm.gain", D);
    // Column-parallel qkv (this rank's q, k and v heads), row-parallel proj.
    L->qkv = Linear(p + ".attention.qkv", D, 3 * Dl_, false, prec(p + ".attention.qkv"));
    L->proj = Linear(p + ".attention.proj", Dl_, D, false, prec(p + ".attention.proj"));
    init_normal_slice(L->qkv.weight, tp_split(par_, {3 * D, D}, 0, 3), std0, seed);
    init_normal_slice(L->proj.weight, tp_split(par_, {D, D}, 1, 1), std_out, seed);
    init_ones(L->mlp_norm, p + ".mlp.norm.gain", D);
    linears_[p + ".attention.qkv"] = &L->qkv;
    linears_[p + ".attention.proj"] = &L->proj;
    if (cfg_.is_moe_layer(i)) {
      L->moe = true;
      const LinearPrecision p1 = prec(p + ".mlp.experts.fc1");  // resolver order = description
      const LinearPrecision p2 = prec(p + ".mlp.experts.fc2");
      // Under expert parallelism this rank's E / ep experts (nn/moe.h).
      const int64_t E = cfg_.moe_num_experts, Fe = cfg_.expert_d_ff();
      L->experts = std::make_unique<MoELayer>(p + ".mlp", D, Fe, E, cfg_.moe_top_k, p1, p2,
                                              par_.ep, &pstats_, par_.etp);
      init_normal(L->experts->router, std0, seed);
      init_normal_slice(L->experts->fc1.weight, expert_split(par_, {E, 2 * Fe, D}, 1, 2), std0,
                        seed);
      init_normal_slice(L->experts->fc2.weight, expert_split(par_, {E, D, Fe}, 2, 1), std_out,
                        seed);
      // Under sequence parallelism the tp group's shards make one micro-batch (nn/moe.h).
      if (par_.sequence_parallel && tp > 1) L->experts->set_token_group(par_.tp);
      grouped_[p + ".mlp.experts.fc1"] = &L->experts->fc1;
      grouped_[p + ".mlp.experts.fc2"] = &L->experts->fc2;
    } else {
      // Column-parallel fc1 (this rank's slices of gate and up), row-parallel fc2.
      const int64_t F = cfg_.d_ff;
      L->fc1 = Linear(p + ".mlp.fc1", D, 2 * Fl_, false, prec(p + ".mlp.fc1"));
      L->fc2 = Linear(p + ".mlp.fc2", Fl_, D, false, prec(p + ".mlp.fc2"));
      init_normal_slice(L->fc1.weight, tp_split(par_, {2 * F, D}, 0, 2), std0, seed);
      init_normal_slice(L->fc2.weight, tp_split(par_, {D, F}, 1, 1), std_out, seed);
      linears_[p + ".mlp.fc1"] = &L->fc1;
      linears_[p + ".mlp.fc2"] = &L->fc2;
    }
    layers_.push_back(std::move(L));
  }
  init_ones(final_norm_, "final_norm.gain", D);
  lm_head_ = Linear("lm_head", D, V, false, prec("lm_head"));
  init_normal(lm_head_.weight, std0, seed);
  linears_["lm_head"] = &lm_head_;
  for (auto& [name, l] : linears_) l->set_rounding_clock(&clock_);
  for (auto& [name, g] : grouped_) g->set_rounding_clock(&clock_);
  params_ = collect_parameters();
  // Under sequence parallelism every replicated parameter sees this rank's tokens only: its
  // gradient is this rank's part of the group's sum.
  if (sp_)
    for (Parameter* p : params_)
      if (!p->split.sliced()) p->split.partial_grad = true;
  if (cfg_.rope_theta > 0.f) rope_ = RopeTable(cfg_.max_seq_len, D / cfg_.n_heads, cfg_.rope_theta);
}

GPT::~GPT() = default;

std::vector<Parameter*> GPT::collect_parameters() {
  std::vector<Parameter*> ps{&embed_};
  for (auto& L : layers_) {
    ps.push_back(&L->attn_norm);
    ps.push_back(&L->qkv.weight);
    ps.push_back(&L->proj.weight);
    ps.push_back(&L->mlp_norm);
    if (L->moe) {
      ps.push_back(&L->experts->router);
      ps.push_back(&L->experts->fc1.weight);
      ps.push_back(&L->experts->fc2.weight);
    } else {
      ps.push_back(&L->fc1.weight);
      ps.push_back(&L->fc2.weight);
    }
  }
  ps.push_back(&final_norm_);
  ps.push_back(&lm_head_.weight);
  return ps;
}

int64_t GPT::num_parameters() const {
  int64_t n = 0;
  for (const Parameter* p : params_) n += p->numel();
  return n;
}

void GPT::zero_grad() {
  for (Parameter* p : params_) p->zero_grad();
}

void GPT::clear_grad() {
  for (Parameter* p : params_) p->clear_grad();
}

Linear* GPT::linear(const std::string& module) {
  auto it = linears_.find(module);
  return it == linears_.end() ? nullptr : it->second;
}

GroupedLinear* GPT::grouped_linear(const std::string& module) {
  auto it = grouped_.find(module);
  return it == grouped_.end() ? nullptr : it->second;
}

const MoELayer* GPT::moe_layer(int layer) const {
  MXT_CHECK(layer >= 0 && layer < int(layers_.size()), "GPT: layer ", layer,
            " out of range [0, ", layers_.size(), ")");
  return layers_[layer]->experts.get();
}

void GPT::event(const std::string& module, ModuleEvent e) {
  if (hook_) hook_(module, e);
}

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void GPT::tp_allreduce(float* x, int64_t n) {
  if (!par_.tp) return;
  const auto t0 = std::chrono::steady_clock::now();
  pstats_.tp_comm_bytes += par_.tp->allreduce_sum(x, size_t(n));
  pstats_.tp_ms += ms_since(t0);
}

void GPT::count_gather(uint64_t bytes, std::chrono::steady_clock::time_point t0) {
  count_gather({bytes, ms_since(t0), false});
}

void GPT::count_gather(const GatherCost& c) {
  pstats_.tp_comm_bytes += c.bytes;
  pstats_.tp_allgather_bytes += c.bytes;
  pstats_.tp_ms += c.ms;
  sp_fp32_route_ |= c.fp32_route;
}

void GPT::sp_reduce_scatter(const float* full, float* shard, int64_t shard_n) {
  const auto t0 = std::chrono::steady_clock::now();
  pstats_.tp_comm_bytes += par_.tp->reduce_scatter_sum(full, shard, size_t(shard_n));
  pstats_.tp_ms += ms_since(t0);
}

// Column-parallel forward from the norm's shard: the product's input copy gathered (FP32 rows
// for the FP32 reference); with the rowwise wire it stays in `kept` for the backward.
void GPT::sp_forward_in(Linear& l, const float* shard, int64_t Ns, float* y, LinearSaved& s,
                        QTensor& kept) {
  const int64_t K = l.in_features(), N = Ns * par_.tp_size();
  const auto t0 = std::chrono::steady_clock::now();
  if (fp32_ref_) {
    count_gather(gather_rows(*par_.tp, shard, Ns, K, grow(sp_f32_, N * K)), t0);
    linear_forward(true, l, sp_f32_.data(), N, y, s);
    return;
  }
  const Recipe& r = l.precision().recipe;
  bool fp32 = false;
  QTensor& q = par_.sp_wire == SequenceWire::rowwise ? kept : sp_x_;
  count_gather(gather_copies(*par_.tp, shard, Ns, K, r.role(Role::input), copies_needed(r,
               Role::input, Use::forward), q, &fp32), t0);
  sp_fp32_route_ |= fp32;
  l.forward_given(q, y, s);
}

// Column-parallel backward: x's wgrad copy gathered again from the shard (exact wire) or made
// from the kept forward copy (rowwise wire); dx [N, in] is this rank's part of the input
// gradient (the caller reduce-scatters it).
void GPT::sp_backward_in(Linear& l, LinearSaved& s, const float* shard, int64_t Ns,
                         const float* dy, float* dx, QTensor& kept) {
  const int64_t K = l.in_features(), N = Ns * par_.tp_size();
  const auto t0 = std::chrono::steady_clock::now();
  if (fp32_ref_) {
    count_gather(gather_rows(*par_.tp, shard, Ns, K, grow(sp_f32_, N * K)), t0);
    linear_backward(true, l, s, sp_f32_.data(), N, dy, dx);
    return;
  }
  const Recipe& r = l.precision().recipe;
  GatherCost cost;
  QTensor& x = input_wgrad_copies(*par_.tp, shard, Ns, K, r.role(Role::input),
                                  copies_needed(r, Role::input, Use::wgrad), par_.sp_wire, kept,
                                  sp_x_, sp_f32_, cost);
  count_gather(cost);
  l.backward_given(s, dy, nullptr, &x, dx);
}

// Row-parallel backward: the residual gradient's shard gathered as the copies dgrad and wgrad
// read (exact wire), or as dgrad's with wgrad's made from it (rowwise wire).
void GPT::sp_backward_out(Linear& l, LinearSaved& s, const float* x_ref, const float* dy_shard,
                          int64_t Ns, float* dx) {
  const int64_t O = l.out_features(), N = Ns * par_.tp_size();
  const auto t0 = std::chrono::steady_clock::now();
  if (fp32_ref_) {
    count_gather(gather_rows(*par_.tp, dy_shard, Ns, O, grow(sp_f32_, N * O)), t0);
    linear_backward(true, l, s, x_ref, N, sp_f32_.data(), dx);
    return;
  }
  const Recipe& r = l.precision().recipe;
  count_gather(gather_grad_copies(*par_.tp, dy_shard, Ns, O, r.role(Role::grad),
                                  copies_needed(r, Role::grad, Use::dgrad),
                                  copies_needed(r, Role::grad, Use::wgrad), par_.sp_wire, sp_dy_,
                                  sp_f32_));
  l.backward_given(s, nullptr, &sp_dy_, nullptr, dx);
}

void GPT::set_split_sums(int tp, int etp) {
  MXT_CHECK(tp >= 1 && etp >= 1 && par_.tp_size() == 1 && par_.etp_size() == 1,
            "GPT::set_split_sums: a one-process model and counts >= 1");
  MXT_CHECK(cfg_.n_heads % tp == 0 && cfg_.d_ff % tp == 0 && cfg_.expert_d_ff() % etp == 0,
            "GPT::set_split_sums: tp ", tp, " and etp ", etp, " must divide the heads and d_ff");
  split_tp_ = tp;
  for (auto& L : layers_)
    if (L->experts) L->experts->set_split_sums(etp);
}

void GPT::set_fp32_reference(bool on) {
  fp32_ref_ = on;
  for (auto& L : layers_)
    if (L->experts) L->experts->set_fp32_reference(on);
}

bool GPT::fc1_out_fp8(const Layer& L) const {
  return !fp32_ref_ && swiglu_input_fp8(swiglu_input_, L.fc1.precision());
}

void GPT::set_swiglu_input(SwigluInput s, ScaleRounding rounding) {
  swiglu_input_ = s;
  swiglu_rounding_ = rounding;
  for (auto& L : layers_)
    if (L->experts) L->experts->set_swiglu_input(s, rounding);
}

// The buffer a Linear's FP32 input goes to: `own` (kept until backward) when the Linear does
// not keep a copy of it or the FP32 reference needs it, else `scratch` (and `own` is freed).
float* GPT::linear_input(const Linear& l, FloatBuffer& own, int64_t n, float* scratch) {
  if (fp32_ref_ || !l.keeps_input_copy()) return grow(own, n);
  own = FloatBuffer();
  return scratch;
}

// The shared scratch of the mode without recompute, grown to n floats.
float* GPT::lin_scratch(int64_t n) {
  if (lin_in_.size() < size_t(n)) lin_in_.resize(size_t(n));
  return lin_in_.data();
}

float* GPT::arena(int64_t N, int64_t col) { return arena_.data() + N * col; }

float* GPT::resid_mid(Layer& L, int64_t N) {
  return grow(recompute_ == Recompute::layer ? shared_resid_mid_ : L.resid_mid,
              local_rows(N) * cfg_.d_model);
}

size_t GPT::activation_bytes() const {
  size_t n = 0;
  for (const auto& r : resid_) n += r.size();
  for (const auto& L : layers_) {
    const AttnActs& a = L->attn;
    const MlpActs& m = L->mlp;
    n += a.ln1.size() + a.rstd1.size() + a.qkv_out.size() + a.lse.size() + a.atty.size() +
         L->resid_mid.size() + m.ln2.size() + m.rstd2.size() + m.fc1_out.size() + m.h.size();
  }
  n += lnf_.size() + rstdf_.size() + logits_.size();
  size_t bytes = n * sizeof(float);
  for (const auto& L : layers_)
    bytes += L->mlp.fc1_out8.bytes() +
             (L->moe && recompute_ != Recompute::layer ? L->experts->activation_bytes() : 0);
  return bytes;
}

void GPT::set_recompute(Recompute r) {
  MXT_CHECK(r == Recompute::none || par_.tp_size() == 1, "activation recompute (",
            recompute_name(r), ") is not built for tensor parallelism; use recompute: none");
  recompute_ = r;
  shared_attn_ = r != Recompute::none ? std::make_unique<AttnActs>() : nullptr;
  shared_mlp_ = r == Recompute::layer ? std::make_unique<MlpActs>() : nullptr;
  shared_moe_ = r == Recompute::layer && cfg_.moe_num_experts > 0
                    ? std::make_unique<MoEActivations>() : nullptr;
  for (auto& L : layers_) {
    if (r != Recompute::none) L->attn = AttnActs{};
    if (r == Recompute::layer) {
      L->mlp = MlpActs{};
      L->resid_mid = FloatBuffer();
    }
    if (L->moe) L->experts->share_activations(shared_moe_.get());
  }
  // Scratch of the other mode, freed (ensure_buffers makes what this one uses).
  if (r != Recompute::layer) shared_resid_mid_ = FloatBuffer();
  if (r == Recompute::none) {
    arena_ = FloatBuffer();
  } else {
    for (FloatBuffer* b : {&lin_in_, &branch_, &dln_, &dbranch_, &dqkv_, &dfc1_, &dh_})
      *b = FloatBuffer();
  }
}

// ---- forward / backward ---------------------------------------------------------------------

GPT::AttnView GPT::attn_view(Layer& L, int64_t N) {
  const int64_t D = cfg_.d_model, Dl = Dl_, H = Hl_;
  const bool shared = recompute_ != Recompute::none;
  AttnActs& A = shared ? *shared_attn_ : L.attn;
  const int64_t Ns = local_rows(N);
  AttnView v{};
  v.resid_mid = resid_mid(L, N);
  v.s_qkv = &A.s_qkv;
  v.s_proj = &A.s_proj;
  v.rstd1 = grow(A.rstd1, Ns);
  v.lse = grow(A.lse, N * H);
  v.branch_s = sp_ ? grow(branch_s_, Ns * D) : nullptr;
  v.sp_in = &A.sp_ln1;
  if (sp_) {  // qkv keeps nothing of its gathered input but, on the rowwise wire, sp_ln1: the
              // exact wire's backward gathers the shard again
    v.ln1 = grow(A.ln1, Ns * D);
    v.qkv_out = grow(A.qkv_out, N * 3 * Dl);
    v.atty = grow(A.atty, N * Dl);
    v.branch = grow(branch_, N * D);
  } else if (!shared) {
    v.ln1 = linear_input(L.qkv, A.ln1, N * D, lin_scratch(N * D));
    v.qkv_out = grow(A.qkv_out, N * 3 * Dl);
    v.atty = grow(A.atty, N * Dl);
    v.branch = grow(branch_, N * D);
  } else {
    const ArenaLayout al = arena_layout(cfg_);
    v.ln1 = linear_input(L.qkv, A.ln1, N * D, arena(N, al.attn_branch));
    v.qkv_out = arena(N, 0);
    v.atty = arena(N, al.atty);
    v.branch = arena(N, al.attn_branch);
  }
  return v;
}

GPT::MlpView GPT::mlp_view(Layer& L, int64_t N) {
  const int64_t D = cfg_.d_model, F = Fl_;
  MlpActs& M = recompute_ == Recompute::layer ? *shared_mlp_ : L.mlp;
  const bool in_arena = recompute_ != Recompute::none;
  const ArenaLayout al = arena_layout(cfg_);
  const int64_t Ns = local_rows(N);
  MlpView v{};
  v.resid_mid = resid_mid(L, N);
  v.s_fc1 = &M.s_fc1;
  v.s_fc2 = &M.s_fc2;
  v.rstd2 = grow(M.rstd2, Ns);
  v.branch = in_arena ? arena(N, 0) : grow(branch_, N * D);
  v.branch_s = sp_ ? grow(branch_s_, Ns * D) : nullptr;
  v.sp_in = &M.sp_ln2;
  if (L.moe) {
    v.ln2 = grow(M.ln2, N * D);  // the router's backward reads it
    return v;
  }
  v.ln2 = sp_ ? grow(M.ln2, Ns * D)  // the backward gathers fc1's input again from it
              : linear_input(L.fc1, M.ln2, N * D,
                             in_arena ? arena(N, al.mlp_h) : lin_scratch(N * D));
  if (fc1_out_fp8(L)) {
    // fc1 writes the backward's dfc1 scratch (free until the backward); only the FP8 copy stays.
    M.fc1_out = FloatBuffer();
    v.a = in_arena ? arena(N, 0) : grow(dfc1_, N * 2 * F);
    v.a8 = &M.fc1_out8;
  } else {
    v.a = grow(M.fc1_out, N * 2 * F);
    M.fc1_out8.clear();
  }
  v.h = linear_input(L.fc2, M.h, N * F, in_arena ? arena(N, al.mlp_h) : lin_scratch(N * F));
  return v;
}

GPT::Grads GPT::grads(int64_t N) {
  const int64_t D = cfg_.d_model, F = Fl_, Dl = Dl_;
  if (recompute_ == Recompute::none) {
    float* dln = grow(dln_, N * D);
    return {dln, dln, dln, grow(dbranch_, N * Dl), grow(dqkv_, N * 3 * Dl), grow(dfc1_, N * 2 * F),
            grow(dh_, N * F)};
  }
  const ArenaLayout al = arena_layout(cfg_);
  return {arena(N, al.mlp_h), arena(N, 0), arena(N, 0), arena(N, al.attn_branch),
          arena(N, al.dqkv), arena(N, 0), arena(N, al.mlp_h)};
}

void GPT::ensure_buffers(int B, int T) {
  const int64_t N = int64_t(B) * T, D = cfg_.d_model, Ns = local_rows(N);
  MXT_CHECK(!sp_ || N % par_.tp_size() == 0, "sequence parallelism: the micro-batch's ", N,
            " tokens do not split evenly over ", par_.tp_size(), " ranks");
  resid_.resize(layers_.size() + 1);
  for (auto& r : resid_) grow(r, Ns * D);
  if (recompute_ != Recompute::none) grow(arena_, N * arena_layout(cfg_).width);
  for (auto& L : layers_) {
    attn_view(*L, N);  // sizes what the views point at
    mlp_view(*L, N);
  }
  linear_input(lm_head_, lnf_, Ns * D,
               recompute_ != Recompute::none ? arena(N, 0) : lin_scratch(N * D));
  grow(rstdf_, Ns);
  grow(logits_, Ns * cfg_.vocab_size);
}

// The backward's scratch gradients [N, ...] and every parameter's gradient.
void GPT::ensure_backward_buffers(int B, int T) {
  // A parameter whose value is held elsewhere (FSDP shards) gets no gradient buffer here: the
  // holder lends one while its module's backward runs (ModuleEvent::backward_start).
  for (Parameter* p : params_)
    if (!p->value.empty()) ensure_grad(*p);
  grow(dres_, local_rows(int64_t(B) * T) * cfg_.d_model);
  if (sp_) grow(dln_s_, local_rows(int64_t(B) * T) * cfg_.d_model);
  grads(int64_t(B) * T);
}

void GPT::reserve(int B, int T) {
  MXT_CHECK(B >= 1 && T >= 1 && T <= cfg_.max_seq_len, "GPT::reserve: batch ", B,
            " and sequence length ", T, " must be >= 1 (and T <= max_seq_len = ",
            cfg_.max_seq_len, ")");
  ensure_buffers(B, T);
  ensure_backward_buffers(B, T);
  for (auto& L : layers_)
    if (L->moe) L->experts->reserve(int64_t(B) * T);
}

// x: [N, D] the layer's input. Pass::forward writes v.resid_mid = x + proj(attention(...)) and
// reports the module events; Pass::rebuild does the same silently (the whole-layer recompute
// needs the MLP's input again); Pass::recompute only re-creates what the backward reads (qkv,
// attention's output and lse, the Linears' saved copies — not proj's product).
void GPT::attention_block(Layer& L, const AttnView& v, const float* x, int B, int T, Pass p) {
  const int64_t N = int64_t(B) * T, D = cfg_.d_model, Dl = Dl_, H = Hl_, Ns = local_rows(N);
  rmsnorm_forward(v.ln1, v.rstd1, x, L.attn_norm.value.data(), Ns, D, cfg_.rms_eps);
  if (sp_)
    sp_forward_in(L.qkv, v.ln1, Ns, v.qkv_out, *v.s_qkv, *v.sp_in);
  else
    linear_forward(fp32_ref_, L.qkv, v.ln1, N, v.qkv_out, *v.s_qkv);
  if (p == Pass::forward) event(L.qkv.name(), ModuleEvent::forward_done);
  attention_forward(v.atty, v.lse, v.qkv_out, B, T, Dl, H,
                    fp32_ref_ ? AttnPrecision::fp32 : AttnPrecision::bf16,
                    cfg_.rope_theta > 0.f ? &rope_ : nullptr);  // q, k rotated as read
  if (p == Pass::recompute) {
    if (fp32_ref_)
      *v.s_proj = LinearSaved{};
    else
      L.proj.save_input(v.atty, N, *v.s_proj);
    return;
  }
  {
    SplitSumsScope split(split_tp_, 1);
    linear_forward(fp32_ref_, L.proj, v.atty, N, v.branch, *v.s_proj);
  }
  if (p == Pass::forward) event(L.proj.name(), ModuleEvent::forward_done);
  if (sp_) {  // row-parallel: the heads' partial sums, this rank's rows
    sp_reduce_scatter(v.branch, v.branch_s, Ns * D);
    residual_forward(v.resid_mid, x, v.branch_s, Ns * D);
    return;
  }
  tp_allreduce(v.branch, N * D);  // row-parallel: the heads' partial sums
  residual_forward(v.resid_mid, x, v.branch, N * D);
}

// The MLP of v.resid_mid; writes out = v.resid_mid + mlp(...) unless `recompute`, which only
// re-creates what the backward reads. Returns the MoE load-balancing loss (0 for dense).
double GPT::mlp_block(Layer& L, const MlpView& v, int64_t N, float* out, bool recompute) {
  const int64_t D = cfg_.d_model, F = Fl_, Ns = local_rows(N);
  rmsnorm_forward(v.ln2, v.rstd2, v.resid_mid, L.mlp_norm.value.data(), Ns, D, cfg_.rms_eps);
  double aux = 0.0;
  if (L.moe) {  // this rank's rows (its shard under sequence parallelism) go to the experts
    aux = L.experts->forward(v.ln2, Ns, v.branch);
    if (recompute) return aux;
    event(L.experts->fc1.name(), ModuleEvent::forward_done);
    event(L.experts->fc2.name(), ModuleEvent::forward_done);
  } else {
    if (sp_)
      sp_forward_in(L.fc1, v.ln2, Ns, v.a, *v.s_fc1, *v.sp_in);
    else
      linear_forward(fp32_ref_, L.fc1, v.ln2, N, v.a, *v.s_fc1);
    if (!recompute) event(L.fc1.name(), ModuleEvent::forward_done);
    swiglu_forward(v.h, v.a, N, F);
    // SwiGLU's input in FP8, [2N, F]: kept as codes; under the whole-layer recompute only the
    // recomputed pass rounds it, in place, for SwiGLU's backward to read there.
    if (v.a8 && recompute_ != Recompute::layer) v.a8->keep(v.a, 2 * N, F, swiglu_rounding_);
    if (v.a8 && recompute) v.a8->round_trip(v.a, 2 * N, F, swiglu_rounding_);
    if (recompute) {
      if (fp32_ref_)
        *v.s_fc2 = LinearSaved{};
      else
        L.fc2.save_input(v.h, N, *v.s_fc2);
      return 0.0;
    }
    {
      SplitSumsScope split(split_tp_, 1);
      linear_forward(fp32_ref_, L.fc2, v.h, N, v.branch, *v.s_fc2);
    }
    event(L.fc2.name(), ModuleEvent::forward_done);
    if (sp_) {  // row-parallel: the hidden slices' partial sums, this rank's rows
      sp_reduce_scatter(v.branch, v.branch_s, Ns * D);
      residual_forward(out, v.resid_mid, v.branch_s, Ns * D);
      return aux;
    }
    tp_allreduce(v.branch, N * D);  // row-parallel: the hidden slices' partial sums
  }
  residual_forward(out, v.resid_mid, v.branch, Ns * D);
  return aux;
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  MXT_CHECK(tokens, "GPT: null tokens");
  MXT_CHECK(B >= 1, "GPT: batch size must be >= 1, got ", B);
  MXT_CHECK(T >= 1 && T <= cfg_.max_seq_len, "GPT: sequence length ", T,
            " must be between 1 and model.max_seq_len = ", cfg_.max_seq_len);
  ensure_buffers(B, T);
  const int64_t N = int64_t(B) * T, D = cfg_.d_model, V = cfg_.vocab_size, Ns = local_rows(N);
  const int64_t first = sp_ ? Ns * par_.tp_rank() : 0;  // this rank's rows of the N tokens
  embedding_forward(resid_[0].data(), tokens + first, Ns, embed_.value.data(), V, D);
  double aux = 0.0;
  size_t held = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = *layers_[l];
    const AttnView av = attn_view(L, N);
    attention_block(L, av, resid_[l].data(), B, T, Pass::forward);
    const MlpView mv = mlp_view(L, N);
    aux += mlp_block(L, mv, N, resid_[l + 1].data(), false);
    // What stays until the backward (the recomputed blocks' copies are made again there).
    if (recompute_ == Recompute::none) held += av.s_qkv->held_bytes() + av.s_proj->held_bytes();
    if (sp_ && par_.sp_wire == SequenceWire::rowwise)  // the gathered copies kept for backward
      held += av.sp_in->bytes() + (L.moe ? 0 : mv.sp_in->bytes());
    if (recompute_ != Recompute::layer)
      held += L.moe ? L.experts->held_bytes() : mv.s_fc1->held_bytes() + mv.s_fc2->held_bytes();
  }
  float* lnf = linear_input(lm_head_, lnf_, Ns * D,
                            recompute_ != Recompute::none ? arena(N, 0) : lin_scratch(N * D));
  rmsnorm_forward(lnf, rstdf_.data(), resid_.back().data(), final_norm_.value.data(), Ns, D,
                  cfg_.rms_eps);
  linear_forward(fp32_ref_, lm_head_, lnf, Ns, logits_.data(), lm_saved_);
  event(lm_head_.name(), ModuleEvent::forward_done);
  held += lm_saved_.held_bytes();
  // Softmax in place: logits_ holds the probabilities from here on (without targets, from
  // forward_logits, it keeps the logits).
  double loss = targets ? crossentropy_forward(logits_.data(), nullptr, logits_.data(),
                                               targets + first, Ns, V)
                        : 0.0;
  if (sp_ && targets) {  // the mean over the group's equal shares of the N tokens; the MoE
                        // load-balancing losses are the ranks' parts of the micro-batch's
    const auto t0 = std::chrono::steady_clock::now();
    double sums[2] = {loss, aux};
    pstats_.tp_comm_bytes += par_.tp->allreduce_sum(sums, cfg_.moe_num_experts ? 2 : 1);
    pstats_.tp_ms += ms_since(t0);
    loss = sums[0] / double(par_.tp_size());
    if (cfg_.moe_num_experts) aux = sums[1];
  }
  last_aux_ = float(aux);
  last_loss_ = loss;
  last_held_ = held + activation_bytes();
  return float(loss);
}

float GPT::forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T) {
  MXT_CHECK(targets, "GPT: null targets");
  return forward(tokens, targets, B, T);
}

void GPT::forward_logits(const int32_t* tokens, int B, int T, float* logits) {
  MXT_CHECK(logits, "GPT: null logits");
  MXT_CHECK(!sp_, "GPT: forward_logits under sequence parallelism (each rank holds a share of "
            "the logits); run inference in one process");
  forward(tokens, nullptr, B, T);
  std::copy_n(logits_.data(), size_t(B) * size_t(T) * size_t(cfg_.vocab_size), logits);
}

float GPT::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                            float grad_scale) {
  MXT_CHECK(std::isfinite(grad_scale), "GPT: grad_scale must be finite, got ", grad_scale);
  MXT_CHECK(targets, "GPT: null targets");
  const float loss = forward(tokens, targets, B, T);
  const int64_t N = int64_t(B) * T, D = cfg_.d_model, V = cfg_.vocab_size, H = Hl_;
  const int64_t F = Fl_, Dl = Dl_;
  ensure_backward_buffers(B, T);
  const Grads g = grads(N);
  const float daux = grad_scale * cfg_.aux_loss_coef;
  const AttnPrecision attn_prec = fp32_ref_ ? AttnPrecision::fp32 : AttnPrecision::bf16;

  // Under sequence parallelism this rank's rows [first, first + Ns) of everything outside the
  // tensor-parallel products; the mean is still over all N tokens.
  const int64_t Ns = local_rows(N), first = sp_ ? Ns * par_.tp_rank() : 0;
  // logits_ holds the probabilities; turn them into dlogits in place.
  crossentropy_backward(logits_.data(), logits_.data(), targets + first, Ns, V,
                        grad_scale / float(N));
  event(lm_head_.name(), ModuleEvent::backward_start);
  linear_backward(fp32_ref_, lm_head_, lm_saved_, lnf_.data(), Ns, logits_.data(), g.dln_head);
  event(lm_head_.name(), ModuleEvent::backward_done);
  rmsnorm_backward(dres_.data(), final_norm_.grad.data(), g.dln_head, resid_.back().data(),
                   final_norm_.value.data(), rstdf_.data(), Ns, D, Accum::write,
                   take_grad_mode(final_norm_));
  // dres_ is the gradient w.r.t. the residual stream: the final norm writes it, and each
  // branch adds its share through its RMSNorm backward. Every other buffer is written by its
  // first producer (Linear::backward writes dx, the ops below say Accum::write): the backward
  // fills nothing with zeros. Under recompute each block's forward runs again just before its
  // backward, into the shared set and the arena (the views of the forward's pass).
  for (size_t l = layers_.size(); l-- > 0;) {
    Layer& L = *layers_[l];
    const AttnView av = attn_view(L, N);
    const MlpView mv = mlp_view(L, N);
    if (recompute_ == Recompute::layer) {  // the MLP's input again, then its activations
      attention_block(L, av, resid_[l].data(), B, T, Pass::rebuild);
      mlp_block(L, mv, N, nullptr, true);
    }
    if (L.moe) {
      event(L.experts->fc2.name(), ModuleEvent::backward_start);
      event(L.experts->fc1.name(), ModuleEvent::backward_start);
      L.experts->backward(dres_.data(), daux, g.dln_mlp, Accum::write);
      event(L.experts->fc2.name(), ModuleEvent::backward_done);
      event(L.experts->fc1.name(), ModuleEvent::backward_done);
    } else {
      event(L.fc2.name(), ModuleEvent::backward_start);
      if (sp_)
        sp_backward_out(L.fc2, *mv.s_fc2, mv.h, dres_.data(), Ns, g.dh);
      else
        linear_backward(fp32_ref_, L.fc2, *mv.s_fc2, mv.h, N, dres_.data(), g.dh);
      event(L.fc2.name(), ModuleEvent::backward_done);
      const float* a = mv.a;
      if (mv.a8 && recompute_ != Recompute::layer) {  // dequantized into dfc1, then SwiGLU's
                                                      // backward runs in place
        mv.a8->restore(g.dfc1);
        a = g.dfc1;
      }
      swiglu_backward(g.dfc1, g.dh, a, N, F, Accum::write);
      event(L.fc1.name(), ModuleEvent::backward_start);
      if (sp_) {
        sp_backward_in(L.fc1, *mv.s_fc1, mv.ln2, Ns, g.dfc1, g.dln_mlp, *mv.sp_in);
      } else {
        SplitSumsScope split(split_tp_, 2);  // gate, up
        linear_backward(fp32_ref_, L.fc1, *mv.s_fc1, mv.ln2, N, g.dfc1, g.dln_mlp);
      }
      event(L.fc1.name(), ModuleEvent::backward_done);
      // Column-parallel: every slice's input gradient (this rank's rows of it under SP).
      if (sp_)
        sp_reduce_scatter(g.dln_mlp, dln_s_.data(), Ns * D);
      else
        tp_allreduce(g.dln_mlp, N * D);
    }
    rmsnorm_backward(dres_.data(), L.mlp_norm.grad.data(),
                     sp_ && !L.moe ? dln_s_.data() : g.dln_mlp,
                     mv.resid_mid, L.mlp_norm.value.data(), mv.rstd2, Ns, D, Accum::add,
                     take_grad_mode(L.mlp_norm));
    if (recompute_ != Recompute::none)
      attention_block(L, av, resid_[l].data(), B, T, Pass::recompute);
    event(L.proj.name(), ModuleEvent::backward_start);
    if (sp_)
      sp_backward_out(L.proj, *av.s_proj, av.atty, dres_.data(), Ns, g.dbranch);
    else
      linear_backward(fp32_ref_, L.proj, *av.s_proj, av.atty, N, dres_.data(), g.dbranch);
    event(L.proj.name(), ModuleEvent::backward_done);
    attention_backward(g.dqkv, g.dbranch, av.qkv_out, av.atty, av.lse, B, T, Dl, H, attn_prec,
                       cfg_.rope_theta > 0.f ? &rope_ : nullptr);  // writes dqkv
    event(L.qkv.name(), ModuleEvent::backward_start);
    if (sp_) {
      sp_backward_in(L.qkv, *av.s_qkv, av.ln1, Ns, g.dqkv, g.dln_attn, *av.sp_in);
    } else {
      SplitSumsScope split(split_tp_, 3);  // q, k, v
      linear_backward(fp32_ref_, L.qkv, *av.s_qkv, av.ln1, N, g.dqkv, g.dln_attn);
    }
    event(L.qkv.name(), ModuleEvent::backward_done);
    // Column-parallel: every head's input gradient (this rank's rows of it under SP).
    if (sp_)
      sp_reduce_scatter(g.dln_attn, dln_s_.data(), Ns * D);
    else
      tp_allreduce(g.dln_attn, N * D);
    rmsnorm_backward(dres_.data(), L.attn_norm.grad.data(), sp_ ? dln_s_.data() : g.dln_attn,
                     resid_[l].data(), L.attn_norm.value.data(), av.rstd1, Ns, D, Accum::add,
                     take_grad_mode(L.attn_norm));
  }
  embedding_backward(embed_.grad.data(), dres_.data(), tokens + first, Ns, V, D,
                     take_grad_mode(embed_));
  // Every parameter with a gradient here received a contribution above; this only guards the
  // contract that a cleared gradient reads as zero after a backward.
  for (Parameter* p : params_)
    if (!p->grad_live) p->zero_grad();
  return loss;
}

}  // namespace mxtrain
