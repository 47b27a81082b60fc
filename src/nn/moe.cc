// nn/moe.cc — the MoE feed-forward block (nn/moe.h): router -> top-k -> permute -> grouped
// SwiGLU experts -> gated combine, and its backward.
//
// Glue only: the routing math is in ops_router.cc, the expert GEMMs in GroupedLinear. Every
// activation the backward needs stays in the block's MoEActivations until the next forward
// (its own, or one shared by the model's blocks under activation recompute). The experts'
// inputs xp (fc1) and h (fc2) are needed only by their wgrad: when the GroupedLinear keeps its
// own copy (BF16, or FP8 with defer_backward_quant off) they are written into the backward's
// dxp / dh scratch, free during the forward; with defer on (the layer keeps a pointer) and in
// the FP32 reference they get their own buffers xp / h.
//
// Expert (and expert-tensor) parallelism (nn/moe.h): the permuted rows are sent to their
// experts' ranks (and gathered over the etp group), which run their experts once per source
// rank; the "expert side" buffers (input, fc1 output, h, output and their gradients) then hold
// those rows, xr / yr / dyr / dxr, sized to the rows that arrived (grown, never shrunk). With
// one rank they are the local buffers.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "mxtrain/common.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {

MoELayer::MoELayer(const std::string& prefix, int64_t d_model, int64_t d_ff,
                   int64_t num_experts, int64_t top_k, const LinearPrecision& fc1_prec,
                   const LinearPrecision& fc2_prec, Collectives* ep, ParallelStats* stats,
                   Collectives* etp)
    : ep_(ep), etp_(etp), stats_(stats), D_(d_model), F_(d_ff), E_(num_experts), k_(top_k) {
  MXT_CHECK(d_model >= 1 && d_ff >= 1, "MoE '", prefix, "': d_model and d_ff must be >= 1");
  MXT_CHECK(num_experts >= 1 && top_k >= 1 && top_k <= num_experts, "MoE '", prefix,
            "': top_k = ", top_k, " must be between 1 and num_experts = ", num_experts);
  const int64_t P = ep ? ep->size() : 1, Q = etp ? etp->size() : 1;
  MXT_CHECK(num_experts % P == 0, "MoE '", prefix, "': expert parallelism ", P,
            " must divide the ", num_experts, " experts");
  MXT_CHECK(d_ff % Q == 0, "MoE '", prefix, "': expert-tensor parallelism ", Q,
            " must divide the experts' d_ff ", d_ff);
  El_ = num_experts / P;
  Fl_ = d_ff / Q;
  fc1 = GroupedLinear(prefix + ".experts.fc1", El_, d_model, 2 * Fl_, fc1_prec);
  fc2 = GroupedLinear(prefix + ".experts.fc2", El_, Fl_, d_model, fc2_prec);
  fc1.set_first_expert(ep ? ep->rank() * El_ : 0);
  fc2.set_first_expert(ep ? ep->rank() * El_ : 0);
  if (etp) {  // an expert's tensors are cut over the etp group: their amaxes agreed over it
    const AmaxAgree agree = counted_amax_agree(*etp, stats ? &stats->ep_comm_bytes : nullptr,
                                               stats ? &stats->ep_ms : nullptr);
    fc1.set_amax_agree(agree);
    fc2.set_amax_agree(agree);
  }
  router.init(prefix + ".router.weight", {num_experts, d_model});
}

void MoELayer::reserve(int64_t N) {
  MXT_CHECK(N >= 1, "MoE reserve: needs at least one token, got ", N);
  MoEActivations& A = act();
  const int64_t rows = N * k_;
  for (auto* v : {&A.yp, &A.dyp, &A.dxp}) v->resize(size_t(rows * D_));
  if (own_input(fc1) || split())
    A.xp.resize(size_t(rows * D_));
  else
    A.xp = FloatBuffer();
  A.logits.resize(size_t(N * E_));
  A.dlogits.resize(size_t(N * E_));
  A.dgate.resize(size_t(rows));
  A.routing.probs.reserve(size_t(N * E_));  // moe_route resizes these within capacity
  for (auto* v : {&A.routing.expert, &A.routing.perm_token, &A.routing.slot_row})
    v->reserve(size_t(rows));
  A.routing.gate.reserve(size_t(rows));
  A.routing.counts.reserve(size_t(E_));
  if (!split()) reserve_expert_rows(A, rows, rows);
}

// The expert-side buffers for `all_rows` rows at this rank's experts, `own_rows` of them its
// own (grown, never shrunk below what an earlier step needed: no allocation once the largest
// counts were seen).
void MoELayer::reserve_expert_rows(MoEActivations& A, int64_t all_rows, int64_t own_rows) {
  const auto at_least = [](FloatBuffer& b, int64_t n) {
    if (b.size() < size_t(n)) b.resize(size_t(n));
  };
  const int64_t R = all_rows;
  at_least(A.da, R * 2 * Fl_);
  if (a_kept()) {
    A.a = FloatBuffer();  // fc1 writes A.da (free until the backward); A.a8 keeps the copy
  } else {
    at_least(A.a, R * 2 * Fl_);
    A.a8.clear();
  }
  at_least(A.dh, R * Fl_);
  if (own_input(fc2))
    at_least(A.h, R * Fl_);
  else
    A.h = FloatBuffer();
  if (split())
    for (FloatBuffer* b : {&A.xr, &A.yr, &A.dyr, &A.dxr}) at_least(*b, R * D_);
  if (etp_) at_least(A.own, own_rows * D_);
}

MoEBalance MoELayer::balance(const MoEActivations& A) const {
  if (!token_group_) return {};
  return {A.group_counts.data(), N_ * token_group_->size()};  // equal shares of the tokens
}

// ---- expert and expert-tensor parallelism ---------------------------------------------------

void MoELayer::count(uint64_t bytes, bool toward_experts,
                     std::chrono::steady_clock::time_point t0) {
  if (!stats_) return;
  stats_->ep_comm_bytes += bytes;
  if (toward_experts) stats_->ep_dispatch_bytes += bytes;
  stats_->ep_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void MoELayer::plan_dispatch(MoEActivations& A) {
  const int64_t P = ep_ ? ep_->size() : 1, Q = etp_ ? etp_->size() : 1;
  // Rows for each of every ep rank's experts, and from every ep rank for each of ours.
  A.recv_counts.resize(size_t(E_));
  if (ep_) {
    const auto t0 = std::chrono::steady_clock::now();
    count(ep_->alltoall(A.routing.counts.data(), A.recv_counts.data(),
                        sizeof(int64_t) * size_t(El_)),
          false, t0);
  } else {
    A.recv_counts.assign(A.routing.counts.begin(), A.routing.counts.end());
  }
  A.send_rows.assign(size_t(P), 0);
  A.recv_rows.assign(size_t(P), 0);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t e = 0; e < El_; ++e) {
      A.send_rows[size_t(p)] += size_t(A.routing.counts[size_t(p * El_ + e)]);
      A.recv_rows[size_t(p)] += size_t(A.recv_counts[size_t(p * El_ + e)]);
    }
  A.expert_rows = 0;
  for (size_t r : A.recv_rows) A.expert_rows += int64_t(r);
  // Every etp rank's received counts: the rows all of them compute their slices for.
  A.etp_counts.resize(size_t(Q * E_));
  if (etp_) {
    const auto t0 = std::chrono::steady_clock::now();
    count(etp_->allgather(A.recv_counts.data(), A.etp_counts.data(),
                          sizeof(int64_t) * size_t(E_)),
          false, t0);
  } else {
    A.etp_counts.assign(A.recv_counts.begin(), A.recv_counts.end());
  }
  A.etp_rows.assign(size_t(Q), 0);
  for (int64_t q = 0; q < Q; ++q)
    for (int64_t i = 0; i < E_; ++i) A.etp_rows[size_t(q)] += size_t(A.etp_counts[size_t(q * E_ + i)]);
  A.all_rows = 0;
  for (size_t r : A.etp_rows) A.all_rows += int64_t(r);
  // The sources in rank order of the expert group (ep rank p, etp rank q: p·Q + q); source
  // (p, q)'s rows are ep source p's block of etp rank q's rows.
  A.src_groups.resize(size_t(P * Q));
  A.src_offsets.resize(size_t(P * Q));
  int64_t peer = 0;
  for (int64_t q = 0; q < Q; ++q) {
    int64_t off = peer;
    for (int64_t p = 0; p < P; ++p) {
      GroupList& g = A.src_groups[size_t(p * Q + q)];
      g.offsets.resize(size_t(El_ + 1));
      g.offsets[0] = 0;
      for (int64_t e = 0; e < El_; ++e)
        g.offsets[size_t(e + 1)] =
            g.offsets[size_t(e)] + A.etp_counts[size_t(q * E_ + p * El_ + e)];
      A.src_offsets[size_t(p * Q + q)] = off;
      off += g.offsets.back();
    }
    peer += int64_t(A.etp_rows[size_t(q)]);
  }
}

void MoELayer::exchange(const void* send, const std::vector<size_t>& send_rows, void* recv,
                        const std::vector<size_t>& recv_rows, size_t row_bytes,
                        bool toward_experts) {
  MoEActivations& A = act();
  const size_t P = send_rows.size();
  A.send_bytes.resize(P);
  A.recv_bytes.resize(P);
  for (size_t q = 0; q < P; ++q) {
    A.send_bytes[q] = send_rows[q] * row_bytes;
    A.recv_bytes[q] = recv_rows[q] * row_bytes;
  }
  const auto t0 = std::chrono::steady_clock::now();
  count(ep_->alltoallv(send, A.send_bytes.data(), recv, A.recv_bytes.data()), toward_experts,
        t0);
}

SrKey MoELayer::dispatch_key(GroupedLinear& layer, Role role) const {
  const LayerScaleHistories& s = layer.scale_histories();
  return s.sr_key(role, E_ - s.group_offset);  // whole-layer group E: no expert's
}

// rows: [N·k, D] in permuted order (grouped by expert, so by destination rank) -> out:
// [all_rows, D], the values the payloads of format f stand for (FP32 rows in the FP32
// reference): sent to the experts' ep ranks, then gathered over the etp group.
void MoELayer::to_experts(const float* rows, float* out, const TensorFormat& f,
                          const SrKey& sr) {
  MoEActivations& A = act();
  const int64_t n = N_ * k_;
  const size_t rb = fp32_ref_ ? sizeof(float) * size_t(D_) : row_payload_bytes(f, D_);
  A.send_buf.resize(rb * size_t(n));
  float scale = 0.f;  // NVFP4: the pack's tensor scale (its rows' amax), sent beside them
  if (fp32_ref_)
    std::memcpy(A.send_buf.data(), rows, rb * size_t(n));
  else
    scale = pack_rows(rows, n, D_, f, A.send_buf.data(), &sr);
  const bool scaled = !fp32_ref_ && row_payload_has_tensor_scale(f);
  const int64_t P = ep_ ? ep_->size() : 1;
  if (scaled) A.pack_scales.assign(size_t(P), scale);
  const uint8_t* mine = A.send_buf.data();
  if (ep_) {
    if (scaled) {  // every source's scale to every expert rank (4 bytes each)
      const auto t0 = std::chrono::steady_clock::now();
      count(ep_->allgather(&scale, A.pack_scales.data(), sizeof(float)), true, t0);
    }
    A.recv_buf.resize(rb * size_t(A.expert_rows));
    exchange(A.send_buf.data(), A.send_rows, A.recv_buf.data(), A.recv_rows, rb, true);
    mine = A.recv_buf.data();
  }
  if (scaled) A.all_scales = A.pack_scales;
  const uint8_t* all = mine;
  if (etp_) {
    A.all_buf.resize(rb * size_t(A.all_rows));
    A.recv_bytes.resize(A.etp_rows.size());
    for (size_t q = 0; q < A.etp_rows.size(); ++q) A.recv_bytes[q] = A.etp_rows[q] * rb;
    const auto t0 = std::chrono::steady_clock::now();
    count(etp_->allgatherv(mine, rb * size_t(A.expert_rows), A.all_buf.data(),
                           A.recv_bytes.data()),
          true, t0);
    all = A.all_buf.data();
    if (scaled) {
      const auto t1 = std::chrono::steady_clock::now();
      A.all_scales.resize(size_t(P) * A.etp_rows.size());
      count(etp_->allgather(A.pack_scales.data(), A.all_scales.data(), sizeof(float) * size_t(P)),
            true, t1);
    }
  }
  if (A.all_rows == 0) return;
  if (fp32_ref_) {
    std::memcpy(out, all, rb * size_t(A.all_rows));
  } else if (!scaled) {
    unpack_rows(all, A.all_rows, D_, f, out);
  } else {  // each source's rows with its pack's scale: source (p, q) is all_scales[q·P + p]
    const int64_t Q = int64_t(A.etp_rows.size());
    for (int64_t q = 0; q < Q; ++q)
      for (int64_t p = 0; p < P; ++p) {
        const size_t s = size_t(p * Q + q);
        const int64_t r0 = A.src_offsets[s], n_s = A.src_groups[s].offsets.back();
        if (n_s > 0)
          unpack_rows(all + rb * size_t(r0), n_s, D_, f, out + r0 * D_,
                      A.all_scales[size_t(q * P + p)]);
      }
  }
}

// rows: [all_rows, D] FP32 at this rank's experts (partial sums over the etp group) -> out:
// [N·k, D] at their tokens: each etp rank's rows summed (in etp rank order) on the rank that
// received them, then sent back over the ep group.
void MoELayer::from_experts(const float* rows, float* out) {
  MoEActivations& A = act();
  const float* own = rows;
  if (etp_) {
    const size_t Q = A.etp_rows.size(), R = size_t(A.expert_rows), D = size_t(D_);
    A.send_bytes.resize(Q);
    A.recv_bytes.resize(Q);
    for (size_t q = 0; q < Q; ++q) {
      A.send_bytes[q] = A.etp_rows[q] * D * sizeof(float);
      A.recv_bytes[q] = R * D * sizeof(float);
    }
    if (A.etp_recv.size() < Q * R * D) A.etp_recv.resize(Q * R * D);
    const auto t0 = std::chrono::steady_clock::now();
    count(etp_->alltoallv(rows, A.send_bytes.data(), A.etp_recv.data(), A.recv_bytes.data()),
          false, t0);
    float* o = A.own.data();
    const float* in = A.etp_recv.data();
    std::memcpy(o, in, sizeof(float) * R * D);
    for (size_t q = 1; q < Q; ++q)
      for (size_t i = 0; i < R * D; ++i) o[i] += in[q * R * D + i];
    own = o;
  }
  if (ep_)
    exchange(own, A.recv_rows, out, A.send_rows, sizeof(float) * size_t(D_), false);
  else
    std::memcpy(out, own, sizeof(float) * size_t(N_ * k_ * D_));
}

// ---- forward / backward -----------------------------------------------------------------------

double MoELayer::forward(const float* x, int64_t N, float* y) {
  const double aux = run_forward(x, N, y);
  fc1.report(ModuleEvent::forward_done);
  fc2.report(ModuleEvent::forward_done);
  return aux;
}

double MoELayer::recompute(const float* x, int64_t N, float* y) { return run_forward(x, N, y); }

double MoELayer::run_forward(const float* x, int64_t N, float* y) {
  MXT_CHECK(x && y, "MoE forward: null x or y");
  MXT_CHECK(N >= 1, "MoE forward: needs at least one token, got ", N);
  MXT_CHECK(int64_t(router.value.size()) == E_ * D_, "MoE '", router.name,
            "': the router weight is not materialised (", router.value.size(), " values)");
  N_ = N;
  x_ = x;
  const int64_t rows = N * k_;
  reserve(N);  // forward and backward buffers for this N (no allocation once sized)
  MoEActivations& A = act();
  router_logits_forward(A.logits.data(), x, router.value.data(), N, D_, E_);
  moe_route(A.routing, A.logits.data(), N, E_, k_);
  if (token_group_) {  // the group's counts: one all-reduce of E values
    const auto t0 = std::chrono::steady_clock::now();
    thread_local std::vector<double> c;
    c.assign(A.routing.counts.begin(), A.routing.counts.end());
    const uint64_t sent = token_group_->allreduce_sum(c.data(), c.size());
    A.group_counts.assign(c.begin(), c.end());  // integers below 2^53: exact in double
    if (stats_) {
      stats_->tp_comm_bytes += sent;
      stats_->tp_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
              .count();
    }
  }
  aux_ = moe_aux_loss(A.routing, balance(A));
  A.routing.groups_into(A.groups);
  float* xp = own_input(fc1) || split() ? A.xp.data() : A.dxp.data();
  moe_permute(xp, x, A.routing, D_);
  // The experts' input: the dispatched payload, at every layout.
  const TensorFormat& fin = fc1.precision().recipe.role(Role::input);
  const SrKey in_key = dispatch_key(fc1, Role::input);
  const float* xin = xp;
  if (split()) {
    plan_dispatch(A);
    reserve_expert_rows(A, A.all_rows, A.expert_rows);
    to_experts(xp, A.xr.data(), fin, in_key);
    xin = A.xr.data();
  } else {
    A.expert_rows = A.all_rows = rows;
    A.src_groups.resize(1);
    A.src_groups[0] = A.groups;
    A.src_offsets.assign(1, 0);
    if (!fp32_ref_) row_round_trip(xp, rows, D_, fin, &in_key);
  }
  const int64_t R = A.all_rows, S = int64_t(A.src_groups.size());
  float* h = own_input(fc2) ? A.h.data() : A.dh.data();
  float* a = a_kept() ? A.da.data() : A.a.data();
  float* yr = split() ? A.yr.data() : A.yp.data();
  A.saved1.resize(size_t(S));
  A.saved2.resize(size_t(S));
  // Once per source rank, on its rows (rank order): every expert's rows from that rank.
  for (int64_t s = 0; s < S; ++s) {
    const GroupList& g = A.src_groups[size_t(s)];
    const int64_t r0 = A.src_offsets[size_t(s)], n = g.offsets.back();
    fc1.forward(xin + r0 * D_, n, g, a + r0 * 2 * Fl_, A.saved1[size_t(s)]);
  }
  if (R > 0) {  // an expert-parallel rank may receive no rows
    swiglu_forward(h, a, R, Fl_);
    if (a_kept() && !forward_only())  // [2R, F/Q], for the backward
      A.a8.keep(a, 2 * R, Fl_, a_storage(), swiglu_rounding_);
  }
  for (int64_t s = 0; s < S; ++s) {
    const GroupList& g = A.src_groups[size_t(s)];
    const int64_t r0 = A.src_offsets[size_t(s)], n = g.offsets.back();
    SplitSumsScope split(fp32_ref_ ? 1 : split_etp_, 1);  // set_split_sums
    fc2.forward(h + r0 * Fl_, n, g, yr + r0 * D_, A.saved2[size_t(s)]);
  }
  if (split()) from_experts(yr, A.yp.data());  // FP32
  moe_combine(y, A.yp.data(), A.routing, D_);
  return aux_;
}

void MoELayer::backward(const float* dy, float daux, float* dx, Accum dx_mode) {
  MXT_CHECK(dy && dx, "MoE backward: null dy or dx");
  MXT_CHECK(N_ >= 1 && x_, "MoE '", router.name, "': backward called without a forward");
  const int64_t N = N_, rows = N * k_;
  MoEActivations& A = act();
  fc2.report(ModuleEvent::backward_start);
  fc1.report(ModuleEvent::backward_start);
  if (router.grad.size() != size_t(router.numel())) router.grad.assign(router.numel(), 0.f);
  // The forward sized every scratch buffer; each is written by its first producer: no zero
  // fill.
  moe_combine_backward(A.dyp.data(), A.dgate.data(), dy, A.yp.data(), A.routing, D_,
                       Accum::write);
  // The experts' output gradient: the dispatched payload in fc2's grad format.
  const TensorFormat& fgrad = fc2.precision().recipe.role(Role::grad);
  const SrKey grad_key = dispatch_key(fc2, Role::grad);
  const float* dyr = A.dyp.data();
  if (split()) {
    to_experts(A.dyp.data(), A.dyr.data(), fgrad, grad_key);
    dyr = A.dyr.data();
  } else if (!fp32_ref_) {
    row_round_trip(A.dyp.data(), rows, D_, fgrad, &grad_key);
  }
  const int64_t R = A.all_rows, S = int64_t(A.src_groups.size());
  float* dxr = split() ? A.dxr.data() : A.dxp.data();
  // Source ranks in order: the first writes each expert's gradient, the rest add.
  for (int64_t s = 0; s < S; ++s) {
    const int64_t r0 = A.src_offsets[size_t(s)];
    fc2.backward(A.saved2[size_t(s)], dyr + r0 * D_, A.dh.data() + r0 * Fl_);
  }
  if (R > 0) {
    const float* a = A.a.data();
    if (a_kept()) {  // dequantized into A.da, then SwiGLU's backward runs in place
      A.a8.restore(A.da.data());
      a = A.da.data();
    }
    swiglu_backward(A.da.data(), A.dh.data(), a, R, Fl_, Accum::write);
  }
  for (int64_t s = 0; s < S; ++s) {
    const int64_t r0 = A.src_offsets[size_t(s)];
    SplitSumsScope split(fp32_ref_ ? 1 : split_etp_, 2);  // gate, up (set_split_sums)
    fc1.backward(A.saved1[size_t(s)], A.da.data() + r0 * 2 * Fl_, dxr + r0 * D_);
  }
  if (split()) from_experts(dxr, A.dxp.data());  // FP32, back to the tokens
  moe_permute_backward(dx, A.dxp.data(), A.routing, D_, dx_mode);
  moe_route_backward(A.dlogits.data(), A.dgate.data(), daux, A.routing, balance(A));
  router_logits_backward(dx, router.grad.data(), A.dlogits.data(), x_, router.value.data(), N,
                         D_, E_, take_grad_mode(router));
  N_ = 0;  // one backward per forward
  fc2.report(ModuleEvent::backward_done);
  fc1.report(ModuleEvent::backward_done);
}

}  // namespace mxtrain
