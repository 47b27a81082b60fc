// mxtrain/gemm.h — matrix products: BF16 (oneDNN), MX-scaled, grouped, and references.
//
// Convention: C[M,N] = op(A)[M,K] · op(B)[K,N] (+ C if accumulate), all row-major.
// op(A) = A when !trans_a (A stored [M,K]) or A^T when trans_a (A stored [K,M]); same for B.
// Accumulation is FP32. BF16 products go through oneDNN's matmul (AMX / AVX512-BF16 where the
// CPU has them). The MX GEMM requires both operands' 32-blocks to run along K:
//   op(A) = A   -> A rowwise or tile32;  op(A) = A^T -> A colwise or tile32
//   op(B) = B   -> B colwise or tile32;  op(B) = B^T -> B rowwise or tile32
// and computes Σ over K-blocks of scale_a · scale_b · Σ a·b, reading the FP8 codes directly
// (gemm_mx_path() says which kernels; docs/numerics.md, "MX products", defines the result).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mxtrain/isa.h"
#include "mxtrain/qtensor.h"
#include "mxtrain/quantize.h"

namespace mxtrain {

// How oneDNN's primitives for gemm_bf16 / gemm_f32 are shaped (gemm/gemm_onednn.cc):
//   exact    one primitive per exact (M, N, K): oneDNN's brgemm where it takes the shape;
//   runtime  M and K given at execution: one primitive (oneDNN's JIT GEMM driver) serves
//            every row count.
// Products run with exact shapes, except inside a VaryingRowsScope: the MoE expert products,
// whose row counts change every step, would otherwise build a primitive per count (0.3-0.8 ms
// each, several times the product). MXTRAIN_GEMM_SHAPES=exact|runtime (read once) or
// set_gemm_shapes() puts every product on one shaping, for measurements and tests. Either
// shaping is exact to FP32 accumulation; their sums may run in different orders.
enum class GemmShapes { exact, runtime };
GemmShapes gemm_shapes();  // the shaping of a product this thread issues now
void set_gemm_shapes(GemmShapes s);
void clear_gemm_shapes_override();
const char* gemm_shapes_name(GemmShapes s);
// "exact" or "runtime" (gemm_shapes_name's names); nothing for any other name.
std::optional<GemmShapes> gemm_shapes_from_name(const std::string& name);

// While one is alive, this thread's products take their row counts at run time (unless an
// override says otherwise). Scopes nest.
class VaryingRowsScope {
 public:
  VaryingRowsScope();
  ~VaryingRowsScope();
  VaryingRowsScope(const VaryingRowsScope&) = delete;
  VaryingRowsScope& operator=(const VaryingRowsScope&) = delete;

 private:
  bool prev_;
};

// Forward products (x · Wᵀ) of few rows stream W once past every x row instead of running the
// panel or tile kernels. Each path has its own limit, the rows up to which streaming measured
// faster (docs/numerics.md, "MX products"); MXTRAIN_STREAM_ROWS=0..16 (read once) or
// set_stream_rows() puts every path on one, for measurements and tests (0 streams nothing).
void set_stream_rows(int64_t rows);  // 0 .. 16
void clear_stream_rows_override();
// The limit set by MXTRAIN_STREAM_ROWS or set_stream_rows(), or -1 (each path's own). A bad
// MXTRAIN_STREAM_ROWS is refused here.
int64_t stream_rows_override();
// The limit in force for the products of FP8 (MX) or 4-bit copies on the path now (0: the
// path does not stream); 4-bit weights stored in 16x16 tiles or rowwise.
int64_t stream_rows(bool fp4, bool tile_weights = true);

// BF16 x BF16 -> FP32 through oneDNN. lda/ldb/ldc are row strides of the stored matrices.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
               float* C, int64_t ldc, bool accumulate);

// FP32 x FP32 -> FP32 through oneDNN (used by the model's non-quantized products).
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              const float* A, int64_t lda, const float* B, int64_t ldb,
              float* C, int64_t ldc, bool accumulate);

// Plain reference: FP64 accumulation of FP32 inputs, FP64 output. For tests.
void gemm_ref_f64(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  const float* A, int64_t lda, const float* B, int64_t ldb, double* C,
                  int64_t ldc);

// Kernel path of gemm_mx now (its dispatch table, src/gemm/gemm_mx.cc; mxtrain/isa.h):
//   avx512vbmi_bf16, avx512bf16 — FP8 panels decoded into cache-resident BF16 blocks,
//                VDPBF16PS micro-kernel (the first also streams W for forwards of few rows);
//   avx2       — CPUs without AVX512-BF16 and --isa avx2: operands expanded to BF16, oneDNN;
//   scalar     — --isa scalar: the reference kernel.
Path gemm_mx_path();

// MX-scaled GEMM. A, B are whole quantized matrices; M, N, K follow from their shapes.
void gemm_mx(bool trans_a, const ScaledTensor& A, bool trans_b, const ScaledTensor& B, float* C,
             int64_t ldc, bool accumulate);

// Group list for experts: offsets[g]..offsets[g+1] are expert g's rows. Built from counts
// or cumulative offsets (the two forms the field uses); throws on negative counts, a
// non-monotone list, or a total that differs from `rows`.
struct GroupList {
  std::vector<int64_t> offsets;  // size E+1, offsets[0] = 0, offsets[E] = rows
  int64_t num_groups() const { return int64_t(offsets.size()) - 1; }
  int64_t count(int64_t g) const { return offsets[g + 1] - offsets[g]; }
  static GroupList from_counts(const std::vector<int64_t>& counts, int64_t rows);
  static GroupList from_cumulative(const std::vector<int64_t>& cumsum, int64_t rows);
};

// ---- the products of a linear layer ----------------------------------------------------------
// For a layer y[M,N] = x[M,K] · W[N,K]^T over row groups (experts; a plain Linear is one group).
// Group g owns rows offsets[g]..offsets[g+1] of x, dy, y and dx, and has its own QTensors
// x[g], dy[g] (quantized per group: token-axis blocks restart at each group) and weight w[g].
// Groups with no rows are skipped. Each product reads, of each operand, the copy
// copies_needed(r, role, use) names (qtensor.h): BF16 copies run oneDNN's BF16 product, scaled
// copies gemm_mx:
//   forward  y  = x · W^T        (mxfp8: x.rowwise · (W.rowwise | W.tile)^T)
//   dgrad    dx = dy · W         (mxfp8: dy.rowwise · (W.colwise | W.tile))
//   wgrad    dW += dy^T · x      (mxfp8: dy.colwise^T · x.colwise; dw[g]: [N, K], FP32)
// A copy the product needs but the QTensor lacks is an error naming it.
void grouped_forward(const Recipe& r, const GroupList& groups, const QTensor* x,
                     const QTensor* const* w, float* y, int64_t N);     // y: [rows, N]
void grouped_dgrad(const Recipe& r, const GroupList& groups, const QTensor* dy,
                   const QTensor* const* w, float* dx, int64_t K);      // dx: [rows, K]
void grouped_wgrad(const Recipe& r, const GroupList& groups, const QTensor* dy,
                   const QTensor* x, float* const* dw, bool accumulate);  // dw[g]: [N, K]

// While one is alive, this thread's forward and dgrad products (those above) sum K the way a
// row-parallel product over `ranks` ranks does (docs/distributed.md, "Parity"): K is `blocks`
// equal blocks (qkv's q, k, v: 3; fc1's gate and up: 2; else 1), rank r holds slice r of each,
// each rank's product sums its own slices (the same call on the compact operands a rank
// holds), and the ranks' FP32 partial products are added in rank order, as the all-reduce of
// two ranks adds them. One process running its row-parallel products in such a scope computes
// what tensor parallelism computes, bit for bit; tests use it to show that this order of sums
// is the only difference (tests/mpi/parity_grad_mpi.cc). BF16 and scaled copies whose blocks
// along K lie within one slice; anything else is refused. A scope of ranks 1 does nothing;
// others do not nest.
class SplitSumsScope {
 public:
  SplitSumsScope(int ranks, int blocks);
  ~SplitSumsScope();
  SplitSumsScope(const SplitSumsScope&) = delete;
  SplitSumsScope& operator=(const SplitSumsScope&) = delete;

 private:
  bool active_ = false;
};

}  // namespace mxtrain
