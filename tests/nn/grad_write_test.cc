// tests/nn/grad_write_test.cc — Accum::write (nn/ops.h) and Parameter::clear_grad()
// (nn/parameter.h): a gradient output written by its first producer holds exactly what a
// zero fill followed by an add would, whatever the buffer held before (NaN here, so a read of
// the old contents shows up), for every backward op with a write mode, on the dispatched and
// the scalar kernels and awkward sizes; and a whole model trained with clear_grad() over
// poisoned gradients gives the bytes of one trained with zero_grad().
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/ops.h"
#include "mxtrain/nn/transformer.h"
#include "nn/finite_diff.h"
#include "nn/layer_test_util.h"
#include "nn/ops_kernels.h"

namespace mxtrain {
namespace {

using layer_test::same_bytes;
using testing_nn::random_vector;

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// run(out, mode) for both modes: write over NaN must equal add into zeros, bit for bit.
void expect_write_is_zero_then_add(size_t n, const std::function<void(float*, Accum)>& run,
                                   const std::string& what) {
  std::vector<float> added(n, 0.f), written(n, kNaN);
  run(added.data(), Accum::add);
  run(written.data(), Accum::write);
  EXPECT_TRUE(same_bytes(added, written)) << what;
}

TEST(AccumWrite, OpsWriteWhatZeroFillThenAddGives) {
  for (const int64_t N : {1, 31, 33, 257})
    for (const int64_t D : {1, 17, 64, 129}) {
      const std::string shape = " N=" + std::to_string(N) + " D=" + std::to_string(D);
      const auto x = random_vector(N * D, 1), dout = random_vector(N * D, 2);
      const auto gain = random_vector(D, 3, 0.5f, 1.5f), rstd = random_vector(N, 4, 0.5f, 2.f);
      const auto a = random_vector(N * 2 * D, 5, -6.f, 6.f), dh = random_vector(N * D, 6);
      std::vector<float> scratch(N * D), dgain(D, 0.f);
      for (const bool scalar : {false, true}) {
        const std::string path = scalar ? " scalar" : " dispatched";
        auto rms = scalar ? ref::rmsnorm_backward : rmsnorm_backward;
        auto swi = scalar ? ref::swiglu_backward : swiglu_backward;
        auto emb = scalar ? ref::embedding_backward : embedding_backward;
        expect_write_is_zero_then_add(N * D, [&](float* o, Accum m) {
          rms(o, dgain.data(), dout.data(), x.data(), gain.data(), rstd.data(), N, D, m,
              Accum::add);
        }, "rmsnorm dx" + shape + path);
        expect_write_is_zero_then_add(D, [&](float* o, Accum m) {
          rms(scratch.data(), o, dout.data(), x.data(), gain.data(), rstd.data(), N, D,
              Accum::add, m);
        }, "rmsnorm dgain" + shape + path);
        expect_write_is_zero_then_add(N * 2 * D, [&](float* o, Accum m) {
          swi(o, dh.data(), a.data(), N, D, m);
        }, "swiglu" + shape + path);
        const int64_t V = 7;
        std::vector<int32_t> tok(N);
        for (int64_t i = 0; i < N; ++i) tok[i] = int32_t((i * 5) % 6);  // row 6 never touched
        expect_write_is_zero_then_add(V * D, [&](float* o, Accum m) {
          emb(o, dout.data(), tok.data(), N, V, D, m);
        }, "embedding" + shape + path);
      }
    }
}

TEST(AccumWrite, MoEOpsWriteWhatZeroFillThenAddGives) {
  for (const int64_t N : {1, 33}) {
    const int64_t E = 5, k = 2, D = 19;
    const auto logits = random_vector(N * E, 7, -2.f, 2.f);
    MoERouting r;
    moe_route(r, logits.data(), N, E, k);
    const auto dy = random_vector(N * D, 8), yp = random_vector(N * k * D, 9);
    const auto dxp = random_vector(N * k * D, 10), x = random_vector(N * D, 11);
    const auto w = random_vector(E * D, 12), dl = random_vector(N * E, 13);
    std::vector<float> dgate(N * k, 0.f), dyp(N * k * D, 0.f);
    const std::string shape = " N=" + std::to_string(N);
    expect_write_is_zero_then_add(N * k * D, [&](float* o, Accum m) {
      moe_combine_backward(o, dgate.data(), dy.data(), yp.data(), r, D, m);
    }, "combine dyp" + shape);
    expect_write_is_zero_then_add(N * k, [&](float* o, Accum m) {
      moe_combine_backward(dyp.data(), o, dy.data(), yp.data(), r, D, m);
    }, "combine dgate" + shape);
    expect_write_is_zero_then_add(N * D, [&](float* o, Accum m) {
      moe_permute_backward(o, dxp.data(), r, D, m);
    }, "permute" + shape);
    expect_write_is_zero_then_add(E * D, [&](float* o, Accum m) {
      router_logits_backward(nullptr, o, dl.data(), x.data(), w.data(), N, D, E, m);
    }, "router dw" + shape);
  }
}

// ---- the model ------------------------------------------------------------------------------

std::vector<int32_t> ids(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = int32_t(rng() % 256);
  return v;
}

TEST(ClearGrad, TwoMicroBatchesOverPoisonedGradientsMatchZeroFilledOnes) {
  struct Case {
    const char* recipe;
    bool defer, fp32_ref;
  };
  for (const Case& c : {Case{"bf16", false, false}, Case{"mxfp8", false, false},
                        Case{"mxfp8", true, false}, Case{"mxfp8-32x32", false, false},
                        Case{"bf16", false, true}})
    for (const bool moe : {false, true}) {
      // 8 experts and 3 tokens top-2: 6 rows, so at least 2 experts get none.
      const ModelConfig cfg =
          layer_test::tiny_model({.moe_d_ff = moe ? 24 : 0, .moe_experts = 8});
      const LinearPrecisionFn resolver = layer_test::recipe_resolver(c.recipe, c.defer);
      GPT eager(cfg, resolver, 3), lazy(cfg, resolver, 3);
      eager.set_fp32_reference(c.fp32_ref);
      lazy.set_fp32_reference(c.fp32_ref);
      // One sequence of 3 tokens, so experts without rows occur (their gradient is written 0).
      const int B = 1, T = 3;
      const auto t0 = ids(B * T, 1), y0 = ids(B * T, 2), t1 = ids(B * T, 3), y1 = ids(B * T, 4);
      const auto t2 = ids(B * T, 5), y2 = ids(B * T, 6);
      // The lazy model's scratch buffers and gradients hold an earlier batch's values.
      lazy.forward_backward(t0.data(), y0.data(), B, T, 1.f);
      for (Parameter* p : lazy.parameters()) std::fill(p->grad.begin(), p->grad.end(), kNaN);
      lazy.clear_grad();
      eager.zero_grad();
      for (GPT* m : {&eager, &lazy}) {
        m->forward_backward(t1.data(), y1.data(), B, T, 1.f);
        m->forward_backward(t2.data(), y2.data(), B, T, 1.f);
      }
      const std::string what = std::string(c.recipe) + (c.defer ? " defer" : "") +
                               (c.fp32_ref ? " fp32-ref" : "") + (moe ? " MoE" : "");
      for (size_t i = 0; i < eager.parameters().size(); ++i) {
        const Parameter& a = *eager.parameters()[i];
        const Parameter& b = *lazy.parameters()[i];
        EXPECT_TRUE(same_bytes(a.grad, b.grad)) << what << ": " << a.name;
        EXPECT_TRUE(b.grad_live) << what << ": " << b.name;
      }
    }
}

}  // namespace
}  // namespace mxtrain
