// train/config.cc — strict YAML parsing of the training configuration (train/config.h).
//
// Each section is read through a Section helper that remembers which keys were consumed;
// anything left over is reported as an unknown key with the list of valid ones. Values are
// converted with yaml-cpp and range-checked here, with the full dotted key in every message.
#include "mxtrain/train/config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <type_traits>
#include <sstream>

#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/nn/fp8_activation.h"
#include "mxtrain/recipe.h"

namespace mxtrain {
namespace {

// Full dotted key -> the flag that set it (ConfigOverride), for the messages.
using OverrideFlags = std::map<std::string, std::string>;

// ---- values: YAML scalars, and the typed ones YAML spells as a name (parsed once, here) ----

template <class T>
void decode(const YAML::Node& v, T& out) {
  out = v.as<T>();
}
void decode(const YAML::Node& v, Recipe& out) { out = get_recipe(v.as<std::string>()); }
void decode(const YAML::Node& v, SwigluInput& out) {
  out = parse_swiglu_input(v.as<std::string>());
}
void decode(const YAML::Node& v, ScaleRounding& out) {
  out = parse_rounding(v.as<std::string>().c_str());
}
void decode(const YAML::Node& v, AmaxAlgo& out) { out = parse_amax_algo(v.as<std::string>()); }
void decode(const YAML::Node& v, SequenceWire& out) {
  out = parse_sequence_wire(v.as<std::string>());
}
void decode(const YAML::Node& v, AmaxEpsilon& out) {
  if (v.IsScalar() && v.Scalar() == "auto") {
    out.value.reset();
    return;
  }
  const float e = v.as<float>();
  MXT_CHECK(std::isfinite(e) && e >= 0.f, "must be a finite number >= 0 or `auto`, got `",
            v.Scalar(), "`");
  out.value = e;
}

void decode(const YAML::Node& v, Fp4Switch& out) {
  if (v.IsScalar() && v.Scalar() == "recipe") {
    out.value.reset();
    return;
  }
  bool b;
  MXT_CHECK(YAML::convert<bool>::decode(v, b), "must be true, false or `recipe`, got `",
            v.IsScalar() ? v.Scalar() : std::string("(not a scalar)"), "`");
  out.value = b;
}
void decode(const YAML::Node& v, Nvfp4OrderSetting& out) {
  const std::string t = v.as<std::string>();
  if (t == "recipe") {
    out.value.reset();
    return;
  }
  out.value = parse_nvfp4_order(t);
}

// The text a value is written as (config_to_yaml, config_changes).
template <class T>
const T& text(const T& v) {
  return v;
}
const std::string& text(const Recipe& r) { return r.name; }
const char* text(SwigluInput s) { return swiglu_input_name(s); }
const char* text(ScaleRounding r) { return rounding_name(r); }
const char* text(AmaxAlgo a) { return amax_algo_name(a); }
const char* text(SequenceWire w) { return sequence_wire_name(w); }
const char* text(const Fp4Switch& s) { return !s.value ? "recipe" : *s.value ? "true" : "false"; }
const char* text(const Nvfp4OrderSetting& s) {
  return s.value ? nvfp4_order_name(*s.value) : "recipe";
}
std::string text(const AmaxEpsilon& e) {
  if (!e.value) return "auto";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", double(*e.value));
  return buf;
}

class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::string origin,
          const OverrideFlags* flags = nullptr)
      : node_(node), path_(std::move(path)), origin_(std::move(origin)), flags_(flags) {
    MXT_CHECK(!node_ || node_.IsNull() || node_.IsMap(), origin_, ": `", path_,
              "` must be a mapping of key: value");
  }

  template <class T>
  void get(const std::string& key, T& out) {
    known_.insert(key);
    if (!node_ || node_.IsNull()) return;
    YAML::Node v = node_[key];
    if (!v) return;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // Decimal digits with an optional leading minus, as on the command line
      // (cli/values.h): YAML 1.1's octal (`010` is 8) and hex (`0x3`) forms are refused, and
      // `010` means ten. Scalars without digits fall through to the type error below.
      const std::string t = v.IsScalar() ? v.Scalar() : std::string();
      if (t.find_first_of("0123456789") != std::string::npos) {
        const size_t first = t[0] == '-';
        MXT_CHECK(t.size() > first && t.find_first_not_of("0123456789", first) == std::string::npos,
                  origin_of(key), ": `", full(key), "` must be a whole number in decimal digits "
                  "(as on the command line), got `", dump(v), "`");
        const auto r = std::from_chars(t.data(), t.data() + t.size(), out);
        MXT_CHECK(r.ec == std::errc() && r.ptr == t.data() + t.size(), origin_of(key), ": `",
                  full(key), "` must be between ", +std::numeric_limits<T>::min(), " and ",
                  +std::numeric_limits<T>::max(), ", got ", dump(v));
        return;
      }
    }
    try {
      decode(v, out);
    } catch (const Error& e) {  // a name that is not one of the valid ones
      MXT_FAIL(origin_of(key), ": `", full(key), "`: ", e.what());
    } catch (const YAML::Exception&) {
      MXT_FAIL(origin_of(key), ": `", full(key), "` has the wrong type (got `", dump(v), "`)");
    }
    if constexpr (std::is_floating_point_v<T>)
      MXT_CHECK(std::isfinite(out), origin_of(key), ": `", full(key),
                "` must be a finite number, got `", dump(v), "`");
  }
  // The value under `key`; an undefined node (false in a boolean test) when absent.
  YAML::Node child(const std::string& key) {
    known_.insert(key);
    if (!node_ || node_.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    return node_[key];
  }
  std::string full(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& origin() const { return origin_; }
  // Where `key`'s value came from: the flag that overrode it, else the file.
  const std::string& origin_of(const std::string& key) const {
    if (flags_) {
      const auto it = flags_->find(full(key));
      if (it != flags_->end()) return it->second;
    }
    return origin_;
  }
  const OverrideFlags* flags() const { return flags_; }

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
  // The value as YAML text, cut to 40 characters (input nesting is bounded by
  // check_structure, so emitting it is safe).
  static std::string dump(const YAML::Node& v) {
    std::stringstream ss;
    ss << v;
    std::string s = ss.str();
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
  }
  YAML::Node node_;
  std::string path_, origin_;
  const OverrideFlags* flags_;
  std::set<std::string> known_;
};

template <class T>
void require(bool ok, const Section& s, const std::string& key, const char* rule, const T& v) {
  MXT_CHECK(ok, s.origin_of(key), ": `", s.full(key), "` ", rule, ", got ", v);
}

// ---- field lists: one per section, shared by parsing and by config_to_yaml ---------------
// (precision's enum, map and list keys are handled beside them).

template <class F>
void model_fields(ModelConfig& m, F&& f) {
  f("vocab_size", m.vocab_size);
  f("d_model", m.d_model);
  f("n_layers", m.n_layers);
  f("n_heads", m.n_heads);
  f("d_ff", m.d_ff);
  f("max_seq_len", m.max_seq_len);
  f("rms_eps", m.rms_eps);
  f("init_std", m.init_std);
  f("rope_theta", m.rope_theta);
}

template <class F>
void moe_fields(ModelConfig& m, F&& f) {
  f("num_experts", m.moe_num_experts);
  f("top_k", m.moe_top_k);
  f("d_ff", m.moe_d_ff);
  f("every", m.moe_every);
  f("aux_loss_coef", m.aux_loss_coef);
}

template <class F>
void training_fields(TrainingConfig& t, F&& f) {
  f("steps", t.steps);
  f("seq_len", t.seq_len);
  f("micro_batch_size", t.micro_batch_size);
  f("grad_accum", t.grad_accum);
  f("lr", t.lr);
  f("min_lr", t.min_lr);
  f("warmup_steps", t.warmup_steps);
  f("weight_decay", t.weight_decay);
  f("beta1", t.beta1);
  f("beta2", t.beta2);
  f("eps", t.eps);
  f("grad_clip", t.grad_clip);
  f("seed", t.seed);
  f("eval_every", t.eval_every);
  f("eval_batches", t.eval_batches);
  f("checkpoint_every", t.checkpoint_every);
  f("keep_checkpoints", t.keep_checkpoints);
  f("max_nonfinite_steps", t.max_nonfinite_steps);
  f("recompute", t.recompute);
}

template <class F>
void data_fields(DataConfig& d, F&& f) {
  f("path", d.path);
  f("val_fraction", d.val_fraction);
}

template <class F>
void precision_fields(PrecisionConfig& p, F&& f) {
  f("recipe", p.recipe);
  f("defer_backward_quant", p.defer_backward_quant);
  f("bf16_first_layers", p.bf16_first_layers);
  f("bf16_last_layers", p.bf16_last_layers);
  f("lm_head", p.lm_head);
  f("swiglu_input", p.swiglu_input);
  f("selective_fp8", p.selective_fp8);
  f("fp8_dynamic_policy_path", p.fp8_dynamic_policy_path);
  f("allow_policy_recipe_mismatch", p.allow_policy_recipe_mismatch);
  f("scale_rounding", p.scale_rounding);
  f("fp32_scales", p.fp32_scales);
  f("input_amax_epsilon", p.amax_epsilon[size_t(Role::input)]);
  f("weight_amax_epsilon", p.amax_epsilon[size_t(Role::weight)]);
  f("grad_amax_epsilon", p.amax_epsilon[size_t(Role::grad)]);
  f("amax_history_len", p.amax_history.length);
  f("margin", p.amax_history.margin);
  f("amax_compute_algo", p.amax_history.algo);
  f("fp4_stochastic_rounding", p.fp4_stochastic_rounding);
  f("fp4_rht", p.fp4_rht);
  f("fp4_2d_weights", p.fp4_2d_weights);
  f("nvfp4_order", p.nvfp4_order);
}

template <class F>
void fsdp_fields(FsdpConfig& c, F&& f) {
  f("enabled", c.enabled);
  f("mxfp8_gather", c.mxfp8_gather);
  f("prefetch", c.prefetch);
  f("progress_thread", c.progress_thread);
}

template <class F>
void parallel_fields(ParallelConfig& c, F&& f) {
  f("tp", c.tp);
  f("ep", c.ep);
  f("etp", c.etp);
  f("sequence_parallel", c.sequence_parallel);
  f("sp_wire", c.sp_wire);
}

void parse_model(Section s, ModelConfig& m, std::string& tokenizer) {
  model_fields(m, [&](const char* k, auto& v) { s.get(k, v); });
  s.get("tokenizer", tokenizer);
  Section moe(s.child("moe"), s.full("moe"), s.origin(), s.flags());
  moe_fields(m, [&](const char* k, auto& v) { moe.get(k, v); });
  moe.finish();
  s.finish();
  try {
    m.validate();
  } catch (const Error& e) {
    MXT_FAIL(s.origin(), ": model: ", e.what());
  }
}

void parse_training(Section s, TrainingConfig& t) {
  training_fields(t, [&](const char* k, auto& v) { s.get(k, v); });
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
  try {
    parse_recompute(t.recompute);
  } catch (const Error& e) {
    MXT_FAIL(s.origin(), ": `", s.full("recompute"), "`: ", e.what());
  }
}

void parse_data(Section s, DataConfig& d) {
  data_fields(d, [&](const char* k, auto& v) { s.get(k, v); });
  s.finish();
  require(d.val_fraction > 0 && d.val_fraction < 0.5f, s, "val_fraction", "must be in (0, 0.5)",
          d.val_fraction);
}

void parse_precision(Section s, PrecisionConfig& p) {
  precision_fields(p, [&](const char* k, auto& v) { s.get(k, v); });
  YAML::Node ov = s.child("overrides");
  YAML::Node nt = s.child("fp8_dynamic_num_tokens");
  s.finish();
  require(p.bf16_first_layers >= 0, s, "bf16_first_layers", "must be >= 0", p.bf16_first_layers);
  require(p.bf16_last_layers >= 0, s, "bf16_last_layers", "must be >= 0", p.bf16_last_layers);
  if (ov) {
    MXT_CHECK(ov.IsMap(), s.origin(), ": `", s.full("overrides"),
              "` must map module-name globs to recipe names, e.g. `layers.0.*: bf16`");
    Section o(ov, s.full("overrides"), s.origin(), s.flags());
    for (const auto& kv : ov) {
      const auto pat = kv.first.as<std::string>();
      Recipe r;
      o.get(pat, r);
      p.overrides.emplace_back(pat, r);
    }
  }
  if (nt) {
    if (nt.IsScalar()) {
      s.get("fp8_dynamic_num_tokens", p.fp8_dynamic_num_tokens[""]);
    } else {
      MXT_CHECK(nt.IsMap(), s.origin(), ": `", s.full("fp8_dynamic_num_tokens"),
                "` must be a number or a map component -> number");
      Section o(nt, s.full("fp8_dynamic_num_tokens"), s.origin(), s.flags());
      for (const auto& kv : nt) {
        const auto component = kv.first.as<std::string>();
        o.get(component, p.fp8_dynamic_num_tokens[component]);
      }
    }
    for (const auto& [k, v] : p.fp8_dynamic_num_tokens)
      require(v >= 1, s, "fp8_dynamic_num_tokens", "must be >= 1", v);
  }
  if (p.selective_fp8)
    MXT_CHECK(!p.fp8_dynamic_policy_path.empty(), s.origin(), ": `", s.full("selective_fp8"),
              "` is true but `", s.full("fp8_dynamic_policy_path"), "` is not set");
  // A recipe whose products are not built stops the run here, at start-up.
  try {
    check_products_built(p.recipe);
    for (const auto& [pat, r] : p.overrides) check_products_built(r);
  } catch (const Error& e) {
    rethrow_prefixed(s.origin_of("recipe") + ": ", e);
  }
  // The rules across keys (recipe.h, nn/fp8_activation.h), named by the flag that set the
  // recipe when one did.
  MXT_CHECK(!p.defer_backward_quant || defer_backward_quant_applies(p.recipe),
            s.origin_of("recipe"), ": `", s.full("defer_backward_quant"),
            "` is only valid with an FP8 recipe (recipe is `", p.recipe.name, "`)");
  MXT_CHECK(swiglu_input_applies(p.swiglu_input, p.recipe), s.origin_of("recipe"), ": `",
            s.full("swiglu_input"), ": ", swiglu_input_name(p.swiglu_input),
            "` is only valid with ",
            p.swiglu_input == SwigluInput::fp4 ? "a 4-bit recipe (nvfp4, mxfp4)" : "an FP8 recipe",
            " (recipe is `", p.recipe.name, "`)");
  // fp32_scales and explicit epsilons change FP32-scaled recipes only: the run's recipe must
  // be one (overrides and policy decisions may still put modules in BF16).
  const std::pair<const char*, bool> set[] = {
      {"fp32_scales", p.fp32_scales},
      {"input_amax_epsilon", p.amax_epsilon[size_t(Role::input)].value.has_value()},
      {"weight_amax_epsilon", p.amax_epsilon[size_t(Role::weight)].value.has_value()},
      {"grad_amax_epsilon", p.amax_epsilon[size_t(Role::grad)].value.has_value()}};
  for (const auto& [key, given] : set) {
    if (!given) continue;
    try {
      check_fp32_scale_setting(p.recipe, "`" + s.full(key) + "`");
    } catch (const Error& e) {
      rethrow_prefixed(s.origin_of(key) + ": ", e);
    }
  }
  // The 4-bit switches: the run's recipe must be a 4-bit one (nvfp4_order: one with tensor
  // scales).
  const std::pair<const char*, bool> fp4[] = {
      {"fp4_stochastic_rounding", p.fp4_stochastic_rounding.value.has_value()},
      {"fp4_rht", p.fp4_rht.value.has_value()},
      {"fp4_2d_weights", p.fp4_2d_weights.value.has_value()},
      {"nvfp4_order", p.nvfp4_order.value.has_value()}};
  for (const auto& [key, given] : fp4) {
    if (!given) continue;
    try {
      check_fp4_setting(p.recipe, "`" + s.full(key) + "`");
      if (std::string(key) == "nvfp4_order")
        MXT_CHECK(p.recipe.role(Role::weight).tensor_scale, "`", s.full(key),
                  "` applies to nvfp4 (recipes with per-tensor scales); recipe '",
                  p.recipe.name, "' has none");
    } catch (const Error& e) {
      rethrow_prefixed(s.origin_of(key) + ": ", e);
    }
  }
  // The amax history: its ranges, and (away from its default) a delayed-scaling recipe.
  require(p.amax_history.length >= 1 && p.amax_history.length <= (1 << 20), s,
          "amax_history_len", "must be between 1 and 1048576", p.amax_history.length);
  require(p.amax_history.margin >= 0 && p.amax_history.margin <= 64, s, "margin",
          "must be between 0 and 64", p.amax_history.margin);
  const AmaxHistorySpec defaults = PrecisionConfig{}.amax_history;
  const std::pair<const char*, bool> hist[] = {
      {"amax_history_len", p.amax_history.length != defaults.length},
      {"margin", p.amax_history.margin != defaults.margin},
      {"amax_compute_algo", p.amax_history.algo != defaults.algo}};
  for (const auto& [key, given] : hist) {
    if (!given) continue;
    try {
      check_amax_history_setting(p.recipe, "`" + s.full(key) + "`");
    } catch (const Error& e) {
      rethrow_prefixed(s.origin_of(key) + ": ", e);
    }
  }
}

void parse_parallel(Section s, ParallelConfig& p) {
  parallel_fields(p, [&](const char* k, auto& v) { s.get(k, v); });
  s.finish();
  for (const auto& [key, v] : {std::pair{"tp", p.tp}, {"ep", p.ep}, {"etp", p.etp}})
    require(v >= 1 && v <= 4096, s, key, "must be between 1 and 4096", v);
  MXT_CHECK(!p.sequence_parallel || p.tp > 1, s.origin_of("sequence_parallel"), ": `",
            s.full("sequence_parallel"), "` needs tensor parallelism (`", s.full("tp"),
            "` > 1): it splits the norms and residuals of a tensor-parallel group");
  MXT_CHECK(p.sp_wire == SequenceWire::exact || p.sequence_parallel, s.origin_of("sp_wire"),
            ": `", s.full("sp_wire"), ": ", sequence_wire_name(p.sp_wire), "` needs `",
            s.full("sequence_parallel"), ": true` (it says what its all-gathers carry)");
}

void parse_fsdp(Section s, FsdpConfig& f) {
  fsdp_fields(f, [&](const char* k, auto& v) { s.get(k, v); });
  s.finish();
  MXT_CHECK(f.mxfp8_gather == "on-demand" || f.mxfp8_gather == "all", s.origin(), ": `",
            s.full("mxfp8_gather"), "` must be `on-demand` or `all`, got `", f.mxfp8_gather, "`");
  MXT_CHECK(f.prefetch >= 0 && f.prefetch <= 8, s.origin(), ": `", s.full("prefetch"),
            "` must be between 0 and 8 (modules gathered ahead), got ", f.prefetch);
}

// Walks the document before it is interpreted: bounded depth (aliases can make a cycle)
// and node count (aliases can multiply a small file), and no key twice in one mapping
// (yaml-cpp keeps both and the first would silently win).
constexpr int kMaxYamlDepth = 32;
constexpr int64_t kMaxYamlNodes = 100000;

void check_structure(const YAML::Node& n, const std::string& path, int depth, int64_t& count,
                     const std::string& origin) {
  MXT_CHECK(depth <= kMaxYamlDepth, origin, ": nested deeper than ", kMaxYamlDepth,
            " levels at `", path, "`");
  MXT_CHECK(++count <= kMaxYamlNodes, origin, ": more than ", kMaxYamlNodes,
            " YAML nodes (aliases expanding?)");
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      check_structure(n[i], path + "[" + std::to_string(i) + "]", depth + 1, count, origin);
  } else if (n.IsMap()) {
    std::set<std::string> seen;
    for (const auto& kv : n) {
      MXT_CHECK(kv.first.IsScalar(), origin, ": `", path.empty() ? "(top level)" : path,
                "` has a key that is not a plain scalar");
      const std::string k = kv.first.Scalar();
      const std::string full = path.empty() ? k : path + "." + k;
      MXT_CHECK(seen.insert(k).second, origin, ": duplicate key `", full,
                "` (each key may appear once)");
      check_structure(kv.second, full, depth + 1, count, origin);
    }
  }
}

}  // namespace

void TrainConfig::validate() const {
  MXT_CHECK(training.seq_len <= model.max_seq_len, "training.seq_len (", training.seq_len,
            ") exceeds model.max_seq_len (", model.max_seq_len, ")");
  MXT_CHECK(!fsdp.enabled || parse_recompute(training.recompute) == Recompute::none,
            "training.recompute: ", training.recompute, " is not supported with fsdp (the "
            "recomputed forwards would need the sharded weights gathered again); use none");
  model.validate();
  // The parallel layout against the model (the world size is checked when the mesh is made).
  const ParallelConfig& p = parallel;
  MXT_CHECK(model.n_heads % p.tp == 0 && model.d_ff % p.tp == 0, "parallel.tp ", p.tp,
            " must divide model.n_heads (", model.n_heads, ") and model.d_ff (", model.d_ff,
            "): each rank holds n_heads / tp heads and d_ff / tp of each MLP");
  MXT_CHECK(p.tp == 1 || model.moe_num_experts == 0 || p.sequence_parallel, "parallel.tp ",
            p.tp, " on an MoE model needs parallel.sequence_parallel: true (as in Megatron): "
            "each rank then routes its own share of the tokens to the experts");
  MXT_CHECK(p.ep == 1 || (model.moe_num_experts > 0 && model.moe_num_experts % p.ep == 0),
            "parallel.ep ", p.ep,
            model.moe_num_experts ? " must divide model.moe.num_experts (" +
                                        std::to_string(model.moe_num_experts) + ")"
                                  : std::string(" needs an MoE model (model.moe.num_experts)"));
  MXT_CHECK(p.etp == 1 || (model.moe_num_experts > 0 && model.expert_d_ff() % p.etp == 0),
            "parallel.etp ", p.etp,
            model.moe_num_experts ? " must divide the experts' d_ff (" +
                                        std::to_string(model.expert_d_ff()) + ")"
                                  : std::string(" needs an MoE model (model.moe.num_experts)"));
  MXT_CHECK(!p.used() || parse_recompute(training.recompute) == Recompute::none,
            "training.recompute: ", training.recompute, " is not built for tensor or expert "
            "parallelism; use none");
  for (const Recipe* r : [&] {
         std::vector<const Recipe*> v{&precision.recipe, &precision.lm_head};
         for (const auto& [pat, rec] : precision.overrides) v.push_back(&rec);
         return v;
       }())
    MXT_CHECK(!p.used() || r->role(Role::weight).block != BlockShape::tensor, "recipe ",
              r->name, ": one scale per tensor is not built for tensor or expert parallelism "
              "(each rank's slice would need an amax agreed over its group); use an MX or "
              "blockwise recipe, or --fsdp");
  MXT_CHECK(!p.sequence_parallel ||
                (int64_t(training.micro_batch_size) * training.seq_len) % p.tp == 0,
            "parallel.sequence_parallel: the micro-batch's tokens (micro_batch_size ",
            training.micro_batch_size, " x seq_len ", training.seq_len, ") must split evenly "
            "over tp ", p.tp, " ranks");
}

namespace {
TrainConfig parse_document(YAML::Node root, const std::string& origin,
                           const std::vector<ConfigOverride>& overrides);
}  // namespace

TrainConfig parse_config(const std::string& yaml_text, const std::string& origin,
                         const std::vector<ConfigOverride>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    MXT_FAIL(origin, ": not valid YAML: ", e.what());
  }
  try {
    return parse_document(root, origin, overrides);
  } catch (const YAML::Exception& e) {  // a value of the wrong kind inside a map or list
    MXT_FAIL(origin, ": unexpected YAML value: ", e.msg);
  }
}

namespace {

// Puts each override into `root` as a plain scalar (`section.key: value`), creating the
// section when the file has none, and records which flag set which key. A document that is
// not a mapping is left alone: parsing it fails with the file's own error.
OverrideFlags apply_overrides(YAML::Node& root, const std::vector<ConfigOverride>& overrides) {
  OverrideFlags flags;
  if (!root.IsMap() && !root.IsNull()) return flags;
  for (const ConfigOverride& o : overrides) {
    const size_t dot = o.key.find('.');
    MXT_CHECK(dot != std::string::npos, "config override `", o.key, "` is not a section.key");
    YAML::Node section = root[o.key.substr(0, dot)];
    if (!section || section.IsNull()) {
      section = YAML::Node(YAML::NodeType::Map);
      root[o.key.substr(0, dot)] = section;
    }
    if (!section.IsMap()) continue;  // the section's own error comes when it is parsed
    section[o.key.substr(dot + 1)] = YAML::Node(o.value);
    flags[o.key] = o.flag;
  }
  return flags;
}

TrainConfig parse_document(YAML::Node root, const std::string& origin,
                           const std::vector<ConfigOverride>& overrides) {
  int64_t nodes = 0;
  check_structure(root, "", 0, nodes, origin);
  const OverrideFlags flags = apply_overrides(root, overrides);
  TrainConfig c;
  Section top(root, "", origin, &flags);
  auto require_section = [&](const char* name, const char* hint) {
    const YAML::Node n = top.child(name);
    MXT_CHECK(n && !n.IsNull(), origin, ": missing required section `", name, ":` (", hint, ")");
  };
  require_section("model", "the model's shape: d_model, n_layers, n_heads, d_ff, max_seq_len");
  parse_model(Section(top.child("model"), "model", origin, &flags), c.model, c.tokenizer);
  parse_training(Section(top.child("training"), "training", origin, &flags), c.training);
  parse_data(Section(top.child("data"), "data", origin, &flags), c.data);
  require_section("precision", "at least `recipe:`");
  parse_precision(Section(top.child("precision"), "precision", origin, &flags), c.precision);
  parse_fsdp(Section(top.child("fsdp"), "fsdp", origin, &flags), c.fsdp);
  parse_parallel(Section(top.child("parallel"), "parallel", origin, &flags), c.parallel);
  top.finish();
  try {
    c.validate();
  } catch (const Error& e) {
    rethrow_prefixed(
        Section(top.child("training"), "training", origin, &flags).origin_of("seq_len") + ": ", e);
  }
  c.source_text = config_to_yaml(c);
  return c;
}

}  // namespace

TrainConfig load_config(const std::string& path, const std::vector<ConfigOverride>& overrides) {
  // read_text_file refuses devices and pipes (a config of /dev/zero is not read forever).
  TrainConfig c = parse_config(io::read_text_file(path), path, overrides);
  c.source_path = path;
  return c;
}

const char* amax_epsilon_env(Role role) {
  switch (role) {
    case Role::input: return "FP8_QUANT_FWD_INP_AMAX_EPS";
    case Role::weight: return "FP8_QUANT_FWD_WEIGHT_AMAX_EPS";
    case Role::grad: return "FP8_QUANT_BWD_GRAD_AMAX_EPS";
  }
  return "?";
}

ResolvedEpsilon resolve_amax_epsilon(const AmaxEpsilon& e, Role role, const Recipe& r) {
  if (e.value) return {*e.value, std::string("precision.") + role_name(role) + "_amax_epsilon"};
  const char* var = amax_epsilon_env(role);
  if (const char* env = std::getenv(var); env && *env) {
    char* end = nullptr;
    const float v = std::strtof(env, &end);
    MXT_CHECK(end && *end == '\0' && std::isfinite(v) && v >= 0.f, var, "=", env,
              " is not a finite number >= 0 (unset it, or set precision.", role_name(role),
              "_amax_epsilon, which wins)");
    return {v, var};
  }
  return {r.role(role).amax_epsilon, "recipe default"};
}

std::string config_to_yaml(const TrainConfig& config) {
  TrainConfig c = config;  // the field lists take mutable references
  YAML::Emitter e;
  auto put = [&](const char* k, const auto& v) { e << YAML::Key << k << YAML::Value << text(v); };
  auto open = [&](const char* k) { e << YAML::Key << k << YAML::Value << YAML::BeginMap; };
  e << YAML::BeginMap;
  open("model");
  model_fields(c.model, put);
  open("moe");
  moe_fields(c.model, put);
  e << YAML::EndMap;
  put("tokenizer", c.tokenizer);
  e << YAML::EndMap;
  open("training");
  training_fields(c.training, put);
  e << YAML::EndMap;
  open("data");
  data_fields(c.data, put);
  e << YAML::EndMap;
  open("precision");
  precision_fields(c.precision, put);
  open("overrides");
  for (const auto& [k, v] : c.precision.overrides) put(k.c_str(), v);
  e << YAML::EndMap;
  open("fp8_dynamic_num_tokens");
  for (const auto& [k, v] : c.precision.fp8_dynamic_num_tokens) put(k.c_str(), v);
  e << YAML::EndMap << YAML::EndMap;
  open("fsdp");
  fsdp_fields(c.fsdp, put);
  e << YAML::EndMap;
  open("parallel");
  parallel_fields(c.parallel, put);
  e << YAML::EndMap << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

namespace {

// A field visitor that records "section.key" -> value as text in `out`.
auto recorder(std::map<std::string, std::string>& out, const std::string& section) {
  return [&out, section](const char* k, const auto& v) {
    std::ostringstream os;
    os << text(v);
    out[section + "." + k] = os.str();
  };
}

// "key: old -> new" for each key whose value differs between a and b (same keys).
std::vector<std::string> differences(const std::map<std::string, std::string>& a,
                                     const std::map<std::string, std::string>& b) {
  std::vector<std::string> lines;
  for (const auto& [k, v] : a) {
    const std::string& w = b.at(k);
    if (v != w) lines.push_back(k + ": " + v + " -> " + w);
  }
  return lines;
}

std::map<std::string, std::string> model_settings(const ModelConfig& model) {
  ModelConfig m = model;  // the field lists take mutable references
  std::map<std::string, std::string> out;
  model_fields(m, recorder(out, "model"));
  moe_fields(m, recorder(out, "model.moe"));
  return out;
}

// "section.key" -> value as text, for every setting outside the model section.
std::map<std::string, std::string> flat_settings(const TrainConfig& config) {
  TrainConfig c = config;  // the field lists take mutable references
  std::map<std::string, std::string> out;
  auto add = [&](const std::string& section) { return recorder(out, section); };
  training_fields(c.training, add("training"));
  data_fields(c.data, add("data"));
  precision_fields(c.precision, add("precision"));
  std::string ov;
  for (const auto& [k, v] : c.precision.overrides)
    ov += (ov.empty() ? "" : ", ") + k + ": " + v.name;
  out["precision.overrides"] = "{" + ov + "}";
  std::string nt;
  for (const auto& [k, v] : c.precision.fp8_dynamic_num_tokens)
    nt += (nt.empty() ? "" : ", ") + k + ": " + std::to_string(v);
  out["precision.fp8_dynamic_num_tokens"] = "{" + nt + "}";
  fsdp_fields(c.fsdp, add("fsdp"));
  parallel_fields(c.parallel, add("parallel"));
  return out;
}

}  // namespace

std::vector<std::string> config_changes(const TrainConfig& before, const TrainConfig& after) {
  return differences(flat_settings(before), flat_settings(after));
}

std::vector<std::string> model_changes(const ModelConfig& before, const ModelConfig& after) {
  return differences(model_settings(before), model_settings(after));
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
