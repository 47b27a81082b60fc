// mxtrain/nn/moe.h — mixture-of-experts feed-forward block: router, permutation, experts.
//
// Data flow for N token rows x [N, D] (the output of the layer's RMSNorm):
//   logits [N, E] = x · Wr^T                    router, FP32 product (never quantized)
//   probs  [N, E] = softmax(logits) over all experts
//   top-k per token (descending probability, ties -> lower expert index), gates renormalised
//   over the chosen experts: gate_j = p_j / Σ_{i in top-k} p_i. This equals a softmax over the
//   top-k logits (Mixtral's routing); the full softmax is kept because the load-balancing
//   loss needs the mean probability of every expert.
//   permute: the N*k (token, slot) rows are grouped by expert — expert 0's rows first, and
//   within an expert in token order (stable) — giving xp [N*k, D] and per-expert counts.
//   experts: a = fc1(xp) [N*k, 2F] (GroupedLinear `experts.fc1`, W [E, 2F, D]),
//            h = silu(a_gate) * a_up [N*k, F], yp = fc2(h) [N*k, D] (`experts.fc2`, W [E, D, F])
//   combine: y[n] = Σ_j gate[n, j] · yp[row of (n, j)], slots added in order j = 0..k-1.
//
// Load-balancing loss (Switch Transformer / GShard): aux = E · Σ_e f_e · P_e with
// f_e = (token slots routed to e) / (N·k) and P_e = mean_n probs[n, e]. f_e is a count and has
// no gradient; d aux / d probs[n, e] = E · f_e / N. With perfectly uniform routing aux = 1.
//
// The routing math is free functions (ops_router.cc) so it can be tested without experts;
// MoELayer (moe.cc) strings them together with the two GroupedLinear layers. Functions follow
// nn/ops.h's conventions: backward functions accumulate (+=) unless they say "written".
//
// Expert parallelism (nn/parallel.h; docs/distributed.md, "Expert parallel"): with an ep group
// of P ranks each rank holds E/P experts (rank p: experts [p·E/P, (p+1)·E/P)) and routes its
// own tokens. The permuted rows travel to their experts' ranks (MPI all-to-all, counts sent
// first; no capacity limit, no token dropped) as row payloads in fc1's input format (FP8 codes
// and scales under an FP8 recipe), and the experts' outputs come back in FP32 for the combine.
// In the backward the expert-output gradients travel toward the experts in fc2's grad format
// and the input gradients come back in FP32. A rank's experts run once per source rank, on
// that rank's rows (in rank order), so the tokens of different ranks never share a block of
// the token axis and each expert's gradient adds the sources in rank order — the arithmetic of
// one process running the ranks' micro-batches one after another. With one rank the rows make
// the same payload round trip (row_round_trip): an expert's input is the dispatched payload
// at every layout. Dispatch keys: a payload format that rounds stochastically (NVFP4's
// gradients) draws the pack's bits with the layer's key of that role (fc1's input, fc2's grad)
// for whole-layer group E, one past the last expert — the micro-batch's clock, a tensor id no
// expert's own copies use — so the bits change every micro-batch and a resumed run draws
// the uninterrupted run's.
//
// Expert-tensor parallelism (an etp group of Q ranks, Megatron's ETP): each expert's hidden
// units are split over the group — fc1's rows of this rank's slice of gate and up, fc2's
// matching input columns. After the dispatch the ranks of the group all-gather their received
// rows (still as payloads), so each computes its slice for every row its group received; fc2's
// partial outputs are summed back to the rank that received each row (in group order), and so
// are fc1's input gradients in the backward. The experts run once per source rank of the
// expert group (ep x etp ranks, in rank order).
//
// Under tensor parallelism with sequence parallelism each rank of the tp group routes its own
// shard of the micro-batch (set_token_group): the load-balancing loss is the micro-batch's,
// counted with the group's summed counts over all its tokens (MoEBalance), each rank's value
// its share, so the shares add up to what one process computes on the whole micro-batch.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/aligned.h"
#include "mxtrain/gemm.h"
#include "mxtrain/nn/fp8_activation.h"
#include "mxtrain/nn/grouped_linear.h"
#include "mxtrain/nn/linear.h"
#include "mxtrain/nn/ops.h"
#include "mxtrain/nn/parallel.h"
#include "mxtrain/nn/parameter.h"

namespace mxtrain {

// Routing decisions for one micro-batch.
struct MoERouting {
  int64_t tokens = 0, experts = 0, top_k = 0;
  std::vector<float> probs;        // [N, E] softmax over all experts
  std::vector<int32_t> expert;     // [N, k] chosen experts, descending probability
  std::vector<float> gate;         // [N, k] renormalised gating weights (sum to 1 per token)
  std::vector<int64_t> counts;     // [E] token slots per expert (sum = N*k)
  std::vector<int32_t> perm_token; // [N*k] permuted row -> source token
  std::vector<int32_t> slot_row;   // [N*k] slot n*k+j -> permuted row
  GroupList groups() const { return GroupList::from_counts(counts, tokens * top_k); }
  // The same into an existing list (its storage reused: no allocation once sized).
  void groups_into(GroupList& g) const {
    g.offsets.resize(counts.size() + 1);
    g.offsets[0] = 0;
    for (size_t e = 0; e < counts.size(); ++e) g.offsets[e + 1] = g.offsets[e] + counts[e];
  }
};

// ---- router linear (FP32) -----------------------------------------------------------------
// logits: [N, E] (written) = x [N, D] · w [E, D]^T.
void router_logits_forward(float* logits, const float* x, const float* w, int64_t N, int64_t D,
                           int64_t E);
// dx: [N, D] += dlogits · w; dw: [E, D] += dlogits^T · x (either may be nullptr; dw_mode
// Accum::write writes dw, nn/ops.h).
void router_logits_backward(float* dx, float* dw, const float* dlogits, const float* x,
                            const float* w, int64_t N, int64_t D, int64_t E,
                            Accum dw_mode = Accum::add);

// ---- routing ------------------------------------------------------------------------------
// logits: [N, E]. Fills every field of r (buffers are reused when r is reused). NaN logits do
// not throw: the token still gets k distinct experts and its probabilities/gates become NaN, so
// the loss turns non-finite and the trainer's skip-the-step handling applies.
void moe_route(MoERouting& r, const float* logits, int64_t N, int64_t E, int64_t top_k);
// The load-balancing statistics a micro-batch's aux loss is counted over: its own routing, or
// (sequence parallelism) the group of ranks whose token shards make one micro-batch — their
// summed counts [E] and total tokens.
struct MoEBalance {
  const int64_t* counts = nullptr;  // null: the routing's own counts and tokens
  int64_t tokens = 0;
};
// aux = E · Σ_e f_e · P_e (double precision, sums in a fixed order). With a group balance,
// f_e = counts_e / (tokens·k) and P_e sums this rank's probabilities over the group's tokens:
// the ranks' values add up to the aux of the whole micro-batch.
double moe_aux_loss(const MoERouting& r, MoEBalance b = {});
// dlogits: [N, E] WRITTEN = gradient of  Σ_{n,j} dgate[n,j]·gate[n,j] + daux · aux  w.r.t. the
// logits, through the renormalisation and the softmax. dgate: [N, k] (nullptr: zero).
void moe_route_backward(float* dlogits, const float* dgate, float daux, const MoERouting& r,
                        MoEBalance b = {});

// ---- permutation ----------------------------------------------------------------------------
// xp: [N*k, D] (written) = x [N, D] rows in permuted order.
void moe_permute(float* xp, const float* x, const MoERouting& r, int64_t D);
// dx: [N, D] += Σ_j dxp[row of (n, j)], slots in order j = 0..k-1 (Accum::write: written).
void moe_permute_backward(float* dx, const float* dxp, const MoERouting& r, int64_t D,
                          Accum mode = Accum::add);
// xs: [N*k, D] (written) rows of xp back in slot order (row n*k+j is token n's slot j).
// moe_unpermute(moe_permute(x)) is x with each row repeated k times, bit for bit.
void moe_unpermute(float* xs, const float* xp, const MoERouting& r, int64_t D);
// y: [N, D] (written) = Σ_j gate[n,j] · yp[row of (n, j)].
void moe_combine(float* y, const float* yp, const MoERouting& r, int64_t D);
// dyp: [N*k, D] += gate · dy; dgate: [N, k] += dy[n] · yp[row of (n, j)] (Accum::write:
// both written).
void moe_combine_backward(float* dyp, float* dgate, const float* dy, const float* yp,
                          const MoERouting& r, int64_t D, Accum mode = Accum::add);

// ---- the MoE block ---------------------------------------------------------------------------

// An MoE block's activations and backward scratch, reused across micro-batches. Several blocks
// may share one (activation recompute, nn/transformer.h: only one block's forward is alive at a
// time, recomputed right before its backward).
struct MoEActivations {
  MoERouting routing;
  GroupList groups;
  FloatBuffer logits, xp, a, h, yp;           // forward activations (xp, h: see moe.cc)
  Fp8Activation a8;                           // a in FP8 / 4 bits instead (swiglu_input)
  FloatBuffer dyp, dh, da, dxp, dgate, dlogits;  // backward scratch
  // Per source rank (one with a single rank): the experts' saved state, row groups, and the
  // first row of its block in the expert-side buffers.
  std::vector<GroupedLinearSaved> saved1, saved2;
  std::vector<GroupList> src_groups;
  std::vector<int64_t> src_offsets;
  // Expert (and expert-tensor) parallelism: the rows at this rank's experts (xr input, yr
  // output — partial sums under etp — dyr and dxr their gradients), the rows this rank
  // received itself summed back (own), the rows sent to / received from each rank, and the
  // wire buffers.
  FloatBuffer xr, yr, dyr, dxr, own, etp_recv;
  std::vector<int64_t> group_counts;  // [E] token slots per expert over the token group
  std::vector<int64_t> recv_counts;  // [P, E/P]: ep source p's rows for local expert e
  std::vector<int64_t> etp_counts;   // [Q, P, E/P]: recv_counts of every etp rank
  std::vector<size_t> send_rows, recv_rows, send_bytes, recv_bytes, etp_rows;  // [P], [Q]
  std::vector<uint8_t> send_buf, recv_buf, all_buf;
  // NVFP4 payloads: each source's pack scale, [ep] after the dispatch, [etp · ep] in the
  // order of the gathered rows (etp rank, then ep source).
  std::vector<float> pack_scales, all_scales;
  int64_t expert_rows = 0;  // rows this rank received (its share of the expert computation)
  int64_t all_rows = 0;     // rows at its experts: every etp rank's received rows
};
// Owns the router weight `<prefix>.router.weight` [E, D] and the experts
// `<prefix>.experts.fc1` / `<prefix>.experts.fc2`. Activations live in member buffers that are
// reused across micro-batches; the input x passed to forward must stay alive and unchanged
// until backward (the router's weight gradient reads it).
class MoELayer {
 public:
  MoELayer() = default;
  // prefix: dotted module path of the block, e.g. "layers.1.mlp". ep: the expert-parallel
  // group (null: one rank; its size must divide num_experts); etp: the expert-tensor-parallel
  // group (null: one rank; its size must divide d_ff); stats: where their traffic is counted.
  MoELayer(const std::string& prefix, int64_t d_model, int64_t d_ff, int64_t num_experts,
           int64_t top_k, const LinearPrecision& fc1_prec, const LinearPrecision& fc2_prec,
           Collectives* ep = nullptr, ParallelStats* stats = nullptr,
           Collectives* etp = nullptr);

  int64_t d_model() const { return D_; }
  int64_t d_ff() const { return F_; }
  int64_t num_experts() const { return E_; }
  int64_t local_experts() const { return El_; }  // experts on this rank (E / ep size)
  int64_t top_k() const { return k_; }

  Parameter router;   // [E, D]
  GroupedLinear fc1;  // [E/P, 2F/Q, D]: this rank's experts (its slices of gate and up)
  GroupedLinear fc2;  // [E/P, D, F/Q]

  // x: [N, D]; y: [N, D] (written). Returns the load-balancing loss of this micro-batch.
  // Reports forward_done of experts.fc1, then of experts.fc2, to their hooks once both ran.
  double forward(const float* x, int64_t N, float* y);
  // forward without the reports (activation recompute).
  double recompute(const float* x, int64_t N, float* y);
  // dy: [N, D]; dx: [N, D] += (through experts and router; Accum::write: written).
  // daux = d objective / d aux. Accumulates router.grad and the experts' weight grads (or
  // writes them after clear_grad(), nn/parameter.h). Reports backward_start of fc2, then of
  // fc1, before the experts' backward and backward_done in the same order after it.
  void backward(const float* dy, float daux, float* dx, Accum dx_mode = Accum::add);

  // Sizes the block's activation and backward buffers for micro-batches of N tokens (their
  // row counts are N·top_k whatever the routing). Every forward does it for its own N; called
  // ahead (GPT::reserve), the first step allocates none of them.
  void reserve(int64_t N);

  // Numerics reference: when on, the expert products run in plain FP32 from weight.value
  // (gemm_f32) instead of through GroupedLinear's recipe, and the rows travel in FP32. For
  // gradient checks and studies.
  void set_fp32_reference(bool on) {
    fp32_ref_ = on;
    fc1.set_fp32_reference(on);
    fc2.set_fp32_reference(on);
  }
  bool fp32_reference() const { return fp32_ref_; }
  // One process: fc2's forward and fc1's input gradient summed as `etp` expert-tensor-parallel
  // ranks sum them (GPT::set_split_sums; for parity tests).
  void set_split_sums(int etp) { split_etp_ = etp; }
  // Keep the experts' SwiGLU input (fc1's output) in FP8 or 4 bits for backward
  // (nn/fp8_activation.h; follow_fc1: FP8 when the experts' fc1 quantizes its input; fp4: in
  // a 4-bit fc1's format); the FP32 reference mode keeps FP32 whatever this says.
  void set_swiglu_input(SwigluInput s, ScaleRounding rounding) {
    swiglu_ = s;
    swiglu_rounding_ = rounding;
  }

  // The ranks whose token shards make one micro-batch (sequence parallelism's tp group; null:
  // this rank's tokens are a micro-batch): the load-balancing loss is counted over the group's
  // tokens together (MoEBalance), its counts summed over the group in each forward.
  void set_token_group(Collectives* g) { token_group_ = g; }

  // Keep activations and scratch in `shared` (nullptr: the block's own, the default). The
  // block's own buffers are freed when it starts sharing.
  void share_activations(MoEActivations* shared) {
    if (shared) own_ = MoEActivations{};
    shared_ = shared;
  }

  const MoERouting& routing() const { return act().routing; }
  double aux_loss() const { return aux_; }
  // Bytes the two GroupedLinear layers hold for backward after the last forward.
  size_t held_bytes() const {
    size_t n = 0;
    for (const auto* v : {&act().saved1, &act().saved2})
      for (const GroupedLinearSaved& s : *v) n += s.held_bytes();
    return n;
  }
  // Bytes of this block's FP32 activation buffers (kept for backward).
  size_t activation_bytes() const {
    const MoEActivations& a = act();
    return (a.logits.size() + a.routing.probs.size() + a.routing.gate.size() + a.xp.size() +
            a.a.size() + a.h.size() + a.yp.size() + a.xr.size() + a.yr.size()) *
               sizeof(float) +
           a.a8.bytes();
  }

 private:
  MoEActivations& act() { return shared_ ? *shared_ : own_; }
  const MoEActivations& act() const { return shared_ ? *shared_ : own_; }
  // Expert and expert-tensor parallelism (moe.cc): the row counts each way and the source
  // blocks; rows of `row_bytes` each exchanged with the ep ranks, toward the experts (rows [P]
  // per destination) or back to the tokens.
  bool split() const { return ep_ || etp_; }
  void plan_dispatch(MoEActivations& A);
  void reserve_expert_rows(MoEActivations& A, int64_t all_rows, int64_t own_rows);
  void exchange(const void* send, const std::vector<size_t>& send_rows, void* recv,
                const std::vector<size_t>& recv_rows, size_t row_bytes, bool toward_experts);
  void count(uint64_t bytes, bool toward_experts, std::chrono::steady_clock::time_point t0);
  // Rows [N·k, D] to the experts in format f (FP32 out [all_rows, D]); the experts' (partial)
  // rows [all_rows, D] back to their tokens (FP32 out [N·k, D]).
  void to_experts(const float* rows, float* out, const TensorFormat& f, const SrKey& sr);
  // The dispatch key of `layer`'s role (the header's "Dispatch keys").
  SrKey dispatch_key(GroupedLinear& layer, Role role) const;
  void from_experts(const float* rows, float* out);
  Collectives* ep_ = nullptr;
  Collectives* etp_ = nullptr;
  Collectives* token_group_ = nullptr;
  ParallelStats* stats_ = nullptr;
  MoEBalance balance(const MoEActivations& A) const;
  double run_forward(const float* x, int64_t N, float* y);
  int64_t D_ = 0, F_ = 0, Fl_ = 0, E_ = 0, El_ = 0, k_ = 0, N_ = 0;
  const float* x_ = nullptr;
  double aux_ = 0.0;
  bool fp32_ref_ = false;
  int split_etp_ = 1;  // set_split_sums
  SwigluInput swiglu_ = SwigluInput::fp32;
  ScaleRounding swiglu_rounding_ = ScaleRounding::rceil;
  SwigluStorage a_storage() const {
    return fp32_ref_ ? SwigluStorage{} : swiglu_storage(swiglu_, fc1.precision());
  }
  bool a_kept() const { return a_storage().kind != SwigluStorage::fp32; }  // in FP8 / 4 bits
  // Whether an expert layer's input needs a buffer of its own until backward (moe.cc).
  bool own_input(const GroupedLinear& l) const { return !l.keeps_input_copy(); }
  MoEActivations own_;
  MoEActivations* shared_ = nullptr;
};

}  // namespace mxtrain
