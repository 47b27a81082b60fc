// gemm/fp4_gemv_avx512.cc — the streaming forward product of 4-bit copies with AVX512-BF16
// (fp4_gemv_avx512.h): every layout the words way.
#include "gemm/fp4_gemv_avx512.h"

namespace mxtrain::gemm_detail {

void fp4_gemv_nt_avx512bf16(const MXOperand& X, const MXOperand& W, float alpha, float* C,
                            int64_t ldc, bool accumulate) {
  fp4_gemv_nt<false>(X, W, alpha, C, ldc, accumulate);
}

}  // namespace mxtrain::gemm_detail
