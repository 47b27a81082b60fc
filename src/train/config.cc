// train/config.cc — strict YAML parsing of the training configuration (train/config.h).
//
// Each section is read through a Section helper that remembers which keys were consumed;
// anything left over is reported as an unknown key with the list of valid ones. Values are
// converted with yaml-cpp and range-checked here, with the full dotted key in every message.
#include "mxtrain/train/config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "mxtrain/common.h"
#include "mxtrain/recipe.h"

namespace mxtrain {
namespace {

class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::string origin)
      : node_(node), path_(std::move(path)), origin_(std::move(origin)) {
    MXT_CHECK(!node_ || node_.IsNull() || node_.IsMap(), origin_, ": `", path_,
              "` must be a mapping of key: value");
  }

  template <class T>
  void get(const std::string& key, T& out) {
    known_.insert(key);
    if (!node_ || node_.IsNull()) return;
    YAML::Node v = node_[key];
    if (!v) return;
    try {
      out = v.as<T>();
    } catch (const YAML::Exception&) {
      MXT_FAIL(origin_, ": `", full(key), "` has the wrong type (got `", dump(v), "`)");
    }
  }
  YAML::Node child(const std::string& key) {
    known_.insert(key);
    if (!node_ || node_.IsNull()) return YAML::Node();
    return node_[key];
  }
  std::string full(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& origin() const { return origin_; }

  // Every key present in the node must have been asked for.
  void finish() const {
    if (!node_ || node_.IsNull()) return;
    for (const auto& kv : node_) {
      const std::string k = kv.first.as<std::string>();
      if (!known_.count(k)) {
        std::string valid;
        for (const auto& s : known_) valid += (valid.empty() ? "" : ", ") + s;
        MXT_FAIL(origin_, ": unknown key `", full(k), "` (valid keys: ", valid, ")");
      }
    }
  }

 private:
  static std::string dump(const YAML::Node& v) {
    std::stringstream ss;
    ss << v;
    return ss.str();
  }
  YAML::Node node_;
  std::string path_, origin_;
  std::set<std::string> known_;
};

template <class T>
void require(bool ok, const Section& s, const std::string& key, const char* rule, const T& v) {
  MXT_CHECK(ok, s.origin(), ": `", s.full(key), "` ", rule, ", got ", v);
}

void parse_model(Section s, ModelConfig& m) {
  s.get("vocab_size", m.vocab_size);
  s.get("d_model", m.d_model);
  s.get("n_layers", m.n_layers);
  s.get("n_heads", m.n_heads);
  s.get("d_ff", m.d_ff);
  s.get("max_seq_len", m.max_seq_len);
  s.get("rms_eps", m.rms_eps);
  s.get("init_std", m.init_std);
  Section moe(s.child("moe"), s.full("moe"), s.origin());
  moe.get("num_experts", m.moe_num_experts);
  moe.get("top_k", m.moe_top_k);
  moe.get("d_ff", m.moe_d_ff);
  moe.get("every", m.moe_every);
  moe.get("aux_loss_coef", m.aux_loss_coef);
  moe.finish();
  s.finish();
  try {
    m.validate();
  } catch (const Error& e) {
    MXT_FAIL(s.origin(), ": model: ", e.what());
  }
}

void parse_training(Section s, TrainingConfig& t) {
  s.get("steps", t.steps);
  s.get("seq_len", t.seq_len);
  s.get("micro_batch_size", t.micro_batch_size);
  s.get("grad_accum", t.grad_accum);
  s.get("lr", t.lr);
  s.get("min_lr", t.min_lr);
  s.get("warmup_steps", t.warmup_steps);
  s.get("weight_decay", t.weight_decay);
  s.get("beta1", t.beta1);
  s.get("beta2", t.beta2);
  s.get("eps", t.eps);
  s.get("grad_clip", t.grad_clip);
  s.get("seed", t.seed);
  s.get("eval_every", t.eval_every);
  s.get("eval_batches", t.eval_batches);
  s.get("checkpoint_every", t.checkpoint_every);
  s.get("keep_checkpoints", t.keep_checkpoints);
  s.get("max_nonfinite_steps", t.max_nonfinite_steps);
  s.finish();
  require(t.steps >= 1, s, "steps", "must be >= 1", t.steps);
  require(t.seq_len >= 1, s, "seq_len", "must be >= 1", t.seq_len);
  require(t.micro_batch_size >= 1, s, "micro_batch_size", "must be >= 1", t.micro_batch_size);
  require(t.grad_accum >= 1, s, "grad_accum", "must be >= 1", t.grad_accum);
  require(t.lr > 0, s, "lr", "must be > 0", t.lr);
  require(t.min_lr >= 0 && t.min_lr <= t.lr, s, "min_lr", "must be in [0, lr]", t.min_lr);
  require(t.warmup_steps >= 0, s, "warmup_steps", "must be >= 0", t.warmup_steps);
  require(t.weight_decay >= 0, s, "weight_decay", "must be >= 0", t.weight_decay);
  require(t.beta1 >= 0 && t.beta1 < 1, s, "beta1", "must be in [0, 1)", t.beta1);
  require(t.beta2 >= 0 && t.beta2 < 1, s, "beta2", "must be in [0, 1)", t.beta2);
  require(t.eps > 0, s, "eps", "must be > 0", t.eps);
  require(t.grad_clip >= 0, s, "grad_clip", "must be >= 0 (0 disables)", t.grad_clip);
  require(t.eval_every >= 0, s, "eval_every", "must be >= 0", t.eval_every);
  require(t.eval_batches >= 1, s, "eval_batches", "must be >= 1", t.eval_batches);
  require(t.checkpoint_every >= 0, s, "checkpoint_every", "must be >= 0", t.checkpoint_every);
  require(t.keep_checkpoints >= 1, s, "keep_checkpoints", "must be >= 1", t.keep_checkpoints);
  require(t.max_nonfinite_steps >= 0, s, "max_nonfinite_steps", "must be >= 0",
          t.max_nonfinite_steps);
}

void parse_data(Section s, DataConfig& d) {
  s.get("path", d.path);
  s.get("val_fraction", d.val_fraction);
  s.finish();
  require(d.val_fraction > 0 && d.val_fraction < 0.5f, s, "val_fraction", "must be in (0, 0.5)",
          d.val_fraction);
}

void check_recipe(const Section& s, const std::string& key, const std::string& name) {
  try {
    get_recipe(name);
  } catch (const Error& e) {
    MXT_FAIL(s.origin(), ": `", s.full(key), "`: ", e.what());
  }
}

void parse_precision(Section s, PrecisionConfig& p) {
  std::string rounding = rounding_name(p.scale_rounding);
  s.get("recipe", p.recipe);
  s.get("scale_rounding", rounding);
  s.get("defer_backward_quant", p.defer_backward_quant);
  s.get("bf16_first_layers", p.bf16_first_layers);
  s.get("bf16_last_layers", p.bf16_last_layers);
  s.get("lm_head", p.lm_head);
  s.get("selective_fp8", p.selective_fp8);
  s.get("fp8_dynamic_policy_path", p.fp8_dynamic_policy_path);
  YAML::Node ov = s.child("overrides");
  YAML::Node nt = s.child("fp8_dynamic_num_tokens");
  s.finish();
  check_recipe(s, "recipe", p.recipe);
  check_recipe(s, "lm_head", p.lm_head);
  try {
    p.scale_rounding = parse_rounding(rounding.c_str());
  } catch (const Error& e) {
    MXT_FAIL(s.origin(), ": `", s.full("scale_rounding"), "`: ", e.what());
  }
  require(p.bf16_first_layers >= 0, s, "bf16_first_layers", "must be >= 0", p.bf16_first_layers);
  require(p.bf16_last_layers >= 0, s, "bf16_last_layers", "must be >= 0", p.bf16_last_layers);
  if (ov) {
    MXT_CHECK(ov.IsMap(), s.origin(), ": `", s.full("overrides"),
              "` must map module-name globs to recipe names, e.g. `layers.0.*: bf16`");
    for (const auto& kv : ov) {
      auto pat = kv.first.as<std::string>();
      auto rec = kv.second.as<std::string>();
      check_recipe(s, "overrides." + pat, rec);
      p.overrides.emplace_back(pat, rec);
    }
  }
  if (nt) {
    if (nt.IsScalar()) {
      p.fp8_dynamic_num_tokens[""] = nt.as<int64_t>();
    } else {
      MXT_CHECK(nt.IsMap(), s.origin(), ": `", s.full("fp8_dynamic_num_tokens"),
                "` must be a number or a map component -> number");
      for (const auto& kv : nt) p.fp8_dynamic_num_tokens[kv.first.as<std::string>()] = kv.second.as<int64_t>();
    }
    for (const auto& [k, v] : p.fp8_dynamic_num_tokens)
      require(v >= 1, s, "fp8_dynamic_num_tokens", "must be >= 1", v);
  }
  if (p.selective_fp8)
    MXT_CHECK(!p.fp8_dynamic_policy_path.empty(), s.origin(), ": `", s.full("selective_fp8"),
              "` is true but `", s.full("fp8_dynamic_policy_path"), "` is not set");
  MXT_CHECK(!(p.defer_backward_quant && !get_recipe(p.recipe).quantized()), s.origin(), ": `",
            s.full("defer_backward_quant"), "` is only valid with an FP8 recipe (recipe is `",
            p.recipe, "`)");
}

void parse_fsdp(Section s, FsdpConfig& f) {
  s.get("enabled", f.enabled);
  s.get("mxfp8_gather", f.mxfp8_gather);
  s.finish();
  MXT_CHECK(f.mxfp8_gather == "on-demand" || f.mxfp8_gather == "all", s.origin(), ": `",
            s.full("mxfp8_gather"), "` must be `on-demand` or `all`, got `", f.mxfp8_gather, "`");
}

}  // namespace

void TrainConfig::validate() const {
  MXT_CHECK(training.seq_len <= model.max_seq_len, "training.seq_len (", training.seq_len,
            ") exceeds model.max_seq_len (", model.max_seq_len, ")");
  model.validate();
}

TrainConfig parse_config(const std::string& yaml_text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    MXT_FAIL(origin, ": not valid YAML: ", e.what());
  }
  TrainConfig c;
  Section top(root, "", origin);
  parse_model(Section(top.child("model"), "model", origin), c.model);
  parse_training(Section(top.child("training"), "training", origin), c.training);
  parse_data(Section(top.child("data"), "data", origin), c.data);
  parse_precision(Section(top.child("precision"), "precision", origin), c.precision);
  parse_fsdp(Section(top.child("fsdp"), "fsdp", origin), c.fsdp);
  top.finish();
  c.validate();
  c.source_text = config_to_yaml(c);
  return c;
}

TrainConfig load_config(const std::string& path) {
  std::ifstream f(path);
  MXT_CHECK(f.good(), "cannot open config file `", path, "`");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config(ss.str(), path);
}

std::string config_to_yaml(const TrainConfig& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  const auto& m = c.model;
  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap
    << YAML::Key << "vocab_size" << YAML::Value << m.vocab_size
    << YAML::Key << "d_model" << YAML::Value << m.d_model
    << YAML::Key << "n_layers" << YAML::Value << m.n_layers
    << YAML::Key << "n_heads" << YAML::Value << m.n_heads
    << YAML::Key << "d_ff" << YAML::Value << m.d_ff
    << YAML::Key << "max_seq_len" << YAML::Value << m.max_seq_len
    << YAML::Key << "rms_eps" << YAML::Value << m.rms_eps
    << YAML::Key << "init_std" << YAML::Value << m.init_std
    << YAML::Key << "moe" << YAML::Value << YAML::BeginMap
    << YAML::Key << "num_experts" << YAML::Value << m.moe_num_experts
    << YAML::Key << "top_k" << YAML::Value << m.moe_top_k
    << YAML::Key << "d_ff" << YAML::Value << m.moe_d_ff
    << YAML::Key << "every" << YAML::Value << m.moe_every
    << YAML::Key << "aux_loss_coef" << YAML::Value << m.aux_loss_coef << YAML::EndMap
    << YAML::EndMap;
  const auto& t = c.training;
  e << YAML::Key << "training" << YAML::Value << YAML::BeginMap
    << YAML::Key << "steps" << YAML::Value << t.steps
    << YAML::Key << "seq_len" << YAML::Value << t.seq_len
    << YAML::Key << "micro_batch_size" << YAML::Value << t.micro_batch_size
    << YAML::Key << "grad_accum" << YAML::Value << t.grad_accum
    << YAML::Key << "lr" << YAML::Value << t.lr
    << YAML::Key << "min_lr" << YAML::Value << t.min_lr
    << YAML::Key << "warmup_steps" << YAML::Value << t.warmup_steps
    << YAML::Key << "weight_decay" << YAML::Value << t.weight_decay
    << YAML::Key << "beta1" << YAML::Value << t.beta1
    << YAML::Key << "beta2" << YAML::Value << t.beta2
    << YAML::Key << "eps" << YAML::Value << t.eps
    << YAML::Key << "grad_clip" << YAML::Value << t.grad_clip
    << YAML::Key << "seed" << YAML::Value << t.seed
    << YAML::Key << "eval_every" << YAML::Value << t.eval_every
    << YAML::Key << "eval_batches" << YAML::Value << t.eval_batches
    << YAML::Key << "checkpoint_every" << YAML::Value << t.checkpoint_every
    << YAML::Key << "keep_checkpoints" << YAML::Value << t.keep_checkpoints
    << YAML::Key << "max_nonfinite_steps" << YAML::Value << t.max_nonfinite_steps
    << YAML::EndMap;
  e << YAML::Key << "data" << YAML::Value << YAML::BeginMap
    << YAML::Key << "path" << YAML::Value << c.data.path
    << YAML::Key << "val_fraction" << YAML::Value << c.data.val_fraction << YAML::EndMap;
  const auto& p = c.precision;
  e << YAML::Key << "precision" << YAML::Value << YAML::BeginMap
    << YAML::Key << "recipe" << YAML::Value << p.recipe
    << YAML::Key << "scale_rounding" << YAML::Value << rounding_name(p.scale_rounding)
    << YAML::Key << "defer_backward_quant" << YAML::Value << p.defer_backward_quant
    << YAML::Key << "bf16_first_layers" << YAML::Value << p.bf16_first_layers
    << YAML::Key << "bf16_last_layers" << YAML::Value << p.bf16_last_layers
    << YAML::Key << "lm_head" << YAML::Value << p.lm_head
    << YAML::Key << "selective_fp8" << YAML::Value << p.selective_fp8
    << YAML::Key << "fp8_dynamic_policy_path" << YAML::Value << p.fp8_dynamic_policy_path;
  e << YAML::Key << "overrides" << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : p.overrides) e << YAML::Key << k << YAML::Value << v;
  e << YAML::EndMap;
  e << YAML::Key << "fp8_dynamic_num_tokens" << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : p.fp8_dynamic_num_tokens) e << YAML::Key << k << YAML::Value << v;
  e << YAML::EndMap << YAML::EndMap;
  e << YAML::Key << "fsdp" << YAML::Value << YAML::BeginMap
    << YAML::Key << "enabled" << YAML::Value << c.fsdp.enabled
    << YAML::Key << "mxfp8_gather" << YAML::Value << c.fsdp.mxfp8_gather << YAML::EndMap;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

bool glob_match(const std::string& pattern, const std::string& text) {
  // Iterative '*' / '?' matcher with single backtrack point.
  size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace mxtrain
