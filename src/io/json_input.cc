// io/json_input.cc — depth check, strict parsing and non-recursive descriptions for JSON read
// from files
// (see mxtrain/io/json_input.h).
#include "mxtrain/io/json_input.h"

#include <set>
#include <vector>

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

namespace {

// Tracks where the parser is, to name the path of a duplicate key.
struct Frame {
  bool is_array = false;
  std::set<std::string> keys;
  std::string key;   // objects: the key whose value is being parsed
  size_t index = 0;  // arrays: index of the element being parsed
};

// "rules.row.fc2[0].min_tokens": the path of the value being parsed.
std::string frames_path(const std::vector<Frame>& st, size_t upto) {
  std::string p;
  for (size_t i = 0; i < upto; ++i)
    p = st[i].is_array ? p + "[" + std::to_string(st[i].index) + "]"
                       : (p.empty() ? st[i].key : p + "." + st[i].key);
  return p;
}

}  // namespace

nlohmann::json parse_json_strict(std::string_view text, const std::string& source) {
  using json = nlohmann::json;
  std::vector<Frame> st;
  std::string duplicate;  // path of the first duplicate key
  auto value_done = [&] {
    if (!st.empty() && st.back().is_array) ++st.back().index;
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    using E = json::parse_event_t;
    switch (ev) {
      case E::object_start: st.push_back(Frame{}); break;
      case E::array_start: st.push_back(Frame{true, {}, {}, 0}); break;
      case E::key: {
        Frame& f = st.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second && duplicate.empty())
          duplicate = frames_path(st, st.size());
        break;
      }
      case E::object_end:
      case E::array_end:
        st.pop_back();
        value_done();
        break;
      case E::value: value_done(); break;
    }
    return true;
  };
  check_json_depth(text, source);
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    MXT_FAIL(source, ": not valid JSON: ", e.what());
  }
  MXT_CHECK(duplicate.empty(), source, ": ", duplicate,
            ": duplicate key (each key may appear once per object)");
  return j;
}

std::string json_summary(const nlohmann::json& v) { return summary(v); }
std::string json_summary(const nlohmann::ordered_json& v) { return summary(v); }

}  // namespace mxtrain::io
