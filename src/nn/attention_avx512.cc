// nn/attention_avx512.cc — blocked causal attention (AttnPrecision::bf16) on AVX512-BF16.
//
// The algorithm, block sizes, work split and S^T[key][query] layout are those of the
// reference (nn/ops_attention.cc, attention_*_ref); read that first. Here every block product
// is a VDPBF16PS GEMM on packed BF16 tiles: B operands as pairs along the contraction,
// [K/2][N] dwords (one dword = the BF16 pair (k, k+1) of one column, the VNNI layout), A
// operands as one dword per (row, pair), broadcast by the micro-kernel (6 rows x 64 columns,
// 24 FP32 accumulators). Softmax statistics run 16 queries per vector, so max, sum and the
// rescale are vertical operations over key rows, in key order as in the reference.
//
// Packed forms (hd head columns, kp = ceil(hd/2) pairs; pads are zero):
//   rows   X [n][ld] dwords, pairs along the head columns       (A: K, V, P^T, dS^T)
//   rows^T X^T [kp][ld] dwords, the rows form transposed         (B: Q^T, dO^T)
//   pairs  X [n/2][ld] dwords, pairs of consecutive rows         (B: V, K, Q, dO; A: P, dS)
// Products (forward per query block, backward per (key block, query block) pair):
//   S^T  = K · Q^T      [nk, nq]      rows(K) x rows^T(Q)
//   dP^T = V · dO^T     [nk, nq]      rows(V) x rows^T(dO)
//   O   += P · V        [nq, hd]      pairs(P^T) read as A (row stride 1) x pairs(V)
//   dV  += P^T · dO     [nk, hd]      rows(P^T) x pairs(dO)
//   dK  += dS^T · Q     [nk, hd]      rows(dS^T) x pairs(Q)
//   dQ  += dS · K       [nq, hd]      pairs(dS^T) read as A x pairs(K)
// Per thread (kept across calls): a few 64 x 64 tiles, the packed K and V of the head the
// forward is on (each key block packed once per head and thread), the packed Q and dO of the
// head the backward is on, and its dQ accumulators — O(T·hd); nothing is T x T.
//
// exp: x clamped to [-110, 100], k = round(x·log2 e), r = x - k·ln2 (two-part ln2),
// e^r = 1 + r + r²·p5(r) (the Cephes expf polynomial), times 2^k by VSCALEFPS (which also
// gives 0 below the FP32 range and inf above). Relative error below 2e-7 over [-87, 88]
// [attention_test `FastExpIsAccurate`].
// GCC 12 reports the undefined-source operands inside its own AVX-512 intrinsics as
// maybe-uninitialized; they are not read.
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mxtrain/aligned.h"
#include "nn/attention_kernels.h"

namespace mxtrain::nn_detail {
namespace {

constexpr int64_t BL = kAttnBlock;
constexpr int MR = 6;  // micro-tile rows

using DwordBuf = std::vector<uint32_t, AlignedAllocator<uint32_t>>;
using FloatBuf = std::vector<float, AlignedAllocator<float>>;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

// ---- exp ----------------------------------------------------------------------------------

inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-110.f), x);  // (a NaN x passes through both)
  x = _mm512_min_ps(_mm512_set1_ps(100.f), x);
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(y, k);
}

// ---- packing --------------------------------------------------------------------------------

// The packers and the rotation read strided rows of qkv, dO and O (3D or D floats apart):
// nearly every row is on another page, where the hardware's stream prefetch stops, and these
// are the rows' first reads. So each asks for the row kRowsAhead on while it converts this one.
constexpr int64_t kRowsAhead = 6;
inline void prefetch_row(const float* row, int64_t cols) {
  for (int64_t c = 0; c < cols; c += 16) _mm_prefetch(reinterpret_cast<const char*>(row + c), _MM_HINT_T0);
}
// The same for a row about to be written: PREFETCHW (every CPU with AVX512-BF16 has it) takes
// the lines in exclusive state, so the stores do not wait for their read-for-ownership.
inline void prefetch_row_w(float* row, int64_t cols) {
  for (int64_t c = 0; c < cols; c += 16) asm volatile("prefetchw %0" : : "m"(row[c]));
}

// rows: dst[r][p] = (x[r][2p], x[r][2p+1]) in BF16 for r < n, p < ld (x: [n, cols], stride
// lds; pairs past the columns are zero). ld is a multiple of 16.
void pack_rows(uint32_t* dst, int64_t ld, const float* x, int64_t lds, int64_t n, int64_t cols) {
  for (int64_t r = 0; r < n; ++r) {
    if (r + kRowsAhead < n) prefetch_row(x + (r + kRowsAhead) * lds, cols);
    for (int64_t c = 0; c < 2 * ld; c += 32) {
      const __m512 lo = _mm512_maskz_loadu_ps(lanes(cols - c), x + r * lds + c);
      const __m512 hi = _mm512_maskz_loadu_ps(lanes(cols - c - 16), x + r * lds + c + 16);
      _mm512_storeu_si512(dst + r * ld + c / 2, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

// rows^T: dst[p][r] = pair p of row r for p < kp, r < ldt (rows r >= n zero). tmp: n * 16 *
// ceil(kp / 16) dwords.
void pack_rows_t(uint32_t* dst, int64_t ldt, uint32_t* tmp, const float* x, int64_t lds,
                 int64_t n, int64_t cols) {
  const int64_t kp = (cols + 1) / 2, ld = round_up(kp, 16);
  pack_rows(tmp, ld, x, lds, n, cols);
  for (int64_t p = 0; p < kp; ++p) {
    uint32_t* d = dst + p * ldt;
    for (int64_t r = 0; r < n; ++r) d[r] = tmp[r * ld + p];
    for (int64_t r = n; r < ldt; ++r) d[r] = 0;
  }
}

// pairs: dst[p][c] = (x[2p][c], x[2p+1][c]) in BF16 for p < ceil(n/2), c < ld (a missing row
// 2p+1 and columns past cols are zero). ld is a multiple of 16.
void pack_pairs(uint32_t* dst, int64_t ld, const float* x, int64_t lds, int64_t n, int64_t cols) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                       24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                       16, 0);
  for (int64_t p = 0; 2 * p < n; ++p) {
    const float* x0 = x + 2 * p * lds;
    const bool odd = 2 * p + 1 < n;
    for (int64_t r = 2 * p + kRowsAhead; r < std::min(n, 2 * p + kRowsAhead + 2); ++r)
      prefetch_row(x + r * lds, cols);
    for (int64_t c = 0; c < ld; c += 16) {
      const __mmask16 m = lanes(cols - c);
      const __m512 a = _mm512_maskz_loadu_ps(m, x0 + c);
      const __m512 b = _mm512_maskz_loadu_ps(odd ? m : __mmask16(0), x0 + lds + c);
      const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // [a | b] as 32 BF16
      _mm512_storeu_si512(dst + p * ld + c, _mm512_permutexvar_epi16(idx, ab));
    }
  }
}

// ---- rotary position embedding ---------------------------------------------------------------

constexpr int kRn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// dst [2 half] = src's pairs (x_i, x_{i+half}) rotated by the angle of cos c, sin s [half]
// (inverse: by minus it): u = a c - e sn, w = a sn + e c with sn = ±s, rope_forward's
// operations (nn/ops_rope.cc) one by one — products rounded on their own, never fused into the
// add — so the rotated values are its bits. dst may be src.
inline void rotate_row(float* dst, const float* src, const float* c, const float* s,
                       int64_t half, bool inverse) {
  const __m512 flip = _mm512_castsi512_ps(_mm512_set1_epi32(inverse ? int(0x80000000u) : 0));
  for (int64_t i = 0; i < half; i += 16) {
    const __mmask16 m = lanes(half - i);
    const __m512 a = _mm512_maskz_loadu_ps(m, src + i), e = _mm512_maskz_loadu_ps(m, src + half + i);
    const __m512 cv = _mm512_maskz_loadu_ps(m, c + i);
    const __m512 sn = _mm512_xor_ps(_mm512_maskz_loadu_ps(m, s + i), flip);  // exact ±s
    const __m512 u = _mm512_sub_ps(_mm512_mul_round_ps(a, cv, kRn), _mm512_mul_round_ps(e, sn, kRn));
    const __m512 w = _mm512_add_ps(_mm512_mul_round_ps(a, sn, kRn), _mm512_mul_round_ps(e, cv, kRn));
    _mm512_mask_storeu_ps(dst + i, m, u);
    _mm512_mask_storeu_ps(dst + half + i, m, w);
  }
}

// dst [n][hd] = rows [pos0, pos0 + n) of x (stride lds) rotated forward (q and k as the
// products read them).
void rotate_rows(float* dst, const float* x, int64_t lds, int64_t n, int64_t hd, int64_t pos0,
                 const RopeTable& rope) {
  for (int64_t r = 0; r < n; ++r) {
    if (r + kRowsAhead < n) prefetch_row(x + (r + kRowsAhead) * lds, hd);
    rotate_row(dst + r * hd, x + r * lds, rope.cos(pos0 + r), rope.sin(pos0 + r), hd / 2, false);
  }
}

// ---- block products -------------------------------------------------------------------------

// c[m][0, 16 NV) (+)= Σ_p A(m, p) · b[p][...] for m < MR_, A(m, p) = a[m * ars + p * aps].
template <int MR_, int NV>
void tile(const uint32_t* a, int64_t ars, int64_t aps, const uint32_t* b, int64_t ldb,
          int64_t kp, float* c, int64_t ldc, bool acc) {
  __m512 cr[MR_][NV];  // (fully unrolled below, so these stay in registers)
#pragma GCC unroll 8
  for (int m = 0; m < MR_; ++m)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      cr[m][v] = acc ? _mm512_loadu_ps(c + m * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + p * ldb + 16 * v);
#pragma GCC unroll 8
    for (int m = 0; m < MR_; ++m) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[m * ars + p * aps]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) cr[m][v] = _mm512_dpbf16_ps(cr[m][v], av, bv[v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR_; ++m)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + m * ldc + 16 * v, cr[m][v]);
}

using TileFn = void (*)(const uint32_t*, int64_t, int64_t, const uint32_t*, int64_t, int64_t,
                        float*, int64_t, bool);
template <int M>
constexpr TileFn kRow[4] = {tile<M, 1>, tile<M, 2>, tile<M, 3>, tile<M, 4>};
constexpr const TileFn* kTiles[MR] = {kRow<1>, kRow<2>, kRow<3>, kRow<4>, kRow<5>, kRow<6>};

// C [M, N] (+)= A · B over kp pairs; N a multiple of 16. A(m, p) = a[m * ars + p * aps],
// B: [kp][ldb] dwords, C: row stride ldc.
void gemm(int64_t M, int64_t N, int64_t kp, const uint32_t* a, int64_t ars, int64_t aps,
          const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool acc) {
  for (int64_t n0 = 0; n0 < N; n0 += 64) {
    const int64_t nv = std::min<int64_t>(4, (N - n0) / 16);
    for (int64_t m0 = 0; m0 < M; m0 += MR) {
      const int64_t mr = std::min<int64_t>(MR, M - m0);
      kTiles[mr - 1][nv - 1](a + m0 * ars, ars, aps, b + n0, ldb, kp, c + m0 * ldc + n0, ldc,
                             acc);
    }
  }
}

// ---- forward --------------------------------------------------------------------------------

// Per-thread scratch, kept across calls (grown when a call needs more, never shrunk). kr and
// vp hold the packed K and V of one head, `packed` key blocks of head `head` so far: a thread
// walks consecutive query blocks of a head (static schedule), so it packs each block once.
struct FwdScratch {
  DwordBuf qt, tmp, kr, vp, pp;
  FloatBuf st, o, m, l, alpha, rot;  // rot: a block of rotated q or k rows [BL][hd]
  int64_t head = -1, packed = 0;
  void fit(int64_t T, int64_t kq, int64_t hdp) {
    const int64_t Tp = round_up(T, BL);
    qt.resize(kq * BL), tmp.resize(BL * kq), kr.resize(Tp * kq), vp.resize(Tp / 2 * hdp);
    pp.resize(BL / 2 * BL), st.resize(BL * BL), o.resize(BL * hdp), m.resize(BL);
    l.resize(BL), alpha.resize(BL), rot.resize(BL * hdp);
    head = -1;  // qkv is another tensor now
  }
};

FwdScratch& fwd_scratch() {
  thread_local FwdScratch w;
  return w;
}

// One query block [q0, q0 + nq) of head number `head`; base = its q columns of batch row 0.
// The scratch is read through local pointers: its vectors' members would otherwise be
// reloaded after every (may-alias) vector store, and the thread_local's address with them —
// under -fPIC a __tls_get_addr call, with a vzeroupper and every live zmm spilled around it.
void forward_block(float* out, float* lse, const float* base, int64_t head, int64_t q0,
                   int64_t T, int64_t D, int64_t hd, float scale, const RopeTable* rope,
                   FwdScratch& w) {
  const int64_t C3 = 3 * D, kp = (hd + 1) / 2, kq = round_up(kp, 16), hdp = round_up(hd, 16);
  const int64_t nq = std::min(BL, T - q0), nqv = (nq + 15) / 16;
  uint32_t* const qt = w.qt.data();
  uint32_t* const krs = w.kr.data();
  uint32_t* const vps = w.vp.data();
  uint32_t* const pp = w.pp.data();
  float* const st = w.st.data();
  float* const o = w.o.data();
  float* const mm = w.m.data();
  float* const ll = w.l.data();
  float* const alpha = w.alpha.data();
  float* const rot = w.rot.data();
  if (rope) {  // q rotated first, as rope_forward would have left it in qkv
    rotate_rows(rot, base + q0 * C3, C3, nq, hd, q0, *rope);
    pack_rows_t(qt, BL, w.tmp.data(), rot, hd, nq, hd);
  } else {
    pack_rows_t(qt, BL, w.tmp.data(), base + q0 * C3, C3, nq, hd);
  }
  for (int64_t g = 0; g < nqv; ++g) {
    _mm512_storeu_ps(mm + 16 * g, _mm512_set1_ps(-INFINITY));
    _mm512_storeu_ps(ll + 16 * g, _mm512_setzero_ps());
  }
  std::fill_n(o, BL * hdp, 0.f);
  const __m512 vscale = _mm512_set1_ps(scale);
  if (w.head != head) w.head = head, w.packed = 0;
  int64_t packed = w.packed;
  for (int64_t s0 = 0; s0 <= q0; s0 += BL) {
    const int64_t nk = std::min(BL, T - s0);
    const uint32_t* kr = krs + s0 * kq;
    const uint32_t* vp = vps + s0 / 2 * hdp;
    if (s0 / BL >= packed) {
      if (rope) {
        rotate_rows(rot, base + s0 * C3 + D, C3, nk, hd, s0, *rope);
        pack_rows(krs + s0 * kq, kq, rot, hd, nk, hd);
      } else {
        pack_rows(krs + s0 * kq, kq, base + s0 * C3 + D, C3, nk, hd);
      }
      pack_pairs(vps + s0 / 2 * hdp, hdp, base + s0 * C3 + 2 * D, C3, nk, hd);
      packed = s0 / BL + 1;
    }
    gemm(nk, 16 * nqv, kp, kr, kq, 1, qt, BL, st, BL, false);
    for (int64_t g = 0; g < nqv; ++g) {
      const __m512i qi = _mm512_add_epi32(_mm512_set1_epi32(int(q0 + 16 * g)),
                                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                            11, 12, 13, 14, 15));
      const __m512 m_old = _mm512_loadu_ps(mm + 16 * g);
      __m512 mb = m_old;
      for (int64_t s = 0; s < nk; ++s) {
        float* x = st + s * BL + 16 * g;
        const __mmask16 keep = _mm512_cmp_epi32_mask(_mm512_set1_epi32(int(s0 + s)), qi,
                                                     _MM_CMPINT_LE);
        const __m512 v = _mm512_mask_mul_ps(_mm512_set1_ps(-INFINITY), keep,
                                            _mm512_loadu_ps(x), vscale);
        _mm512_storeu_ps(x, v);
        mb = _mm512_max_ps(mb, v);
      }
      _mm512_storeu_ps(alpha + 16 * g, exp16(_mm512_sub_ps(m_old, mb)));
      _mm512_storeu_ps(mm + 16 * g, mb);
      __m512 sum = _mm512_setzero_ps();
      for (int64_t s = 0; s < nk; ++s) {
        float* x = st + s * BL + 16 * g;
        const __mmask16 keep = _mm512_cmp_epi32_mask(_mm512_set1_epi32(int(s0 + s)), qi,
                                                     _MM_CMPINT_LE);
        const __m512 e = _mm512_maskz_mov_ps(keep, exp16(_mm512_sub_ps(_mm512_loadu_ps(x), mb)));
        _mm512_storeu_ps(x, e);
        sum = _mm512_add_ps(sum, e);
      }
      const __m512 l = _mm512_loadu_ps(ll + 16 * g);
      _mm512_storeu_ps(ll + 16 * g, _mm512_fmadd_ps(_mm512_loadu_ps(alpha + 16 * g), l, sum));
    }
    for (int64_t q = 0; q < nq; ++q) {
      const __m512 a = _mm512_set1_ps(alpha[q]);
      for (int64_t n = 0; n < hdp; n += 16)
        _mm512_storeu_ps(o + q * hdp + n, _mm512_mul_ps(a, _mm512_loadu_ps(o + q * hdp + n)));
    }
    pack_pairs(pp, BL, st, BL, nk, 16 * nqv);
    gemm(nq, hdp, (nk + 1) / 2, pp, 1, BL, vp, hdp, o, hdp, true);
  }
  w.packed = packed;
  for (int64_t q = 0; q < nq; ++q) {
    if (q + kRowsAhead < nq) prefetch_row_w(out + (q0 + q + kRowsAhead) * D, hd);
    const __m512 inv = _mm512_set1_ps(1.f / ll[q]);
    float* dst = out + (q0 + q) * D;
    for (int64_t n = 0; n < hd; n += 16)
      _mm512_mask_storeu_ps(dst + n, lanes(hd - n),
                            _mm512_mul_ps(_mm512_loadu_ps(o + q * hdp + n), inv));
    lse[q0 + q] = mm[q] + std::log(ll[q]);
  }
}

}  // namespace

void attention_forward_avx512bf16(float* out, float* lse, const float* qkv, int64_t B,
                                  int64_t T, int64_t D, int64_t H, const RopeTable* rope) {
  const int64_t hd = D / H, nqb = (T + BL - 1) / BL;
  const int64_t kq = round_up((hd + 1) / 2, 16), hdp = round_up(hd, 16);
  const float scale = float(1.0 / std::sqrt(double(hd)));
#pragma omp parallel
  {
    FwdScratch& w = fwd_scratch();
    w.fit(T, kq, hdp);
#pragma omp for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t qb = 0; qb < nqb; ++qb)
          forward_block(out + b * T * D + h * hd, lse + (b * H + h) * T,
                        qkv + b * T * 3 * D + h * hd, b * H + h, qb * BL, T, D, hd, scale,
                        rope, w);
  }
}

// ---- backward -------------------------------------------------------------------------------

namespace {

struct BwdScratch {
  DwordBuf qt, gt, qp, gp, tmp, kr, vr, kpp, ptb, dsb, dsp;
  FloatBuf dq, dd, ls, st, dpt, dk, dv;
  FloatBuf qrot, krot, row;  // rotated q [T][hd] and k [BL][hd], one output row [hdp]
  void fit(int64_t T, int64_t kq, int64_t hdp, bool rope) {
    if (rope) qrot.resize(T * hdp), krot.resize(BL * hdp), row.resize(hdp);
    const int64_t Tp = round_up(T, BL);
    qt.resize(kq * Tp), gt.resize(kq * Tp), qp.resize(Tp / 2 * hdp), gp.resize(Tp / 2 * hdp);
    tmp.resize(T * kq), kr.resize(BL * kq), vr.resize(BL * kq), kpp.resize(BL / 2 * hdp);
    ptb.resize(BL * BL / 2), dsb.resize(BL * BL / 2), dsp.resize(BL / 2 * BL);
    dq.resize(T * hdp), dd.resize(Tp), ls.resize(Tp), st.resize(BL * BL), dpt.resize(BL * BL);
    dk.resize(BL * hdp), dv.resize(BL * hdp);
  }
};

BwdScratch& bwd_scratch() {
  thread_local BwdScratch w;
  return w;
}

// One head: base = its q columns of batch row 0 in qkv (and dqkv), g/o its columns in dout/out.
void backward_head(float* dbase, const float* g, const float* base, const float* o,
                   const float* lse, int64_t T, int64_t D, int64_t hd, float scale,
                   const RopeTable* rope, BwdScratch& w) {
  const int64_t C3 = 3 * D, kp = (hd + 1) / 2, kq = round_up(kp, 16), hdp = round_up(hd, 16);
  const int64_t Tp = round_up(T, BL);
  // Local pointers, not the thread_local's members (see forward_block).
  uint32_t *const qt_ = w.qt.data(), *const gt_ = w.gt.data(), *const qp_ = w.qp.data();
  uint32_t *const gp_ = w.gp.data(), *const tmp_ = w.tmp.data(), *const kr_ = w.kr.data();
  uint32_t *const vr_ = w.vr.data(), *const kpp_ = w.kpp.data(), *const ptb_ = w.ptb.data();
  uint32_t *const dsb_ = w.dsb.data(), *const dsp_ = w.dsp.data();
  float *const dq_ = w.dq.data(), *const dd_ = w.dd.data(), *const ls_ = w.ls.data();
  float *const st_ = w.st.data(), *const dpt_ = w.dpt.data(), *const dk_ = w.dk.data();
  float* const dv_ = w.dv.data();
  // With rope, q and k are read rotated (as rope_forward would have left them) and the q and
  // k gradients are rotated back before they are stored (rope_backward's work).
  const int64_t half = hd / 2;
  const float* qsrc = base;
  int64_t qlds = C3;
  if (rope) {
    rotate_rows(w.qrot.data(), base, C3, T, hd, 0, *rope);
    qsrc = w.qrot.data(), qlds = hd;
  }
  pack_rows_t(qt_, Tp, tmp_, qsrc, qlds, T, hd);
  pack_rows_t(gt_, Tp, tmp_, g, D, T, hd);
  std::fill_n(qp_, Tp / 2 * hdp, 0u);
  std::fill_n(gp_, Tp / 2 * hdp, 0u);
  pack_pairs(qp_, hdp, qsrc, qlds, T, hd);
  pack_pairs(gp_, hdp, g, D, T, hd);
  std::fill_n(dd_, Tp, 0.f);
  std::fill_n(ls_, Tp, 0.f);
  for (int64_t q = 0; q < T; ++q) {
    if (q + kRowsAhead < T) prefetch_row(o + (q + kRowsAhead) * D, hd);  // dO's are in cache
    __m512 acc = _mm512_setzero_ps();
    for (int64_t n = 0; n < hd; n += 16) {
      const __mmask16 m = lanes(hd - n);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, g + q * D + n),
                            _mm512_maskz_loadu_ps(m, o + q * D + n), acc);
    }
    dd_[q] = _mm512_reduce_add_ps(acc);
    ls_[q] = lse[q];
  }
  std::fill_n(dq_, T * hdp, 0.f);
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t s0 = 0; s0 < T; s0 += BL) {
    const int64_t nk = std::min(BL, T - s0);
    const float* ksrc = base + s0 * C3 + D;
    int64_t klds = C3;
    if (rope) {
      rotate_rows(w.krot.data(), ksrc, C3, nk, hd, s0, *rope);
      ksrc = w.krot.data(), klds = hd;
    }
    pack_rows(kr_, kq, ksrc, klds, nk, hd);
    pack_rows(vr_, kq, base + s0 * C3 + 2 * D, C3, nk, hd);
    pack_pairs(kpp_, hdp, ksrc, klds, nk, hd);
    std::fill_n(dk_, BL * hdp, 0.f);
    std::fill_n(dv_, BL * hdp, 0.f);
    for (int64_t q0 = s0; q0 < T; q0 += BL) {
      const int64_t nq = std::min(BL, T - q0), nqv = (nq + 15) / 16;
      gemm(nk, 16 * nqv, kp, kr_, kq, 1, qt_ + q0, Tp, st_, BL, false);
      gemm(nk, 16 * nqv, kp, vr_, kq, 1, gt_ + q0, Tp, dpt_, BL, false);
      for (int64_t s = 0; s < nk; ++s) {
        float* pr = st_ + s * BL;
        float* dr = dpt_ + s * BL;
        for (int64_t gq = 0; gq < 4; ++gq) {
          __m512 p = _mm512_setzero_ps(), ds = _mm512_setzero_ps();
          if (gq < nqv) {
            const __m512i qi = _mm512_add_epi32(_mm512_set1_epi32(int(16 * gq)), iota);
            const __mmask16 keep =
                _mm512_cmp_epi32_mask(_mm512_set1_epi32(int(s0 + s - q0)), qi, _MM_CMPINT_LE) &
                lanes(nq - 16 * gq);
            const __m512 x = _mm512_fmsub_ps(_mm512_loadu_ps(pr + 16 * gq), vscale,
                                             _mm512_loadu_ps(ls_ + q0 + 16 * gq));
            p = _mm512_maskz_mov_ps(keep, exp16(x));
            ds = _mm512_maskz_mul_ps(
                keep, p,
                _mm512_sub_ps(_mm512_loadu_ps(dr + 16 * gq),
                              _mm512_loadu_ps(dd_ + q0 + 16 * gq)));
          }
          _mm512_storeu_ps(dr + 16 * gq, ds);
          if (gq % 2 == 1) {
            const __m512 p_lo = _mm512_loadu_ps(pr + 16 * (gq - 1));
            const __m512 d_lo = _mm512_loadu_ps(dr + 16 * (gq - 1));
            _mm512_storeu_si512(ptb_ + s * (BL / 2) + 8 * (gq - 1),
                                (__m512i)_mm512_cvtne2ps_pbh(p, p_lo));
            _mm512_storeu_si512(dsb_ + s * (BL / 2) + 8 * (gq - 1),
                                (__m512i)_mm512_cvtne2ps_pbh(ds, d_lo));
          } else {
            _mm512_storeu_ps(pr + 16 * gq, p);
          }
        }
      }
      const int64_t qpairs = 8 * nqv;  // query pairs, padded lanes zero
      gemm(nk, hdp, qpairs, ptb_, BL / 2, 1, gp_ + q0 / 2 * hdp, hdp,
           dv_, hdp, true);
      gemm(nk, hdp, qpairs, dsb_, BL / 2, 1, qp_ + q0 / 2 * hdp, hdp,
           dk_, hdp, true);
      pack_pairs(dsp_, BL, dpt_, BL, nk, 16 * nqv);
      gemm(nq, hdp, (nk + 1) / 2, dsp_, 1, BL, kpp_, hdp,
           dq_ + q0 * hdp, hdp, true);
    }
    for (int64_t s = 0; s < nk; ++s) {
      float* dkr = dbase + (s0 + s) * C3 + D;
      if (s + kRowsAhead < nk) {
        prefetch_row_w(dkr + kRowsAhead * C3, hd);
        prefetch_row_w(dkr + kRowsAhead * C3 + D, hd);
      }
      float* const dst = rope ? w.row.data() : dkr;
      for (int64_t n = 0; n < hd; n += 16) {
        const __mmask16 m = lanes(hd - n);
        _mm512_mask_storeu_ps(dst + n, m,
                              _mm512_mul_ps(vscale, _mm512_loadu_ps(dk_ + s * hdp + n)));
        _mm512_mask_storeu_ps(dkr + D + n, m, _mm512_loadu_ps(dv_ + s * hdp + n));
      }
      if (rope) rotate_row(dkr, dst, rope->cos(s0 + s), rope->sin(s0 + s), half, true);
    }
  }
  for (int64_t q = 0; q < T; ++q) {
    float* const dqr = dbase + q * C3;
    if (q + kRowsAhead < T) prefetch_row_w(dqr + kRowsAhead * C3, hd);
    float* const dst = rope ? w.row.data() : dqr;
    for (int64_t n = 0; n < hd; n += 16)
      _mm512_mask_storeu_ps(dst + n, lanes(hd - n),
                            _mm512_mul_ps(vscale, _mm512_loadu_ps(dq_ + q * hdp + n)));
    if (rope) rotate_row(dqr, dst, rope->cos(q), rope->sin(q), half, true);
  }
}

}  // namespace

void attention_backward_avx512bf16(float* dqkv, const float* dout, const float* qkv,
                                   const float* out, const float* lse, int64_t B, int64_t T,
                                   int64_t D, int64_t H, const RopeTable* rope) {
  const int64_t hd = D / H, kq = round_up((hd + 1) / 2, 16), hdp = round_up(hd, 16);
  const float scale = float(1.0 / std::sqrt(double(hd)));
#pragma omp parallel
  {
    BwdScratch& w = bwd_scratch();
    w.fit(T, kq, hdp, rope != nullptr);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        backward_head(dqkv + b * T * 3 * D + h * hd, dout + b * T * D + h * hd,
                      qkv + b * T * 3 * D + h * hd, out + b * T * D + h * hd,
                      lse + (b * H + h) * T, T, D, hd, scale, rope, w);
  }
}

void exp_avx512(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace mxtrain::nn_detail
