// nn/attention_cached.cc — attention over a KV cache (mxtrain/nn/ops.h attention_cached): the
// argument checks, the dispatch table and the portable reference. Inference runs it for the
// tokens it appends (AttentionBlock::attend_cached): `mxtrain eval` a window at a time,
// `mxtrain generate` its prompt and then one token at a time.
//
// Per (new query i, head h), over the keys s = 0..pos+i:
//   score_s = Σ_j fl(fl(q_j · scale) · kT[h·hd + j][s])   from +0, j in order
//   p_s = std::exp(score_s - max_s score),  sum = Σ_s p_s   (key order),  p_s = fl(p_s · fl(1/sum))
//   out_j = Σ_s fl(p_s · v[s][h·hd + j])                  from +0, s in order
// The AVX-512 kernel (attention_cached_avx512.cc) computes the same operations in the same
// order, sixteen keys or head dimensions at a time. Threads split the (query, head) pairs;
// each is computed by one thread, so nothing depends on the thread count.
#include <omp.h>

#include <cmath>

#include "core/dispatch.h"
#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"
#include "mxtrain/profile.h"
#include "nn/attention_kernels.h"

namespace mxtrain {

namespace nn_detail {

void attention_cached_ref(float* out, const float* qkv, int64_t n, int64_t pos, int64_t D,
                          int64_t H, const float* kT, const float* v, int64_t Tc, float* probs) {
  const int64_t hd = D / H;
  const float scale = float(1.0 / std::sqrt(double(hd)));
#pragma omp parallel for collapse(2) schedule(static) if (n * H > 1)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < H; ++h) {
      const float* q = qkv + i * 3 * D + h * hd;
      const float* k = kT + h * hd * Tc;  // row j: dimension j of every key
      float* p = probs + (i * H + h) * Tc;
      const int64_t keys = pos + i + 1;  // positions 0..pos+i
      for (int64_t s = 0; s < keys; ++s) {
        float acc = 0.f;
        for (int64_t j = 0; j < hd; ++j) acc += (q[j] * scale) * k[j * Tc + s];
        p[s] = acc;
      }
      const float inv = softmax_numerators(p, keys);
      for (int64_t s = 0; s < keys; ++s) p[s] *= inv;
      float* o = out + i * D + h * hd;
      for (int64_t j = 0; j < hd; ++j) o[j] = 0.f;
      for (int64_t s = 0; s < keys; ++s) {
        const float* vr = v + s * D + h * hd;
        const float ps = p[s];
        for (int64_t j = 0; j < hd; ++j) o[j] += ps * vr[j];
      }
    }
  }
}

}  // namespace nn_detail

namespace {

const PathTable<nn_detail::AttnCached>& cached_table() {
  static const PathTable<nn_detail::AttnCached> t(
      "attention over a KV cache (inference)",
      {{Path::scalar, "attention_cached_ref", nn_detail::attention_cached_ref},
       {Path::avx512, "attention_cached_avx512", nn_detail::attention_cached_avx512}});
  return t;
}

}  // namespace

PathChoice nn_detail::attention_cached_choice() { return cached_table().choice(); }

void attention_cached(float* out, const float* qkv, int64_t n, int64_t pos, int64_t D,
                      int64_t H, const float* kT, const float* v, int64_t Tc, float* probs) {
  MXT_PROFILE(attention, fwd);
  MXT_CHECK(out && qkv && kT && v && probs, "attention_cached: null pointer");
  MXT_CHECK(n >= 1 && pos >= 0 && D >= 1 && H >= 1 && D % H == 0 && pos + n <= Tc,
            "attention_cached: ", n, " queries after ", pos, " cached positions of ", Tc,
            ", d_model ", D, ", ", H, " heads");
  cached_table().get()(out, qkv, n, pos, D, H, kT, v, Tc, probs);
}

}  // namespace mxtrain
