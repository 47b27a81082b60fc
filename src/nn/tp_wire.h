// nn/tp_wire.h — a Linear's tensor- and sequence-parallel collectives (internal to src/nn;
// nn/parallel.h, LinearParallel, says what each role sends).
//
// Sequence parallelism's all-gathers (docs/distributed.md, "Sequence parallel") carry the
// copies a product reads: a gather packs each rank's copies of its rows — per copy its codes
// [Ns, K], then its scale grid, then (NVFP4) the tensor scale agreed over the group, checked
// equal on receipt — into one buffer of the same size on every rank, all-gathers
// it, and lays the ranks' rows end to end: codes by rows, scale grids by their rows (a rowwise
// grid has a row per token, a colwise one a row per block of B tokens, whole blocks when B
// divides Ns). Every call counts its bytes and time in the LinearParallel's stats (when set).
// The scratch the collectives work in (the gathered copies, FP32 rows, a partial product) is
// per thread and shared by every Linear: it lives only within one forward or backward.
#pragma once

#include <cstdint>

#include "mxtrain/aligned.h"
#include "mxtrain/nn/parallel.h"
#include "mxtrain/qtensor.h"

namespace mxtrain::nn_detail {

// Per-thread scratch of the collectives below (grown, never shrunk).
struct WireScratch {
  QTensor x, dy;        // gathered copies of an input and of an output gradient
  FloatBuffer rows;     // FP32 rows: a gathered matrix (FP32 reference) or derived copies' values
  FloatBuffer partial;  // a product's partial sums before a reduce-scatter
};
WireScratch& wire_scratch();

// The copies `copies` (format f) of the whole matrix [size·Ns, K] of which rank r holds rows
// [r·Ns, (r+1)·Ns) in `shard` [Ns, K] FP32: exactly the copies make_copies makes of the whole
// matrix. A copy whose blocks lie within a shard's rows travels as its codes and scales —
// bf16 and rowwise always, colwise when Ns is a multiple of the block edge; any other is made
// from the gathered FP32 shards (4 bytes per element, exact too), and stats' sp_fp32_route is
// set.
// A per-tensor amax (NVFP4) is agreed over the group before any rank quantizes its rows, so
// such a copy travels as its codes, block scales and the agreed tensor scale too. `sr`: the
// layer's stochastic-rounding key for the matrix (SrKey{} when null); a shard's copies draw
// from it with the rank mixed into its tensor id (the rows differ by rank).
void gather_copies(const LinearParallel& p, const float* shard, int64_t Ns, int64_t K,
                   const TensorFormat& f, CopySet copies, QTensor& out,
                   const SrKey* sr = nullptr);
// The agreement of per-tensor amaxes over a layer's group (qtensor.h, AmaxAgree), its bytes
// and time counted in p.stats as TP traffic; empty without an active group.
AmaxAgree tp_amax_agree(const LinearParallel& p);
// The whole FP32 matrix: out [size·Ns, K].
void gather_rows(const LinearParallel& p, const float* shard, int64_t Ns, int64_t K, float* out);
// SequenceWire::rowwise: adds to `q` (a gathered rowwise or BF16 copy of an [M, K] matrix)
// the copies `want` (format f) quantized from the values it holds; scratch grows to [M·K]
// floats only when there is a copy to make (under bf16 the gathered copy is all wgrad reads).
// `sr`: the layer's stochastic-rounding key for the matrix (SrKey{} when null).
void derive_copies(QTensor& q, const TensorFormat& f, CopySet want, FloatBuffer& scratch,
                   const SrKey* sr = nullptr);
// Row-parallel backward: into q, the copies of the output gradient [size·Ns, O] (this rank's
// rows in dy_shard [Ns, O], format f) that dgrad and wgrad read. exact: both gathered;
// rowwise: dgrad's gathered, wgrad's quantized from them here (scratch grows to [size·Ns, O]).
// Only the gather counts as communication.
void gather_grad_copies(const LinearParallel& p, const float* dy_shard, int64_t Ns, int64_t O,
                        const TensorFormat& f, CopySet dgrad, CopySet wgrad, QTensor& q,
                        FloatBuffer& scratch, const SrKey* sr = nullptr);
// Column-parallel backward: the input copies wgrad reads. exact: gathered again from this
// rank's rows `shard` [Ns, K] into `regathered`, which is returned; rowwise: quantized from
// `kept` (the forward's gathered copy, [size·Ns, K]) into it, which is returned (scratch
// grows to [size·Ns, K]).
QTensor& input_wgrad_copies(const LinearParallel& p, const float* shard, int64_t Ns, int64_t K,
                            const TensorFormat& f, CopySet wgrad, QTensor& kept,
                            QTensor& regathered, FloatBuffer& scratch,
                            const SrKey* sr = nullptr);
// x [n] summed over the group in place (a row-parallel output, a column-parallel input
// gradient).
void all_reduce(const LinearParallel& p, float* x, int64_t n);
// The group's sum of `full` [size·shard_n], scattered: rank r keeps elements
// [r·shard_n, (r+1)·shard_n) in `shard`.
void reduce_scatter(const LinearParallel& p, const float* full, float* shard, int64_t shard_n);

}  // namespace mxtrain::nn_detail
