// tests/io/io_test_util.h — shared pieces of the io tests: a scratch directory per test,
// listing a directory, and catching an mxtrain::Error's message.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "mxtrain/common.h"

namespace mxtrain::io::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at the end.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/mxt_io_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Sorted names in a directory (hidden ones included), or {} if it does not exist.
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The message of the mxtrain::Error `f` throws, or "<no error>".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mxtrain::Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace mxtrain::io::testing

// Expects `stmt` to throw mxtrain::Error whose message contains `substr`.
#define EXPECT_ERROR_CONTAINS(stmt, substr)                                          \
  do {                                                                               \
    std::string mxt_msg_ = ::mxtrain::io::testing::error_of([&] { stmt; });          \
    EXPECT_NE(mxt_msg_.find(substr), std::string::npos)                              \
        << "expected an error containing \"" << (substr) << "\", got: " << mxt_msg_; \
  } while (0)
