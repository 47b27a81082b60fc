// mxtrain/nn/model_config.h — the shape of the GPT model (nn/transformer.h) and what the
// precision policy and the memory settings see of it before any weight is allocated: the
// config, the quantizable modules, and the activation-recompute modes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxtrain/nn/linear.h"

namespace mxtrain {

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

}  // namespace mxtrain
