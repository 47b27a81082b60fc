// nn/model_config.cc — ModelConfig checks and the static module description
// (nn/model_config.h): what the precision policy sees before any weight is allocated.
#include <cmath>

#include "mxtrain/common.h"
#include "mxtrain/nn/model_config.h"

namespace mxtrain {

// ---- config ---------------------------------------------------------------------------------

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::none;
  if (name == "attention") return Recompute::attention;
  if (name == "layer") return Recompute::layer;
  MXT_FAIL("unknown recompute mode `", name, "` (valid: none, attention, layer)");
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::attention: return "attention";
    case Recompute::layer: return "layer";
  }
  return "?";
}

void ModelConfig::validate() const {
  auto need = [](bool ok, const char* field, const char* what, double got) {
    MXT_CHECK(ok, "model.", field, ": ", what, ", got ", got);
  };
  need(vocab_size >= 1, "vocab_size", "must be >= 1", vocab_size);
  need(d_model >= 1, "d_model", "must be >= 1", d_model);
  need(n_layers >= 1, "n_layers", "must be >= 1", n_layers);
  need(n_heads >= 1, "n_heads", "must be >= 1", n_heads);
  need(d_model % n_heads == 0, "n_heads", "must divide d_model evenly", n_heads);
  need(d_ff >= 1, "d_ff", "must be >= 1", d_ff);
  need(max_seq_len >= 1, "max_seq_len", "must be >= 1", max_seq_len);
  need(moe_num_experts >= 0, "moe_num_experts", "must be >= 0 (0 = dense)", moe_num_experts);
  if (moe_num_experts > 0) {
    need(moe_top_k >= 1 && moe_top_k <= moe_num_experts, "moe_top_k",
         "must be between 1 and moe_num_experts", moe_top_k);
    need(moe_d_ff >= 0, "moe_d_ff", "must be >= 0 (0 = same as d_ff)", moe_d_ff);
    need(moe_every >= 1, "moe_every", "must be >= 1", moe_every);
  }
  need(std::isfinite(aux_loss_coef) && aux_loss_coef >= 0.f, "aux_loss_coef",
       "must be finite and >= 0", aux_loss_coef);
  need(std::isfinite(rms_eps) && rms_eps > 0.f, "rms_eps", "must be > 0", rms_eps);
  need(std::isfinite(init_std) && init_std > 0.f, "init_std", "must be > 0", init_std);
  need(std::isfinite(rope_theta) && (rope_theta == 0.f || rope_theta > 1.f), "rope_theta",
       "must be 0 (no rotary embedding) or > 1", rope_theta);
  need(rope_theta == 0.f || (d_model / n_heads) % 2 == 0, "n_heads",
       "must leave an even head dimension (d_model / n_heads) for rotary embeddings", n_heads);
}

std::vector<ModuleInfo> describe_modules(const ModelConfig& cfg) {
  cfg.validate();
  const int64_t D = cfg.d_model;
  std::vector<ModuleInfo> out;
  auto add = [&](std::string module, const char* kind, const char* name, int layer,
                 bool expert, int64_t in, int64_t o) {
    ModuleInfo m;
    m.module = std::move(module);
    m.kind = kind;
    m.name = name;
    m.layer = layer;
    m.is_expert = expert;
    m.num_experts = expert ? cfg.moe_num_experts : 0;
    m.top_k = expert ? cfg.moe_top_k : 1;
    m.in = in;
    m.out = o;
    out.push_back(std::move(m));
  };
  for (int i = 0; i < cfg.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i);
    add(p + ".attention.qkv", "layernorm_column", "qkv", i, false, D, 3 * D);
    add(p + ".attention.proj", "row", "proj", i, false, D, D);
    if (cfg.is_moe_layer(i)) {
      const int64_t F = cfg.expert_d_ff();
      add(p + ".mlp.experts.fc1", "layernorm_column", "fc1", i, true, D, 2 * F);
      add(p + ".mlp.experts.fc2", "row", "fc2", i, true, F, D);
    } else {
      add(p + ".mlp.fc1", "layernorm_column", "fc1", i, false, D, 2 * int64_t(cfg.d_ff));
      add(p + ".mlp.fc2", "row", "fc2", i, false, cfg.d_ff, D);
    }
  }
  add("lm_head", "column", "lm_head", -1, false, D, cfg.vocab_size);
  return out;
}

}  // namespace mxtrain
