// gemm/mx_pack_avx512vbmi.cc — the panel kernel's packers (mx_gemm_avx512.cc) with VBMI table
// decoding, the packers of mx_gemm_avx512vbmi_bf16:
//   pack_a_rows_avx512vbmi_bf16 (as pack_a_rows): 64 codes of a row per step through decode64
//     (gemm/mx_decode_vbmi.h), about half the instructions of the general decoder, then two
//     qword permutes back to natural order;
//   pack_pairs_avx512vbmi_bf16 (as pack_pairs, gemm/mx_pairs_avx512.h): 32 columns of a pair
//     of rows per step, one byte permute putting the codes in pair order before the table
//     lookup, so the unpacks give the pairs directly; the block's scales per column (colwise)
//     or per 32 columns (tile32) are added to the exponents. The rows a few pairs ahead are
//     prefetched (kPairsAhead).
// A piece the table path cannot fold exactly (scale bytes outside its range, NaN/Inf codes) is
// decoded by decode32 instead; both give the same BF16 values, so the packed panels, and every
// product, are the same bit for bit as with the general packers.
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 AVX-512 intrinsics; see mx_gemm_avx512.cc
#endif
#include <immintrin.h>

#include "gemm/mx_decode_avx512.h"
#include "gemm/mx_decode_vbmi.h"
#include "gemm/mx_gemm.h"
#include "gemm/mx_pairs_avx512.h"

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

namespace {

// Byte indexes into (row k's 32 codes, row k+1's 32 codes at 64..) for one VBMI two-source
// permute that lays the codes of 32 pairs out so that the table decoder's unpacks give the
// words in pair order: byte 16L + i (i < 8) is pair 4L + i/2, byte 16L + 8 + i pair 16 + 4L +
// i/2, of row k for even i and row k+1 for odd i (L = 0..3).
struct PairIdx {
  alignas(64) uint8_t v[64];
  constexpr PairIdx() : v{} {
    for (int L = 0; L < 4; ++L)
      for (int i = 0; i < 8; ++i) {
        const int row = (i % 2) * 64;
        v[16 * L + i] = uint8_t(row + 4 * L + i / 2);
        v[16 * L + 8 + i] = uint8_t(row + 16 + 4 * L + i / 2);
      }
  }
};
constexpr PairIdx kPairIdx{};

// Word exponent offsets (s - 127) * 128 of 16 columns' scale bytes s, each twice (both words
// of a column's pair); `bad` gets whether a valid column's byte lies outside [s_min, s_max].
// Columns past the valid ones (mask n) count as byte 127.
inline __m512i pair_offsets(__m128i bytes, __mmask16 n, const Tables& t, bool& bad) {
  const __m512i s = _mm512_mask_mov_epi32(_mm512_set1_epi32(127), n, _mm512_cvtepu8_epi32(bytes));
  bad |= _mm512_mask_cmplt_epi32_mask(n, s, _mm512_set1_epi32(t.s_min)) != 0 ||
         _mm512_mask_cmpgt_epi32_mask(n, s, _mm512_set1_epi32(t.s_max)) != 0;
  const __m512i d = _mm512_and_si512(_mm512_slli_epi32(_mm512_sub_epi32(s, _mm512_set1_epi32(127)), 7),
                                     _mm512_set1_epi32(0xFFFF));
  return _mm512_or_si512(d, _mm512_slli_epi32(d, 16));
}

}  // namespace

// As pack_pairs (gemm/mx_pairs_avx512.h): per row pair and 32 columns, one byte permute puts
// the 64 codes in pair order, two more look up their BF16 bytes (decode64's tables,
// gemm/mx_decode_vbmi.h), the sign is merged and the block scales are added to the exponents
// of the non-zero words (a -0 word stays 0x8000, as decode32 gives it). A group whose block
// has a scale byte outside the tables' exact range, or a pair with a NaN/Inf code, is decoded
// by row_pairs' decode32 path instead: the same words.
void pack_pairs_avx512vbmi_bf16(const MXOperand& S, int64_t c0, int nv, int nstore, int64_t k0,
                                int64_t kc, uint32_t* out, int64_t ld) {
  const Tables& t = tables(S.elem);
  const bool e4m3 = S.elem == Elem::e4m3;
  const __m512i idx = _mm512_load_si512(kPairIdx.v);
  const __m512i thi0 = _mm512_load_si512(t.hi), thi1 = _mm512_load_si512(t.hi + 64);
  const __m512i tlo0 = _mm512_load_si512(t.lo), tlo1 = _mm512_load_si512(t.lo + 64);
  const __m512i m7f = _mm512_set1_epi8(0x7F), m80 = _mm512_set1_epi8(char(0x80));
  const __m512i m15 = _mm512_set1_epi16(0x7FFF);
  const __m512i badmag = _mm512_set1_epi8(char(t.bad_mag));
  __m512i off[6];    // per 16 columns: the block's word exponent offsets
  bool bad_grp[3];   // per 32 columns: a scale byte the tables cannot fold
  __m512 m[6];       // decode32 multipliers of the block, made when a group needs them
  bool have_m = false;
  for (int64_t p = 0; 2 * p < kc; ++p) {
    const int64_t k = k0 + 2 * p;
    if (p == 0 || k % kMXBlock == 0) {  // a new 32-row block: its scales
      have_m = false;
      for (int q = 0; q < nv; ++q) {
        bad_grp[q] = false;
        for (int h = 0; h < 2; ++h) {
          const int64_t c = c0 + 32 * q + 16 * h;
          const int64_t n = std::min<int64_t>(16, S.cols - c);
          const __mmask16 valid = n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
          __m128i bytes = _mm_setzero_si128();
          if (valid) {
            if (S.layout == MXLayout::colwise)
              bytes = _mm_maskz_loadu_epi8(valid, S.scales + (k / kMXBlock) * S.scale_ld + c);
            else  // tile32: one byte per 32 columns, and 16 | c
              bytes = _mm_set1_epi8(char(S.scale(k, c)));
          }
          off[2 * q + h] = pair_offsets(bytes, valid, t, bad_grp[q]);
        }
      }
    }
    const bool has_b = k + 1 < S.rows;
    const uint8_t* ra = S.codes + k * S.cols;
    uint32_t* o = out + p * ld;
    if (k + 2 * kPairsAhead + 1 < S.rows) {  // the rows kPairsAhead pairs on (see kPairsAhead)
      const uint8_t* pa = ra + 2 * kPairsAhead * S.cols + c0;
      const int64_t n = std::min<int64_t>(32 * nv, S.cols - c0);
      const uintptr_t first = reinterpret_cast<uintptr_t>(pa) & ~uintptr_t(63);
      const uintptr_t last = reinterpret_cast<uintptr_t>(pa + n - 1);
      for (uintptr_t a = first; a <= last; a += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(a + S.cols), _MM_HINT_T0);
      }
    }
    for (int q = 0; q < nv; ++q) {
      const int64_t c = c0 + 32 * q;
      __m512i lo, hi;
      if (c >= S.cols) {
        lo = hi = _mm512_setzero_si512();
      } else {
        const int64_t n = S.cols - c;
        const __m512i a = _mm512_zextsi256_si512(load_codes(ra + c, n));
        const __m512i b = has_b ? _mm512_zextsi256_si512(load_codes(ra + S.cols + c, n))
                                : _mm512_setzero_si512();
        const __m512i z = _mm512_permutex2var_epi8(a, idx, b);
        const __m512i mag = _mm512_and_si512(z, m7f);
        if (__builtin_expect(!bad_grp[q] && !_mm512_cmpge_epu8_mask(mag, badmag), 1)) {
          __m512i h = _mm512_permutex2var_epi8(thi0, mag, thi1);
          const __m512i l = _mm512_permutex2var_epi8(tlo0, mag, tlo1);
          h = _mm512_ternarylogic_epi32(h, z, m80, 0xF8);  // h | (z & 0x80)
          const __m512i w0 = _mm512_unpacklo_epi8(l, h), w1 = _mm512_unpackhi_epi8(l, h);
          lo = _mm512_mask_add_epi16(w0, _mm512_test_epi16_mask(w0, m15), w0, off[2 * q]);
          hi = _mm512_mask_add_epi16(w1, _mm512_test_epi16_mask(w1, m15), w1, off[2 * q + 1]);
        } else {
          if (!have_m) {
            block_multipliers(S, k, c0, nv, m);
            have_m = true;
          }
          const __m512i da = decode32(load_codes(ra + c, n), m[2 * q], m[2 * q + 1], e4m3);
          const __m512i db = has_b ? decode32(load_codes(ra + S.cols + c, n), m[2 * q],
                                              m[2 * q + 1], e4m3)
                                   : _mm512_setzero_si512();
          interleave(da, db, lo, hi);
        }
      }
      if (2 * q < nstore) _mm512_storeu_si512(o + 32 * q, lo);
      if (2 * q + 1 < nstore) _mm512_storeu_si512(o + 32 * q + 16, hi);
    }
  }
}

}  // namespace mxtrain::gemm_detail
