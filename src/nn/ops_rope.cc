// nn/ops_rope.cc — rotary position embedding (RoPE) on the packed qkv activations (nn/ops.h).
//
// Position t rotates each pair (x_i, x_{i+hd/2}) of every head's q and k by the angle
// t · theta^(-2i/hd) (the "half" pairing of GPT-NeoX and Llama). The rotation is applied in
// place to the qkv projection's output, so the attention that follows (and its saved input)
// sees rotated q and k; the backward rotates dq and dk back by the same angle (a rotation's
// transpose is its inverse). The angle table [max positions, hd/2] is computed once in double
// precision and rounded to FP32. Every element is written by one thread: results do not depend
// on the thread count.
#include <cmath>

#include "mxtrain/common.h"
#include "mxtrain/nn/ops.h"
#include "mxtrain/profile.h"

namespace mxtrain {

RopeTable::RopeTable(int64_t max_pos, int64_t head_dim, double theta)
    : max_pos_(max_pos), half_(head_dim / 2) {
  MXT_CHECK(max_pos >= 1 && head_dim >= 2 && head_dim % 2 == 0, "RoPE: needs max positions >= 1 "
            "and an even head dimension >= 2, got ", max_pos, " and ", head_dim);
  MXT_CHECK(std::isfinite(theta) && theta > 1.0, "RoPE: theta must be finite and > 1, got ",
            theta);
  cos_.resize(size_t(max_pos * half_));
  sin_.resize(size_t(max_pos * half_));
  for (int64_t t = 0; t < max_pos; ++t)
    for (int64_t i = 0; i < half_; ++i) {
      const double a = double(t) * std::pow(theta, -2.0 * double(i) / double(head_dim));
      cos_[size_t(t * half_ + i)] = float(std::cos(a));
      sin_[size_t(t * half_ + i)] = float(std::sin(a));
    }
}

namespace {

// Rotates q and k of every head of every row by +angle (sign = +1) or -angle (sign = -1).
// x: [B*T, 3*D] packed [q | k | v]; row b*T + t sits at position pos0 + t.
void rotate(float* x, const RopeTable& tab, int64_t B, int64_t T, int64_t D, int64_t H,
            int64_t pos0, float sign, const char* fn) {
  MXT_CHECK(x != nullptr, fn, ": null pointer");
  MXT_CHECK(B >= 1 && T >= 1 && H >= 1 && D % H == 0, fn, ": bad shape B=", B, " T=", T, " D=",
            D, " H=", H);
  const int64_t hd = D / H, half = hd / 2;
  MXT_CHECK(pos0 >= 0 && half == tab.half() && pos0 + T <= tab.max_positions(), fn,
            ": the table is for head dimension ", 2 * tab.half(), " and ", tab.max_positions(),
            " positions, got ", hd, " and positions ", pos0, "..", pos0 + T - 1);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* c = tab.cos(pos0 + t);
      const float* s = tab.sin(pos0 + t);
      float* row = x + (b * T + t) * 3 * D;
      for (int64_t part = 0; part < 2; ++part)  // q, then k
        for (int64_t h = 0; h < H; ++h) {
          float* u = row + part * D + h * hd;
          float* w = u + half;
#pragma omp simd
          for (int64_t i = 0; i < half; ++i) {
            const float a = u[i], e = w[i], sn = sign * s[i];
            u[i] = a * c[i] - e * sn;
            w[i] = a * sn + e * c[i];
          }
        }
    }
}

}  // namespace

void rope_forward(float* qkv, const RopeTable& tab, int64_t B, int64_t T, int64_t D, int64_t H,
                  int64_t pos0) {
  MXT_PROFILE(rope, fwd);
  rotate(qkv, tab, B, T, D, H, pos0, 1.f, "rope_forward");
}

void rope_backward(float* dqkv, const RopeTable& tab, int64_t B, int64_t T, int64_t D,
                   int64_t H) {
  MXT_PROFILE(rope, bwd);
  rotate(dqkv, tab, B, T, D, H, 0, -1.f, "rope_backward");
}

}  // namespace mxtrain
