// mxtrain/train/hf_llama.h — Hugging Face Llama / Mixtral export and import.
//
// mxtrain's GPT is a Llama: pre-norm RMSNorm (eps in FP32, then the weight multiply), rotary
// q/k, SwiGLU MLP, no biases, an untied LM head; its MoE blocks route as Mixtral does (softmax
// over all experts, top-k, renormalised). Export writes a directory transformers loads with
// LlamaForCausalLM (MixtralForCausalLM for MoE models):
//   config.json             the architecture and shape (hidden_size, intermediate_size, heads,
//                           rms_norm_eps, rope_theta, tie_word_embeddings, ...)
//   model.safetensors       FP32 tensors with HF's names and [out, in] layouts
//   generation_config.json  bos/eos ids and the context length
//   tokenizer.model, tokenizer_config.json   the SentencePiece model (LlamaTokenizer, no BOS
//                           or EOS added: the model was trained without them); absent for
//                           byte-level models
// Tensor mapping (docs/hf.md): embed.weight -> model.embed_tokens.weight; per layer i
// attention.norm.gain -> input_layernorm.weight, the fused qkv [3D, D] -> q_proj / k_proj /
// v_proj (rows 0..D-1, D..2D-1, 2D..3D-1: mxtrain's RoPE pairs (x_j, x_{j+hd/2}) within each
// head, HF's rotate_half order, so the rows need no permutation), attention.proj -> o_proj,
// mlp.norm.gain -> post_attention_layernorm.weight, fc1 [gate | up] -> gate_proj / up_proj,
// fc2 -> down_proj; MoE: router -> block_sparse_moe.gate, expert e of fc1 -> experts.e.w1
// (gate) / w3 (up), of fc2 -> experts.e.w2; final_norm.gain -> model.norm.weight, lm_head.
// Import reads such a directory (one model.safetensors or an index of shards; F32, BF16 or
// F16) back into mxtrain's parameters; export of an import reproduces every tensor byte for
// byte. What mxtrain cannot run is refused with one line naming it: grouped-query attention,
// biases, rope_scaling or a rope_parameters type other than default, sliding windows, another
// activation, a model with no rotary embedding, an MoE model whose layers are not all MoE.
// Settings a config.json leaves out take transformers' defaults for its architecture (rope_theta
// 10000 / 1e6, rms_norm_eps 1e-6 / 1e-5 for Llama / Mixtral).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mxtrain/io/checkpoint.h"
#include "mxtrain/nn/parameter.h"
#include "mxtrain/nn/transformer.h"
#include "mxtrain/train/config.h"

namespace mxtrain::hf {

// The HF tensors of a model whose mxtrain tensors (by parameter name, FP32) are `mx`, in
// mxtrain's parameter order. Throws naming what the Llama/Mixtral format cannot hold.
std::vector<io::NamedTensor> to_hf_tensors(const ModelConfig& m,
                                           const std::vector<io::NamedTensor>& mx);

struct ExportResult {
  std::string architecture;  // LlamaForCausalLM | MixtralForCausalLM
  size_t tensors = 0;
  uint64_t bytes = 0;        // of model.safetensors
  std::string tokenizer;     // TokenizerId::str()
  bool tied = false;         // lm_head equalled the embedding: written tied (no lm_head.weight)
};

// Writes the directory `out` (atomically, io/output_dir.h: an earlier export there is replaced,
// files mxtrain did not write are kept, a directory of other files is refused) from the latest
// checkpoint under `checkpoint` (or a step directory). A head equal to the embedding bit for
// bit is written tied (tie_word_embeddings true, no lm_head.weight), so an imported tied model
// exports as it came.
ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out);

// An HF directory read back.
struct HfModel {
  std::string dir, architecture;
  ModelConfig model;
  std::string tokenizer;                 // dir/tokenizer.model, or "" (byte-level)
  std::vector<io::NamedTensor> tensors;  // by mxtrain parameter name, FP32 (empty: config only)
  bool tied = false;                     // lm_head was the embedding (tie_word_embeddings)
};

// Reads dir/config.json (and with `weights` the safetensors). Throws naming the file and what
// is unsupported, and naming the tensor when a weight is NaN or infinite (unless
// `allow_nonfinite`: `mxtrain import --allow-nonfinite`, to inspect such a model).
HfModel import_dir(const std::string& dir, bool weights = true, bool allow_nonfinite = false);

// `train --init-from DIR`: the config's model section becomes the HF model's and
// model.tokenizer its tokenizer. Returns one "model.key: old -> new" line per change. Throws
// when model.tokenizer names another tokenizer than the directory's.
std::vector<std::string> apply_model(TrainConfig& cfg, const HfModel& h);
// Copies the imported weights into `params` (names and shapes must match; versions bumped).
void load_weights(const HfModel& h, const std::vector<Parameter*>& params);

// `mxtrain import`: an mxtrain checkpoint (step 0, AdamW moments zero, config = `base` with the
// imported model and tokenizer) of an HF directory, under `out`. Returns the step directory.
std::string import_to_checkpoint(const std::string& dir, const std::string& out,
                                 TrainConfig base, bool allow_nonfinite = false);

}  // namespace mxtrain::hf
