// tests/corpus/corpus_test_util.h — what the corpus tests share: writing a file, and one small
// SentencePiece model trained once per test binary on a fortunes file (the scratch directory
// and error_of come from tests/io/io_test_util.h).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "io/io_test_util.h"
#include "mxtrain/corpus/tokenizer.h"

namespace mxtrain::corpus::testing {

namespace fs = std::filesystem;

using io::testing::ScratchDir;  // a scratch directory: d.path(), d / "name"

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The fortunes file the small tokenizer is trained on (238 KB of English).
inline std::string fortunes_file(const std::string& name = "computers") {
  return "/usr/share/games/fortunes/" + name;
}

// A 512-piece BPE model of fortunes_file(), trained on first use.
inline const Tokenizer& small_tokenizer() {
  static const Tokenizer tok = [] {
    TokenizerTrainOptions o;
    o.inputs = {fortunes_file()};
    o.vocab_size = 512;
    return Tokenizer::from_model(train_tokenizer(o), "small test tokenizer");
  }();
  return tok;
}

}  // namespace mxtrain::corpus::testing
