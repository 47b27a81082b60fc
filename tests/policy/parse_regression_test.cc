// Inputs found by fuzzing the policy and report parsers (fuzz/fuzz_policy, fuzz/fuzz_report)
// that once ended in std::terminate: each must now be an mxtrain::Error naming the source.
#include <gtest/gtest.h>

#include <string>

#include "mxtrain/common.h"
#include "mxtrain/policy/policy.h"
#include "mxtrain/policy/report.h"

namespace mxtrain::policy {
namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(ParseRegression, NumberOutOfDoubleRangeIsAnError) {
  // nlohmann reports an overflowing number as out_of_range, not parse_error.
  const std::string policy = "{\n  \"version\":  777777777777777777777777777e4444441,\t  \"sd\": 1.0,\n  \"   \"{\n";
  const std::string msg = error_of([&] { parse_policy(policy, "p.json"); });
  EXPECT_EQ(msg.rfind("p.json: not valid JSON: [json.exception.out_of_range.406] number overflow", 0), 0u)
      << msg;
  const std::string report = "22222222e22222222222onrr:in";
  const std::string rmsg = error_of([&] { parse_report(report, "r.json"); });
  EXPECT_EQ(rmsg.rfind("r.json: not valid JSON: [json.exception.out_of_range.406] number overflow", 0), 0u)
      << rmsg;
}

TEST(ParseRegression, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = "{\"version\": 1, \"rules\": " + std::string(100000, '[') + "}";
  EXPECT_EQ(error_of([&] { parse_policy(deep, "p.json"); })
                .rfind("p.json: JSON nested deeper than 64 levels (at byte 87)", 0),
            0u);
}

}  // namespace
}  // namespace mxtrain::policy
