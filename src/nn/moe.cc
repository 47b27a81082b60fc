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
#include <algorithm>

#include "mxtrain/common.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {
namespace {

// FP32 reference of GroupedLinear: y[rows g] = x[rows g] · W[g]^T per expert.
void grouped_forward_f32(const GroupedLinear& l, const float* x, const GroupList& g, float* y) {
  const int64_t in = l.in_features(), out = l.out_features();
  MXT_CHECK(int64_t(l.weight.value.size()) == l.num_experts() * out * in, "'", l.name(),
            "': the FP32 reference needs the full weight in weight.value");
  for (int64_t e = 0; e < g.num_groups(); ++e) {
    const int64_t r0 = g.offsets[e], n = g.count(e);
    if (n == 0) continue;
    gemm_f32(false, true, n, out, in, x + r0 * in, in, l.weight.value.data() + e * out * in, in,
             y + r0 * out, out, false);
  }
}

// dx = dy · W[g] (written), dW[g] += dy^T · x per expert (written after clear_grad()).
void grouped_backward_f32(GroupedLinear& l, const float* x, const GroupList& g, const float* dy,
                          float* dx) {
  const int64_t in = l.in_features(), out = l.out_features();
  const bool acc = l.weight.take_grad_accumulate();
  for (int64_t e = 0; e < g.num_groups(); ++e) {
    const int64_t r0 = g.offsets[e], n = g.count(e);
    if (n == 0) {
      if (!acc) std::fill_n(l.weight.grad.data() + e * out * in, out * in, 0.f);
      continue;
    }
    const float* w = l.weight.value.data() + e * out * in;
    gemm_f32(false, false, n, in, out, dy + r0 * out, out, w, in, dx + r0 * in, in, false);
    gemm_f32(true, false, out, in, n, dy + r0 * out, out, x + r0 * in, in,
             l.weight.grad.data() + e * out * in, in, acc);
  }
}

}  // namespace

MoELayer::MoELayer(const std::string& prefix, int64_t d_model, int64_t d_ff,
                   int64_t num_experts, int64_t top_k, const LinearPrecision& fc1_prec,
                   const LinearPrecision& fc2_prec)
    : fc1(prefix + ".experts.fc1", num_experts, d_model, 2 * d_ff, fc1_prec),
      fc2(prefix + ".experts.fc2", num_experts, d_ff, d_model, fc2_prec),
      D_(d_model), F_(d_ff), E_(num_experts), k_(top_k) {
  MXT_CHECK(d_model >= 1 && d_ff >= 1, "MoE '", prefix, "': d_model and d_ff must be >= 1");
  MXT_CHECK(num_experts >= 1 && top_k >= 1 && top_k <= num_experts, "MoE '", prefix,
            "': top_k = ", top_k, " must be between 1 and num_experts = ", num_experts);
  router.init(prefix + ".router.weight", {num_experts, d_model});
}

void MoELayer::reserve(int64_t N) {
  MXT_CHECK(N >= 1, "MoE reserve: needs at least one token, got ", N);
  MoEActivations& A = act();
  const int64_t rows = N * k_;
  for (auto* v : {&A.yp, &A.dyp, &A.dxp}) v->resize(size_t(rows * D_));
  if (own_input(fc1))
    A.xp.resize(size_t(rows * D_));
  else
    A.xp = FloatBuffer();
  A.da.resize(size_t(rows * 2 * F_));
  if (a_fp8()) {
    A.a = FloatBuffer();  // fc1 writes A.da (free until the backward); A.a8 keeps the FP8 copy
  } else {
    A.a.resize(size_t(rows * 2 * F_));
    A.a8.clear();
  }
  A.dh.resize(size_t(rows * F_));
  if (own_input(fc2))
    A.h.resize(size_t(rows * F_));
  else
    A.h = FloatBuffer();
  A.logits.resize(size_t(N * E_));
  A.dlogits.resize(size_t(N * E_));
  A.dgate.resize(size_t(rows));
  A.routing.probs.reserve(size_t(N * E_));  // moe_route resizes these within capacity
  for (auto* v : {&A.routing.expert, &A.routing.perm_token, &A.routing.slot_row})
    v->reserve(size_t(rows));
  A.routing.gate.reserve(size_t(rows));
  A.routing.counts.reserve(size_t(E_));
}

double MoELayer::forward(const float* x, int64_t N, float* y) {
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
  aux_ = moe_aux_loss(A.routing);
  A.routing.groups_into(A.groups);
  float* xp = own_input(fc1) ? A.xp.data() : A.dxp.data();
  float* h = own_input(fc2) ? A.h.data() : A.dh.data();
  moe_permute(xp, x, A.routing, D_);
  if (fp32_ref_) {
    A.saved1 = GroupedLinearSaved{};
    A.saved2 = GroupedLinearSaved{};
    grouped_forward_f32(fc1, xp, A.groups, A.a.data());
    swiglu_forward(h, A.a.data(), rows, F_);
    grouped_forward_f32(fc2, h, A.groups, A.yp.data());
  } else {
    float* a = a_fp8() ? A.da.data() : A.a.data();
    fc1.forward(xp, rows, A.groups, a, A.saved1);
    swiglu_forward(h, a, rows, F_);
    if (a_fp8()) A.a8.keep(a, 2 * rows, F_, swiglu_rounding_);  // [2 rows, F]
    fc2.forward(h, rows, A.groups, A.yp.data(), A.saved2);
  }
  moe_combine(y, A.yp.data(), A.routing, D_);
  return aux_;
}

void MoELayer::backward(const float* dy, float daux, float* dx, Accum dx_mode) {
  MXT_CHECK(dy && dx, "MoE backward: null dy or dx");
  MXT_CHECK(N_ >= 1 && x_, "MoE '", router.name, "': backward called without a forward");
  const int64_t N = N_, rows = N * k_;
  MoEActivations& A = act();
  if (router.grad.size() != size_t(router.numel())) router.grad.assign(router.numel(), 0.f);
  // The forward sized every scratch buffer; each is written by its first producer: no zero
  // fill.
  moe_combine_backward(A.dyp.data(), A.dgate.data(), dy, A.yp.data(), A.routing, D_,
                       Accum::write);
  if (fp32_ref_) {
    for (GroupedLinear* l : {&fc1, &fc2})
      if (l->weight.grad.size() != size_t(l->weight.numel()))
        l->weight.grad.assign(l->weight.numel(), 0.f);
    grouped_backward_f32(fc2, A.h.data(), A.groups, A.dyp.data(), A.dh.data());
    swiglu_backward(A.da.data(), A.dh.data(), A.a.data(), rows, F_, Accum::write);
    grouped_backward_f32(fc1, A.xp.data(), A.groups, A.da.data(), A.dxp.data());
  } else {
    fc2.backward(A.saved2, A.dyp.data(), A.dh.data());
    const float* a = A.a.data();
    if (a_fp8()) {  // dequantized into A.da, then SwiGLU's backward runs in place
      A.a8.restore(A.da.data());
      a = A.da.data();
    }
    swiglu_backward(A.da.data(), A.dh.data(), a, rows, F_, Accum::write);
    fc1.backward(A.saved1, A.da.data(), A.dxp.data());
  }
  moe_permute_backward(dx, A.dxp.data(), A.routing, D_, dx_mode);
  moe_route_backward(A.dlogits.data(), A.dgate.data(), daux, A.routing);
  router_logits_backward(dx, router.grad.data(), A.dlogits.data(), x_, router.value.data(), N,
                         D_, E_, take_grad_mode(router));
  N_ = 0;  // one backward per forward
}

}  // namespace mxtrain
