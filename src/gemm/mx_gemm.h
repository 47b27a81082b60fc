// gemm/mx_gemm.h — the MX product kernels that read FP8 codes directly (internal to src/gemm).
//
// An MX operand is a stored matrix of FP8 codes [rows, cols] plus its E8M0 scale grid. The
// kernels multiply two of them with every 32-block running along the reduction axis K, in one
// of three orientations (C row-major [M, N], row stride ldc):
//   nt: C = A · B^T   A stored [M, K], B stored [N, K]   (blocks along stored columns: rowwise
//                                                         or tile32)            — forward
//   nn: C = A · B     A stored [M, K] (rowwise/tile32), B stored [K, N] (colwise/tile32)
//                                                                                — dgrad
//   tn: C = A^T · B   A stored [K, M], B stored [K, N] (both colwise/tile32)    — wgrad
//
// Element semantics (docs/numerics.md, "MX products"): each element enters the product as
// the BF16 value v = fp8(code) · 2^(scale - 127), exact because an FP8 value has at most four
// significant bits and the scale is a power of two, except that |v| < 2^-126 (below BF16's
// normal range) counts as ±0 — the AVX512-BF16 dot product treats BF16 subnormal inputs as
// zero, and the reference does the same so that both compute one defined product. A scale of
// 0xFF makes every element of its block NaN. Products accumulate in FP32.
//
// Kernels: mx_gemm_ref (scalar, FP32 accumulation in K order); mx_gemm_avx512bf16 and
// mx_gemm_avx512vbmi_bf16 (mx_gemm_avx512.cc: operands decoded panel by panel into
// cache-resident BF16 blocks with the scales folded in, then a 6x64 VDPBF16PS micro-kernel;
// the second packs rows by VBMI table decoding) and, for forward products with few rows,
// mx_gemv_nt_avx512vbmi_bf16 (W streamed once, decoded in registers). gemm_mx.cc's dispatch
// table picks among them; callers check shapes and layouts, kernels choose nothing.
#pragma once

#include <cstdint>

#include "core/dispatch.h"
#include "mxtrain/formats.h"
#include "mxtrain/quantize.h"

namespace mxtrain::gemm_detail {

enum class Orient : uint8_t { nt, nn, tn };

// A read-only view of one quantized matrix: MX (FP8 codes, E8M0 scales per 32) or 4-bit
// (E2M1 codes two per byte; NVFP4: E4M3 scales per 16, MXFP4: E8M0 per 32; gemm/fp4_gemm.h).
struct MXOperand {
  const uint8_t* codes = nullptr;   // [rows, row_bytes()] row-major
  const uint8_t* scales = nullptr;  // [scale_rows, scale_ld]
  int64_t rows = 0, cols = 0, scale_ld = 0;
  MXLayout layout = MXLayout::rowwise;
  Elem elem = Elem::e4m3;
  int64_t block = kMXBlock;  // the block edge (16: NVFP4)
  bool nvfp4 = false;        // E4M3 block scales (4-bit copies)

  static MXOperand of(const ScaledTensor& t) {
    return MXOperand{t.data.data(), t.scales.data(), t.rows, t.cols, t.scale_cols(), t.layout,
                     t.elem, t.block, t.is_nvfp4()};
  }
  int64_t row_bytes() const { return elem_row_bytes(elem, cols); }
  uint8_t scale(int64_t r, int64_t c) const {
    const int64_t sr = layout == MXLayout::rowwise ? r : r / block;
    const int64_t sc = layout == MXLayout::colwise ? c : c / block;
    return scales[sr * scale_ld + sc];
  }
};

// The element value the kernels multiply, as a float (exactly a BF16 value).
float mx_operand_value(uint8_t code, uint8_t scale, Elem e);

// C = op(A) · op(B) (+ C when accumulate). M, N, K follow from the orientation and shapes.
void mx_gemm_ref(Orient o, const MXOperand& A, const MXOperand& B, float* C, int64_t ldc,
                 bool accumulate);
// Same product, panel kernels; need AVX512-BF16 (and F/BW/VL/DQ; the second also VBMI) and
// operands with foldable scales.
void mx_gemm_avx512bf16(Orient o, const MXOperand& A, const MXOperand& B, float* C,
                        int64_t ldc, bool accumulate);
void mx_gemm_avx512vbmi_bf16(Orient o, const MXOperand& A, const MXOperand& B, float* C,
                             int64_t ldc, bool accumulate);
// The VBMI panel kernel with AMX-BF16 tiles for the products (amx_block) instead of the
// VDPBF16PS micro-kernel: within the FP32 summation bound of the others, not their bytes.
void mx_gemm_amx_bf16(Orient o, const MXOperand& A, const MXOperand& B, float* C, int64_t ldc,
                      bool accumulate);

// Forward (nt) products with few rows, streaming W once (mx_gemv_avx512vbmi.cc); needs
// AVX512-BF16 and VBMI, and operands with foldable scales.
void mx_gemv_nt_avx512vbmi_bf16(const MXOperand& X, const MXOperand& W, float* C, int64_t ldc,
                                bool accumulate);

// The AMX-BF16 tile product of the panel kernels (mx_gemm_amx.cc; needs AMX-BF16 and the
// tile state granted). A thread calls amx_tiles_begin before its first amx_block (it loads
// the tile configuration) and amx_tiles_end after its last.
void amx_tiles_begin();
void amx_tiles_end();
// How a 4-bit product's last K chunk stores its sums P (gemm/fp4_gemm.h): C = alpha · P, or
// C + alpha · P when add_c, each operation rounded on its own; alpha = 1 stores P itself.
struct Finish {
  float alpha;
  bool add_c;
};
// C[rows, ncols] (rows <= 32, ncols <= 64) = (load ? C : 0) + Σ_p a(m, p) · b(p, :) over
// kp16 pairs (a multiple of 16; pairs past the product's K zero in both panels), or with
// `fin` those sums finished as it says: a(m, p) = a[m * lda + p] (rows of pairs; 32 rows are
// read whatever `rows`), b = panel [kp16][64] pairs.
void amx_block(int64_t kp16, const uint32_t* a, int64_t lda, const uint32_t* b, float* C,
               int64_t ldc, int rows, int ncols, bool load, const Finish* fin);
// The scales per 128-deep K chunk c of an FP32-scaled product's rows and columns as the panel
// kernels see them: row i's at sa[c * sa_ld + i], column j's at sb[c * sb_ld + j].
struct Promotion {
  const float* sa;
  int64_t sa_ld;
  const float* sb;
  int64_t sb_ld;
};
// amx_block for an FP32-scaled product (the promotion of fp32_block_gemm_avx512bf16): over
// the kp pairs of a panel chunk whose first 128-deep chunk is c0, per 64 pairs the sums P start
// from zero on the tiles, then C = C + fl(fl(sa · sb) · P) for each element (C read back, or 0
// for the product's first chunk when !load). sa: the block's first row's scales, sb its first
// column's (both of chunk 0). The pairs from kp up to a multiple of 16 are zero in both panels.
void amx_block_promoted(int64_t kp, const uint32_t* a, int64_t lda, const uint32_t* b, float* C,
                        int64_t ldc, int rows, int ncols, bool load, const Promotion& pr,
                        const float* sa, const float* sb, int64_t c0);

// What the MX product's dispatch table (gemm_mx.cc) chooses now (mxtrain info).
PathChoice mx_product_choice();

// Whether the fast kernels can fold t's scales into their decode multipliers: an E4M3 scale
// 247..254 would overflow it (only blocks with amax > 2^127 have one); such an operand takes
// the reference (gemm_mx.cc).
bool mx_scales_foldable(const MXOperand& t);

// A panel kernel's row packer: rows r0 .. r0+mc of A (stored [rows, K], blocks along K) as
// BF16 pairs over [k0, k0 + kc), row m at Ap + m * ld.
using PackRows = void (*)(const MXOperand& A, int64_t r0, int64_t mc, int64_t k0, int64_t kc,
                          uint32_t* Ap, int64_t ld);
// The packer of mx_gemm_avx512vbmi_bf16, with VBMI decoding (mx_pack_avx512vbmi.cc): the same
// words as mx_gemm_avx512bf16's general packer.
void pack_a_rows_avx512vbmi_bf16(const MXOperand& A, int64_t r0, int64_t mc, int64_t k0,
                                 int64_t kc, uint32_t* Ap, int64_t ld);
// A panel kernel's pair packer: stored rows k0 .. k0+kc of S (stored [K, cols], blocks along K:
// colwise or tile32) as BF16 pairs of consecutive rows over columns c0 .. c0 + 32·nv (nv <= 3,
// c0 a multiple of 16): out[p * ld + 16j], j < nstore (<= 2·nv), holds the 16 pairs (row
// k0 + 2p, row k0 + 2p + 1) of columns c0 + 16j ..; columns past `cols` and a row k+1 = K are
// zero. mx_gemm_avx512bf16's packer is pack_pairs (gemm/mx_pairs_avx512.h); this one, of
// mx_gemm_avx512vbmi_bf16, decodes by VBMI table lookup (mx_pack_avx512vbmi.cc), the same
// words.
using PackPairs = void (*)(const MXOperand& S, int64_t c0, int nv, int nstore, int64_t k0,
                           int64_t kc, uint32_t* out, int64_t ld);
void pack_pairs_avx512vbmi_bf16(const MXOperand& S, int64_t c0, int nv, int nstore, int64_t k0,
                                int64_t kc, uint32_t* out, int64_t ld);
// A panel kernel's transposing packer (nt's B): B stored [N, K] with blocks along K (rowwise or
// tile); panel Bp[p * 64 + n] = the BF16 pair (B(c0 + n, k0 + 2p), B(c0 + n, k0 + 2p + 1)) over
// [k0, k0 + kc), rows past N zero. The MX kernels' is pack_b_transposed (mx_gemm_avx512.cc).
using PackTransposed = void (*)(const MXOperand& B, int64_t c0, int64_t k0, int64_t kc,
                                uint32_t* Bp);
// The row packers' prefetch distance, in rows. A chunk's pieces of consecutive rows lie one row
// stride apart, a new stream every chunk that the hardware prefetcher picks up late, so the
// row this many below is requested while a row is decoded (bench gemm m = 256 forward,
// K = N = 4096: 1.14-1.16x -> 1.04-1.06x of BF16; 1, 2 and 4 rows all did about as well).
constexpr int64_t kPackRowsAhead = 4;
// The pair packers read a piece of every stored row, one row stride apart (a new page every
// row or two, which no hardware prefetcher follows): the VBMI pair packer asks for the rows this
// many pairs ahead.
constexpr int64_t kPairsAhead = 8;
// The most rows of op(A) a streaming forward kernel takes (mx_gemv_nt_avx512vbmi_bf16,
// fp4_gemv_nt_*).
constexpr int64_t kGemvMaxRows = 16;
// Rows up to which a path's forwards stream, unless set_stream_rows says otherwise: every
// streaming path's own limit is kGemvMaxRows but AMX's, where the tiles take over from 9 rows
// (FP8, and 4-bit weights in 16x16 tiles, whose codes stream the bytes way) or from 5 (4-bit
// rowwise weights, decoded the words way) (docs/results/gemm.md, "Streaming or tiles on AMX").
// The AMX entries' descriptions name them.
constexpr int64_t kAmxStreamRows = 8, kAmxStreamRowsWords = 4;
// The rows up to which forwards stream on a path whose own limit is `own`
// (stream_rows_override first).
int64_t stream_limit(int64_t own);
// The limits of the MX and the 4-bit product's paths now (0: that path does not stream).
int64_t mx_stream_rows();
int64_t fp4_stream_rows(bool tile_weights);  // W in 16x16 tiles, or rowwise

// The MX product once gemm_mx has checked its operands (both MX; M, N, K > 0): the kernel
// its dispatch table and the operands choose (gemm_mx.cc).
void gemm_mx_run(bool trans_a, const ScaledTensor& A, bool trans_b, const ScaledTensor& B,
                 int64_t M, int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate);
// The same on views (an FP32-scaled copy's own codes with an E8M0 grid made for it,
// gemm_scaled.cc): the panel, streaming and reference kernels read the views as they are; the
// expansion path (avx2, A^T · B^T), which reads whole tensors, copies them first.
void gemm_mx_run(bool trans_a, const MXOperand& A, bool trans_b, const MXOperand& B, int64_t M,
                 int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate);
// Products of FP32-scaled copies (gemm_scaled.cc; docs/numerics.md, "FP32-scaled products"):
// the reference (FP32 partial sum per 128-deep K chunk of unscaled code values, then
// C += (sa · sb) · P), and the entry gemm_mx calls once both operands are FP32-scaled.
void fp32_block_gemm_ref(bool trans_a, const ScaledTensor& A, bool trans_b, const ScaledTensor& B,
                         float* C, int64_t ldc, bool accumulate);
void gemm_fp32_scaled(bool trans_a, const ScaledTensor& A, bool trans_b, const ScaledTensor& B,
                      int64_t M, int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate);
// Its product once the pow2 fold is ruled out: the fp32 kernel of the MX product's dispatch
// table (gemm_mx.cc).
void gemm_fp32_run(bool trans_a, const ScaledTensor& A, bool trans_b, const ScaledTensor& B,
                   int64_t M, int64_t N, int64_t K, float* C, int64_t ldc, bool accumulate);

// The FP32-scaled product's kernels, one per path of the MX product's dispatch table
// (gemm_mx.cc), called as gemm_fp32_scaled's last step (ta && tb never reaches the panels):
//   fp32_block_gemm_ref_entry — fp32_block_gemm_ref;
//   fp32_block_gemm_onednn    — codes decoded unscaled to BF16, oneDNN's BF16 product per
//                               chunk into a full-size buffer, then the scaled add;
//   fp32_block_gemm_panels_avx512bf16 / _avx512vbmi_bf16 / _amx_bf16 — the panel kernels
//                               below (both operands per-tensor: the oneDNN path, one chunk).
using Fp32Product = void (*)(bool trans_a, const ScaledTensor& A, bool trans_b,
                             const ScaledTensor& B, int64_t M, int64_t N, int64_t K, float* C,
                             int64_t ldc, bool accumulate);
void fp32_block_gemm_ref_entry(bool trans_a, const ScaledTensor& A, bool trans_b,
                               const ScaledTensor& B, int64_t M, int64_t N, int64_t K, float* C,
                               int64_t ldc, bool accumulate);
void fp32_block_gemm_onednn(bool trans_a, const ScaledTensor& A, bool trans_b,
                            const ScaledTensor& B, int64_t M, int64_t N, int64_t K, float* C,
                            int64_t ldc, bool accumulate);
void fp32_block_gemm_panels_avx512bf16(bool trans_a, const ScaledTensor& A, bool trans_b,
                                       const ScaledTensor& B, int64_t M, int64_t N, int64_t K,
                                       float* C, int64_t ldc, bool accumulate);
void fp32_block_gemm_panels_avx512vbmi_bf16(bool trans_a, const ScaledTensor& A, bool trans_b,
                                            const ScaledTensor& B, int64_t M, int64_t N, int64_t K,
                                            float* C, int64_t ldc, bool accumulate);
void fp32_block_gemm_panels_amx_bf16(bool trans_a, const ScaledTensor& A, bool trans_b,
                                     const ScaledTensor& B, int64_t M, int64_t N, int64_t K,
                                     float* C, int64_t ldc, bool accumulate);

// The scales of an FP32-scaled product per 128-deep K chunk c (ceil(K / 128) chunks): op(A)'s
// row i at sa[c * M + i], op(B)'s column j at sb[c * N + j].
struct ChunkScales {
  const float* sa;
  const float* sb;
};
// The panel kernels' FP32-scaled product (mx_gemm_avx512.cc): A and B hold the codes with an
// E8M0 grid of 127 everywhere (the panels get the unscaled code values, exact in BF16); per
// 128-deep K chunk the partial sums P start from zero in VDPBF16PS order, then each element
// C = C + fl(fl(sa · sb) · P), C starting from C (accumulate) or 0. Same orientations and
// packers as mx_gemm_avx512bf16 / mx_gemm_avx512vbmi_bf16; bit for bit
// fp32_block_gemm_panel_ref's result.
void fp32_block_gemm_avx512bf16(Orient o, const MXOperand& A, const MXOperand& B,
                                const ChunkScales& s, float* C, int64_t ldc, bool accumulate);
void fp32_block_gemm_avx512vbmi_bf16(Orient o, const MXOperand& A, const MXOperand& B,
                                     const ChunkScales& s, float* C, int64_t ldc,
                                     bool accumulate);
// The VBMI kernel with each chunk's sums on AMX tiles (amx_block_promoted): the same
// promotion, P within the FP32 summation bound of the VDPBF16PS sums, not their bytes.
void fp32_block_gemm_amx_bf16(Orient o, const MXOperand& A, const MXOperand& B,
                              const ChunkScales& s, float* C, int64_t ldc, bool accumulate);
// Their scalar reference (gemm/fp32_block_gemm_ref.cc): the same sums in the same order —
// per chunk, for each pair (k, k+1) in order, P = P + a(k+1)·b(k+1), then P = P + a(k)·b(k)
// (VDPBF16PS's order; a k+1 past K counts as 0), each add rounded — so the kernels give its
// bytes (NaN payloads aside).
void fp32_block_gemm_panel_ref(Orient o, const MXOperand& A, const MXOperand& B,
                               const ChunkScales& s, float* C, int64_t ldc, bool accumulate);

}  // namespace mxtrain::gemm_detail
