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
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/aligned.h"
#include "mxtrain/nn/fp8_activation.h"
#include "mxtrain/nn/grouped_linear.h"
#include "mxtrain/nn/linear.h"
#include "mxtrain/nn/ops.h"
#include "mxtrain/nn/parallel.h"
#include "mxtrain/nn/parameter.h"

namespace mxtrain {

class MoELayer;         // nn/moe.h
struct MoEActivations;  // nn/moe.h

struct ModelConfig {
  int vocab_size = 256;
  int d_model = 128;
  int n_layers = 4;
  int n_heads = 4;
  int d_ff = 384;            // SwiGLU hidden width of dense layers
  int max_seq_len = 128;
  int moe_num_experts = 0;   // 0 = dense model
  int moe_top_k = 2;
  int moe_d_ff = 0;          // SwiGLU hidden width of each expert; 0 = same as d_ff
  int moe_every = 1;         // layer i is MoE if moe_num_experts > 0 && i % moe_every == moe_every-1
  float aux_loss_coef = 0.01f;
  float rms_eps = 1e-5f;
  // Rotary position embedding base on q and k (nn/ops.h); 0 = no position information at all.
  float rope_theta = 10000.f;
  float init_std = 0.02f;

  // Throws mxtrain::Error naming the bad field (e.g. "model.n_heads: must divide d_model").
  void validate() const;
  bool is_moe_layer(int layer) const {
    return moe_num_experts > 0 && layer % moe_every == moe_every - 1;
  }
  int expert_d_ff() const { return moe_d_ff > 0 ? moe_d_ff : d_ff; }
};

// One quantizable module (a Linear or GroupedLinear) as the precision policy sees it.
struct ModuleInfo {
  std::string module;        // dotted path, e.g. "layers.2.mlp.experts.fc1"
  std::string kind;          // layernorm_column | row | column (experts: base kind)
  std::string name;          // qkv | proj | fc1 | fc2 | lm_head
  int layer = -1;            // transformer layer; -1 for lm_head
  bool is_expert = false;
  int num_experts = 0;       // experts in the GroupedLinear (0 for dense modules)
  int top_k = 1;             // token visits per input token (router top-k; 1 for dense)
  int64_t in = 0, out = 0;   // per expert for experts
};

// Every quantizable module of a model with this config, in parameter order — which is also
// the order their forwards run in (validates cfg).
std::vector<ModuleInfo> describe_modules(const ModelConfig& cfg);

// Decides each module's precision. Called once per module during GPT construction, in
// describe_modules() order. (A resolver that records its decisions should be captured by
// reference, e.g. [&](const ModuleInfo& m) { return r(m); }, since std::function copies.)
using LinearPrecisionFn = std::function<LinearPrecision(const ModuleInfo&)>;

enum class ModuleEvent : uint8_t { forward_done, backward_start, backward_done };

// Activation recompute (config training.recompute): what the forward keeps for backward.
//   none       everything the backward reads (docs/design.md, "Saved for backward");
//   attention  per layer the attention block's input and output (the residual stream) and the
//              MLP's activations; the backward recomputes RMSNorm -> qkv -> RoPE -> attention
//              of each layer from its input just before that layer's attention backward;
//   layer      per layer only its input (the residual stream); the backward recomputes, one
//              layer at a time, the attention block's forward (for the MLP's input), the
//              MLP's, and after the MLP's backward the attention block's again (its output
//              does not fit next to the MLP's backward in the shared buffers).
// The recomputed activations are bit-identical to the forward's, so losses, gradients and
// weights are the same in every mode; what differs is the memory held and the time spent.
enum class Recompute : uint8_t { none, attention, layer };
Recompute parse_recompute(const std::string& name);  // throws naming the valid values
const char* recompute_name(Recompute r);

// Tensor parallelism (ModelParallel::tp, nn/parallel.h; docs/distributed.md, "Parallel
// layouts"): each rank of the group holds n_heads / tp heads (qkv's rows of its q, k and v
// heads; proj's matching input columns) and d_ff / tp of the dense MLP (fc1's rows of its gate
// and up slices; fc2's matching input columns) — Megatron's column- then row-parallel pairs.
// proj's and fc2's partial outputs are summed over the group (all-reduce), and so are qkv's
// and fc1's input gradients. Embedding, norms and the LM head are replicated: every rank of
// the group computes them identically (the vocabulary is small next to the layers, so a
// vocab-parallel head would save little and cost a collective per step). Initial values are
// the slices of the one-process model's (the same seed gives the same whole tensors), and
// Parameter::split says where each slice sits (checkpoints hold whole tensors).
//
// Sequence parallelism (ModelParallel::sequence_parallel, with tp): rank r of the group holds
// rows [r·N/tp, (r+1)·N/tp) of the residual stream of a micro-batch's N tokens, and runs the
// embedding, the norms, the residual adds and the LM head on them alone. Before qkv and fc1
// the norm's output is all-gathered — as the copy the product reads (FP8 codes and scales
// under an FP8 recipe, BF16 under bf16: gather_copies, nn/parallel.h), and again as the wgrad
// copy in the backward (as Megatron re-gathers) — and proj's and fc2's partial outputs are
// reduce-scattered; in the backward the residual gradient is gathered the same way before
// proj and fc2, and qkv's and fc1's input gradients are reduce-scattered. The gathered copies
// are the bytes one process quantizes, so the products are the one-process ones. The norms',
// embedding's and LM head's gradients are then parts (Parameter::split.partial_grad).
class GPT {
 public:
  GPT(const ModelConfig& cfg, const LinearPrecisionFn& resolver, uint64_t seed,
      const ModelParallel& parallel = {});
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
  // is replaced, so run it between steps, not between a forward and its backward).
  float forward_loss(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Inference: logits [B, T, V] of a forward (no loss, no gradients; like forward_loss it
  // replaces the saved state of an earlier forward).
  void forward_logits(const int32_t* tokens, int B, int T, float* logits);

  // Mean cross-entropy of the last forward in double precision (the float return value
  // rounded it).
  double last_loss() const { return last_loss_; }
  // Σ over MoE layers of the load-balancing loss of the last forward (0 for dense models);
  // the objective adds aux_loss_coef times this.
  float last_aux_loss() const { return last_aux_; }
  // Bytes saved between the last forward and its backward, for the whole model: the model's
  // own activation buffers (activation_bytes) plus what every Linear/GroupedLinear keeps (its
  // input copy and backward-only weight copies). Workspaces reused within a pass are not
  // counted.
  size_t last_held_bytes() const { return last_held_; }
  // Bytes of the model's own activation buffers kept for backward (FP32).
  size_t activation_bytes() const;

  // Called after each quantizable module's forward (forward_done), just before its backward
  // (backward_start) and after it (backward_done), in execution order — forward follows
  // quantizable_modules(), backward reverses it (an MoE block reports experts.fc1 then
  // experts.fc2 after its forward; before its backward it reports the start of fc2 then fc1,
  // after it their ends in the same order). FSDP uses it to drop gathered weights, lend and
  // reduce-scatter gradient buffers, and drive communication (train/param_sync_fsdp.cc).
  using ModuleHook = std::function<void(const std::string& module, ModuleEvent e)>;
  void set_module_hook(ModuleHook hook) { hook_ = std::move(hook); }

  // The MoE block of a layer (routing decisions, expert counts); nullptr for dense layers.
  const MoELayer* moe_layer(int layer) const;

  // Stochastic rounding (4-bit recipes): the seed and global micro-batch every layer's keys
  // read; the trainer sets it before each micro-batch (nn/linear.h, RoundingClock).
  RoundingClock& rounding_clock() { return clock_; }

  const ModelParallel& parallel() const { return par_; }
  // True once a sequence-parallel gather had to send FP32 rows (a copy whose blocks span two
  // ranks' rows: colwise blocks longer than a rank's N/tp tokens).
  bool sequence_parallel_fp32_route() const { return sp_fp32_route_; }
  // Bytes and time of the tensor- and expert-parallel collectives since the last reset.
  const ParallelStats& parallel_stats() const { return pstats_; }
  void reset_parallel_stats() { pstats_ = {}; }

  // Numerics reference: when on, every Linear/GroupedLinear product runs in plain FP32 from the
  // FP32 master weights (gemm_f32), ignoring the resolver's recipes and weight providers. The
  // model is then an exactly differentiable FP32 function — used by the whole-model gradient
  // check and to measure how far a recipe's gradients are from FP32 ones.
  void set_fp32_reference(bool on);
  bool fp32_reference() const { return fp32_ref_; }

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
  SwigluInput swiglu_input() const { return swiglu_input_; }

  // Activation recompute (Recompute above; default none). Call before reserve(): buffers the
  // mode does not use are freed. The module events (set_module_hook) fire for the forward and
  // backward passes only, not for the recomputed forwards, so FSDP refuses recompute.
  void set_recompute(Recompute r);
  Recompute recompute() const { return recompute_; }

 private:
  struct Layer;
  struct AttnActs;
  struct MlpActs;
  struct AttnView;
  struct MlpView;
  struct Grads;
  enum class Pass : uint8_t { forward, rebuild, recompute };  // transformer.cc, attention_block
  void event(const std::string& module, ModuleEvent e);
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  void ensure_buffers(int B, int T);
  void ensure_backward_buffers(int B, int T);
  float* linear_input(const Linear& l, FloatBuffer& own, int64_t n, float* scratch);
  float* lin_scratch(int64_t n);
  float* arena(int64_t N, int64_t col);
  float* resid_mid(Layer& L, int64_t N);
  AttnView attn_view(Layer& L, int64_t N);
  MlpView mlp_view(Layer& L, int64_t N);
  Grads grads(int64_t N);
  void attention_block(Layer& L, const AttnView& v, const float* x, int B, int T, Pass p);
  double mlp_block(Layer& L, const MlpView& v, int64_t N, float* out, bool recompute);
  bool fc1_out_fp8(const Layer& L) const;  // this dense layer keeps SwiGLU's input in FP8
  // x [n] summed over the tensor-parallel group (a row-parallel output, a column-parallel
  // input gradient); nothing with one rank.
  void tp_allreduce(float* x, int64_t n);
  // Rows of a micro-batch's N tokens this rank's residual stream holds (N / tp under
  // sequence parallelism, else N).
  int64_t local_rows(int64_t N) const { return sp_ ? N / par_.tp_size() : N; }
  // Sequence parallelism (see above): a column-parallel Linear's forward and backward from
  // the norm's output shard [Ns, in]; a row-parallel Linear's backward from the residual
  // gradient's shard [Ns, out] (x_ref: its FP32 input, for the FP32 reference); the group's
  // sum of a full [N, D] partial, scattered: rank r keeps rows [r·Ns, (r+1)·Ns) in `shard`.
  // `kept`: the gathered forward copy kept for the backward (SequenceWire::rowwise).
  void sp_forward_in(Linear& l, const float* shard, int64_t Ns, float* y, LinearSaved& s,
                     QTensor& kept);
  void sp_backward_in(Linear& l, LinearSaved& s, const float* shard, int64_t Ns,
                      const float* dy, float* dx, QTensor& kept);
  void sp_backward_out(Linear& l, LinearSaved& s, const float* x_ref, const float* dy_shard,
                       int64_t Ns, float* dx);
  void sp_reduce_scatter(const float* full, float* shard, int64_t shard_n);
  void count_gather(uint64_t bytes, std::chrono::steady_clock::time_point t0);
  void count_gather(const GatherCost& c);  // also notes an FP32 route
  std::vector<Parameter*> collect_parameters();

  ModelConfig cfg_;
  ModelParallel par_;
  // Per rank under tensor parallelism: attention width d_model / tp, heads n_heads / tp, the
  // dense MLP's hidden width d_ff / tp (the whole ones with one rank).
  int64_t Dl_ = 0, Hl_ = 0, Fl_ = 0;
  bool sp_ = false;  // sequence parallel
  ParallelStats pstats_;
  // Sequence parallelism's gathered operands (reused) and shard-sized scratch.
  QTensor sp_x_, sp_dy_;
  FloatBuffer sp_f32_, branch_s_, dln_s_;
  bool sp_fp32_route_ = false;
  Parameter embed_, final_norm_;
  std::vector<std::unique_ptr<Layer>> layers_;
  Linear lm_head_;
  LinearSaved lm_saved_;
  // Activations: resid_[l] is the input of layer l (resid_[L] the final one).
  std::vector<FloatBuffer> resid_;
  FloatBuffer lnf_, rstdf_, logits_;
  FloatBuffer branch_;  // forward scratch: a branch output before the residual add
  FloatBuffer lin_in_;  // forward scratch: a Linear's input when it keeps its own copy
  // Backward scratch shared by all layers.
  // dfc1_ is also the fc1 output's forward scratch when the SwiGLU input is kept in FP8.
  FloatBuffer dres_, dln_, dbranch_, dqkv_, dfc1_, dh_;
  // Activation recompute: the blocks' sets shared by all layers, and one arena holding the
  // forward's scratch, the recomputed tensors and the backward's scratch gradients (except
  // dres_), which then replaces the buffers above.
  Recompute recompute_ = Recompute::none;
  std::unique_ptr<AttnActs> shared_attn_;
  std::unique_ptr<MlpActs> shared_mlp_;
  std::unique_ptr<MoEActivations> shared_moe_;
  FloatBuffer arena_;
  FloatBuffer shared_resid_mid_;  // the layers' resid_mid under the whole-layer recompute
  std::map<std::string, Linear*> linears_;
  RoundingClock clock_;  // every layer's stochastic-rounding clock (rounding_clock())
  std::map<std::string, GroupedLinear*> grouped_;
  std::vector<Parameter*> params_;  // parameters() order, fixed at construction
  RopeTable rope_;                  // empty when cfg_.rope_theta == 0
  float last_aux_ = 0.f;
  double last_loss_ = 0.0;
  size_t last_held_ = 0;
  bool fp32_ref_ = false;
  int split_tp_ = 1;  // set_split_sums
  SwigluInput swiglu_input_ = SwigluInput::fp32;
  ScaleRounding swiglu_rounding_ = ScaleRounding::rceil;
  ModuleHook hook_;
};

}  // namespace mxtrain
