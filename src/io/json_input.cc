// io/json_input.cc — depth check and non-recursive descriptions for JSON read from files
// (see mxtrain/io/json_input.h).
#include "mxtrain/io/json_input.h"

#include "mxtrain/common.h"

namespace mxtrain::io {

void check_json_depth(std::string_view text, const std::string& source, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      MXT_CHECK(++depth <= max_depth, source, ": JSON nested deeper than ", max_depth,
                " levels (at byte ", i, ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

namespace {

template <class J>
std::string summary(const J& v) {
  if (v.is_array()) return "array of " + std::to_string(v.size()) + " elements";
  if (v.is_object()) return "object with " + std::to_string(v.size()) + " keys";
  if (v.is_string()) {
    const std::string& s = v.template get_ref<const std::string&>();
    const J cut = s.size() > 40 ? J(s.substr(0, 37) + "...") : v;
    return cut.dump(-1, ' ', false, J::error_handler_t::replace);
  }
  return v.dump();  // a number, boolean or null
}

}  // namespace

std::string json_summary(const nlohmann::json& v) { return summary(v); }
std::string json_summary(const nlohmann::ordered_json& v) { return summary(v); }

}  // namespace mxtrain::io
