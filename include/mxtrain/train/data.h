// mxtrain/train/data.h — byte-level text corpus and deterministic batch sampling.
//
// Tokens are bytes (vocab 256). The default corpus is the English text of the Debian
// `fortunes` package; any text file works. The last `val_fraction` of the bytes is held out
// for validation. Training sequences are drawn at offsets given by a counter-based hash of
// (seed, step, sequence index), so the data order depends only on those numbers: resuming
// at step N reproduces the same batches, and ranks of a distributed run can each take
// their share of a step's sequences without talking to each other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mxtrain {

// Directory holding the fortunes files (Debian: /usr/share/games/fortunes).
std::string default_fortunes_dir();

class TextCorpus {
 public:
  // `path` is a text file, a directory of fortune files, or "fortunes" for the default.
  static TextCorpus load(const std::string& path, float val_fraction);
  static TextCorpus from_text(std::string text, float val_fraction);

  int64_t train_size() const { return int64_t(train_.size()); }
  int64_t val_size() const { return int64_t(val_.size()); }
  const std::string& description() const { return description_; }
  // 64-bit FNV-1a of the training and validation bytes: ranks compare it to make sure they
  // read the same corpus (each opens data.path on its own machine).
  uint64_t content_hash() const;

  // Sequence `seq_index` of training step `step`: tokens [T] and next-token targets [T].
  void train_sequence(uint64_t seed, int64_t step, int64_t seq_index, int T, int32_t* tokens,
                      int32_t* targets) const;
  // Validation sequence i of n evenly spaced ones (fixed set, same every evaluation).
  void val_sequence(int64_t i, int64_t n, int T, int32_t* tokens, int32_t* targets) const;

 private:
  std::vector<uint8_t> train_, val_;
  std::string description_;
};

uint64_t splitmix64(uint64_t x);

}  // namespace mxtrain
