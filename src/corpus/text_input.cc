// corpus/text_input.cc — resolving text inputs to files and reading them in chunks
// (corpus/text_input.h).
#include "mxtrain/corpus/text_input.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"

namespace mxtrain::corpus {
namespace fs = std::filesystem;

std::string default_fortunes_dir() { return "/usr/share/games/fortunes"; }

namespace {

constexpr size_t kBlock = 1u << 20;  // bytes read from a file at a time

// Whether the file starts with a token shard's magic (corpus/shards.h): binary tokens, not
// text, whatever its name.
bool is_token_shard(const fs::path& p) {
  char magic[8] = {};
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return false;
  const size_t n = std::fread(magic, 1, sizeof magic, f);
  std::fclose(f);
  return n == sizeof magic && std::memcmp(magic, "MXTSHARD", 8) == 0;
}

// Token shards are never read as text: a directory that holds them is a shard directory,
// complete (its shards.json) or not (a partial copy), and is refused as text input.
void refuse_shards_as_text(const fs::path& dir, const std::vector<fs::path>& files) {
  const bool manifest = fs::exists(dir / "shards.json");
  for (const fs::path& p : files) {
    if (!is_token_shard(p)) continue;
    MXT_CHECK(manifest, "`", shown(dir.string()), "` holds token shards (",
              p.filename().string(), ") but no shards.json, so it is an incomplete shard "
              "directory (prepare-data writes shards.json last), not text; make it again with "
              "`mxtrain prepare-data`");
    MXT_FAIL("`", shown(dir.string()), "` is a token-shard directory (shards.json), not text: "
             "give it as data.path to train on it, or give the text it was made from");
  }
}

void add_directory(const fs::path& dir, TextInput& in) {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;  // skips subdirectories (fortunes' offensive `off/`)
    const auto ext = e.path().extension().string();
    if (ext == ".dat" || ext == ".u8") continue;
    paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  refuse_shards_as_text(dir, paths);
  for (const auto& p : paths) in.files.push_back({p.string(), true, uint64_t(fs::file_size(p))});
}

}  // namespace

TextInput resolve_text_input(const std::vector<std::string>& inputs) {
  MXT_CHECK(!inputs.empty(), "no text input given (a file, a directory or `fortunes`)");
  TextInput in;
  for (const std::string& path : inputs) {
    const size_t before = in.files.size();
    std::string what;
    std::error_code ec;
    const bool is_dir = fs::is_directory(path, ec);
    MXT_CHECK(!ec || ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory,
              "text input `", shown(path), "`: ", ec.message());
    if (path == "fortunes" || is_dir) {
      const fs::path dir = path == "fortunes" ? fs::path(default_fortunes_dir()) : fs::path(path);
      MXT_CHECK(fs::is_directory(dir), "the default corpus needs the Debian `fortunes` package (",
                dir.string(), " not found); run scripts/setup.sh or give a text file");
      add_directory(dir, in);
      what = path == "fortunes" ? "fortunes corpus (" : "directory (";
      what += std::to_string(in.files.size() - before) + " files in " + dir.string() + ")";
      MXT_CHECK(in.files.size() > before, "text input directory `", dir.string(),
                "` holds no text files");
    } else {
      MXT_CHECK(fs::exists(path, ec), "text input `", shown(path), "` does not exist");
      struct stat st {};
      MXT_CHECK(::stat(path.c_str(), &st) == 0, "cannot read ", path, ": ", std::strerror(errno));
      MXT_CHECK(S_ISREG(st.st_mode), path, " is not a regular file but ", io::file_kind(st.st_mode),
                "; text inputs are files or directories of files");
      MXT_CHECK(!is_token_shard(path), "text input `", shown(path), "` is a token shard (",
                "binary tokens written by `mxtrain prepare-data`), not text");
      in.files.push_back({path, false, uint64_t(fs::file_size(path))});
      what = path;
    }
    in.description += (in.description.empty() ? "" : " + ") + what;
  }
  for (const TextFile& f : in.files) in.input_bytes += f.size;
  return in;
}

TextReader::TextReader(TextInput input) : input_(std::move(input)) {}

TextReader::~TextReader() {
  if (f_) std::fclose(f_);
}

bool TextReader::fill() {
  while (file_ < input_.files.size()) {
    const TextFile& tf = input_.files[file_];
    if (!f_) {
      f_ = std::fopen(tf.path.c_str(), "rb");
      MXT_CHECK(f_, "cannot read `", tf.path, "`: ", std::strerror(errno));
    }
    buf_.resize(kBlock);
    char* buf = buf_.data();
    const size_t n = std::fread(buf, 1, kBlock, f_);
    MXT_CHECK(n > 0 || !std::ferror(f_), "cannot read `", tf.path, "`: ", std::strerror(errno));
    consumed_ += n;
    if (!tf.fortune) {
      pending_.append(buf, n);
    } else {
      // Complete lines go to pending_: "%" becomes an empty line, every line ends with '\n'.
      line_.append(buf, n);
      size_t start = 0;
      for (size_t nl; (nl = line_.find('\n', start)) != std::string::npos; start = nl + 1) {
        if (!(nl - start == 1 && line_[start] == '%')) pending_.append(line_, start, nl - start);
        pending_ += '\n';
      }
      line_.erase(0, start);
    }
    if (n == kBlock) return true;
    std::fclose(f_);  // end of this file
    f_ = nullptr;
    if (tf.fortune && !line_.empty()) {  // a last line without '\n'
      if (line_ != "%") pending_ += line_;
      pending_ += '\n';
      line_.clear();
    }
    ++file_;
    if (n > 0) return true;
  }
  return false;
}

bool TextReader::read(std::string& out, size_t max_bytes) {
  MXT_CHECK(max_bytes >= 1, "TextReader::read: max_bytes must be >= 1");
  bool more = true;
  while (pending_.size() <= max_bytes && (more = fill())) {
  }
  out.clear();
  if (pending_.empty()) return false;
  size_t cut = pending_.size();
  if (more || cut > max_bytes) {
    cut = std::min(cut, max_bytes);
    const size_t nl = pending_.rfind('\n', cut - 1);
    if (nl != std::string::npos) {
      cut = nl + 1;
    } else {
      const size_t sp = pending_.rfind(' ', cut - 1);
      if (sp != std::string::npos && sp > 0) cut = sp;  // the space starts the next chunk
    }
  }
  out.assign(pending_, 0, cut);
  pending_.erase(0, cut);
  return true;
}

std::string read_all_text(const TextInput& input) {
  std::string text, chunk;
  text.reserve(size_t(input.input_bytes));
  TextReader r(input);
  while (r.read(chunk)) text += chunk;
  return text;
}

}  // namespace mxtrain::corpus
