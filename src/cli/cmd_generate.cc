// cli/cmd_generate.cc — `mxtrain generate`: continue a prompt with a trained checkpoint.
//
// Reads the latest complete checkpoint under --checkpoint (train/checkpointing.h), encodes the
// prompt with the checkpoint's tokenizer (bytes, or its SentencePiece model), runs the model in
// FP32 over a KV cache (nn/generate.h) and prints the prompt and its continuation to stdout as
// they are produced, each token as the bytes it stands for: readable text by default
// (printable ASCII, newline, tab and valid UTF-8 as they are, any other byte as \xNN), the
// bytes unchanged with --raw, or one JSON object with --json. Every argument is checked before
// the checkpoint is read; load and speed lines go to stderr. Details: docs/generate.md.
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "mxtrain/common.h"
#include "mxtrain/io/npy.h"
#include "mxtrain/io/output_check.h"
#include "mxtrain/nn/generate.h"
#include "mxtrain/train/checkpointing.h"

namespace mxtrain::cli {
namespace {

// More new tokens than this is a mistake, not a request (a million bytes of text).
constexpr int64_t kMaxNewTokens = 1000000;

struct GenerateArgs {
  std::string checkpoint, prompt, logits_out;
  int64_t max_new_tokens = 200;
  uint64_t seed = 1;
  double temperature = 0.8;  // double, so --json echoes 0.8 rather than its float rounding
  int top_k = 40, context_keep = 0;
  bool json = false, raw = false, quiet = false;
};

// Written and flushed at once, so the text appears as it is generated.
void write_out(const std::string& s) {
  const bool ok = std::fwrite(s.data(), 1, s.size(), stdout) == s.size();
  MXT_CHECK(ok && std::fflush(stdout) == 0, "cannot write to stdout: ", std::strerror(errno));
}

int run_generate(const GenerateArgs& a) {
  MXT_CHECK(!a.prompt.empty(), "--prompt is empty; give at least one byte of text");
  MXT_CHECK(a.max_new_tokens >= 0 && a.max_new_tokens <= kMaxNewTokens,
            "--max-new-tokens must be between 0 and ", kMaxNewTokens, ", got ",
            a.max_new_tokens);
  MXT_CHECK(std::isfinite(float(a.temperature)) && a.temperature >= 0.0,
            "--temperature must be finite and >= 0 (0 = greedy), got ", a.temperature);
  MXT_CHECK(a.top_k >= 0, "--top-k must be >= 0 (0 = every token), got ", a.top_k);
  MXT_CHECK(a.context_keep >= 0, "--context-keep must be >= 0 (0 = max_seq_len / 2), got ",
            a.context_keep);
  io::check_output_file(a.logits_out, "--logits-out");
  io::check_outputs_apart({{"--logits-out", a.logits_out}}, {{"--checkpoint", a.checkpoint}});
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointModel ck = load_checkpoint_model(a.checkpoint);
  const ModelConfig& mc = ck.config.model;
  MXT_CHECK(a.context_keep <= mc.max_seq_len, "--context-keep ", a.context_keep,
            " is larger than the model's max_seq_len = ", mc.max_seq_len);
  const corpus::Tokenizer& tok = ck.tokenizer;
  MXT_CHECK(tok.is_bytes() || tok.vocab_size() <= mc.vocab_size, "checkpoint ", ck.dir,
            ": its tokenizer has ", tok.vocab_size(), " pieces, more than the model's "
            "vocabulary of ", mc.vocab_size);
  std::vector<int32_t> prompt;
  tok.encode(a.prompt, prompt);
  for (size_t i = 0; i < prompt.size(); ++i)
    MXT_CHECK(prompt[i] < mc.vocab_size, "--prompt byte ", i, " is ", prompt[i], " (",
              escape_bytes(a.prompt.substr(i, 1)), "), outside the model's vocabulary of ",
              mc.vocab_size, " tokens");
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!a.quiet) {
    std::fprintf(stderr, "loaded %s (step %lld, recipe %s, d_model %d, %d layers%s, tokenizer "
                 "%s) in %.2f s\n", ck.dir.c_str(), (long long)ck.step,
                 ck.config.precision.recipe.name.c_str(), mc.d_model, mc.n_layers,
                 mc.moe_num_experts > 0 ? ", MoE" : "", tok.id().str().c_str(), load_s);
    if (int64_t(prompt.size()) > mc.max_seq_len)
      std::fprintf(stderr, "warning: the prompt has %zu tokens, more than max_seq_len = %d; the "
                   "model reads its last %d\n", prompt.size(), mc.max_seq_len, mc.max_seq_len);
  }
  if (!a.logits_out.empty()) {  // the logits after the prompt, [V] FP32
    std::vector<float> logits(size_t(mc.vocab_size));
    const int n = int(std::min<size_t>(prompt.size(), size_t(mc.max_seq_len)));
    ck.model->reset();
    ck.model->append(prompt.data() + prompt.size() - n, n, logits.data());
    io::write_npy(a.logits_out, io::npy_from_f32(logits.data(), {int64_t(logits.size())}));
  }

  GenerateOptions opt;
  opt.max_new_tokens = a.max_new_tokens;
  opt.sampling.temperature = float(a.temperature);
  opt.sampling.top_k = a.top_k;
  opt.sampling.seed = a.seed;
  opt.context_keep = a.context_keep;
  opt.vocab_limit = tok.is_bytes() ? 0 : tok.vocab_size();
  ByteEscaper esc;
  std::string continuation;
  auto emit = [&](const std::string& bytes) {
    if (a.raw) {
      write_out(bytes);
      return;
    }
    std::string s;
    for (char c : bytes) s += esc.feed(uint8_t(c));
    write_out(s);
  };
  if (!a.json) emit(a.prompt);
  GenerateStats st;
  const std::vector<int32_t> ids = generate(*ck.model, prompt, opt, [&](int32_t id) {
    const std::string& b = tok.token_bytes(id);
    continuation += b;
    if (!a.json) emit(b);
  }, &st);
  const double gen_s = st.prefill_s + st.decode_s;
  const double tok_s = gen_s > 0 ? double(st.new_tokens) / gen_s : 0.0;
  if (a.json) {
    const nlohmann::json j = {{"prompt", escape_bytes(a.prompt)},
                              {"continuation", escape_bytes(continuation)},
                              {"new_tokens", st.new_tokens},
                              {"tokens_per_s", tok_s},
                              {"prefill_s", st.prefill_s},
                              {"decode_s", st.decode_s},
                              {"cpu_s", st.cpu_s},
                              {"slides", st.slides},
                              {"seed", a.seed},
                              {"temperature", a.temperature},
                              {"top_k", a.top_k},
                              {"checkpoint", ck.dir},
                              {"step", ck.step},
                              {"tokenizer", tok.id().str()},
                              {"prompt_tokens", prompt},
                              {"tokens", ids}};
    write_out(j.dump() + "\n");
  } else if (!a.raw) {
    write_out(esc.finish() + "\n");
  }
  if (!a.quiet)
    std::fprintf(stderr, "generated %lld tokens in %.3f s (%.1f tokens/s; prompt %lld tokens "
                 "in %.3f s%s)\n", (long long)st.new_tokens, gen_s, tok_s,
                 (long long)st.prompt_tokens_read, st.prefill_s,
                 st.slides ? (", window slides: " + std::to_string(st.slides)).c_str() : "");
  return 0;
}

MXT_REGISTER_COMMAND("generate", [](CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand(
      "generate",
      "Continue a prompt with a model trained by `mxtrain train --checkpoint-dir DIR` (the "
      "latest complete checkpoint; FP32 inference from the master weights). Prints the prompt "
      "and the continuation to stdout.");
  sub->add_option("--checkpoint", a->checkpoint,
                  "Checkpoint directory written by `mxtrain train --checkpoint-dir` (or one "
                  "of its step_<N> directories)")->required();
  sub->add_option("--prompt", a->prompt, "Text to continue (bytes; at least one)")->required();
  sub->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate (default 200)");
  sub->add_option("--seed", a->seed, "Seed of the sampling stream (default 1)");
  sub->add_option("--temperature", a->temperature,
                  "Softmax temperature; 0 = greedy (default 0.8)");
  sub->add_option("--top-k", a->top_k, "Sample among the K likeliest tokens; 0 = all (default 40)");
  sub->add_option("--context-keep", a->context_keep,
                  "Tokens kept when the context window is full and slides (default "
                  "max_seq_len / 2; max_seq_len keeps the full window at the cost of "
                  "re-reading it for every new token)");
  auto* json = sub->add_flag("--json", a->json,
                             "Print one JSON object: prompt, continuation (escaped as in the "
                             "text output), tokens_per_s, seed, ...");
  sub->add_flag("--raw", a->raw, "Write the bytes unchanged (no \\xNN escapes, no final newline)")
      ->excludes(json);
  sub->add_flag("--quiet", a->quiet, "No load and speed lines on stderr");
  sub->add_option("--logits-out", a->logits_out,
                  "Also write the logits after the prompt (its last position) as a float32 .npy");
  sub->callback([a] { exit_code() = run_generate(*a); });
});

}  // namespace
}  // namespace mxtrain::cli
