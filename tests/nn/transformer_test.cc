// tests/nn/transformer_test.cc — the GPT model (nn/transformer.h): config errors, module
// description and naming, loss at initialisation, whole-model gradients against finite
// differences (dense and MoE), exact gradient accumulation, determinism (seed and thread
// count), defer_backward_quant giving the same numbers with fewer held bytes, and evaluation
// keeping nothing for a backward.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/fp8_activation.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/quantize.h"
#include "nn/layer_test_util.h"

namespace mxtrain {
namespace {

using layer_test::cosine;
using layer_test::same_bytes;

// The tiny GPT of these tests (layer_test::tiny_model's default shape); MoE: 4 experts, top-2,
// every layer, with an aux-loss weight large enough that its gradient matters in the checks.
ModelConfig tiny(bool moe) {
  ModelConfig c = layer_test::tiny_model({.moe_d_ff = moe ? 24 : 0});
  if (moe) c.aux_loss_coef = 0.1f;
  return c;
}

using layer_test::recipe_resolver;
using layer_test::make_batch;
using layer_test::TokenBatch;


std::vector<float> all_grads(GPT& m) {
  std::vector<float> g;
  for (Parameter* p : m.parameters()) g.insert(g.end(), p->grad.begin(), p->grad.end());
  return g;
}

// ---- config and description ----------------------------------------------------------------

TEST(ModelConfig, ValidateNamesTheBadField) {
  auto expect_field = [](ModelConfig c, const std::string& field) {
    try {
      c.validate();
      ADD_FAILURE() << "no error for " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model." + field), std::string::npos) << e.what();
    }
  };
  ModelConfig c = tiny(false);
  EXPECT_NO_THROW(c.validate());
  { auto b = c; b.d_model = 0; expect_field(b, "d_model"); }
  { auto b = c; b.n_heads = 3; expect_field(b, "n_heads"); }
  { auto b = c; b.n_layers = 0; expect_field(b, "n_layers"); }
  { auto b = c; b.vocab_size = 0; expect_field(b, "vocab_size"); }
  { auto b = c; b.rms_eps = 0.f; expect_field(b, "rms_eps"); }
  { auto b = tiny(true); b.moe_top_k = 5; expect_field(b, "moe_top_k"); }
  { auto b = tiny(true); b.moe_every = 0; expect_field(b, "moe_every"); }
  { auto b = c; b.moe_num_experts = -1; expect_field(b, "moe_num_experts"); }
}

TEST(DescribeModules, DenseAndMoENamesKindsAndShapes) {
  auto d = describe_modules(tiny(false));
  ASSERT_EQ(d.size(), 9u);
  EXPECT_EQ(d[0].module, "layers.0.attention.qkv");
  EXPECT_EQ(d[0].kind, "layernorm_column");
  EXPECT_EQ(d[0].name, "qkv");
  EXPECT_EQ(d[0].in, 32);
  EXPECT_EQ(d[0].out, 96);
  EXPECT_EQ(d[1].module, "layers.0.attention.proj");
  EXPECT_EQ(d[1].kind, "row");
  EXPECT_EQ(d[2].module, "layers.0.mlp.fc1");
  EXPECT_EQ(d[2].out, 96);
  EXPECT_EQ(d[3].module, "layers.0.mlp.fc2");
  EXPECT_EQ(d[3].in, 48);
  EXPECT_EQ(d[3].top_k, 1);
  EXPECT_FALSE(d[3].is_expert);
  EXPECT_EQ(d[8].module, "lm_head");
  EXPECT_EQ(d[8].kind, "column");
  EXPECT_EQ(d[8].layer, -1);
  EXPECT_EQ(d[8].out, 256);

  ModelConfig mc = tiny(true);
  mc.n_layers = 4;
  mc.moe_every = 2;  // layers 1 and 3 are MoE
  auto m = describe_modules(mc);
  ASSERT_EQ(m.size(), 17u);
  EXPECT_EQ(m[2].module, "layers.0.mlp.fc1");
  EXPECT_EQ(m[6].module, "layers.1.mlp.experts.fc1");
  EXPECT_EQ(m[6].kind, "layernorm_column");
  EXPECT_TRUE(m[6].is_expert);
  EXPECT_EQ(m[6].num_experts, 4);
  EXPECT_EQ(m[6].top_k, 2);
  EXPECT_EQ(m[6].out, 48);
  EXPECT_EQ(m[7].module, "layers.1.mlp.experts.fc2");
  EXPECT_EQ(m[7].kind, "row");
  EXPECT_EQ(m[7].in, 24);
  EXPECT_EQ(m[7].layer, 1);
}

TEST(GPT, ResolverSeesEveryModuleOnceAndAccessorsFindThem) {
  std::vector<std::string> asked;
  GPT m(tiny(true), [&](const ModuleInfo& i) {
    asked.push_back(i.module);
    LinearPrecision p;
    p.recipe = get_recipe(i.is_expert ? "mxfp8" : "bf16");
    return p;
  }, 7);
  std::vector<std::string> want;
  for (const auto& i : m.quantizable_modules()) want.push_back(i.module);
  EXPECT_EQ(asked, want);
  ASSERT_NE(m.linear("layers.1.attention.qkv"), nullptr);
  EXPECT_EQ(m.linear("layers.1.attention.qkv")->out_features(), 96);
  EXPECT_EQ(m.linear("layers.0.mlp.experts.fc1"), nullptr);
  ASSERT_NE(m.grouped_linear("layers.0.mlp.experts.fc1"), nullptr);
  EXPECT_EQ(m.grouped_linear("layers.0.mlp.experts.fc1")->precision().recipe.name, "mxfp8");
  EXPECT_EQ(m.linear("lm_head")->precision().recipe.name, "bf16");
  EXPECT_EQ(m.grouped_linear("nope"), nullptr);

  std::vector<std::string> names;
  for (Parameter* p : m.parameters()) names.push_back(p->name);
  const std::vector<std::string> want_names = {
      "embed.weight",
      "layers.0.attention.norm.gain", "layers.0.attention.qkv.weight",
      "layers.0.attention.proj.weight", "layers.0.mlp.norm.gain",
      "layers.0.mlp.router.weight", "layers.0.mlp.experts.fc1.weight",
      "layers.0.mlp.experts.fc2.weight",
      "layers.1.attention.norm.gain", "layers.1.attention.qkv.weight",
      "layers.1.attention.proj.weight", "layers.1.mlp.norm.gain",
      "layers.1.mlp.router.weight", "layers.1.mlp.experts.fc1.weight",
      "layers.1.mlp.experts.fc2.weight",
      "final_norm.gain", "lm_head.weight"};
  EXPECT_EQ(names, want_names);
  // 256*32 + 2*(32 + 96*32 + 32*32 + 32 + 4*32 + 4*48*32 + 4*32*24) + 32 + 256*32
  EXPECT_EQ(m.num_parameters(), 8192 + 2 * (32 + 3072 + 1024 + 32 + 128 + 6144 + 3072) + 32 + 8192);
}

TEST(GPT, BadBatchIsAnError) {
  GPT m(tiny(false), recipe_resolver("bf16"), 1);
  TokenBatch b = make_batch(1, 9, 1);
  EXPECT_THROW(m.forward_loss(b.tokens.data(), b.targets.data(), 1, 9), Error);  // T > max
  b.tokens[3] = 256;
  EXPECT_THROW(m.forward_loss(b.tokens.data(), b.targets.data(), 1, 8), Error);
}

// ---- numbers ---------------------------------------------------------------------------------

TEST(GPT, InitialLossIsNearLogVocab) {
  for (bool moe : {false, true}) {
    GPT m(tiny(moe), recipe_resolver("bf16"), 3);
    TokenBatch b = make_batch(4, 8, 2);
    const float loss = m.forward_loss(b.tokens.data(), b.targets.data(), 4, 8);
    // init_std 0.02 keeps the logits within ~0.1 of each other: near-uniform predictions.
    EXPECT_NEAR(loss, std::log(256.0), 0.1) << "moe=" << moe;
    if (moe) {
      EXPECT_GT(m.last_aux_loss(), 1.8f);  // two layers, each ~1 (>= 1 up to routing noise)
      EXPECT_LT(m.last_aux_loss(), 2.6f);
    } else {
      EXPECT_EQ(m.last_aux_loss(), 0.f);
    }
  }
}

// Whole-model gradient check against central finite differences, on the FP32 reference path
// (set_fp32_reference: every product in plain FP32). The recipes round operands to BF16 or FP8,
// which turns the loss into a finely stepped function of the parameters whose finite
// differences are noise at any useful step size (measured on the bf16 path: directional
// differences along the norm-gain and router gradients off by 2-10x at h = 1e-2); the FP32 path
// makes the wiring check tight, and RecipeGradientsTrackFp32Reference ties the real path to it.
// For each parameter tensor the 3 entries with the largest |gradient| and 2 fixed others are
// perturbed by h = 1e-3. The objective (mean CE in double + coef · aux) carries ~1e-7 of FP32
// activation rounding noise, i.e. ~1e-4 per difference quotient; curvature error is O(h^2).
// Tolerance: 3e-4 absolute + 2e-2 relative.
// Routing is piecewise constant in the parameters: an entry whose perturbation moves a token to
// another expert measures a jump, not a slope, and is skipped — at most 3 of the 85 may be.
void fp32_gradient_check(bool moe) {
  const int B = 2, T = 8;
  GPT m(tiny(moe), recipe_resolver("bf16"), 11);
  m.set_fp32_reference(true);
  TokenBatch b = make_batch(B, T, 5);
  m.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
  auto routing = [&] {
    std::vector<int32_t> r;
    for (int l = 0; l < m.config().n_layers; ++l)
      if (const MoELayer* e = m.moe_layer(l))
        r.insert(r.end(), e->routing().expert.begin(), e->routing().expert.end());
    return r;
  };
  const std::vector<int32_t> base_routing = routing();
  EXPECT_EQ(base_routing.empty(), !moe);
  const double coef = m.config().aux_loss_coef;
  bool routing_changed = false;
  auto objective = [&] {
    m.forward_loss(b.tokens.data(), b.targets.data(), B, T);
    routing_changed = routing_changed || routing() != base_routing;
    return m.last_loss() + coef * m.last_aux_loss();
  };
  const float h = 1e-3f;
  int checked = 0, skipped = 0;
  for (Parameter* p : m.parameters()) {
    std::vector<size_t> idx(p->grad.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + 3, idx.end(), [&](size_t a, size_t c) {
      return std::fabs(p->grad[a]) > std::fabs(p->grad[c]);
    });
    idx.resize(3);
    idx.push_back(p->grad.size() / 3);
    idx.push_back(p->grad.size() - 1);
    for (size_t i : idx) {
      const float x0 = p->value[i];
      routing_changed = false;
      p->value[i] = x0 + h;
      const double fp = objective();
      p->value[i] = x0 - h;
      const double fm = objective();
      p->value[i] = x0;
      if (routing_changed) {
        ++skipped;
        continue;
      }
      const double fd = (fp - fm) / (double(x0 + h) - double(x0 - h));
      EXPECT_LE(std::fabs(fd - p->grad[i]), 3e-4 + 2e-2 * std::fabs(fd))
          << p->name << "[" << i << "]: finite difference " << fd << " vs backward "
          << p->grad[i];
      ++checked;
    }
  }
  EXPECT_LE(skipped, 3);
  EXPECT_EQ(checked + skipped, 5 * int(m.parameters().size()));
}

TEST(GPT, DenseGradientsMatchFiniteDifferencesFp32) { fp32_gradient_check(false); }
TEST(GPT, MoEGradientsMatchFiniteDifferencesFp32) { fp32_gradient_check(true); }

// The real (recipe) path against the FP32 reference of the same model and batch: per parameter
// tensor, the gradients must point the same way. Measured minimum cosine over all tensors
// (seed 12): bf16 0.99998, mxfp8 and mxfp8-32x32 0.9958 (E4M3 keeps 3 mantissa bits, ~3% per
// operand). Thresholds 0.9995 and 0.99 leave room for other seeds and still catch a gradient
// that is wired wrong (cosine far below 0.9).
TEST(GPT, RecipeGradientsTrackFp32Reference) {
  for (bool moe : {false, true}) {
    for (const char* recipe : {"bf16", "mxfp8", "mxfp8-32x32"}) {
      const int B = 2, T = 8;
      TokenBatch b = make_batch(B, T, 29);
      GPT ref(tiny(moe), recipe_resolver(recipe), 12), real(tiny(moe), recipe_resolver(recipe), 12);
      ref.set_fp32_reference(true);
      const float l_ref = ref.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
      const float l_real = real.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
      const bool bf16 = std::string(recipe) == "bf16";
      EXPECT_NEAR(l_real, l_ref, bf16 ? 1e-4 : 5e-3) << recipe;
      auto pr = ref.parameters(), pq = real.parameters();
      for (size_t i = 0; i < pr.size(); ++i)
        EXPECT_GE(cosine(pr[i]->grad, pq[i]->grad), bf16 ? 0.9995 : 0.99)
            << recipe << " moe=" << moe << " " << pr[i]->name;
    }
  }
}

// On the real bf16 path, a finite difference along the whole gradient direction (a large
// signal: |g| ~ 2, against ~1e-4 of BF16 stepping noise in the loss) must give |g|:
// (L(θ + h ĝ) - L(θ - h ĝ)) / 2h = ĝ · ∇L, with h = 0.03. Measured ratio 0.997 (dense) / 0.999 (MoE); tolerance 2%.
TEST(GPT, Bf16GradientIsTheSlopeAlongItself) {
  for (bool moe : {false, true}) {
    const int B = 2, T = 8;
    GPT m(tiny(moe), recipe_resolver("bf16"), 11);
    TokenBatch b = make_batch(B, T, 5);
    m.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
    double norm2 = 0;
    for (Parameter* p : m.parameters())
      for (float g : p->grad) norm2 += double(g) * g;
    const double norm = std::sqrt(norm2), h = 0.03;
    std::vector<FloatBuffer> v0;
    for (Parameter* p : m.parameters()) v0.push_back(p->value);
    const double coef = m.config().aux_loss_coef;
    auto at = [&](double s) {
      auto ps = m.parameters();
      for (size_t k = 0; k < ps.size(); ++k) {
        for (size_t i = 0; i < v0[k].size(); ++i)
          ps[k]->value[i] = float(v0[k][i] + s * h * ps[k]->grad[i] / norm);
        ++ps[k]->version;
      }
      m.forward_loss(b.tokens.data(), b.targets.data(), B, T);
      return m.last_loss() + coef * m.last_aux_loss();
    };
    const double slope = (at(1) - at(-1)) / (2 * h);
    EXPECT_NEAR(slope / norm, 1.0, 0.02) << "moe=" << moe;
  }
}

// Scaling the objective by 1/2 is exact in binary floating point (every op in the backward is
// homogeneous, and power-of-two scaling commutes with rounding to FP32, BF16 and MX formats), so
// one micro-batch at grad_scale 0.5 from zero gradients gives exactly half the gradients of one
// at 1.0. Two accumulated micro-batches at 0.5 add partial sums in a different order than one
// at 1.0 (the wgrad GEMMs accumulate into the existing gradient), so they agree to FP32
// rounding: 1e-6 of the largest gradient.
TEST(GPT, GradScaleScalesExactlyAndAccumulates) {
  for (bool moe : {false, true}) {
    TokenBatch b = make_batch(2, 8, 9);
    GPT m1(tiny(moe), recipe_resolver("mxfp8"), 4), m2(tiny(moe), recipe_resolver("mxfp8"), 4);
    const float l1 = m1.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    const float l2 = m2.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 0.5f);
    EXPECT_EQ(l1, l2);
    const auto g1 = all_grads(m1), g_half = all_grads(m2);
    std::vector<float> doubled(g_half.size());
    for (size_t i = 0; i < g_half.size(); ++i) doubled[i] = 2.f * g_half[i];
    EXPECT_TRUE(same_bytes(g1, doubled)) << "moe=" << moe;
    m2.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 0.5f);
    const auto g2 = all_grads(m2);
    float gmax = 0.f;
    for (float g : g1) gmax = std::max(gmax, std::fabs(g));
    for (size_t i = 0; i < g1.size(); ++i) ASSERT_NEAR(g1[i], g2[i], 1e-6f * gmax) << i;
  }
}

TEST(GPT, SameSeedGivesIdenticalLossAndGradients) {
  for (bool moe : {false, true}) {
    TokenBatch b = make_batch(2, 8, 13);
    GPT a(tiny(moe), recipe_resolver("mxfp8"), 21), c(tiny(moe), recipe_resolver("mxfp8"), 21);
    GPT other(tiny(moe), recipe_resolver("mxfp8"), 22);
    const float la = a.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    const float lc = c.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    const float lo = other.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    EXPECT_EQ(std::memcmp(&la, &lc, sizeof(float)), 0);
    EXPECT_TRUE(same_bytes(all_grads(a), all_grads(c)));
    EXPECT_NE(la, lo);
    EXPECT_FALSE(same_bytes(all_grads(a), all_grads(other)));
  }
}

TEST(GPT, OneAndTwoThreadsGiveIdenticalLossAndGradients) {
  for (bool moe : {false, true}) {
    for (const char* recipe : {"bf16", "mxfp8"}) {
      TokenBatch b = make_batch(2, 8, 17);
      GPT a(tiny(moe), recipe_resolver(recipe), 5), c(tiny(moe), recipe_resolver(recipe), 5);
      const int prev = omp_get_max_threads();
      omp_set_num_threads(1);
      const float la = a.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
      omp_set_num_threads(2);
      const float lc = c.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
      omp_set_num_threads(prev);
      EXPECT_EQ(std::memcmp(&la, &lc, sizeof(float)), 0) << recipe << " moe=" << moe;
      EXPECT_TRUE(same_bytes(all_grads(a), all_grads(c))) << recipe << " moe=" << moe;
    }
  }
}

TEST(GPT, DeferBackwardQuantGivesSameNumbersAndHoldsLess) {
  for (bool moe : {false, true}) {
    TokenBatch b = make_batch(2, 8, 19);
    GPT off(tiny(moe), recipe_resolver("mxfp8", false), 6);
    GPT on(tiny(moe), recipe_resolver("mxfp8", true), 6);
    const float l_off = off.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    const size_t held_off = off.last_held_bytes();
    const float l_on = on.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
    const size_t held_on = on.last_held_bytes();
    EXPECT_EQ(l_off, l_on);
    EXPECT_TRUE(same_bytes(all_grads(off), all_grads(on))) << "moe=" << moe;
    EXPECT_GT(held_off, 0u);
    EXPECT_LT(held_on, held_off) << "moe=" << moe;
  }
}

// Evaluation (forward_loss, in a ForwardOnlyScope) gives the training forward's loss bit for
// bit while keeping less (no wgrad copies of the Linears' inputs, no SwiGLU input), and leaves
// the next training step as it would be without it: the same loss and gradients, bit for bit.
// Every recipe family, defer on and off, dense and MoE, SwiGLU's input in FP32 and in FP8 or
// 4 bits.
TEST(GPT, EvaluationKeepsNothingForABackwardAndChangesNoStep) {
  for (const char* recipe : {"bf16", "mxfp8", "nvfp4", "mxfp4"})
    for (bool defer : {false, true})
      for (bool moe : {false, true})
        for (SwigluInput sw : {SwigluInput::fp32, SwigluInput::follow_fc1}) {
          if (defer && std::string(recipe) == "bf16") continue;  // bf16 defers nothing
          SCOPED_TRACE(std::string(recipe) + (defer ? " defer" : "") + (moe ? " moe" : "") +
                       " swiglu " + swiglu_input_name(sw));
          TokenBatch b = make_batch(2, 8, 23);
          GPT evald(tiny(moe), recipe_resolver(recipe, defer), 8);
          GPT plain(tiny(moe), recipe_resolver(recipe, defer), 8);
          evald.set_swiglu_input(sw);
          plain.set_swiglu_input(sw);
          const float l_eval = evald.forward_loss(b.tokens.data(), b.targets.data(), 2, 8);
          const size_t held_eval = evald.last_held_bytes();
          const float l_train =
              evald.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
          const size_t held_train = evald.last_held_bytes();
          EXPECT_EQ(l_eval, l_train);
          if (!defer) EXPECT_LT(held_eval, held_train);
          EXPECT_EQ(plain.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f),
                    l_train);
          EXPECT_TRUE(same_bytes(all_grads(evald), all_grads(plain)));
        }
}

// What the whole model saves between forward and backward, to the byte. Every recipe keeps
// the same FP32 activations for its elementwise ops; the Linears' inputs differ:
//   bf16: a BF16 copy; mxfp8 (defer off): the FP8 colwise copy plus the weight's colwise copy;
//   mxfp8 (defer on): the FP32 input itself and nothing quantized.
// An extra copy of any Linear input (an FP32 buffer kept next to the FP8 one, say) breaks the
// differences below.
TEST(GPT, HeldBytesAreExactlyTheRecipesSavedCopies) {
  const int B = 4, T = 8;
  const int64_t N = int64_t(B) * T;
  TokenBatch b = make_batch(B, T, 29);
  GPT bf(tiny(false), recipe_resolver("bf16"), 3);
  GPT off(tiny(false), recipe_resolver("mxfp8", false), 3);
  GPT on(tiny(false), recipe_resolver("mxfp8", true), 3);
  bf.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
  off.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
  on.forward_backward(b.tokens.data(), b.targets.data(), B, T, 1.f);
  int64_t bf_minus_off = 0, on_minus_off = 0;
  for (const ModuleInfo& m : bf.quantizable_modules()) {
    const Linear* l = bf.linear(m.module);
    ASSERT_NE(l, nullptr) << m.module;
    const int64_t in = l->in_features(), out = l->out_features();
    const int64_t x_col = N * in + ceil_div(N, 32) * in;      // FP8 codes + E8M0 scales
    const int64_t w_col = out * in + ceil_div(out, 32) * in;  // backward-only weight copy
    bf_minus_off += 2 * N * in - x_col - w_col;
    // defer: no colwise weight yet at forward, and the FP32 input kept by the model — except
    // proj's input, the attention output, which the model keeps in every recipe (attention's
    // backward reads it).
    const bool attn_out = m.module.ends_with(".attention.proj");
    on_minus_off += (attn_out ? 0 : 4 * N * in) - x_col - w_col;
  }
  EXPECT_EQ(int64_t(bf.last_held_bytes()) - int64_t(off.last_held_bytes()), bf_minus_off);
  EXPECT_EQ(int64_t(on.last_held_bytes()) - int64_t(off.last_held_bytes()), on_minus_off);
  EXPECT_EQ(bf.activation_bytes(), off.activation_bytes());  // FP32 Linear inputs: atty only
}

TEST(GPT, ForwardLossLeavesGradientsAlone) {
  GPT m(tiny(true), recipe_resolver("bf16"), 8);
  TokenBatch b = make_batch(2, 8, 23);
  m.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 1.f);
  const auto g = all_grads(m);
  const float l1 = m.forward_loss(b.tokens.data(), b.targets.data(), 2, 8);
  const float l2 = m.forward_loss(b.tokens.data(), b.targets.data(), 1, 8);  // smaller batch
  EXPECT_TRUE(same_bytes(g, all_grads(m)));
  EXPECT_TRUE(std::isfinite(l1) && std::isfinite(l2));
  // A smaller micro-batch after a larger one reuses the buffers.
  const float l3 = m.forward_backward(b.tokens.data(), b.targets.data(), 1, 8, 1.f);
  EXPECT_EQ(l2, l3);
}

TEST(GPT, ModuleHookReportsForwardAndBackwardOrder) {
  GPT m(tiny(true), recipe_resolver("bf16"), 3);
  std::vector<std::string> seen;
  m.set_module_hook([&](const std::string& module, ModuleEvent e) {
    const char* tag = e == ModuleEvent::forward_done     ? "F "
                      : e == ModuleEvent::backward_start ? "S "
                                                         : "B ";
    seen.push_back(tag + module);
  });
  TokenBatch b = make_batch(1, 8, 31);
  m.forward_backward(b.tokens.data(), b.targets.data(), 1, 8, 1.f);
  std::vector<std::string> want;
  const auto mods = m.quantizable_modules();
  for (const auto& i : mods) want.push_back("F " + i.module);
  // Backward: reverse order, each module's start before its end, except that an MoE block
  // starts both expert layers (fc2, fc1) before either ends (they run in one call).
  for (auto it = mods.rbegin(); it != mods.rend(); ++it) {
    const bool expert_fc2 = it->module.find("experts.fc2") != std::string::npos;
    if (expert_fc2) {
      const std::string fc1 = std::next(it)->module;
      want.insert(want.end(), {"S " + it->module, "S " + fc1, "B " + it->module, "B " + fc1});
      ++it;
      continue;
    }
    want.insert(want.end(), {"S " + it->module, "B " + it->module});
  }
  EXPECT_EQ(seen, want);
}

// Under FSDP a layer's Parameter::value is emptied and a weight provider supplies the gathered
// copy while Parameter::grad stays full-size. The model must use the provider and leave the
// gradient buffer alone (it accumulates over micro-batches): same loss and gradients, bit for
// bit, as the plain model.
TEST(GPT, WorksWithProviderSuppliedWeights) {
  TokenBatch b = make_batch(2, 8, 37);
  GPT plain(tiny(false), recipe_resolver("bf16"), 9), fsdp(tiny(false), recipe_resolver("bf16"), 9);
  Linear* head = fsdp.linear("lm_head");
  ASSERT_NE(head, nullptr);
  const FloatBuffer full = head->weight.value;
  head->set_weight_provider([full](Use, QuantizedWeight& c) {
    c.bf16.resize(full.size());
    f32_to_bf16_array(full.data(), c.bf16.data(), int64_t(full.size()));
    c.present |= {Copy::bf16};
  });
  FloatBuffer().swap(head->weight.value);
  for (int micro = 0; micro < 2; ++micro) {  // gradients accumulate across micro-batches
    const float l1 = plain.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 0.5f);
    const float l2 = fsdp.forward_backward(b.tokens.data(), b.targets.data(), 2, 8, 0.5f);
    EXPECT_EQ(l1, l2);
  }
  EXPECT_TRUE(head->weight.value.empty());
  EXPECT_TRUE(same_bytes(all_grads(plain), all_grads(fsdp)));
}

}  // namespace
}  // namespace mxtrain
