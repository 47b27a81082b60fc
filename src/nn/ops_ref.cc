// nn/ops_ref.cc — the scalar kernels of nn/ops.h (the reference; table in nn/ops_kernels.h).
//
// Plain loops in FP32 with double accumulators for row sums, std::exp for exponentials. The
// AVX-512 kernels (ops_avx512.cc) are tested against these on awkward shapes.
#include <algorithm>
#include <cmath>

#include "nn/ops_kernels.h"

namespace mxtrain::opk {
namespace {

void embed_fwd(float* out, const int32_t* tokens, const float* table, int64_t D, int64_t n0,
               int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* src = table + int64_t(tokens[n]) * D;
    float* dst = out + n * D;
    for (int64_t d = 0; d < D; ++d) dst[d] = src[d];
  }
}

void embed_bwd(float* dtable, const float* dout, const int32_t* tokens, int64_t N, int64_t D,
               int64_t d0, int64_t d1) {
  for (int64_t n = 0; n < N; ++n) {
    float* dst = dtable + int64_t(tokens[n]) * D;
    const float* src = dout + n * D;
    for (int64_t d = d0; d < d1; ++d) dst[d] += src[d];
  }
}

void rms_fwd(float* out, float* rstd, const float* x, const float* gain, int64_t D, float eps,
             int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* xr = x + n * D;
    double ss = 0.0;
    for (int64_t d = 0; d < D; ++d) ss += double(xr[d]) * xr[d];
    const float r = float(1.0 / std::sqrt(ss / double(D) + double(eps)));
    rstd[n] = r;
    float* o = out + n * D;
    for (int64_t d = 0; d < D; ++d) o[d] = xr[d] * r * gain[d];
  }
}

// With xhat = x * r: dx[n,d] += r * (dout[n,d] g[d] - xhat[n,d] * mean_d(dout[n,:] g xhat[n,:])).
void rms_bwd_dx(float* dx, const float* dout, const float* x, const float* gain,
                const float* rstd, int64_t D, int64_t n0, int64_t n1, bool write) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* xr = x + n * D;
    const float* g = dout + n * D;
    const float r = rstd[n];
    double dot = 0.0;
    for (int64_t d = 0; d < D; ++d) dot += double(g[d]) * gain[d] * (xr[d] * r);
    const float m = float(dot / double(D));
    float* o = dx + n * D;
    for (int64_t d = 0; d < D; ++d) o[d] = (write ? 0.f : o[d]) + r * (g[d] * gain[d] - xr[d] * r * m);
  }
}

// Sixteen FP32 accumulators per pass over the rows (one per column), summed in token order.
void rms_bwd_dgain(float* dgain, const float* dout, const float* x, const float* rstd,
                   int64_t N, int64_t D, int64_t d0, int64_t d1, bool write) {
  constexpr int64_t kCols = 16;
  for (int64_t c0 = d0; c0 < d1; c0 += kCols) {
    const int64_t c1 = std::min(d1, c0 + kCols);
    float acc[kCols] = {};
    for (int64_t n = 0; n < N; ++n) {
      const float r = rstd[n];
      const float* xr = x + n * D;
      const float* g = dout + n * D;
      for (int64_t d = c0; d < c1; ++d) acc[d - c0] += g[d] * (xr[d] * r);
    }
    for (int64_t d = c0; d < c1; ++d) dgain[d] = (write ? 0.f : dgain[d]) + acc[d - c0];
  }
}

inline float sigmoidf(float v) { return 1.f / (1.f + std::exp(-v)); }

void swiglu_fwd(float* h, const float* a, int64_t F, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* gate = a + n * 2 * F;
    const float* up = gate + F;
    float* o = h + n * F;
    for (int64_t f = 0; f < F; ++f) o[f] = gate[f] * sigmoidf(gate[f]) * up[f];
  }
}

// silu'(g) = s + g s (1 - s), s = sigmoid(g).
void swiglu_bwd(float* da, const float* dh, const float* a, int64_t F, int64_t n0, int64_t n1,
                bool write) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* gate = a + n * 2 * F;
    const float* up = gate + F;
    const float* g = dh + n * F;
    float* dgate = da + n * 2 * F;
    float* dup = dgate + F;
    for (int64_t f = 0; f < F; ++f) {
      const float s = sigmoidf(gate[f]);
      const float silu = gate[f] * s;
      dgate[f] = (write ? 0.f : dgate[f]) + g[f] * up[f] * (s + gate[f] * s * (1.f - s));
      dup[f] = (write ? 0.f : dup[f]) + g[f] * silu;
    }
  }
}

void ce_fwd(float* probs, float* losses, const float* logits, const int32_t* targets, int64_t V,
            int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
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
}

void ce_bwd(float* dlogits, const float* probs, const int32_t* targets, int64_t V, float dloss,
            int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* p = probs + n * V;
    float* d = dlogits + n * V;
    for (int64_t v = 0; v < V; ++v) d[v] = p[v] * dloss;
    d[targets[n]] -= dloss;
  }
}

void add(float* out, const float* a, const float* b, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
}

void acc(float* y, const float* x, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
}

void axpy(float* y, const float* x, float alpha, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) y[i] += alpha * x[i];
}

void adamw(float* w, const float* g, float* m, float* v, const AdamWStep& s, int64_t i0,
           int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    const float gi = g[i] * s.grad_scale;
    m[i] = s.beta1 * m[i] + s.one_minus_beta1 * gi;
    v[i] = s.beta2 * v[i] + s.one_minus_beta2 * gi * gi;
    const float denom = std::sqrt(v[i]) * s.inv_sqrt_bc2 + s.eps;
    w[i] -= s.wd * w[i];
    w[i] -= s.step_size * m[i] / denom;
  }
}

double sumsq_block(const float* x, int64_t n) {
  double acc[32] = {};
  for (int64_t i = 0; i < n; ++i) acc[i % 32] += double(x[i]) * double(x[i]);
  for (int h = 16; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) acc[l] += acc[l + h];
  return acc[0];
}

bool nonfinite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return true;
  return false;
}

}  // namespace

const Kernels& kernels_ref() {
  static const Kernels k{embed_fwd,  embed_bwd,  rms_fwd, rms_bwd_dx, rms_bwd_dgain,
                         swiglu_fwd, swiglu_bwd, ce_fwd,  ce_bwd,     add,
                         acc,        axpy,       adamw,   sumsq_block, nonfinite};
  return k;
}

}  // namespace mxtrain::opk
