// nn/ops_router.cc — MoE routing math (nn/moe.h): router product, softmax + top-k gating,
// load-balancing loss, permutation into per-expert groups and the gated combine.
//
// Independent of the expert layers so it can be tested on its own. Per-token work is split by
// tokens; the router weight gradient (a reduction over tokens) is split by (expert, column
// block), each summed over tokens in order; the counting sort that builds the permutation is
// serial (O(N·k)). Every result is therefore the same for any thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/profile.h"

namespace mxtrain {
namespace {

constexpr int64_t kColBlock = 16;

void check_routing(const MoERouting& r, const char* fn) {
  MXT_CHECK(r.tokens >= 1 && r.experts >= 1 && r.top_k >= 1, fn,
            ": routing is empty; call moe_route first");
  MXT_CHECK(int64_t(r.slot_row.size()) == r.tokens * r.top_k, fn, ": routing is inconsistent");
}

}  // namespace

// ---- router linear --------------------------------------------------------------------------

void router_logits_forward(float* logits, const float* x, const float* w, int64_t N, int64_t D,
                           int64_t E) {
  MXT_PROFILE(router, fwd);
  MXT_CHECK(logits && x && w, "router_logits_forward: null pointer");
  MXT_CHECK(N >= 1 && D >= 1 && E >= 1, "router_logits_forward: N, D, E must be >= 1");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    for (int64_t e = 0; e < E; ++e) {
      const float* wr = w + e * D;
      float acc = 0.f;
      for (int64_t d = 0; d < D; ++d) acc += xr[d] * wr[d];
      logits[n * E + e] = acc;
    }
  }
}

void router_logits_backward(float* dx, float* dw, const float* dlogits, const float* x,
                            const float* w, int64_t N, int64_t D, int64_t E, Accum dw_mode) {
  MXT_PROFILE(router, bwd);
  MXT_CHECK(dlogits && x && w, "router_logits_backward: null pointer");
  MXT_CHECK(N >= 1 && D >= 1 && E >= 1, "router_logits_backward: N, D, E must be >= 1");
  if (dx) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      float* o = dx + n * D;
      for (int64_t e = 0; e < E; ++e) {
        const float g = dlogits[n * E + e];
        const float* wr = w + e * D;
        for (int64_t d = 0; d < D; ++d) o[d] += g * wr[d];
      }
    }
  }
  if (dw) {
    const int64_t nblk = (D + kColBlock - 1) / kColBlock;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t cb = 0; cb < nblk; ++cb) {
        const int64_t d0 = cb * kColBlock, d1 = std::min(D, d0 + kColBlock);
        float acc[kColBlock] = {};
        for (int64_t n = 0; n < N; ++n) {
          const float g = dlogits[n * E + e];
          const float* xr = x + n * D;
          for (int64_t d = d0; d < d1; ++d) acc[d - d0] += g * xr[d];
        }
        for (int64_t d = d0; d < d1; ++d)
          dw[e * D + d] = (dw_mode == Accum::write ? 0.f : dw[e * D + d]) + acc[d - d0];
      }
    }
  }
}

// ---- routing --------------------------------------------------------------------------------

void moe_route(MoERouting& r, const float* logits, int64_t N, int64_t E, int64_t top_k) {
  MXT_PROFILE(moe_routing, fwd);
  MXT_CHECK(logits, "moe_route: null logits");
  MXT_CHECK(N >= 1 && E >= 1, "moe_route: N and E must be >= 1 (got ", N, ", ", E, ")");
  MXT_CHECK(top_k >= 1 && top_k <= E, "moe_route: top_k = ", top_k,
            " must be between 1 and the number of experts (", E, ")");
  MXT_CHECK(N * top_k <= std::numeric_limits<int32_t>::max(), "moe_route: N*top_k = ",
            N * top_k, " token slots is too many for one micro-batch");
  r.tokens = N;
  r.experts = E;
  r.top_k = top_k;
  r.probs.resize(N * E);
  r.expert.resize(N * top_k);
  r.gate.resize(N * top_k);
  r.perm_token.resize(N * top_k);
  r.slot_row.resize(N * top_k);
  r.counts.assign(E, 0);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * E;
    float* p = r.probs.data() + n * E;
    float mx = l[0];
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, l[e]);
    double sum = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp(l[e] - mx);
      sum += p[e];
    }
    const float inv = float(1.0 / sum);
    for (int64_t e = 0; e < E; ++e) p[e] *= inv;
    // Top-k by logit (finer than the rounded probabilities); ties go to the lower index. With
    // NaN logits the choice is still k distinct valid experts (NaN then reaches the loss).
    int32_t* ex = r.expert.data() + n * top_k;
    float* g = r.gate.data() + n * top_k;
    float s = 0.f;
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || ex[i] == e;
        if (!taken && (best < 0 || l[e] > l[best])) best = e;
      }
      ex[j] = int32_t(best);
      s += p[best];
    }
    for (int64_t j = 0; j < top_k; ++j) g[j] = p[ex[j]] / s;
  }
  // Stable counting sort of the N*k slots by expert.
  for (int64_t i = 0; i < N * top_k; ++i) ++r.counts[r.expert[i]];
  thread_local std::vector<int64_t> next;  // grown once
  next.assign(size_t(E), 0);
  for (int64_t e = 1; e < E; ++e) next[e] = next[e - 1] + r.counts[e - 1];
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t row = next[r.expert[n * top_k + j]]++;
      r.perm_token[row] = int32_t(n);
      r.slot_row[n * top_k + j] = int32_t(row);
    }
  }
}

double moe_aux_loss(const MoERouting& r, MoEBalance b) {
  MXT_PROFILE(moe_routing, fwd);
  check_routing(r, "moe_aux_loss");
  const int64_t N = r.tokens, E = r.experts;
  const int64_t* counts = b.counts ? b.counts : r.counts.data();
  const int64_t Ng = b.counts ? b.tokens : N;
  MXT_CHECK(Ng >= N, "moe_aux_loss: the group's ", Ng, " tokens are fewer than this rank's ", N);
  double aux = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    double P = 0.0;
    for (int64_t n = 0; n < N; ++n) P += r.probs[n * E + e];
    P /= double(Ng);
    const double f = double(counts[e]) / double(Ng * r.top_k);
    aux += f * P;
  }
  return double(E) * aux;
}

// With S = Σ_{i in top-k} p_i and gate_j = p_{e_j} / S:
//   dp_{e_j} += (dgate_j - Σ_i dgate_i gate_i) / S,   dp_e += daux · E · f_e / N  (all e)
//   dlogits_e = p_e (dp_e - Σ_u p_u dp_u)
void moe_route_backward(float* dlogits, const float* dgate, float daux, const MoERouting& r,
                        MoEBalance b) {
  MXT_PROFILE(moe_routing, bwd);
  MXT_CHECK(dlogits, "moe_route_backward: null dlogits");
  check_routing(r, "moe_route_backward");
  const int64_t N = r.tokens, E = r.experts, k = r.top_k;
  const int64_t* counts = b.counts ? b.counts : r.counts.data();
  const int64_t Ng = b.counts ? b.tokens : N;
  thread_local std::vector<float> aux_dp;  // grown once
  aux_dp.resize(size_t(E));
  for (int64_t e = 0; e < E; ++e)
    aux_dp[e] = float(double(daux) * double(E) * double(counts[e]) /
                      (double(Ng * k) * double(Ng)));
  const float* aux = aux_dp.data();  // the workers see their own thread_locals, not this one
#pragma omp parallel
  {
    thread_local std::vector<float> dp;  // per OpenMP thread, grown once
    dp.resize(size_t(E));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* p = r.probs.data() + n * E;
      const int32_t* ex = r.expert.data() + n * k;
      const float* g = r.gate.data() + n * k;
      for (int64_t e = 0; e < E; ++e) dp[e] = aux[e];
      if (dgate) {
        const float* dg = dgate + n * k;
        float s = 0.f, dot = 0.f;
        for (int64_t j = 0; j < k; ++j) {
          s += p[ex[j]];
          dot += dg[j] * g[j];
        }
        for (int64_t j = 0; j < k; ++j) dp[ex[j]] += (dg[j] - dot) / s;
      }
      float pdp = 0.f;
      for (int64_t e = 0; e < E; ++e) pdp += p[e] * dp[e];
      float* dl = dlogits + n * E;
      for (int64_t e = 0; e < E; ++e) dl[e] = p[e] * (dp[e] - pdp);
    }
  }
}

// ---- permutation ----------------------------------------------------------------------------

void moe_permute(float* xp, const float* x, const MoERouting& r, int64_t D) {
  MXT_PROFILE(moe_routing, fwd);
  MXT_CHECK(xp && x, "moe_permute: null pointer");
  check_routing(r, "moe_permute");
  const int64_t rows = r.tokens * r.top_k;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    std::copy_n(x + int64_t(r.perm_token[i]) * D, D, xp + i * D);
}

void moe_permute_backward(float* dx, const float* dxp, const MoERouting& r, int64_t D,
                          Accum mode) {
  MXT_PROFILE(moe_routing, bwd);
  MXT_CHECK(dx && dxp, "moe_permute_backward: null pointer");
  check_routing(r, "moe_permute_backward");
  const int64_t N = r.tokens, k = r.top_k;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* o = dx + n * D;
    if (mode == Accum::write) std::fill_n(o, D, 0.f);  // row-local: stays in cache
    for (int64_t j = 0; j < k; ++j) {
      const float* src = dxp + int64_t(r.slot_row[n * k + j]) * D;
      for (int64_t d = 0; d < D; ++d) o[d] += src[d];
    }
  }
}

void moe_unpermute(float* xs, const float* xp, const MoERouting& r, int64_t D) {
  MXT_CHECK(xs && xp, "moe_unpermute: null pointer");
  check_routing(r, "moe_unpermute");
  const int64_t rows = r.tokens * r.top_k;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows; ++i)
    std::copy_n(xp + int64_t(r.slot_row[i]) * D, D, xs + i * D);
}

void moe_combine(float* y, const float* yp, const MoERouting& r, int64_t D) {
  MXT_PROFILE(moe_routing, fwd);
  MXT_CHECK(y && yp, "moe_combine: null pointer");
  check_routing(r, "moe_combine");
  const int64_t N = r.tokens, k = r.top_k;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* o = y + n * D;
    const float g0 = r.gate[n * k];
    const float* s0 = yp + int64_t(r.slot_row[n * k]) * D;
    for (int64_t d = 0; d < D; ++d) o[d] = g0 * s0[d];
    for (int64_t j = 1; j < k; ++j) {
      const float g = r.gate[n * k + j];
      const float* src = yp + int64_t(r.slot_row[n * k + j]) * D;
      for (int64_t d = 0; d < D; ++d) o[d] += g * src[d];
    }
  }
}

void moe_combine_backward(float* dyp, float* dgate, const float* dy, const float* yp,
                          const MoERouting& r, int64_t D, Accum mode) {
  MXT_PROFILE(moe_routing, bwd);
  const bool write = mode == Accum::write;
  MXT_CHECK(dyp && dy && yp, "moe_combine_backward: null pointer");
  check_routing(r, "moe_combine_backward");
  const int64_t N = r.tokens, k = r.top_k;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* g = dy + n * D;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = r.slot_row[n * k + j];
      const float gate = r.gate[n * k + j];
      float* o = dyp + row * D;
      const float* src = yp + row * D;
      float dot = 0.f;
      for (int64_t d = 0; d < D; ++d) {
        o[d] = (write ? 0.f : o[d]) + gate * g[d];
        dot += g[d] * src[d];
      }
      if (dgate) dgate[n * k + j] = (write ? 0.f : dgate[n * k + j]) + dot;
    }
  }
}

}  // namespace mxtrain
