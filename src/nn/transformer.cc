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
#include <cmath>
#include <cstring>

#include "mxtrain/common.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {

// ---- initialisation -------------------------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// N(0, std^2) values from a stream keyed by (seed, parameter name): independent of creation
// order and thread count, identical on every rank.
void init_normal(Parameter& p, float std, uint64_t seed) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the name
  for (char c : p.name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  uint64_t s = seed ^ (h * 0x9E3779B97F4A7C15ull);
  const size_t n = p.value.size();
  for (size_t i = 0; i < n; i += 2) {
    const double u1 = (double(splitmix64(s) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = double(splitmix64(s) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
    p.value[i] = float(std * r * std::cos(a));
    if (i + 1 < n) p.value[i + 1] = float(std * r * std::sin(a));
  }
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

struct GPT::Layer {
  bool moe = false;
  Parameter attn_norm, mlp_norm;
  Linear qkv, proj, fc1, fc2;      // fc1/fc2 unused on MoE layers
  std::unique_ptr<MoELayer> experts;
  LinearSaved s_qkv, s_proj, s_fc1, s_fc2;
  // Activations of the last forward, [N, ...] with N = B*T.
  // atty (attention output) is always this layer's own: attention's backward reads it.
  FloatBuffer ln1, rstd1, qkv_out, lse, atty, resid_mid, ln2, rstd2, fc1_out, h;
  Fp8Activation fc1_out8;  // fc1_out kept in FP8 instead (swiglu_input fp8)
};

GPT::GPT(const ModelConfig& cfg, const LinearPrecisionFn& resolver, uint64_t seed) : cfg_(cfg) {
  MXT_CHECK(bool(resolver), "GPT: no precision resolver given");
  const std::vector<ModuleInfo> mods = describe_modules(cfg_);  // validates
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
    L->qkv = Linear(p + ".attention.qkv", D, 3 * D, false, prec(p + ".attention.qkv"));
    L->proj = Linear(p + ".attention.proj", D, D, false, prec(p + ".attention.proj"));
    init_normal(L->qkv.weight, std0, seed);
    init_normal(L->proj.weight, std_out, seed);
    init_ones(L->mlp_norm, p + ".mlp.norm.gain", D);
    linears_[p + ".attention.qkv"] = &L->qkv;
    linears_[p + ".attention.proj"] = &L->proj;
    if (cfg_.is_moe_layer(i)) {
      L->moe = true;
      const LinearPrecision p1 = prec(p + ".mlp.experts.fc1");  // resolver order = description
      const LinearPrecision p2 = prec(p + ".mlp.experts.fc2");
      L->experts = std::make_unique<MoELayer>(p + ".mlp", D, cfg_.expert_d_ff(),
                                              cfg_.moe_num_experts, cfg_.moe_top_k, p1, p2);
      init_normal(L->experts->router, std0, seed);
      init_normal(L->experts->fc1.weight, std0, seed);
      init_normal(L->experts->fc2.weight, std_out, seed);
      grouped_[p + ".mlp.experts.fc1"] = &L->experts->fc1;
      grouped_[p + ".mlp.experts.fc2"] = &L->experts->fc2;
    } else {
      L->fc1 = Linear(p + ".mlp.fc1", D, 2 * int64_t(cfg_.d_ff), false, prec(p + ".mlp.fc1"));
      L->fc2 = Linear(p + ".mlp.fc2", cfg_.d_ff, D, false, prec(p + ".mlp.fc2"));
      init_normal(L->fc1.weight, std0, seed);
      init_normal(L->fc2.weight, std_out, seed);
      linears_[p + ".mlp.fc1"] = &L->fc1;
      linears_[p + ".mlp.fc2"] = &L->fc2;
    }
    layers_.push_back(std::move(L));
  }
  init_ones(final_norm_, "final_norm.gain", D);
  lm_head_ = Linear("lm_head", D, V, false, prec("lm_head"));
  init_normal(lm_head_.weight, std0, seed);
  linears_["lm_head"] = &lm_head_;
  params_ = collect_parameters();
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

// The buffer a Linear's FP32 input goes to: the layer's own (kept until backward) when the
// Linear does not keep a copy of it or the FP32 reference needs it, else the shared scratch.
float* GPT::linear_input(const Linear& l, FloatBuffer& own, int64_t n) {
  if (fp32_ref_ || !l.keeps_input_copy()) {
    own.resize(size_t(n));
    return own.data();
  }
  own = FloatBuffer();
  if (lin_in_.size() < size_t(n)) lin_in_.resize(size_t(n));
  return lin_in_.data();
}

size_t GPT::activation_bytes() const {
  size_t n = 0;
  for (const auto& r : resid_) n += r.size();
  for (const auto& L : layers_)
    n += L->ln1.size() + L->rstd1.size() + L->qkv_out.size() + L->lse.size() +
         L->atty.size() + L->resid_mid.size() + L->ln2.size() + L->rstd2.size() +
         L->fc1_out.size() + L->h.size();
  n += lnf_.size() + rstdf_.size() + logits_.size();
  size_t bytes = n * sizeof(float);
  for (const auto& L : layers_)
    bytes += L->fc1_out8.bytes() + (L->moe ? L->experts->activation_bytes() : 0);
  return bytes;
}

// ---- forward / backward ---------------------------------------------------------------------

void GPT::ensure_buffers(int B, int T) {
  const int64_t N = int64_t(B) * T, D = cfg_.d_model, H = cfg_.n_heads;
  resid_.resize(layers_.size() + 1);
  for (auto& r : resid_) r.resize(N * D);
  for (auto& L : layers_) {
    L->rstd1.resize(N);
    L->qkv_out.resize(N * 3 * D);
    L->lse.resize(N * H);
    L->atty.resize(N * D);
    L->resid_mid.resize(N * D);
    linear_input(L->qkv, L->ln1, N * D);
    if (L->moe) L->ln2.resize(N * D);  // the router's backward reads it
    L->rstd2.resize(N);
    if (!L->moe) {
      linear_input(L->fc1, L->ln2, N * D);
      if (fc1_out_fp8(*L)) {
        L->fc1_out = FloatBuffer();  // fc1 writes the shared dfc1_ (see forward)
        dfc1_.resize(N * 2 * cfg_.d_ff);
      } else {
        L->fc1_out.resize(N * 2 * cfg_.d_ff);
        L->fc1_out8.clear();
      }
      linear_input(L->fc2, L->h, N * cfg_.d_ff);
    }
  }
  linear_input(lm_head_, lnf_, N * D);
  rstdf_.resize(N);
  logits_.resize(N * cfg_.vocab_size);
  branch_.resize(N * D);
}

// The backward's scratch gradients [N, ...] and every parameter's gradient.
void GPT::ensure_backward_buffers(int B, int T) {
  const int64_t N = int64_t(B) * T, D = cfg_.d_model;
  // A parameter whose value is held elsewhere (FSDP shards) gets no gradient buffer here: the
  // holder lends one while its module's backward runs (ModuleEvent::backward_start).
  for (Parameter* p : params_)
    if (!p->value.empty()) ensure_grad(*p);
  dres_.resize(N * D);
  dln_.resize(N * D);
  dbranch_.resize(N * D);
  dqkv_.resize(N * 3 * D);
  dfc1_.resize(N * 2 * cfg_.d_ff);
  dh_.resize(N * cfg_.d_ff);
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

float GPT::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  MXT_CHECK(tokens, "GPT: null tokens");
  MXT_CHECK(B >= 1, "GPT: batch size must be >= 1, got ", B);
  MXT_CHECK(T >= 1 && T <= cfg_.max_seq_len, "GPT: sequence length ", T,
            " must be between 1 and model.max_seq_len = ", cfg_.max_seq_len);
  ensure_buffers(B, T);
  const int64_t N = int64_t(B) * T, D = cfg_.d_model, V = cfg_.vocab_size, H = cfg_.n_heads;
  const float eps = cfg_.rms_eps;
  const AttnPrecision attn_prec = fp32_ref_ ? AttnPrecision::fp32 : AttnPrecision::bf16;
  embedding_forward(resid_[0].data(), tokens, N, embed_.value.data(), V, D);
  double aux = 0.0;
  size_t held = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = *layers_[l];
    const float* x = resid_[l].data();
    float* ln1 = linear_input(L.qkv, L.ln1, N * D);
    rmsnorm_forward(ln1, L.rstd1.data(), x, L.attn_norm.value.data(), N, D, eps);
    linear_forward(fp32_ref_, L.qkv, ln1, N, L.qkv_out.data(), L.s_qkv);
    event(L.qkv.name(), ModuleEvent::forward_done);
    if (cfg_.rope_theta > 0.f) rope_forward(L.qkv_out.data(), rope_, B, T, D, H);
    attention_forward(L.atty.data(), L.lse.data(), L.qkv_out.data(), B, T, D, H, attn_prec);
    linear_forward(fp32_ref_, L.proj, L.atty.data(), N, branch_.data(), L.s_proj);
    event(L.proj.name(), ModuleEvent::forward_done);
    residual_forward(L.resid_mid.data(), x, branch_.data(), N * D);
    if (L.moe) {
      rmsnorm_forward(L.ln2.data(), L.rstd2.data(), L.resid_mid.data(),
                      L.mlp_norm.value.data(), N, D, eps);
      aux += L.experts->forward(L.ln2.data(), N, branch_.data());
      event(L.experts->fc1.name(), ModuleEvent::forward_done);
      event(L.experts->fc2.name(), ModuleEvent::forward_done);
      held += L.experts->held_bytes();
    } else {
      float* ln2 = linear_input(L.fc1, L.ln2, N * D);
      rmsnorm_forward(ln2, L.rstd2.data(), L.resid_mid.data(), L.mlp_norm.value.data(), N, D,
                      eps);
      // With the SwiGLU input kept in FP8, fc1 writes the backward's scratch dfc1_ (free until
      // the backward), and only the FP8 copy stays per layer.
      float* a = fc1_out_fp8(L) ? dfc1_.data() : L.fc1_out.data();
      linear_forward(fp32_ref_, L.fc1, ln2, N, a, L.s_fc1);
      event(L.fc1.name(), ModuleEvent::forward_done);
      float* h = linear_input(L.fc2, L.h, N * cfg_.d_ff);
      swiglu_forward(h, a, N, cfg_.d_ff);
      if (fc1_out_fp8(L)) L.fc1_out8.keep(a, 2 * N, cfg_.d_ff, swiglu_rounding_);  // [2N, F]
      linear_forward(fp32_ref_, L.fc2, h, N, branch_.data(), L.s_fc2);
      event(L.fc2.name(), ModuleEvent::forward_done);
      held += L.s_fc1.held_bytes() + L.s_fc2.held_bytes();
    }
    held += L.s_qkv.held_bytes() + L.s_proj.held_bytes();
    residual_forward(resid_[l + 1].data(), L.resid_mid.data(), branch_.data(), N * D);
  }
  float* lnf = linear_input(lm_head_, lnf_, N * D);
  rmsnorm_forward(lnf, rstdf_.data(), resid_.back().data(), final_norm_.value.data(), N, D, eps);
  linear_forward(fp32_ref_, lm_head_, lnf, N, logits_.data(), lm_saved_);
  event(lm_head_.name(), ModuleEvent::forward_done);
  held += lm_saved_.held_bytes();
  // Softmax in place: logits_ holds the probabilities from here on (without targets, from
  // forward_logits, it keeps the logits).
  const double loss =
      targets ? crossentropy_forward(logits_.data(), nullptr, logits_.data(), targets, N, V)
              : 0.0;
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
  forward(tokens, nullptr, B, T);
  std::copy_n(logits_.data(), size_t(B) * size_t(T) * size_t(cfg_.vocab_size), logits);
}

float GPT::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                            float grad_scale) {
  MXT_CHECK(std::isfinite(grad_scale), "GPT: grad_scale must be finite, got ", grad_scale);
  MXT_CHECK(targets, "GPT: null targets");
  const float loss = forward(tokens, targets, B, T);
  const int64_t N = int64_t(B) * T, D = cfg_.d_model, V = cfg_.vocab_size, H = cfg_.n_heads;
  ensure_backward_buffers(B, T);
  const float daux = grad_scale * cfg_.aux_loss_coef;
  const AttnPrecision attn_prec = fp32_ref_ ? AttnPrecision::fp32 : AttnPrecision::bf16;

  // logits_ holds the probabilities; turn them into dlogits in place.
  crossentropy_backward(logits_.data(), logits_.data(), targets, N, V, grad_scale / float(N));
  event(lm_head_.name(), ModuleEvent::backward_start);
  linear_backward(fp32_ref_, lm_head_, lm_saved_, lnf_.data(), N, logits_.data(), dln_.data());
  event(lm_head_.name(), ModuleEvent::backward_done);
  rmsnorm_backward(dres_.data(), final_norm_.grad.data(), dln_.data(), resid_.back().data(),
                   final_norm_.value.data(), rstdf_.data(), N, D, Accum::write,
                   take_grad_mode(final_norm_));
  // dres_ is the gradient w.r.t. the residual stream: the final norm writes it, and each
  // branch adds its share through its RMSNorm backward. Every other buffer is written by its
  // first producer (Linear::backward writes dx, the ops below say Accum::write): the backward
  // fills nothing with zeros.
  for (size_t l = layers_.size(); l-- > 0;) {
    Layer& L = *layers_[l];
    if (L.moe) {
      event(L.experts->fc2.name(), ModuleEvent::backward_start);
      event(L.experts->fc1.name(), ModuleEvent::backward_start);
      L.experts->backward(dres_.data(), daux, dln_.data(), Accum::write);
      event(L.experts->fc2.name(), ModuleEvent::backward_done);
      event(L.experts->fc1.name(), ModuleEvent::backward_done);
    } else {
      event(L.fc2.name(), ModuleEvent::backward_start);
      linear_backward(fp32_ref_, L.fc2, L.s_fc2, L.h.data(), N, dres_.data(), dh_.data());
      event(L.fc2.name(), ModuleEvent::backward_done);
      const float* a = L.fc1_out.data();
      if (fc1_out_fp8(L)) {  // dequantized into dfc1_, then SwiGLU's backward runs in place
        L.fc1_out8.restore(dfc1_.data());
        a = dfc1_.data();
      }
      swiglu_backward(dfc1_.data(), dh_.data(), a, N, cfg_.d_ff, Accum::write);
      event(L.fc1.name(), ModuleEvent::backward_start);
      linear_backward(fp32_ref_, L.fc1, L.s_fc1, L.ln2.data(), N, dfc1_.data(), dln_.data());
      event(L.fc1.name(), ModuleEvent::backward_done);
    }
    rmsnorm_backward(dres_.data(), L.mlp_norm.grad.data(), dln_.data(), L.resid_mid.data(),
                     L.mlp_norm.value.data(), L.rstd2.data(), N, D, Accum::add,
                     take_grad_mode(L.mlp_norm));
    event(L.proj.name(), ModuleEvent::backward_start);
    linear_backward(fp32_ref_, L.proj, L.s_proj, L.atty.data(), N, dres_.data(), dbranch_.data());
    event(L.proj.name(), ModuleEvent::backward_done);
    attention_backward(dqkv_.data(), dbranch_.data(), L.qkv_out.data(), L.atty.data(),
                       L.lse.data(), B, T, D, H, attn_prec);  // writes dqkv_
    if (cfg_.rope_theta > 0.f) rope_backward(dqkv_.data(), rope_, B, T, D, H);
    event(L.qkv.name(), ModuleEvent::backward_start);
    linear_backward(fp32_ref_, L.qkv, L.s_qkv, L.ln1.data(), N, dqkv_.data(), dln_.data());
    event(L.qkv.name(), ModuleEvent::backward_done);
    rmsnorm_backward(dres_.data(), L.attn_norm.grad.data(), dln_.data(), resid_[l].data(),
                     L.attn_norm.value.data(), L.rstd1.data(), N, D, Accum::add,
                     take_grad_mode(L.attn_norm));
  }
  embedding_backward(embed_.grad.data(), dres_.data(), tokens, N, V, D,
                     take_grad_mode(embed_));
  // Every parameter with a gradient here received a contribution above; this only guards the
  // contract that a cleared gradient reads as zero after a backward.
  for (Parameter* p : params_)
    if (!p->grad_live) p->zero_grad();
  return loss;
}

}  // namespace mxtrain
