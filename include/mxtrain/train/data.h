// mxtrain/train/data.h — the training data and deterministic batch sampling.
//
// Two sources give the trainer token ids: byte-level text read into memory (TextCorpus; the
// default corpus is the English text of the Debian `fortunes` package, corpus/text_input.h),
// whose last `val_fraction` of the bytes is held out, and a token-shard directory
// (ShardCorpus; `mxtrain prepare-data`, corpus/shards.h), memory-mapped, never read whole, with
// its own validation shard. Training sequences are drawn at offsets given by a counter-based
// hash of (seed, step, sequence index), so the data order depends only on those numbers:
// resuming at step N reproduces the same batches, and ranks of a distributed run can each take
// their share of a step's sequences without talking to each other.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/corpus/shards.h"
#include "mxtrain/corpus/tokenizer.h"

namespace mxtrain {

struct DataConfig;   // train/config.h
struct TrainConfig;  // train/config.h

class TokenData {
 public:
  virtual ~TokenData() = default;
  virtual int64_t train_tokens() const = 0;
  virtual int64_t val_tokens() const = 0;
  // Tokens [pos, pos + n) of the training split / validation split.
  virtual void read_train(int64_t pos, int64_t n, int32_t* out) const = 0;
  virtual void read_val(int64_t pos, int64_t n, int32_t* out) const = 0;
  virtual const std::string& description() const = 0;
  // 64-bit summary of the data: ranks compare it to make sure they read the same corpus (each
  // opens data.path on its own machine).
  virtual uint64_t content_hash() const = 0;

  // Sequence `seq_index` of training step `step`: tokens [T] and next-token targets [T].
  void train_sequence(uint64_t seed, int64_t step, int64_t seq_index, int T, int32_t* tokens,
                      int32_t* targets) const;
  // Validation sequence i of n evenly spaced ones (fixed set, same every evaluation).
  void val_sequence(int64_t i, int64_t n, int T, int32_t* tokens, int32_t* targets) const;
};

// Byte-level text held in memory (vocabulary 256).
class TextCorpus final : public TokenData {
 public:
  // `path` is a text file, a directory of fortune files, or "fortunes" for the default.
  static TextCorpus load(const std::string& path, float val_fraction);
  static TextCorpus from_text(std::string text, float val_fraction);

  int64_t train_size() const { return int64_t(train_.size()); }
  int64_t val_size() const { return int64_t(val_.size()); }
  int64_t train_tokens() const override { return train_size(); }
  int64_t val_tokens() const override { return val_size(); }
  void read_train(int64_t pos, int64_t n, int32_t* out) const override;
  void read_val(int64_t pos, int64_t n, int32_t* out) const override;
  const std::string& description() const override { return description_; }
  // 64-bit FNV-1a of the training and validation bytes.
  uint64_t content_hash() const override;
  // The largest byte value in either split (the vocabulary the text needs is max_byte() + 1).
  int max_byte() const { return max_byte_; }

 private:
  std::vector<uint8_t> train_, val_;
  int max_byte_ = 0;
  std::string description_;
};

// A token-shard directory, memory-mapped.
class ShardCorpus final : public TokenData {
 public:
  explicit ShardCorpus(corpus::TokenShards shards);
  int64_t train_tokens() const override { return shards_.train_tokens(); }
  int64_t val_tokens() const override { return shards_.val_tokens(); }
  void read_train(int64_t pos, int64_t n, int32_t* out) const override {
    shards_.read_train(pos, n, out);
  }
  void read_val(int64_t pos, int64_t n, int32_t* out) const override {
    shards_.read_val(pos, n, out);
  }
  const std::string& description() const override { return description_; }
  uint64_t content_hash() const override { return shards_.content_hash(); }
  const corpus::TokenShards& shards() const { return shards_; }

 private:
  corpus::TokenShards shards_;
  std::string description_;
};

// The data of a run whose model has tokenizer `tok` (byte-level or SentencePiece): data.path a
// token-shard directory made with that tokenizer, or (byte-level only) text. Throws naming
// data.path when the shards were made with another tokenizer, and when a SentencePiece model
// is given text instead of shards.
std::unique_ptr<TokenData> open_training_data(const DataConfig& d, const corpus::Tokenizer& tok);

// The tokenizer of a training run: model.tokenizer (a SentencePiece model) or byte-level when
// it is empty. Reads the file into cfg.tokenizer_model (what checkpoints store) and checks that
// model.vocab_size holds its vocabulary.
corpus::Tokenizer open_run_tokenizer(TrainConfig& cfg);

uint64_t splitmix64(uint64_t x);

}  // namespace mxtrain
