// mxtrain/corpus/tokenizer.h — the tokenizer of a model: byte-level, or a SentencePiece model.
//
// A Tokenizer turns text into token ids and ids back into the exact bytes they stand for.
// Byte-level (the default of the tiny configs) is the identity on bytes, vocabulary 256.
// A SentencePiece model (Debian libsentencepiece, BPE from `mxtrain tokenizer train`) is
// accepted when its encoding is byte-exact, which mxtrain relies on to decode a stream token by
// token and to count the bytes a token covers (nats per byte): identity normalization, no
// dummy prefix, no removal of extra whitespace, byte fallback (every byte has a piece), pieces
// split at whitespace with no whitespace-only pieces. Anything else is refused at load with
// the setting named (docs/data.md, "Tokenizer").
//
// Encoding splits the text at newlines and before every space — boundaries no piece of such a
// model spans — and encodes each word with SentencePiece once, caching the result (Encoder),
// so the ids equal SentencePiece's own encoding of the whole text while the cost per byte is
// a hash lookup. Bytes SentencePiece would not keep (malformed UTF-8, the U+2581 character it
// uses for spaces) are emitted as their byte pieces, so decode(encode(text)) == text for every
// input.
//
// The tokenizer's identity is the CRC-32 of its model file ("crc32:xxxxxxxx"; "bytes" for
// byte-level): token shards, checkpoints and exports record it, and a mismatch is an error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mxtrain::corpus {

enum class TokenizerKind : uint32_t { bytes = 0, sentencepiece = 1 };

// What identifies a tokenizer: its kind, the CRC-32 of its model file (0 for bytes) and its
// vocabulary size.
struct TokenizerId {
  TokenizerKind kind = TokenizerKind::bytes;
  uint32_t crc32 = 0;
  int vocab_size = 256;
  // "bytes" or "sentencepiece crc32:xxxxxxxx" (the hash recorded in checkpoints and exports).
  std::string str() const;
  bool operator==(const TokenizerId&) const = default;
};

class Tokenizer {
 public:
  Tokenizer();  // byte-level
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  static Tokenizer bytes() { return Tokenizer(); }
  // A SentencePiece .model file; `what` names it in errors.
  static Tokenizer load(const std::string& path);
  static Tokenizer from_model(std::string model_bytes, const std::string& what);
  // "" or "bytes": byte-level; anything else: load(path).
  static Tokenizer open(const std::string& spec);

  bool is_bytes() const { return id_.kind == TokenizerKind::bytes; }
  const TokenizerId& id() const { return id_; }
  int vocab_size() const { return id_.vocab_size; }
  // The serialized model ("" for byte-level): what checkpoints and exports copy.
  const std::string& model_bytes() const { return model_; }
  // Special ids (-1 when the model has none; byte-level has none).
  int bos_id() const { return bos_; }
  int eos_id() const { return eos_; }
  int unk_id() const { return unk_; }

  // The bytes token `id` stands for (empty for control tokens such as <s>). id in [0, vocab).
  const std::string& token_bytes(int32_t id) const;
  // Concatenation of token_bytes.
  std::string decode(const int32_t* ids, size_t n) const;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }
  // Appends the ids of `text` (an Encoder without a cache; for short texts such as prompts).
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  struct Impl;

 private:
  friend class Encoder;
  TokenizerId id_;
  std::string model_;
  int bos_ = -1, eos_ = -1, unk_ = -1;
  std::vector<std::string> pieces_;  // token_bytes by id
  std::unique_ptr<Impl> impl_;       // the SentencePiece processor (null for bytes)
};

// Encodes with a cache of words already seen. One Encoder per thread; the Tokenizer must
// outlive it. The cache takes about `cache_bytes` (0: no cache) and is emptied when half
// full, so memory stays bounded on any corpus.
class Encoder {
 public:
  explicit Encoder(const Tokenizer& tok, size_t cache_bytes = 16u << 20);
  ~Encoder();
  // Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out);

 private:
  struct Cache;
  void encode_word(std::string_view w, std::vector<int32_t>& out);
  const Tokenizer& tok_;
  std::unique_ptr<Cache> cache_;
};

// ---- training ----------------------------------------------------------------------------

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // files or directories (corpus/text_input.h)
  int vocab_size = 4096;
  int64_t max_sentences = 2000000;  // lines sampled (deterministically) when there are more
  int threads = 0;                  // 0: the OpenMP thread count
};

struct TokenizerTrainStats {
  int64_t lines_seen = 0, lines_used = 0;
  int64_t lines_too_long = 0;  // left out: longer than SentencePiece trains on (16384 bytes)
  uint64_t text_bytes = 0;
};

// Trains a byte-exact BPE SentencePiece model on the inputs' lines (empty lines skipped) and
// returns the serialized model (write it with io::write_file_atomic). Throws for an empty
// corpus or a vocabulary SentencePiece cannot reach (its message).
std::string train_tokenizer(const TokenizerTrainOptions& opt, TokenizerTrainStats* stats = nullptr);

}  // namespace mxtrain::corpus
