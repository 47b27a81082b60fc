// mxtrain/policy/report.h — the layer benchmark report (adaptive FP8, docs/adaptive.md §3).
//
// `mxtrain bench-layers` times forward+backward of each layer kind of a model in BF16 and in
// an FP8 recipe over a sweep of token counts and writes one Report; `mxtrain policy merge`
// (policy/policy.h) turns one or more reports into a policy file. This header holds the
// report's structs, its JSON form and the statistics both sides agree on.
//
// JSON schema, version 1 (unknown keys and duplicate keys are errors):
//   {"version": 1,
//    "machine": {"cpu": "<brand>", "isa": "avx512", "threads": 16, "hostname": "node1"},
//    "recipe": "mxfp8",              // the FP8 recipe the fp8 side ran
//    "tp": 1, "ep": 1, "etp": 1,     // parallel sizes the per-rank shapes came from
//    "model": "configs/tiny.yaml",   // the model config benchmarked
//    "warmup": 5, "iters": 10,       // optional: untimed / timed iterations per side
//    "points": [
//      {"kind": "layernorm_column", "name": "qkv", "tp": 1, "in": 4096, "out": 12288,
//       "tokens": 4096, "padded_tokens": 4096,
//       "bf16_ms": 12.5, "bf16_spread": 0.02, "fp8_ms": 10.1, "fp8_spread": 0.03,
//       "speedup": 1.2376, "spread": 0.0309},
//      {"kind": "column_grouped", "name": "fc1", "etp": 1, "num_gemms": 8, "top_k": 2,
//       "in": 4096, "out": 1408, "tokens": 8192, ...}]}
//
// Point fields:
//   kind, name     layer kind (kinds below) and module name (qkv, fc1, proj, fc2, ...)
//   tp             dense kinds only: tensor-parallel size the shape was divided by
//   etp, num_gemms grouped kinds only: expert-TP size and number of local experts
//   top_k          grouped kinds, optional: router top-k the token count was multiplied by
//   in, out        per-rank GEMM shape (per expert for grouped kinds)
//   tokens         the requested, unpadded token count. Grouped kinds: routed rows on one
//                  rank = tokens x top_k — the unit of the policy's grouped min_tokens.
//                  BF16 and FP8 timings are paired by this field, never by padded_tokens.
//   padded_tokens  optional (default: tokens): rows the timed runs actually processed
//                  (a recipe may pad rows up to its block size). Informational.
//   bf16_ms, fp8_ms           median milliseconds of one forward+backward
//   bf16_spread, fp8_spread   (max - min) / median of the timed iterations of that side
//   speedup        bf16_ms / fp8_ms
//   spread         speedup x (bf16_spread + fp8_spread) / 2 — the half-width of the speedup's
//                  range in speedup units: relative spreads of a ratio add to first order,
//                  and half of each side's full range is its +/- band around the median.
//                  A point is an FP8 win at threshold h when speedup - spread > h.
// A point carries one side or both: a point with only bf16_* (or only fp8_*) is paired at
// merge time with the other side's point of the same kind/name/tp|etp,num_gemms/tokens in
// the same report. speedup and spread appear exactly when both sides do; they are derived
// values and on load must agree with the timings to a relative 1e-3 (kDerivedTolerance).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mxtrain::policy {

inline constexpr int kReportVersion = 1;
// How far a stored speedup/spread may differ (relative) from the value its timings give.
// Files are written at full precision; the tolerance admits hand-written files rounded to
// three significant digits.
inline constexpr double kDerivedTolerance = 1e-3;

// Layer kinds. Dense kinds are keyed (kind, name, tp); grouped kinds (MoE experts) by
// (kind, etp, num_gemms).
const std::vector<std::string>& dense_kinds();    // layernorm_column, column, row, duplicated
const std::vector<std::string>& grouped_kinds();  // column_grouped, row_grouped
bool is_dense_kind(const std::string& kind);
bool is_grouped_kind(const std::string& kind);
std::string all_kinds_list();                     // "layernorm_column, column, ..." for errors

struct Machine {
  std::string cpu;       // CPU brand string
  std::string isa;       // kernel path in use: scalar | avx2 | avx512
  int threads = 0;       // OpenMP threads
  std::string hostname;
};

// One precision's timing of a point.
struct Timing {
  double ms = 0;      // median of the timed iterations, milliseconds
  double spread = 0;  // (max - min) / median
};

struct Point {
  std::string kind, name;
  int tp = 0;                    // dense kinds
  int etp = 0, num_gemms = 0;    // grouped kinds
  int top_k = 0;                 // grouped kinds, 0 = not recorded
  int64_t in = 0, out = 0;
  int64_t tokens = 0;
  int64_t padded_tokens = 0;     // 0 on a Point built in code = same as tokens
  std::optional<Timing> bf16, fp8;
  std::string origin;            // not serialized: where a converted point came from
                                 // (LoongForge: "model_name/case_name"), for explanations

  bool paired() const { return bf16.has_value() && fp8.has_value(); }
  double speedup() const;        // requires paired()
  double spread() const;         // requires paired()
};

struct Report {
  int version = kReportVersion;
  Machine machine;
  std::string recipe;            // FP8 recipe name (the one the fp8 side ran)
  int tp = 1, ep = 1, etp = 1;
  std::string model;
  int warmup = 0, iters = 0;     // 0 = not recorded
  std::vector<Point> points;
  std::string source;            // where it was loaded from (not serialized), for messages
  // Not serialized. "" = mxtrain's own report; "loongforge" = converted from LoongForge's
  // record list (policy/loongforge.h): every point is paired, the recipe is the records'
  // fp8_recipe or blockwise, and a key may hold several GEMM shapes (one per benchmarked
  // model).
  std::string format;
  std::vector<std::string> notes;  // not serialized: conversion notes for the merge summary
};

// Median (mean of the two middle values for an even count) and (max - min) / median of
// per-iteration milliseconds. Throws on an empty list or a non-positive median.
Timing timing_from_samples(std::vector<double> ms);
// bf16.ms / fp8.ms and its spread as defined above.
double speedup_of(const Timing& bf16, const Timing& fp8);
double speedup_spread_of(const Timing& bf16, const Timing& fp8);

// Throws mxtrain::Error naming `source` and the JSON path of the first problem.
void validate_report(const Report& r, const std::string& source = "report");
Report parse_report(const std::string& json_text, const std::string& source);
Report load_report(const std::string& path);
// Canonical JSON text (fixed key order, 2-space indent, trailing newline): save -> load ->
// save gives identical bytes.
std::string report_to_json(const Report& r);
// Validates, then writes atomically (temp file, fsync, rename).
void save_report(const Report& r, const std::string& path);

// The machine this process runs on (CPU brand, active ISA, OpenMP threads, hostname).
Machine current_machine();

}  // namespace mxtrain::policy
