// Tests for Hugging Face export and import (train/hf_llama.h): the tensor mapping, the round
// trip (import then export reproduces every tensor byte for byte), tied heads and BF16/F16
// weights on import, an untrained tied head exported tied, transformers 5's rope_parameters and
// the architectures' defaults, every refusal, and `train --init-from` starting from exactly the
// exported weights. transformers itself referees in tests/python/test_hf_export.py.
#include "mxtrain/train/hf_llama.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/io_test_util.h"
#include "mxtrain/common.h"
#include "mxtrain/formats.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/safetensors.h"
#include "mxtrain/nn/generate.h"
#include "mxtrain/train/checkpointing.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/policy_oracle.h"
#include "mxtrain/train/precision.h"
#include "mxtrain/train/trainer.h"

namespace mxtrain {
namespace {
namespace fs = std::filesystem;

using io::testing::error_of;
using io::testing::ScratchDir;

TrainConfig config(bool moe) {
  std::string y = "model: {d_model: 32, n_layers: 2, n_heads: 4, d_ff: 48, max_seq_len: 16";
  if (moe) y += ", moe: {num_experts: 3, top_k: 2, d_ff: 24}";
  y += "}\ntraining: {steps: 3, seq_len: 16, micro_batch_size: 2, eval_every: 0, "
       "eval_batches: 1}\nprecision: {recipe: mxfp8}\n";
  return parse_config(y, "hf-test");
}

// A checkpoint of random weights under `dir` (its config re-emitted from `c`'s fields).
std::vector<io::NamedTensor> random_checkpoint(const TrainConfig& c, const std::string& dir) {
  const TrainConfig cfg = parse_config(config_to_yaml(c), "hf-test");
  InferenceModel m(cfg.model);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 0.5f);
  std::vector<FloatBuffer> mom, vel;
  std::vector<io::NamedTensor> out;
  for (Parameter* p : m.parameters()) {
    for (float& v : p->value) v = nd(rng);
    mom.emplace_back(p->value.size(), 0.f);
    vel.emplace_back(p->value.size(), 0.f);
    out.push_back({p->name, p->shape, std::vector<float>(p->value.begin(), p->value.end())});
  }
  TrainerState st;
  st.global_batch = 2;
  save_training_checkpoint(dir, cfg, m.parameters(), mom, vel, st);
  return out;
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}


// mxtrain tensors of model m whose element i holds i: where each HF value came from shows.
std::vector<io::NamedTensor> iota_tensors(const ModelConfig& m) {
  std::vector<io::NamedTensor> mx;
  InferenceModel shapes(m);
  for (Parameter* p : shapes.parameters()) {
    io::NamedTensor t{p->name, p->shape, std::vector<float>(size_t(p->numel()))};
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = float(i);
    mx.push_back(t);
  }
  return mx;
}

TEST(HfLlama, TensorNamesAndLayouts) {
  const TrainConfig c = config(false);
  const std::vector<io::NamedTensor> hf = hf::to_hf_tensors(c.model, iota_tensors(c.model));
  ASSERT_EQ(hf.size(), 1u + 2 * 9 + 2);
  auto find = [&](const std::string& n) -> const io::NamedTensor& {
    for (const auto& t : hf)
      if (t.name == n) return t;
    ADD_FAILURE() << "no " << n;
    return hf[0];
  };
  const int64_t D = 32, F = 48;
  // q, k, v: consecutive row blocks of the fused qkv, unpermuted (rotate_half order).
  EXPECT_EQ(find("model.layers.1.self_attn.q_proj.weight").data[0], 0.f);
  EXPECT_EQ(find("model.layers.1.self_attn.k_proj.weight").data[0], float(D * D));
  EXPECT_EQ(find("model.layers.1.self_attn.v_proj.weight").data[5], float(2 * D * D + 5));
  EXPECT_EQ(find("model.layers.0.mlp.up_proj.weight").data[0], float(F * D));  // fc1 = [gate|up]
  EXPECT_EQ(find("model.layers.0.mlp.gate_proj.weight").shape, (std::vector<int64_t>{F, D}));
  EXPECT_EQ(find("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{D, F}));
  EXPECT_EQ(find("model.layers.0.input_layernorm.weight").shape, (std::vector<int64_t>{D}));
  EXPECT_EQ(find("lm_head.weight").shape, (std::vector<int64_t>{256, D}));
  // Mixtral: expert e's w1 / w3 are the gate / up halves of its fc1 block.
  const TrainConfig cm = config(true);
  const std::vector<io::NamedTensor> moe = hf::to_hf_tensors(cm.model, iota_tensors(cm.model));
  const int64_t Fe = 24;
  for (const auto& t : moe) {
    if (t.name == "model.layers.0.block_sparse_moe.experts.2.w1.weight") {
      EXPECT_EQ(t.data[0], float(2 * 2 * Fe * D));
    }
    if (t.name == "model.layers.0.block_sparse_moe.experts.2.w3.weight") {
      EXPECT_EQ(t.data[0], float((2 * 2 + 1) * Fe * D));
    }
    if (t.name == "model.layers.0.block_sparse_moe.experts.1.w2.weight") {
      EXPECT_EQ(t.data[0], float(1 * D * Fe));
    }
    EXPECT_EQ(t.name.find("mlp."), std::string::npos) << t.name;
  }
}

// Export -> import gives the checkpoint's tensors exactly; import -> export gives the same
// files byte for byte.
TEST(HfLlama, RoundTripIsByteForByte) {
  for (bool moe : {false, true}) {
    ScratchDir d;
    const TrainConfig c = config(moe);
    const std::vector<io::NamedTensor> orig = random_checkpoint(c, d / "ck");
    const hf::ExportResult r = hf::export_checkpoint(d / "ck", d / "hf1");
    EXPECT_EQ(r.architecture, moe ? "MixtralForCausalLM" : "LlamaForCausalLM");
    EXPECT_EQ(r.tokenizer, "bytes");
    EXPECT_FALSE(r.tied);
    const hf::HfModel h = hf::import_dir(d / "hf1");
    EXPECT_FALSE(h.tied);
    EXPECT_EQ(h.tokenizer, "");
    ASSERT_EQ(h.tensors.size(), orig.size());
    for (size_t i = 0; i < orig.size(); ++i) {
      EXPECT_EQ(h.tensors[i].name, orig[i].name);
      EXPECT_EQ(h.tensors[i].shape, orig[i].shape);
      EXPECT_EQ(std::memcmp(h.tensors[i].data.data(), orig[i].data.data(),
                            orig[i].data.size() * 4), 0) << orig[i].name;
    }
    EXPECT_EQ(h.model.d_model, c.model.d_model);
    EXPECT_EQ(h.model.rms_eps, c.model.rms_eps);
    EXPECT_EQ(h.model.moe_num_experts, c.model.moe_num_experts);
    hf::import_to_checkpoint(d / "hf1", d / "ck2", c);
    hf::export_checkpoint(d / "ck2", d / "hf2");
    for (const char* f : {"model.safetensors", "config.json", "generation_config.json"})
      EXPECT_EQ(read(d / (std::string("hf1/") + f)), read(d / (std::string("hf2/") + f)))
          << f << " moe=" << moe;
    // Exporting over an earlier export replaces it; over another directory is refused.
    EXPECT_NO_THROW(hf::export_checkpoint(d / "ck", d / "hf1"));
    fs::create_directories(d / "mine");
    std::ofstream(d / "mine/notes.txt") << "keep";
    EXPECT_NE(error_of([&] { hf::export_checkpoint(d / "ck", d / "mine"); })
                  .find("is not an earlier export"),
              std::string::npos);
  }
}

// A hand-made HF directory: config.json plus tensors.
void write_hf(const std::string& dir, const std::string& config_json,
              const std::vector<io::StTensor>& tensors) {
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_json;
  std::vector<io::StTensorView> v;
  for (const auto& t : tensors) v.push_back({t.name, t.dtype, t.shape, t.data});
  io::write_safetensors(dir + "/model.safetensors", v, {{"format", "pt"}});
}

std::string llama_config(const std::string& extra = "") {
  return R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 256, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
    "max_position_embeddings": 16, "rms_norm_eps": 1e-06)" + extra + "}";
}

// The tensors of llama_config() from an exported model, converted to `dtype`, without some.
std::vector<io::StTensor> llama_tensors(const std::string& dtype,
                                        const std::set<std::string>& drop = {}) {
  TrainConfig c = config(false);
  c.model.n_layers = 1;
  InferenceModel m(c.model);
  std::vector<io::NamedTensor> mx;
  int k = 0;
  for (Parameter* p : m.parameters()) {
    io::NamedTensor t{p->name, p->shape, std::vector<float>(size_t(p->numel()))};
    for (float& v : t.data) v = float((k++ % 97) - 48) / 64.f;  // exact in BF16 and F16
    mx.push_back(t);
  }
  std::vector<io::StTensor> out;
  for (const io::NamedTensor& t : hf::to_hf_tensors(c.model, mx)) {
    if (drop.count(t.name)) continue;
    io::StTensor s{t.name, dtype, t.shape, {}};
    for (float v : t.data) {
      uint8_t b[4];
      size_t n = 4;
      if (dtype == "F32") {
        std::memcpy(b, &v, 4);
      } else if (dtype == "BF16") {
        const uint16_t h = f32_to_bf16(v);
        std::memcpy(b, &h, 2);
        n = 2;
      } else {  // F16 of these values: sign, exponent, 10-bit mantissa written out
        uint32_t u;
        std::memcpy(&u, &v, 4);
        uint16_t h = uint16_t((u >> 16) & 0x8000);
        if (v != 0.f)
          h |= uint16_t((((u >> 23) & 0xFF) - 112) << 10) | uint16_t((u >> 13) & 0x3FF);
        std::memcpy(b, &h, 2);
        n = 2;
      }
      s.data.insert(s.data.end(), b, b + n);
    }
    out.push_back(s);
  }
  return out;
}

TEST(HfLlama, ImportsTiedHeadsAndHalfPrecisionExactly) {
  ScratchDir d;
  const std::vector<io::StTensor> f32 = llama_tensors("F32");
  for (const char* dtype : {"BF16", "F16"}) {
    write_hf(d / dtype, llama_config(), llama_tensors(dtype));
    const hf::HfModel h = hf::import_dir(d / dtype);
    write_hf(d / "f32", llama_config(), f32);
    const hf::HfModel ref = hf::import_dir(d / "f32");
    ASSERT_EQ(h.tensors.size(), ref.tensors.size());
    for (size_t i = 0; i < h.tensors.size(); ++i)
      EXPECT_EQ(h.tensors[i].data, ref.tensors[i].data) << dtype << " " << h.tensors[i].name;
  }
  write_hf(d / "tied", llama_config(R"(, "tie_word_embeddings": true)"),
           llama_tensors("F32", {"lm_head.weight"}));
  const hf::HfModel t = hf::import_dir(d / "tied");
  EXPECT_TRUE(t.tied);
  EXPECT_EQ(t.tensors.front().name, "embed.weight");
  EXPECT_EQ(t.tensors.back().name, "lm_head.weight");
  EXPECT_EQ(t.tensors.front().data, t.tensors.back().data);
}

// An imported tied model (not trained since) exports tied: tie_word_embeddings true and no
// lm_head.weight, every other tensor as it came. A trained model's head is its own.
TEST(HfLlama, ExportsAnUntrainedTiedHeadTied) {
  ScratchDir d;
  const std::vector<io::StTensor> in = llama_tensors("F32", {"lm_head.weight"});
  write_hf(d / "tied", llama_config(R"(, "tie_word_embeddings": true)"), in);
  TrainConfig c = config(false);
  c.model.n_layers = 1;
  hf::import_to_checkpoint(d / "tied", d / "ck", c);
  const hf::ExportResult r = hf::export_checkpoint(d / "ck", d / "out");
  EXPECT_TRUE(r.tied);
  EXPECT_EQ(r.tensors, in.size());
  EXPECT_NE(read(d / "out/config.json").find("\"tie_word_embeddings\": true"), std::string::npos);
  const io::Safetensors st = io::read_safetensors(d / "out/model.safetensors");
  ASSERT_EQ(st.tensors.size(), in.size());
  for (const io::StTensor& t : st.tensors) {
    const auto it = std::find_if(in.begin(), in.end(),
                                 [&](const io::StTensor& x) { return x.name == t.name; });
    ASSERT_NE(it, in.end()) << t.name;
    EXPECT_EQ(t.data, it->data) << t.name;
  }
  const hf::HfModel back = hf::import_dir(d / "out");
  EXPECT_TRUE(back.tied);
  EXPECT_EQ(back.tensors.front().data, back.tensors.back().data);
  // One training step updates the head and the embedding apart: the export is untied.
  TrainConfig t = parse_config(
      "model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 48, max_seq_len: 16}\n"
      "training: {steps: 1, seq_len: 16, micro_batch_size: 2, eval_every: 0, eval_batches: 1}\n"
      "precision: {recipe: bf16}\n", "tied-train");
  hf::apply_model(t, hf::import_dir(d / "tied", /*weights=*/false));
  t = parse_config(config_to_yaml(t), "tied-train+hf");
  TrainOptions o;
  o.progress = false;
  o.print_decisions = false;
  o.init_from = d / "tied";
  o.checkpoint_dir = d / "trained";
  run_training(t, o);
  EXPECT_FALSE(hf::export_checkpoint(d / "trained", d / "out2").tied);
  EXPECT_NE(read(d / "out2/config.json").find("\"tie_word_embeddings\": false"),
            std::string::npos);
}

// transformers 5 writes the rotary base in `rope_parameters`; absent settings take the
// architecture's defaults (LlamaConfig: rope_theta 1e4, rms_norm_eps 1e-6; MixtralConfig: 1e6,
// 1e-5), as from_pretrained would run them.
TEST(HfLlama, ReadsRopeParametersAndTransformersDefaults) {
  ScratchDir d;
  auto cfg = [&](const std::string& name, const std::string& json) {
    write_hf(d / name, json, {});
    return hf::import_dir(d / name, /*weights=*/false).model;
  };
  const std::string rp = R"(, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"})";
  EXPECT_EQ(cfg("rp", llama_config(rp)).rope_theta, 500000.f);
  EXPECT_EQ(cfg("both", llama_config(rp + R"(, "rope_theta": 500000.0)")).rope_theta, 500000.f);
  EXPECT_EQ(cfg("null", llama_config(R"(, "rope_parameters": null, "rope_theta": 2e4)")).rope_theta,
            20000.f);
  const ModelConfig llama = cfg("llama", llama_config());
  EXPECT_EQ(llama.rope_theta, 10000.f);
  const std::string mixtral = R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 256,
    "hidden_size": 32, "intermediate_size": 24, "num_hidden_layers": 1, "num_attention_heads": 4,
    "max_position_embeddings": 16, "num_local_experts": 3, "num_experts_per_tok": 2})";
  const ModelConfig m = cfg("mixtral", mixtral);
  EXPECT_EQ(m.rope_theta, 1e6f);
  EXPECT_EQ(m.rms_eps, 1e-5f);
  std::string no_eps = llama_config();
  no_eps.replace(no_eps.find(", \"rms_norm_eps\": 1e-06"), 23, "");
  EXPECT_EQ(cfg("noeps", no_eps).rms_eps, 1e-6f);
  auto refused = [&](const std::string& name, const std::string& extra, const std::string& frag) {
    write_hf(d / name, llama_config(extra), {});
    const std::string msg = error_of([&] { hf::import_dir(d / name, false); });
    EXPECT_NE(msg.find(frag), std::string::npos) << msg;
  };
  refused("yarn", R"(, "rope_parameters": {"rope_theta": 1e4, "rope_type": "yarn"})",
          "`rope_parameters.rope_type` \"yarn\" is not supported");
  refused("factor",
          R"(, "rope_parameters": {"rope_theta": 1e4, "rope_type": "linear", "factor": 2})",
          "`rope_parameters.factor` is not supported");
  refused("disagree", rp + R"(, "rope_theta": 10000.0)", "disagree");
  refused("notobj", R"(, "rope_parameters": 3)", "`rope_parameters` is not an object");
}

TEST(HfLlama, RefusesWhatMxtrainCannotRun) {
  ScratchDir d;
  const std::vector<io::StTensor> ok = llama_tensors("F32");
  auto refused = [&](const std::string& cfg, const std::string& fragment,
                     const std::vector<io::StTensor>& tensors) {
    const std::string dir = d / ("x" + std::to_string(std::hash<std::string>()(cfg + fragment)));
    write_hf(dir, cfg, tensors);
    const std::string m = error_of([&] { hf::import_dir(dir); });
    EXPECT_NE(m.find(fragment), std::string::npos) << "message: " << m;
  };
  refused(llama_config(R"(, "num_key_value_heads": 2)"),
          "grouped-query attention (num_key_value_heads 2 of 4 heads) is not supported", ok);
  refused(llama_config(R"(, "rope_scaling": {"type": "linear", "factor": 2.0})"),
          "rope_scaling is not supported", ok);
  refused(llama_config(R"(, "attention_bias": true)"), "attention_bias true is not supported", ok);
  refused(llama_config(R"(, "hidden_act": "gelu")"), "hidden_act `gelu`", ok);
  refused(R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 256})",
          "architecture `GPT2LMHeadModel` is not supported", ok);
  refused(llama_config(), "no tensor `lm_head.weight`", llama_tensors("F32", {"lm_head.weight"}));
  std::vector<io::StTensor> extra = ok;
  extra.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {32}, std::vector<uint8_t>(128)});
  refused(llama_config(), "unexpected tensor `model.layers.0.self_attn.q_proj.bias`", extra);
  refused(llama_config(R"(, "intermediate_size": 50)").replace(
              llama_config().find("\"intermediate_size\": 48,"), 24, ""),
          "has shape (48, 32), the config implies (50, 32)", ok);
  refused(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
    "max_position_embeddings": 16})",
          "no tokenizer.model, and a vocabulary of 32000 is not byte-level", ok);
  // Export refusals: no rotary embedding; dense layers between MoE layers.
  TrainConfig c = config(false);
  c.model.rope_theta = 0;
  random_checkpoint(c, d / "norope");
  EXPECT_NE(error_of([&] { hf::export_checkpoint(d / "norope", d / "o1"); })
                .find("model.rope_theta is 0 (no rotary embedding)"),
            std::string::npos);
  c = config(true);
  c.model.moe_every = 2;
  random_checkpoint(c, d / "mixed");
  EXPECT_NE(error_of([&] { hf::export_checkpoint(d / "mixed", d / "o2"); })
                .find("export needs model.moe.every: 1"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d / "o1"));
  EXPECT_FALSE(fs::exists(d / "o2"));
}

// train --init-from: the first step's loss is the exported model's loss on that batch.
TEST(HfLlama, InitFromStartsFromTheExportedWeights) {
  ScratchDir d;
  TrainConfig c = config(false);
  TrainOptions o;
  o.progress = false;
  o.print_decisions = false;
  o.checkpoint_dir = d / "ck";
  run_training(c, o);
  hf::export_checkpoint(d / "ck", d / "hf");

  TrainConfig b = parse_config("model: {d_model: 16, n_layers: 1, n_heads: 2, d_ff: 16, "
                               "max_seq_len: 16}\ntraining: {steps: 2, seq_len: 16, "
                               "micro_batch_size: 2, eval_every: 0, eval_batches: 1}\n"
                               "precision: {recipe: mxfp8}\n", "other");
  const hf::HfModel h = hf::import_dir(d / "hf");
  const std::vector<std::string> notes = hf::apply_model(b, h);
  EXPECT_NE(std::find(notes.begin(), notes.end(), "model.d_model: 16 -> 32"), notes.end());
  EXPECT_EQ(b.model.d_model, 32);
  b = parse_config(config_to_yaml(b), "other+hf");
  TrainOptions ob;
  ob.progress = false;
  ob.print_decisions = false;
  ob.init_from = d / "hf";
  const TrainSummary s = run_training(b, ob);

  // The loss of the exported weights on step 0's batch, computed here.
  PolicyOracle oracle;
  PrecisionResolver resolver(b, oracle);  // as the trainer decides each module's precision
  GPT m(b.model, [&](const ModuleInfo& info) { return resolver(info); }, b.training.seed);
  m.set_swiglu_input(b.precision.swiglu_input);
  hf::load_weights(h, m.parameters());
  const TextCorpus data = TextCorpus::load("fortunes", b.data.val_fraction);
  std::vector<int32_t> tok(32), tgt(32);
  for (int i = 0; i < 2; ++i)
    data.train_sequence(b.training.seed, 0, i, 16, tok.data() + 16 * i, tgt.data() + 16 * i);
  const double want = m.forward_backward(tok.data(), tgt.data(), 2, 16, 1.f);
  ASSERT_FALSE(s.losses.empty());
  EXPECT_EQ(s.losses[0], want);
  // A model section that is not the directory's is refused.
  TrainConfig wrong = config(false);
  wrong.model.d_ff = 64;
  EXPECT_NE(error_of([&] { run_training(wrong, ob); }).find("--init-from"), std::string::npos);
}

}  // namespace
}  // namespace mxtrain
