// mxtrain/nn/blocks.h — the blocks a GPT (nn/transformer.h) is a stack of: a pre-norm
// attention block, a pre-norm MLP block (dense SwiGLU, or a mixture of experts), and the LM
// head. Each owns its parameters and layers, the activations its backward reads, and its
// forward, backward and recompute; the model owns the arena they share (nn/arena.h).
//
//   AttentionBlock  out = x + proj(attention(rope(qkv(rmsnorm(x)))))   qkv column-, proj
//                   row-parallel; with a KV cache (inference) q at positions pos.. attends to
//                   every cached key
//   MlpBlock        out = x + fc2(silu(gate) · up), [gate | up] = fc1(rmsnorm(x))   fc1
//                   column-, fc2 row-parallel
//   MoeBlock        out = x + Σ_k gate_k · expert_k(rmsnorm(x))   (nn/moe.h, MoELayer)
//   LmHead          logits = lm_head(rmsnorm(x)) and the cross-entropy
//
// A block sees only the rows of the residual stream this rank holds (TokenRows::rows): its
// Linears (nn/linear.h) do their parallel role's collectives themselves, and its MoE layer its
// expert exchange, so no block branches on the layout. Passes:
//   forward    the training (or inference) forward; its layers report to their hooks;
//   recompute  activation recompute: the forward's tensors again, bit for bit, silently;
//   backward   adds the block's share to the residual-stream gradient and accumulates its
//              parameters' gradients (written after clear_grad(), nn/parameter.h).
// Every activation buffer is [rows or N, width] FP32 unless said otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/aligned.h"
#include "mxtrain/nn/fp8_activation.h"
#include "mxtrain/nn/grouped_linear.h"
#include "mxtrain/nn/linear.h"
#include "mxtrain/nn/model_config.h"
#include "mxtrain/nn/moe.h"
#include "mxtrain/nn/ops.h"
#include "mxtrain/nn/parallel.h"
#include "mxtrain/nn/parameter.h"

namespace mxtrain {

class Arena;  // nn/arena.h

// The tokens of one pass: B sequences of T tokens, N = B·T, of which this rank's residual
// stream holds rows [first, first + rows) (all N without sequence parallelism). With a KV
// cache (inference, B = 1) the T tokens sit at positions pos, pos + 1, ... after the cached ones.
struct TokenRows {
  int B = 0, T = 0;
  int64_t N = 0, first = 0, rows = 0;
  int pos = -1;  // -1: no cache (training: positions 0..T-1 of each sequence)
  bool cached() const { return pos >= 0; }
};
// Throws unless the shard's ranks get equal shares of the B·T tokens.
TokenRows token_rows(const SequenceShard& shard, int B, int T);

// What a block is built from: the model's config and layout, and what its layers take.
struct BlockContext {
  const ModelConfig& cfg;
  const ModelParallel& par;
  SequenceShard shard;          // the residual stream's split (sequence parallelism)
  ParallelStats* stats;         // where the layers count their collectives
  const RoundingClock* clock;   // the layers' stochastic-rounding clock
  const RopeTable* rope;        // null: no rotary embedding
  uint64_t seed;                // the initial values' streams (nn/model_init.h)
  bool random_init;             // false: weights zero (gains one) until loaded
  std::function<LinearPrecision(const std::string& module)> precision;  // by dotted name

  // A Linear's role over the tensor-parallel group.
  LinearParallel role(ParallelMode m) const;
  // p's initial values: N(0, std^2) from its stream, this rank's slice when split (sets
  // p.split); zeros without random_init.
  void init(Parameter& p, float std, const ParamSplit& split = {}) const;
  float std_out() const;  // the output projections' std: init_std / sqrt(2 · n_layers)
};

// ---- attention ------------------------------------------------------------------------------

// What an attention block keeps for backward: the RMSNorm output when qkv keeps no copy of its
// own (ln1) and its rstd, the qkv projection (unrotated: attention rotates q and k as it
// reads them), attention's output and row log-sum-exp (lse [B, H, T]), and the Linears' saved
// copies.
struct AttnActs {
  FloatBuffer ln1, rstd1, qkv_out, lse, atty;
  LinearSaved s_qkv, s_proj;
};

class AttentionBlock {
 public:
  AttentionBlock(const BlockContext& c, int layer);

  Parameter norm;  // gain [D]
  Linear qkv;      // column-parallel: this rank's q, k and v heads, W [3D/tp, D]
  Linear proj;     // row-parallel: W [D, D/tp]

  // x: [rows, D]; out: [rows, D] = x + proj(attention(...)) (out may be x). Training: causal
  // attention over each of the B sequences. Cached (inference): q, k, v of the T new tokens,
  // k and v added to the KV cache at positions pos.., each query attends to positions 0..its
  // own.
  void forward(const float* x, const TokenRows& b, float* out, Arena& a);
  // The forward again, silently: with `out` the whole of it (the whole-layer recompute needs
  // the MLP's input), without it only what backward reads (not proj's product).
  void recompute(const float* x, const TokenRows& b, float* out, Arena& a);
  // dres: [rows, D] += the block's share; x: the block's input (the residual stream).
  void backward(float* dres, const float* x, const TokenRows& b, Arena& a);

  void reserve(const TokenRows& b, Arena& a);
  void share_activations(AttnActs* shared);  // null: its own (freed when sharing)
  void set_fp32_reference(bool on);
  // One process: proj's forward and qkv's input gradient summed as `tp` ranks sum them
  // (GPT::set_split_sums, SplitSumsScope in gemm.h).
  void set_split_sums(int tp) { split_tp_ = tp; }
  void parameters(std::vector<Parameter*>& out);
  // Bytes the Linears hold for backward after the last forward (0 when recomputed), and of
  // the block's own FP32 activations.
  size_t held_bytes() const;
  size_t activation_bytes() const;

 private:
  struct View;
  View view(const TokenRows& b, Arena& a);
  void run(const float* x, const TokenRows& b, float* out, Arena& a, bool report);
  void attend_cached(const View& v, const TokenRows& b);
  AttnActs& acts() { return shared_ ? *shared_ : own_; }
  int64_t D_ = 0, Dl_ = 0, H_ = 0, max_seq_ = 0;
  float eps_ = 0.f;
  const RopeTable* rope_ = nullptr;
  bool fp32_ = false;
  int split_tp_ = 1;  // set_split_sums
  AttnActs own_;
  AttnActs* shared_ = nullptr;
  // KV cache: k rotated and transposed [Dl, max_seq_len], v [max_seq_len, Dl]; the scores.
  FloatBuffer kcache_, vcache_, probs_;
};

// ---- MLP ------------------------------------------------------------------------------------

// What an MLP block keeps: the RMSNorm output (when fc1 keeps no copy; always for MoE, whose
// router backward reads it) and rstd, fc1's output (SwiGLU's input) in FP32, FP8 or 4 bits,
// SwiGLU's output (when fc2 keeps no copy), and the Linears' saved copies.
struct MlpActs {
  FloatBuffer ln2, rstd2, fc1_out, h;
  Fp8Activation fc1_out8;  // fc1_out kept in FP8 / 4 bits instead (swiglu_input)
  LinearSaved s_fc1, s_fc2;
};

// The feed-forward half of a layer: a dense MlpBlock or an MoeBlock.
class FeedForward {
 public:
  virtual ~FeedForward() = default;

  Parameter norm;  // gain [D]

  // x: [rows, D] (the residual stream after attention); out: [rows, D] = x + mlp(rmsnorm(x))
  // (out may be x). Returns the MoE load-balancing loss (0 for a dense block).
  virtual double forward(const float* x, const TokenRows& b, float* out, Arena& a) = 0;
  // What backward reads, again, silently (no output).
  virtual void recompute(const float* x, const TokenRows& b, Arena& a) = 0;
  // dres: [rows, D] += the block's share; daux: d objective / d aux.
  virtual void backward(float* dres, const float* x, const TokenRows& b, float daux,
                        Arena& a) = 0;

  virtual void reserve(const TokenRows& b, Arena& a) = 0;
  // Share the activation sets (nullptr: its own).
  virtual void share_activations(MlpActs* mlp, MoEActivations* moe) = 0;
  virtual void set_fp32_reference(bool on) = 0;
  // One process: the row-parallel sums (fc2's forward, fc1's input gradient) as `tp` ranks
  // sum them, the experts' as `etp` ranks do (GPT::set_split_sums).
  virtual void set_split_sums(int tp, int etp) = 0;
  // SwiGLU's input kept in FP8 (nn/fp8_activation.h); the FP32 reference keeps FP32.
  virtual void set_swiglu_input(SwigluInput s, ScaleRounding rounding) = 0;
  virtual void parameters(std::vector<Parameter*>& out) = 0;
  virtual void layers(std::vector<Linear*>& linears, std::vector<GroupedLinear*>& grouped) = 0;
  virtual size_t held_bytes() const = 0;
  virtual size_t activation_bytes() const = 0;
  virtual const MoELayer* moe() const { return nullptr; }

 protected:
  FeedForward(const BlockContext& c, int layer);
  MlpActs& acts() { return shared_ ? *shared_ : own_; }
  const MlpActs& acts() const { return shared_ ? *shared_ : own_; }
  int64_t D_ = 0;
  float eps_ = 0.f;
  MlpActs own_;
  MlpActs* shared_ = nullptr;
};

class MlpBlock : public FeedForward {
 public:
  MlpBlock(const BlockContext& c, int layer);

  Linear fc1;  // column-parallel: this rank's slices of gate and up, W [2F/tp, D]
  Linear fc2;  // row-parallel: W [D, F/tp]

  double forward(const float* x, const TokenRows& b, float* out, Arena& a) override;
  void recompute(const float* x, const TokenRows& b, Arena& a) override;
  void backward(float* dres, const float* x, const TokenRows& b, float daux, Arena& a) override;
  void reserve(const TokenRows& b, Arena& a) override;
  void share_activations(MlpActs* mlp, MoEActivations* moe) override;
  void set_fp32_reference(bool on) override;
  void set_split_sums(int tp, int) override { split_tp_ = tp; }
  void set_swiglu_input(SwigluInput s, ScaleRounding rounding) override;
  void parameters(std::vector<Parameter*>& out) override;
  void layers(std::vector<Linear*>& linears, std::vector<GroupedLinear*>& grouped) override;
  size_t held_bytes() const override;
  size_t activation_bytes() const override;

 private:
  struct View;
  View view(const TokenRows& b, Arena& a);
  double run(const float* x, const TokenRows& b, float* out, Arena& a, bool recompute);
  SwigluStorage storage() const;  // what SwiGLU's input is kept in
  int64_t F_ = 0;          // this rank's hidden width (d_ff / tp)
  int split_tp_ = 1;       // set_split_sums
  SwigluInput swiglu_ = SwigluInput::fp32;
  ScaleRounding rounding_ = ScaleRounding::rceil;
};

class MoeBlock : public FeedForward {
 public:
  MoeBlock(const BlockContext& c, int layer);

  MoELayer experts;  // router [E, D] and the experts (this rank's under expert parallelism)

  double forward(const float* x, const TokenRows& b, float* out, Arena& a) override;
  void recompute(const float* x, const TokenRows& b, Arena& a) override;
  void backward(float* dres, const float* x, const TokenRows& b, float daux, Arena& a) override;
  void reserve(const TokenRows& b, Arena& a) override;
  void share_activations(MlpActs* mlp, MoEActivations* moe) override;
  void set_fp32_reference(bool on) override { experts.set_fp32_reference(on); }
  void set_split_sums(int, int etp) override { experts.set_split_sums(etp); }
  void set_swiglu_input(SwigluInput s, ScaleRounding rounding) override {
    experts.set_swiglu_input(s, rounding);
  }
  void parameters(std::vector<Parameter*>& out) override;
  void layers(std::vector<Linear*>& linears, std::vector<GroupedLinear*>& grouped) override;
  size_t held_bytes() const override;
  size_t activation_bytes() const override;
  const MoELayer* moe() const override { return &experts; }

 private:
  struct View;
  View view(const TokenRows& b, Arena& a);
};

// ---- head -----------------------------------------------------------------------------------

// The final RMSNorm, the LM head (replicated: every rank of the tensor-parallel group runs it
// on its rows) and the softmax cross-entropy.
class LmHead {
 public:
  explicit LmHead(const BlockContext& c);

  Parameter norm;  // gain [D]
  Linear lm_head;  // W [V, D]

  // x: [rows, D] the last layer's output; targets: [rows] (null: keep the logits). Returns
  // this rank's mean cross-entropy over its rows (0 without targets); the logits, turned into
  // probabilities in place when there are targets, stay for backward (logits()).
  double forward(const float* x, const int32_t* targets, const TokenRows& b, Arena& a);
  // dres: [rows, D] written; scale: d objective / d (sum of the rows' cross-entropies).
  void backward(float* dres, const float* x, const int32_t* targets, const TokenRows& b,
                float scale, Arena& a);
  // Inference: logits [rows, V] of x [rows, D] (rows <= b.rows), written straight to
  // `logits`.
  void logits_of(const float* x, int64_t rows, float* logits, const TokenRows& b, Arena& a);
  const float* logits() const { return logits_.data(); }

  void reserve(const TokenRows& b, Arena& a);
  void parameters(std::vector<Parameter*>& out);
  size_t held_bytes() const { return saved_.held_bytes(); }
  size_t activation_bytes() const;

 private:
  float* input(const TokenRows& b, Arena& a);  // where the final norm writes [rows, D]
  int64_t D_ = 0, V_ = 0;
  float eps_ = 0.f;
  LinearSaved saved_;
  FloatBuffer ln_, rstd_, logits_;  // ln_: the norm's output when lm_head keeps no copy
};

}  // namespace mxtrain
