// corpus/shards.cc — the shard header, the streaming ShardWriter and the manifest
// (corpus/shards.h). Reading is in shard_reader.cc.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "mxtrain/common.h"
#include "mxtrain/corpus/shards.h"
#include "mxtrain/io/checksum.h"

namespace mxtrain::corpus {
namespace {

constexpr char kMagic[8] = {'M', 'X', 'T', 'S', 'H', 'A', 'R', 'D'};

template <class T>
void put(std::vector<uint8_t>& b, size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);  // x86-64 is little-endian, as the format
}
template <class T>
T get(const uint8_t* b, size_t off) {
  T v;
  std::memcpy(&v, b + off, sizeof v);
  return v;
}

}  // namespace

std::vector<uint8_t> encode_shard_header(const ShardHeader& h) {
  std::vector<uint8_t> b(kShardHeaderBytes, 0);
  std::memcpy(b.data(), kMagic, 8);
  put<uint32_t>(b, 8, h.version);
  put<uint32_t>(b, 12, h.token_bytes);
  put<uint64_t>(b, 16, h.tokens);
  put<uint64_t>(b, 24, h.text_bytes);
  put<uint32_t>(b, 32, uint32_t(h.tokenizer.vocab_size));
  put<uint32_t>(b, 36, uint32_t(h.tokenizer.kind));
  put<uint32_t>(b, 40, h.tokenizer.crc32);
  put<uint32_t>(b, 44, uint32_t(h.split));
  put<uint32_t>(b, 48, h.data_crc32);
  put<uint32_t>(b, 60, io::crc32(b.data(), 60));
  return b;
}

ShardHeader decode_shard_header(const uint8_t* b, size_t n, const std::string& what) {
  MXT_CHECK(n >= kShardHeaderBytes, what, ": ", n, " bytes, shorter than the ",
            kShardHeaderBytes, "-byte shard header (truncated)");
  MXT_CHECK(std::memcmp(b, kMagic, 8) == 0, what, ": not a token shard (no MXTSHARD magic)");
  ShardHeader h;
  h.version = get<uint32_t>(b, 8);
  MXT_CHECK(h.version == kShardVersion, what, ": shard format version ", h.version,
            " is not supported (this build reads version ", kShardVersion, ")");
  MXT_CHECK(get<uint32_t>(b, 60) == io::crc32(b, 60), what,
            ": header checksum mismatch (the shard is corrupted)");
  h.token_bytes = get<uint32_t>(b, 12);
  h.tokens = get<uint64_t>(b, 16);
  h.text_bytes = get<uint64_t>(b, 24);
  const uint32_t vocab = get<uint32_t>(b, 32), kind = get<uint32_t>(b, 36);
  const uint32_t split = get<uint32_t>(b, 44);
  MXT_CHECK(h.token_bytes == 2 || h.token_bytes == 4, what, ": token width ", h.token_bytes,
            " (must be 2 or 4)");
  MXT_CHECK(kind <= 1 && split <= 1 && vocab >= 1 && vocab <= (1u << 30) &&
                h.token_bytes == token_width(int(vocab)),
            what, ": header fields are inconsistent (tokenizer kind ", kind, ", vocabulary ",
            vocab, ", split ", split, ", width ", h.token_bytes, ")");
  h.tokenizer = {TokenizerKind(kind), get<uint32_t>(b, 40), int(vocab)};
  h.split = ShardSplit(split);
  h.data_crc32 = get<uint32_t>(b, 48);
  MXT_CHECK(get<uint64_t>(b, 52) == 0, what, ": reserved header bytes are not zero");
  return h;
}

// ---- writer -----------------------------------------------------------------------------------

ShardWriter::ShardWriter(const std::string& path, const TokenizerId& tok, ShardSplit split)
    : path_(path) {
  header_.tokenizer = tok;
  header_.split = split;
  header_.token_bytes = token_width(tok.vocab_size);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  MXT_CHECK(fd_ >= 0, "cannot create ", path, ": ", std::strerror(errno));
  buf_.reserve(1u << 20);
  buf_.assign(kShardHeaderBytes, 0);  // placeholder, rewritten by finish()
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

// Writes buf_ out; the CRC covers the token bytes, not the header placeholder.
void ShardWriter::flush() {
  const size_t skip = header_pending_ ? kShardHeaderBytes : 0;
  header_.data_crc32 = io::crc32_update(header_.data_crc32, buf_.data() + skip, buf_.size() - skip);
  header_pending_ = false;
  size_t done = 0;
  while (done < buf_.size()) {
    const ssize_t w = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (w < 0 && errno == EINTR) continue;
    MXT_CHECK(w > 0, "cannot write ", path_, ": ", std::strerror(errno));
    done += size_t(w);
  }
  buf_.clear();
}

void ShardWriter::append(const int32_t* ids, size_t n, uint64_t text_bytes) {
  MXT_CHECK(fd_ >= 0, "ShardWriter: ", path_, " is already finished");
  const uint32_t V = uint32_t(header_.tokenizer.vocab_size), w = header_.token_bytes;
  const size_t at = buf_.size();
  buf_.resize(at + n * w);
  uint8_t* dst = buf_.data() + at;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t v = uint32_t(ids[i]);
    MXT_CHECK(v < V, "ShardWriter: token ", ids[i], " is outside the vocabulary of ", V);
    if (w == 2) {
      const uint16_t s = uint16_t(v);
      std::memcpy(dst + 2 * i, &s, 2);
    } else {
      std::memcpy(dst + 4 * i, &v, 4);
    }
  }
  header_.tokens += n;
  header_.text_bytes += text_bytes;
  if (buf_.size() >= (1u << 20)) flush();
}

ShardHeader ShardWriter::finish() {
  MXT_CHECK(fd_ >= 0, "ShardWriter: ", path_, " is already finished");
  flush();
  const std::vector<uint8_t> h = encode_shard_header(header_);
  MXT_CHECK(::pwrite(fd_, h.data(), h.size(), 0) == ssize_t(h.size()), "cannot write ", path_,
            ": ", std::strerror(errno));
  MXT_CHECK(::fsync(fd_) == 0, "cannot sync ", path_, ": ", std::strerror(errno));
  MXT_CHECK(::close(fd_) == 0, "cannot close ", path_, ": ", std::strerror(errno));
  fd_ = -1;
  return header_;
}

// ---- manifest ---------------------------------------------------------------------------------

std::string manifest_json(const ShardManifest& m) {
  using json = nlohmann::ordered_json;
  auto shard = [](const ShardFile& s) {
    return json{{"file", s.file},
                {"tokens", s.header.tokens},
                {"text_bytes", s.header.text_bytes},
                {"data_crc32", io::crc32_hex(s.header.data_crc32)}};
  };
  json train = json::array();
  for (const ShardFile& s : m.train) train.push_back(shard(s));
  const json j = {
      {"format", "mxtrain-token-shards"},
      {"version", kShardVersion},
      {"tokenizer",
       {{"kind", m.tokenizer.kind == TokenizerKind::bytes ? "bytes" : "sentencepiece"},
        {"crc32", io::crc32_hex(m.tokenizer.crc32)},
        {"vocab_size", m.tokenizer.vocab_size},
        {"id", m.tokenizer.str()}}},
      {"token_bytes", m.token_bytes},
      {"input_bytes", m.input_bytes},
      {"val_fraction", m.val_fraction},
      {"source", m.source},
      {"train", train},
      {"val", shard(m.val)}};
  return j.dump(2) + "\n";
}

}  // namespace mxtrain::corpus
