// core/quantize_fp4.cc — 4-bit quantization API (NVFP4, MXFP4) and the random Hadamard
// transform: argument checks, the per-tensor scale, dispatch, threading (mxtrain/quantize.h;
// docs/numerics.md, "4-bit formats").
//
// API -> here -> kernels (quantize_fp4_kernels.h) through one PathTable. The per-tensor amax
// is an integer max of |x| bits over 2^16-element chunks (exact, so the split does not
// matter); the blocks are split over OpenMP threads in whole strips of B rows or column ranges
// that are multiples of B (core/quantize_split.h), and the transform in groups of 16 rows:
// nothing depends on the thread count.
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <type_traits>

#include "core/dispatch.h"
#include "core/quantize_fp4_kernels.h"
#include "core/quantize_split.h"
#include "mxtrain/common.h"

namespace mxtrain {

namespace {

using namespace kern;

const PathTable<Fp4QuantizeKernels>& fp4_table() {
  static const PathTable<Fp4QuantizeKernels> t(
      "quantize 4-bit (NVFP4, MXFP4) and RHT",
      {{Path::scalar, "quantize_fp4_{rowwise,colwise,tile}_{f32,bf16}_ref, rht_rows_f32_ref",
        {quantize_fp4_rowwise_f32_ref, quantize_fp4_colwise_f32_ref, quantize_fp4_tile_f32_ref,
         quantize_fp4_rowwise_bf16_ref, quantize_fp4_colwise_bf16_ref,
         quantize_fp4_tile_bf16_ref, fp4_amax_f32_ref, fp4_amax_bf16_ref, rht_rows_f32_ref,
         nullptr, nullptr}},
       {Path::avx512,
        "quantize_fp4_{rowwise,colwise,tile}_{f32,bf16}_avx512 (the colwise ones transform "
        "as they read), rht_rows_f32_avx512, fp4_rht_amax_{f32,bf16}_avx512",
        {quantize_fp4_rowwise_f32_avx512, quantize_fp4_colwise_f32_avx512,
         quantize_fp4_tile_f32_avx512, quantize_fp4_rowwise_bf16_avx512,
         quantize_fp4_colwise_bf16_avx512, quantize_fp4_tile_bf16_avx512, fp4_amax_f32_avx512,
         fp4_amax_bf16_avx512, rht_rows_f32_avx512, fp4_rht_amax_f32_avx512,
         fp4_rht_amax_bf16_avx512}}});
  return t;
}

constexpr int64_t kChunk = int64_t(1) << 16;

// TransformerEngine's wgrad sign vector.
constexpr float kSigns[kRhtSize] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};

void check_input(const void* x, int64_t M, int64_t K, const char* what) {
  MXT_CHECK(M >= 0 && K >= 0, what, ": shape must be non-negative, got ", M, "x", K);
  int64_t n = 0;
  MXT_CHECK(!__builtin_mul_overflow(M, K, &n) && n <= (int64_t(1) << 48), what, ": shape ", M,
            "x", K, " is too large (", M, " * ", K, " elements exceed 2^48)");
  MXT_CHECK(x != nullptr || n == 0, what, ": input pointer is null for a ", M, "x", K,
            " tensor");
}

template <class T>
uint32_t amax_bits(const T* x, int64_t n) {
  const Fp4QuantizeKernels& k = fp4_table().get();
  const int64_t chunks = ceil_div(n, kChunk);
  uint32_t ab = 0;
#pragma omp parallel for schedule(static) reduction(max : ab) if (n >= kParallelMin)
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t len = std::min(kChunk, n - i * kChunk);
    uint32_t a;
    if constexpr (std::is_same_v<T, float>)
      a = k.amax_f32(x + i * kChunk, len);
    else
      a = k.amax_bf16(x + i * kChunk, len);
    ab = std::max(ab, a);
  }
  return ab;
}

// Makes `t` an M x K 4-bit copy with that layout, reusing its buffers.
void reshape(ScaledTensor& t, int64_t M, int64_t K, MXLayout layout, Fp4Kind kind) {
  t.rows = M;
  t.cols = K;
  t.layout = layout;
  t.elem = Elem::e2m1;
  t.scale_type = kind == Fp4Kind::nvfp4 ? ScaleType::e4m3 : ScaleType::e8m0;
  t.block = fp4_block(kind);
  t.has_tensor_scale = false;
  t.tensor_scale = 1.f;
  t.rht = false;
  t.data.resize(t.data_bytes());
  t.scales.resize(t.scale_bytes());
}

uint32_t copy_index(MXLayout l) {
  return l == MXLayout::rowwise ? 0u : l == MXLayout::colwise ? 1u : 2u;
}

Fp4Params params(int64_t M, int64_t K, MXLayout layout, const Fp4Config& cfg) {
  Fp4Params p{};
  p.M = M;
  p.K = K;
  p.kind = cfg.kind;
  p.B = fp4_block(cfg.kind);
  p.rounding = cfg.rounding;
  p.mode = TensorScaleMode::none;
  p.p = 1.f;
  p.inv_p = 1.f;
  p.te_mult = 1.f;
  p.te_sdec = 1.f;
  p.nan_fill = 4;
  p.stochastic = cfg.stochastic;
  p.seed = cfg.sr.seed;
  p.step = cfg.sr.step;
  p.tensor = cfg.sr.tensor;
  p.copy = copy_index(layout);
  p.rht = false;
  return p;
}

// torchao's two-level constants for a decode scale p taken as given.
void set_torchao(Fp4Params& p, float scale) {
  p.mode = TensorScaleMode::torchao;
  p.p = scale;
  p.inv_p = 1.f / scale;
  // A NaN tensor scale makes every block NaN; torchao's elements then carry the NaN of 1 / p
  // (the canonical quiet NaN: code 3) instead of its E4M3 decode's (code 4).
  p.nan_fill = std::isnan(scale) ? 3 : 4;
}

// TransformerEngine's: S_enc = 2688 / amax (FLT_MAX at most; 1 for a zero amax or S_enc 0).
float set_te(Fp4Params& p, float amax) {
  float s_enc = (448.f * 6.f) / amax;
  if (s_enc > FLT_MAX) s_enc = FLT_MAX;
  if (amax == 0.f || s_enc == 0.f) s_enc = 1.f;
  p.mode = TensorScaleMode::te;
  p.te_mult = s_enc * (1.f / 6.f);
  p.te_sdec = 1.f / s_enc;
  return p.te_sdec;
}

template <class T>
void run(const T* x, MXLayout layout, const Fp4Params& p, ScaledTensor& out) {
  const Fp4QuantizeKernels& k = fp4_table().get();
  const Fp4Out o{out.data.data(), out.scales.data(), out.scale_cols(), out.row_bytes()};
  void (*fn)(const T*, const Fp4Params&, Region, Fp4Out);
  if constexpr (std::is_same_v<T, float>) {
    fn = layout == MXLayout::rowwise   ? k.rowwise_f32
         : layout == MXLayout::colwise ? k.colwise_f32
                                       : k.tile_f32;
  } else {
    fn = layout == MXLayout::rowwise   ? k.rowwise_bf16
         : layout == MXLayout::colwise ? k.colwise_bf16
                                       : k.tile_bf16;
  }
  if (p.M == 0 || p.K == 0) return;
  for_each_unit(p.M, p.K, p.B, [&](Region g) { fn(x, p, g, o); });
}

// max |x| and max |T x| bits over x [M, K] (the fused kernels' tensor amaxes, from one read),
// over groups of 16 rows in parallel (exact maxima: the split does not matter).
template <class T>
AmaxBits rht_amax_bits(const T* x, int64_t M, int64_t K) {
  const Fp4QuantizeKernels& k = fp4_table().get();
  const int64_t groups = ceil_div(M, kRhtSize);
  uint32_t plain = 0, rht = 0;
#pragma omp parallel for schedule(static) reduction(max : plain, rht) if (M * K >= kParallelMin)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r0 = g * kRhtSize, r1 = std::min(M, r0 + kRhtSize);
    AmaxBits a;
    if constexpr (std::is_same_v<T, float>)
      a = k.rht_amax_f32(x, M, K, r0, r1);
    else
      a = k.rht_amax_bf16(x, M, K, r0, r1);
    plain = std::max(plain, a.plain);
    rht = std::max(rht, a.rht);
  }
  return {plain, rht};
}

// The random Hadamard transform of a strip of rows in the calling thread: x [n, K] (FP32 or
// BF16 bits) into out [n, K], group by group as rht_rows does (a last partial group copied).
template <class T>
void rht_strip_rows(const T* x, int64_t n, int64_t K, float* out) {
  const float* xf;
  if constexpr (std::is_same_v<T, float>) {
    xf = x;
  } else {
    thread_local FloatBuffer widened;  // the strip in FP32, reused
    if (widened.size() < size_t(n * K)) widened.resize(size_t(n * K));
    for (int64_t i = 0; i < n * K; ++i) widened[size_t(i)] = bf16_to_f32(x[i]);
    xf = widened.data();
  }
  const RhtF32 k = fp4_table().get().rht;
  for (int64_t g = 0; g < n; g += kRhtSize) k(xf, n, K, g, std::min(n, g + kRhtSize), out);
}

// The transform's strip of rows, per thread, reused: about kRhtStripBytes of FP32 (at least
// one group of rows), never the whole transformed matrix.
constexpr int64_t kRhtStripBytes = int64_t(1) << 20;
float* rht_strip(int64_t n) {
  thread_local FloatBuffer b;
  if (b.size() < size_t(n)) b.resize(size_t(n));
  return b.data();
}

// Region g of a strip whose first row is row s0 of the copy (a multiple of the block edge),
// in the calling thread, from `t` holding the strip's rows only (g's rows counted from the
// strip's top): the kernels index rows from the top of the matrix, so they get t's address
// moved up by s0 rows (integer arithmetic; they read only the strip's rows).
void quantize_strip(const float* t, int64_t s0, Region g, MXLayout layout, const Fp4Params& p,
                    ScaledTensor& out) {
  const Fp4QuantizeKernels& k = fp4_table().get();
  const Fp4Out o{out.data.data(), out.scales.data(), out.scale_cols(), out.row_bytes()};
  auto fn = layout == MXLayout::rowwise   ? k.rowwise_f32
            : layout == MXLayout::colwise ? k.colwise_f32
                                          : k.tile_f32;
  const float* top = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(t) -
                                                    uintptr_t(s0 * p.K) * sizeof(float));
  fn(top, p, Region{s0 + g.r0, s0 + g.r1, g.c0, g.c1}, o);
}

// The transformed matrix's amax (pass 1) or its copy (pass 2, p set), a strip at a time:
// with at least a strip per thread each thread transforms and quantizes its own strips (one
// parallel region per pass); with fewer, the strips run in turn, each split over the threads
// (rht_rows, amax_bits and the quantizer's own split). Blocks never straddle strips, so the
// bytes do not depend on the split.
template <class T>
uint32_t rht_pass(const T* x, int64_t M, int64_t K, int64_t strip, MXLayout layout,
                  const Fp4Params* p, ScaledTensor* out) {
  const int64_t strips = ceil_div(M, strip);
  uint32_t ab = 0;
  if (strips >= omp_get_max_threads() && M * K >= kParallelMin) {
    const Fp4QuantizeKernels& k = fp4_table().get();
#pragma omp parallel for schedule(static) reduction(max : ab)
    for (int64_t i = 0; i < strips; ++i) {
      const int64_t s0 = i * strip, n = std::min(strip, M - s0);
      float* t = rht_strip(n * K);
      rht_strip_rows(x + s0 * K, n, K, t);
      if (p)
        quantize_strip(t, s0, Region{0, n, 0, K}, layout, *p, *out);
      else
        ab = std::max(ab, k.amax_f32(t, n * K));
    }
    return ab;
  }
  for (int64_t s0 = 0; s0 < M; s0 += strip) {
    const int64_t n = std::min(strip, M - s0);
    float* t = rht_strip(n * K);
    rht_rows(x + s0 * K, n, K, t);
    if (p)
      for_each_unit(n, K, p->B, [&](Region g) { quantize_strip(t, s0, g, layout, *p, *out); });
    else
      ab = std::max(ab, amax_bits(t, n * K));
  }
  return ab;
}

template <class T>
float quantize_fp4_impl(const T* x, int64_t M, int64_t K, MXLayout layout, const Fp4Config& cfg,
                        ScaledTensor& out, std::optional<float> amax) {
  check_input(x, M, K, "quantize_fp4");
  MXT_CHECK(!cfg.rht || layout == MXLayout::colwise, "quantize_fp4: the random Hadamard ",
            "transform runs along the rows (tokens), for colwise copies only; got a ",
            layout_name(layout), " copy");
  MXT_CHECK(cfg.kind == Fp4Kind::nvfp4 || cfg.order == Nvfp4Order::torchao,
            "quantize_fp4: the ", nvfp4_order_name(cfg.order), " order applies to NVFP4, not ",
            fp4_kind_name(cfg.kind));
  MXT_CHECK(cfg.tensor_scale || cfg.order == Nvfp4Order::torchao,
            "quantize_fp4: TransformerEngine's order needs the per-tensor scale");
  MXT_CHECK(!amax || *amax >= 0.f || std::isnan(*amax), "quantize_fp4: the given amax must be ",
            ">= 0 (or NaN), got ", *amax);
  // The transformed copy (cfg.rht). With kernels that transform as they read (rht_amax in
  // the table), the colwise kernels take x itself (Fp4Params::rht) and the tensor amax of T x
  // comes from a pass that stores nothing. Without them (the scalar reference) the transform
  // runs a strip of rows at a time (whole groups of 16, whole blocks; rht_pass): the copy is
  // that of the whole transformed matrix quantized (rht_rows, then quantize_fp4 without rht),
  // byte for byte, but only a strip of the transformed values is held. Either way NVFP4's
  // tensor scale needs the whole transformed matrix's amax first, unless given.
  const bool fused = cfg.rht && fp4_table().get().rht_amax_f32;
  const int64_t unit = std::max(kRhtSize, fp4_block(cfg.kind));  // 16 or 32: a multiple of 16
  const int64_t strip = std::max(unit, kRhtStripBytes / int64_t(sizeof(float)) /
                                           std::max<int64_t>(K, 1) / unit * unit);
  if (cfg.rht && cfg.kind == Fp4Kind::nvfp4 && cfg.tensor_scale && !amax)
    amax = bits_f32(fused ? rht_amax_bits(x, M, K).rht
                          : K > 0 ? rht_pass(x, M, K, strip, layout, nullptr, nullptr) : 0u);
  Fp4Params p = params(M, K, layout, cfg);
  p.rht = fused;
  reshape(out, M, K, layout, cfg.kind);
  float used = 0.f;
  if (cfg.kind == Fp4Kind::nvfp4 && cfg.tensor_scale) {
    used = amax ? *amax : bits_f32(amax_bits(x, M * K));
    out.has_tensor_scale = true;
    if (cfg.order == Nvfp4Order::te) {
      out.tensor_scale = set_te(p, used);
    } else {
      out.tensor_scale = nvfp4_tensor_scale(used);
      set_torchao(p, out.tensor_scale);
    }
  }
  out.rht = cfg.rht;
  if (cfg.rht && !fused) {
    if (M > 0 && K > 0) rht_pass(x, M, K, strip, layout, &p, &out);
  } else {
    run(x, layout, p, out);
  }
  return used;
}

}  // namespace

PathChoice kern::fp4_quantize_choice() { return fp4_table().choice(); }

const char* fp4_kind_name(Fp4Kind k) { return k == Fp4Kind::nvfp4 ? "nvfp4" : "mxfp4"; }

const char* nvfp4_order_name(Nvfp4Order o) { return o == Nvfp4Order::torchao ? "torchao" : "te"; }

Nvfp4Order parse_nvfp4_order(const std::string& s) {
  if (s == "torchao") return Nvfp4Order::torchao;
  if (s == "te") return Nvfp4Order::te;
  MXT_FAIL("unknown NVFP4 scale order '", s, "'; valid choices: torchao (default), te");
}

const float* rht_signs() { return kSigns; }

float fp4_amax(const float* x, int64_t n) {
  MXT_CHECK(n >= 0 && (x != nullptr || n == 0), "fp4_amax: bad buffer (n = ", n, ")");
  return bits_f32(amax_bits(x, n));
}

namespace {

// x's amax (when `plain`) and T x's: from one read where the kernels transform as they read;
// in the scalar path x's over x, then T x's a strip of whole 16-row groups at a time (the
// maximum does not depend on the split).
Fp4Amaxes amaxes(const float* x, int64_t M, int64_t K, bool plain, const char* what) {
  check_input(x, M, K, what);
  if (M == 0 || K == 0) return {0.f, 0.f};
  if (fp4_table().get().rht_amax_f32) {
    const AmaxBits a = rht_amax_bits(x, M, K);
    return {bits_f32(a.plain), bits_f32(a.rht)};
  }
  const int64_t strip =
      std::max(kRhtSize, kRhtStripBytes / int64_t(sizeof(float)) / K / kRhtSize * kRhtSize);
  return {plain ? bits_f32(amax_bits(x, M * K)) : 0.f,
          bits_f32(rht_pass(x, M, K, strip, MXLayout::colwise, nullptr, nullptr))};
}

}  // namespace

float fp4_rht_amax(const float* x, int64_t M, int64_t K) {
  return amaxes(x, M, K, false, "fp4_rht_amax").rht;
}

Fp4Amaxes fp4_amaxes(const float* x, int64_t M, int64_t K) {
  return amaxes(x, M, K, true, "fp4_amaxes");
}

float fp4_amax(const uint16_t* x_bf16, int64_t n) {
  MXT_CHECK(n >= 0 && (x_bf16 != nullptr || n == 0), "fp4_amax: bad buffer (n = ", n, ")");
  return bits_f32(amax_bits(x_bf16, n));
}

float nvfp4_tensor_scale(float amax) {
  if (std::isnan(amax)) return amax;
  const float p = amax / (448.f * 6.f);
  return std::isnormal(p) ? p : 1.f;
}

float quantize_fp4(const float* x, int64_t M, int64_t K, MXLayout layout, const Fp4Config& cfg,
                   ScaledTensor& out, std::optional<float> amax) {
  return quantize_fp4_impl(x, M, K, layout, cfg, out, amax);
}
float quantize_fp4(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                   const Fp4Config& cfg, ScaledTensor& out, std::optional<float> amax) {
  return quantize_fp4_impl(x_bf16, M, K, layout, cfg, out, amax);
}

void quantize_nvfp4_given_scale(const float* x, int64_t M, int64_t K, MXLayout layout,
                                const Fp4Config& cfg, float tensor_scale, ScaledTensor& out) {
  check_input(x, M, K, "quantize_nvfp4_given_scale");
  MXT_CHECK(cfg.kind == Fp4Kind::nvfp4 && cfg.order == Nvfp4Order::torchao && !cfg.rht,
            "quantize_nvfp4_given_scale: NVFP4 in torchao's order, without the transform");
  Fp4Params p = params(M, K, layout, cfg);
  reshape(out, M, K, layout, cfg.kind);
  set_torchao(p, tensor_scale);
  out.has_tensor_scale = true;
  out.tensor_scale = tensor_scale;
  run(x, layout, p, out);
}

namespace {

template <class T>
void rht_impl(const T* x, int64_t M, int64_t K, float* out) {
  check_input(x, M, K, "rht_rows");
  MXT_CHECK(out != nullptr || M * K == 0, "rht_rows: output pointer is null");
  const float* xf;
  FloatBuffer widened;
  if constexpr (std::is_same_v<T, float>) {
    xf = x;
  } else {
    widened.resize(size_t(M * K));
    bf16_to_f32_array(x, widened.data(), M * K);
    xf = widened.data();
  }
  const RhtF32 k = fp4_table().get().rht;
  const int64_t groups = ceil_div(M, kRhtSize);
#pragma omp parallel for schedule(static) if (M * K >= kParallelMin)
  for (int64_t g = 0; g < groups; ++g)
    k(xf, M, K, g * kRhtSize, std::min(M, (g + 1) * kRhtSize), out);
}

}  // namespace

void rht_rows(const float* x, int64_t M, int64_t K, float* out) { rht_impl(x, M, K, out); }
void rht_rows(const uint16_t* x_bf16, int64_t M, int64_t K, float* out) {
  rht_impl(x_bf16, M, K, out);
}

}  // namespace mxtrain
