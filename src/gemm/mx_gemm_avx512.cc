// gemm/mx_gemm_avx512.cc — MX products on AVX512-BF16: FP8 panels decoded into cache-resident
// BF16 blocks (scales folded in), multiplied by a 6x64 VDPBF16PS micro-kernel.
//
// Blocking (Goto style): K is cut into chunks of KC = 1024. For each chunk a thread decodes its
// share of op(B) — all of its N columns — into VNNI panels Bp[panel][KC/2][64] (one dword = the
// BF16 pair (k, k+1) of one column), then walks M in blocks of MC = 96 rows: it decodes that
// block of op(A) into Ap (pairs along K) and runs the micro-kernel over every (6-row, 64-col)
// tile. The micro-kernel keeps a 6x64 FP32 tile of C in 24 registers and issues one
// VDPBF16PS per (row, 16 columns) and K pair; C is loaded at the start of every chunk but the
// first (or the first too when accumulating), so C is FP32 throughout. Threads split the
// larger side of C (N by 64-column panels, or M by row ranges), so the operand every thread
// decodes whole is the smaller one; each output element is written by one thread, in a fixed
// order, so results do not depend on the thread count. A forward (nt) or dgrad (nn) product
// with fewer rows than columns, but at least 64 (one full panel), and C at most kSwapMax
// elements, runs as C^T = op(B)^T · op(A)^T: the threads then split the weight's side and
// reuse the small activation's few panels, and forward the transposing packer gets the
// activation; C takes the transpose (the same FP32 sums, moved) from a per-caller buffer of
// that size, each thread moving the rows it finished while they are still in its cache. A
// dgrad that writes C with at most 192 rows (kAFirstRows) runs directly (see panel_gemm).
//
// Decoding (gemm/mx_decode_avx512.h) is exact and flushes values below 2^-126 as
// mx_operand_value defines; operands must have foldable scales (mx_scales_foldable; gemm_mx.cc
// routes the others to the reference, and small-M forward products to the streaming kernel).
//
// Operand sources (see gemm/mx_gemm.h for the orientations):
//   A rows   (nt, nn): A stored [M, K] with blocks along K  -> Ap[m][KC/2] (row of pairs)
//   A pairs  (tn):     A stored [K, M] with blocks along K  -> Ap[KC/2][MC] (pair-major)
//   B rows   (nn, tn): B stored [K, N]                      -> rows k, k+1 interleaved
//   B transposed (nt): B stored [N, K]                      -> rows decoded, 16x16 transposed
// A pairs and B rows are both pairs of stored rows (a PackPairs packer). Two kernels share the
// panel product and differ only in the packers of A rows and of pairs (Packers):
// mx_gemm_avx512bf16 packs with pack_a_rows below and pack_pairs (gemm/mx_pairs_avx512.h),
// mx_gemm_avx512vbmi_bf16 with pack_a_rows_avx512vbmi_bf16 and pack_pairs_avx512vbmi_bf16
// (mx_pack_avx512vbmi.cc: table decoding, the same words). The 4-bit products
// (fp4_gemm_avx512bf16, gemm/fp4_gemm.h) run the same panel product with the 4-bit packers
// (fp4_pack_avx512.cc) and one difference in the sums: they start from zero and the last K
// chunk stores alpha · P (+ C) (Finish), so C is added once, to the finished sums.
// GCC 12 reports the undefined-source operands inside its own AVX-512 intrinsics as
// maybe-uninitialized (conversions) or uninitialized (the unpacks and shuffles of
// transpose16); they are not read.
#if !defined(__clang__)  // GCC's warnings (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gemm/fp4_gemm.h"
#include "gemm/mx_decode_avx512.h"
#include "gemm/mx_gemm.h"
#include "gemm/mx_pairs_avx512.h"
#include "gemm/mx_promote_avx512.h"
#include "gemm/mx_transpose_avx512.h"
#include "mxtrain/aligned.h"

namespace mxtrain::gemm_detail {
namespace {

constexpr int MR = 6;           // micro-tile rows
constexpr int NR = 64;          // micro-tile columns (4 vectors of 16 FP32)
constexpr int64_t KC = 1024;    // K chunk (even)
constexpr int64_t MC = 96;      // rows of A per block (multiple of MR and of 32)

// ---- packing -------------------------------------------------------------------------------

// A rows: Ap[m * ld + p] = pair (k0 + 2p, k0 + 2p + 1) of stored row r0 + m, for m < mc and
// pairs covering [k0, k0 + kc). A is stored [rows, K] with blocks along K (rowwise/tile32).
void pack_a_rows(const MXOperand& A, int64_t r0, int64_t mc, int64_t k0, int64_t kc,
                 uint32_t* Ap, int64_t ld) {
  const float* mult = multipliers(A.elem).v;
  const bool e4m3 = A.elem == Elem::e4m3;
  for (int64_t m = 0; m < mc; ++m) {
    const int64_t r = r0 + m;
    const uint8_t* row = A.codes + r * A.cols;
    const uint8_t* ahead = m + kPackRowsAhead < mc ? row + kPackRowsAhead * A.cols : nullptr;
    for (int64_t j = 0; j * 32 < kc; ++j) {
      const int64_t k = k0 + j * 32;
      if (ahead && j % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(ahead + k), _MM_HINT_T0);
      const __m512 f = _mm512_set1_ps(mult[A.scale(r, k)]);
      const __m512i v = decode32(load_codes(row + k, A.cols - k), f, f, e4m3);
      _mm512_storeu_si512(Ap + m * ld + j * 16, v);
    }
  }
}

// Pairs of stored rows (nn and tn's B, tn's A): pack_pairs (gemm/mx_pairs_avx512.h) or the
// VBMI packer (pack_pairs_avx512vbmi_bf16), through the Packers below.

// B transposed (nt): B stored [N, K] with blocks along K; panel Bp[p * NR + n] = pair
// (B(c0 + n, k0 + 2p), B(c0 + n, k0 + 2p + 1)). Rows past N are zero.
void pack_b_transposed(const MXOperand& B, int64_t c0, int64_t k0, int64_t kc, uint32_t* Bp) {
  const float* mult = multipliers(B.elem).v;
  const bool e4m3 = B.elem == Elem::e4m3;
  for (int g = 0; g < NR / 16; ++g) {
    for (int64_t j = 0; j * 32 < kc; ++j) {
      const int64_t k = k0 + j * 32;
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const int64_t n = c0 + g * 16 + i;
        if (n >= B.rows) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const uint8_t* row = B.codes + n * B.cols;
        // The 16 rows are read 32 bytes at a time, each 1 row stride apart: too many streams
        // for the hardware prefetcher, so each row's line four lines ahead is asked for.
        if ((j & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(row + k + 256), _MM_HINT_T0);
        const __m512 f = _mm512_set1_ps(mult[B.scale(n, k)]);
        r[i] = decode32(load_codes(row + k, B.cols - k), f, f, e4m3);
      }
      transpose16(r);  // r[q] = pair j*16 + q of the 16 rows
      for (int q = 0; q < 16; ++q) _mm512_storeu_si512(Bp + (j * 16 + q) * NR + g * 16, r[q]);
    }
  }
}

// ---- micro-kernel ----------------------------------------------------------------------------

// acc[m][v] += Σ_{p in [p0, p1)} a(m, p) · b(p, 16v .. 16v+15), one VDPBF16PS per (m, v, p):
// the inner loop both micro-kernels share (inlined, so each keeps its registers).
template <int ROWS>
[[gnu::always_inline]] inline void dot_pairs(__m512 (&acc)[ROWS][4], const uint32_t* a,
                                             int64_t sm, int64_t sp, const uint32_t* b,
                                             int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * NR);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * NR + 16);
    const __m512bh b2 = (__m512bh)_mm512_loadu_si512(b + p * NR + 32);
    const __m512bh b3 = (__m512bh)_mm512_loadu_si512(b + p * NR + 48);
    #pragma GCC unroll 8
    for (int m = 0; m < ROWS; ++m) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[m * sm + p * sp]));
      acc[m][0] = _mm512_dpbf16_ps(acc[m][0], av, b0);
      acc[m][1] = _mm512_dpbf16_ps(acc[m][1], av, b1);
      acc[m][2] = _mm512_dpbf16_ps(acc[m][2], av, b2);
      acc[m][3] = _mm512_dpbf16_ps(acc[m][3], av, b3);
    }
  }
}

// C[ROWS, ncols] (ncols <= 64) = (load ? C : 0) + Σ_p a(m, p) · b(p, :) over kp pairs, or with
// `fin` those sums finished as it says. a(m, p) = a[m * sm + p * sp] (a BF16 pair); b = panel
// [kp][64] pairs.
template <int ROWS>
void micro_kernel(int64_t kp, const uint32_t* a, int64_t sm, int64_t sp, const uint32_t* b,
                  float* C, int64_t ldc, int ncols, bool load, const Finish* fin) {
  __m512 acc[ROWS][4];
  __mmask16 mask[4];
  #pragma GCC unroll 8
  for (int v = 0; v < 4; ++v) {
    const int n = std::clamp(ncols - 16 * v, 0, 16);
    mask[v] = __mmask16((1u << n) - 1);
  }
  #pragma GCC unroll 8
  for (int m = 0; m < ROWS; ++m)
    #pragma GCC unroll 8
    for (int v = 0; v < 4; ++v)
      acc[m][v] = load ? _mm512_maskz_loadu_ps(mask[v], C + m * ldc + 16 * v) : _mm512_setzero_ps();
  dot_pairs<ROWS>(acc, a, sm, sp, b, 0, kp);
  if (fin) {
    constexpr int R = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 alpha = _mm512_set1_ps(fin->alpha);
    #pragma GCC unroll 8
    for (int m = 0; m < ROWS; ++m)
      #pragma GCC unroll 8
      for (int v = 0; v < 4; ++v) {
        if (!mask[v]) continue;
        float* c = C + m * ldc + 16 * v;
        __m512 u = fin->alpha == 1.f ? acc[m][v] : _mm512_mul_round_ps(alpha, acc[m][v], R);
        if (fin->add_c) u = _mm512_add_round_ps(_mm512_maskz_loadu_ps(mask[v], c), u, R);
        _mm512_mask_storeu_ps(c, mask[v], u);
      }
    return;
  }
  #pragma GCC unroll 8
  for (int m = 0; m < ROWS; ++m)
    #pragma GCC unroll 8
    for (int v = 0; v < 4; ++v)
      if (mask[v]) _mm512_mask_storeu_ps(C + m * ldc + 16 * v, mask[v], acc[m][v]);
}

void run_tile(int rows, int64_t kp, const uint32_t* a, int64_t sm, int64_t sp,
              const uint32_t* b, float* C, int64_t ldc, int ncols, bool load,
              const Finish* fin) {
  switch (rows) {
    case 6: return micro_kernel<6>(kp, a, sm, sp, b, C, ldc, ncols, load, fin);
    case 5: return micro_kernel<5>(kp, a, sm, sp, b, C, ldc, ncols, load, fin);
    case 4: return micro_kernel<4>(kp, a, sm, sp, b, C, ldc, ncols, load, fin);
    case 3: return micro_kernel<3>(kp, a, sm, sp, b, C, ldc, ncols, load, fin);
    case 2: return micro_kernel<2>(kp, a, sm, sp, b, C, ldc, ncols, load, fin);
    default: return micro_kernel<1>(kp, a, sm, sp, b, C, ldc, ncols, load, fin);
  }
}

// Per-chunk promotion (FP32-scaled block products, fp32_block_gemm_avx512bf16): the panels
// hold unscaled code values; each 128-deep K chunk's partial sums start from zero and are
// then promoted into C with the chunk's scales.
constexpr int64_t kChunkPairs = kFp32ScaleBlock / 2;
static_assert(KC % kFp32ScaleBlock == 0, "a K chunk of the panels holds whole 128-deep chunks");

// As micro_kernel, for the kp pairs of panel chunk whose first 128-deep chunk is c0: per 64
// pairs, P (24 registers) = the VDPBF16PS sums from zero, then promote16 for each element
// (C read back from memory, or 0 for the product's first chunk when !load).
// sa: the tile's first row's scales (sa[c * sa_ld + m]), sb its first column's.
template <int ROWS>
void micro_kernel_promoted(int64_t kp, const uint32_t* a, int64_t sm, int64_t sp,
                           const uint32_t* b, float* C, int64_t ldc, int ncols, bool load,
                           const Promotion& pr, const float* sa, const float* sb, int64_t c0) {
  __mmask16 mask[4];
  #pragma GCC unroll 8
  for (int v = 0; v < 4; ++v) {
    const int n = std::clamp(ncols - 16 * v, 0, 16);
    mask[v] = __mmask16((1u << n) - 1);
  }
  for (int64_t q = 0; q * kChunkPairs < kp; ++q) {
    const int64_t pe = std::min(kp, (q + 1) * kChunkPairs);
    __m512 acc[ROWS][4];
    #pragma GCC unroll 8
    for (int m = 0; m < ROWS; ++m)
      #pragma GCC unroll 8
      for (int v = 0; v < 4; ++v) acc[m][v] = _mm512_setzero_ps();
    dot_pairs<ROWS>(acc, a, sm, sp, b, q * kChunkPairs, pe);
    const float* sac = sa + (c0 + q) * pr.sa_ld;
    const float* sbc = sb + (c0 + q) * pr.sb_ld;
    const bool from_c = load || q > 0;
    __m512 sbv[4];
    #pragma GCC unroll 8
    for (int v = 0; v < 4; ++v) sbv[v] = _mm512_maskz_loadu_ps(mask[v], sbc + 16 * v);
    #pragma GCC unroll 8
    for (int m = 0; m < ROWS; ++m) {
      const __m512 sam = _mm512_set1_ps(sac[m]);
      #pragma GCC unroll 8
      for (int v = 0; v < 4; ++v)
        if (mask[v]) promote16(C + m * ldc + 16 * v, mask[v], sam, sbv[v], acc[m][v], from_c);
    }
  }
}

void run_tile_promoted(int rows, int64_t kp, const uint32_t* a, int64_t sm, int64_t sp,
                       const uint32_t* b, float* C, int64_t ldc, int ncols, bool load,
                       const Promotion& pr, const float* sa, const float* sb, int64_t c0) {
  switch (rows) {
    case 6: return micro_kernel_promoted<6>(kp, a, sm, sp, b, C, ldc, ncols, load, pr, sa, sb, c0);
    case 5: return micro_kernel_promoted<5>(kp, a, sm, sp, b, C, ldc, ncols, load, pr, sa, sb, c0);
    case 4: return micro_kernel_promoted<4>(kp, a, sm, sp, b, C, ldc, ncols, load, pr, sa, sb, c0);
    case 3: return micro_kernel_promoted<3>(kp, a, sm, sp, b, C, ldc, ncols, load, pr, sa, sb, c0);
    case 2: return micro_kernel_promoted<2>(kp, a, sm, sp, b, C, ldc, ncols, load, pr, sa, sb, c0);
    default: return micro_kernel_promoted<1>(kp, a, sm, sp, b, C, ldc, ncols, load, pr, sa, sb, c0);
  }
}

// ---- driver ----------------------------------------------------------------------------------

struct Buffers {
  std::vector<uint32_t, AlignedAllocator<uint32_t>> a, b;
  std::vector<uint32_t, AlignedAllocator<uint32_t>> t;  // AMX: tn's A in pairs, before rows
};

Buffers& thread_buffers() {
  thread_local Buffers buf;
  return buf;
}

// C[:, j0 .. j1) (+)= alpha · T[j0 .. j1, :]^T for T [N, M] (row stride M) and C [M, N], in
// 16x16 blocks through transpose16: the columns of C that rows j0 .. j1 of T make. alpha = 1
// (every MX product) moves T as it is; otherwise each element is fl(alpha · t), then added.
void add_transposed_rows(const float* T, int64_t j0, int64_t j1, int64_t M, float* C,
                         int64_t ldc, bool accumulate, float alpha) {
  constexpr int R = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t jb = j0; jb < j1; jb += 16) {
    const int64_t nj = std::min<int64_t>(16, j1 - jb);
    const __mmask16 kn = __mmask16((1u << nj) - 1);
    for (int64_t i0 = 0; i0 < M; i0 += 16) {
      const int64_t mi = std::min<int64_t>(16, M - i0);
      const __mmask16 km = __mmask16((1u << mi) - 1);
      __m512i r[16];
      for (int j = 0; j < 16; ++j)
        r[j] = j < nj ? _mm512_maskz_loadu_epi32(km, T + (jb + j) * M + i0) : _mm512_setzero_si512();
      transpose16(r);  // r[i] = column i0 + i of T's 16 rows = row i0 + i of C
      for (int64_t i = 0; i < mi; ++i) {
        float* c = C + (i0 + i) * ldc + jb;
        __m512 v = _mm512_castsi512_ps(r[i]);
        if (alpha != 1.f) v = _mm512_mul_round_ps(_mm512_set1_ps(alpha), v, R);
        if (accumulate) v = _mm512_add_round_ps(_mm512_maskz_loadu_ps(kn, c), v, R);
        _mm512_mask_storeu_ps(c, kn, v);
      }
    }
  }
}

// Rows of pairs from pair-major ones: out[m * ldo + q] = in[q * ldi + m] for m < mc, q < kp,
// and zero for kp <= q < kp rounded up to 16 (ldo >= that), in 16x16 blocks through
// transpose16 (tn's A for the AMX tiles, which read A in rows).
void pairs_to_rows(const uint32_t* in, int64_t ldi, int64_t mc, int64_t kp, uint32_t* out,
                   int64_t ldo) {
  for (int64_t m0 = 0; m0 < mc; m0 += 16) {
    const int64_t mi = std::min<int64_t>(16, mc - m0);
    const __mmask16 km = __mmask16((1u << mi) - 1);
    for (int64_t q0 = 0; q0 < kp; q0 += 16) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j)
        r[j] = q0 + j < kp ? _mm512_maskz_loadu_epi32(km, in + (q0 + j) * ldi + m0)
                           : _mm512_setzero_si512();
      transpose16(r);  // r[i] = pairs q0 .. q0 + 15 of row m0 + i
      for (int64_t i = 0; i < mi; ++i) _mm512_storeu_si512(out + (m0 + i) * ldo + q0, r[i]);
    }
  }
}

// How panel_product reads its operands: A in rows ([M, K] stored, nt/nn) or in pairs of
// stored rows ([K, M] stored, tn); B in rows ([K, N] stored, nn/tn) or transposed ([N, K]
// stored, nt). The transposed products below also combine pairs with transposed.
struct Packing {
  bool a_pairs = false, b_transposed = false;
  static Packing of(Orient o) { return {o == Orient::tn, o == Orient::nt}; }
};

// The packers that differ between the kernels: rows of A (nt, nn), pairs of stored rows (tn's
// A, nn and tn's B) and B transposed (nt's B); amx: the products on AMX tiles (amx_block, the
// Finish of mx_gemm.h) rather than the VDPBF16PS micro-kernel.
struct Packers {
  PackRows rows;
  PackPairs pairs;
  PackTransposed transposed;
  bool amx = false;
};

// Where a transposed product's result goes: Ct [N, M] (+)= alpha · C^T (see
// mx_gemm_avx512bf16; alpha = 1 but for 4-bit products).
struct TransposeOut {
  float* C;
  int64_t ldc;
  bool accumulate;
  float alpha;
};

// C [M, N] (row stride ldc) = op(A) · op(B) (+ C when accumulate), both operands' scales
// foldable. Threads split M into row ranges (multiples of kRowGrain) when split_m, else N by
// 64-column panels. With `out` (split_m only, ldc = N), each thread adds the transpose of its
// finished rows into out->C, while they are still in its cache. With `alpha` (4-bit products,
// gemm/fp4_gemm.h) the sums start from zero whatever `accumulate` and the last K chunk stores
// alpha · P (+ C when accumulate): accumulating then needs K in one chunk of kc_max (panel_gemm
// sees to it). kc_max: the K chunk, KC but for such a 4-bit product.
constexpr int64_t kRowGrain = 48;  // MR | 48, and 16 | 48 keeps tile32 scale runs whole
constexpr int64_t kAFirstRows = 2 * MC;  // rows up to which a thread packs A first
void panel_product(Packing pk, const Packers& packers, const MXOperand& A, const MXOperand& B,
                   float* C, int64_t ldc, bool accumulate, int64_t M, int64_t N, int64_t K,
                   bool split_m, const TransposeOut* out = nullptr,
                   const Promotion* pr = nullptr, const float* alpha = nullptr,
                   int64_t kc_max = KC) {
  const int64_t panels = ceil_div(N, NR), grains = ceil_div(M, kRowGrain);
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), split_m ? grains : panels));
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t p0 = split_m ? 0 : panels * t / T, p1 = split_m ? panels : panels * (t + 1) / T;
    const int64_t r0 = split_m ? std::min(M, grains * t / T * kRowGrain) : 0;
    const int64_t r1 = split_m ? std::min(M, grains * (t + 1) / T * kRowGrain) : M;
    Buffers& buf = thread_buffers();
    // AMX tiles: A in rows of pairs whatever the orientation, and each chunk's pairs up to a
    // multiple of 16 (one tile's depth), those past the chunk zero in both panels.
    const bool amx = packers.amx;
    if (amx) amx_tiles_begin();
    // Few rows: every A block of this thread is packed first (at most kAFirstRows rows, a few
    // hundred KiB) and each B panel is packed right before the tiles that read it, so it is
    // still in L2; the B panels of a whole chunk (up to MiBs) would go out to memory and back
    // with nothing to amortize them over. Many rows: all of the chunk's B panels first, then
    // A block by block, each reusing every panel.
    const int64_t nblk = ceil_div(r1 - r0, MC);
    const bool a_first = r1 - r0 <= kAFirstRows;
    // Packed pairs per row of a panel or block: a whole chunk's, or all of a shorter K's
    // (rounded up to 32: the VBMI row packer writes 32 pairs per 64 codes), so a wgrad over
    // few tokens does not hold buffers sized for 1024 of them.
    const int64_t kps = std::min(kc_max / 2, (ceil_div(K, 2) + 31) / 32 * 32);
    buf.b.resize(size_t((a_first ? 1 : std::max<int64_t>(p1 - p0, 1)) * kps * NR));
    buf.a.resize(size_t((a_first ? std::max<int64_t>(nblk, 1) : 1) * MC * kps));
    const bool a_pairs = pk.a_pairs && !amx;  // how Ap holds A
    const int64_t sm = a_pairs ? 1 : kps, sp = a_pairs ? MC : 1;
    const auto pack_a = [&](int64_t i0, int64_t mc, int64_t k0, int64_t kc, uint32_t* Ap) {
      if (pk.a_pairs && amx) {
        // tn's A: its pairs of stored rows (pair-major), then moved into rows of pairs (the
        // pairs past the chunk's, up to a multiple of 16, come out zero).
        buf.t.resize(size_t(MC * kps));
        packers.pairs(A, i0, int((mc + 31) / 32), int((mc + 15) / 16), k0, kc, buf.t.data(), MC);
        pairs_to_rows(buf.t.data(), MC, mc, (kc + 1) / 2, Ap, kps);
      } else if (pk.a_pairs) {
        packers.pairs(A, i0, int((mc + 31) / 32), int((mc + 15) / 16), k0, kc, Ap, MC);
      } else {
        packers.rows(A, i0, mc, k0, kc, Ap, kps);
        if (amx) {
          const int64_t kp = (kc + 1) / 2, kp16 = (kp + 15) / 16 * 16;
          for (int64_t m = 0; m < mc; ++m)
            std::fill(Ap + m * kps + kp, Ap + m * kps + kp16, 0u);
        }
      }
    };
    const auto pack_b = [&](int64_t p, int64_t k0, int64_t kc, uint32_t* Bp) {
      if (pk.b_transposed)
        packers.transposed(B, p * NR, k0, kc, Bp);
      else
        packers.pairs(B, p * NR, 2, 4, k0, kc, Bp, NR);
      if (amx) {
        const int64_t kp = (kc + 1) / 2, kp16 = (kp + 15) / 16 * 16;
        std::fill(Bp + kp * NR, Bp + kp16 * NR, 0u);
      }
    };
    // Every (6-row, 64-column) tile of rows [i0, i0 + mc) against panel p.
    // With a promotion, per 128-deep chunk (the first of panel chunk k0 is k0 / 128).
    int64_t chunk0 = 0;
    const Finish* fin = nullptr;  // the 4-bit finish, on the last K chunk
    const auto tiles = [&](const uint32_t* Ap, int64_t i0, int64_t mc, int64_t p,
                           const uint32_t* Bp, int64_t kp, bool load) {
      const int ncols = int(std::min<int64_t>(NR, N - p * NR));
      if (amx) {
        const int64_t kp16 = (kp + 15) / 16 * 16;
        for (int64_t i = 0; i < mc; i += 32) {
          const int rows = int(std::min<int64_t>(32, mc - i));
          float* c = C + (i0 + i) * ldc + p * NR;
          if (pr)
            amx_block_promoted(kp, Ap + i * kps, kps, Bp, c, ldc, rows, ncols, load, *pr,
                               pr->sa + i0 + i, pr->sb + p * NR, chunk0);
          else
            amx_block(kp16, Ap + i * kps, kps, Bp, c, ldc, rows, ncols, load, fin);
        }
        return;
      }
      for (int64_t i = 0; i < mc; i += MR) {
        const int rows = int(std::min<int64_t>(MR, mc - i));
        float* c = C + (i0 + i) * ldc + p * NR;
        if (pr)
          run_tile_promoted(rows, kp, Ap + i * sm, sm, sp, Bp, c, ldc, ncols, load, *pr,
                            pr->sa + i0 + i, pr->sb + p * NR, chunk0);
        else
          run_tile(rows, kp, Ap + i * sm, sm, sp, Bp, c, ldc, ncols, load, fin);
      }
    };
    for (int64_t k0 = 0; k0 < K; k0 += kc_max) {
      const int64_t kc = std::min(kc_max, K - k0), kp = (kc + 1) / 2;
      const bool load = alpha ? k0 > 0 : accumulate || k0 > 0;
      chunk0 = k0 / kFp32ScaleBlock;
      const Finish last{alpha ? *alpha : 1.f, accumulate};
      fin = alpha && k0 + kc_max >= K ? &last : nullptr;
      if (a_first) {
        for (int64_t b = 0; b < nblk; ++b)
          pack_a(r0 + b * MC, std::min(MC, r1 - r0 - b * MC), k0, kc, buf.a.data() + b * MC * kps);
        for (int64_t p = p0; p < p1; ++p) {
          pack_b(p, k0, kc, buf.b.data());
          for (int64_t b = 0; b < nblk; ++b)
            tiles(buf.a.data() + b * MC * kps, r0 + b * MC, std::min(MC, r1 - r0 - b * MC), p,
                  buf.b.data(), kp, load);
        }
        continue;
      }
      for (int64_t p = p0; p < p1; ++p) pack_b(p, k0, kc, buf.b.data() + (p - p0) * kps * NR);
      for (int64_t i0 = r0; i0 < r1; i0 += MC) {
        const int64_t mc = std::min(MC, r1 - i0);
        pack_a(i0, mc, k0, kc, buf.a.data());
        for (int64_t p = p0; p < p1; ++p)
          tiles(buf.a.data(), i0, mc, p, buf.b.data() + (p - p0) * kps * NR, kp, load);
      }
    }
    if (amx) amx_tiles_end();
    if (out) add_transposed_rows(C, r0, r1, N, out->C, out->ldc, out->accumulate, out->alpha);
  }
}

// Largest C (elements) a forward or dgrad runs transposed for: the buffer it needs stays
// allocated per calling thread (8 MiB), and with more rows the packing is amortized anyway.
constexpr int64_t kSwapMax = int64_t(1) << 21;

FloatBuffer& swap_buffer() {
  thread_local FloatBuffer buf;  // the transposed product
  return buf;
}

// A 4-bit product's sums P when it accumulates over more than one K chunk, before
// C = C + alpha · P (per calling thread, reused).
FloatBuffer& sums_buffer() {
  thread_local FloatBuffer buf;
  return buf;
}

// The panel product with its operands packed by `packers` (and, with pr, promoted per
// 128-deep K chunk; pr's sa and sb for op(A)'s rows and op(B)'s columns; with alpha, the
// 4-bit product C = alpha · P (+ C), P summed from zero: gemm/fp4_gemm.h).
void panel_gemm(Orient o, const MXOperand& A, const MXOperand& B, float* C, int64_t ldc,
                bool accumulate, const Packers& packers, const Promotion* pr = nullptr,
                const float* alpha = nullptr) {
  const int64_t M = o == Orient::tn ? A.cols : A.rows;
  const int64_t K = o == Orient::tn ? A.rows : A.cols;
  const int64_t N = o == Orient::nt ? B.rows : B.cols;
  // A promoted product accumulating into C runs untransposed: the transposed one would add C
  // once at the end, not before the first chunk. A dgrad (nn) that writes C with at most
  // kAFirstRows rows runs directly too: its one A block is packed first and each weight panel
  // (pairs of rows, whole 64-byte lines of codes) right before the tiles that read it, with no
  // transposing packer and no transposed output (measured: 128 tokens through a 1408x2048
  // weight, 0.86-0.88x of the transposed form's time). Writing C, both forms give the same
  // bytes (the same FP32 sums); accumulating, the transposed form adds C0 once at the end, so a
  // dgrad that accumulates keeps it at every size. (A 4-bit product adds C0 once at the end in
  // either form.)
  const bool direct_dgrad = o == Orient::nn && !accumulate && M <= kAFirstRows;
  if (o != Orient::tn && !direct_dgrad && M >= NR && M < N && M * N <= kSwapMax &&
      !(pr && accumulate)) {
    // With fewer tokens than outputs (forward, nt) or inputs (dgrad, nn) the product runs as
    // C^T = op(B)^T · op(A)^T, then C takes the transpose (exact: the same FP32 sums, moved).
    // Threads then split the weight's side by row ranges and every A block of a thread reuses
    // the chunk's few panels of the small activation, packed once; forward, the transposing
    // packer gets the activation and the weight is read in rows. In C's own form the weight
    // would be re-packed panel by panel for a few row tiles each (measured: the dgrad of 128
    // tokens through a 1408x2048 weight 1.6x BF16's time).
    FloatBuffer& sb = swap_buffer();
    sb.resize(size_t(N * M));
    float* T = sb.data();
    // op(B)^T: nt's B ([N, K]) in rows; nn's B ([K, N]) in pairs. op(A)^T: A ([M, K]) transposed.
    const Packing swapped{o == Orient::nn, true};
    const TransposeOut out{C, ldc, accumulate, alpha ? *alpha : 1.f};
    // The transposed product's rows are op(B)'s columns: the scales swap sides (fl(sa · sb)
    // is the same product).
    const Promotion spr = pr ? Promotion{pr->sb, pr->sb_ld, pr->sa, pr->sa_ld} : Promotion{};
    return panel_product(swapped, packers, B, A, T, M, false, N, M, K, /*split_m=*/true,
                         &out, pr ? &spr : nullptr);
  }
  // A 4-bit product adds C once, to the finished sums. Accumulating over K up to kOneChunkMax
  // (a wgrad over that many tokens) it runs in one K chunk, so the sums stay in registers
  // until the finish (buffers twice to four times the usual chunk's, still cache-resident
  // per panel and block); over a longer K they go to a buffer first (the chunks pass partial
  // sums through memory, and C holds C0).
  constexpr int64_t kOneChunkMax = 4 * KC;
  const int64_t kc_max = alpha && accumulate && K > KC && K <= kOneChunkMax
                             ? (K + 63) / 64 * 64 : KC;
  if (alpha && accumulate && K > kc_max) {
    FloatBuffer& P = sums_buffer();
    P.resize(size_t(M * N));
    const float one = 1.f;
    panel_gemm(o, A, B, P.data(), N, false, packers, nullptr, &one);
    constexpr int R = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 av = _mm512_set1_ps(*alpha);
    const float* p = P.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; j += 16) {
        const __mmask16 k = N - j >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (N - j)) - 1);
        __m512 u = _mm512_maskz_loadu_ps(k, p + i * N + j);
        if (*alpha != 1.f) u = _mm512_mul_round_ps(av, u, R);
        float* c = C + i * ldc + j;
        _mm512_mask_storeu_ps(c, k, _mm512_add_round_ps(_mm512_maskz_loadu_ps(k, c), u, R));
      }
    return;
  }
  // Threads split the larger side of C, so the operand they all decode whole is the smaller.
  panel_product(Packing::of(o), packers, A, B, C, ldc, accumulate, M, N, K,
                /*split_m=*/M > N, nullptr, pr, alpha, kc_max);
}

// The packer sets of the entry points below: FP8 rows decoded by table (pack_a_rows), FP8
// rows decoded by VBMI byte permutes, and 4-bit codes; each with the VDPBF16PS micro-kernel
// or (amx) the AMX tiles.
Packers fp8_packers() { return {pack_a_rows, pack_pairs, pack_b_transposed}; }
Packers vbmi_packers(bool amx) {
  return {pack_a_rows_avx512vbmi_bf16, pack_pairs_avx512vbmi_bf16, pack_b_transposed, amx};
}
Packers fp4_packers(bool amx) {
  return {fp4_pack_rows_avx512bf16, fp4_pack_pairs_avx512bf16, fp4_pack_transposed_avx512bf16,
          amx};
}

// An FP32-scaled product: the panel product promoted per 128-deep chunk with s's scales.
void promoted_gemm(Orient o, const MXOperand& A, const MXOperand& B, const ChunkScales& s,
                   float* C, int64_t ldc, bool accumulate, const Packers& packers) {
  const int64_t M = o == Orient::tn ? A.cols : A.rows, N = o == Orient::nt ? B.rows : B.cols;
  const Promotion pr{s.sa, M, s.sb, N};
  panel_gemm(o, A, B, C, ldc, accumulate, packers, &pr);
}

}  // namespace

void mx_gemm_avx512bf16(Orient o, const MXOperand& A, const MXOperand& B, float* C,
                        int64_t ldc, bool accumulate) {
  panel_gemm(o, A, B, C, ldc, accumulate, fp8_packers());
}

void mx_gemm_avx512vbmi_bf16(Orient o, const MXOperand& A, const MXOperand& B, float* C,
                             int64_t ldc, bool accumulate) {
  panel_gemm(o, A, B, C, ldc, accumulate, vbmi_packers(/*amx=*/false));
}

void mx_gemm_amx_bf16(Orient o, const MXOperand& A, const MXOperand& B, float* C, int64_t ldc,
                      bool accumulate) {
  panel_gemm(o, A, B, C, ldc, accumulate, vbmi_packers(/*amx=*/true));
}

void fp32_block_gemm_avx512bf16(Orient o, const MXOperand& A, const MXOperand& B,
                                const ChunkScales& s, float* C, int64_t ldc, bool accumulate) {
  promoted_gemm(o, A, B, s, C, ldc, accumulate, fp8_packers());
}

void fp32_block_gemm_avx512vbmi_bf16(Orient o, const MXOperand& A, const MXOperand& B,
                                     const ChunkScales& s, float* C, int64_t ldc,
                                     bool accumulate) {
  promoted_gemm(o, A, B, s, C, ldc, accumulate, vbmi_packers(/*amx=*/false));
}

void fp32_block_gemm_amx_bf16(Orient o, const MXOperand& A, const MXOperand& B,
                              const ChunkScales& s, float* C, int64_t ldc, bool accumulate) {
  promoted_gemm(o, A, B, s, C, ldc, accumulate, vbmi_packers(/*amx=*/true));
}

void fp4_gemm_avx512bf16(Orient o, const MXOperand& A, const MXOperand& B, float alpha,
                         float* C, int64_t ldc, bool accumulate) {
  panel_gemm(o, A, B, C, ldc, accumulate, fp4_packers(/*amx=*/false), nullptr, &alpha);
}

void fp4_gemm_amx_bf16(Orient o, const MXOperand& A, const MXOperand& B, float alpha, float* C,
                       int64_t ldc, bool accumulate) {
  panel_gemm(o, A, B, C, ldc, accumulate, fp4_packers(/*amx=*/true), nullptr, &alpha);
}

}  // namespace mxtrain::gemm_detail
