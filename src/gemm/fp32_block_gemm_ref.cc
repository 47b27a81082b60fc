// gemm/fp32_block_gemm_ref.cc — the scalar reference of the panel kernels' FP32-scaled block
// product (fp32_block_gemm_avx512bf16 / _avx512vbmi_bf16, gemm/mx_gemm.h).
//
// Written for clarity, not speed: it forms every C element with exactly the kernels' FP32
// operations in their order, so the kernels give its bytes. Per 128-deep K chunk, the partial
// sum P of unscaled code values starts at 0 and takes the pairs (k, k+1) in order, each as
// VDPBF16PS does: P = P + a(k+1)·b(k+1), then P = P + a(k)·b(k) (a k+1 past K counts as 0;
// each product of two FP8 values is exact in FP32, each add rounds to nearest even; the
// instruction's flush of subnormals never applies, since every partial sum is 0 or a multiple
// of 2^-32); then c = c + fl(fl(sa · sb) · P), c starting at C (accumulate) or 0. The FP32
// path's own reference, fp32_block_gemm_ref (gemm_scaled.cc, `--isa scalar`), sums each chunk
// in K order instead; the two agree up to FP32 summation order.
#include <algorithm>
#include <vector>

#include "gemm/mx_gemm.h"

namespace mxtrain::gemm_detail {

namespace {

// out: the logical matrix [rows, cols] of t's unscaled code values, transposed when `trans`
// (then t is stored [cols, rows]).
void decode_unscaled(const MXOperand& t, bool trans, std::vector<float>& out) {
  out.resize(size_t(t.rows * t.cols));
  const int64_t ld = trans ? t.rows : t.cols;
  for (int64_t r = 0; r < t.rows; ++r)
    for (int64_t c = 0; c < t.cols; ++c)
      out[size_t(trans ? c * ld + r : r * ld + c)] = fp8_to_f32(t.codes[r * t.cols + c], t.elem);
}

}  // namespace

void fp32_block_gemm_panel_ref(Orient o, const MXOperand& A, const MXOperand& B,
                               const ChunkScales& s, float* C, int64_t ldc, bool accumulate) {
  const int64_t M = o == Orient::tn ? A.cols : A.rows;
  const int64_t K = o == Orient::tn ? A.rows : A.cols;
  const int64_t N = o == Orient::nt ? B.rows : B.cols;
  std::vector<float> a, b;  // op(A) [M, K], op(B) [K, N]
  decode_unscaled(A, o == Orient::tn, a);
  decode_unscaled(B, o == Orient::nt, b);
  const int64_t chunks = ceil_div(K, kFp32ScaleBlock);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float c = accumulate ? C[i * ldc + j] : 0.f;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t k0 = ch * kFp32ScaleBlock, k1 = std::min(K, k0 + kFp32ScaleBlock);
        float p = 0.f;
        for (int64_t k = k0; k < k1; k += 2) {
          const float odd = k + 1 < k1 ? a[size_t(i * K + k + 1)] * b[size_t((k + 1) * N + j)] : 0.f;
          p = p + odd;
          p = p + a[size_t(i * K + k)] * b[size_t(k * N + j)];
        }
        const float t = s.sa[ch * M + i] * s.sb[ch * N + j];
        const float u = t * p;
        c = c + u;
      }
      C[i * ldc + j] = c;
    }
}

}  // namespace mxtrain::gemm_detail
