// mxtrain/policy/loongforge.h — LoongForge's layer benchmark reports as merge input
// (docs/adaptive.md "LoongForge's reports").
//
// LoongForge's Transformer Engine layer benchmark writes a report as a JSON list of records,
// one per (model, case, precision):
//   [{"case_name": "llm_self_attention_qkv", "model_name": "qwen3_vl_llm_30b_s424_b1",
//     "module_name": "TELayerNormColumnParallelLinear", "module_kind": "layernorm_column",
//     "precision": "fp8", "input_shape": [27, 16, 2048], "output_shape": [27, 16, 2560],
//     "num_tokens": 432, "forward_ms": 0.1, "backward_ms": 0.2, "total_ms": 0.3,
//     "tokens_per_second": 1.4e6, "forward_flops": 4.5e9, "backward_flops": 9e9,
//     "total_flops": 1.35e10, "achieved_tflops": 45.0, "tp_size": 1, "etp_size": 1,
//     "num_gemms": 1, "ub_name": "qkv"}, ...]
// A record may also carry "fp8_recipe", Transformer Engine's name of the FP8 recipe
// (loongforge_recipe_name maps it). model_name ends in _s{seq}_b{mbs}. num_tokens is what the timed run processed: for FP8
// it is padded (dense: up to the recipe's row alignment; grouped kinds: each expert's split
// padded separately), so it is not the count BF16 and FP8 can be paired by.
//
// Conversion to a Report (Report::format "loongforge"):
//   * the two precisions pair per (model_name, case_name) within one file;
//   * the unpadded token count: dense kinds seq x mbs (from model_name; the BF16 record's
//     num_tokens must equal it); grouped kinds the BF16 record's num_tokens, the routed rows
//     seq x mbs x top_k (it must be a multiple of seq x mbs, and the quotient is top_k). The
//     FP8 record's padded count (per-expert padding included) is kept as padded_tokens and
//     must be >= the unpadded count;
//   * key: module_kind as is; dense name = ub_name (qkv, proj, fc1, fc2), tp = tp_size;
//     grouped etp = etp_size, num_gemms; shape in = input_shape's last dim, out =
//     output_shape's last dim;
//   * timing = total_ms with spread 0 (the records carry no spread);
//   * recipe = the fp8 records' fp8_recipe, mapped; absent = "blockwise" (LoongForge runs
//     every benchmark with fp8_recipe "blockwise"); fp8 records naming different recipes
//     are an error;
//   * a case with only one precision is noted and not used.
// Records are read strictly: unknown fields, wrong types, an unknown precision or kind, a
// model_name without _s{seq}_b{mbs}, a repeated (model, case, precision) are errors naming
// the file and the record index ("lf.json: [3].total_ms: must be a finite number > 0").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mxtrain/policy/policy.h"
#include "mxtrain/policy/report.h"

namespace mxtrain::policy {

struct LoongForgeRecord {
  std::string case_name, model_name, module_name, module_kind, precision;
  std::vector<int64_t> input_shape, output_shape;
  int64_t num_tokens = 0;
  double forward_ms = 0, backward_ms = 0, total_ms = 0, tokens_per_second = 0;
  double forward_flops = 0, backward_flops = 0, total_flops = 0, achieved_tflops = 0;
  int tp_size = 1, etp_size = 1, num_gemms = 1;   // optional in the file, default 1
  std::optional<std::string> ub_name;             // null or absent allowed for grouped kinds
  std::optional<std::string> recipe;              // fp8_recipe mapped to mxtrain's name
  int64_t seq = 0, mbs = 0;                       // from model_name's _s{seq}_b{mbs}
};

struct LoongForgeReport {
  std::string source;
  std::vector<LoongForgeRecord> records;
};

// Transformer Engine's recipe name -> mxtrain's: blockwise -> blockwise, mxfp8 -> mxfp8,
// tensorwise and current -> fp8-current, delayed -> fp8-delayed; anything else throws
// naming it.
std::string loongforge_recipe_name(const std::string& te_name);

// True when the text's first non-blank character is '[' (LoongForge's record list);
// mxtrain's own report is a JSON object.
bool is_loongforge_text(const std::string& json_text);
LoongForgeReport parse_loongforge_report(const std::string& json_text, const std::string& source);
// Pairs and converts as described above; throws naming the file and record indices.
Report loongforge_to_report(const LoongForgeReport& lf);

// A report file of either format, detected from its contents.
struct LoadedReport {
  Report report;                            // what the merge reads
  std::optional<LoongForgeReport> loongforge;  // the raw records, for LoongForge files
};
LoadedReport load_any_report(const std::string& path);

// LoongForge's own merge, reproduced to show where it would choose differently: all
// records of all files in one list; BF16 and FP8 paired by (kind, ub_name, tp | etp and
// num_gemms, case_name, model_name, num_tokens) — a later record replaces an earlier one
// of the same precision, so a repeat run overwrites the first instead of having to agree
// with it, and an FP8 record whose num_tokens padding changed pairs with nothing; per key
// the (num_tokens, total_ms speedup) pairs sorted by num_tokens, the first with speedup >
// threshold becomes an open-ended min_tokens (speedup rounded to 3 decimals).
struct LoongForgeMerge {
  Policy policy;
  // Key text (as KeySummary::key) -> the token counts that found a pair.
  std::map<std::string, std::set<int64_t>> paired_tokens;
};
LoongForgeMerge loongforge_own_merge(const std::vector<LoongForgeReport>& reports,
                                     double speedup_threshold);

}  // namespace mxtrain::policy
