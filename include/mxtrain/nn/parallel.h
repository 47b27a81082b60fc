// mxtrain/nn/parallel.h — what a model needs to run its share of a tensor-, sequence- or
// expert-parallel layer (docs/distributed.md, "Parallel layouts"): each group's size, rank and
// collectives, and the bytes and time they cost.
//
// The model calls Collectives; dist implements them over MPI sub-communicators
// (dist/mesh.h, comm_collectives), so nn stays free of MPI. A ModelParallel without groups is
// one process. The model sorts its traffic into ParallelStats by what it carries, as the metrics
// report it (docs/config.md, "Outputs"):
//   tp_comm_bytes      every TP/SP collective this rank sent
//   tp_allgather_bytes the all-gathers among them: forward activations and backward gradients,
//                      the traffic that can travel in FP8
//   ep_comm_bytes      every expert all-to-all this rank sent
//   ep_dispatch_bytes  the part sent toward the experts: forward tokens and backward
//                      expert-output gradients
// and the milliseconds spent in them (blocking collectives: all exposed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mxtrain/aligned.h"
#include "mxtrain/common.h"
#include "mxtrain/qtensor.h"

namespace mxtrain {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // Each returns the bytes this rank sent (dist/comm.h counts them).
  // x: [n], summed over the group in place.
  virtual uint64_t allreduce_sum(float* x, size_t n) = 0;
  virtual uint64_t allreduce_sum(double* x, size_t n) = 0;
  // send: [bytes_per_rank]; recv: [size() * bytes_per_rank] in rank order.
  virtual uint64_t allgather(const void* send, void* recv, size_t bytes_per_rank) = 0;
  // Variable blocks (dist/comm.h, Comm::allgatherv).
  virtual uint64_t allgatherv(const void* send, size_t send_bytes, void* recv,
                              const size_t* recv_bytes) = 0;
  // send: [size() * chunk]; recv: [chunk] = the group's sum of chunk rank().
  virtual uint64_t reduce_scatter_sum(const float* send, float* recv, size_t chunk) = 0;
  // Fixed blocks of bytes_per_rank to and from every rank (rank order).
  virtual uint64_t alltoall(const void* send, void* recv, size_t bytes_per_rank) = 0;
  // Variable blocks (dist/comm.h, Comm::alltoallv).
  virtual uint64_t alltoallv(const void* send, const size_t* send_bytes, void* recv,
                             const size_t* recv_bytes) = 0;
};

struct ParallelStats {
  uint64_t tp_comm_bytes = 0, tp_allgather_bytes = 0;
  uint64_t ep_comm_bytes = 0, ep_dispatch_bytes = 0;
  double tp_ms = 0, ep_ms = 0;
};

// What sequence parallelism's all-gathers carry (docs/distributed.md, "Sequence parallel"):
//   exact    the copies each product reads, each quantized from the FP32 shard: forward the
//            input's forward copy, backward its wgrad copy again and the output gradient's
//            dgrad and wgrad copies — the one-process products, bit for bit;
//   rowwise  one copy per all-gather, the rowwise (per-token) one: the input's forward copy,
//            kept for the backward, and the output gradient's dgrad copy; each wgrad copy
//            (blocks along the tokens) is then quantized on every rank from the gathered
//            copy's values (DeepSeek-V3's way). With power-of-two scales, rounding a value
//            that is normal in both its blocks keeps 3 mantissa bits whatever the scale, so
//            rounding it twice gives what rounding once gives; a value in a block's subnormal
//            range (or any value, with FP32 scales) can differ by the first rounding. Close
//            to one process, not equal by construction (tests bound the gap).
enum class SequenceWire : uint8_t { exact, rowwise };
inline const char* sequence_wire_name(SequenceWire w) {  // "exact" | "rowwise"
  return w == SequenceWire::exact ? "exact" : "rowwise";
}
inline SequenceWire parse_sequence_wire(const std::string& name) {  // throws listing the names
  if (name == "exact") return SequenceWire::exact;
  if (name == "rowwise") return SequenceWire::rowwise;
  MXT_FAIL("unknown sequence-parallel wire `", name, "` (valid: exact, rowwise)");
}

// The groups a model's layers are split over (null: one rank).
struct ModelParallel {
  Collectives* tp = nullptr;     // tensor parallel: heads and MLP columns split over it
  bool sequence_parallel = false;  // with tp: norms and residuals on sequence shards
  SequenceWire sp_wire = SequenceWire::exact;
  Collectives* ep = nullptr;     // expert parallel: experts spread over it
  Collectives* etp = nullptr;    // expert-tensor parallel: each expert's hidden units split over it

  int tp_size() const { return tp ? tp->size() : 1; }
  int tp_rank() const { return tp ? tp->rank() : 0; }
  int ep_size() const { return ep ? ep->size() : 1; }
  int ep_rank() const { return ep ? ep->rank() : 0; }
  int etp_size() const { return etp ? etp->size() : 1; }
  int etp_rank() const { return etp ? etp->rank() : 0; }
};

// ---- sequence parallelism's all-gathers (docs/distributed.md, "Sequence parallel") --------

// The copies `copies` (format f) of the whole matrix [size·Ns, K] of which rank r holds rows
// [r·Ns, (r+1)·Ns) in `shard` [Ns, K] FP32: exactly the copies make_copies makes of the whole
// matrix. A copy whose blocks lie within a shard's rows travels as its codes and scales —
// bf16 and rowwise always, colwise when Ns is a multiple of the block edge; any other is made
// from the gathered FP32 shards (4 bytes per element, exact too), and *fp32_route is set.
// Returns the bytes this rank sent.
uint64_t gather_copies(Collectives& group, const float* shard, int64_t Ns, int64_t K,
                       const TensorFormat& f, CopySet copies, QTensor& out,
                       bool* fp32_route = nullptr);
// SequenceWire::rowwise: adds to `q` (a gathered rowwise or BF16 copy of an [M, K] matrix)
// the copies `want` (format f) quantized from the values it holds; scratch grows to [M·K]
// floats only when there is a copy to make (under bf16 the gathered copy is all wgrad reads).
void derive_copies(QTensor& q, const TensorFormat& f, CopySet want, FloatBuffer& scratch);
// The whole FP32 matrix: out [size·Ns, K].
uint64_t gather_rows(Collectives& group, const float* shard, int64_t Ns, int64_t K, float* out);

// A sequence-parallel backward's gathers on either wire, for the model and bench-layers alike.
// The cost is the gather's alone: quantizing derived copies counts as compute, not as
// communication.
struct GatherCost {
  uint64_t bytes = 0;       // sent by this rank
  double ms = 0;            // spent in the gather
  bool fp32_route = false;  // some copy travelled as FP32 rows (gather_copies)
};
// Row-parallel backward: into q, the copies of the output gradient [size·Ns, O] (this rank's
// rows in dy_shard [Ns, O], format f) that dgrad and wgrad read. exact: both gathered;
// rowwise: dgrad's gathered, wgrad's quantized from them here (scratch grows to [size·Ns, O]).
GatherCost gather_grad_copies(Collectives& group, const float* dy_shard, int64_t Ns, int64_t O,
                              const TensorFormat& f, CopySet dgrad, CopySet wgrad,
                              SequenceWire wire, QTensor& q, FloatBuffer& scratch);
// Column-parallel backward: the input copies wgrad reads. exact: gathered again from this
// rank's rows `shard` [Ns, K] into `regathered`, which is returned; rowwise: quantized from
// `kept` (the forward's gathered copy, [size·Ns, K]) into it, which is returned (scratch
// grows to [size·Ns, K]).
QTensor& input_wgrad_copies(Collectives& group, const float* shard, int64_t Ns, int64_t K,
                            const TensorFormat& f, CopySet wgrad, SequenceWire wire,
                            QTensor& kept, QTensor& regathered, FloatBuffer& scratch,
                            GatherCost& cost);

// ---- expert parallelism's token rows (docs/distributed.md, "Expert parallel") ------------
// A row of D values travels as its rowwise copy in format f: BF16 values for an unscaled
// format; the row's FP8 codes and then its scales for a 1x32 (E8M0) or 1x128 (FP32) rowwise
// format. Any other format (one scale per tensor) travels as FP32. An expert's input (and the
// gradient of its output) is defined as the values such a row arrives as, at every layout: in
// one process the rows make the same round trip (row_round_trip), so ep ranks compute what one
// process computes.
bool row_payload_quantizes(const TensorFormat& f);
size_t row_payload_bytes(const TensorFormat& f, int64_t D);
// x: [rows, D] -> out: [rows, row_payload_bytes] (row r's bytes at r·row_payload_bytes).
void pack_rows(const float* x, int64_t rows, int64_t D, const TensorFormat& f, uint8_t* out);
// in: [rows, row_payload_bytes] -> x: [rows, D], the values the rows stand for.
void unpack_rows(const uint8_t* in, int64_t rows, int64_t D, const TensorFormat& f, float* x);
// x: [rows, D] in place: unpack_rows(pack_rows(x)).
void row_round_trip(float* x, int64_t rows, int64_t D, const TensorFormat& f);

}  // namespace mxtrain
