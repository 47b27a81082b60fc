// train/data.cc — loading the byte-level corpus and drawing sequences (train/data.h).
#include "mxtrain/train/data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/io/atomic_file.h"

namespace mxtrain {
namespace fs = std::filesystem;

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::string default_fortunes_dir() { return "/usr/share/games/fortunes"; }

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  MXT_CHECK(f.good(), "cannot read `", p.string(), "`");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Fortune files separate entries with a line holding only '%'; they become blank lines.
std::string strip_fortune_separators(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    out += (line == "%") ? "" : line;
    out += '\n';
  }
  return out;
}

std::string load_fortunes_dir(const fs::path& dir, int* files) {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;  // skips the offensive `off/` subdirectory
    const auto ext = e.path().extension().string();
    if (ext == ".dat" || ext == ".u8") continue;
    paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  std::string text;
  for (const auto& p : paths) text += strip_fortune_separators(read_all(p));
  *files = int(paths.size());
  return text;
}

}  // namespace

TextCorpus TextCorpus::from_text(std::string text, float val_fraction) {
  MXT_CHECK(val_fraction > 0 && val_fraction < 0.5f, "val_fraction must be in (0, 0.5), got ",
            val_fraction);
  const int64_t n = int64_t(text.size());
  const int64_t nval = int64_t(double(n) * val_fraction);
  TextCorpus c;
  c.train_.assign(text.begin(), text.end() - nval);
  c.val_.assign(text.end() - nval, text.end());
  c.description_ = std::to_string(n) + " bytes";
  return c;
}

TextCorpus TextCorpus::load(const std::string& path, float val_fraction) {
  std::string text, what;
  if (path == "fortunes" || fs::is_directory(path)) {
    const fs::path dir = path == "fortunes" ? fs::path(default_fortunes_dir()) : fs::path(path);
    MXT_CHECK(fs::is_directory(dir), "the default corpus needs the Debian `fortunes` package (",
              dir.string(), " not found); run scripts/setup.sh or pass --data FILE");
    int files = 0;
    text = load_fortunes_dir(dir, &files);
    what = "fortunes corpus (" + std::to_string(files) + " files in " + dir.string() + ")";
  } else {
    try {  // a missing file, a FIFO, a device are each named for what they are
      text = io::read_text_file(path);
    } catch (const Error& e) {
      rethrow_prefixed("data `" + path + "`: ", e);
    }
    what = path;
  }
  MXT_CHECK(text.size() >= 4096, "corpus `", path, "` is too small (", text.size(),
            " bytes); need at least 4096");
  TextCorpus c = from_text(std::move(text), val_fraction);
  c.description_ = what + ", " + c.description_;
  return c;
}

uint64_t TextCorpus::content_hash() const {
  const uint64_t h[2] = {dist::fnv1a64(train_.data(), train_.size()),
                         dist::fnv1a64(val_.data(), val_.size())};
  return dist::fnv1a64(h, sizeof h);
}

void TextCorpus::train_sequence(uint64_t seed, int64_t step, int64_t seq_index, int T,
                                int32_t* tokens, int32_t* targets) const {
  const int64_t range = train_size() - T - 1;
  MXT_CHECK(range > 0, "sequence length ", T, " exceeds the training split (", train_size(),
            " bytes)");
  const uint64_t h = splitmix64(seed ^ splitmix64(uint64_t(step) * 0x100000001B3ull +
                                                  uint64_t(seq_index)));
  const int64_t off = int64_t(h % uint64_t(range));
  for (int t = 0; t < T; ++t) {
    tokens[t] = train_[off + t];
    targets[t] = train_[off + t + 1];
  }
}

void TextCorpus::val_sequence(int64_t i, int64_t n, int T, int32_t* tokens,
                              int32_t* targets) const {
  const int64_t range = val_size() - T - 1;
  MXT_CHECK(range > 0, "sequence length ", T, " exceeds the validation split (", val_size(),
            " bytes)");
  const int64_t off = n <= 1 ? 0 : (range * i) / (n - 1);
  for (int t = 0; t < T; ++t) {
    tokens[t] = val_[off + t];
    targets[t] = val_[off + t + 1];
  }
}

}  // namespace mxtrain
