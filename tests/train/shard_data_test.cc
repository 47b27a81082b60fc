// Training from token shards (train/data.h ShardCorpus): sequences are windows of the training
// split, also across shard boundaries, fixed by (seed, step, index); a run resumed from a
// checkpoint continues bit-identically; and the data is refused when it does not fit the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "io/io_test_util.h"
#include "mxtrain/corpus/prepare.h"
#include "mxtrain/train/checkpointing.h"
#include "mxtrain/train/config.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/trainer.h"

namespace mxtrain {
namespace {
using io::testing::error_of;
using io::testing::ScratchDir;

// Byte-level shards of 400 numbered lines, in shards of 997 tokens.
std::string make_shards(const ScratchDir& d, std::string* train_text = nullptr) {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog\n";
  std::ofstream(d / "in.txt") << text;
  corpus::PrepareOptions o;
  o.inputs = {d / "in.txt"};
  o.out_dir = d / "shards";
  o.shard_tokens = 997;
  corpus::prepare_data(o, corpus::Tokenizer::bytes());
  if (train_text) {
    const corpus::TokenShards s = corpus::TokenShards::open(o.out_dir);
    *train_text = text.substr(0, size_t(s.train_tokens()));
  }
  return o.out_dir;
}

TEST(ShardData, SequencesAreWindowsOfTheTrainingSplit) {
  ScratchDir d;
  std::string text;
  DataConfig dc;
  dc.path = make_shards(d, &text);
  const std::unique_ptr<TokenData> data = open_training_data(dc, corpus::Tokenizer::bytes());
  ASSERT_EQ(data->train_tokens(), int64_t(text.size()));
  ASSERT_GT(data->train_tokens(), 20 * 997);  // many shards
  const int T = 300;                           // longer than a shard's 997 / 3
  std::vector<int32_t> tok(T), tgt(T), tok2(T), tgt2(T);
  int crossing = 0;
  for (int64_t step = 0; step < 40; ++step) {
    data->train_sequence(7, step, 3, T, tok.data(), tgt.data());
    std::string window;
    for (int32_t t : tok) window += char(t);
    window += char(tgt[T - 1]);
    const size_t at = text.find(window);
    ASSERT_NE(at, std::string::npos) << "step " << step << ": not a window of the split";
    crossing += (at / 997) != ((at + T) / 997);
    for (int t = 0; t + 1 < T; ++t) ASSERT_EQ(tgt[t], tok[t + 1]);
    data->train_sequence(7, step, 3, T, tok2.data(), tgt2.data());
    EXPECT_EQ(tok, tok2);
    EXPECT_EQ(tgt, tgt2);
  }
  EXPECT_GT(crossing, 0) << "no sequence spanned two shards";
  data->train_sequence(7, 41, 3, T, tok2.data(), tgt2.data());
  EXPECT_NE(tok, tok2);
  EXPECT_NE(data->description().find("token shards"), std::string::npos);
}

TEST(ShardData, ResumeIsBitIdentical) {
  ScratchDir d;
  const std::string shards = make_shards(d);
  const TrainConfig c = parse_config(
      "model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, max_seq_len: 32}\n"
      "training: {steps: 6, seq_len: 32, micro_batch_size: 2, eval_every: 3, eval_batches: 2}\n"
      "data: {path: " + shards + "}\nprecision: {recipe: mxfp8}\n", "shard-resume");
  TrainOptions o;
  o.progress = false;
  o.print_decisions = false;
  o.checkpoint_dir = d / "full";
  const TrainSummary full = run_training(c, o);
  o.checkpoint_dir = d / "split";
  o.stop_after = 3;
  const TrainSummary first = run_training(c, o);
  o.stop_after = 0;
  o.resume = true;
  const TrainSummary second = run_training(c, o);
  std::vector<double> joined = first.losses;
  joined.insert(joined.end(), second.losses.begin(), second.losses.end());
  ASSERT_EQ(joined.size(), full.losses.size());
  for (size_t i = 0; i < joined.size(); ++i)
    EXPECT_EQ(std::memcmp(&joined[i], &full.losses[i], sizeof(double)), 0) << "step " << i + 1;
  EXPECT_EQ(second.final_val_loss, full.final_val_loss);
  EXPECT_EQ(full.final_val_nats_per_byte, full.final_val_loss);  // byte-level
  const CheckpointModel a = load_checkpoint_model(d / "full"), b = load_checkpoint_model(d / "split");
  const auto pa = a.model->parameters(), pb = b.model->parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(std::memcmp(pa[i]->value.data(), pb[i]->value.data(),
                          pa[i]->value.size() * sizeof(float)), 0) << pa[i]->name;
}

TEST(ShardData, RefusesDataThatDoesNotFitTheModel) {
  ScratchDir d;
  DataConfig dc;
  dc.path = make_shards(d);
  // Byte-level shards for a model whose tokenizer is another: refused, naming both.
  corpus::TokenizerTrainOptions t;
  t.inputs = {"/usr/share/games/fortunes/wisdom"};
  t.vocab_size = 400;
  const corpus::Tokenizer sp = corpus::Tokenizer::from_model(corpus::train_tokenizer(t), "sp");
  EXPECT_NE(error_of([&] { open_training_data(dc, sp); })
                .find("the shards were made with tokenizer bytes (vocabulary 256) but the "
                      "model's is sentencepiece crc32:"),
            std::string::npos);
  // A SentencePiece model given text.
  DataConfig text;
  text.path = d / "in.txt";
  EXPECT_NE(error_of([&] { open_training_data(text, sp); }).find("is text, but model.tokenizer"),
            std::string::npos);
  // A sequence longer than the validation split.
  const std::unique_ptr<TokenData> data = open_training_data(dc, corpus::Tokenizer::bytes());
  std::vector<int32_t> tok(data->val_tokens() + 1), tgt(tok.size());
  EXPECT_NE(error_of([&] { data->val_sequence(0, 1, int(tok.size()), tok.data(), tgt.data()); })
                .find("exceeds the validation split"),
            std::string::npos);
}

}  // namespace
}  // namespace mxtrain
