// corpus/shard_reader.cc — opening, verifying and reading a token-shard directory through
// memory maps (corpus/shards.h, TokenShards).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "mxtrain/common.h"
#include "mxtrain/corpus/shards.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/checksum.h"
#include "mxtrain/io/json_input.h"

namespace mxtrain::corpus {

// One shard file, mapped read-only.
struct TokenShards::Map {
  std::string path;
  int fd = -1;
  const uint8_t* base = nullptr;  // the whole file, header included
  size_t size = 0;
  ShardHeader header;
  ~Map() {
    if (base) ::munmap(const_cast<uint8_t*>(base), size);
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// Reads `n` bytes at `off` into buf (pread; does not fault pages into this process).
void pread_all(int fd, void* buf, size_t n, off_t off, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(buf) + done, n - done, off + off_t(done));
    if (r < 0 && errno == EINTR) continue;
    MXT_CHECK(r > 0, "cannot read ", path, ": ", r == 0 ? "unexpected end of file" :
              std::strerror(errno));
    done += size_t(r);
  }
}

// Opens, checks and maps one shard; `want` is what the manifest says of it.
std::unique_ptr<TokenShards::Map> open_shard(const std::string& dir, const ShardFile& want,
                                             ShardSplit split, uint32_t token_bytes) {
  auto m = std::make_unique<TokenShards::Map>();
  m->path = dir + "/" + want.file;
  MXT_CHECK(want.file.find('/') == std::string::npos && !want.file.empty() && want.file[0] != '.',
            dir, "/", kShardManifest, ": shard file name `", want.file, "` is not a plain name");
  m->fd = ::open(m->path.c_str(), O_RDONLY | O_CLOEXEC);
  MXT_CHECK(m->fd >= 0, m->path, ": cannot open (", std::strerror(errno),
            "); the shard directory is incomplete");
  struct stat st {};
  MXT_CHECK(::fstat(m->fd, &st) == 0 && S_ISREG(st.st_mode), m->path, " is not a regular file");
  m->size = size_t(st.st_size);
  uint8_t hb[kShardHeaderBytes];
  MXT_CHECK(m->size >= kShardHeaderBytes, m->path, ": ", m->size, " bytes, shorter than the ",
            kShardHeaderBytes, "-byte shard header (truncated)");
  pread_all(m->fd, hb, sizeof hb, 0, m->path);
  const ShardHeader h = decode_shard_header(hb, sizeof hb, m->path);
  const uint64_t want_size = kShardHeaderBytes + h.tokens * h.token_bytes;
  MXT_CHECK(m->size == want_size, m->path, ": ", m->size, " bytes, but its header says ",
            h.tokens, " tokens of ", h.token_bytes, " bytes = ", want_size,
            m->size < want_size ? " (truncated)" : " (trailing bytes; corrupted)");
  MXT_CHECK(h.tokens == want.header.tokens && h.text_bytes == want.header.text_bytes &&
                h.data_crc32 == want.header.data_crc32 && h.split == split &&
                h.token_bytes == token_bytes,
            m->path, ": its header does not match ", kShardManifest,
            " (tokens, text bytes, checksum, split or width differ); the directory mixes "
            "shards of different runs of prepare-data");
  // Verify the data through a small buffer: the pages go to the page cache, not this process.
  std::vector<uint8_t> buf(1u << 20);
  uint32_t crc = 0;
  for (size_t off = kShardHeaderBytes; off < m->size;) {
    const size_t n = std::min(buf.size(), m->size - off);
    pread_all(m->fd, buf.data(), n, off_t(off), m->path);
    crc = io::crc32_update(crc, buf.data(), n);
    off += n;
  }
  MXT_CHECK(crc == h.data_crc32, m->path, ": data checksum mismatch (crc32 ", io::crc32_hex(crc),
            ", header records ", io::crc32_hex(h.data_crc32), "); the shard is corrupted");
  m->header = h;
  void* p = ::mmap(nullptr, m->size, PROT_READ, MAP_SHARED, m->fd, 0);
  MXT_CHECK(p != MAP_FAILED, "cannot map ", m->path, ": ", std::strerror(errno));
  m->base = static_cast<const uint8_t*>(p);
  ::madvise(p, m->size, MADV_RANDOM);  // no read-ahead: reads are scattered
  return m;
}

ShardFile parse_shard(const nlohmann::json& j) {
  ShardFile s;
  s.file = j.at("file").get<std::string>();
  s.header.tokens = j.at("tokens").get<uint64_t>();
  s.header.text_bytes = j.at("text_bytes").get<uint64_t>();
  s.header.data_crc32 = uint32_t(std::stoul(j.at("data_crc32").get<std::string>(), nullptr, 16));
  return s;
}

}  // namespace

bool TokenShards::is_shard_dir(const std::string& dir) {
  return io::is_directory(dir) && io::path_exists(dir + "/" + kShardManifest);
}

TokenShards::TokenShards(TokenShards&&) noexcept = default;
TokenShards& TokenShards::operator=(TokenShards&&) noexcept = default;
TokenShards::~TokenShards() = default;

TokenShards TokenShards::open(const std::string& dir) {
  const std::string mpath = dir + "/" + kShardManifest;
  MXT_CHECK(io::is_directory(dir), "token-shard directory `", dir, "` does not exist");
  MXT_CHECK(io::path_exists(mpath), dir, " is not a token-shard directory (no ", kShardManifest,
            "; make one with `mxtrain prepare-data`)");
  const nlohmann::json j = io::parse_json_strict(io::read_text_file(mpath), mpath);
  TokenShards t;
  t.dir_ = dir;
  ShardManifest& m = t.manifest_;
  try {
    MXT_CHECK(j.value("format", "") == "mxtrain-token-shards", mpath,
              ": not a token-shard manifest");
    MXT_CHECK(j.at("version").get<uint32_t>() == kShardVersion, mpath, ": manifest version ",
              j.at("version").get<uint32_t>(), " is not supported");
    const nlohmann::json& tj = j.at("tokenizer");
    const std::string kind = tj.at("kind").get<std::string>();
    MXT_CHECK(kind == "bytes" || kind == "sentencepiece", mpath, ": unknown tokenizer kind `",
              kind, "`");
    m.tokenizer.kind = kind == "bytes" ? TokenizerKind::bytes : TokenizerKind::sentencepiece;
    m.tokenizer.crc32 = uint32_t(std::stoul(tj.at("crc32").get<std::string>(), nullptr, 16));
    m.tokenizer.vocab_size = tj.at("vocab_size").get<int>();
    m.token_bytes = j.at("token_bytes").get<uint32_t>();
    m.input_bytes = j.value("input_bytes", uint64_t(0));
    m.val_fraction = j.value("val_fraction", 0.0);
    m.source = j.value("source", "");
    for (const auto& s : j.at("train")) m.train.push_back(parse_shard(s));
    m.val = parse_shard(j.at("val"));
  } catch (const nlohmann::json::exception& e) {
    MXT_FAIL(mpath, ": malformed manifest: ", e.what());
  } catch (const std::logic_error& e) {  // std::stoul on a bad checksum string
    MXT_FAIL(mpath, ": malformed manifest: ", e.what());
  }
  MXT_CHECK(!m.train.empty(), mpath, ": lists no training shard");
  std::set<std::string> listed;  // each file once: a shard listed twice would be read twice
  const auto once = [&](const ShardFile& s) {
    MXT_CHECK(listed.insert(s.file).second, mpath, ": lists shard `", shown(s.file, 80),
              "` more than once; each shard is read once: remove the repeat, or prepare the "
              "data again");
  };
  for (const ShardFile& s : m.train) once(s);
  once(m.val);
  MXT_CHECK(m.tokenizer.vocab_size >= 1 && m.token_bytes == token_width(m.tokenizer.vocab_size),
            mpath, ": token width ", m.token_bytes, " does not fit vocabulary ",
            m.tokenizer.vocab_size);
  auto check_tokenizer = [&](const Map& s) {
    MXT_CHECK(s.header.tokenizer == m.tokenizer, s.path, ": made with tokenizer ",
              s.header.tokenizer.str(), " (vocabulary ", s.header.tokenizer.vocab_size,
              "), but ", kShardManifest, " records ", m.tokenizer.str(),
              "; the directory mixes shards of different tokenizers");
  };
  for (ShardFile& s : m.train) {
    t.train_start_.push_back(t.train_tokens_);
    t.train_.push_back(open_shard(dir, s, ShardSplit::train, m.token_bytes));
    check_tokenizer(*t.train_.back());
    s.header = t.train_.back()->header;
    t.train_tokens_ += int64_t(s.header.tokens);
  }
  t.val_ = open_shard(dir, m.val, ShardSplit::val, m.token_bytes);
  check_tokenizer(*t.val_);
  m.val.header = t.val_->header;
  return t;
}

uint64_t TokenShards::train_text_bytes() const {
  uint64_t n = 0;
  for (const ShardFile& s : manifest_.train) n += s.header.text_bytes;
  return n;
}

uint64_t TokenShards::content_hash() const {
  // CRC-32s of the tokenizer and of every shard's (tokens, data CRC), in order, each half of
  // the result from its own walk so that a single changed value changes both halves.
  std::vector<uint64_t> v{uint64_t(manifest_.tokenizer.crc32), uint64_t(manifest_.tokenizer.vocab_size)};
  for (const ShardFile& s : manifest_.train) v.insert(v.end(), {s.header.tokens, s.header.data_crc32});
  v.insert(v.end(), {manifest_.val.header.tokens, manifest_.val.header.data_crc32});
  const uint32_t a = io::crc32(v.data(), v.size() * sizeof(uint64_t));
  std::reverse(v.begin(), v.end());
  const uint32_t b = io::crc32(v.data(), v.size() * sizeof(uint64_t));
  return (uint64_t(a) << 32) | b;
}

void TokenShards::read(const Map& m, int64_t pos, int64_t n, int32_t* out) const {
  const uint32_t w = m.header.token_bytes, V = uint32_t(m.header.tokenizer.vocab_size);
  const uint8_t* src = m.base + kShardHeaderBytes + size_t(pos) * w;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t v;
    if (w == 2) {
      uint16_t s;
      std::memcpy(&s, src + size_t(i) * 2, 2);
      v = s;
    } else {
      std::memcpy(&v, src + size_t(i) * 4, 4);
    }
    MXT_CHECK(v < V, m.path, ": token ", pos + i, " is ", v, ", outside the vocabulary of ", V,
              " (corrupted shard)");
    out[i] = int32_t(v);
  }
  // Give the pages back: the process's resident memory stays independent of how much of the
  // corpus has been read. The range is widened to the 2 MiB around it: a fault maps the pages
  // around the faulting one (64 KiB, or a whole large folio of the page cache, up to 2 MiB).
  constexpr size_t kWindow = 2u << 20;
  const size_t lo = size_t(src - m.base) & ~(kWindow - 1);
  const size_t hi = std::min(m.size, (size_t(src - m.base) + size_t(n) * w + kWindow - 1) & ~(kWindow - 1));
  ::madvise(const_cast<uint8_t*>(m.base) + lo, hi - lo, MADV_DONTNEED);
}

void TokenShards::read_train(int64_t pos, int64_t n, int32_t* out) const {
  MXT_CHECK(pos >= 0 && n >= 0 && pos + n <= train_tokens_, "read_train: tokens [", pos, ", ",
            pos + n, ") are outside the training split of ", train_tokens_, " tokens");
  size_t s = size_t(std::upper_bound(train_start_.begin(), train_start_.end(), pos) -
                    train_start_.begin() - 1);
  while (n > 0) {
    const Map& m = *train_[s];
    const int64_t local = pos - train_start_[s];
    const int64_t take = std::min<int64_t>(n, int64_t(m.header.tokens) - local);
    read(m, local, take, out);
    out += take;
    pos += take;
    n -= take;
    ++s;
  }
}

void TokenShards::read_val(int64_t pos, int64_t n, int32_t* out) const {
  MXT_CHECK(pos >= 0 && n >= 0 && pos + n <= val_tokens(), "read_val: tokens [", pos, ", ",
            pos + n, ") are outside the validation shard of ", val_tokens(), " tokens");
  read(*val_, pos, n, out);
}

}  // namespace mxtrain::corpus
