// core/quantize.cc — MX quantize/dequantize API: argument checks, dispatch, threading.
//
// API (include/mxtrain/quantize.h) -> here -> kernels (quantize_kernels.h). Each public call
// checks its arguments once, takes the kernels of its family's dispatch table (below; the
// entry core/dispatch.h picks for the enabled paths), and splits the work
// over OpenMP threads in ranges of whole 32-row strips (or, for short tensors, column
// ranges that are multiples of 32; per-tensor copies: chunks of 2^16 elements). Ranges never
// share a block and each writes its own bytes, so the result does not depend on the thread
// count or on the schedule.
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <type_traits>

#include "core/dispatch.h"
#include "core/quantize_block_kernels.h"
#include "core/quantize_fp4_kernels.h"
#include "core/quantize_kernels.h"
#include "core/quantize_split.h"
#include "mxtrain/common.h"

namespace mxtrain {

using kern::QOut;
using kern::QParams;
using kern::Region;

namespace {

// ---- dispatch tables (core/dispatch.h) -----------------------------------------------------
// avx2 has no kernels of its own here: it runs the scalar ones.

using namespace kern;

const PathTable<QuantizeKernels>& quantize_table() {
  static const PathTable<QuantizeKernels> t(
      "quantize (all layouts)",
      {{Path::scalar, "quantize_mx_{rowwise,colwise,tile32,dual}_{f32,bf16}_ref",
        {quantize_mx_rowwise_f32_ref, quantize_mx_colwise_f32_ref, quantize_mx_tile32_f32_ref,
         quantize_mx_rowwise_bf16_ref, quantize_mx_colwise_bf16_ref,
         quantize_mx_tile32_bf16_ref, quantize_mx_dual_f32_ref, quantize_mx_dual_bf16_ref}},
       {Path::avx512, "quantize_mx_{rowwise,colwise,tile32,dual}_{f32,bf16}_avx512",
        {quantize_mx_rowwise_f32_avx512, quantize_mx_colwise_f32_avx512,
         quantize_mx_tile32_f32_avx512, quantize_mx_rowwise_bf16_avx512,
         quantize_mx_colwise_bf16_avx512, quantize_mx_tile32_bf16_avx512,
         quantize_mx_dual_f32_avx512, quantize_mx_dual_bf16_avx512}},
       {Path::avx512vbmi, "quantize_mx_{rowwise,colwise,tile32,dual}_{f32,bf16}_avx512vbmi",
        {quantize_mx_rowwise_f32_avx512vbmi, quantize_mx_colwise_f32_avx512vbmi,
         quantize_mx_tile32_f32_avx512vbmi, quantize_mx_rowwise_bf16_avx512vbmi,
         quantize_mx_colwise_bf16_avx512vbmi, quantize_mx_tile32_bf16_avx512vbmi,
         quantize_mx_dual_f32_avx512vbmi, quantize_mx_dual_bf16_avx512vbmi}}});
  return t;
}

const PathTable<DequantizeKernels>& dequantize_table() {
  static const PathTable<DequantizeKernels> t(
      "dequantize (to fp32 / bf16)",
      {{Path::scalar, "dequantize_mx_{f32,bf16}_ref",
        {dequantize_mx_f32_ref, dequantize_mx_bf16_ref}},
       {Path::avx512, "dequantize_mx_{f32,bf16}_avx512",
        {dequantize_mx_f32_avx512, dequantize_mx_bf16_avx512}}});
  return t;
}

const PathTable<ConvertKernels>& convert_table() {
  static const PathTable<ConvertKernels> t(
      "fp32 <-> bf16 arrays",
      {{Path::scalar, "convert_{f32_to_bf16,bf16_to_f32}_ref",
        {convert_f32_to_bf16_ref, convert_bf16_to_f32_ref}},
       {Path::avx512, "convert_{f32_to_bf16,bf16_to_f32}_avx512",
        {convert_f32_to_bf16_avx512, convert_bf16_to_f32_avx512}}});
  return t;
}

const PathTable<NonFinite>& nonfinite_table() {
  static const PathTable<NonFinite> t(
      "non-finite scan",
      {{Path::scalar, "has_nonfinite_f32_ref", has_nonfinite_f32_ref},
       {Path::avx512, "has_nonfinite_f32_avx512", has_nonfinite_f32_avx512}});
  return t;
}

const PathTable<BlockQuantizeKernels>& block_quantize_table() {
  static const PathTable<BlockQuantizeKernels> t(
      "quantize FP32-scaled 128 blocks (all layouts)",
      {{Path::scalar, "quantize_b128_{rowwise,colwise,tile,dual}_{f32,bf16}_ref",
        {quantize_b128_rowwise_f32_ref, quantize_b128_colwise_f32_ref, quantize_b128_tile_f32_ref,
         quantize_b128_rowwise_bf16_ref, quantize_b128_colwise_bf16_ref,
         quantize_b128_tile_bf16_ref, quantize_b128_dual_f32_ref, quantize_b128_dual_bf16_ref}},
       {Path::avx512, "quantize_b128_{rowwise,colwise,tile,dual}_{f32,bf16}_avx512",
        {quantize_b128_rowwise_f32_avx512, quantize_b128_colwise_f32_avx512,
         quantize_b128_tile_f32_avx512, quantize_b128_rowwise_bf16_avx512,
         quantize_b128_colwise_bf16_avx512, quantize_b128_tile_bf16_avx512,
         quantize_b128_dual_f32_avx512, quantize_b128_dual_bf16_avx512}}});
  return t;
}

const PathTable<BDequantF32>& block_dequantize_table() {
  static const PathTable<BDequantF32> t(
      "dequantize FP32-scaled 128 blocks (to fp32)",
      {{Path::scalar, "dequantize_b128_f32_ref", dequantize_b128_f32_ref}});
  return t;
}

const PathTable<TensorScaleKernels>& tensor_scale_table() {
  static const PathTable<TensorScaleKernels> t(
      "quantize with one FP32 scale per tensor (amax, cast)",
      {{Path::scalar, "tensor_{amax,cast}_{f32,bf16}_ref",
        {tensor_amax_f32_ref, tensor_amax_bf16_ref, tensor_cast_f32_ref, tensor_cast_bf16_ref}},
       {Path::avx512, "tensor_{amax,cast}_{f32,bf16}_avx512",
        {tensor_amax_f32_avx512, tensor_amax_bf16_avx512, tensor_cast_f32_avx512,
         tensor_cast_bf16_avx512}}});
  return t;
}

}  // namespace

std::vector<PathChoice> kern::quantize_path_choices() {
  return {quantize_table().choice(),       dequantize_table().choice(),
          block_quantize_table().choice(), block_dequantize_table().choice(),
          tensor_scale_table().choice(),   fp4_quantize_choice(),
          convert_table().choice(),        nonfinite_table().choice()};
}

const char* rounding_name(ScaleRounding r) { return r == ScaleRounding::rceil ? "rceil" : "floor"; }

ScaleRounding parse_rounding(const char* name) {
  const std::string n = name ? name : "";
  if (n == "rceil") return ScaleRounding::rceil;
  if (n == "floor") return ScaleRounding::floor;
  MXT_FAIL("unknown scale rounding '", n, "'; valid choices: rceil (default), floor");
}

const char* layout_name(MXLayout l) {
  switch (l) {
    case MXLayout::rowwise: return "rowwise";
    case MXLayout::colwise: return "colwise";
    case MXLayout::tile: return "tile";
  }
  return "?";
}

int64_t ScaledTensor::scale_rows() const {
  if (block == 0) return 1;  // one scale for the tensor
  return layout == MXLayout::rowwise ? rows : ceil_div(rows, block);
}
int64_t ScaledTensor::scale_cols() const {
  if (block == 0) return 1;
  return layout == MXLayout::colwise ? cols : ceil_div(cols, block);
}
size_t ScaledTensor::scale_bytes() const {
  return size_t(scale_rows() * scale_cols()) * size_t(scale_type_bytes(scale_type));
}

uint8_t ScaledTensor::scale_at(int64_t r, int64_t c) const {
  MXT_CHECK(is_mx(), "scale_at: the copy holds ", scale_type_name(scale_type), " scales per ",
            block, "-element block, not E8M0 per 32");
  MXT_CHECK(r >= 0 && r < rows && c >= 0 && c < cols, "scale_at(", r, ", ", c,
            ") is outside the ", rows, "x", cols, " tensor");
  const int64_t sr = layout == MXLayout::rowwise ? r : r / kMXBlock;
  const int64_t sc = layout == MXLayout::colwise ? c : c / kMXBlock;
  return scales[size_t(sr * scale_cols() + sc)];
}

ScaledTensor ScaledTensor::empty(int64_t rows, int64_t cols, MXLayout layout, Elem elem) {
  MXT_CHECK(rows >= 0 && cols >= 0, "ScaledTensor shape must be non-negative, got ", rows, "x",
            cols);
  // rows * cols must fit in a signed 64-bit product and in memory addressing; checked
  // before anything is multiplied or allocated.
  int64_t n = 0;
  MXT_CHECK(!__builtin_mul_overflow(rows, cols, &n) && n <= (int64_t(1) << 48),
            "ScaledTensor shape ", rows, "x", cols, " is too large (", rows, " * ", cols,
            " elements exceed 2^48)");
  ScaledTensor t;
  t.rows = rows;
  t.cols = cols;
  t.layout = layout;
  t.elem = elem;
  t.data.resize(t.data_bytes());
  t.scales.resize(size_t(t.scale_rows() * t.scale_cols()));
  return t;
}

uint8_t mx_scale_byte(float amax, const QuantConfig& cfg) {
  return kern::scale_byte(f32_bits(amax) & 0x7FFFFFFFu, cfg.elem, cfg.rounding);
}

namespace {

// Element-wise helpers split into chunks of this many elements.
constexpr int64_t kElemChunk = int64_t(1) << 16;

void check_input(const void* x, int64_t M, int64_t K, const char* what) {
  MXT_CHECK(M >= 0 && K >= 0, what, ": shape must be non-negative, got ", M, "x", K);
  MXT_CHECK(x != nullptr || M * K == 0, what, ": input pointer is null for a ", M, "x", K,
            " tensor");
}

// The kernels here make and read MX copies only (E8M0 scales per 32-element block).
void check_is_mx(const ScaledTensor& t, const char* what) {
  MXT_CHECK(t.is_mx(), what, ": the copy holds ", elem_name(t.elem), " codes with ",
            scale_type_name(t.scale_type), " scales per ", t.block,
            "-element block; the MX kernels handle 8-bit codes with E8M0 scales per 32 only");
}

void check_out(const ScaledTensor& out, int64_t M, int64_t K, const QuantConfig& cfg,
               const char* what) {
  check_is_mx(out, what);
  MXT_CHECK(out.rows == M && out.cols == K, what, ": output is ", out.rows, "x", out.cols,
            " but the input is ", M, "x", K, "; allocate it with ScaledTensor::empty(", M, ", ", K,
            ", layout, elem)");
  MXT_CHECK(out.elem == cfg.elem, what, ": output element format is ", elem_name(out.elem),
            " but the config asks for ", elem_name(cfg.elem));
  MXT_CHECK(out.data.size() == size_t(M * K) &&
                out.scales.size() == size_t(out.scale_rows() * out.scale_cols()),
            what, ": output buffers have the wrong size (data ", out.data.size(), ", scales ",
            out.scales.size(), "); allocate it with ScaledTensor::empty()");
}

QOut view(ScaledTensor& t) { return QOut{t.data.data(), t.scales.data(), t.scale_cols()}; }

// Makes `t` an M x K copy with the given layout/elem, reusing its buffers when possible.
void reshape(ScaledTensor& t, int64_t M, int64_t K, MXLayout layout, Elem elem) {
  t.rows = M;
  t.cols = K;
  t.layout = layout;
  t.elem = elem;
  t.scale_type = ScaleType::e8m0;
  t.block = kMXBlock;
  t.data.resize(size_t(M * K));
  t.scales.resize(size_t(t.scale_rows() * t.scale_cols()));
}

template <class T>
void quantize_into_impl(const T* x, int64_t M, int64_t K, const QuantConfig& cfg,
                        ScaledTensor& out) {
  check_input(x, M, K, "quantize");
  check_out(out, M, K, cfg, "quantize");
  const kern::QuantizeKernels& k = quantize_table().get();
  const QParams p{M, K, cfg.elem, cfg.rounding};
  const QOut o = view(out);
  void (*fn)(const T*, const QParams&, Region, QOut);
  if constexpr (std::is_same_v<T, float>) {
    fn = out.layout == MXLayout::rowwise   ? k.rowwise_f32
         : out.layout == MXLayout::colwise ? k.colwise_f32
                                           : k.tile32_f32;
  } else {
    fn = out.layout == MXLayout::rowwise   ? k.rowwise_bf16
         : out.layout == MXLayout::colwise ? k.colwise_bf16
                                           : k.tile32_bf16;
  }
  for_each_unit(M, K, kMXBlock, [&](Region g) { fn(x, p, g, o); });
}

template <class T>
void quantize_dual_impl(const T* x, int64_t M, int64_t K, const QuantConfig& cfg,
                        ScaledTensor& rowwise, ScaledTensor& colwise) {
  check_input(x, M, K, "quantize_dual");
  MXT_CHECK(&rowwise != &colwise, "quantize_dual: rowwise and colwise must be two tensors");
  reshape(rowwise, M, K, MXLayout::rowwise, cfg.elem);
  reshape(colwise, M, K, MXLayout::colwise, cfg.elem);
  const kern::QuantizeKernels& k = quantize_table().get();
  const QParams p{M, K, cfg.elem, cfg.rounding};
  const QOut ro = view(rowwise), co = view(colwise);
  if constexpr (std::is_same_v<T, float>) {
    for_each_unit(M, K, kMXBlock, [&](Region g) { k.dual_f32(x, p, g, ro, co); });
  } else {
    for_each_unit(M, K, kMXBlock, [&](Region g) { k.dual_bf16(x, p, g, ro, co); });
  }
}

// ---- FP32-scaled blocks ----

void check_block_config(const BlockQuantConfig& cfg, const char* what) {
  MXT_CHECK(cfg.scale == ScaleType::fp32 || cfg.scale == ScaleType::fp32_pow2, what,
            ": FP32-scaled blocks take scale type fp32 or fp32_pow2, not ",
            scale_type_name(cfg.scale));
  MXT_CHECK(cfg.amax_epsilon >= 0.f && cfg.amax_epsilon <= FLT_MAX, what,
            ": amax epsilon must be a finite number >= 0, got ", cfg.amax_epsilon);
}

kern::BParams block_params(int64_t M, int64_t K, const BlockQuantConfig& cfg) {
  return {M, K, cfg.elem, cfg.scale == ScaleType::fp32_pow2, cfg.amax_epsilon};
}

// Makes `t` an M x K FP32-scaled copy with that layout, reusing its buffers.
void reshape_blocks(ScaledTensor& t, int64_t M, int64_t K, MXLayout layout,
                    const BlockQuantConfig& cfg) {
  int64_t n = 0;
  MXT_CHECK(!__builtin_mul_overflow(M, K, &n) && n <= (int64_t(1) << 48), "quantize_blocks: ",
            "shape ", M, "x", K, " is too large (", M, " * ", K, " elements exceed 2^48)");
  t.rows = M;
  t.cols = K;
  t.layout = layout;
  t.elem = cfg.elem;
  t.scale_type = cfg.scale;
  t.block = kFp32ScaleBlock;
  t.data.resize(size_t(n));
  t.scales.resize(t.scale_bytes());
}

kern::BOut block_view(ScaledTensor& t) {
  return kern::BOut{t.data.data(), reinterpret_cast<float*>(t.scales.data()), t.scale_cols()};
}

template <class T>
void quantize_blocks_impl(const T* x, int64_t M, int64_t K, MXLayout layout,
                          const BlockQuantConfig& cfg, ScaledTensor& out) {
  check_input(x, M, K, "quantize_blocks");
  check_block_config(cfg, "quantize_blocks");
  reshape_blocks(out, M, K, layout, cfg);
  const kern::BlockQuantizeKernels& k = block_quantize_table().get();
  const kern::BParams p = block_params(M, K, cfg);
  const kern::BOut o = block_view(out);
  void (*fn)(const T*, const kern::BParams&, Region, kern::BOut);
  if constexpr (std::is_same_v<T, float>) {
    fn = layout == MXLayout::rowwise   ? k.rowwise_f32
         : layout == MXLayout::colwise ? k.colwise_f32
                                       : k.tile_f32;
  } else {
    fn = layout == MXLayout::rowwise   ? k.rowwise_bf16
         : layout == MXLayout::colwise ? k.colwise_bf16
                                       : k.tile_bf16;
  }
  for_each_unit(M, K, kFp32ScaleBlock, [&](Region g) { fn(x, p, g, o); });
}

template <class T>
void quantize_blocks_dual_impl(const T* x, int64_t M, int64_t K, const BlockQuantConfig& cfg,
                               ScaledTensor& rowwise, ScaledTensor& colwise) {
  check_input(x, M, K, "quantize_blocks_dual");
  check_block_config(cfg, "quantize_blocks_dual");
  MXT_CHECK(&rowwise != &colwise, "quantize_blocks_dual: rowwise and colwise must be two tensors");
  reshape_blocks(rowwise, M, K, MXLayout::rowwise, cfg);
  reshape_blocks(colwise, M, K, MXLayout::colwise, cfg);
  const kern::BlockQuantizeKernels& k = block_quantize_table().get();
  const kern::BParams p = block_params(M, K, cfg);
  const kern::BOut ro = block_view(rowwise), co = block_view(colwise);
  if constexpr (std::is_same_v<T, float>) {
    for_each_unit(M, K, kFp32ScaleBlock, [&](Region g) { k.dual_f32(x, p, g, ro, co); });
  } else {
    for_each_unit(M, K, kFp32ScaleBlock, [&](Region g) { k.dual_bf16(x, p, g, ro, co); });
  }
}

// ---- one FP32 scale for the whole tensor ----

// Makes `t` an M x K per-tensor copy (tile, fp32, block 0, one scale), reusing its buffers.
void reshape_tensor(ScaledTensor& t, int64_t M, int64_t K, Elem elem, const char* what) {
  int64_t n = 0;
  MXT_CHECK(!__builtin_mul_overflow(M, K, &n) && n <= (int64_t(1) << 48), what, ": shape ", M,
            "x", K, " is too large (", M, " * ", K, " elements exceed 2^48)");
  t.rows = M;
  t.cols = K;
  t.layout = MXLayout::tile;
  t.elem = elem;
  t.scale_type = ScaleType::fp32;
  t.block = 0;
  t.data.resize(size_t(n));
  t.scales.resize(t.scale_bytes());
}

template <class T>
float tensor_amax_impl(const T* x, int64_t n) {
  MXT_CHECK(n >= 0 && (x != nullptr || n == 0), "tensor_amax: bad buffer (n = ", n, ")");
  const kern::TensorScaleKernels& k = tensor_scale_table().get();
  const int64_t chunks = ceil_div(n, kElemChunk);
  uint32_t ab = 0;  // max of |x| bits: exact, so the split does not matter
#pragma omp parallel for schedule(static) reduction(max : ab) if (n >= kParallelMin)
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t len = std::min(kElemChunk, n - i * kElemChunk);
    uint32_t a;
    if constexpr (std::is_same_v<T, float>)
      a = k.amax_f32(x + i * kElemChunk, len);
    else
      a = k.amax_bf16(x + i * kElemChunk, len);
    ab = std::max(ab, a);
  }
  return bits_f32(ab);
}

// Quantizes x [M, K] with scale s (finite, > 0) into out: codes and scale_inv = fl32(1 / s).
template <class T>
void tensor_cast_impl(const T* x, int64_t M, int64_t K, Elem elem, float s, ScaledTensor& out,
                      const char* what) {
  reshape_tensor(out, M, K, elem, what);
  const kern::TensorScaleKernels& k = tensor_scale_table().get();
  const int64_t n = M * K, chunks = ceil_div(n, kElemChunk);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t len = std::min(kElemChunk, n - i * kElemChunk);
    if constexpr (std::is_same_v<T, float>)
      k.cast_f32(x + i * kElemChunk, len, elem, s, out.data.data() + i * kElemChunk);
    else
      k.cast_bf16(x + i * kElemChunk, len, elem, s, out.data.data() + i * kElemChunk);
  }
  const float inv = 1.f / s;
  std::memcpy(out.scales.data(), &inv, sizeof inv);
}

void check_tensor_config(const TensorQuantConfig& cfg, const char* what) {
  MXT_CHECK(cfg.amax_epsilon >= 0.f && cfg.amax_epsilon <= FLT_MAX, what,
            ": amax epsilon must be a finite number >= 0, got ", cfg.amax_epsilon);
}

template <class T>
float quantize_tensor_scaled_impl(const T* x, int64_t M, int64_t K, const TensorQuantConfig& cfg,
                                  ScaledTensor& out) {
  check_input(x, M, K, "quantize_tensor_scaled");
  check_tensor_config(cfg, "quantize_tensor_scaled");
  const float amax = tensor_amax_impl(x, M * K);
  tensor_cast_impl(x, M, K, cfg.elem, tensor_scale(amax, cfg), out, "quantize_tensor_scaled");
  return amax;
}

template <class T>
float quantize_tensor_given_scale_impl(const T* x, int64_t M, int64_t K, Elem elem, float scale,
                                       ScaledTensor& out) {
  check_input(x, M, K, "quantize_tensor_given_scale");
  MXT_CHECK(scale > 0.f && scale <= FLT_MAX, "quantize_tensor_given_scale: the scale must be ",
            "a finite number > 0, got ", scale);
  const float amax = tensor_amax_impl(x, M * K);
  tensor_cast_impl(x, M, K, elem, scale, out, "quantize_tensor_given_scale");
  return amax;
}

// A copy either kind of dequantize reads: its buffers match its shape, element format and
// layout.
void check_sizes(const ScaledTensor& q, const char* what) {
  MXT_CHECK(q.rows >= 0 && q.cols >= 0 && q.data.size() == q.data_bytes() &&
                q.scales.size() == q.scale_bytes(),
            what, ": malformed ScaledTensor (", q.rows, "x", q.cols, " ", elem_name(q.elem), ", ",
            q.data.size(), " data bytes for ", q.data_bytes(), ", ", q.scales.size(),
            " scale bytes for layout ", layout_name(q.layout), ")");
}

void check_mx(const ScaledTensor& q, const char* what) {
  check_is_mx(q, what);
  check_sizes(q, what);
}

// Rows per dequantize work unit.
constexpr int64_t kDequantRows = 32;

template <class Fn>
void for_each_row_chunk(int64_t M, int64_t K, Fn&& fn) {
  const int64_t chunks = ceil_div(M, kDequantRows);
#pragma omp parallel for schedule(static) if (M * K >= kParallelMin)
  for (int64_t i = 0; i < chunks; ++i)
    fn(i * kDequantRows, std::min(M, (i + 1) * kDequantRows));
}

}  // namespace

ScaledTensor quantize(const float* x, int64_t M, int64_t K, MXLayout layout,
                      const QuantConfig& cfg) {
  check_input(x, M, K, "quantize");
  ScaledTensor out = ScaledTensor::empty(M, K, layout, cfg.elem);
  quantize_into_impl(x, M, K, cfg, out);
  return out;
}

ScaledTensor quantize(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                      const QuantConfig& cfg) {
  check_input(x_bf16, M, K, "quantize");
  ScaledTensor out = ScaledTensor::empty(M, K, layout, cfg.elem);
  quantize_into_impl(x_bf16, M, K, cfg, out);
  return out;
}

void quantize_into(const float* x, int64_t M, int64_t K, const QuantConfig& cfg,
                   ScaledTensor& out) {
  quantize_into_impl(x, M, K, cfg, out);
}

void quantize_into(const uint16_t* x_bf16, int64_t M, int64_t K, const QuantConfig& cfg,
                   ScaledTensor& out) {
  quantize_into_impl(x_bf16, M, K, cfg, out);
}

void quantize_dual(const float* x, int64_t M, int64_t K, const QuantConfig& cfg,
                   ScaledTensor& rowwise, ScaledTensor& colwise) {
  quantize_dual_impl(x, M, K, cfg, rowwise, colwise);
}

void quantize_dual(const uint16_t* x_bf16, int64_t M, int64_t K, const QuantConfig& cfg,
                   ScaledTensor& rowwise, ScaledTensor& colwise) {
  quantize_dual_impl(x_bf16, M, K, cfg, rowwise, colwise);
}

float block_scale(float amax, const BlockQuantConfig& cfg) {
  check_block_config(cfg, "block_scale");
  return kern::block_scale(amax, elem_info(cfg.elem).max_value, cfg.amax_epsilon,
                           cfg.scale == ScaleType::fp32_pow2);
}

ScaledTensor quantize_blocks(const float* x, int64_t M, int64_t K, MXLayout layout,
                             const BlockQuantConfig& cfg) {
  ScaledTensor out;
  quantize_blocks_impl(x, M, K, layout, cfg, out);
  return out;
}

ScaledTensor quantize_blocks(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                             const BlockQuantConfig& cfg) {
  ScaledTensor out;
  quantize_blocks_impl(x_bf16, M, K, layout, cfg, out);
  return out;
}

void quantize_blocks_into(const float* x, int64_t M, int64_t K, MXLayout layout,
                          const BlockQuantConfig& cfg, ScaledTensor& out) {
  quantize_blocks_impl(x, M, K, layout, cfg, out);
}

void quantize_blocks_into(const uint16_t* x_bf16, int64_t M, int64_t K, MXLayout layout,
                          const BlockQuantConfig& cfg, ScaledTensor& out) {
  quantize_blocks_impl(x_bf16, M, K, layout, cfg, out);
}

void quantize_blocks_dual(const float* x, int64_t M, int64_t K, const BlockQuantConfig& cfg,
                          ScaledTensor& rowwise, ScaledTensor& colwise) {
  quantize_blocks_dual_impl(x, M, K, cfg, rowwise, colwise);
}

void quantize_blocks_dual(const uint16_t* x_bf16, int64_t M, int64_t K, const BlockQuantConfig& cfg,
                          ScaledTensor& rowwise, ScaledTensor& colwise) {
  quantize_blocks_dual_impl(x_bf16, M, K, cfg, rowwise, colwise);
}

float tensor_amax(const float* x, int64_t n) { return tensor_amax_impl(x, n); }
float tensor_amax(const uint16_t* x_bf16, int64_t n) { return tensor_amax_impl(x_bf16, n); }

float tensor_scale(float amax, const TensorQuantConfig& cfg) {
  check_tensor_config(cfg, "tensor_scale");
  return kern::block_scale(amax, elem_info(cfg.elem).max_value, cfg.amax_epsilon, false);
}

float quantize_tensor_scaled(const float* x, int64_t M, int64_t K, const TensorQuantConfig& cfg,
                             ScaledTensor& out) {
  return quantize_tensor_scaled_impl(x, M, K, cfg, out);
}
float quantize_tensor_scaled(const uint16_t* x_bf16, int64_t M, int64_t K,
                             const TensorQuantConfig& cfg, ScaledTensor& out) {
  return quantize_tensor_scaled_impl(x_bf16, M, K, cfg, out);
}
float quantize_tensor_given_scale(const float* x, int64_t M, int64_t K, Elem elem, float scale,
                                  ScaledTensor& out) {
  return quantize_tensor_given_scale_impl(x, M, K, elem, scale, out);
}
float quantize_tensor_given_scale(const uint16_t* x_bf16, int64_t M, int64_t K, Elem elem,
                                  float scale, ScaledTensor& out) {
  return quantize_tensor_given_scale_impl(x_bf16, M, K, elem, scale, out);
}

void dequantize(const ScaledTensor& q, float* out) {
  if (q.is_fp4()) {
    check_sizes(q, "dequantize");
    MXT_CHECK(out != nullptr || q.data.empty(), "dequantize: output pointer is null");
    for_each_row_chunk(q.rows, q.cols, [&](int64_t r0, int64_t r1) {
      kern::dequantize_fp4_f32_ref(q, r0, r1, out);
    });
    return;
  }
  if (q.is_fp32_tensor()) {
    check_sizes(q, "dequantize");
    MXT_CHECK(out != nullptr || q.data.empty(), "dequantize: output pointer is null");
    float inv;
    std::memcpy(&inv, q.scales.data(), sizeof inv);
    for_each_row_chunk(q.rows, q.cols, [&](int64_t r0, int64_t r1) {
      kern::dequantize_tensor_f32_ref(q.data.data() + r0 * q.cols, (r1 - r0) * q.cols, q.elem,
                                      inv, out + r0 * q.cols);
    });
    return;
  }
  if (q.is_fp32_blocks()) {
    check_sizes(q, "dequantize");
    MXT_CHECK(out != nullptr || q.data.empty(), "dequantize: output pointer is null");
    const kern::BDequantF32 k = block_dequantize_table().get();
    const kern::BParams p{q.rows, q.cols, q.elem, q.scale_type == ScaleType::fp32_pow2, 0.f};
    const float* s = reinterpret_cast<const float*>(q.scales.data());
    const int64_t ld = q.scale_cols();
    for_each_row_chunk(q.rows, q.cols, [&](int64_t r0, int64_t r1) {
      k(q.data.data(), s, ld, q.layout, p, r0, r1, out);
    });
    return;
  }
  check_mx(q, "dequantize");
  MXT_CHECK(out != nullptr || q.data.empty(), "dequantize: output pointer is null");
  const kern::DequantizeKernels& k = dequantize_table().get();
  const QParams p{q.rows, q.cols, q.elem, ScaleRounding::rceil};
  const int64_t ld = q.scale_cols();
  for_each_row_chunk(q.rows, q.cols, [&](int64_t r0, int64_t r1) {
    k.f32(q.data.data(), q.scales.data(), ld, q.layout, p, r0, r1, out);
  });
}

void dequantize_bf16(const ScaledTensor& q, uint16_t* out) {
  check_mx(q, "dequantize_bf16");
  MXT_CHECK(out != nullptr || q.data.empty(), "dequantize_bf16: output pointer is null");
  const kern::DequantizeKernels& k = dequantize_table().get();
  const QParams p{q.rows, q.cols, q.elem, ScaleRounding::rceil};
  const int64_t ld = q.scale_cols();
  for_each_row_chunk(q.rows, q.cols, [&](int64_t r0, int64_t r1) {
    k.bf16(q.data.data(), q.scales.data(), ld, q.layout, p, r0, r1, out);
  });
}

bool has_nonfinite(const float* x, int64_t n) {
  MXT_CHECK(n >= 0 && (x != nullptr || n == 0), "has_nonfinite: bad buffer (n = ", n, ")");
  return nonfinite_table().get()(x, n);
}

void f32_to_bf16_array(const float* x, uint16_t* out, int64_t n) {
  MXT_CHECK(n >= 0 && ((x && out) || n == 0), "f32_to_bf16_array: bad buffers (n = ", n, ")");
  const kern::ConvertKernels& k = convert_table().get();
  const int64_t chunks = ceil_div(n, kElemChunk);
#pragma omp parallel for schedule(static) if (n >= 4 * kElemChunk)
  for (int64_t i = 0; i < chunks; ++i)
    k.f32_to_bf16(x + i * kElemChunk, out + i * kElemChunk,
                  std::min(kElemChunk, n - i * kElemChunk));
}

void bf16_to_f32_array(const uint16_t* x, float* out, int64_t n) {
  MXT_CHECK(n >= 0 && ((x && out) || n == 0), "bf16_to_f32_array: bad buffers (n = ", n, ")");
  const kern::ConvertKernels& k = convert_table().get();
  const int64_t chunks = ceil_div(n, kElemChunk);
#pragma omp parallel for schedule(static) if (n >= 4 * kElemChunk)
  for (int64_t i = 0; i < chunks; ++i)
    k.bf16_to_f32(x + i * kElemChunk, out + i * kElemChunk,
                  std::min(kElemChunk, n - i * kElemChunk));
}

}  // namespace mxtrain
