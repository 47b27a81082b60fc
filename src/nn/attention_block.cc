// nn/attention_block.cc — the pre-norm attention block (mxtrain/nn/blocks.h):
//   ln1 = rmsnorm(x)                       [rows, D]
//   qkv_out = qkv(ln1)                     [N, 3D/tp]   column-parallel (gathers ln1 under SP)
//   atty = attention(rope(q), rope(k), v)  [N, D/tp]    causal; FP32 or BF16 operands
//   out = x + proj(atty)                   [rows, D]    row-parallel (sums the heads' parts)
// Where each tensor lives (its own buffers, the set the recomputed blocks share, or the arena)
// is the view's business (nn/arena.h); the passes read the same view.
//
// Inference runs the same forward with a KV cache (gemma.cpp's one forward serving prefill and
// generation): q and k of the new tokens are rotated to their positions, k and v appended to
// the cache [max_seq_len, D], and each query attends to the cached positions up to its own in
// FP32 — scaled dot products summed over the head dimension in order, max-subtracted softmax,
// the probability-weighted sum of v in key order (the FP32 training attention's arithmetic;
// its logits match a full-sequence forward up to FP32 summation order, tests/nn/
// generate_test.cc).
#include <algorithm>
#include <cmath>

#include "mxtrain/common.h"
#include "mxtrain/gemm.h"
#include "mxtrain/nn/arena.h"
#include "mxtrain/nn/blocks.h"
#include "nn/block_util.h"

namespace mxtrain {

using namespace nn_detail;
using Region = Arena::Region;

struct AttentionBlock::View {
  float *ln1, *rstd1, *qkv_out, *lse, *atty, *branch;
  LinearSaved *s_qkv, *s_proj;
};

AttentionBlock::AttentionBlock(const BlockContext& c, int layer) {
  const ModelConfig& cfg = c.cfg;
  const int tp = c.par.tp_size();
  MXT_CHECK(cfg.n_heads % tp == 0, "tensor parallelism ", tp, " must divide model.n_heads (",
            cfg.n_heads, ")");
  const int64_t D = cfg.d_model;
  D_ = D;
  Dl_ = D / tp;
  H_ = cfg.n_heads / tp;
  max_seq_ = cfg.max_seq_len;
  eps_ = cfg.rms_eps;
  rope_ = c.rope;
  const std::string p = "layers." + std::to_string(layer) + ".attention";
  init_ones(norm, p + ".norm.gain", D);
  // This rank's q, k and v heads; proj's matching input columns.
  qkv = Linear(p + ".qkv", D, 3 * Dl_, false, c.precision(p + ".qkv"),
               c.role(ParallelMode::column));
  proj = Linear(p + ".proj", Dl_, D, false, c.precision(p + ".proj"), c.role(ParallelMode::row));
  c.init(qkv.weight, cfg.init_std, tp_split(c.par, {3 * D, D}, 0, 3));
  c.init(proj.weight, c.std_out(), tp_split(c.par, {D, D}, 1, 1));
  qkv.set_rounding_clock(c.clock);
  proj.set_rounding_clock(c.clock);
}

// ln1 is qkv's input: kept when qkv keeps no copy, else the arena's; qkv_out and atty are the
// block's own unless the block is recomputed (then the arena's: they are made again just
// before the backward).
AttentionBlock::View AttentionBlock::view(const TokenRows& b, Arena& a) {
  AttnActs& A = acts();
  View v{};
  v.s_qkv = &A.s_qkv;
  v.s_proj = &A.s_proj;
  v.rstd1 = grow(A.rstd1, b.rows);
  v.lse = grow(A.lse, b.N * H_);
  v.ln1 = input_buffer(qkv, A.ln1, b.rows * D_, a.region(Region::attn_in, b));
  if (shared_) {
    v.qkv_out = a.region(Region::qkv, b);
    v.atty = a.region(Region::atty, b);
  } else {
    v.qkv_out = grow(A.qkv_out, b.N * 3 * Dl_);
    v.atty = grow(A.atty, b.N * Dl_);
  }
  v.branch = a.region(Region::attn_branch, b);
  return v;
}

void AttentionBlock::reserve(const TokenRows& b, Arena& a) { view(b, a); }

void AttentionBlock::forward(const float* x, const TokenRows& b, float* out, Arena& a) {
  run(x, b, out, a, true);
}

void AttentionBlock::recompute(const float* x, const TokenRows& b, float* out, Arena& a) {
  run(x, b, out, a, false);
}

// x: [rows, D]; out: [rows, D] or null (recompute: what the backward reads, proj's saved copy
// without its product).
void AttentionBlock::run(const float* x, const TokenRows& b, float* out, Arena& a,
                         bool report) {
  const View v = view(b, a);
  rmsnorm_forward(v.ln1, v.rstd1, x, norm.value.data(), b.rows, D_, eps_);
  if (report)
    qkv.forward(v.ln1, b.rows, v.qkv_out, *v.s_qkv);
  else
    qkv.recompute(v.ln1, b.rows, v.qkv_out, *v.s_qkv);
  if (b.cached())
    attend_cached(v, b);
  else  // q, k rotated as read
    attention_forward(v.atty, v.lse, v.qkv_out, b.B, b.T, Dl_, H_,
                      fp32_ ? AttnPrecision::fp32 : AttnPrecision::bf16, rope_);
  if (!out) {
    proj.save_input(v.atty, b.N, *v.s_proj);
    return;
  }
  {
    SplitSumsScope split(split_tp_, 1);
    if (report)  // the heads' partial sums, summed over the group
      proj.forward(v.atty, b.N, v.branch, *v.s_proj);
    else
      proj.recompute(v.atty, b.N, v.branch, *v.s_proj);
  }
  residual_forward(out, x, v.branch, b.rows * D_);
}

void AttentionBlock::backward(float* dres, const float* x, const TokenRows& b, Arena& a) {
  const View v = view(b, a);
  float* dbranch = a.region(Region::dbranch, b);
  float* dqkv = a.region(Region::dqkv, b);
  float* dln = a.region(Region::dln_attn, b);  // over qkv_out once attention has read it
  proj.backward(*v.s_proj, dres, dbranch);
  attention_backward(dqkv, dbranch, v.qkv_out, v.atty, v.lse, b.B, b.T, Dl_, H_,
                     fp32_ ? AttnPrecision::fp32 : AttnPrecision::bf16, rope_);  // writes dqkv
  {
    SplitSumsScope split(split_tp_, 3);  // q, k, v
    qkv.backward(*v.s_qkv, dqkv, dln);   // every head's input gradient, summed over the group
  }
  rmsnorm_backward(dres, norm.grad.data(), dln, x, norm.value.data(), v.rstd1, b.rows, D_,
                   Accum::add, take_grad_mode(norm));
}

// The n new tokens of qkv_out [n, 3D] at positions pos..pos+n-1: k (rotated) into the
// transposed key cache [D, max_seq_len], v into the value cache [max_seq_len, D], then each
// query over the cached positions 0..its own into atty [n, D] (attention_cached, nn/ops.h).
// One process (D = Dl).
void AttentionBlock::attend_cached(const View& v, const TokenRows& b) {
  const int64_t n = b.T, D = Dl_, H = H_, T = max_seq_, pos = b.pos;
  MXT_CHECK(pos + n <= T, "attention: ", n, " tokens after ", pos, " cached ones exceed "
            "max_seq_len = ", T);
  if (kcache_.size() != size_t(T * D)) {
    kcache_.assign(size_t(T * D), 0.f);
    vcache_.assign(size_t(T * D), 0.f);
  }
  float* qkv_out = v.qkv_out;
  if (rope_) rope_forward(qkv_out, *rope_, 1, n, D, H, pos);
  for (int64_t i = 0; i < n; ++i) {
    const float* k = qkv_out + i * 3 * D + D;
    for (int64_t d = 0; d < D; ++d) kcache_[size_t(d * T + pos + i)] = k[d];
    std::copy_n(qkv_out + i * 3 * D + 2 * D, D, vcache_.data() + (pos + i) * D);
  }
  if (probs_.size() < size_t(n * H * T)) probs_.resize(size_t(n * H * T));
  attention_cached(v.atty, qkv_out, n, pos, D, H, kcache_.data(), vcache_.data(), T,
                   probs_.data());
}

void AttentionBlock::share_activations(AttnActs* shared) {
  if (shared) own_ = AttnActs{};
  shared_ = shared;
}

void AttentionBlock::set_fp32_reference(bool on) {
  fp32_ = on;
  qkv.set_fp32_reference(on);
  proj.set_fp32_reference(on);
}

void AttentionBlock::parameters(std::vector<Parameter*>& out) {
  for (Parameter* p : {&norm, &qkv.weight, &proj.weight}) out.push_back(p);
}

size_t AttentionBlock::held_bytes() const {
  return shared_ ? 0 : own_.s_qkv.held_bytes() + own_.s_proj.held_bytes();
}

size_t AttentionBlock::activation_bytes() const {
  const AttnActs& a = own_;
  return (a.ln1.size() + a.rstd1.size() + a.qkv_out.size() + a.lse.size() + a.atty.size()) *
         sizeof(float);
}

}  // namespace mxtrain
