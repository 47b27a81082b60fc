// cli/values.cc — the strict command-line value checks of cli/values.h.
#include "cli/values.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace mxtrain::cli {
namespace {

std::string backticked(const std::string& s) { return "`" + s + "`"; }

// "" when `text` is an optional '-' followed by decimal digits only, else why not.
std::string decimal_form(const std::string& text) {
  if (text.empty()) return "the value is empty";
  const size_t first = text[0] == '-' ? 1 : 0;
  bool digits = text.size() > first;
  for (size_t i = first; i < text.size(); ++i) digits = digits && text[i] >= '0' && text[i] <= '9';
  return digits ? "" : backticked(text) + " is not a whole number in decimal digits";
}

std::string range_text(int64_t min, int64_t max) {
  if (min == std::numeric_limits<int64_t>::min() && max == std::numeric_limits<int64_t>::max())
    return "it does not fit a 64-bit integer";
  if (max == std::numeric_limits<int64_t>::max()) return "must be >= " + std::to_string(min);
  return "must be between " + std::to_string(min) + " and " + std::to_string(max);
}

}  // namespace

CLI::Validator whole_number(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        if (std::string why = decimal_form(text); !why.empty()) return why;
        int64_t v = 0;
        const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
        if (r.ec == std::errc::result_out_of_range &&  // beyond 64 bits, below a bounded max
            (min != std::numeric_limits<int64_t>::min() || max != std::numeric_limits<int64_t>::max()))
          return backticked(text) + " is out of range: must be between " + std::to_string(min) +
                 " and " + std::to_string(max);
        if (r.ec != std::errc() || v < min || v > max)
          return backticked(text) + " is out of range: " + range_text(min, max);
        return "";
      },
      "", "whole number");
}

CLI::Validator unsigned_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (std::string why = decimal_form(text); !why.empty()) return why;
        uint64_t v = 0;
        const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text[0] == '-' || r.ec != std::errc())
          return backticked(text) + " is out of range: must be between 0 and " +
                 std::to_string(std::numeric_limits<uint64_t>::max());
        return "";
      },
      "", "unsigned number");
}

CLI::Validator number_at_least(double min, bool exclusive) {
  return CLI::Validator(
      [min, exclusive](std::string& text) -> std::string {
        if (text.empty()) return std::string("the value is empty");
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end != text.c_str() + text.size() || !std::isfinite(v))
          return backticked(text) + " is not a finite number";
        if (exclusive ? !(v > min) : !(v >= min)) {
          std::string m = std::to_string(min);
          m.erase(m.find_last_not_of('0') + 1);  // 0.000000 -> 0.
          if (m.back() == '.') m.pop_back();
          return backticked(text) + " is out of range: must be " + (exclusive ? "> " : ">= ") + m;
        }
        return "";
      },
      "", "number");
}

void strict_values(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size() == 0) continue;  // a flag
    opt->check(CLI::Validator(
        [](std::string& text) { return text.empty() ? std::string("the value is empty") : ""; },
        "", "non-empty"));
    const std::string type = opt->get_type_name();
    if (type.rfind("INT", 0) == 0) opt->check(whole_number(std::numeric_limits<int64_t>::min()));
    else if (type.rfind("UINT", 0) == 0) opt->check(unsigned_number());
    else if (type.rfind("FLOAT", 0) == 0)
      opt->check(number_at_least(-std::numeric_limits<double>::max()));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) strict_values(*sub);
}

}  // namespace mxtrain::cli
