// corpus/sp_spec.cc — reading a SentencePiece model's settings from the protobuf wire format
// (corpus/sp_spec.h).
#include "corpus/sp_spec.h"

#include <cstdint>
#include <string_view>

#include "mxtrain/common.h"

namespace mxtrain::corpus::detail {
namespace {

// A cursor over one protobuf message: key (field number, wire type) then the value.
class Wire {
 public:
  Wire(const char* p, size_t n, const std::string& what) : p_(p), end_(p + n), what_(what) {}
  bool done() const { return p_ == end_; }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      MXT_CHECK(p_ < end_, what_, ": not a SentencePiece model (truncated protobuf varint)");
      const uint8_t b = uint8_t(*p_++);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    MXT_FAIL(what_, ": not a SentencePiece model (protobuf varint longer than 10 bytes)");
  }
  // Reads a key; returns the field number and sets the wire type.
  uint32_t key(int* type) {
    const uint64_t k = varint();
    *type = int(k & 7);
    return uint32_t(k >> 3);
  }
  // A length-delimited value.
  std::string_view bytes() {
    const uint64_t n = varint();
    MXT_CHECK(n <= uint64_t(end_ - p_), what_, ": not a SentencePiece model (a protobuf field "
              "runs past the end of the file)");
    std::string_view v(p_, size_t(n));
    p_ += n;
    return v;
  }
  void skip(int type) {
    switch (type) {
      case 0: varint(); return;
      case 1: advance(8); return;
      case 2: bytes(); return;
      case 5: advance(4); return;
      default: MXT_FAIL(what_, ": not a SentencePiece model (protobuf wire type ", type, ")");
    }
  }

 private:
  void advance(size_t n) {
    MXT_CHECK(n <= size_t(end_ - p_), what_, ": not a SentencePiece model (truncated field)");
    p_ += n;
  }
  const char* p_;
  const char* end_;
  const std::string& what_;
};

template <class F>
void for_each_field(std::string_view msg, const std::string& what, F&& f) {
  Wire w(msg.data(), msg.size(), what);
  while (!w.done()) {
    int type = 0;
    const uint32_t field = w.key(&type);
    if (!f(field, type, w)) w.skip(type);
  }
}

void read_normalizer(std::string_view msg, const std::string& what, SpSpec& s, bool denorm) {
  for_each_field(msg, what, [&](uint32_t field, int type, Wire& w) {
    if (denorm) {
      if (field == 2 && type == 2) {
        s.has_denormalizer_map = !w.bytes().empty();
        return true;
      }
      return false;
    }
    if (field == 1 && type == 2) {
      s.normalizer_name = std::string(w.bytes());
    } else if (field == 2 && type == 2) {
      s.has_charmap = !w.bytes().empty();
    } else if (field >= 3 && field <= 5 && type == 0) {
      const bool v = w.varint() != 0;
      (field == 3 ? s.add_dummy_prefix : field == 4 ? s.remove_extra_whitespaces
                                                    : s.escape_whitespaces) = v;
    } else {
      return false;
    }
    return true;
  });
}

void read_trainer(std::string_view msg, const std::string& what, SpSpec& s) {
  for_each_field(msg, what, [&](uint32_t field, int type, Wire& w) {
    if (type != 0) return false;
    switch (field) {
      case 3: s.model_type = int(w.varint()); return true;
      case 22: s.split_by_whitespace = w.varint() != 0; return true;
      case 24: s.treat_whitespace_as_suffix = w.varint() != 0; return true;
      case 26: s.allow_whitespace_only_pieces = w.varint() != 0; return true;
      case 35: s.byte_fallback = w.varint() != 0; return true;
      default: return false;
    }
  });
}

}  // namespace

SpSpec read_sp_spec(const std::string& model, const std::string& what) {
  SpSpec s;
  bool trainer = false, normalizer = false;
  for_each_field(model, what, [&](uint32_t field, int type, Wire& w) {
    if (type != 2) return false;
    if (field == 2) {
      read_trainer(w.bytes(), what, s);
      trainer = true;
    } else if (field == 3) {
      read_normalizer(w.bytes(), what, s, false);
      normalizer = true;
    } else if (field == 5) {
      read_normalizer(w.bytes(), what, s, true);
    } else {
      return false;
    }
    return true;
  });
  MXT_CHECK(trainer && normalizer, what, ": not a SentencePiece model (no trainer or normalizer "
            "settings)");
  return s;
}

std::string sp_spec_problem(const SpSpec& s) {
  if (s.normalizer_name != "identity" || s.has_charmap)
    return "its normalization is `" + s.normalizer_name + "`, mxtrain needs `identity`";
  if (s.add_dummy_prefix) return "add_dummy_prefix is true, mxtrain needs false";
  if (s.remove_extra_whitespaces) return "remove_extra_whitespaces is true, mxtrain needs false";
  if (!s.escape_whitespaces) return "escape_whitespaces is false, mxtrain needs true";
  if (s.has_denormalizer_map) return "it has a denormalization map, mxtrain needs none";
  if (!s.byte_fallback) return "byte_fallback is false, mxtrain needs true";
  if (!s.split_by_whitespace) return "split_by_whitespace is false, mxtrain needs true";
  if (s.treat_whitespace_as_suffix) return "treat_whitespace_as_suffix is true, mxtrain needs false";
  if (s.allow_whitespace_only_pieces)
    return "allow_whitespace_only_pieces is true, mxtrain needs false";
  if (s.model_type != 1 && s.model_type != 2)
    return "its model type is " + std::to_string(s.model_type) +
           " (word or char), mxtrain needs BPE or unigram";
  return "";
}

}  // namespace mxtrain::corpus::detail
