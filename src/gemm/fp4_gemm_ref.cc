// gemm/fp4_gemm_ref.cc — the scalar statement of the AVX512-BF16 4-bit product kernels' sums
// (fp4_gemm_panel_ref, gemm/fp4_gemm.h).
//
// Written for clarity, not speed: it forms every C element with exactly the kernels' FP32
// operations in their order, so the panel kernels and the streaming forward give its bytes.
// Each element's P starts at +0 and takes the pairs (k, k+1) in order as VDPBF16PS does: the
// product of two BF16 values is exact in FP32 (at most 16 significant bits) unless it falls
// below FP32's normal range, so each step is one fused multiply-add rounded to nearest even,
// and a result below 2^-126 in magnitude becomes ±0 (the instruction's flush to zero; its
// inputs are never subnormal: an element below 2^-126 is ±0 already, and P is flushed). A k
// past K contributes +0 · +0, as the packers' zero padding does. Then C = fl(alpha · P)
// (P itself for alpha = 1) and, accumulating, fl(C0 + C). The scalar path of the 4-bit
// product (`--isa scalar`, fp4_gemm.cc) sums in plain K order instead; the two agree up to
// FP32 summation order.
#include <cmath>
#include <vector>

#include "gemm/fp4_gemm.h"

namespace mxtrain::gemm_detail {

namespace {

// out: the logical matrix [rows, cols] of t's element values, transposed when `trans` (then t
// is stored [cols, rows]).
void decode(const MXOperand& t, bool trans, std::vector<float>& out) {
  out.resize(size_t(t.rows * t.cols));
  const int64_t ld = trans ? t.rows : t.cols, rb = t.row_bytes();
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t c = 0; c < t.cols; ++c) {
      const uint16_t v = fp4_value_bf16(nibble_get(t.codes + r * rb, c), t.scale(r, c), t.nvfp4);
      out[size_t(trans ? c * ld + r : r * ld + c)] = bf16_to_f32(v);
    }
}

// One VDPBF16PS step of one lane.
inline float step(float a, float b, float p) {
  const float r = std::fma(a, b, p);
  return std::fabs(r) < 0x1p-126f ? std::copysign(0.f, r) : r;
}

}  // namespace

void fp4_gemm_panel_ref(Orient o, const MXOperand& A, const MXOperand& B, float alpha, float* C,
                        int64_t ldc, bool accumulate) {
  const int64_t M = o == Orient::tn ? A.cols : A.rows;
  const int64_t K = o == Orient::tn ? A.rows : A.cols;
  const int64_t N = o == Orient::nt ? B.rows : B.cols;
  std::vector<float> a, b;  // op(A) [M, K], op(B) [K, N]
  decode(A, o == Orient::tn, a);
  decode(B, o == Orient::nt, b);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float p = 0.f;
      for (int64_t k = 0; k < K; k += 2) {
        const bool odd = k + 1 < K;
        p = step(odd ? a[size_t(i * K + k + 1)] : 0.f, odd ? b[size_t((k + 1) * N + j)] : 0.f, p);
        p = step(a[size_t(i * K + k)], b[size_t(k * N + j)], p);
      }
      const float u = alpha == 1.f ? p : alpha * p;
      float* c = C + i * ldc + j;
      *c = accumulate ? *c + u : u;
    }
}

}  // namespace mxtrain::gemm_detail
