// mxtrain/corpus/shards.h — token shards: the on-disk format, a streaming writer and a
// memory-mapped reader.
//
// A shard directory (written by `mxtrain prepare-data`, corpus/prepare.h) holds
//   shards.json        the manifest: format, tokenizer, token width, every shard's file name,
//                      token count and text bytes (written last; its presence means complete)
//   train_00000.bin …  training shards, in corpus order
//   val.bin            the validation shard (the last part of the text)
//   tokenizer.model    a copy of the SentencePiece model (absent for byte-level shards)
// Each .bin file is a 64-byte little-endian header followed by the tokens:
//   0  magic "MXTSHARD"     8 bytes
//   8  version              u32 (1)
//   12 token_bytes          u32: 2 (uint16, vocabulary <= 65,536) or 4 (uint32)
//   16 tokens               u64
//   24 text_bytes           u64: bytes of text the tokens encode
//   32 vocab_size           u32: the tokenizer's
//   36 tokenizer_kind       u32: 0 bytes, 1 SentencePiece
//   40 tokenizer_crc32      u32: CRC-32 of the tokenizer model file (0 for bytes)
//   44 split                u32: 0 train, 1 validation
//   48 data_crc32           u32: CRC-32 of the token bytes
//   52 reserved             8 bytes, zero
//   60 header_crc32         u32: CRC-32 of bytes 0..59
// The reader checks everything before training reads a token: magic, version, header CRC,
// file size against the token count (truncation), the data CRC (corruption; streamed through
// a small buffer, so verifying does not grow the process's resident memory), and that every
// shard agrees with the manifest and with each other on tokenizer and width. Tokens are then
// read through read-only memory maps; the pages a read touched are released again
// (MADV_DONTNEED on the 2 MiB around them), so resident memory does not grow with the corpus, whatever its size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mxtrain/corpus/tokenizer.h"

namespace mxtrain::corpus {

constexpr uint32_t kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 64;
constexpr const char* kShardManifest = "shards.json";

enum class ShardSplit : uint32_t { train = 0, val = 1 };

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;
  uint64_t tokens = 0;
  uint64_t text_bytes = 0;
  TokenizerId tokenizer;  // kind, crc32, vocab_size
  ShardSplit split = ShardSplit::train;
  uint32_t data_crc32 = 0;
};

// Bytes per token for a vocabulary: 2 up to 65,536 ids, else 4.
inline uint32_t token_width(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// The 64 header bytes (header_crc32 filled in).
std::vector<uint8_t> encode_shard_header(const ShardHeader& h);
// Throws naming `what` for a wrong magic, an unsupported version, a bad CRC or field.
ShardHeader decode_shard_header(const uint8_t* bytes, size_t n, const std::string& what);

// Writes one shard: header placeholder, tokens appended in order, header and CRC at finish().
// Used inside an AtomicDir (the file is not visible before the directory is committed).
class ShardWriter {
 public:
  ShardWriter(const std::string& path, const TokenizerId& tok, ShardSplit split);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  // ids: [n] in [0, vocab_size); text_bytes: the bytes of text they encode.
  void append(const int32_t* ids, size_t n, uint64_t text_bytes);
  // Writes the final header, fsyncs and closes; returns the header.
  ShardHeader finish();
  uint64_t tokens() const { return header_.tokens; }

 private:
  std::string path_;
  int fd_ = -1;
  ShardHeader header_;
  std::vector<uint8_t> buf_;   // the header placeholder (at first), then token bytes
  bool header_pending_ = true;  // buf_ still starts with the placeholder
  void flush();
};

struct ShardFile {
  std::string file;  // name inside the directory
  ShardHeader header;
};

// What shards.json records.
struct ShardManifest {
  TokenizerId tokenizer;
  uint32_t token_bytes = 2;
  std::vector<ShardFile> train;
  ShardFile val;
  uint64_t input_bytes = 0;  // bytes of the input files
  double val_fraction = 0;
  std::string source;        // description of the input
};
std::string manifest_json(const ShardManifest& m);

// A shard directory opened for reading.
class TokenShards {
 public:
  // Reads shards.json and verifies every shard (see above); throws naming the file.
  static TokenShards open(const std::string& dir);
  // True when `dir` holds a shards.json (a shard directory rather than a text directory).
  static bool is_shard_dir(const std::string& dir);
  TokenShards(TokenShards&&) noexcept;
  TokenShards& operator=(TokenShards&&) noexcept;
  ~TokenShards();

  const std::string& dir() const { return dir_; }
  const ShardManifest& manifest() const { return manifest_; }
  const TokenizerId& tokenizer() const { return manifest_.tokenizer; }
  int64_t train_tokens() const { return train_tokens_; }
  int64_t val_tokens() const { return int64_t(manifest_.val.header.tokens); }
  uint64_t train_text_bytes() const;
  uint64_t val_text_bytes() const { return manifest_.val.header.text_bytes; }
  // Tokens [pos, pos + n) of the training split (the shards in order, one sequence) or of the
  // validation shard, as ids; a read may span shards. Throws when the range is outside.
  void read_train(int64_t pos, int64_t n, int32_t* out) const;
  void read_val(int64_t pos, int64_t n, int32_t* out) const;
  // A 64-bit summary of the tokenizer and every shard's CRC and size (ranks compare it).
  uint64_t content_hash() const;

  struct Map;  // one mapped shard (shard_reader.cc)

 private:
  TokenShards() = default;
  void read(const Map& m, int64_t pos, int64_t n, int32_t* out) const;
  std::string dir_;
  ShardManifest manifest_;
  std::vector<std::unique_ptr<Map>> train_;  // one per training shard
  std::vector<int64_t> train_start_;         // first global position of each
  std::unique_ptr<Map> val_;
  int64_t train_tokens_ = 0;
};

}  // namespace mxtrain::corpus
