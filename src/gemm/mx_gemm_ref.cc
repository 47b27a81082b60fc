// gemm/mx_gemm_ref.cc — the scalar reference of the MX product kernels (gemm/mx_gemm.h).
//
// Every element is formed once with mx_operand_value (the defined BF16 value, scale folded in,
// below-normal values flushed) and each C element accumulates in FP32 in plain K order. This
// is the kernel `--isa scalar` selects, and the oracle the fast kernels are tested against:
// they may sum in another order, so they agree with it up to FP32 summation error.
#include <cmath>
#include <limits>
#include <vector>

#include "gemm/mx_gemm.h"

namespace mxtrain::gemm_detail {

float mx_operand_value(uint8_t code, uint8_t scale, Elem e) {
  if (scale == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  const float v = fp8_to_f32(code, e) * e8m0_to_f32(scale);
  if (std::fabs(v) < 0x1.0p-126f) return std::copysign(0.f, v);  // BF16 subnormal -> 0
  return v;
}

namespace {

// out: the logical matrix [rows, cols] of t's values, transposed when `trans` (then t is stored
// [cols, rows]). Each element is decoded once, not once per product it enters.
void decode(const MXOperand& t, bool trans, std::vector<float>& out) {
  out.resize(size_t(t.rows * t.cols));
  const int64_t ld = trans ? t.rows : t.cols;
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t c = 0; c < t.cols; ++c) {
      const float v = mx_operand_value(t.codes[r * t.cols + c], t.scale(r, c), t.elem);
      out[size_t(trans ? c * ld + r : r * ld + c)] = v;
    }
}

}  // namespace

// Each C element is acc = C (or 0), then acc += a_k * b_k for k = 0 .. K-1 in order: the loops
// run k outside j only so that a row of C accumulates as one vector of independent sums.
void mx_gemm_ref(Orient o, const MXOperand& A, const MXOperand& B, float* C, int64_t ldc,
                 bool accumulate) {
  const int64_t M = o == Orient::tn ? A.cols : A.rows;
  const int64_t K = o == Orient::tn ? A.rows : A.cols;
  const int64_t N = o == Orient::nt ? B.rows : B.cols;
  thread_local std::vector<float> a, b;  // op(A) [M, K], op(B) [K, N]
  decode(A, o == Orient::tn, a);
  decode(B, o == Orient::nt, b);
  const float* av = a.data();
  const float* bv = b.data();
#pragma omp parallel for schedule(static) if (M * N * K >= (1 << 20))
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    if (!accumulate)
      for (int64_t j = 0; j < N; ++j) c[j] = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      const float x = av[i * K + k];
      const float* brow = bv + k * N;
      for (int64_t j = 0; j < N; ++j) c[j] += x * brow[j];
    }
  }
}

}  // namespace mxtrain::gemm_detail
