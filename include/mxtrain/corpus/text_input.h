// mxtrain/corpus/text_input.h — which files a text input names, and reading their text in
// bounded chunks.
//
// An input is a text file, a directory, or "fortunes" (the Debian `fortunes` package,
// /usr/share/games/fortunes). A directory means its regular files (not its subdirectories —
// which leaves out fortunes' offensive `off/`), sorted by name, without the `.dat` / `.u8`
// index files; a directory's files are read as fortune files: a line holding only `%` (the
// separator between entries) becomes an empty line and every line ends with '\n'. A file given
// by name is read byte for byte. Several inputs are concatenated in the order given. The
// byte-level trainer (train/data.h), `mxtrain tokenizer train` and `mxtrain prepare-data` all
// read text this way, so the same input is the same text everywhere.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace mxtrain::corpus {

// Directory holding the fortunes files (Debian: /usr/share/games/fortunes).
std::string default_fortunes_dir();

struct TextFile {
  std::string path;
  bool fortune = false;  // '%' separator lines become empty lines
  uint64_t size = 0;     // bytes on disk
};

struct TextInput {
  std::vector<TextFile> files;
  uint64_t input_bytes = 0;  // sum of the files' sizes
  std::string description;   // e.g. "fortunes corpus (14 files in /usr/share/games/fortunes)"
};

// Resolves inputs to files. Throws naming the input for a path that does not exist, and for
// no inputs or no files at all.
TextInput resolve_text_input(const std::vector<std::string>& inputs);

// Reads the text of a TextInput in chunks that end at a line boundary where one exists.
class TextReader {
 public:
  explicit TextReader(TextInput input);
  ~TextReader();
  TextReader(const TextReader&) = delete;
  TextReader& operator=(const TextReader&) = delete;

  // Replaces `out` with the next chunk: about `max_bytes` of text ending after a '\n' (a line
  // longer than max_bytes is cut at its last space, else anywhere). False at the end.
  bool read(std::string& out, size_t max_bytes = 4u << 20);
  // Bytes of the input files consumed so far (for progress: compare with input_bytes).
  uint64_t input_bytes_read() const { return consumed_; }
  // Where the text returned so far ends, in input bytes: what was consumed less what is still
  // buffered. Exact for files given by name; for fortune files the removed separators make it
  // run ahead by a byte per entry at most.
  uint64_t position() const {
    const uint64_t buffered = pending_.size() + line_.size();
    return consumed_ > buffered ? consumed_ - buffered : 0;
  }
  const TextInput& input() const { return input_; }

 private:
  bool fill();  // reads more of the current file into pending_; false when all files are done
  TextInput input_;
  size_t file_ = 0;
  std::FILE* f_ = nullptr;
  std::string pending_;   // text read but not yet returned
  std::string line_;      // a fortune file's incomplete last line
  std::vector<char> buf_; // one block read from the file
  uint64_t consumed_ = 0;
};

// The whole text of an input (for corpora that fit in memory).
std::string read_all_text(const TextInput& input);

}  // namespace mxtrain::corpus
