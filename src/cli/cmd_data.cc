// cli/cmd_data.cc — `mxtrain tokenizer train`, `mxtrain tokenizer encode` and `mxtrain
// prepare-data`: a SentencePiece tokenizer from text, the ids of one text, and text into token
// shards (corpus/tokenizer.h, corpus/prepare.h).
//
// Every argument is checked before any work; outputs are written atomically (the model file,
// the shard directory), so an error leaves nothing behind. prepare-data shows a progress bar
// on stderr and ends with one summary line (or one JSON object on stdout with --json).
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "mxtrain/common.h"
#include "mxtrain/corpus/prepare.h"
#include "mxtrain/corpus/tokenizer.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/output_check.h"

namespace mxtrain::cli {
namespace {

struct TokTrainArgs {
  std::vector<std::string> inputs;
  std::string out;
  int vocab_size = 4096;
  int64_t max_sentences = 2000000;
  bool quiet = false;
};

// Each --input against the output.
std::vector<io::NamedPath> inputs_of(const std::vector<std::string>& inputs) {
  std::vector<io::NamedPath> v;
  for (const std::string& in : inputs) v.push_back({"--input", in});
  return v;
}

int run_tokenizer_train(const TokTrainArgs& a) {
  io::check_output_file(a.out, "--out");
  io::check_outputs_apart({{"--out", a.out}}, inputs_of(a.inputs));
  if (!a.quiet)
    std::fprintf(stderr, "training a %d-piece BPE SentencePiece tokenizer...\n", a.vocab_size);
  corpus::TokenizerTrainOptions o;
  o.inputs = a.inputs;
  o.vocab_size = a.vocab_size;
  o.max_sentences = a.max_sentences;
  corpus::TokenizerTrainStats st;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string model = corpus::train_tokenizer(o, &st);
  // Loading it back checks it is a tokenizer mxtrain accepts before it is written.
  const corpus::Tokenizer tok = corpus::Tokenizer::from_model(model, "the trained model");
  io::write_file_atomic(a.out, model);
  if (!a.quiet)
    std::fprintf(stderr, "wrote %s: %d pieces, %s, from %lld of %lld lines (%.1f MB of text) "
                 "in %.1f s\n", a.out.c_str(), tok.vocab_size(), tok.id().str().c_str(),
                 (long long)st.lines_used, (long long)st.lines_seen, st.text_bytes * 1e-6,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

struct TokEncodeArgs {
  std::string tokenizer, text, input;
  bool json = false;
};

// The ids of a text, by the Encoder prepare-data tokenizes a corpus with (and generate, its
// prompt): byte-exact SentencePiece encoding, or the bytes themselves.
int run_tokenizer_encode(const TokEncodeArgs& a) {
  MXT_CHECK(a.text.empty() != a.input.empty(), "tokenizer encode: give the text as --text TEXT "
            "or --input FILE (one of them)");
  const corpus::Tokenizer tok = corpus::Tokenizer::open(a.tokenizer);
  const std::string text = a.input.empty() ? a.text : io::read_text_file(a.input);
  std::vector<int32_t> ids;
  corpus::Encoder(tok).encode(text, ids);
  if (a.json) {
    const nlohmann::json j = {{"tokenizer", tok.id().str()}, {"bytes", text.size()},
                              {"ids", ids}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}

struct PrepareArgs {
  std::vector<std::string> inputs;
  std::string tokenizer, out;
  double val_fraction = 0.05;
  int64_t shard_tokens = int64_t(1) << 28;
  bool json = false, quiet = false;
};

int run_prepare(const PrepareArgs& a) {
  corpus::PrepareOptions o;
  o.inputs = a.inputs;
  o.out_dir = a.out;
  o.val_fraction = a.val_fraction;
  o.shard_tokens = a.shard_tokens;
  MXT_CHECK(a.val_fraction > 0 && a.val_fraction < 0.5, "--val-fraction must be in (0, 0.5), "
            "got ", a.val_fraction);
  MXT_CHECK(a.shard_tokens >= 1, "--shard-tokens must be >= 1, got ", a.shard_tokens);
  io::check_output_dir(a.out, "--out");
  std::vector<io::NamedPath> inputs = inputs_of(a.inputs);
  if (a.tokenizer != "bytes") inputs.push_back({"--tokenizer", a.tokenizer});
  io::check_outputs_apart({{"--out", a.out, /*replaced=*/true}}, inputs);
  const corpus::Tokenizer tok = corpus::Tokenizer::open(a.tokenizer);
  ProgressBar bar("prepare-data", "MB", !a.quiet);
  const corpus::PrepareStats st =
      corpus::prepare_data(o, tok, [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  bar.finish();
  const double mbs = st.seconds > 0 ? st.input_bytes * 1e-6 / st.seconds : 0;
  if (a.json) {
    const nlohmann::json j = {{"out", a.out}, {"tokenizer", tok.id().str()},
                              {"vocab_size", tok.vocab_size()}, {"input_bytes", st.input_bytes},
                              {"text_bytes", st.text_bytes}, {"train_tokens", st.train_tokens},
                              {"val_tokens", st.val_tokens}, {"train_shards", st.train_shards},
                              {"seconds", st.seconds}, {"mb_per_s", mbs}};
    std::printf("%s\n", j.dump().c_str());
  }
  if (!a.quiet)
    std::fprintf(stderr, "wrote %s: %lld training tokens in %d shard(s), %lld validation tokens "
                 "(%.2f bytes/token), %s, %.1f MB in %.1f s (%.1f MB/s)\n", a.out.c_str(),
                 (long long)st.train_tokens, st.train_shards, (long long)st.val_tokens,
                 double(st.text_bytes) / double(st.train_tokens + st.val_tokens),
                 tok.id().str().c_str(), st.input_bytes * 1e-6, st.seconds, mbs);
  return 0;
}

MXT_REGISTER_COMMAND("tokenizer", [](CLI::App& app) {
  CLI::App* g =
      group(app, "tokenizer", "Tokenizers: train a SentencePiece model, encode a text");
  auto a = std::make_shared<TokTrainArgs>();
  CLI::App* sub = g->add_subcommand(
      "train", "Train a BPE SentencePiece tokenizer on text (byte-exact: identity "
               "normalization, spaces kept, byte fallback)");
  sub->add_option("--input", a->inputs, "Text files, directories of them, or `fortunes`")
      ->required();
  sub->add_option("--vocab-size", a->vocab_size, "Pieces in the vocabulary (default 4096)");
  sub->add_option("--max-sentences", a->max_sentences,
                  "Lines to train on at most; a fixed sample is taken when there are more "
                  "(default 2000000)");
  sub->add_option("--out", a->out, "The model file to write (e.g. tok.model)")->required();
  sub->add_flag("--quiet", a->quiet, "No progress or summary lines");
  sub->callback([a] { exit_code() = run_tokenizer_train(*a); });

  auto e = std::make_shared<TokEncodeArgs>();
  CLI::App* enc = g->add_subcommand(
      "encode", "Print the token ids of a text (as prepare-data tokenizes it): one line of "
                "ids separated by spaces, or JSON");
  enc->add_option("--tokenizer", e->tokenizer,
                  "SentencePiece model (from `mxtrain tokenizer train`, a checkpoint's or an "
                  "export's tokenizer.model), or `bytes`")->required();
  CLI::Option* text = enc->add_option("--text", e->text, "The text (bytes, as given)");
  enc->add_option("--input", e->input, "A file whose bytes are the text")->excludes(text);
  enc->add_flag("--json", e->json, "Print one JSON object: tokenizer, bytes, ids");
  enc->callback([e] { exit_code() = run_tokenizer_encode(*e); });
});

MXT_REGISTER_COMMAND("prepare-data", [](CLI::App& app) {
  auto a = std::make_shared<PrepareArgs>();
  CLI::App* sub = app.add_subcommand(
      "prepare-data", "Tokenize text into memory-mappable token shards plus a validation shard "
                      "(a directory for data.path)");
  sub->add_option("--input", a->inputs, "Text files, directories of them, or `fortunes`")
      ->required();
  sub->add_option("--tokenizer", a->tokenizer,
                  "SentencePiece model (from `mxtrain tokenizer train`), or `bytes` for "
                  "byte-level tokens")->required();
  sub->add_option("--out", a->out, "Directory to write (a new path, or an earlier output "
                  "of prepare-data, which is replaced; files mxtrain did not write there are "
                  "kept)")->required();
  sub->add_option("--val-fraction", a->val_fraction,
                  "Fraction of the input held out as the validation shard: its end (default "
                  "0.05)");
  sub->add_option("--shard-tokens", a->shard_tokens,
                  "Tokens per training shard at most (default 268435456)");
  sub->add_flag("--json", a->json, "Print one JSON object with the counts on stdout");
  sub->add_flag("--quiet", a->quiet, "No progress bar or summary line");
  sub->callback([a] { exit_code() = run_prepare(*a); });
});

}  // namespace
}  // namespace mxtrain::cli
