// corpus/tokenizer.cc — byte-level and SentencePiece tokenizers, the caching Encoder
// (corpus/tokenizer.h). Training is in tokenizer_train.cc.
//
// Encoding: text is cut at '\n' and before every ' '; each piece ("word", its leading space
// included) is encoded by SentencePiece once and then taken from the cache. A byte-exact model
// (sp_spec.h) has no piece that crosses such a cut — its pieces carry the space marker only in
// front and never contain '\n' — so the result equals SentencePiece's encoding of the whole
// text (tests/corpus/tokenizer_test.cc checks this on the fortunes text). Inside a word,
// malformed UTF-8 and the character U+2581 (SentencePiece's space marker, which it would
// decode as a space) are emitted as byte pieces; no piece contains them either.
#include "mxtrain/corpus/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "corpus/sp_spec.h"
#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/checksum.h"

namespace mxtrain::corpus {

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  int32_t byte_id[256] = {};
  std::vector<int32_t> newline;  // the ids of "\n"
};

std::string TokenizerId::str() const {
  if (kind == TokenizerKind::bytes) return "bytes";
  return "sentencepiece " + io::crc32_hex(crc32).insert(0, "crc32:");
}

Tokenizer::Tokenizer() {
  pieces_.resize(256);
  for (int b = 0; b < 256; ++b) pieces_[size_t(b)] = std::string(1, char(b));
}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

namespace {

constexpr const char kSpaceMarker[] = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// "<0xAB>" -> 0xAB.
int byte_piece_value(const std::string& piece) {
  MXT_CHECK(piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>',
            "SentencePiece byte piece `", piece, "` is not of the form <0xNN>");
  return std::stoi(piece.substr(3, 2), nullptr, 16);
}

std::string surface(const std::string& piece) {
  std::string s;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, 3, kSpaceMarker) == 0) {
      s += ' ';
      i += 3;
    } else {
      s += piece[i++];
    }
  }
  return s;
}

// Length of the well-formed UTF-8 sequence at p[0..n) (1..4), or 0 when it is malformed.
size_t utf8_sequence(const unsigned char* p, size_t n) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (len == 0 || len > n) return 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range (no overlongs, surrogates)
  if (c == 0xE0) lo = 0xA0;
  if (c == 0xED) hi = 0x9F;
  if (c == 0xF0) lo = 0x90;
  if (c == 0xF4) hi = 0x8F;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return len;
}

}  // namespace

Tokenizer Tokenizer::from_model(std::string model, const std::string& what) {
  const detail::SpSpec spec = detail::read_sp_spec(model, what);
  const std::string problem = detail::sp_spec_problem(spec);
  MXT_CHECK(problem.empty(), what, ": this SentencePiece model does not encode text byte for "
            "byte: ", problem, " (train one with `mxtrain tokenizer train`)");
  Tokenizer t;
  t.impl_ = std::make_unique<Impl>();
  sentencepiece::SentencePieceProcessor& sp = t.impl_->sp;
  const auto st = sp.LoadFromSerializedProto(model);
  MXT_CHECK(st.ok(), what, ": SentencePiece cannot load it: ", st.ToString());
  const int V = sp.GetPieceSize();
  MXT_CHECK(V >= 259, what, ": vocabulary of ", V, " pieces is too small for byte fallback");
  t.pieces_.assign(size_t(V), std::string());
  for (int id = 0; id < V; ++id) {
    const std::string& piece = sp.IdToPiece(id);
    if (sp.IsByte(id))
      t.pieces_[size_t(id)] = std::string(1, char(byte_piece_value(piece)));
    else if (sp.IsUnknown(id))
      t.pieces_[size_t(id)] = " \xE2\x81\x87 ";  // SentencePiece's default <unk> surface
    else if (!sp.IsControl(id) && !sp.IsUnused(id))
      t.pieces_[size_t(id)] = surface(piece);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const int id = sp.PieceToId(name);
    MXT_CHECK(sp.IsByte(id), what, ": byte piece ", name, " is missing");
    t.impl_->byte_id[b] = id;
  }
  std::vector<int> nl;
  MXT_CHECK(sp.Encode("\n", &nl).ok() && !nl.empty(), what, ": cannot encode a newline");
  t.impl_->newline.assign(nl.begin(), nl.end());
  t.bos_ = sp.bos_id();
  t.eos_ = sp.eos_id();
  t.unk_ = sp.unk_id();
  t.id_ = {TokenizerKind::sentencepiece, io::crc32(model.data(), model.size()), V};
  t.model_ = std::move(model);
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  const std::vector<uint8_t> b = io::read_file(path);
  return from_model(std::string(b.begin(), b.end()), path);
}

Tokenizer Tokenizer::open(const std::string& spec) {
  return spec.empty() || spec == "bytes" ? Tokenizer::bytes() : Tokenizer::load(spec);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  MXT_CHECK(id >= 0 && size_t(id) < pieces_.size(), "token id ", id, " is outside the "
            "tokenizer's vocabulary of ", pieces_.size());
  return pieces_[size_t(id)];
}

std::string Tokenizer::decode(const int32_t* ids, size_t n) const {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += token_bytes(ids[i]);
  return s;
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  Encoder(*this, 0).encode(text, out);
}

// ---- Encoder --------------------------------------------------------------------------------

// Open addressing, one 64-byte slot per word holding the word and its ids,
// so a lookup touches one cache line. Words longer than kMaxWord bytes or of more than kMaxIds
// tokens are not cached. Emptied when half full (a corpus's common words are back at once).
struct Encoder::Cache {
  static constexpr size_t kMaxWord = 26, kMaxIds = 8;
  struct alignas(64) Slot {
    uint32_t hash = 0;  // 0: empty
    uint8_t key_len = 0, n = 0;
    char key[kMaxWord];
    int32_t ids[kMaxIds];
  };
  static_assert(sizeof(Slot) == 64);
  explicit Cache(size_t budget) {
    if (budget > 0) slots.resize(std::max<size_t>(1024, std::bit_ceil(budget / sizeof(Slot))));
  }
  // 8 bytes at a time, each word mixed in by a multiply-xorshift (words are short).
  static uint32_t hash(std::string_view w) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ w.size();
    for (size_t i = 0; i < w.size(); i += 8) {
      uint64_t v = 0;
      std::memcpy(&v, w.data() + i, std::min<size_t>(8, w.size() - i));
      h = (h ^ v) * 0xFF51AFD7ED558CCDull;
      h ^= h >> 29;
    }
    return uint32_t(h >> 32) | 1;
  }
  Slot& find(std::string_view w, uint32_t h) {
    const size_t mask = slots.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots[i];
      if (s.hash == 0 ||
          (s.hash == h && s.key_len == w.size() && std::memcmp(s.key, w.data(), w.size()) == 0))
        return s;
    }
  }
  std::vector<Slot> slots;
  size_t used = 0;
};

Encoder::Encoder(const Tokenizer& tok, size_t cache_bytes)
    : tok_(tok), cache_(std::make_unique<Cache>(tok.is_bytes() ? 0 : cache_bytes)) {}
Encoder::~Encoder() = default;

void Encoder::encode(std::string_view text, std::vector<int32_t>& out) {
  if (tok_.is_bytes()) {
    for (char c : text) out.push_back(uint8_t(c));
    return;
  }
  const std::vector<int32_t>& newline = tok_.impl_->newline;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '\n') {
      out.insert(out.end(), newline.begin(), newline.end());
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < text.size() && text[j] != ' ' && text[j] != '\n') ++j;
    encode_word(text.substr(i, j - i), out);
    i = j;
  }
}

void Encoder::encode_word(std::string_view w, std::vector<int32_t>& out) {
  Cache& c = *cache_;
  const bool cached = !c.slots.empty() && w.size() <= Cache::kMaxWord;
  const uint32_t h = cached ? Cache::hash(w) : 0;
  if (cached) {
    const Cache::Slot& s = c.find(w, h);
    if (s.hash != 0) {
      out.insert(out.end(), s.ids, s.ids + s.n);
      return;
    }
  }
  const size_t first = out.size();
  const Tokenizer::Impl& im = *tok_.impl_;
  const auto* p = reinterpret_cast<const unsigned char*>(w.data());
  std::vector<int> ids;
  size_t run = 0;  // start of the well-formed text not yet encoded
  auto flush = [&](size_t end) {
    if (end > run) {
      const auto st = im.sp.Encode(w.substr(run, end - run), &ids);
      MXT_CHECK(st.ok(), "SentencePiece cannot encode the text: ", st.ToString());
      out.insert(out.end(), ids.begin(), ids.end());
    }
  };
  for (size_t k = 0; k < w.size();) {
    const size_t len = utf8_sequence(p + k, w.size() - k);
    const bool marker = len == 3 && std::memcmp(p + k, kSpaceMarker, 3) == 0;
    if (len > 0 && !marker) {
      k += len;
      continue;
    }
    flush(k);
    const size_t bad = marker ? 3 : 1;
    for (size_t b = 0; b < bad; ++b) out.push_back(im.byte_id[p[k + b]]);
    k += bad;
    run = k;
  }
  flush(w.size());
  const size_t n = out.size() - first;
  if (!cached || n > Cache::kMaxIds) return;
  if (c.used * 2 >= c.slots.size()) {
    std::fill(c.slots.begin(), c.slots.end(), Cache::Slot{});
    c.used = 0;
  }
  Cache::Slot& s = c.find(w, h);
  s.hash = h;
  s.key_len = uint8_t(w.size());
  s.n = uint8_t(n);
  std::memcpy(s.key, w.data(), w.size());
  std::copy(out.begin() + first, out.end(), s.ids);
  ++c.used;
}

}  // namespace mxtrain::corpus
