// mxtrain/corpus/prepare.h — `mxtrain prepare-data`: text -> token shards (corpus/shards.h).
//
// The input (corpus/text_input.h) is read in chunks of a few MiB cut at line boundaries; each
// chunk is cut again at line boundaries into one part per thread, the parts are encoded in
// parallel (one caching Encoder per thread) and their ids appended in order, so the shards do
// not depend on the thread count. Memory stays bounded whatever the corpus size: one chunk,
// its ids and the encoders' caches. The training split fills shards of at most
// `shard_tokens` tokens; the validation shard is the text from the first line that starts
// after (1 - val_fraction) of the input's bytes. Everything is written into a temporary
// directory renamed into place at the end (io::AtomicDir): an interrupted run leaves nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxtrain/corpus/shards.h"
#include "mxtrain/corpus/tokenizer.h"

namespace mxtrain::corpus {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories or "fortunes"
  std::string out_dir;              // created (replaced if it is a shard directory)
  double val_fraction = 0.05;       // in (0, 0.5)
  int64_t shard_tokens = int64_t(1) << 28;  // tokens per training shard at most
  size_t chunk_bytes = 4u << 20;    // text per chunk
};

struct PrepareStats {
  uint64_t input_bytes = 0, text_bytes = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  int train_shards = 0;
  double seconds = 0;
};

// Called after each chunk with (input bytes read, input bytes in total).
using PrepareProgress = std::function<void(uint64_t done, uint64_t total)>;

// Tokenizes the inputs into opt.out_dir with `tok` (whose model file is copied into the
// directory). Throws for an empty corpus, an empty training or validation split, or an output
// path that exists and is not a shard directory.
PrepareStats prepare_data(const PrepareOptions& opt, const Tokenizer& tok,
                          const PrepareProgress& progress = {});

}  // namespace mxtrain::corpus
