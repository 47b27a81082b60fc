// cli/cmd_eval.cc — `mxtrain eval`: loss, perplexity and bits per byte of a checkpoint on
// held-out data (train/eval.h). --data is a token-shard directory made with the checkpoint's
// tokenizer (its validation shard), or for byte-level checkpoints text (its held-out end).
// One summary line on stdout, or one JSON object with --json; a progress bar on stderr.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "mxtrain/common.h"
#include "mxtrain/train/checkpointing.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/eval.h"

namespace mxtrain::cli {
namespace {

struct EvalArgs {
  std::string checkpoint, data;
  int seq_len = 0;
  int64_t max_tokens = 0;
  bool json = false, quiet = false;
};

int run_eval(const EvalArgs& a) {
  MXT_CHECK(a.seq_len >= 0, "--seq-len must be >= 0 (0 = the training seq_len), got ",
            a.seq_len);
  MXT_CHECK(a.max_tokens >= 0, "--max-tokens must be >= 0 (0 = all), got ", a.max_tokens);
  CheckpointModel ck = load_checkpoint_model(a.checkpoint);
  DataConfig d = ck.config.data;
  d.path = a.data;
  const std::unique_ptr<TokenData> data = open_training_data(d, ck.tokenizer);
  const int T = a.seq_len > 0 ? a.seq_len : ck.config.training.seq_len;
  ProgressBar bar("eval", "tokens", !a.quiet && !a.json);
  const EvalResult r = evaluate(*ck.model, ck.tokenizer, *data, T, a.max_tokens,
                                [&](int64_t done, int64_t total) {
                                  bar.update(uint64_t(done), uint64_t(total));
                                });
  bar.finish();
  if (a.json) {
    const nlohmann::json j = {{"checkpoint", ck.dir},       {"step", ck.step},
                              {"data", data->description()}, {"tokenizer", ck.tokenizer.id().str()},
                              {"seq_len", T},               {"tokens", r.tokens},
                              {"bytes", r.bytes},           {"loss", r.loss},
                              {"perplexity", r.perplexity}, {"nats_per_byte", r.nats_per_byte},
                              {"bits_per_byte", r.bits_per_byte}, {"seconds", bar.seconds()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s step %lld on %s: %lld tokens (%llu bytes), loss %.4f nats/token, perplexity "
                "%.2f, %.4f bits/byte (%.4f nats/byte)\n", ck.dir.c_str(), (long long)ck.step,
                data->description().c_str(), (long long)r.tokens, (unsigned long long)r.bytes,
                r.loss, r.perplexity, r.bits_per_byte, r.nats_per_byte);
  }
  return 0;
}

MXT_REGISTER_COMMAND("eval", [](CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand(
      "eval", "Loss, perplexity and bits per byte of a checkpoint on held-out data (the "
              "validation shard of a prepare-data directory)");
  sub->add_option("--checkpoint", a->checkpoint,
                  "Checkpoint directory (its latest step) or a step_<N> directory")->required();
  sub->add_option("--data", a->data,
                  "Token-shard directory made with the checkpoint's tokenizer (byte-level "
                  "checkpoints: also text, whose held-out end is read)")->required();
  sub->add_option("--seq-len", a->seq_len,
                  "Window length (default: the training seq_len)");
  sub->add_option("--max-tokens", a->max_tokens, "Predict at most this many tokens (0 = all)");
  sub->add_flag("--json", a->json, "Print one JSON object");
  sub->add_flag("--quiet", a->quiet, "No progress bar");
  sub->callback([a] { exit_code() = run_eval(*a); });
});

}  // namespace
}  // namespace mxtrain::cli
