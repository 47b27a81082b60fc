// tests/nn/layer_test_util.h — small helpers for the nn tests: random data, FP64 reference
// products on BF16-rounded operands (Linear / GroupedLinear), byte comparison, cosine
// similarity, and for whole-model tests the config of a tiny GPT and a one-recipe precision
// resolver.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mxtrain/formats.h"
#include "mxtrain/gemm.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/recipe.h"

namespace mxtrain::layer_test {

inline std::vector<float> randn(int64_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

// A parameter's storage holding v (parameters keep FloatBuffer, tests build std::vector).
inline FloatBuffer buffer(std::span<const float> v) { return FloatBuffer(v.begin(), v.end()); }

inline std::vector<float> round_bf16(std::span<const float> v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

// Empty vectors may have null data(), which memcmp must not be given even for 0 bytes.
inline bool same_bytes(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// C = op(A) · op(B) in FP64 with its absolute-value companion |op(A)| · |op(B)| (for bounds).
struct RefProduct {
  std::vector<double> c, abs;
};
inline RefProduct ref_product(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                              std::span<const float> A, std::span<const float> B) {
  RefProduct r{std::vector<double>(size_t(M * N)), std::vector<double>(size_t(M * N))};
  gemm_ref_f64(ta, tb, M, N, K, A.data(), ta ? M : K, B.data(), tb ? K : N, r.c.data(), N);
  std::vector<float> aa(A.begin(), A.end()), ab(B.begin(), B.end());
  for (float& x : aa) x = std::fabs(x);
  for (float& x : ab) x = std::fabs(x);
  gemm_ref_f64(ta, tb, M, N, K, aa.data(), ta ? M : K, ab.data(), tb ? K : N, r.abs.data(), N);
  return r;
}

// The shape of a tiny GPT, named field by field: tiny_model({.n_layers = 3, .moe_d_ff = 24}).
// moe_d_ff > 0 makes every layer MoE: moe_experts experts of SwiGLU width moe_d_ff, top-2.
struct TinyModel {
  int d_model = 32, n_layers = 2, n_heads = 2, d_ff = 48, max_seq_len = 8;
  int moe_d_ff = 0;  // 0: a dense model
  int moe_experts = 4;
};

// That shape as a ModelConfig; every other field (vocabulary, init_std, aux_loss_coef, ...)
// keeps ModelConfig's default for the caller to change.
inline ModelConfig tiny_model(const TinyModel& s) {
  ModelConfig c;
  c.d_model = s.d_model;
  c.n_layers = s.n_layers;
  c.n_heads = s.n_heads;
  c.d_ff = s.d_ff;
  c.max_seq_len = s.max_seq_len;
  if (s.moe_d_ff > 0) {
    c.moe_num_experts = s.moe_experts;
    c.moe_top_k = 2;
    c.moe_d_ff = s.moe_d_ff;
    c.moe_every = 1;
  }
  return c;
}

// A batch of B sequences of T byte tokens and their targets, uniform over a 256-token vocabulary.
struct TokenBatch {
  std::vector<int32_t> tokens, targets;
};
inline TokenBatch make_batch(int B, int T, uint32_t seed) {
  std::mt19937 rng(seed);
  TokenBatch b{std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  for (auto& t : b.tokens) t = int32_t(rng() % 256);
  for (auto& t : b.targets) t = int32_t(rng() % 256);
  return b;
}

// A precision resolver giving every module the named recipe (and defer_backward_quant).
inline LinearPrecisionFn recipe_resolver(const std::string& recipe, bool defer = false) {
  return [recipe, defer](const ModuleInfo&) {
    LinearPrecision p;
    p.recipe = get_recipe(recipe);
    p.defer_backward_quant = defer;
    return p;
  };
}

// The SwiGLU tests' models: dense with d_ff 48 (rows of 2 x 48: a full and a 16-wide block per
// half) or 33; MoE with experts of width 24 (one ragged block per half), top-2.
inline ModelConfig swiglu_model(bool moe, int d_ff = 48) {
  ModelConfig c = tiny_model({.d_ff = d_ff, .moe_d_ff = moe ? 24 : 0});
  if (moe) c.aux_loss_coef = 0.1f;
  return c;
}

// The parameter of m named `name` (a test failure, and the first parameter, when there is none).
inline const Parameter& param_named(GPT& m, const std::string& name) {
  for (const Parameter* p : m.parameters())
    if (p->name == name) return *p;
  ADD_FAILURE() << "no parameter " << name;
  return *m.parameters().front();
}

}  // namespace mxtrain::layer_test
