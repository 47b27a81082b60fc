// nn/flops.cc — PaLM's FLOPs per token for the GPT as built (mxtrain/nn/flops.h).
#include "mxtrain/nn/flops.h"

#include "mxtrain/common.h"

namespace mxtrain {

ModelFlops model_flops(const ModelConfig& cfg, int seq_len) {
  cfg.validate();
  MXT_CHECK(seq_len >= 1 && seq_len <= cfg.max_seq_len, "training.seq_len: ", seq_len,
            " must be in [1, model.max_seq_len = ", cfg.max_seq_len, "]");
  const int64_t d = cfg.d_model, V = cfg.vocab_size;
  int64_t n = 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    n += 2 * d;                  // attention.norm, mlp.norm gains
    n += 3 * d * d + d * d;      // qkv, proj
    if (cfg.is_moe_layer(l)) {
      const int64_t f = cfg.expert_d_ff();
      n += int64_t(cfg.moe_num_experts) * d;       // router
      n += int64_t(cfg.moe_top_k) * 3 * d * f;     // k experts: fc1 [2F', d] + fc2 [d, F']
    } else {
      n += 3 * d * int64_t(cfg.d_ff);              // fc1 [2F, d] + fc2 [d, F]
    }
  }
  n += d + V * d;  // final_norm, lm_head
  ModelFlops f;
  f.n_params = n;
  f.embedding_params = V * d;
  f.param_flops_per_token = 6.0 * double(n);
  f.attention_flops_per_token = 12.0 * cfg.n_layers * double(d) * seq_len;
  f.flops_per_token = f.param_flops_per_token + f.attention_flops_per_token;
  return f;
}

double mfu(double tokens_per_s, double flops_per_token, double peak_gflops) {
  return peak_gflops > 0 ? tokens_per_s * flops_per_token / (peak_gflops * 1e9) : 0.0;
}

}  // namespace mxtrain
