// mxtrain/nn/flops.h — the FLOPs a training step of the GPT (nn/transformer.h) is credited
// with, for model FLOPs utilization (MFU), by PaLM's formula.
//
// Per token trained, forward + backward: 6·N + 12·L·d·T, where
//   N  = the parameters a token's computation multiplies by, for the model as built: per layer
//        the two RMSNorm gains, qkv [3d, d] and proj [d, d], then either the dense SwiGLU's
//        fc1 [2F, d] and fc2 [d, F] (three d x F matrices) or, on an MoE layer, the router
//        [E, d] and top_k experts' fc1 and fc2 (the active parameters: a token visits k of
//        the E experts); the final norm's gain and lm_head [V, d]. The input embedding table
//        [V, d] is not in N: it is a lookup, no product. PaLM ties its input and output
//        embeddings and counts that one table once — as the output product — which is what
//        counting lm_head and not the lookup table does for this untied model.
//   12·L·d·T = attention's two products (q·kᵀ and p·v) over the whole T x T score matrix: 2 x
//        2·d·T FLOPs per token and layer forward, times 3 with the backward. The causal mask
//        would halve it; PaLM counts it in full, and so does this.
// T is the training sequence length (training.seq_len), not max_seq_len. MFU is then
// tokens/s x flops_per_token / peak FLOP/s (the peak from mxtrain/peak.h).
#pragma once

#include <cstdint>

#include "mxtrain/nn/transformer.h"

namespace mxtrain {

struct ModelFlops {
  int64_t n_params = 0;              // N above
  int64_t embedding_params = 0;      // the lookup table V·d, left out of N
  double param_flops_per_token = 0;  // 6·N
  double attention_flops_per_token = 0;  // 12·L·d·T
  double flops_per_token = 0;        // the sum
};

// Validates cfg (ModelConfig::validate) and seq_len (1 .. max_seq_len).
ModelFlops model_flops(const ModelConfig& cfg, int seq_len);

// Model FLOPs utilization as a fraction (0.66 = 66%): tokens_per_s · flops_per_token against
// a peak of peak_gflops GFLOP/s; 0 when the peak is not positive.
double mfu(double tokens_per_s, double flops_per_token, double peak_gflops);

}  // namespace mxtrain
