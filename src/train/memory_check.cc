// train/memory_check.cc — memory estimate of a training config and the machine's limit
// (see mxtrain/train/memory_check.h).
#include "mxtrain/train/memory_check.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "mxtrain/common.h"
#include "mxtrain/nn/fp8_activation.h"
#include "mxtrain/nn/linear.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/recipe.h"

namespace mxtrain {

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) b /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string MemoryEstimate::describe() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3g parameters", parameters);
  return std::string(buf) + ": weights+grads " + format_bytes(param_grad_bytes) + ", AdamW " +
         format_bytes(optimizer_bytes) + ", FP8 copies " + format_bytes(quantized_bytes) +
         ", activations " + format_bytes(activation_bytes) + ", workspaces " +
         format_bytes(workspace_bytes);
}

MemoryEstimate estimate_training_memory(const TrainConfig& cfg) {
  const ModelConfig& m = cfg.model;
  const double D = m.d_model, V = m.vocab_size, F = m.d_ff, H = m.n_heads;
  const double E = m.moe_num_experts, Fe = m.expert_d_ff(), K = m.moe_top_k;
  const double B = cfg.training.micro_batch_size, T = cfg.training.seq_len;
  double n_moe = 0;
  if (m.moe_num_experts > 0 && m.moe_every > 0) n_moe = double(m.n_layers / m.moe_every);
  const double n_dense = double(m.n_layers) - n_moe;

  // Parameters: attention (qkv 3D*D, proj D*D, two norm gains) in every layer; SwiGLU MLP
  // (fc1 2F*D, fc2 F*D) or E experts of width Fe plus the router; embedding, LM head, norm.
  const double attn = 4 * D * D + 2 * D;
  const double dense_mlp = 3 * F * D, moe_mlp = E * 3 * Fe * D + D * E;
  MemoryEstimate e;
  e.parameters = 2 * V * D + D + double(m.n_layers) * attn + n_dense * dense_mlp + n_moe * moe_mlp;
  e.param_grad_bytes = 8 * e.parameters;
  e.optimizer_bytes = 8 * e.parameters;
  // FP8 recipes keep one byte per weight element (the transposed copy is made per use).
  LinearPrecision prec;  // the recipe's, as every Linear would get it (overrides not counted)
  prec.recipe = cfg.precision.recipe;
  prec.defer_backward_quant = cfg.precision.defer_backward_quant;
  if (prec.recipe.quantized()) e.quantized_bytes = e.parameters;

  // Activations kept for backward, FP32, per token and layer: normed inputs (2D), QKV (3D),
  // attention output and residual (2D), the attention row log-sum-exp (H), SwiGLU fc1 output
  // and product (3F; experts: top_k visits of 3*Fe). With the SwiGLU input in FP8 (fp8, or auto
  // under an FP8 recipe without deferred quantization) the fc1 output (2F) takes 1 + 1/32 bytes
  // per element instead of 4; in 4 bits (fp4 under a 4-bit recipe) 1/2 + 1/16 (NVFP4) or
  // 1/2 + 1/32 (MXFP4).
  const double tokens = B * T;
  const SwigluStorage fc1_kept = swiglu_storage(cfg.precision.swiglu_input, prec);
  const double fp4_bytes = 0.5 + 1.0 / double(fp4_block(fc1_kept.format.kind));
  const double fc1_out = fc1_kept.kind == SwigluStorage::fp8   ? (1 + 1 / 32.0) / 4
                         : fc1_kept.kind == SwigluStorage::fp4 ? fp4_bytes / 4
                                                               : 1;
  const double dense_tok = 7 * D + H + F + 2 * F * fc1_out;
  const double moe_tok = 7 * D + H + K * (Fe + 2 * Fe * fc1_out) + E;
  // Under activation recompute (training.recompute) each layer keeps its input (D), and with
  // `attention` also its MLP's input and activations; the recomputed part exists for one layer
  // at a time.
  const double attn_tok = 5 * D + H;  // normed input, QKV, attention output, lse
  double per_token = n_dense * dense_tok + n_moe * moe_tok;
  const Recompute rc = parse_recompute(cfg.training.recompute);
  if (rc == Recompute::attention)
    per_token = double(m.n_layers) * 2 * D + (n_dense * (dense_tok - attn_tok - 2 * D) +
                                              n_moe * (moe_tok - attn_tok - 2 * D)) + attn_tok;
  else if (rc == Recompute::layer)
    per_token = double(m.n_layers) * D + std::max(n_dense > 0 ? dense_tok : 0.0,
                                                  n_moe > 0 ? moe_tok : 0.0);
  e.activation_bytes = 4 * tokens * per_token + 8 * tokens * V;
  // Workspaces: the widest layer's output and input gradient, FP32.
  const double widest = std::max({3 * D, 2 * F, n_moe > 0 ? K * 2 * Fe : 0.0, V});
  e.workspace_bytes = 8 * tokens * widest;
  return e;
}

MemoryLimit machine_memory_limit(const std::string& cgroup_file) {
  MemoryLimit lim;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  lim.bytes = pages > 0 && page > 0 ? double(pages) * double(page) : 0;
  lim.source = "physical memory";
  std::ifstream f(cgroup_file);
  std::string word;
  if (f && (f >> word) && word != "max") {
    char* end = nullptr;
    const double v = std::strtod(word.c_str(), &end);
    if (end && *end == 0 && v > 0 && (lim.bytes == 0 || v < lim.bytes)) {
      lim.bytes = v;
      lim.source = "cgroup limit " + cgroup_file;
    }
  }
  return lim;
}

void check_training_memory(const TrainConfig& cfg, const MemoryLimit& limit) {
  if (limit.bytes <= 0) return;  // unknown: nothing to compare with
  const MemoryEstimate e = estimate_training_memory(cfg);
  MXT_CHECK(e.total() <= limit.bytes, "model does not fit in memory: it needs at least ",
            format_bytes(e.total()), " (", e.describe(), ") but the limit is ",
            format_bytes(limit.bytes), " (", limit.source,
            "); shrink the model or the micro-batch, or pass --ignore-memory-check");
}

}  // namespace mxtrain
