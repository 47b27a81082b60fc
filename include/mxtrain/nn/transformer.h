// mxtrain/nn/transformer.h — the GPT-style model the trainer runs.
//
// Pre-norm decoder: token embedding -> n_layers × [x += proj(attn(rope(qkv(rmsnorm(x)))));
// x += mlp(rmsnorm(x))] -> final RMSNorm -> lm_head -> softmax cross-entropy. The MLP is a
// SwiGLU (fc1 -> silu(gate)·up -> fc2) or, on MoE layers, a top-k mixture of SwiGLU experts
// (nn/moe.h). No biases; RMSNorm has a learnable gain. Separate (untied) embedding and lm_head.
// Positions enter only through rotary embeddings of q and k (model.rope_theta; 0 turns them off).
//
// Precision is decided outside the model: the constructor asks a resolver for the
// LinearPrecision of every quantizable module (describe_modules() lists them, with the facts
// a policy needs, without allocating anything). The router and the non-GEMM layers are FP32.
//
// Module names (stable dotted paths; parameters are <module>.weight / .gain):
//   embed                              [V, D]
//   layers.{i}.attention.norm          gain [D]
//   layers.{i}.attention.qkv           layernorm_column / qkv   W [3D, D]
//   layers.{i}.attention.proj          row / proj               W [D, D]
//   layers.{i}.mlp.norm                gain [D]
//   dense:  layers.{i}.mlp.fc1         layernorm_column / fc1   W [2F, D]
//           layers.{i}.mlp.fc2         row / fc2                W [D, F]
//   MoE:    layers.{i}.mlp.router      FP32, W [E, D]
//           layers.{i}.mlp.experts.fc1 layernorm_column / fc1, is_expert   W [E, 2F', D]
//           layers.{i}.mlp.experts.fc2 row / fc2, is_expert                W [E, D, F']
//   final_norm                         gain [D]
//   lm_head                            column / lm_head         W [V, D]
//
// Training objective per micro-batch: mean cross-entropy + aux_loss_coef · Σ_MoE-layers aux.
//
// The model is the embedding, a stack of blocks (nn/blocks.h: an AttentionBlock and an
// MlpBlock or MoeBlock per layer), the LM head, the arena their activations live in
// (nn/arena.h) and the parameter list; each block owns its layers, activations, forward,
// backward and recompute, and its Linears their parallel role's collectives. One forward
// serves training and inference: generation (nn/generate.h) runs the same blocks in the FP32
// reference mode, with the KV cache in the attention blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/nn/arena.h"
#include "mxtrain/nn/blocks.h"
#include "mxtrain/nn/fp8_activation.h"
#include "mxtrain/nn/grouped_linear.h"
#include "mxtrain/nn/linear.h"
#include "mxtrain/nn/model_config.h"
#include "mxtrain/nn/ops.h"
#include "mxtrain/nn/parallel.h"
#include "mxtrain/nn/parameter.h"

namespace mxtrain {

class MoELayer;  // nn/moe.h

// Tensor parallelism (ModelParallel::tp, nn/parallel.h; docs/distributed.md, "Parallel
// layouts"): each rank of the group holds n_heads / tp heads (qkv's rows of its q, k and v
// heads; proj's matching input columns) and d_ff / tp of the dense MLP (fc1's rows of its gate
// and up slices; fc2's matching input columns) — Megatron's column- then row-parallel pairs,
// each Linear doing its role's collectives (nn/linear.h). Embedding, norms and the LM head are
// replicated: every rank of the group computes them identically (the vocabulary is small next
// to the layers, so a vocab-parallel head would save little and cost a collective per step).
// Initial values are the slices of the one-process model's (the same seed gives the same
// whole tensors), and Parameter::split says where each slice sits (checkpoints hold whole
// tensors).
//
// Sequence parallelism (ModelParallel::sequence_parallel, with tp): rank r of the group holds
// rows [r·N/tp, (r+1)·N/tp) of the residual stream of a micro-batch's N tokens
// (SequenceShard), and runs the embedding, the norms, the residual adds and the LM head on
// them alone; the column-parallel Linears gather their input's copies and the row-parallel
// ones reduce-scatter their output (nn/parallel.h, LinearParallel). The norms', embedding's
// and LM head's gradients are then parts (Parameter::split.partial_grad).
class GPT {
 public:
  GPT(const ModelConfig& cfg, const LinearPrecisionFn& resolver, uint64_t seed,
      const ModelParallel& parallel = {});
  // An inference model (InferenceModel, nn/generate.h): one process, weights zero (gains one)
  // until loaded, every product in FP32 from them (set_fp32_reference), activations shared by
  // every block and the residual stream updated in place — nothing is kept for a backward, and
  // no gradient is allocated. forward_cached() runs it.
  explicit GPT(const ModelConfig& cfg);
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  const ModelConfig& config() const { return cfg_; }
  // All trainable parameters in a fixed order (embed, layer 0 .. n-1, final_norm, lm_head).
  const std::vector<Parameter*>& parameters() { return params_; }
  int64_t num_parameters() const;
  void zero_grad();   // fills every gradient with zeros
  void clear_grad();  // starts a new accumulation without touching memory (nn/parameter.h)
  // Sizes every activation buffer, backward scratch buffer and parameter gradient for
  // micro-batches of B sequences of length T, so the steps that follow allocate none of them
  // (the trainer calls it once, when the model is built). Buffers are never shrunk; a larger
  // B·T later grows them.
  void reserve(int B, int T);

  std::vector<ModuleInfo> quantizable_modules() const { return describe_modules(cfg_); }
  // The layer object of a quantizable module by its dotted name; nullptr when the name is not
  // a Linear (resp. GroupedLinear) of this model.
  Linear* linear(const std::string& module);
  GroupedLinear* grouped_linear(const std::string& module);

  // tokens, targets: [B, T] ids in [0, vocab_size); T <= max_seq_len. Runs forward and
  // backward for one micro-batch and ACCUMULATES parameter gradients (writes them after
  // clear_grad()) of
  // grad_scale · (mean CE + aux_loss_coef · Σ aux) (the trainer passes 1 and scales the
  // accumulated sum by 1/grad_accum once, with the clip: the same rounding at any split).
  // Returns the mean cross-entropy (without the aux term).
  float forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T,
                         float grad_scale);
  // Evaluation: mean cross-entropy, no gradients touched (the saved state of an earlier forward
  // is replaced, so run it between steps, not between a forward and its backward). It runs in
  // a ForwardOnlyScope (nn/linear.h), as forward_logits and forward_cached do: the layers make
  // only what the forward reads, not the copies a backward would.
  float forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Inference: logits [B, T, V] of a forward (no loss, no gradients; like forward_loss it
  // replaces the saved state of an earlier forward).
  void forward_logits(const int32_t* tokens, int B, int T, float* logits);
  // Inference over the attention blocks' KV caches (an inference model): tokens [n] at
  // positions pos..pos+n-1 (pos + n <= max_seq_len; positions 0..pos-1 cached by earlier
  // calls) are added to the caches and logits written: [n, V] when every_position, else [V]
  // of the last token.
  void forward_cached(const int32_t* tokens, int n, int pos, float* logits,
                      bool every_position);

  // Mean cross-entropy of the last forward in double precision (the float return value
  // rounded it).
  double last_loss() const { return last_.loss; }
  // Σ over MoE layers of the load-balancing loss of the last forward (0 for dense models);
  // the objective adds aux_loss_coef times this.
  float last_aux_loss() const { return last_.aux; }
  // Bytes saved between the last forward and its backward, for the whole model: the model's
  // own activation buffers (activation_bytes) plus what every Linear/GroupedLinear keeps (its
  // input copy and backward-only weight copies). Workspaces reused within a pass are not
  // counted.
  size_t last_held_bytes() const { return last_.held; }
  // Bytes of the model's own activation buffers kept for backward (FP32).
  size_t activation_bytes() const;

  // Called after each quantizable module's forward (forward_done), just before its backward
  // (backward_start) and after it (backward_done), in execution order — forward follows
  // quantizable_modules(), backward reverses it (an MoE block reports experts.fc1 then
  // experts.fc2 after its forward; before its backward it reports the start of fc2 then fc1,
  // after it their ends in the same order). Installs a hook on every Linear and GroupedLinear
  // (nn/linear.h, LayerHook) that calls this one with its name; an empty hook removes them.
  // FSDP hooks the layers itself to drop gathered weights, lend and reduce-scatter gradient
  // buffers, and drive communication (train/param_sync_fsdp.cc).
  using ModuleHook = std::function<void(const std::string& module, ModuleEvent e)>;
  void set_module_hook(ModuleHook hook);

  // The MoE block of a layer (routing decisions, expert counts); nullptr for dense layers.
  const MoELayer* moe_layer(int layer) const;

  // Stochastic rounding (4-bit recipes): the seed and global micro-batch every layer's keys
  // read; the trainer sets it before each micro-batch (nn/linear.h, RoundingClock).
  RoundingClock& rounding_clock() { return clock_; }

  const ModelParallel& parallel() const { return par_; }
  // True once a sequence-parallel gather had to send FP32 rows since the last reset (a copy
  // whose blocks span two ranks' rows: colwise blocks longer than a rank's N/tp tokens).
  bool sequence_parallel_fp32_route() const { return pstats_.sp_fp32_route; }
  // Bytes and time of the tensor- and expert-parallel collectives since the last reset.
  const ParallelStats& parallel_stats() const { return pstats_; }
  void reset_parallel_stats() { pstats_ = {}; }

  // Numerics reference: when on, every Linear/GroupedLinear product runs in plain FP32 from the
  // FP32 master weights (gemm_f32), ignoring the resolver's recipes and weight providers, and
  // attention in FP32. The model is then an exactly differentiable FP32 function — used by the
  // whole-model gradient check, to measure how far a recipe's gradients are from FP32 ones, and
  // by generation.
  void set_fp32_reference(bool on);
  bool fp32_reference() const { return head_->lm_head.fp32_reference(); }

  // For parity tests (tests/mpi/parity_grad_mpi.cc), one process only: compute each
  // row-parallel sum — proj's and fc2's forward and qkv's and fc1's input gradients (tp), the
  // experts' fc2 forward and fc1 input gradients (etp) — as that many ranks would
  // (SplitSumsScope, gemm.h), so that the model computes what the layout computes. 1 and 1:
  // one process's own sums (the default).
  void set_split_sums(int tp, int etp);

  // What SwiGLU's input (the fc1 output, dense and expert layers) is kept in for backward:
  // FP32 (the model's default), MX E4M3 with 1x32 scales of the given rounding
  // (nn/fp8_activation.h), or follow_fc1: E4M3 in the layers whose fc1 quantizes its input
  // (the trainer's default, precision.swiglu_input: auto). The forward is the same either way;
  // with FP8 the SwiGLU backward reads the dequantized values. The FP32 reference mode always
  // keeps FP32.
  void set_swiglu_input(SwigluInput s, ScaleRounding rounding = ScaleRounding::rceil);
  SwigluInput swiglu_input() const { return swiglu_; }

  // Activation recompute (Recompute, nn/model_config.h; default none). Call before reserve():
  // buffers the mode does not use are freed. The module events (set_module_hook) fire for the
  // forward and backward passes only, not for the recomputed forwards, so FSDP refuses
  // recompute.
  void set_recompute(Recompute r);
  Recompute recompute() const { return arena_.recompute(); }

 private:
  struct Layer {
    AttentionBlock attention;
    std::unique_ptr<FeedForward> mlp;
  };
  // The last forward's results.
  struct Last {
    double loss = 0.0;
    float aux = 0.f;
    size_t held = 0;
  };
  GPT(const ModelConfig& cfg, const LinearPrecisionFn& resolver, uint64_t seed,
      const ModelParallel& parallel, bool random_init);
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // The embedding and every block over this pass's rows; adds the MoE losses to aux and the
  // layers' saved bytes to held.
  void run_blocks(const int32_t* tokens, const TokenRows& b, double& aux, size_t& held);
  void share_activations();  // the blocks' activation sets: their own or the arena's
  TokenRows rows_of(int B, int T) const;  // checks B and T
  void layers(std::vector<Linear*>& linears, std::vector<GroupedLinear*>& grouped);

  ModelConfig cfg_;
  ModelParallel par_;
  SequenceShard shard_;   // the residual stream's rows on this rank
  ParallelStats pstats_;  // every layer's collectives
  RoundingClock clock_;   // every layer's stochastic-rounding clock (rounding_clock())
  RopeTable rope_;        // empty when cfg_.rope_theta == 0
  Parameter embed_;       // [V, D]
  std::vector<Layer> layers_;
  std::unique_ptr<LmHead> head_;
  Arena arena_;
  std::vector<Parameter*> params_;  // parameters() order, fixed at construction
  SwigluInput swiglu_ = SwigluInput::fp32;
  Last last_;
};

}  // namespace mxtrain
