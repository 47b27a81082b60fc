// gemm/gemm_mx.cc — the MX product: checks, then the kernels of the MX product's dispatch
// table (core/dispatch.h), one entry per path:
//   scalar          — mx_gemm_ref (gemm/mx_gemm_ref.cc), the reference;
//   avx2            — mx_gemm_expanded below: each operand is expanded whole to BF16 with its
//                     scales folded in (dequantize_bf16), then oneDNN's BF16 matmul (CPUs
//                     without AVX512-BF16, --isa avx2);
//   avx512bf16      — mx_gemm_avx512bf16 (gemm/mx_gemm_avx512.cc): FP8 panels decoded into
//                     cache-resident BF16 blocks, scales folded in, VDPBF16PS micro-kernel;
//   avx512vbmi_bf16 — the same with VBMI row packing (mx_gemm_avx512vbmi_bf16), and forward
//                     products of at most kGemvMaxRows rows streamed (mx_gemv_nt_avx512vbmi_bf16);
//   amx_bf16        — the same with the panel products on AMX tiles (mx_gemm_amx_bf16, and
//                     fp32_block_gemm_amx_bf16 for the FP32-scaled products); forwards stream
//                     up to kAmxStreamRows rows only.
// MXTRAIN_STREAM_ROWS / set_stream_rows (mxtrain/gemm.h) replaces every path's streaming limit.
// Besides the path, gemm_mx chooses by the operands only: an operand whose scales the fast
// kernels cannot fold takes the reference, and A^T · B^T (no layer needs it) the expansion.
// All paths form the same element values (docs/numerics.md, "MX products"); they differ in
// FP32 summation order, and the expansion path keeps BF16 subnormals where the others flush
// them to zero (values below 2^-126, which only blocks with scales near 2^-127 hold).
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/dispatch.h"
#include "core/env_override.h"
#include "gemm/fp4_gemm.h"
#include "gemm/mx_gemm.h"
#include "mxtrain/common.h"
#include "mxtrain/gemm.h"

namespace mxtrain {
namespace {

bool layout_ok(MXLayout l, bool k_along_cols) {
  // Blocks along K: if K is the stored matrix's column axis the copy must be rowwise (blocks
  // along columns) or tile32; if K is its row axis, colwise or tile32.
  if (l == MXLayout::tile) return true;
  return k_along_cols ? l == MXLayout::rowwise : l == MXLayout::colwise;
}

const char* wanted(bool k_along_cols) {
  return k_along_cols ? "rowwise or tile32" : "colwise or tile32";
}

void check_tensor(const char* what, const ScaledTensor& t) {
  MXT_CHECK(t.rows >= 0 && t.cols >= 0, "gemm_mx: ", what, " has a negative shape");
  MXT_CHECK(t.is_mx() || t.is_fp32_blocks() || t.is_fp32_tensor() || t.is_fp4(), "gemm_mx: ",
            what, " holds ", elem_name(t.elem), " codes with ", scale_type_name(t.scale_type),
            " scales per ", t.block, "-element block; the products read E8M0 per 32 (MX), "
            "FP32 per 128, one FP32 scale per tensor, or 4-bit codes with E4M3 scales per 16 "
            "(NVFP4) or E8M0 per 32 (MXFP4)");
  MXT_CHECK(t.data.size() == t.data_bytes(), "gemm_mx: ", what, " holds ", t.data.size(),
            " data bytes, expected ", t.data_bytes(), " for ", t.rows, "x", t.cols, " ",
            elem_name(t.elem), " codes");
  MXT_CHECK(t.scales.size() == t.scale_bytes(), "gemm_mx: ", what, " holds ", t.scales.size(),
            " scale bytes, expected ", t.scale_bytes(), " for layout ", layout_name(t.layout));
}

using namespace gemm_detail;

// Expansion path: both operands whole in BF16 (per-thread buffers reused across calls, so a
// training step's repeated shapes do not fault in fresh pages), then oneDNN.
void mx_gemm_expanded(bool trans_a, const ScaledTensor& A, bool trans_b, const ScaledTensor& B,
                      int64_t M, int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate) {
  thread_local std::vector<uint16_t> a16, b16;
  a16.resize(A.data.size());
  b16.resize(B.data.size());
  dequantize_bf16(A, a16.data());
  dequantize_bf16(B, b16.data());
  gemm_bf16(trans_a, trans_b, M, N, K, a16.data(), A.cols, b16.data(), B.cols, C, ldc,
            accumulate);
}

// ---- dispatch --------------------------------------------------------------------------------

// One path's kernels, all called as C = op(A) · op(B) (+ C) in orientation o.
using MxProduct = void (*)(Orient o, const MXOperand& A, const MXOperand& B, float* C,
                           int64_t ldc, bool accumulate);
struct MxProductKernels {
  MxProduct gemm;     // null: the expansion (mx_gemm_expanded), which reads whole MXTensors
  MxProduct gemv_nt;  // forward products of few rows (streams); null: gemm serves them
  bool folds_scales;  // needs mx_scales_foldable operands (the others take mx_gemm_ref)
  Fp32Product fp32;   // FP32-scaled copies whose scales do not fold (gemm_scaled.cc)
  int64_t stream_rows = kGemvMaxRows;  // gemv_nt's forwards: up to this many rows
  // The rows up to which forwards stream now (the override first; 0: no streaming kernel).
  int64_t stream_limit_now() const { return gemv_nt ? stream_limit(stream_rows) : 0; }
};

void stream_vbmi(Orient, const MXOperand& A, const MXOperand& B, float* C, int64_t ldc,
                 bool acc) {
  mx_gemv_nt_avx512vbmi_bf16(A, B, C, ldc, acc);
}

const PathTable<MxProductKernels>& mx_table() {
  static const PathTable<MxProductKernels> t(
      "GEMM scaled FP8 (mxfp8, blockwise, fp8-current, fp8-delayed)",
      {{Path::scalar,
        "mx_gemm_ref; fp32 scales: fp32_block_gemm_ref",
        {mx_gemm_ref, nullptr, false, fp32_block_gemm_ref_entry}},
       {Path::avx2,
        "mx_gemm_expanded (dequantize_bf16 + oneDNN BF16 matmul); fp32 scales: "
        "fp32_block_gemm_onednn",
        {nullptr, nullptr, false, fp32_block_gemm_onednn}},
       {Path::avx512bf16,
        "mx_gemm_avx512bf16 (FP8 panels -> BF16, VDPBF16PS 6x64); fp32 scales: "
        "fp32_block_gemm_avx512bf16 (per-chunk promotion)",
        {mx_gemm_avx512bf16, nullptr, true, fp32_block_gemm_panels_avx512bf16}},
       {Path::avx512vbmi_bf16,
        "mx_gemm_avx512vbmi_bf16 (VBMI packing); forward with m <= 16: "
        "mx_gemv_nt_avx512vbmi_bf16; fp32 scales: fp32_block_gemm_avx512vbmi_bf16",
        {mx_gemm_avx512vbmi_bf16, stream_vbmi, true, fp32_block_gemm_panels_avx512vbmi_bf16}},
       {Path::amx_bf16,
        "mx_gemm_amx_bf16 (VBMI packing, TDPBF16PS on AMX tiles); forward with m <= 8: "
        "mx_gemv_nt_avx512vbmi_bf16; fp32 scales: "
        "fp32_block_gemm_amx_bf16 (per-chunk promotion of the tiles' sums)",
        {mx_gemm_amx_bf16, stream_vbmi, true, fp32_block_gemm_panels_amx_bf16,
         kAmxStreamRows}}});
  static_assert(kAmxStreamRows == 8, "the amx_bf16 entry's description names the limit");
  return t;
}

// t's codes and scales as a ScaledTensor (the expansion path reads whole tensors), into `out`.
void copy_operand(const MXOperand& t, ScaledTensor& out) {
  out.rows = t.rows;
  out.cols = t.cols;
  out.layout = t.layout;
  out.elem = t.elem;
  out.scale_type = ScaleType::e8m0;
  out.block = kMXBlock;
  out.data.resize(size_t(t.rows * t.cols));
  std::memcpy(out.data.data(), t.codes, out.data.size());
  out.scales.resize(size_t(out.scale_rows() * out.scale_cols()));
  std::memcpy(out.scales.data(), t.scales, out.scales.size());
}

// The kernel for orientation o once the expansion is ruled out.
void run_kernels(const MxProductKernels& k, Orient o, const MXOperand& A, const MXOperand& B,
                 int64_t M, float* C, int64_t ldc, bool accumulate) {
  if (k.folds_scales && !(mx_scales_foldable(A) && mx_scales_foldable(B)))
    return mx_gemm_ref(o, A, B, C, ldc, accumulate);
  if (o == Orient::nt && M <= k.stream_limit_now())
    return k.gemv_nt(o, A, B, C, ldc, accumulate);
  k.gemm(o, A, B, C, ldc, accumulate);
}

}  // namespace

// The scan runs on the calling thread before every product (a 1408x2048 weight's grid is 90K
// bytes), so it takes eight bytes a step: with c = b ^ 0xFF, the bytes 247..254 are those with
// 0 < c < 9, found for all eight at once by the "has a byte between m and n" bit trick (exact
// for m, n <= 128).
bool gemm_detail::mx_scales_foldable(const MXOperand& t) {
  if (t.elem != Elem::e4m3) return true;
  const int64_t rows = t.layout == MXLayout::rowwise ? t.rows : ceil_div(t.rows, kMXBlock);
  const int64_t n = rows * t.scale_ld;
  constexpr uint64_t k01 = 0x0101010101010101ull, k7F = 0x7F7F7F7F7F7F7F7Full;
  constexpr uint64_t k80 = 0x8080808080808080ull;
  uint64_t bad = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, t.scales + i, 8);
    const uint64_t c = ~w, m = c & k7F;
    bad |= (k01 * (127 + 9) - m) & ~c & (m + k01 * (127 - 0)) & k80;
  }
  for (; i < n; ++i) bad |= uint64_t(t.scales[i] >= 247 && t.scales[i] != 0xFF);
  return !bad;
}

namespace {
// The limit MXTRAIN_STREAM_ROWS gives.
int64_t stream_rows_from_env(const char* e) {
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  MXT_CHECK(*end == '\0' && v >= 0 && v <= kGemvMaxRows, "MXTRAIN_STREAM_ROWS=", e,
            " is not a row count from 0 (stream none) to ", kGemvMaxRows);
  return int64_t(v);
}

// set_stream_rows()'s limit, else MXTRAIN_STREAM_ROWS's.
constinit EnvOverride<int64_t> stream_rows_choice{"MXTRAIN_STREAM_ROWS", stream_rows_from_env};
}  // namespace

void set_stream_rows(int64_t rows) {
  MXT_CHECK(rows >= 0 && rows <= kGemvMaxRows, "stream rows ", rows, " is out of range: the "
            "streaming kernels take 0 (none) to ", kGemvMaxRows, " rows");
  stream_rows_choice.set(rows);
}

void clear_stream_rows_override() { stream_rows_choice.clear(); }

int64_t stream_rows_override() { return stream_rows_choice.get().value_or(-1); }

int64_t gemm_detail::stream_limit(int64_t own) {
  const int64_t o = stream_rows_override();
  return o >= 0 ? o : own;
}

int64_t gemm_detail::mx_stream_rows() { return mx_table().get().stream_limit_now(); }

int64_t stream_rows(bool fp4, bool tile_weights) {
  return fp4 ? fp4_stream_rows(tile_weights) : mx_stream_rows();
}

Path gemm_mx_path() { return mx_table().path(); }

PathChoice gemm_detail::mx_product_choice() { return mx_table().choice(); }

// C: [M, N] (row stride ldc) = op(A) · op(B); A stored [M,K] or [K,M] (trans_a), B stored
// [K,N] or [N,K] (trans_b).
void gemm_mx(bool trans_a, const ScaledTensor& A, bool trans_b, const ScaledTensor& B, float* C,
             int64_t ldc, bool accumulate) {
  check_tensor("A", A);
  check_tensor("B", B);
  const bool a_k_cols = !trans_a, b_k_cols = trans_b;
  MXT_CHECK(layout_ok(A.layout, a_k_cols), "gemm_mx: A is ", layout_name(A.layout),
            " but its blocks must run along K; with trans_a=", trans_a, " A must be ",
            wanted(a_k_cols));
  MXT_CHECK(layout_ok(B.layout, b_k_cols), "gemm_mx: B is ", layout_name(B.layout),
            " but its blocks must run along K; with trans_b=", trans_b, " B must be ",
            wanted(b_k_cols));
  const int64_t M = trans_a ? A.cols : A.rows, K = trans_a ? A.rows : A.cols;
  const int64_t Kb = trans_b ? B.cols : B.rows, N = trans_b ? B.rows : B.cols;
  MXT_CHECK(K == Kb, "gemm_mx: inner dimensions differ: op(A) is [", M, ",", K, "], op(B) is [",
            Kb, ",", N, "]");
  MXT_CHECK(ldc >= N, "gemm_mx: ldc=", ldc, " is smaller than N=", N);
  if (M == 0 || N == 0) return;
  MXT_CHECK(C != nullptr, "gemm_mx: C is null");
  if (K == 0) {  // empty sum
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.f;
    return;
  }
  auto family = [](const ScaledTensor& t) {
    return t.is_fp4() ? "4-bit" : t.is_mx() ? "MX" : "FP32-scaled";
  };
  MXT_CHECK(A.is_mx() == B.is_mx() && A.is_fp4() == B.is_fp4(), "gemm_mx: A is ", family(A),
            " and B is ", family(B),
            "; both operands must be of one family (make both copies with one recipe)");
  if (A.is_fp4()) return gemm_fp4(trans_a, A, trans_b, B, M, N, K, C, ldc, accumulate);
  if (!A.is_mx()) return gemm_fp32_scaled(trans_a, A, trans_b, B, M, N, K, C, ldc, accumulate);
  gemm_mx_run(trans_a, A, trans_b, B, M, N, K, C, ldc, accumulate);
}

void gemm_detail::gemm_mx_run(bool trans_a, const ScaledTensor& A, bool trans_b,
                              const ScaledTensor& B, int64_t M, int64_t N, int64_t K, float* C,
                              int64_t ldc, bool accumulate) {
  const MxProductKernels& k = mx_table().get();
  // A^T · B^T (no layer needs it) and the avx2 path: the expansion.
  if ((trans_a && trans_b) || !k.gemm)
    return mx_gemm_expanded(trans_a, A, trans_b, B, M, N, K, C, ldc, accumulate);
  const Orient o = trans_a ? Orient::tn : trans_b ? Orient::nt : Orient::nn;
  run_kernels(k, o, MXOperand::of(A), MXOperand::of(B), M, C, ldc, accumulate);
}

void gemm_detail::gemm_fp32_run(bool trans_a, const ScaledTensor& A, bool trans_b,
                                const ScaledTensor& B, int64_t M, int64_t N, int64_t K, float* C,
                                int64_t ldc, bool accumulate) {
  mx_table().get().fp32(trans_a, A, trans_b, B, M, N, K, C, ldc, accumulate);
}

void gemm_detail::gemm_mx_run(bool trans_a, const MXOperand& A, bool trans_b,
                              const MXOperand& B, int64_t M, int64_t N, int64_t K, float* C,
                              int64_t ldc, bool accumulate) {
  const MxProductKernels& k = mx_table().get();
  if ((trans_a && trans_b) || !k.gemm) {
    thread_local ScaledTensor ea, eb;  // reused: no fresh pages per call
    copy_operand(A, ea);
    copy_operand(B, eb);
    return mx_gemm_expanded(trans_a, ea, trans_b, eb, M, N, K, C, ldc, accumulate);
  }
  const Orient o = trans_a ? Orient::tn : trans_b ? Orient::nt : Orient::nn;
  run_kernels(k, o, A, B, M, C, ldc, accumulate);
}

}  // namespace mxtrain
