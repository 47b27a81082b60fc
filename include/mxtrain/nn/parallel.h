// mxtrain/nn/parallel.h — what a model's layers need to run their share of a tensor-,
// sequence- or expert-parallel layout (docs/distributed.md, "Parallel layouts"): each group's
// size, rank and collectives, a Linear's parallel role, the sequence split of a micro-batch,
// expert parallelism's row payloads, and the bytes and time the collectives cost.
//
// The layers call Collectives; dist implements them over MPI sub-communicators
// (dist/mesh.h, comm_collectives), so nn stays free of MPI. A ModelParallel without groups is
// one process. A Linear constructed with a LinearParallel does its own gathers, reduce-scatters
// and all-reduces (nn/linear.h); an MoE layer its own expert exchange (nn/moe.h). They sort
// their traffic into ParallelStats by what it carries, as the metrics report it
// (docs/config.md, "Outputs"):
//   tp_comm_bytes      every TP/SP collective this rank sent (NVFP4's amax agreements too)
//   tp_allgather_bytes the all-gathers among them: forward activations and backward gradients,
//                      the traffic that can travel in FP8
//   ep_comm_bytes      every expert all-to-all this rank sent (and the etp amax agreements)
//   ep_dispatch_bytes  the part sent toward the experts: forward tokens and backward
//                      expert-output gradients
// and the milliseconds spent in them (blocking collectives: all exposed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/aligned.h"
#include "mxtrain/common.h"
#include "mxtrain/nn/parameter.h"
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
  // x: [n], the group's maximum in place.
  virtual uint64_t allreduce_max(int64_t* x, size_t n) = 0;
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

// amax [n] (each >= 0 or NaN, as fp4_amax gives them): the group's maximum in place, NaN
// winning as in one process's amax (quantize.h): a non-negative float orders like its bits and
// NaN's bits exceed Inf's, so the maximum of the bits is taken. The amaxes of a tensor whose
// pieces the group's ranks hold, agreed before any rank quantizes its piece (NVFP4's per-tensor
// scale; docs/distributed.md, "NVFP4 at a layout"). Returns the bytes this rank sent.
uint64_t allreduce_amax(Collectives& group, float* amax, int n);

// An AmaxAgree (qtensor.h) that calls allreduce_amax over `group` and adds the bytes it sent to
// *bytes and its milliseconds to *ms (either null: not counted). group, bytes and ms must
// outlive it.
AmaxAgree counted_amax_agree(Collectives& group, uint64_t* bytes, double* ms);

struct ParallelStats {
  uint64_t tp_comm_bytes = 0, tp_allgather_bytes = 0;
  uint64_t ep_comm_bytes = 0, ep_dispatch_bytes = 0;
  double tp_ms = 0, ep_ms = 0;
  // Some sequence-parallel gather sent FP32 rows: a copy whose blocks span two ranks' rows
  // (colwise blocks longer than a rank's N/tp tokens, a 2-D tile or one FP8 scale per tensor;
  // NVFP4's tensor scale is agreed over the group and travels with the codes).
  bool sp_fp32_route = false;
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

// ---- a Linear's role (Megatron's column- and row-parallel pairs) ----------------------------
//
// With a group of size P (nn/linear.h does the collectives; `rows` are x's rows on this rank):
//   none    nothing crosses ranks: every rank computes the whole product on its rows;
//   column  W holds this rank's rows of the output features. x [rows, in] -> y [rows, out/P];
//           the input gradient is this rank's part, summed over the group (all-reduce);
//   row     W holds this rank's columns of the input features. x [rows, in/P] -> y [rows,
//           out], the ranks' partial products summed over the group (all-reduce).
// With sequence parallelism the residual stream outside the pair is split by tokens
// (SequenceShard): a column Linear takes this rank's rows [rows, in] of the norm's output and
// all-gathers them as the copies its products read (the wire, SequenceWire), giving y
// [P·rows, out/P]; its input gradient is reduce-scattered back to [rows, in]. A row Linear's
// partial outputs are reduce-scattered: y [rows/P, out]; its output gradient arrives as this
// rank's rows [rows/P, out] and is all-gathered as the copies dgrad and wgrad read. The
// gathered copies are the bytes one process quantizes, so the products are the one-process
// products. Without a group every mode is none.
enum class ParallelMode : uint8_t { none, column, row };

struct LinearParallel {
  ParallelMode mode = ParallelMode::none;
  Collectives* group = nullptr;    // the tensor-parallel group (null: one rank)
  bool sequence_parallel = false;  // with a group: the residual stream is split by tokens
  SequenceWire wire = SequenceWire::exact;
  ParallelStats* stats = nullptr;  // where the collectives are counted (null: nowhere)
  bool active() const { return group && mode != ParallelMode::none; }
  bool gathers() const { return active() && sequence_parallel; }
  int size() const { return group ? group->size() : 1; }
};

// ---- sequence parallelism's split of a micro-batch ------------------------------------------

// The rows of a micro-batch's N tokens this rank's residual stream holds: rank r of the group
// rows [r·N/P, (r+1)·N/P); without a group (no sequence parallelism) all N. The embedding,
// the norms, the residual adds and the LM head run on these rows alone.
struct SequenceShard {
  Collectives* group = nullptr;
  ParallelStats* stats = nullptr;

  int64_t rows(int64_t N) const { return group ? N / group->size() : N; }
  int64_t first(int64_t N) const { return group ? rows(N) * group->rank() : 0; }
  bool split() const { return group != nullptr; }
  int parts() const { return group ? group->size() : 1; }
  // Throws unless the group's ranks get equal shares of N tokens.
  void check(int64_t N) const;
  // `sums` [n]: each rank's part, summed over the group in place (a loss over the micro-batch
  // from the ranks' shares); nothing without a group.
  void sum(double* sums, int n) const;
  // Marks every parameter that is not a slice as holding this rank's part of the group's
  // gradient (ParamSplit::partial_grad): it saw this rank's rows alone. Nothing without a group.
  void mark_partial_grads(const std::vector<Parameter*>& params) const;
};

// ---- expert parallelism's token rows (docs/distributed.md, "Expert parallel") ------------
// A row of D values travels as its rowwise copy in format f: BF16 values for an unscaled
// format; the row's codes and then its scales for a 1x32 (E8M0: MXFP8, MXFP4) or 1x128 (FP32)
// rowwise format, or NVFP4's 1x16 (E4M3) one, whose per-tensor scale — of the pack: every row
// one rank sends in one dispatch, its micro-batch's routed rows — travels once beside them.
// Any other format (one FP8 scale per tensor) travels as FP32. An expert's input (and the
// gradient of its output) is defined as the values such a row arrives as, at every layout: in
// one process the rows make the same round trip (row_round_trip), so ep ranks compute what one
// process computes.
bool row_payload_quantizes(const TensorFormat& f);
// Whether a pack of rows in format f carries a per-tensor scale beside them (NVFP4).
bool row_payload_has_tensor_scale(const TensorFormat& f);
size_t row_payload_bytes(const TensorFormat& f, int64_t D);
// x: [rows, D] -> out: [rows, row_payload_bytes] (row r's bytes at r·row_payload_bytes).
// Returns the pack's per-tensor decode scale (from the amax of all `rows`), 0 when the format
// has none. sr: the pack's stochastic-rounding key, for a format that rounds stochastically
// (nullptr: the zero key); the MoE layer passes the micro-batch's (nn/moe.h, "Dispatch keys").
float pack_rows(const float* x, int64_t rows, int64_t D, const TensorFormat& f, uint8_t* out,
                const SrKey* sr = nullptr);
// in: [rows, row_payload_bytes] -> x: [rows, D], the values the rows stand for; tensor_scale:
// what pack_rows returned for them (read only when the format has one).
void unpack_rows(const uint8_t* in, int64_t rows, int64_t D, const TensorFormat& f, float* x,
                 float tensor_scale = 0.f);
// x: [rows, D] in place: unpack_rows(pack_rows(x, sr)).
void row_round_trip(float* x, int64_t rows, int64_t D, const TensorFormat& f,
                    const SrKey* sr = nullptr);

}  // namespace mxtrain
