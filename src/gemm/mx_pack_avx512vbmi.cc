// gemm/mx_pack_avx512vbmi.cc — the panel kernel's row packer (mx_gemm_avx512.cc, pack_a_rows)
// with VBMI table decoding: 64 codes per step through decode64 (gemm/mx_decode_vbmi.h), about
// half the instructions of the general decoder, then two qword permutes back to natural order.
// A piece the table path cannot fold exactly (scale bytes outside its range, NaN/Inf codes) is
// decoded by decode32 instead; both give the same BF16 values, so the packed panel, and every
// product, is the same bit for bit as with pack_a_rows. It is the packer of
// mx_gemm_avx512vbmi_bf16 (mx_gemm_avx512.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 AVX-512 intrinsics; see mx_gemm_avx512.cc
#include <immintrin.h>

#include "gemm/mx_decode_avx512.h"
#include "gemm/mx_decode_vbmi.h"
#include "gemm/mx_gemm.h"

namespace mxtrain::gemm_detail {

void pack_a_rows_avx512vbmi_bf16(const MXOperand& A, int64_t r0, int64_t mc, int64_t k0,
                                 int64_t kc, uint32_t* Ap, int64_t ld) {
  const Tables& t = tables(A.elem);
  const float* mult = multipliers(A.elem).v;
  const bool e4m3 = A.elem == Elem::e4m3;
  // Unpack order -> natural: vector 0 = lanes 0 of lo, hi, then lanes 1; vector 1 = lanes 2, 3.
  const __m512i to_nat0 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i to_nat1 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (int64_t m = 0; m < mc; ++m) {
    const int64_t r = r0 + m;
    const uint8_t* row = A.codes + r * A.cols;
    const uint8_t* srow = scale_row(A, r);
    uint32_t* out = Ap + m * ld;
    const uint8_t* ahead = m + kPackRowsAhead < mc ? row + kPackRowsAhead * A.cols : nullptr;
    for (int64_t j = 0; j * 64 < kc; ++j) {
      const int64_t k = k0 + j * 64, n = A.cols - k;
      if (ahead) _mm_prefetch(reinterpret_cast<const char*>(ahead + k), _MM_HINT_T0);
      uint8_t s0, s1;
      piece_scales(srow, k, A.cols, s0, s1);
      __m512i lo, hi;
      __m512i v0, v1;
      if (!decode64(row + k, n, s0, s1, t, lo, hi)) {
        v0 = _mm512_permutex2var_epi64(lo, to_nat0, hi);
        v1 = _mm512_permutex2var_epi64(lo, to_nat1, hi);
      } else {
        const __m512 f0 = _mm512_set1_ps(mult[s0]), f1 = _mm512_set1_ps(mult[s1]);
        v0 = decode32(load_codes(row + k, n), f0, f0, e4m3);
        v1 = decode32(load_codes(row + k + 32, n - 32), f1, f1, e4m3);
      }
      _mm512_storeu_si512(out + j * 32, v0);
      // Past the chunk only when its last piece is a half piece (the matrix ends there, so the
      // values are zeros); the row has room: KP pairs, a multiple of 32.
      _mm512_storeu_si512(out + j * 32 + 16, v1);
    }
  }
}

}  // namespace mxtrain::gemm_detail
