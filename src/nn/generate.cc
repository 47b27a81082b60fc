// nn/generate.cc — InferenceModel (nn/generate.h): the GPT forward in FP32 over a KV cache.
//
// append() pushes n new token rows through the same steps as GPT's forward
// (nn/transformer.cc): embedding, then per layer RMSNorm -> qkv -> attention -> proj ->
// residual -> RMSNorm -> SwiGLU MLP or MoE block -> residual, then the final RMSNorm and
// lm_head. The element-wise layers are the training ops (nn/ops.h) and the MoE routing is
// the training router (nn/moe.h); the products are gemm_f32 over the n new rows. Attention is
// done here: query row i sits at position p = cached + i and attends to cache positions
// 0..p, with the arithmetic of the training attention (scaled dot products summed over the
// head dimension in order, max-subtracted softmax, probability-weighted sum of V in key
// order). Shapes: x [n, D], qkv [n, 3D] packed [q | k | v] with head h in columns
// h*hd..(h+1)*hd-1 of each third, cache [n_layers, max_seq_len, D].
#include "mxtrain/nn/generate.h"

#include <algorithm>
#include <cmath>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {

struct InferenceModel::Layer {
  bool moe = false;
  Parameter attn_norm, qkv, proj, mlp_norm;
  Parameter fc1, fc2;                  // dense: [2F, D], [D, F]
  Parameter router, efc1, efc2;        // MoE: [E, D], [E, 2F', D], [E, D, F']
  MoERouting routing;
};

namespace {

void init_value(Parameter& p, std::string name, std::vector<int64_t> shape, float fill = 0.f) {
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.value.assign(size_t(p.numel()), fill);
}

// y [n, out] = x [n, in] · W^T, W [out, in].
void matmul(const float* x, int64_t n, const Parameter& w, float* y) {
  const int64_t out = w.shape[w.shape.size() - 2], in = w.shape.back();
  gemm_f32(false, true, n, out, in, x, in, w.value.data(), in, y, out, false);
}

template <class T>
T* grown(std::vector<T>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

}  // namespace

InferenceModel::InferenceModel(const ModelConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  const int64_t D = cfg_.d_model, V = cfg_.vocab_size, F = cfg_.d_ff;
  init_value(embed_, "embed.weight", {V, D});
  layers_.resize(size_t(cfg_.n_layers));
  for (int i = 0; i < cfg_.n_layers; ++i) {
    Layer& L = layers_[size_t(i)];
    const std::string p = "layers." + std::to_string(i);
    init_value(L.attn_norm, p + ".attention.norm.gain", {D}, 1.f);
    init_value(L.qkv, p + ".attention.qkv.weight", {3 * D, D});
    init_value(L.proj, p + ".attention.proj.weight", {D, D});
    init_value(L.mlp_norm, p + ".mlp.norm.gain", {D}, 1.f);
    L.moe = cfg_.is_moe_layer(i);
    if (L.moe) {
      const int64_t E = cfg_.moe_num_experts, FE = cfg_.expert_d_ff();
      init_value(L.router, p + ".mlp.router.weight", {E, D});
      init_value(L.efc1, p + ".mlp.experts.fc1.weight", {E, 2 * FE, D});
      init_value(L.efc2, p + ".mlp.experts.fc2.weight", {E, D, FE});
    } else {
      init_value(L.fc1, p + ".mlp.fc1.weight", {2 * F, D});
      init_value(L.fc2, p + ".mlp.fc2.weight", {D, F});
    }
  }
  init_value(final_norm_, "final_norm.gain", {D}, 1.f);
  init_value(lm_head_, "lm_head.weight", {V, D});
  const size_t cache = size_t(cfg_.n_layers) * size_t(cfg_.max_seq_len) * size_t(D);
  kcache_.assign(cache, 0.f);
  vcache_.assign(cache, 0.f);
  if (cfg_.rope_theta > 0.f) rope_ = RopeTable(cfg_.max_seq_len, D / cfg_.n_heads, cfg_.rope_theta);
}

InferenceModel::~InferenceModel() = default;

std::vector<Parameter*> InferenceModel::parameters() {
  std::vector<Parameter*> ps{&embed_};
  for (Layer& L : layers_) {
    for (Parameter* p : {&L.attn_norm, &L.qkv, &L.proj, &L.mlp_norm}) ps.push_back(p);
    if (L.moe)
      for (Parameter* p : {&L.router, &L.efc1, &L.efc2}) ps.push_back(p);
    else
      for (Parameter* p : {&L.fc1, &L.fc2}) ps.push_back(p);
  }
  ps.push_back(&final_norm_);
  ps.push_back(&lm_head_);
  return ps;
}

// out [n, D]: query rows of qkv [n, 3D] at positions cached_ + i over the layer's cache,
// which already holds their own K and V.
void InferenceModel::attend(int layer, int64_t n, const float* qkv, float* out) {
  const int64_t D = cfg_.d_model, H = cfg_.n_heads, hd = D / H, T = cfg_.max_seq_len;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const float* kc = kcache_.data() + int64_t(layer) * T * D;
  const float* vc = vcache_.data() + int64_t(layer) * T * D;
  float* probs = grown(probs_, n * H * T);
#pragma omp parallel for collapse(2) schedule(static) if (n * H > 1)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < H; ++h) {
      const float* q = qkv + i * 3 * D + h * hd;
      float* p = probs + (i * H + h) * T;
      const int64_t keys = cached_ + i + 1;  // positions 0..cached_+i
      for (int64_t s = 0; s < keys; ++s) {
        const float* k = kc + s * D + h * hd;
        float acc = 0.f;
        for (int64_t j = 0; j < hd; ++j) acc += (q[j] * scale) * k[j];
        p[s] = acc;
      }
      float mx = p[0];
      for (int64_t s = 1; s < keys; ++s) mx = std::max(mx, p[s]);
      float sum = 0.f;
      for (int64_t s = 0; s < keys; ++s) {
        p[s] = std::exp(p[s] - mx);
        sum += p[s];
      }
      const float inv = 1.f / sum;
      for (int64_t s = 0; s < keys; ++s) p[s] *= inv;
      float* o = out + i * D + h * hd;
      for (int64_t j = 0; j < hd; ++j) o[j] = 0.f;
      for (int64_t s = 0; s < keys; ++s) {
        const float* v = vc + s * D + h * hd;
        const float ps = p[s];
        for (int64_t j = 0; j < hd; ++j) o[j] += ps * v[j];
      }
    }
  }
}

// y [n, D] = the layer's MLP of x [n, D] (x = the RMSNorm output).
void InferenceModel::mlp(Layer& L, int64_t n, const float* x, float* y) {
  const int64_t D = cfg_.d_model;
  if (!L.moe) {
    const int64_t F = cfg_.d_ff;
    matmul(x, n, L.fc1, grown(a_, n * 2 * F));
    swiglu_forward(grown(h_, n * F), a_.data(), n, F);
    matmul(h_.data(), n, L.fc2, y);
    return;
  }
  // The MoE block's forward (nn/moe.cc) with its FP32 expert products.
  const int64_t E = cfg_.moe_num_experts, k = cfg_.moe_top_k, F = cfg_.expert_d_ff();
  const int64_t rows = n * k;
  router_logits_forward(grown(moe_logits_, n * E), x, L.router.value.data(), n, D, E);
  moe_route(L.routing, moe_logits_.data(), n, E, k);
  moe_permute(grown(moe_xp_, rows * D), x, L.routing, D);
  const GroupList g = L.routing.groups();
  float* a = grown(moe_a_, rows * 2 * F);
  float* yp = grown(moe_yp_, rows * D);
  const VaryingRowsScope varying;  // the experts' row counts change with every token
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = g.offsets[e], cnt = g.count(e);
    if (cnt == 0) continue;
    gemm_f32(false, true, cnt, 2 * F, D, moe_xp_.data() + r0 * D, D,
             L.efc1.value.data() + e * 2 * F * D, D, a + r0 * 2 * F, 2 * F, false);
  }
  swiglu_forward(grown(moe_h_, rows * F), a, rows, F);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = g.offsets[e], cnt = g.count(e);
    if (cnt == 0) continue;
    gemm_f32(false, true, cnt, D, F, moe_h_.data() + r0 * F, F,
             L.efc2.value.data() + e * D * F, F, yp + r0 * D, D, false);
  }
  moe_combine(y, yp, L.routing, D);
}

void InferenceModel::append(const int32_t* tokens, int n, float* logits, bool every_position) {
  MXT_CHECK(tokens && logits, "InferenceModel::append: null tokens or logits");
  MXT_CHECK(n >= 1 && int64_t(cached_) + n <= cfg_.max_seq_len, "InferenceModel::append: ",
            n, " tokens after ", cached_, " cached ones exceed max_seq_len = ",
            cfg_.max_seq_len);
  const int64_t D = cfg_.d_model, V = cfg_.vocab_size, T = cfg_.max_seq_len;
  const float eps = cfg_.rms_eps;
  float* x = grown(x_, n * D);
  float* ln = grown(ln_, n * D);
  float* rstd = grown(rstd_, n);
  float* qkv = grown(qkv_, n * 3 * D);
  float* att = grown(att_, n * D);
  float* branch = grown(branch_, n * D);
  embedding_forward(x, tokens, n, embed_.value.data(), V, D);  // checks ids < V
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    rmsnorm_forward(ln, rstd, x, L.attn_norm.value.data(), n, D, eps);
    matmul(ln, n, L.qkv, qkv);
    if (cfg_.rope_theta > 0.f) rope_forward(qkv, rope_, 1, n, D, cfg_.n_heads, cached_);
    float* kc = kcache_.data() + (int64_t(l) * T + cached_) * D;
    float* vc = vcache_.data() + (int64_t(l) * T + cached_) * D;
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(qkv + i * 3 * D + D, D, kc + i * D);
      std::copy_n(qkv + i * 3 * D + 2 * D, D, vc + i * D);
    }
    attend(int(l), n, qkv, att);
    matmul(att, n, L.proj, branch);
    residual_forward(x, x, branch, n * D);
    rmsnorm_forward(ln, rstd, x, L.mlp_norm.value.data(), n, D, eps);
    mlp(L, n, ln, branch);
    residual_forward(x, x, branch, n * D);
  }
  cached_ += n;
  // Final norm and lm_head: every row, or only the last one.
  const int64_t first = every_position ? 0 : n - 1, rows = n - first;
  rmsnorm_forward(ln, rstd, x + first * D, final_norm_.value.data(), rows, D, eps);
  matmul(ln, rows, lm_head_, logits);
}

}  // namespace mxtrain
