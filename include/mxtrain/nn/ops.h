// mxtrain/nn/ops.h — the model's non-GEMM layers as forward/backward pairs (llm.c style).
//
// Everything here is FP32 (attention's block products may take BF16 operands, see
// AttnPrecision), row-major, and runs on OpenMP threads. Results never depend on the number of
// threads: work is split so that every output element is written by exactly one thread, and
// every reduction over token rows (dgain, dtable, ...) is split by COLUMNS — one thread sums a
// column over all rows in token order — so the order of additions, hence every bit of the
// result, is the same for any thread count.
//
// Embedding, RMSNorm, SwiGLU, cross-entropy and the residual helpers run AVX-512 kernels on
// kernel path avx512 (mxtrain/isa.h), else the scalar reference (MXTRAIN_ISA=scalar forces it).
// The two paths agree bit for bit except where the AVX-512 kernels use a vectorised exp
// (SwiGLU, softmax; at most ~1 ulp per exp) or reassociate RMSNorm's row sums: see
// docs/numerics.md, "FP32 model ops and AdamW".
//
// Conventions (the same for every function):
//   * `*_forward` writes its outputs; `*_backward` ACCUMULATES (+=) into every gradient it
//     writes — activation gradients (dx, da, ...) and parameter gradients (dgain, dtable)
//     alike — so several branches may add into one buffer. Where a trailing Accum argument
//     says Accum::write, that output is written instead, with the value zero-fill-then-add
//     would give (bit for bit), so the first contributor spares the caller a zero fill; the
//     model's steady state fills nothing (docs/design.md, "Steady state"). Two functions
//     always WRITE their gradient: crossentropy_backward (dlogits; it is the root of the
//     backward pass and may work in place over the saved probabilities) and
//     attention_backward (dqkv; the qkv projection is its only consumer).
//   * N is the number of token rows (B*T), D the model width, V the vocabulary size.
//   * Public functions check their arguments (mxtrain::Error naming what to fix); the loops
//     behind them do not.
#pragma once

#include <cstdint>
#include <vector>

#include "mxtrain/nn/parameter.h"

namespace mxtrain {

// How a backward function treats a gradient output: add into it, or write it (as if it were 0).
enum class Accum : uint8_t { add, write };

// The mode of a parameter gradient's next contribution: write after clear_grad(), add after
// that (nn/parameter.h). Marks the gradient live.
inline Accum take_grad_mode(Parameter& p) {
  return p.take_grad_accumulate() ? Accum::add : Accum::write;
}

// ---- embedding: out[n] = table[tokens[n]] ------------------------------------------------
// out: [N, D]; tokens: [N] in [0, V); table: [V, D].
void embedding_forward(float* out, const int32_t* tokens, int64_t N, const float* table,
                       int64_t V, int64_t D);
// dtable: [V, D] += scatter of dout [N, D] by token id (rows of one id summed in token order).
// Accum::write zeroes the table first (a scatter leaves rows no token touched unwritten).
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t N,
                        int64_t V, int64_t D, Accum mode = Accum::add);

// ---- RMSNorm: out = x * rstd * gain, rstd = 1 / sqrt(mean(x^2) + eps) -------------------
// out, x: [N, D]; gain: [D]; rstd: [N] saved for backward.
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* gain, int64_t N,
                     int64_t D, float eps);
// dx: [N, D] +=; dgain: [D] +=; dout, x: [N, D]; rstd: [N] from the forward.
void rmsnorm_backward(float* dx, float* dgain, const float* dout, const float* x,
                      const float* gain, const float* rstd, int64_t N, int64_t D,
                      Accum dx_mode = Accum::add, Accum dgain_mode = Accum::add);

// ---- causal multi-head self-attention core ----------------------------------------------
// qkv: [B*T, 3*D] packed as [q | k | v], head h owning columns h*hd .. (h+1)*hd - 1 of each
// third (hd = D / H). out: [B*T, D], heads concatenated the same way. Blocked FlashAttention-2:
// no [T, T] tensor is stored; the forward saves lse and the caller keeps out, and the backward
// recomputes the scores block by block (docs/numerics.md, "Attention").
//
// Precision of the block products S = q·k^T, P·v (forward) and the backward's S, dP = dO·v^T,
// P^T·dO, dS·k, dS^T·q:
//   fp32  every operand FP32 (the model's FP32 reference mode, finite-difference checks);
//   bf16  operands q, k, v, P, dO, dS rounded to BF16 (nearest even), FP32 accumulation.
// Softmax, exp, lse and every accumulator are FP32 in both. bf16 runs an AVX512-BF16 kernel
// on kernel path avx512bf16 (mxtrain/isa.h), the portable reference otherwise
// (MXTRAIN_ISA=scalar selects it); fp32 always runs the reference.
enum class AttnPrecision { fp32, bf16 };
class RopeTable;

// out: [B*T, D]; lse: [B, H, T], lse[b,h,t] = log Σ_{s<=t} exp(q_t·k_s / sqrt(hd)) — the only
// statistic saved for backward (memory grows with T, not T^2).
// rope (optional): q and k are taken rotated by it, row b*T + t at position t, exactly as
// rope_forward (below) would have left them in qkv; qkv itself is not written, so the caller
// keeps the unrotated projection for backward. Bit for bit rope_forward, then this without it.
void attention_forward(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                       int64_t D, int64_t H, AttnPrecision p, const RopeTable* rope = nullptr);
// dqkv: [B*T, 3*D] WRITTEN (every element, not accumulated); dout: [B*T, D]; qkv, and out and
// lse as the forward wrote them (same precision p and rope). With rope, dqkv is the gradient
// w.r.t. the unrotated qkv: bit for bit this without it on the rotated qkv, then rope_backward.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int64_t B, int64_t T, int64_t D, int64_t H,
                        AttnPrecision p, const RopeTable* rope = nullptr);

// Attention over a KV cache (inference, nn/blocks.h AttentionBlock): the n queries of qkv
// [n, 3D] (q already rotated) at positions pos..pos+n-1, query i over the cached positions
// 0..pos+i. kT: [D, Tc], the cached keys transposed (row h·hd + j: dimension j of head h at
// every position); v: [Tc, D], the cached values; both hold positions 0..pos+n-1 (Tc >= pos +
// n). out: [n, D]; probs: scratch of n·H·Tc floats. FP32 in one order on every kernel path
// (nn_detail::attention_cached_choice): with scale = fl(1/sqrt(hd)), score s is Σ_j, from +0
// and j in order, of fl(fl(q_j · scale) · k_sj) (a multiply, then an add); p_s = exp(score_s -
// max) by std::exp, summed in key order; p_s · fl(1/sum); out_j = Σ_s, s in order, p_s · v_sj.
void attention_cached(float* out, const float* qkv, int64_t n, int64_t pos, int64_t D,
                      int64_t H, const float* kT, const float* v, int64_t Tc, float* probs);

// ---- SwiGLU: h = silu(gate) * up, fc1 output a = [gate | up] ----------------------------
// h: [N, F]; a: [N, 2*F] (gate in columns 0..F-1, up in F..2F-1).
void swiglu_forward(float* h, const float* a, int64_t N, int64_t F);
// da: [N, 2*F] +=; dh: [N, F]; a: [N, 2*F] from the forward. With Accum::write, da may be a
// itself (each element of a is read before the same element of da is written).
void swiglu_backward(float* da, const float* dh, const float* a, int64_t N, int64_t F,
                     Accum mode = Accum::add);

// ---- softmax cross-entropy over the vocabulary, mean over tokens ------------------------
// logits: [N, V]; targets: [N] in [0, V); probs: [N, V] softmax of logits (may alias logits);
// losses: [N] per-token -log p[target] (nullptr: not wanted). Returns the mean loss, summed in
// double in token order.
double crossentropy_forward(float* probs, float* losses, const float* logits,
                            const int32_t* targets, int64_t N, int64_t V);
// dlogits: [N, V] = (probs - onehot(target)) * dloss, WRITTEN (not accumulated); may alias
// probs. dloss is the gradient of the objective per token: grad_scale / N for the mean.
void crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                           int64_t N, int64_t V, float dloss);

// ---- rotary position embedding (RoPE), in place on packed qkv ----------------------------
// Position t rotates each pair (x_i, x_{i+hd/2}) of every head's q and k (not v) by the angle
// t * theta^(-2i/hd). qkv, dqkv: [B*T, 3*D]; row b*T + t is at position t (pos0 + t: the
// rows continue a sequence whose first pos0 positions were done before, as in a KV cache).
class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(int64_t max_positions, int64_t head_dim, double theta);  // head_dim even
  int64_t max_positions() const { return max_pos_; }
  int64_t half() const { return half_; }  // head_dim / 2
  const float* cos(int64_t pos) const { return cos_.data() + pos * half_; }  // [half]
  const float* sin(int64_t pos) const { return sin_.data() + pos * half_; }

 private:
  int64_t max_pos_ = 0, half_ = 0;
  std::vector<float> cos_, sin_;  // [max_positions, half]
};
void rope_forward(float* qkv, const RopeTable& tab, int64_t B, int64_t T, int64_t D, int64_t H,
                  int64_t pos0 = 0);
// The gradient w.r.t. the unrotated q, k: dq, dk rotated back in place (v's part untouched).
void rope_backward(float* dqkv, const RopeTable& tab, int64_t B, int64_t T, int64_t D,
                   int64_t H);

// ---- residual helpers -------------------------------------------------------------------
// out = a + b, all [n] (out may alias a or b).
void residual_forward(float* out, const float* a, const float* b, int64_t n);
// da += dout; db += dout (either may be nullptr).
void residual_backward(float* da, float* db, const float* dout, int64_t n);
// y += alpha * x, all [n].
void axpy(float* y, const float* x, float alpha, int64_t n);

// ---- AdamW, element by element (train/optim.h's adamw_update derives the constants) ------
struct AdamWStep {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float wd;            // lr * weight_decay, or 0 when the parameter is not decayed
  float grad_scale = 1.f;  // the gradient's factor (clip and 1 / grad_accum), applied first
};
// Per element, in this order: g = grad_scale g; m = b1 m + (1 - b1) g; v = b2 v + ((1 - b2)
// g) g; denom = sqrt(v) / sqrt(bc2) + eps; w = w - wd w; w = w - (step_size m) / denom.
// w, m, v updated in place from g (read only), all [n]. Both paths give the same bits, and a
// grad_scale of 1 gives those of the update without it (g * 1 = g).
void adamw_elements(float* w, const float* g, float* m, float* v, int64_t n, const AdamWStep& s);

// Σ x[i]² in double over x [n], in blocks of kSumSquaresBlock elements added in block order;
// inside a block element i goes to accumulator i mod 32 and the 32 are added pairwise (lanes
// l and l + 16, then l + 8, ... l + 1). Each square is exact in double, so the order is all that
// decides the bits: the same on every kernel path and for any thread count. A NaN or Inf
// element makes the sum NaN or Inf.
constexpr int64_t kSumSquaresBlock = 4096;
double sum_squares_elements(const float* x, int64_t n);
// Whether every x[i] of x [n] is finite (no NaN, no ±Inf).
bool all_finite_elements(const float* x, int64_t n);

}  // namespace mxtrain
