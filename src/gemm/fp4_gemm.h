// gemm/fp4_gemm.h — the products of 4-bit copies (NVFP4, MXFP4; internal to src/gemm).
//
// gemm_mx hands both operands here once they are 4-bit (docs/numerics.md, "4-bit products").
// Each element enters the product as the BF16 value v = e2m1(code) · s, s its block's decode
// scale (E4M3 for NVFP4, 2^(e - 127) for MXFP4): exact, because an E2M1 value has at most two
// significant bits and s at most four (BF16 holds eight), except that |v| < 2^-126 (only under
// MXFP4 scales below 2^-123) counts as ±0, as the MX products define; a NaN scale makes its
// block NaN. The per-tensor scales (NVFP4's second level) apply once, to the FP32 result:
//   C = alpha · P (+ C when accumulating),  P = op(A) · op(B),  alpha = ta · tb in FP32,
// ta, tb each operand's tensor scale (1 without one); alpha = 1 gives C = P (+ C) exactly.
//
// Kernels (one PathTable, fp4_gemm.cc):
//   scalar — decode_fp4_bf16_ref, then the reference product: FP32 sums of P in K order;
//   avx2, avx512 (no AVX512-BF16) — each operand decoded whole to BF16, then oneDNN's BF16
//            matmul: its own FP32 summation order;
//   avx512bf16 — the 4-bit codes read directly by the MX panel kernels (mx_gemm_avx512.cc)
//            through the packers below, and forward products of at most kGemvMaxRows rows by
//            a streaming kernel that reads each weight byte once (fp4_gemv_avx512.h);
//   avx512vbmi_bf16 — the same, the streaming kernel transposing tile layouts' code bytes
//            with VBMI permutes (fp4_gemv_avx512vbmi.cc). Their sums are, bit for bit, those
//            fp4_gemm_panel_ref states (VDPBF16PS's order, from zero), whatever the shape,
//            orientation or thread count.
#pragma once

#include <cstdint>

#include "core/dispatch.h"
#include "gemm/mx_gemm.h"
#include "mxtrain/quantize.h"

namespace mxtrain::gemm_detail {

// The BF16 bits an element with E2M1 code `code` (low nibble) in a block with scale byte
// `scale` (E4M3 when nvfp4, else E8M0) enters the products as: the definition above.
uint16_t fp4_value_bf16(uint8_t code, uint8_t scale, bool nvfp4);

// Tables the kernels decode with, made once from the definition: bf16[s][c] =
// fp4_value_bf16(c, s) and scale[s] = the scale byte's FP32 value (e4m3_to_f32 / e8m0_to_f32).
struct Fp4Tables {
  alignas(64) uint16_t bf16[256][16];
  alignas(64) float scale[256];
};
const Fp4Tables& fp4_tables(bool nvfp4);

// Rows [r0, r1) of the 4-bit copy t as BF16 values into out [t.rows, t.cols].
using DecodeFp4 = void (*)(const ScaledTensor& t, int64_t r0, int64_t r1, uint16_t* out);
void decode_fp4_bf16_ref(const ScaledTensor& t, int64_t r0, int64_t r1, uint16_t* out);
void decode_fp4_bf16_avx512(const ScaledTensor& t, int64_t r0, int64_t r1, uint16_t* out);

// The sums of the AVX512-BF16 kernels, stated one element at a time (fp4_gemm_ref.cc): for
// C [M, N] = op(A) · op(B) in orientation o (mx_gemm.h) with 4-bit operands, each element is
//   P = +0; for each pair (k, k+1), k = 0, 2, 4, ...:
//     P = ftz(fma(a(k+1), b(k+1), P)); P = ftz(fma(a(k), b(k), P))
//   C = alpha == 1 ? P : fl(alpha · P), then fl(C0 + C) when accumulating,
// a(k), b(k) the elements' BF16 values (+0 past K), fma one rounding to nearest even, ftz
// making a result below 2^-126 in magnitude ±0 (VDPBF16PS's flush).
void fp4_gemm_panel_ref(Orient o, const MXOperand& A, const MXOperand& B, float alpha, float* C,
                        int64_t ldc, bool accumulate);

// The same product on the panel kernels (mx_gemm_avx512.cc) with the 4-bit packers below;
// needs AVX512-BF16 (and F/BW/VL/DQ).
void fp4_gemm_avx512bf16(Orient o, const MXOperand& A, const MXOperand& B, float alpha,
                         float* C, int64_t ldc, bool accumulate);
// The same product with the panel sums on AMX tiles (amx_block, mx_gemm.h): within the FP32
// summation bound of fp4_gemm_panel_ref's sums, not its bytes; needs AMX-BF16 granted.
void fp4_gemm_amx_bf16(Orient o, const MXOperand& A, const MXOperand& B, float alpha, float* C,
                       int64_t ldc, bool accumulate);
// Forward (nt) products with at most kGemvMaxRows rows, X stored [M, K], W [N, K] (blocks
// along K): each weight byte read once, decoded in registers (fp4_gemv_avx512.cc). The same
// bytes as fp4_gemm_avx512bf16.
void fp4_gemv_nt_avx512bf16(const MXOperand& X, const MXOperand& W, float alpha, float* C,
                            int64_t ldc, bool accumulate);
// The same bytes with VBMI byte permutes for tile layouts (fp4_gemv_avx512vbmi.cc).
void fp4_gemv_nt_avx512vbmi_bf16(const MXOperand& X, const MXOperand& W, float alpha, float* C,
                                 int64_t ldc, bool accumulate);

// The 4-bit packers of the panel kernels (fp4_pack_avx512.cc), the PackRows, PackPairs and
// PackTransposed of mx_gemm.h: rows and the transposed B decode 32 codes at a time by a word
// table lookup (Fp4Tables::bf16, one 16-entry table per block scale), pairs of stored rows
// 16 columns at a time in FP32 (each column its own scale: code value times scale, exact).
void fp4_pack_rows_avx512bf16(const MXOperand& A, int64_t r0, int64_t mc, int64_t k0,
                              int64_t kc, uint32_t* Ap, int64_t ld);
void fp4_pack_pairs_avx512bf16(const MXOperand& S, int64_t c0, int nv, int nstore, int64_t k0,
                               int64_t kc, uint32_t* out, int64_t ld);
void fp4_pack_transposed_avx512bf16(const MXOperand& B, int64_t c0, int64_t k0, int64_t kc,
                                    uint32_t* Bp);

// Both operands 4-bit, layouts and shapes checked by gemm_mx; M, N, K > 0.
void gemm_fp4(bool trans_a, const ScaledTensor& A, bool trans_b, const ScaledTensor& B, int64_t M,
              int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate);

// What the 4-bit product's dispatch table chooses now (mxtrain info).
PathChoice fp4_product_choice();

}  // namespace mxtrain::gemm_detail
