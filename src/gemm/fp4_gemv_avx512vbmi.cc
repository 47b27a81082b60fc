// gemm/fp4_gemv_avx512vbmi.cc — the streaming forward product of 4-bit copies with
// AVX512-BF16 and VBMI (fp4_gemv_avx512.h): tile layouts (NVFP4's 16x16 weights) the bytes
// way, the same bytes as fp4_gemv_nt_avx512bf16.
#include "gemm/fp4_gemv_avx512.h"

namespace mxtrain::gemm_detail {

void fp4_gemv_nt_avx512vbmi_bf16(const MXOperand& X, const MXOperand& W, float alpha, float* C,
                                 int64_t ldc, bool accumulate) {
  fp4_gemv_nt<true>(X, W, alpha, C, ldc, accumulate);
}

}  // namespace mxtrain::gemm_detail
