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
// Kernels (one PathTable, fp4_gemm.cc): decode a whole operand into a BF16 matrix in its
// stored orientation (decode_fp4_bf16_ref, decode_fp4_bf16_avx512: byte for byte the same),
// then the product: the scalar reference sums in FP32 in K order (like mx_gemm_ref); the other
// paths use oneDNN's BF16 matmul, so they agree with it up to FP32 summation order.
#pragma once

#include <cstdint>

#include "core/dispatch.h"
#include "mxtrain/quantize.h"

namespace mxtrain::gemm_detail {

// Rows [r0, r1) of the 4-bit copy t as BF16 values into out [t.rows, t.cols].
using DecodeFp4 = void (*)(const MXTensor& t, int64_t r0, int64_t r1, uint16_t* out);
void decode_fp4_bf16_ref(const MXTensor& t, int64_t r0, int64_t r1, uint16_t* out);
void decode_fp4_bf16_avx512(const MXTensor& t, int64_t r0, int64_t r1, uint16_t* out);

// Both operands 4-bit, layouts and shapes checked by gemm_mx; M, N, K > 0.
void gemm_fp4(bool trans_a, const MXTensor& A, bool trans_b, const MXTensor& B, int64_t M,
              int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate);

// What the 4-bit product's dispatch table chooses now (mxtrain info).
PathChoice fp4_product_choice();

}  // namespace mxtrain::gemm_detail
