// mxtrain/nn/generate.h — text generation: the GPT forward one token at a time over a KV
// cache, sampling, and printing bytes as readable text.
//
// InferenceModel runs the training model's blocks (nn/transformer.h, nn/blocks.h) — token
// embedding, n_layers × [pre-norm causal attention with rotary q/k, pre-norm SwiGLU MLP or
// top-k MoE], final RMSNorm, untied lm_head — in their FP32 reference mode: plain FP32 from
// the FP32 master weights, whatever recipe trained them. Tokens are added to the attention
// blocks' KV caches, K and V each [max_seq_len, D] per layer, so the prompt is read once (one
// batched pass) and every later token costs one row through the layers plus attention over
// the cached keys. Attention, softmax and the MoE routing follow the training forward's
// arithmetic; the matrix products use gemm_f32 on n rows instead of B·T rows, so logits
// match a full-sequence forward up to FP32 summation order (tests/nn/generate_test.cc).
//
// generate() samples a continuation. When the window is full (max_seq_len tokens cached) the
// cache is rebuilt from the last `context_keep` tokens (default max_seq_len / 2) and
// generation goes on: the model was trained on windows of max_seq_len tokens at most, and a
// token's K and V depend on everything before it in the window (and on its position), so
// sliding means recomputing, not shifting. A prompt longer than max_seq_len is read from
// its last max_seq_len tokens. Sampling: temperature 0 = greedy (argmax, ties to the lower
// id); else softmax(logits / T) over the top_k largest logits (0 = all), drawn with a
// splitmix64 stream seeded by `seed` — the same seed gives the same tokens on every run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxtrain/nn/parameter.h"
#include "mxtrain/nn/transformer.h"

namespace mxtrain {

class InferenceModel {
 public:
  explicit InferenceModel(const ModelConfig& cfg);  // validates cfg; weights are zero
  InferenceModel(const InferenceModel&) = delete;
  InferenceModel& operator=(const InferenceModel&) = delete;

  const ModelConfig& config() const { return model_.config(); }
  // The weights: GPT::parameters() (value only, no grad).
  std::vector<Parameter*> parameters() { return model_.parameters(); }

  int cached() const { return cached_; }  // tokens in the cache (positions 0..cached-1)
  void reset() { cached_ = 0; }           // empty the cache (the weights stay)
  // Runs tokens [n] at positions cached()..cached()+n-1 (cached() + n <= max_seq_len), adds
  // their K and V to the cache and writes logits: [n, V] when every_position, else [V] of
  // the last token.
  void append(const int32_t* tokens, int n, float* logits, bool every_position = false);

 private:
  GPT model_;  // an inference model (GPT(config)): FP32 reference, KV caches, nothing kept
  int cached_ = 0;
};

// ---- sampling --------------------------------------------------------------------------------

struct SamplingOptions {
  float temperature = 0.8f;  // >= 0 and finite; 0 = greedy
  int top_k = 40;            // >= 0; 0 (or >= vocabulary) = every token
  uint64_t seed = 1;
  void validate() const;     // mxtrain::Error naming the bad field
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& opt);  // validates opt
  // A token id in [0, V) from logits [V] (all finite, else an error). Greedy sampling does
  // not use the random stream; otherwise one draw per call.
  int32_t sample(const float* logits, int64_t V);

 private:
  SamplingOptions opt_;
  uint64_t state_;
  std::vector<int32_t> order_;
  std::vector<double> weight_;
};

// ---- the generation loop -------------------------------------------------------------------

struct GenerateOptions {
  int64_t max_new_tokens = 200;
  SamplingOptions sampling;
  int context_keep = 0;  // tokens kept when the window slides, 1..max_seq_len; 0 = half of it
  // Ids [0, vocab_limit) may be sampled: the tokenizer's vocabulary (a model's may be larger);
  // 0 = byte_vocab(cfg).
  int64_t vocab_limit = 0;
};

struct GenerateStats {
  int64_t prompt_tokens_read = 0;  // prompt tokens the model read (<= max_seq_len)
  int64_t new_tokens = 0;
  int64_t slides = 0;              // times the cache was rebuilt from the last context_keep
  double prefill_s = 0, decode_s = 0;  // wall-clock time: the prompt pass, then the rest
  double cpu_s = 0;                     // CPU time of both, all threads (std::clock)
};

// Token ids a byte-level model may emit: ids >= 256 (which never occur as training targets)
// are not sampled.
inline int64_t byte_vocab(const ModelConfig& cfg) {
  return cfg.vocab_size < 256 ? cfg.vocab_size : 256;
}

// Samples up to max_new_tokens tokens after `prompt` (non-empty, ids < vocab_size) and
// returns them; on_token (may be empty) sees each one as soon as it is drawn. The model's
// cache is reset first.
std::vector<int32_t> generate(InferenceModel& model, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt,
                              const std::function<void(int32_t)>& on_token = {},
                              GenerateStats* stats = nullptr);

// ---- bytes as text -------------------------------------------------------------------------

// Turns a byte stream into readable UTF-8 text: printable ASCII, '\n', '\t' and complete,
// valid UTF-8 sequences of printable characters pass unchanged; every other byte becomes the
// four characters \xNN (lower-case hex). A sequence split across feed() calls is held back
// until it is complete (at most 3 bytes); finish() escapes what is left.
class ByteEscaper {
 public:
  std::string feed(uint8_t b);
  std::string finish();

 private:
  std::string flush_pending();
  uint8_t pending_[4] = {};
  int npending_ = 0, need_ = 0;
};

// The whole of `bytes` through one ByteEscaper.
std::string escape_bytes(const std::string& bytes);

}  // namespace mxtrain
