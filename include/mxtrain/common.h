// mxtrain/common.h — errors and checks shared by every module.
//
// MXT_CHECK is always on and is used at API boundaries: it throws mxtrain::Error with
// file:line and a message built from the streamed arguments, so a user sees what to fix.
// MXT_DCHECK guards kernel invariants in debug builds only.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mxtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
template <class... Args>
[[noreturn]] void fail(const char* file, int line, const Args&... args) {
  std::ostringstream os;
  append(os, args...);
  os << " [" << file << ":" << line << "]";
  throw Error(os.str());
}
}  // namespace detail

// A value as a message shows it: whole when short, else its start and end around the
// number of characters left out ("xxxx…(9999800 more characters)…xxxx"), so that one bad
// value (a 10 MB path) never makes a 10 MB error line.
inline std::string shown(const std::string& v, size_t max_chars = 160) {
  if (v.size() <= max_chars) return v;
  const size_t head = max_chars * 2 / 3, tail = max_chars / 6;
  return v.substr(0, head) + "...(" + std::to_string(v.size() - head - tail) +
         " more characters)..." + v.substr(v.size() - tail);
}

// Throws `e` again with `prefix` in front of its message (the file:line stays the original
// check's), for a caller that adds which input the error is about.
[[noreturn]] inline void rethrow_prefixed(const std::string& prefix, const Error& e) {
  throw Error(prefix + e.what());
}

}  // namespace mxtrain

// Throws mxtrain::Error("<message> [file:line]") when cond is false.
#define MXT_CHECK(cond, ...)                                                 \
  do {                                                                       \
    if (!(cond)) ::mxtrain::detail::fail(__FILE__, __LINE__, __VA_ARGS__);   \
  } while (0)

// Unconditional failure with a message.
#define MXT_FAIL(...) ::mxtrain::detail::fail(__FILE__, __LINE__, __VA_ARGS__)

#ifndef NDEBUG
#define MXT_DCHECK(cond) MXT_CHECK(cond, "internal check failed: " #cond)
#else
#define MXT_DCHECK(cond) ((void)0)
#endif
