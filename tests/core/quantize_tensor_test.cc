// tests/core/quantize_tensor_test.cc — one FP32 scale for the whole tensor (docs/numerics.md,
// "Per-tensor FP32 scaling"): the scale rule, hand-computed tensors, the given-scale variant,
// dequantize, the API's errors, and every fast kernel byte-equal to the scalar reference on
// awkward shapes, with any thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/mx_test_data.h"
#include "core/quantize_compare.h"
#include "mxtrain/common.h"
#include "mxtrain/isa.h"
#include "mxtrain/quantize.h"

namespace mxtrain {
namespace {

using testdata::expect_same;
using testdata::PathGuard;

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

float scale_inv(const ScaledTensor& t) {
  EXPECT_EQ(t.scales.size(), 4u);
  float v;
  std::memcpy(&v, t.scales.data(), 4);
  return v;
}

std::vector<uint8_t> codes(const ScaledTensor& t) { return {t.data.begin(), t.data.end()}; }

TEST(QuantizeTensor, ScaleRule) {
  const TensorQuantConfig c{};
  // 448 / 5 = 89.6 in FP32 (0x42B33333): not rounded to a power of two.
  EXPECT_EQ(f32_bits(tensor_scale(5.f, c)), 0x42B33333u);
  EXPECT_EQ(f32_bits(tensor_scale(3.f, c)), 0x43155555u);  // 149.33333
  EXPECT_EQ(f32_bits(tensor_scale(5.f, {Elem::e5m2, 0.f})), 0x46333333u);  // 57344 / 5
  EXPECT_EQ(tensor_scale(0.f, c), 1.f);
  EXPECT_EQ(tensor_scale(kInf, c), 1.f);
  EXPECT_EQ(f32_bits(tensor_scale(0.f, {Elem::e4m3, 1e-6f})), 0x4dd59f80u);  // 448 / 1e-6
  EXPECT_EQ(f32_bits(tensor_scale(1e-10f, {Elem::e4m3, 1e-6f})), 0x4dd59f80u);
  EXPECT_EQ(tensor_scale(2.f, {Elem::e4m3, 1e-6f}), 224.f);
  EXPECT_EQ(tensor_scale(std::ldexp(1.f, -149), c), FLT_MAX);  // 448 / 2^-149 overflows
  EXPECT_THROW(tensor_scale(1.f, {Elem::e4m3, -1.f}), Error);
}

TEST(QuantizeTensor, HandComputedTensor) {
  // 2x3, amax 5 (NaN ignored) -> scale 89.6 (0x42B33333), scale_inv 0x3C36DB6E:
  // 5 -> 448 (0x7E), 1 -> 89.6 -> 88 (0x6B), -2.5 -> -224 (0xF6), 0 -> 0, NaN -> 0x7F,
  // -5 -> -448 (0xFE).
  const std::vector<float> x{5.f, 1.f, -2.5f, 0.f, kNaN, -5.f};
  ScaledTensor t;
  EXPECT_EQ(quantize_tensor_scaled(x.data(), 2, 3, {}, t), 5.f);
  EXPECT_EQ(t.rows, 2);
  EXPECT_EQ(t.cols, 3);
  EXPECT_EQ(t.layout, MXLayout::tile);
  EXPECT_EQ(t.scale_type, ScaleType::fp32);
  EXPECT_EQ(t.block, 0);
  EXPECT_TRUE(t.is_fp32_tensor());
  EXPECT_FALSE(t.is_mx());
  EXPECT_FALSE(t.is_fp32_blocks());
  EXPECT_EQ(t.scale_rows(), 1);
  EXPECT_EQ(t.scale_cols(), 1);
  EXPECT_EQ(codes(t), (std::vector<uint8_t>{0x7E, 0x6B, 0xF6, 0x00, 0x7F, 0xFE}));
  EXPECT_EQ(f32_bits(scale_inv(t)), 0x3C36DB6Eu);
  // E5M2: scale 11468.8 (0x46333333); 1 -> 12288 (0x72), 5 -> 57344 (0x7B).
  EXPECT_EQ(quantize_tensor_scaled(x.data(), 2, 3, {Elem::e5m2, 0.f}, t), 5.f);
  EXPECT_EQ(t.elem, Elem::e5m2);
  EXPECT_EQ(int(t.data[0]), 0x7B);
  EXPECT_EQ(int(t.data[1]), 0x72);
  EXPECT_EQ(f32_bits(scale_inv(t)), 0x38B6DB6Eu);
  // An Inf anywhere: amax Inf -> scale 1; Inf saturates, the rest casts unscaled.
  const std::vector<float> inf{kInf, 1.f, -kInf, 500.f};
  EXPECT_EQ(quantize_tensor_scaled(inf.data(), 1, 4, {}, t), kInf);
  EXPECT_EQ(codes(t), (std::vector<uint8_t>{0x7E, 0x38, 0xFE, 0x7E}));
  EXPECT_EQ(scale_inv(t), 1.f);
  // All zeros: scale 1; with epsilon 1e-6 the scale is 448 / 1e-6.
  const std::vector<float> zeros(7, 0.f);
  quantize_tensor_scaled(zeros.data(), 7, 1, {}, t);
  EXPECT_EQ(scale_inv(t), 1.f);
  EXPECT_EQ(codes(t), std::vector<uint8_t>(7, 0));
  quantize_tensor_scaled(zeros.data(), 7, 1, {Elem::e4m3, 1e-6f}, t);
  EXPECT_EQ(scale_inv(t), 1.f / bits_f32(0x4dd59f80u));
  // Empty tensor: one scale (1), no codes.
  EXPECT_EQ(quantize_tensor_scaled(static_cast<const float*>(nullptr), 0, 5, {}, t), 0.f);
  EXPECT_EQ(t.data.size(), 0u);
  EXPECT_EQ(scale_inv(t), 1.f);
}

TEST(QuantizeTensor, GivenScale) {
  // Scale 2 (not from this tensor's amax): 1 -> 2 (0x40), 300 -> 600 saturates to 448
  // (0x7E), -0.75 -> -1.5 (0xBC); scale_inv 0.5; the returned amax is the tensor's, 300.
  const std::vector<float> x{1.f, 300.f, -0.75f};
  ScaledTensor t;
  EXPECT_EQ(quantize_tensor_given_scale(x.data(), 1, 3, Elem::e4m3, 2.f, t), 300.f);
  EXPECT_EQ(codes(t), (std::vector<uint8_t>{0x40, 0x7E, 0xBC}));
  EXPECT_EQ(scale_inv(t), 0.5f);
  EXPECT_TRUE(t.is_fp32_tensor());
  // The current scale given explicitly gives the current bytes.
  const std::vector<float> y = testdata::awkward_matrix(33, 31, 3, false);
  ScaledTensor cur, given;
  const float amax = quantize_tensor_scaled(y.data(), 33, 31, {}, cur);
  EXPECT_EQ(quantize_tensor_given_scale(y.data(), 33, 31, Elem::e4m3, tensor_scale(amax, {}),
                                        given),
            amax);
  expect_same(given, cur, "given = current scale");
  for (float bad : {0.f, -1.f, kInf, kNaN})
    EXPECT_THROW(quantize_tensor_given_scale(x.data(), 1, 3, Elem::e4m3, bad, t), Error) << bad;
}

TEST(QuantizeTensor, DequantizeIsCodeTimesScaleInv) {
  const std::vector<float> x = testdata::awkward_matrix(37, 129, 11);
  for (Elem e : {Elem::e4m3, Elem::e5m2}) {
    ScaledTensor t;
    quantize_tensor_scaled(x.data(), 37, 129, {e, 0.f}, t);
    std::vector<float> out(x.size());
    dequantize(t, out.data());
    const float inv = scale_inv(t);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = fp8_to_f32(t.data[i], e) * inv;
      if (std::isnan(want))
        ASSERT_EQ(f32_bits(out[i]), 0x7FC00000u) << i;
      else
        ASSERT_EQ(f32_bits(out[i]), f32_bits(want)) << i;
    }
  }
}

TEST(QuantizeTensor, ApiErrors) {
  ScaledTensor t;
  const float one = 1.f;
  EXPECT_THROW(quantize_tensor_scaled(&one, -1, 1, {}, t), Error);
  EXPECT_THROW(quantize_tensor_scaled(static_cast<const float*>(nullptr), 1, 1, {}, t), Error);
  EXPECT_THROW(quantize_tensor_scaled(&one, 1, 1, {Elem::e4m3, -1.f}, t), Error);
  EXPECT_THROW(quantize_tensor_scaled(&one, 1, 1, {Elem::e4m3, kInf}, t), Error);
  // A per-tensor copy is not an MX copy: the MX-only functions refuse it.
  quantize_tensor_scaled(&one, 1, 1, {}, t);
  uint16_t b;
  EXPECT_THROW(dequantize_bf16(t, &b), Error);
  EXPECT_THROW(t.scale_at(0, 0), Error);
}

// ---- fast paths against the scalar reference ----

struct Shape {
  int64_t M, K;
};

std::vector<Shape> shapes() {
  std::vector<Shape> s;
  for (int64_t M : {1, 31, 128, 257})
    for (int64_t K : {1, 31, 33, 127, 128, 129, 255, 257}) s.push_back({M, K});
  s.push_back({33, 1});
  s.push_back({127, 255});
  s.push_back({129, 3});
  return s;
}

// Inputs of three kinds: awkward values without and with NaN/Inf, and a normal spread.
std::vector<std::vector<float>> inputs(int64_t M, int64_t K) {
  std::mt19937 rng(uint32_t(M * 1000 + K));
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> n(size_t(M * K));
  for (float& v : n) v = nd(rng);
  return {testdata::awkward_matrix(M, K, uint32_t(M * 131 + K), false),
          testdata::awkward_matrix(M, K, uint32_t(M * 7 + K)), n};
}

// Current scale with each config and a given scale, f32 and bf16 input.
template <class T>
std::vector<ScaledTensor> run_tensor(const std::vector<T>& x, int64_t M, int64_t K) {
  std::vector<ScaledTensor> o;
  for (TensorQuantConfig c : {TensorQuantConfig{Elem::e4m3, 0.f},
                              TensorQuantConfig{Elem::e5m2, 0.f},
                              TensorQuantConfig{Elem::e4m3, 1e-3f}}) {
    o.emplace_back();
    quantize_tensor_scaled(x.data(), M, K, c, o.back());
  }
  o.emplace_back();
  quantize_tensor_given_scale(x.data(), M, K, Elem::e5m2, 3.7f, o.back());
  return o;
}

template <class T>
void expect_same_all(const std::vector<ScaledTensor>& got, const std::vector<ScaledTensor>& want,
                     const std::string& what, const T*) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    expect_same(got[i], want[i], what + " setting #" + std::to_string(i));
}

TEST(QuantizeTensorPaths, EveryIsaMatchesScalarReference) {
  PathGuard guard;
  for (auto [M, K] : shapes()) {
    for (const std::vector<float>& x : inputs(M, K)) {
      const std::vector<uint16_t> xb = testdata::to_bf16(x);
      set_isa(Isa::scalar);
      const auto ref = run_tensor(x, M, K), ref_b = run_tensor(xb, M, K);
      const float amax_ref = tensor_amax(x.data(), M * K);
      for (Isa isa : supported_isas()) {
        if (isa == Isa::scalar) continue;
        set_isa(isa);
        const std::string w = std::string(isa_name(isa)) + " " + std::to_string(M) + "x" +
                              std::to_string(K);
        expect_same_all(run_tensor(x, M, K), ref, w + " f32", x.data());
        expect_same_all(run_tensor(xb, M, K), ref_b, w + " bf16", xb.data());
        EXPECT_EQ(f32_bits(tensor_amax(x.data(), M * K)), f32_bits(amax_ref)) << w;
      }
    }
  }
}

TEST(QuantizeTensorPaths, AmaxIgnoresNaNAndBf16EqualsItsFp32Value) {
  PathGuard guard;
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    // NaN at every lane position of a 33-element vector, the max at the last element.
    for (int64_t pos = 0; pos < 33; ++pos) {
      std::vector<float> x(33, 0.5f);
      x[size_t(pos)] = kNaN;
      x[32] = pos == 32 ? kNaN : -7.f;
      EXPECT_EQ(tensor_amax(x.data(), 33), pos == 32 ? 0.5f : 7.f) << isa_name(isa) << pos;
    }
    const std::vector<uint16_t> xb = testdata::to_bf16(testdata::awkward_matrix(129, 257, 5));
    std::vector<float> xw(xb.size());
    for (size_t i = 0; i < xb.size(); ++i) xw[i] = bf16_to_f32(xb[i]);
    expect_same_all(run_tensor(xb, 129, 257), run_tensor(xw, 129, 257), isa_name(isa),
                    xb.data());
  }
}

TEST(QuantizeTensorPaths, ThreadsDoNotMatter) {
  PathGuard guard;
  const int saved = omp_get_max_threads();
  const int64_t M = 700, K = 300;  // 210000 elements: several 2^16 chunks, split over threads
  const std::vector<float> x = testdata::awkward_matrix(M, K, 17, false);
  for (Isa isa : supported_isas()) {
    set_isa(isa);
    omp_set_num_threads(1);
    const auto one = run_tensor(x, M, K);
    for (int nt : {2, 3}) {
      omp_set_num_threads(nt);
      expect_same_all(run_tensor(x, M, K), one,
                      std::string(isa_name(isa)) + " " + std::to_string(nt) + " threads",
                      x.data());
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace mxtrain
