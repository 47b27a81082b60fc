// gemm/mx_gemm_ref.cc — the scalar reference of the MX product kernels (gemm/mx_gemm.h).
//
// Every element is formed with mx_operand_value (the defined BF16 value, scale folded in,
// below-normal values flushed) and C accumulates in FP32 in plain K order. This is the path
// `MXTRAIN_GEMM=scalar` selects, and the oracle the fast kernels are tested against: they may
// sum in another order, so they agree with it up to FP32 summation error.
#include <cmath>
#include <limits>

#include "gemm/mx_gemm.h"

namespace mxtrain::gemm_detail {

float mx_operand_value(uint8_t code, uint8_t scale, Elem e) {
  if (scale == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  const float v = fp8_to_f32(code, e) * e8m0_to_f32(scale);
  if (std::fabs(v) < 0x1.0p-126f) return std::copysign(0.f, v);  // BF16 subnormal -> 0
  return v;
}

namespace {

float value(const MXOperand& t, int64_t r, int64_t c) {
  return mx_operand_value(t.codes[r * t.cols + c], t.scale(r, c), t.elem);
}

}  // namespace

void mx_gemm_ref(Orient o, const MXOperand& A, const MXOperand& B, float* C, int64_t ldc,
                 bool accumulate) {
  const int64_t M = o == Orient::tn ? A.cols : A.rows;
  const int64_t K = o == Orient::tn ? A.rows : A.cols;
  const int64_t N = o == Orient::nt ? B.rows : B.cols;
#pragma omp parallel for schedule(static) if (M * N * K >= (1 << 20))
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = accumulate ? C[i * ldc + j] : 0.f;
      for (int64_t k = 0; k < K; ++k) {
        const float a = o == Orient::tn ? value(A, k, i) : value(A, i, k);
        const float b = o == Orient::nt ? value(B, j, k) : value(B, k, j);
        acc += a * b;
      }
      C[i * ldc + j] = acc;
    }
}

}  // namespace mxtrain::gemm_detail
