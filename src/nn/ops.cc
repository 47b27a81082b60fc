// nn/ops.cc — embedding, RMSNorm, SwiGLU, cross-entropy and residual helpers (nn/ops.h).
//
// Each public function checks its arguments once and then runs a plain OpenMP loop. Row-wise
// work is split by rows; reductions over rows (dgain, dtable) are split by column blocks of
// kColBlock, each block summed over all rows in token order by one thread, so results are
// bit-identical for any thread count. The attention core lives in ops_attention.cc.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"

namespace mxtrain {
namespace {

constexpr int64_t kColBlock = 16;  // columns per thread task in reductions over rows

inline int64_t ceil_div_i64(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_tokens(const int32_t* ids, int64_t N, int64_t V, const char* what) {
  for (int64_t n = 0; n < N; ++n) {
    MXT_CHECK(ids[n] >= 0 && ids[n] < V, what, "[", n, "] = ", ids[n],
              " is outside the vocabulary [0, ", V, "); check the data and vocab_size");
  }
}

}  // namespace

// ---- embedding ------------------------------------------------------------------------------

void embedding_forward(float* out, const int32_t* tokens, int64_t N, const float* table,
                       int64_t V, int64_t D) {
  MXT_CHECK(out && tokens && table, "embedding_forward: null pointer");
  MXT_CHECK(N >= 1 && V >= 1 && D >= 1, "embedding_forward: N, V, D must be >= 1 (got ", N,
            ", ", V, ", ", D, ")");
  check_tokens(tokens, N, V, "token");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* src = table + int64_t(tokens[n]) * D;
    float* dst = out + n * D;
    for (int64_t d = 0; d < D; ++d) dst[d] = src[d];
  }
}

void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t N,
                        int64_t V, int64_t D) {
  MXT_CHECK(dtable && dout && tokens, "embedding_backward: null pointer");
  MXT_CHECK(N >= 1 && V >= 1 && D >= 1, "embedding_backward: N, V, D must be >= 1");
  check_tokens(tokens, N, V, "token");
  const int64_t nblk = ceil_div_i64(D, kColBlock);
#pragma omp parallel for schedule(static)
  for (int64_t cb = 0; cb < nblk; ++cb) {
    const int64_t d0 = cb * kColBlock, d1 = std::min(D, d0 + kColBlock);
    for (int64_t n = 0; n < N; ++n) {
      float* dst = dtable + int64_t(tokens[n]) * D;
      const float* src = dout + n * D;
      for (int64_t d = d0; d < d1; ++d) dst[d] += src[d];
    }
  }
}

// ---- RMSNorm --------------------------------------------------------------------------------

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* gain, int64_t N,
                     int64_t D, float eps) {
  MXT_CHECK(out && rstd && x && gain, "rmsnorm_forward: null pointer");
  MXT_CHECK(N >= 1 && D >= 1, "rmsnorm_forward: N, D must be >= 1");
  MXT_CHECK(eps > 0.f, "rmsnorm_forward: eps must be > 0 (got ", eps, ")");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    double ss = 0.0;
    for (int64_t d = 0; d < D; ++d) ss += double(xr[d]) * xr[d];
    const float r = float(1.0 / std::sqrt(ss / double(D) + double(eps)));
    rstd[n] = r;
    float* o = out + n * D;
    for (int64_t d = 0; d < D; ++d) o[d] = xr[d] * r * gain[d];
  }
}

// With xhat = x * r, out = xhat * g:
//   dgain[d] += Σ_n dout[n,d] * xhat[n,d]
//   dx[n,d]  += r * (dout[n,d] g[d] - xhat[n,d] * mean_d(dout[n,:] g * xhat[n,:]))
void rmsnorm_backward(float* dx, float* dgain, const float* dout, const float* x,
                      const float* gain, const float* rstd, int64_t N, int64_t D) {
  MXT_CHECK(dx && dgain && dout && x && gain && rstd, "rmsnorm_backward: null pointer");
  MXT_CHECK(N >= 1 && D >= 1, "rmsnorm_backward: N, D must be >= 1");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * D;
    const float* g = dout + n * D;
    const float r = rstd[n];
    double dot = 0.0;
    for (int64_t d = 0; d < D; ++d) dot += double(g[d]) * gain[d] * (xr[d] * r);
    const float m = float(dot / double(D));
    float* o = dx + n * D;
    for (int64_t d = 0; d < D; ++d) o[d] += r * (g[d] * gain[d] - xr[d] * r * m);
  }
  const int64_t nblk = ceil_div_i64(D, kColBlock);
#pragma omp parallel for schedule(static)
  for (int64_t cb = 0; cb < nblk; ++cb) {
    const int64_t d0 = cb * kColBlock, d1 = std::min(D, d0 + kColBlock);
    float acc[kColBlock] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float r = rstd[n];
      const float* xr = x + n * D;
      const float* g = dout + n * D;
      for (int64_t d = d0; d < d1; ++d) acc[d - d0] += g[d] * (xr[d] * r);
    }
    for (int64_t d = d0; d < d1; ++d) dgain[d] += acc[d - d0];
  }
}

// ---- SwiGLU ---------------------------------------------------------------------------------

namespace {
inline float sigmoidf(float v) { return 1.f / (1.f + std::exp(-v)); }
}  // namespace

void swiglu_forward(float* h, const float* a, int64_t N, int64_t F) {
  MXT_CHECK(h && a, "swiglu_forward: null pointer");
  MXT_CHECK(N >= 1 && F >= 1, "swiglu_forward: N, F must be >= 1");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = a + n * 2 * F;
    const float* up = gate + F;
    float* o = h + n * F;
    for (int64_t f = 0; f < F; ++f) o[f] = gate[f] * sigmoidf(gate[f]) * up[f];
  }
}

// silu'(g) = s + g s (1 - s), s = sigmoid(g).
void swiglu_backward(float* da, const float* dh, const float* a, int64_t N, int64_t F) {
  MXT_CHECK(da && dh && a, "swiglu_backward: null pointer");
  MXT_CHECK(N >= 1 && F >= 1, "swiglu_backward: N, F must be >= 1");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* gate = a + n * 2 * F;
    const float* up = gate + F;
    const float* g = dh + n * F;
    float* dgate = da + n * 2 * F;
    float* dup = dgate + F;
    for (int64_t f = 0; f < F; ++f) {
      const float s = sigmoidf(gate[f]);
      const float silu = gate[f] * s;
      dgate[f] += g[f] * up[f] * (s + gate[f] * s * (1.f - s));
      dup[f] += g[f] * silu;
    }
  }
}

// ---- cross-entropy --------------------------------------------------------------------------

double crossentropy_forward(float* probs, float* losses, const float* logits,
                            const int32_t* targets, int64_t N, int64_t V) {
  MXT_CHECK(probs && logits && targets, "crossentropy_forward: null pointer");
  MXT_CHECK(N >= 1 && V >= 1, "crossentropy_forward: N, V must be >= 1");
  check_tokens(targets, N, V, "target");
  std::vector<float> own;
  if (!losses) {
    own.resize(N);
    losses = own.data();
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * V;
    float* p = probs + n * V;
    float mx = l[0];
    for (int64_t v = 1; v < V; ++v) mx = std::max(mx, l[v]);
    const float lt = l[targets[n]];  // read before p may overwrite l (aliasing allowed)
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) {
      const float e = std::exp(l[v] - mx);
      p[v] = e;
      sum += e;
    }
    const float inv = float(1.0 / sum);
    for (int64_t v = 0; v < V; ++v) p[v] *= inv;
    losses[n] = float(std::log(sum) - double(lt - mx));
  }
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) total += losses[n];
  return total / double(N);
}

void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                           int64_t N, int64_t V, float dloss) {
  MXT_CHECK(dlogits && probs && targets, "crossentropy_backward: null pointer");
  MXT_CHECK(N >= 1 && V >= 1, "crossentropy_backward: N, V must be >= 1");
  check_tokens(targets, N, V, "target");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* p = probs + n * V;
    float* d = dlogits + n * V;
    for (int64_t v = 0; v < V; ++v) d[v] = p[v] * dloss;
    d[targets[n]] -= dloss;
  }
}

// ---- residual -------------------------------------------------------------------------------

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  MXT_CHECK(out && a && b, "residual_forward: null pointer");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  MXT_CHECK(dout, "residual_backward: null dout");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if (da) da[i] += dout[i];
    if (db) db[i] += dout[i];
  }
}

void axpy(float* y, const float* x, float alpha, int64_t n) {
  MXT_CHECK(y && x, "axpy: null pointer");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace mxtrain
