// gemm/gemm_ref.cc — the plain reference product every faster GEMM is tested against.
//
// FP64 accumulation of FP32 inputs in the fixed order k = 0..K-1, FP64 output. No blocking,
// no threads beyond a row split (each output element is computed by exactly one thread in
// the same order, so the result does not depend on the thread count). Used by tests and by
// layer references; never on a hot path.
#include "mxtrain/common.h"
#include "mxtrain/gemm.h"

namespace mxtrain {

// C: [M, N] (row stride ldc) = op(A)[M,K] · op(B)[K,N]
void gemm_ref_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                  int64_t lda, const float* B, int64_t ldb, double* C, int64_t ldc) {
  MXT_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_ref_f64: negative dimension M=", M, " N=", N,
            " K=", K);
  MXT_CHECK(ldc >= N, "gemm_ref_f64: ldc=", ldc, " is smaller than N=", N);
  MXT_CHECK(lda >= (trans_a ? M : K), "gemm_ref_f64: lda=", lda, " too small");
  MXT_CHECK(ldb >= (trans_b ? K : N), "gemm_ref_f64: ldb=", ldb, " too small");
  if (M == 0 || N == 0) return;
  MXT_CHECK(C != nullptr && ((A != nullptr && B != nullptr) || K == 0),
            "gemm_ref_f64: null operand");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        double a = trans_a ? A[k * lda + i] : A[i * lda + k];
        double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      C[i * ldc + j] = acc;
    }
  }
}

}  // namespace mxtrain
