// train/data.cc — the byte-level corpus, token shards as training data, and drawing
// sequences (train/data.h).
#include "mxtrain/train/data.h"

#include <algorithm>

#include "mxtrain/common.h"
#include "mxtrain/corpus/text_input.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/train/config.h"

namespace mxtrain {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// ---- sampling ---------------------------------------------------------------------------------

void TokenData::train_sequence(uint64_t seed, int64_t step, int64_t seq_index, int T,
                               int32_t* tokens, int32_t* targets) const {
  const int64_t range = train_tokens() - T - 1;
  MXT_CHECK(range > 0, "sequence length ", T, " exceeds the training split (", train_tokens(),
            " tokens)");
  const uint64_t h = splitmix64(seed ^ splitmix64(uint64_t(step) * 0x100000001B3ull +
                                                  uint64_t(seq_index)));
  const int64_t off = int64_t(h % uint64_t(range));
  read_train(off, T, tokens);
  std::copy(tokens + 1, tokens + T, targets);
  read_train(off + T, 1, targets + T - 1);
}

void TokenData::val_sequence(int64_t i, int64_t n, int T, int32_t* tokens,
                             int32_t* targets) const {
  const int64_t range = val_tokens() - T - 1;
  MXT_CHECK(range > 0, "sequence length ", T, " exceeds the validation split (", val_tokens(),
            " tokens)");
  const int64_t off = n <= 1 ? 0 : (range * i) / (n - 1);
  read_val(off, T, tokens);
  std::copy(tokens + 1, tokens + T, targets);
  read_val(off + T, 1, targets + T - 1);
}

// ---- byte-level text ------------------------------------------------------------------------

TextCorpus TextCorpus::from_text(std::string text, float val_fraction) {
  MXT_CHECK(val_fraction > 0 && val_fraction < 0.5f, "val_fraction must be in (0, 0.5), got ",
            val_fraction);
  const int64_t n = int64_t(text.size());
  const int64_t nval = int64_t(double(n) * val_fraction);
  TextCorpus c;
  c.train_.assign(text.begin(), text.end() - nval);
  c.val_.assign(text.end() - nval, text.end());
  c.description_ = std::to_string(n) + " bytes";
  for (uint8_t b : c.train_) c.max_byte_ = std::max(c.max_byte_, int(b));
  for (uint8_t b : c.val_) c.max_byte_ = std::max(c.max_byte_, int(b));
  return c;
}

TextCorpus TextCorpus::load(const std::string& path, float val_fraction) {
  corpus::TextInput in;
  std::string text;
  try {  // a missing file, a FIFO, a device are each named for what they are
    in = corpus::resolve_text_input({path});
    text = corpus::read_all_text(in);
  } catch (const Error& e) {
    rethrow_prefixed("data.path `" + shown(path) + "`: ", e);
  }
  MXT_CHECK(text.size() >= 4096, "data.path `", shown(path), "`: the corpus is too small (", text.size(),
            " bytes); need at least 4096");
  TextCorpus c = from_text(std::move(text), val_fraction);
  c.description_ = in.description + ", " + c.description_;
  return c;
}

void TextCorpus::read_train(int64_t pos, int64_t n, int32_t* out) const {
  MXT_CHECK(pos >= 0 && n >= 0 && pos + n <= train_size(), "read_train: out of range");
  std::copy(train_.begin() + pos, train_.begin() + pos + n, out);
}

void TextCorpus::read_val(int64_t pos, int64_t n, int32_t* out) const {
  MXT_CHECK(pos >= 0 && n >= 0 && pos + n <= val_size(), "read_val: out of range");
  std::copy(val_.begin() + pos, val_.begin() + pos + n, out);
}

uint64_t TextCorpus::content_hash() const {
  const uint64_t h[2] = {dist::fnv1a64(train_.data(), train_.size()),
                         dist::fnv1a64(val_.data(), val_.size())};
  return dist::fnv1a64(h, sizeof h);
}

// ---- token shards -----------------------------------------------------------------------------

ShardCorpus::ShardCorpus(corpus::TokenShards shards) : shards_(std::move(shards)) {
  const corpus::ShardManifest& m = shards_.manifest();
  description_ = "token shards " + shards_.dir() + " (" + std::to_string(m.train.size()) +
                 " training shard(s), " + std::to_string(train_tokens()) + " + " +
                 std::to_string(val_tokens()) + " validation tokens, " + m.tokenizer.str() + ")";
}

corpus::Tokenizer open_run_tokenizer(TrainConfig& cfg) {
  corpus::Tokenizer tok = corpus::Tokenizer::open(cfg.tokenizer);
  cfg.tokenizer_model = tok.model_bytes();
  MXT_CHECK(tok.is_bytes() || tok.vocab_size() <= cfg.model.vocab_size, "model.vocab_size ",
            cfg.model.vocab_size, " is smaller than the vocabulary of model.tokenizer ",
            cfg.tokenizer, " (", tok.vocab_size(), " pieces); set model.vocab_size to at least ",
            tok.vocab_size());
  return tok;
}

std::unique_ptr<TokenData> open_training_data(const DataConfig& d, const corpus::Tokenizer& tok) {
  if (corpus::TokenShards::is_shard_dir(d.path)) {
    corpus::TokenShards s = corpus::TokenShards::open(d.path);
    const corpus::TokenizerId& made = s.tokenizer();
    MXT_CHECK(made == tok.id(), "data.path ", d.path, ": the shards were made with tokenizer ",
              made.str(), " (vocabulary ", made.vocab_size, ") but the model's is ",
              tok.id().str(), " (vocabulary ", tok.vocab_size(), "); run `mxtrain prepare-data "
              "--tokenizer` with the model's tokenizer, or set model.tokenizer to the one the "
              "shards were made with");
    return std::make_unique<ShardCorpus>(std::move(s));
  }
  MXT_CHECK(tok.is_bytes(), "data.path ", d.path, " is text, but model.tokenizer is a "
            "SentencePiece model: tokenize the text first (`mxtrain prepare-data --tokenizer "
            "TOK.model --input ", d.path, " --out DIR`) and set data.path to DIR");
  return std::make_unique<TextCorpus>(TextCorpus::load(d.path, d.val_fraction));
}

}  // namespace mxtrain
