// corpus/sp_spec.h — the settings stored in a SentencePiece model file that decide whether its
// encoding is byte-exact (internal to src/corpus).
//
// libsentencepiece does not install the protobuf headers of its ModelProto, so the few fields
// needed are read straight from the protobuf wire format: ModelProto.trainer_spec (field 2),
// .normalizer_spec (3) and .denormalizer_spec (5); in TrainerSpec model_type (3),
// split_by_whitespace (22), treat_whitespace_as_suffix (24), allow_whitespace_only_pieces
// (26), byte_fallback (35); in NormalizerSpec name (1), precompiled_charmap (2),
// add_dummy_prefix (3), remove_extra_whitespaces (4), escape_whitespaces (5). An absent field
// has its proto2 default (sentencepiece_model.proto).
#pragma once

#include <string>

namespace mxtrain::corpus::detail {

struct SpSpec {
  int model_type = 1;  // 1 unigram, 2 bpe, 3 word, 4 char
  bool split_by_whitespace = true;
  bool treat_whitespace_as_suffix = false;
  bool allow_whitespace_only_pieces = false;
  bool byte_fallback = false;
  std::string normalizer_name;
  bool has_charmap = false;  // a non-empty precompiled normalization map
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  bool has_denormalizer_map = false;
};

// Throws mxtrain::Error naming `what` when the bytes are not a well-formed protobuf message.
SpSpec read_sp_spec(const std::string& model, const std::string& what);

// "" when the settings make encoding byte-exact (corpus/tokenizer.h), else the first setting
// that does not, said as "<setting> is <value>, mxtrain needs <value>".
std::string sp_spec_problem(const SpSpec& s);

}  // namespace mxtrain::corpus::detail
