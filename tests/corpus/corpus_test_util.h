// tests/corpus/corpus_test_util.h — what the corpus tests share: a scratch directory, writing a
// file, and one small SentencePiece model trained once per test binary on a fortunes file.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "mxtrain/corpus/tokenizer.h"

namespace mxtrain::corpus::testing {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with the object.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag = "corpus") {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("mxt_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

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
