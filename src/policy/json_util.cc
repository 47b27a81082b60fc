// policy/json_util.cc — strict JSON parsing (duplicate keys), typed field access with
// JSON-path error messages, for the report and the policy file.
#include "policy/json_util.h"

#include <cmath>
#include <sstream>
#include <vector>

#include "mxtrain/common.h"
#include "mxtrain/io/atomic_file.h"
#include "mxtrain/io/json_input.h"

namespace mxtrain::policy::detail {

std::string join_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string index_path(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

void fail_at(const std::string& source, const std::string& path, const std::string& msg) {
  if (path.empty()) MXT_FAIL(source, ": ", msg);
  MXT_FAIL(source, ": ", path, ": ", msg);
}

std::string describe_value(const json& v) {
  if (v.is_array() || v.is_object()) return io::json_summary(v);
  return std::string(v.type_name()) + " " + io::json_summary(v);
}

std::string flat_object(const ordered_json& o) {
  std::string s = "{";
  bool first = true;
  for (auto it = o.begin(); it != o.end(); ++it) {
    s += (first ? "\"" : ", \"") + it.key() + "\": " + it.value().dump();
    first = false;
  }
  return s + "}";
}


std::string read_text_file(const std::string& path, const std::string& what) {
  try {
    return io::read_text_file(path);
  } catch (const Error& e) {
    MXT_FAIL(what, ": ", e.what());
  }
}

Object::Object(const json& v, std::string source, std::string path)
    : v_(v), source_(std::move(source)), path_(std::move(path)) {
  if (!v_.is_object()) fail_at(source_, path_, "must be an object, got " + describe_value(v_));
}

bool Object::has(const std::string& key) {
  known_.insert(key);
  return v_.contains(key);
}

const json& Object::at(const std::string& key) {
  known_.insert(key);
  auto it = v_.find(key);
  if (it == v_.end()) fail_at(source_, path_, "missing required field \"" + key + "\"");
  used_.insert(key);
  return *it;
}

int64_t as_integer(const json& v, int64_t min_value, const std::string& source,
                   const std::string& path) {
  if (!v.is_number_integer())
    fail_at(source, path, "must be an integer, got " + describe_value(v));
  int64_t x;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) fail_at(source, path, "integer too large: " + io::json_summary(v));
    x = int64_t(u);
  } else {
    x = v.get<int64_t>();
  }
  if (x < min_value)
    fail_at(source, path,
            "must be an integer >= " + std::to_string(min_value) + ", got " + std::to_string(x));
  return x;
}

int64_t Object::integer(const std::string& key, int64_t min_value) {
  return as_integer(at(key), min_value, source_, key_path(key));
}

int64_t Object::integer_or(const std::string& key, int64_t min_value, int64_t fallback) {
  return has(key) ? integer(key, min_value) : fallback;
}

double Object::number(const std::string& key, double exclusive_min) {
  const json& v = at(key);
  if (!v.is_number()) fail_at(source_, key_path(key), "must be a number, got " + describe_value(v));
  double x = v.get<double>();
  if (!std::isfinite(x) || !(x > exclusive_min)) {
    std::ostringstream os;
    os << "must be a finite number > " << exclusive_min << ", got " << io::json_summary(v);
    fail_at(source_, key_path(key), os.str());
  }
  return x;
}

double Object::number_nonneg(const std::string& key) {
  const json& v = at(key);
  if (!v.is_number()) fail_at(source_, key_path(key), "must be a number, got " + describe_value(v));
  double x = v.get<double>();
  if (!std::isfinite(x) || x < 0)
    fail_at(source_, key_path(key), "must be a finite number >= 0, got " + io::json_summary(v));
  return x;
}

std::string Object::string(const std::string& key, bool allow_empty) {
  const json& v = at(key);
  if (!v.is_string()) fail_at(source_, key_path(key), "must be a string, got " + describe_value(v));
  std::string s = v.get<std::string>();
  if (!allow_empty && s.empty()) fail_at(source_, key_path(key), "must not be empty");
  return s;
}

void Object::finish() const {
  for (auto it = v_.begin(); it != v_.end(); ++it) {
    if (used_.count(it.key())) continue;
    std::string known;
    for (const auto& k : known_) known += (known.empty() ? "" : ", ") + k;
    fail_at(source_, key_path(it.key()), "unknown field; the fields here are: " + known);
  }
}

}  // namespace mxtrain::policy::detail
