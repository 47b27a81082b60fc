// policy/json_util.h — strict JSON reading shared by the report and the
// policy file (internal to src/policy).
//
// parse_json_strict rejects duplicate keys (nlohmann keeps the last one silently). Field is a
// view of one JSON value at a path ("rules.row.proj[0]"); its accessors check type and range
// and throw mxtrain::Error "<source>: <path>.<key>: <problem>", so every message names the
// file and the place in it. finish() rejects keys nobody asked for (typos).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "mxtrain/io/json_input.h"

namespace mxtrain::policy::detail {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

using io::parse_json_strict;  // mxtrain/io/json_input.h
// io::read_text_file with errors prefixed by what the file is ("policy file: ...").
std::string read_text_file(const std::string& path, const std::string& what);

// "<source>: <path>: <msg>" (path omitted when empty).
[[noreturn]] void fail_at(const std::string& source, const std::string& path,
                          const std::string& msg);
std::string join_path(const std::string& path, const std::string& key);
std::string index_path(const std::string& path, size_t i);
// {"a": 1, "b": "x"} on one line, keys in insertion order (values dumped compactly).
std::string flat_object(const ordered_json& o);
// Short rendering of a JSON value for messages: type and (truncated) text.
std::string describe_value(const json& v);

class Object {
 public:
  // Throws unless `v` is an object.
  Object(const json& v, std::string source, std::string path);

  bool has(const std::string& key);  // also records `key` as a known field
  const json& at(const std::string& key);  // required; marks used
  int64_t integer(const std::string& key, int64_t min_value);
  int64_t integer_or(const std::string& key, int64_t min_value, int64_t fallback);
  double number(const std::string& key, double exclusive_min);
  double number_nonneg(const std::string& key);
  std::string string(const std::string& key, bool allow_empty = false);
  // Rejects keys never asked for, listing the known ones.
  void finish() const;

  const std::string& source() const { return source_; }
  const std::string& path() const { return path_; }
  std::string key_path(const std::string& key) const { return join_path(path_, key); }

 private:
  const json& v_;
  std::string source_, path_;
  std::set<std::string> used_, known_;
};

// Standalone checks for values that are not object members.
int64_t as_integer(const json& v, int64_t min_value, const std::string& source,
                   const std::string& path);

}  // namespace mxtrain::policy::detail
