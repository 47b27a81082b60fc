// tests/policy/report_test.cc — the benchmark report: timing statistics, the speedup spread,
// byte-stable save/load, and one error per kind of malformed file, each naming the file and
// the JSON path of the problem.
#include "mxtrain/policy/report.h"

#include <functional>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"
#include "mxtrain/io/atomic_file.h"

namespace mxtrain::policy {
namespace {

using io::testing::ScratchDir;
using io::testing::list_dir;
using nlohmann::json;

TEST(ReportTiming, MedianAndSpreadOddCount) {
  Timing t = timing_from_samples({3.0, 1.0, 2.0});
  EXPECT_EQ(t.ms, 2.0);
  EXPECT_EQ(t.spread, 1.0);  // (3 - 1) / 2
}

TEST(ReportTiming, MedianOfEvenCountIsMeanOfMiddlePair) {
  Timing t = timing_from_samples({4.0, 1.0, 3.0, 2.0});
  EXPECT_EQ(t.ms, 2.5);
  EXPECT_EQ(t.spread, 3.0 / 2.5);
}

TEST(ReportTiming, SingleSampleHasNoSpread) {
  Timing t = timing_from_samples({7.25});
  EXPECT_EQ(t.ms, 7.25);
  EXPECT_EQ(t.spread, 0.0);
}

TEST(ReportTiming, RejectsEmptyAndNonPositive) {
  EXPECT_ERROR_CONTAINS(timing_from_samples({}), "no timed iterations");
  EXPECT_ERROR_CONTAINS(timing_from_samples({0.0, 0.0, 1.0}), "median time must be > 0");
}

TEST(ReportTiming, SpeedupSpreadIsHalfTheSummedRelativeSpreadsInSpeedupUnits) {
  // Values chosen so every step is exact in binary.
  Timing b{3.0, 0.25}, f{2.0, 0.5};
  EXPECT_EQ(speedup_of(b, f), 1.5);
  EXPECT_EQ(speedup_spread_of(b, f), 1.5 * 0.375);
  Point p;
  p.bf16 = b;
  p.fp8 = f;
  EXPECT_EQ(p.speedup(), 1.5);
  EXPECT_EQ(p.spread(), 0.5625);
  p.fp8.reset();
  EXPECT_ERROR_CONTAINS(p.speedup(), "lacks a bf16 or fp8 timing");
}

Report sample_report() {
  Report r;
  r.machine = {"Test CPU @ 2GHz", "avx512", 16, "node1"};
  r.recipe = "mxfp8";
  r.tp = 2;
  r.ep = 4;
  r.etp = 1;
  r.model = "configs/tiny_moe.yaml";
  r.warmup = 3;
  r.iters = 7;
  Point qkv;
  qkv.kind = "layernorm_column";
  qkv.name = "qkv";
  qkv.tp = 2;
  qkv.in = 256;
  qkv.out = 384;
  qkv.tokens = 1000;
  qkv.padded_tokens = 1024;
  qkv.bf16 = Timing{1.234567890123, 0.0312};
  qkv.fp8 = Timing{0.987654321, 0.1};
  r.points.push_back(qkv);
  Point fc1;  // split sides of a grouped point
  fc1.kind = "column_grouped";
  fc1.name = "fc1";
  fc1.etp = 1;
  fc1.num_gemms = 2;
  fc1.top_k = 2;
  fc1.in = 256;
  fc1.out = 512;
  fc1.tokens = 2000;
  fc1.bf16 = Timing{3.5, 0.0};
  r.points.push_back(fc1);
  fc1.bf16.reset();
  fc1.fp8 = Timing{2.5, 0.02};
  fc1.padded_tokens = 2048;
  r.points.push_back(fc1);
  return r;
}

TEST(ReportFile, SaveLoadSaveIsByteStable) {
  ScratchDir d;
  Report r = sample_report();
  save_report(r, d / "r.json");
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"r.json"});  // no temp file left
  const std::string first = io::read_text_file(d / "r.json");
  Report back = load_report(d / "r.json");
  EXPECT_EQ(back.source, d / "r.json");
  save_report(back, d / "r2.json");
  EXPECT_EQ(io::read_text_file(d / "r2.json"), first);

  ASSERT_EQ(back.points.size(), 3u);
  EXPECT_EQ(back.machine.cpu, "Test CPU @ 2GHz");
  EXPECT_EQ(back.machine.threads, 16);
  EXPECT_EQ(back.tp, 2);
  EXPECT_EQ(back.ep, 4);
  EXPECT_EQ(back.warmup, 3);
  EXPECT_EQ(back.iters, 7);
  const Point& q = back.points[0];
  EXPECT_EQ(q.kind, "layernorm_column");
  EXPECT_EQ(q.tp, 2);
  EXPECT_EQ(q.tokens, 1000);
  EXPECT_EQ(q.padded_tokens, 1024);
  EXPECT_EQ(q.bf16->ms, 1.234567890123);  // doubles survive the text form exactly
  EXPECT_EQ(q.fp8->ms, 0.987654321);
  EXPECT_EQ(q.speedup(), r.points[0].speedup());
  EXPECT_EQ(back.points[1].top_k, 2);
  EXPECT_FALSE(back.points[1].fp8.has_value());
  EXPECT_EQ(back.points[1].padded_tokens, 2000);  // 0 in the struct -> tokens
  EXPECT_FALSE(back.points[2].bf16.has_value());
  EXPECT_EQ(back.points[2].num_gemms, 2);
}

TEST(ReportFile, DerivedFieldsAreWrittenOnlyForPairedPoints) {
  json j = json::parse(report_to_json(sample_report()));
  EXPECT_TRUE(j["points"][0].contains("speedup"));
  EXPECT_TRUE(j["points"][0].contains("spread"));
  EXPECT_FALSE(j["points"][1].contains("speedup"));
  EXPECT_FALSE(j["points"][0].contains("etp"));
  EXPECT_FALSE(j["points"][1].contains("tp"));
  EXPECT_EQ(j["points"][0]["speedup"].get<double>(), 1.234567890123 / 0.987654321);
}

// A hand-written report whose derived fields are rounded to 3 digits is accepted.
const char* kHandWritten = R"({"version": 1,
  "machine": {"cpu": "x", "isa": "scalar", "threads": 1, "hostname": ""},
  "recipe": "mxfp8", "tp": 1, "ep": 1, "etp": 1, "model": "m.yaml",
  "points": [
    {"kind": "row", "name": "proj", "tp": 1, "in": 64, "out": 64, "tokens": 128,
     "bf16_ms": 1.1, "bf16_spread": 0.02, "fp8_ms": 1.0, "fp8_spread": 0.04,
     "speedup": 1.1, "spread": 0.033}]})";

TEST(ReportFile, AcceptsRoundedDerivedFieldsAndDefaults) {
  Report r = parse_report(kHandWritten, "h.json");
  ASSERT_EQ(r.points.size(), 1u);
  EXPECT_EQ(r.points[0].padded_tokens, 128);
  EXPECT_EQ(r.warmup, 0);
  EXPECT_DOUBLE_EQ(r.points[0].spread(), 1.1 * 0.03);
}

struct BadReport {
  const char* what;
  std::function<void(json&)> edit;
  const char* expect;
};

TEST(ReportFile, MalformedFilesNameTheProblem) {
  const json base = json::parse(kHandWritten);
  const std::vector<BadReport> cases = {
      {"version", [](json& j) { j["version"] = 2; }, "version: unsupported report version 2"},
      {"version type", [](json& j) { j["version"] = "1"; }, "version: must be an integer"},
      {"machine missing", [](json& j) { j.erase("machine"); },
       "missing required field \"machine\""},
      {"threads type", [](json& j) { j["machine"]["threads"] = "8"; },
       "machine.threads: must be an integer, got string"},
      {"tp zero", [](json& j) { j["tp"] = 0; }, "tp: must be an integer >= 1, got 0"},
      {"unknown top key", [](json& j) { j["extra"] = 1; }, "extra: unknown field"},
      {"points type", [](json& j) { j["points"] = json::object(); }, "points: must be an array"},
      {"point type", [](json& j) { j["points"][0] = 3; }, "points[0]: must be an object"},
      {"unknown kind", [](json& j) { j["points"][0]["kind"] = "rows"; },
       "points[0].kind: unknown kind \"rows\""},
      {"dense with etp", [](json& j) { j["points"][0]["etp"] = 1; }, "points[0].etp: unknown field"},
      {"grouped without num_gemms",
       [](json& j) {
         j["points"][0]["kind"] = "row_grouped";
         j["points"][0].erase("tp");
         j["points"][0]["etp"] = 1;
       },
       "points[0]: missing required field \"num_gemms\""},
      {"negative tokens", [](json& j) { j["points"][0]["tokens"] = -4; },
       "points[0].tokens: must be an integer >= 1, got -4"},
      {"fractional tokens", [](json& j) { j["points"][0]["tokens"] = 128.5; },
       "points[0].tokens: must be an integer, got number 128.5"},
      {"padded below tokens", [](json& j) { j["points"][0]["padded_tokens"] = 100; },
       "points[0].padded_tokens: 100 is less than tokens 128"},
      {"zero time", [](json& j) { j["points"][0]["fp8_ms"] = 0; },
       "points[0].fp8_ms: must be a finite number > 0"},
      {"negative spread", [](json& j) { j["points"][0]["bf16_spread"] = -0.1; },
       "points[0].bf16_spread: must be a finite number >= 0"},
      {"half a side", [](json& j) { j["points"][0].erase("bf16_spread"); },
       "points[0]: missing required field \"bf16_spread\""},
      {"no timing",
       [](json& j) {
         for (const char* k : {"bf16_ms", "bf16_spread", "fp8_ms", "fp8_spread", "speedup",
                               "spread"})
           j["points"][0].erase(k);
       },
       "points[0]: has no timing"},
      {"speedup wrong", [](json& j) { j["points"][0]["speedup"] = 1.5; },
       "points[0].speedup: 1.5 disagrees with 1.1"},
      {"spread wrong", [](json& j) { j["points"][0]["spread"] = 0.1; },
       "points[0].spread: 0.1 disagrees"},
      {"speedup missing", [](json& j) { j["points"][0].erase("speedup"); },
       "points[0]: missing required field \"speedup\""},
      {"speedup on one side",
       [](json& j) {
         j["points"][0].erase("fp8_ms");
         j["points"][0].erase("fp8_spread");
       },
       "points[0].speedup: needs both a bf16 and an fp8 timing"},
      {"second bf16 side",
       [](json& j) {
         json p = j["points"][0];
         for (const char* k : {"fp8_ms", "fp8_spread", "speedup", "spread"}) p.erase(k);
         j["points"].push_back(p);
       },
       "points[1]: second bf16 timing of row/proj tp=1 tokens=128"},
      {"shape differs",
       [](json& j) {
         json p = j["points"][0];
         p["tokens"] = 256;
         p["in"] = 32;
         j["points"].push_back(p);
       },
       "points[1]: row/proj tp=1 has shape in=32 out=64 but points[0] has in=64 out=64"},
  };
  for (const auto& c : cases) {
    json j = base;
    c.edit(j);
    SCOPED_TRACE(c.what);
    EXPECT_ERROR_CONTAINS(parse_report(j.dump(), "bad.json"), std::string("bad.json: ") + c.expect);
  }
}

TEST(ReportFile, TextLevelErrors) {
  EXPECT_ERROR_CONTAINS(parse_report("{\"version\": 1,", "t.json"), "t.json: not valid JSON");
  std::string dup = kHandWritten;
  dup.replace(dup.find("\"tokens\": 128"), 13, "\"tokens\": 128, \"tokens\": 256");
  EXPECT_ERROR_CONTAINS(parse_report(dup, "t.json"), "t.json: points[0].tokens: duplicate key");
  EXPECT_ERROR_CONTAINS(load_report("/nonexistent/dir/r.json"), "report: ");
  EXPECT_ERROR_CONTAINS(load_report("/nonexistent/dir/r.json"), "/nonexistent/dir/r.json");
}

TEST(ReportFile, SaveRejectsInvalidReportAndWritesNothing) {
  ScratchDir d;
  Report r = sample_report();
  r.points[0].kind = "attention";
  EXPECT_ERROR_CONTAINS(save_report(r, d / "r.json"), "points[0].kind: unknown kind");
  EXPECT_TRUE(list_dir(d.path()).empty());
  EXPECT_ERROR_CONTAINS(validate_report(r, "mem"), "mem: points[0].kind");
}

TEST(ReportKinds, DenseAndGroupedAreDisjointAndListed) {
  for (const auto& k : dense_kinds()) {
    EXPECT_TRUE(is_dense_kind(k));
    EXPECT_FALSE(is_grouped_kind(k));
  }
  for (const auto& k : grouped_kinds()) EXPECT_TRUE(is_grouped_kind(k));
  EXPECT_EQ(all_kinds_list(),
            "layernorm_column, column, row, duplicated, column_grouped, row_grouped");
}

TEST(ReportMachine, DescribesThisProcess) {
  Machine m = current_machine();
  EXPECT_GE(m.threads, 1);
  EXPECT_TRUE(m.isa == "scalar" || m.isa == "avx2" || m.isa == "avx512" || m.isa == "avx512vbmi")
      << m.isa;
}

}  // namespace
}  // namespace mxtrain::policy
