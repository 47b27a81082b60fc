// mxtrain/io/json_input.h — guards for JSON that comes from files (policies, reports,
// quantize meta.json, checkpoint state.json, safetensors headers).
//
// nlohmann::json parses deep nesting without trouble but serializes it recursively, so a
// value nested ~100,000 deep overflows the stack the first time it is dumped. Every JSON
// input is therefore checked for depth before it is parsed, and error messages describe a
// bad value with `json_summary`, which never serializes a container.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mxtrain::io {

// No mxtrain file nests deeper than a few levels; 64 leaves room for tools' extras.
inline constexpr int kMaxJsonDepth = 64;

// Throws "SOURCE: JSON nested deeper than 64 levels (at byte N)" when arrays/objects nest
// deeper than `max_depth`. Brackets inside strings are not counted. Linear, no allocation.
void check_json_depth(std::string_view text, const std::string& source,
                      int max_depth = kMaxJsonDepth);

// check_json_depth, then a parse that refuses what nlohmann::json would take silently: a key
// twice in one object (nlohmann keeps the last). Throws "SOURCE: not valid JSON: ..." or
// "SOURCE: rules.row[0].name: duplicate key (each key may appear once per object)".
nlohmann::json parse_json_strict(std::string_view text, const std::string& source);

// A short description of a value for messages: scalars as JSON text (strings cut to 40
// characters), containers as "array of N elements" / "object with N keys".
std::string json_summary(const nlohmann::json& v);
std::string json_summary(const nlohmann::ordered_json& v);

}  // namespace mxtrain::io
