// train/hf_llama.cc — Hugging Face Llama / Mixtral export and import (train/hf_llama.h).
//
// Every HF tensor is a contiguous range of one mxtrain tensor (a block of rows, or an expert's
// matrix), listed once by `pieces`; export copies the ranges out, import copies them back, so
// the two are inverses by construction and an export of an import has the same bytes.
#include "mxtrain/train/hf_llama.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "mxtrain/common.h"
#include "mxtrain/corpus/tokenizer.h"
#include "mxtrain/formats.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/output_dir.h"
#include "mxtrain/io/json_input.h"
#include "mxtrain/io/npy.h"
#include "mxtrain/io/safetensors.h"
#include "mxtrain/nn/generate.h"
#include "mxtrain/train/checkpointing.h"

namespace mxtrain::hf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kLlama = "LlamaForCausalLM";
constexpr const char* kMixtral = "MixtralForCausalLM";

// One HF tensor: `shape` elements of the mxtrain tensor `mx` from element `offset` on.
struct Piece {
  std::string hf, mx;
  int64_t offset;
  std::vector<int64_t> shape;
};

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// What the Llama / Mixtral formats cannot hold. `what` names the model for the message.
void check_representable(const ModelConfig& m, const std::string& what) {
  m.validate();
  MXT_CHECK(m.rope_theta > 0.f, what, ": model.rope_theta is 0 (no rotary embedding); "
            "Llama and Mixtral rotate q and k in every layer, so this model has no HF form");
  MXT_CHECK(m.moe_num_experts == 0 || m.moe_every == 1, what, ": Mixtral's layout has experts "
            "in every layer, but this model has dense layers between its MoE layers "
            "(model.moe.every = ", m.moe_every, "); export needs model.moe.every: 1");
}

std::vector<Piece> pieces(const ModelConfig& m) {
  const int64_t D = m.d_model, F = m.d_ff, V = m.vocab_size;
  std::vector<Piece> p;
  p.push_back({"model.embed_tokens.weight", "embed.weight", 0, {V, D}});
  for (int i = 0; i < m.n_layers; ++i) {
    const std::string h = "model.layers." + std::to_string(i) + ".";
    const std::string x = "layers." + std::to_string(i) + ".";
    p.push_back({h + "input_layernorm.weight", x + "attention.norm.gain", 0, {D}});
    p.push_back({h + "self_attn.q_proj.weight", x + "attention.qkv.weight", 0, {D, D}});
    p.push_back({h + "self_attn.k_proj.weight", x + "attention.qkv.weight", D * D, {D, D}});
    p.push_back({h + "self_attn.v_proj.weight", x + "attention.qkv.weight", 2 * D * D, {D, D}});
    p.push_back({h + "self_attn.o_proj.weight", x + "attention.proj.weight", 0, {D, D}});
    p.push_back({h + "post_attention_layernorm.weight", x + "mlp.norm.gain", 0, {D}});
    if (m.is_moe_layer(i)) {
      const int64_t E = m.moe_num_experts, Fe = m.expert_d_ff();
      const std::string b = h + "block_sparse_moe.";
      p.push_back({b + "gate.weight", x + "mlp.router.weight", 0, {E, D}});
      for (int64_t e = 0; e < E; ++e) {
        const std::string ex = b + "experts." + std::to_string(e) + ".";
        p.push_back({ex + "w1.weight", x + "mlp.experts.fc1.weight", e * 2 * Fe * D, {Fe, D}});
        p.push_back({ex + "w2.weight", x + "mlp.experts.fc2.weight", e * D * Fe, {D, Fe}});
        p.push_back({ex + "w3.weight", x + "mlp.experts.fc1.weight", (e * 2 + 1) * Fe * D,
                     {Fe, D}});
      }
    } else {
      p.push_back({h + "mlp.gate_proj.weight", x + "mlp.fc1.weight", 0, {F, D}});
      p.push_back({h + "mlp.up_proj.weight", x + "mlp.fc1.weight", F * D, {F, D}});
      p.push_back({h + "mlp.down_proj.weight", x + "mlp.fc2.weight", 0, {D, F}});
    }
  }
  p.push_back({"model.norm.weight", "final_norm.gain", 0, {D}});
  p.push_back({"lm_head.weight", "lm_head.weight", 0, {V, D}});
  return p;
}

// A float as the shortest decimal that reads back to it (config.json's rms_norm_eps 1e-05,
// not 9.999999747378752e-06).
double shortest(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::stod(std::string(buf, r.ptr));
}

json hf_config(const ModelConfig& m, const corpus::Tokenizer& tok, bool tied) {
  const bool moe = m.moe_num_experts > 0;
  json j;
  j["architectures"] = json::array({moe ? kMixtral : kLlama});
  j["model_type"] = moe ? "mixtral" : "llama";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = moe ? m.expert_d_ff() : m.d_ff;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.n_heads;
  j["head_dim"] = m.d_model / m.n_heads;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.max_seq_len;
  j["rms_norm_eps"] = shortest(m.rms_eps);
  j["rope_theta"] = shortest(m.rope_theta);
  j["rope_scaling"] = nullptr;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  if (!moe) j["mlp_bias"] = false;
  j["tie_word_embeddings"] = tied;
  j["initializer_range"] = shortest(m.init_std);
  j["bos_token_id"] = tok.bos_id() >= 0 ? json(tok.bos_id()) : json(nullptr);
  j["eos_token_id"] = tok.eos_id() >= 0 ? json(tok.eos_id()) : json(nullptr);
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  if (moe) {
    j["num_local_experts"] = m.moe_num_experts;
    j["num_experts_per_tok"] = m.moe_top_k;
    j["router_aux_loss_coef"] = shortest(m.aux_loss_coef);
    j["output_router_logits"] = false;
    j["router_jitter_noise"] = 0.0;
    j["sliding_window"] = nullptr;
  }
  return j;
}

// ---- reading config.json ------------------------------------------------------------------

// Field `k` of the config (a number), or `def` when absent; `path` names the file.
double number(const nlohmann::json& j, const char* k, const std::string& path, double def,
              bool required) {
  if (!j.contains(k) || j[k].is_null()) {
    MXT_CHECK(!required, path, ": no `", k, "`");
    return def;
  }
  MXT_CHECK(j[k].is_number(), path, ": `", k, "` is not a number (", io::json_summary(j[k]), ")");
  return j[k].get<double>();
}

int whole(const nlohmann::json& j, const char* k, const std::string& path) {
  const double v = number(j, k, path, 0, true);
  MXT_CHECK(v >= 1 && v <= (1 << 30) && v == double(int64_t(v)), path, ": `", k,
            "` must be a positive whole number, got ", v);
  return int(v);
}

// The rotary base. transformers 5 writes it inside `rope_parameters` ({"rope_theta": ...,
// "rope_type": "default"}); earlier versions wrote `rope_theta` at the top level (and
// `rope_scaling`, refused by the caller unless null). Only the default rotary type is
// mxtrain's; anything else in rope_parameters is refused by name.
double rope_theta(const nlohmann::json& j, const std::string& path, double def) {
  const char* key = "rope_parameters";
  if (!j.contains(key) || j[key].is_null()) return number(j, "rope_theta", path, def, false);
  const nlohmann::json& r = j[key];
  MXT_CHECK(r.is_object(), path, ": `", key, "` is not an object (", io::json_summary(r), ")");
  for (const auto& [k, v] : r.items()) {
    if (k == "rope_theta") continue;
    MXT_CHECK(k == "rope_type", path, ": `", key, ".", k, "` is not supported (mxtrain's rotary "
              "embedding is the default type: only rope_theta and rope_type \"default\")");
    MXT_CHECK(v.is_string() && v.get<std::string>() == "default", path, ": `", key,
              ".rope_type` ", io::json_summary(v), " is not supported (mxtrain's rotary "
              "embedding is the default type)");
  }
  const double theta = number(r, "rope_theta", path + ": " + key, def, false);
  if (j.contains("rope_theta") && !j["rope_theta"].is_null())
    MXT_CHECK(number(j, "rope_theta", path, def, false) == theta, path, ": `rope_theta` ",
              io::json_summary(j["rope_theta"]), " and `", key, ".rope_theta` ",
              io::json_summary(r["rope_theta"]), " disagree");
  return theta;
}

ModelConfig read_config(const std::string& path, std::string* arch, bool* tied) {
  const nlohmann::json j = io::parse_json_strict(io::read_text_file(path), path);
  MXT_CHECK(j.is_object(), path, ": not a JSON object");
  std::string a;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()
      && j["architectures"][0].is_string())
    a = j["architectures"][0].get<std::string>();
  const std::string type = j.value("model_type", "");
  MXT_CHECK(a == kLlama || a == kMixtral || (a.empty() && (type == "llama" || type == "mixtral")),
            path, ": architecture `", a.empty() ? type : a, "` is not supported (mxtrain reads ",
            kLlama, " and ", kMixtral, ")");
  if (a.empty()) a = type == "llama" ? kLlama : kMixtral;
  *arch = a;
  const bool moe = a == kMixtral;
  auto refuse_if = [&](bool bad, const std::string& what) {
    MXT_CHECK(!bad, path, ": ", what, " is not supported");
  };
  const std::string act = j.value("hidden_act", "silu");
  refuse_if(act != "silu", "hidden_act `" + act + "` (mxtrain's MLP is SwiGLU: silu)");
  ModelConfig m;
  m.vocab_size = whole(j, "vocab_size", path);
  m.d_model = whole(j, "hidden_size", path);
  m.n_layers = whole(j, "num_hidden_layers", path);
  m.n_heads = whole(j, "num_attention_heads", path);
  const int kv = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                     ? whole(j, "num_key_value_heads", path) : m.n_heads;
  refuse_if(kv != m.n_heads, "grouped-query attention (num_key_value_heads " +
                                 std::to_string(kv) + " of " + std::to_string(m.n_heads) +
                                 " heads)");
  if (j.contains("head_dim") && !j["head_dim"].is_null())
    refuse_if(whole(j, "head_dim", path) * m.n_heads != m.d_model,
              "head_dim " + std::to_string(whole(j, "head_dim", path)) +
                  " times num_attention_heads other than hidden_size");
  refuse_if(j.value("attention_bias", false), "attention_bias true");
  refuse_if(j.value("mlp_bias", false), "mlp_bias true");
  refuse_if(j.contains("rope_scaling") && !j["rope_scaling"].is_null(), "rope_scaling");
  refuse_if(j.contains("sliding_window") && !j["sliding_window"].is_null(), "sliding_window");
  const int inter = whole(j, "intermediate_size", path);
  m.d_ff = inter;
  m.max_seq_len = whole(j, "max_position_embeddings", path);
  // Absent settings take transformers' defaults of the architecture's config class
  // (LlamaConfig / MixtralConfig), which is what from_pretrained would run.
  m.rms_eps = float(number(j, "rms_norm_eps", path, moe ? 1e-5 : 1e-6, false));
  m.rope_theta = float(rope_theta(j, path, moe ? 1e6 : 10000.0));
  m.init_std = float(number(j, "initializer_range", path, 0.02, false));
  if (moe) {
    m.moe_num_experts = whole(j, "num_local_experts", path);
    m.moe_top_k = whole(j, "num_experts_per_tok", path);
    m.moe_d_ff = inter;
    m.moe_every = 1;
    m.aux_loss_coef = float(number(j, "router_aux_loss_coef", path, 0.001, false));
  }
  *tied = j.value("tie_word_embeddings", false);
  try {
    m.validate();
  } catch (const Error& e) {
    MXT_FAIL(path, ": ", e.what());
  }
  check_representable(m, path);
  return m;
}

// The safetensors files of an HF directory: one model.safetensors, or the shards an index
// names.
std::vector<std::string> weight_files(const std::string& dir) {
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (io::path_exists(single)) return {single};
  MXT_CHECK(io::path_exists(index), dir, ": no model.safetensors (nor an index of shards, "
            "model.safetensors.index.json)");
  const std::string text = io::read_text_file(index);
  io::check_json_depth(text, index);
  std::set<std::string> files;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& [name, file] : j.at("weight_map").items()) {
      const std::string f = file.get<std::string>();
      MXT_CHECK(!f.empty() && f.find('/') == std::string::npos && f[0] != '.', index,
                ": shard name `", f.substr(0, 64), "` is not a plain file name");
      files.insert(f);
    }
  } catch (const nlohmann::json::exception& e) {
    MXT_FAIL(index, ": malformed index: ", e.what());
  }
  std::vector<std::string> out;
  for (const std::string& f : files) out.push_back(dir + "/" + f);
  return out;
}

// IEEE binary16 bits -> float (exact: every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (man << 13));  // Inf, NaN
  if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
  const float sub = float(man) * 0x1p-24f;  // zero and subnormals: man · 2^-24
  return sign ? -sub : sub;
}

// An HF tensor's values as FP32.
void to_f32(const io::StTensor& t, float* out, const std::string& what) {
  const int64_t n = t.numel();
  if (t.dtype == "F32") {
    std::memcpy(out, t.data.data(), size_t(n) * 4);
  } else if (t.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, t.data.data() + 2 * i, 2);
      out[i] = bf16_to_f32(b);
    }
  } else if (t.dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      out[i] = half_to_float(h);
    }
  } else {
    MXT_FAIL(what, ": tensor `", t.name, "` has dtype ", t.dtype, " (mxtrain reads F32, BF16 "
             "and F16)");
  }
}

}  // namespace

std::vector<io::NamedTensor> to_hf_tensors(const ModelConfig& m,
                                           const std::vector<io::NamedTensor>& mx) {
  check_representable(m, "export");
  std::map<std::string, const io::NamedTensor*> by_name;
  for (const io::NamedTensor& t : mx) by_name[t.name] = &t;
  std::vector<io::NamedTensor> out;
  for (const Piece& p : pieces(m)) {
    const auto it = by_name.find(p.mx);
    MXT_CHECK(it != by_name.end(), "export: the model has no tensor `", p.mx, "`");
    const io::NamedTensor& t = *it->second;
    const int64_t n = numel(p.shape);
    MXT_CHECK(p.offset + n <= int64_t(t.data.size()), "export: tensor `", p.mx, "` has ",
              t.data.size(), " values, too few for ", p.hf);
    out.push_back({p.hf, p.shape, std::vector<float>(t.data.begin() + p.offset,
                                                     t.data.begin() + p.offset + n)});
  }
  return out;
}

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out) {
  MXT_CHECK(!out.empty(), "--out is empty; give the directory to write the model to");
  if (fs::exists(out))
    MXT_CHECK(fs::is_directory(out) && (fs::is_empty(out) || fs::exists(out + "/config.json")),
              "--out ", out, " exists and is not an earlier export (no config.json); choose a "
              "new path");
  const CheckpointModel ck = load_checkpoint_model(checkpoint);
  const ModelConfig& m = ck.config.model;
  check_representable(m, ck.dir);
  std::vector<io::NamedTensor> mx;
  for (Parameter* p : ck.model->parameters())
    mx.push_back({p->name, p->shape, std::vector<float>(p->value.begin(), p->value.end())});
  std::vector<io::NamedTensor> hf = to_hf_tensors(m, mx);
  // A head equal to the embedding bit for bit (a checkpoint imported from a model with
  // tie_word_embeddings, not trained since: training updates the two separately) is written
  // tied, as the model it came from: no lm_head.weight, tie_word_embeddings true.
  const auto find = [&](const char* name) {
    return std::find_if(hf.begin(), hf.end(),
                        [&](const io::NamedTensor& t) { return t.name == name; });
  };
  const auto head = find("lm_head.weight"), embed = find("model.embed_tokens.weight");
  const bool tied = head != hf.end() && embed != hf.end() && head->shape == embed->shape &&
                    std::memcmp(head->data.data(), embed->data.data(),
                                head->data.size() * sizeof(float)) == 0;
  if (tied) hf.erase(head);
  std::vector<io::StTensorView> views;
  for (const io::NamedTensor& t : hf)
    views.push_back({t.name, "F32", t.shape, io::f32_span(t.data.data(), t.data.size())});
  // transformers loads a safetensors file only when its metadata says it holds PyTorch tensors.
  const io::StSerialized st = io::safetensors_serialize(views, {{"format", "pt"}});
  const corpus::Tokenizer& tok = ck.tokenizer;
  const json cfg = hf_config(m, tok, tied);
  json gen = {{"_from_model_config", true}, {"max_length", m.max_seq_len}};
  gen["bos_token_id"] = cfg["bos_token_id"];
  gen["eos_token_id"] = cfg["eos_token_id"];

  fs::create_directories(fs::absolute(out).parent_path());
  io::AtomicDir dir(out);
  dir.write("model.safetensors", st.parts);
  dir.write("config.json", cfg.dump(2) + "\n");
  dir.write("generation_config.json", gen.dump(2) + "\n");
  if (!tok.is_bytes()) {
    dir.write("tokenizer.model", tok.model_bytes());
    const json tc = {{"tokenizer_class", "LlamaTokenizer"},
                     {"add_bos_token", false},
                     {"add_eos_token", false},
                     {"legacy", true},
                     // The model has no dummy prefix; transformers' converted (fast) Llama
                     // tokenizer would otherwise put U+2581 before the text (another first id).
                     {"add_prefix_space", false},
                     {"bos_token", "<s>"},
                     {"eos_token", "</s>"},
                     {"unk_token", "<unk>"},
                     {"model_max_length", m.max_seq_len},
                     {"clean_up_tokenization_spaces", false}};
    dir.write("tokenizer_config.json", tc.dump(2) + "\n");
  }
  io::commit_output_dir(dir, "--out", "mxtrain export");
  return {m.moe_num_experts > 0 ? kMixtral : kLlama, hf.size(), st.total_size, tok.id().str(),
          tied};
}

HfModel import_dir(const std::string& dir, bool weights, bool allow_nonfinite) {
  MXT_CHECK(io::is_directory(dir), "Hugging Face model directory `", dir, "` does not exist");
  HfModel h;
  h.dir = dir;
  h.model = read_config(dir + "/config.json", &h.architecture, &h.tied);
  const std::string tok_path = dir + "/tokenizer.model";
  if (io::path_exists(tok_path)) {
    const corpus::Tokenizer tok = corpus::Tokenizer::load(tok_path);  // byte-exact, or refused
    MXT_CHECK(tok.vocab_size() <= h.model.vocab_size, tok_path, ": ", tok.vocab_size(),
              " pieces, more than the model's vocab_size ", h.model.vocab_size);
    h.tokenizer = tok_path;
  } else {
    MXT_CHECK(h.model.vocab_size <= 256, dir, ": no tokenizer.model, and a vocabulary of ",
              h.model.vocab_size, " is not byte-level (256); mxtrain needs the model's "
              "SentencePiece tokenizer.model");
  }
  if (!weights) return h;

  std::map<std::string, io::StTensor> hf;
  for (const std::string& f : weight_files(dir)) {
    io::Safetensors st = io::read_safetensors(f);
    for (io::StTensor& t : st.tensors) {
      const std::string name = t.name;
      MXT_CHECK(hf.emplace(name, std::move(t)).second, f, ": tensor `", name,
                "` appears in two shards");
    }
  }
  InferenceModel shapes(h.model);  // mxtrain's names and shapes, in parameter order
  std::map<std::string, io::NamedTensor*> mx;
  h.tensors.reserve(shapes.parameters().size());
  for (Parameter* p : shapes.parameters()) {
    h.tensors.push_back({p->name, p->shape, std::vector<float>(size_t(p->numel()), 0.f)});
    mx[p->name] = &h.tensors.back();
  }
  std::set<std::string> used;
  for (const Piece& p : pieces(h.model)) {
    auto it = hf.find(p.hf);
    if (it == hf.end() && p.hf == "lm_head.weight" && h.tied)
      it = hf.find("model.embed_tokens.weight");  // tie_word_embeddings: the head is the table
    MXT_CHECK(it != hf.end(), dir, ": no tensor `", p.hf, "` (a ", h.architecture,
              " of this config has one)");
    const io::StTensor& t = it->second;
    MXT_CHECK(t.shape == p.shape, dir, ": tensor `", t.name, "` has shape ",
              io::shape_str(t.shape), ", the config implies ", io::shape_str(p.shape));
    float* x = mx.at(p.mx)->data.data() + p.offset;
    to_f32(t, x, dir);
    const int64_t n = numel(p.shape);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[i]) && bad++ == 0) first = i;
    MXT_CHECK(bad == 0 || allow_nonfinite, dir, ": tensor `", t.name, "` holds ", bad,
              " non-finite value(s) (NaN or Inf) of ", n, ", the first at element ", first,
              " (", x[first >= 0 ? first : 0], "); a model with them cannot train or generate: "
              "fix the weights (or pass --allow-nonfinite to `mxtrain import` to keep them)");
    used.insert(t.name);
  }
  for (const auto& [name, t] : hf)
    MXT_CHECK(used.count(name) || name.ends_with(".rotary_emb.inv_freq"), dir,
              ": unexpected tensor `", name, "` (not part of a ", h.architecture,
              " mxtrain can run)");
  return h;
}

std::vector<std::string> apply_model(TrainConfig& cfg, const HfModel& h) {
  std::vector<std::string> notes;
  auto note = [&](const char* key, auto before, auto after) {
    if (before != after)
      notes.push_back(std::string("model.") + key + ": " + std::to_string(before) + " -> " +
                      std::to_string(after));
  };
  const ModelConfig& a = cfg.model;
  const ModelConfig& b = h.model;
  note("vocab_size", a.vocab_size, b.vocab_size);
  note("d_model", a.d_model, b.d_model);
  note("n_layers", a.n_layers, b.n_layers);
  note("n_heads", a.n_heads, b.n_heads);
  note("d_ff", a.d_ff, b.d_ff);
  note("max_seq_len", a.max_seq_len, b.max_seq_len);
  note("rms_eps", a.rms_eps, b.rms_eps);
  note("rope_theta", a.rope_theta, b.rope_theta);
  note("moe.num_experts", a.moe_num_experts, b.moe_num_experts);
  if (b.moe_num_experts > 0) {
    note("moe.top_k", a.moe_top_k, b.moe_top_k);
    note("moe.d_ff", a.moe_d_ff, b.moe_d_ff);
    note("moe.every", a.moe_every, b.moe_every);
  }
  if (!cfg.tokenizer.empty()) {
    const corpus::Tokenizer mine = corpus::Tokenizer::open(cfg.tokenizer);
    const corpus::Tokenizer theirs = corpus::Tokenizer::open(h.tokenizer);
    MXT_CHECK(mine.id() == theirs.id(), "--init-from ", h.dir, ": its tokenizer is ",
              theirs.id().str(), " but model.tokenizer (", cfg.tokenizer, ") is ",
              mine.id().str(), "; drop model.tokenizer to use the directory's");
  }
  if (cfg.tokenizer != h.tokenizer)
    notes.push_back("model.tokenizer: " + (cfg.tokenizer.empty() ? "bytes" : cfg.tokenizer) +
                    " -> " + (h.tokenizer.empty() ? "bytes" : h.tokenizer));
  cfg.model = b;
  cfg.tokenizer = h.tokenizer;
  return notes;
}

void load_weights(const HfModel& h, const std::vector<Parameter*>& params) {
  std::map<std::string, const io::NamedTensor*> by_name;
  for (const io::NamedTensor& t : h.tensors) by_name[t.name] = &t;
  for (Parameter* p : params) {
    const auto it = by_name.find(p->name);
    MXT_CHECK(it != by_name.end() && it->second->shape == p->full_shape(), "--init-from ", h.dir,
              ": no tensor for `", p->name, "` of shape ", io::shape_str(p->full_shape()));
    MXT_CHECK(p->value.size() == size_t(p->numel()), "--init-from: `", p->name,
              "` is not materialised on this rank");
    if (p->split.sliced())  // a tensor- or expert-parallel slice of the whole tensor
      slice_of(p->split, it->second->data.data(), p->value.data());
    else
      std::copy(it->second->data.begin(), it->second->data.end(), p->value.begin());
    ++p->version;
  }
}

std::string import_to_checkpoint(const std::string& dir, const std::string& out,
                                 TrainConfig base, bool allow_nonfinite) {
  const HfModel h = import_dir(dir, true, allow_nonfinite);
  apply_model(base, h);
  base.training.seq_len = std::min(base.training.seq_len, base.model.max_seq_len);
  base = parse_config(config_to_yaml(base), dir + "/config.json (imported)");
  base.tokenizer_model = corpus::Tokenizer::open(base.tokenizer).model_bytes();
  InferenceModel model(base.model);
  std::vector<Parameter*> params = model.parameters();
  load_weights(h, params);
  std::vector<FloatBuffer> m, v;
  for (Parameter* p : params) {
    m.emplace_back(size_t(p->numel()), 0.f);
    v.emplace_back(size_t(p->numel()), 0.f);
  }
  TrainerState st;
  st.global_batch = int64_t(base.training.micro_batch_size) * base.training.grad_accum;
  save_training_checkpoint(out, base, params, m, v, st);
  return out + "/step_0";
}

}  // namespace mxtrain::hf
