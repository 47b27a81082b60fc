// gemm/mx_promote_avx512.h — the step that ends each 128-deep chunk of an FP32-scaled product
// (docs/numerics.md, "FP32-scaled products"): sixteen columns of the chunk's sums P promoted
// into C with the chunk's scales, C = fl(C + fl(fl(sa · sb) · P)), rounded op by op (the
// *_round_ps forms are never contracted into an FMA). Shared by the VDPBF16PS micro-kernel
// (micro_kernel_promoted, mx_gemm_avx512.cc) and the AMX block (amx_block_promoted,
// mx_gemm_amx.cc), so that both round the same way; internal linkage, a copy in each.
#pragma once

#include <immintrin.h>

namespace mxtrain::gemm_detail {
namespace {

// c[0 .. 16) under mask: sa the row's scale (broadcast), sb the columns' scales, p the sums;
// C read back from memory when from_c, else 0 (the product's first chunk, not accumulating).
[[gnu::always_inline]] inline void promote16(float* c, __mmask16 mask, __m512 sa, __m512 sb,
                                             __m512 p, bool from_c) {
  constexpr int R = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 t = _mm512_mul_round_ps(sa, sb, R);
  const __m512 u = _mm512_mul_round_ps(t, p, R);
  const __m512 old = from_c ? _mm512_maskz_loadu_ps(mask, c) : _mm512_setzero_ps();
  _mm512_mask_storeu_ps(c, mask, _mm512_add_round_ps(old, u, R));
}

}  // namespace
}  // namespace mxtrain::gemm_detail
