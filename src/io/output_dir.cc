// io/output_dir.cc — user-named output directories that keep what mxtrain did not write
// (mxtrain/io/output_dir.h).
#include "mxtrain/io/output_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/io/json_input.h"

namespace fs = std::filesystem;

namespace mxtrain::io {
namespace {

// Names of the directory's entries, sorted.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  MXT_CHECK(!ec, "cannot list ", dir, ": ", ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

// "a, b, c and 4 more".
std::string some_of(const std::vector<std::string>& names) {
  std::string s;
  const size_t shown_n = std::min<size_t>(names.size(), 4);
  for (size_t i = 0; i < shown_n; ++i) s += (i ? ", " : "") + shown(names[i], 60);
  if (names.size() > shown_n) s += " and " + std::to_string(names.size() - shown_n) + " more";
  return s;
}

// What the manifest of an existing output directory says mxtrain wrote there. `has` is false
// when the directory has no manifest.
struct Written {
  bool has = false;
  std::set<std::string> names;
};

Written read_manifest(const std::string& dir, const std::string& flag) {
  Written w;
  const std::string path = dir + "/" + kOutputManifest;
  if (!path_exists(path)) return w;
  w.has = true;
  const nlohmann::json j = parse_json_strict(read_text_file(path), path);
  MXT_CHECK(j.is_object() && j.contains("files") && j["files"].is_array(), flag, " ", dir, ": ",
            kOutputManifest, " is not a manifest mxtrain wrote (no \"files\" list); remove it "
            "only if nothing in the directory should be kept");
  for (const auto& f : j["files"]) {
    MXT_CHECK(f.is_string(), flag, " ", dir, ": ", kOutputManifest,
              ": \"files\" must list file names");
    w.names.insert(f.get<std::string>());
  }
  return w;
}

// The entries of `dir` the manifest does not list (the user's).
std::vector<std::string> foreign_entries(const std::string& dir, const Written& w) {
  std::vector<std::string> out;
  for (const std::string& n : entries(dir))
    if (n != kOutputManifest && !w.names.count(n)) out.push_back(n);
  return out;
}

// Makes `to` (new) hold what `from` holds: directories made, files hard-linked (copied where
// a link is refused, e.g. across file systems), symbolic links copied.
void link_tree(const fs::path& from, const fs::path& to) {
  const fs::file_status st = fs::symlink_status(from);
  std::error_code ec;
  if (fs::is_symlink(st)) {
    fs::copy_symlink(from, to, ec);
  } else if (fs::is_directory(st)) {
    fs::create_directory(to, from, ec);
    if (!ec)
      for (const auto& e : fs::directory_iterator(from)) link_tree(e.path(), to / e.path().filename());
  } else if (fs::is_regular_file(st)) {
    if (::link(from.c_str(), to.c_str()) != 0) fs::copy_file(from, to, ec);
  } else {
    MXT_FAIL("cannot keep ", from.string(), ": it is not a file, directory or link (",
             "move it out of the output directory)");
  }
  MXT_CHECK(!ec, "cannot keep ", from.string(), " in the new output: ", ec.message());
}

}  // namespace

void check_replaceable_dir(const std::string& path, const std::string& flag) {
  if (!path_exists(path)) return;
  MXT_CHECK(is_directory(path), flag, " ", shown(path), " exists and is not a directory");
  const Written w = read_manifest(path, flag);
  if (w.has) return;
  const std::vector<std::string> there = entries(path);
  MXT_CHECK(there.empty(), flag, " ", shown(path), ": the directory exists and holds files "
            "mxtrain did not write (", some_of(there), "); choose a new or empty directory, or "
            "move them out first");
}

void commit_output_dir(AtomicDir& out, const std::string& flag, const std::string& written_by) {
  const std::vector<std::string> ours = entries(out.path());
  nlohmann::json manifest = {{"written_by", written_by}, {"files", ours}};
  out.write(kOutputManifest, manifest.dump(1) + "\n");
  const std::string& target = out.target();
  if (is_directory(target)) {
    check_replaceable_dir(target, flag);
    const std::vector<std::string> keep = foreign_entries(target, read_manifest(target, flag));
    for (const std::string& n : keep)
      MXT_CHECK(!std::binary_search(ours.begin(), ours.end(), n), flag, " ", shown(target),
                ": holds ", shown(n, 60), ", which mxtrain did not write, under a name it "
                "writes now; move it out first");
    for (const std::string& n : keep) link_tree(fs::path(target) / n, fs::path(out.path()) / n);
  }
  out.commit();
}

}  // namespace mxtrain::io
