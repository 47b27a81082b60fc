#!/usr/bin/env bash
# tests/cli/policy_loongforge_cli.sh — `mxtrain policy merge` and `policy explain` on
# hand-made reports in LoongForge's record-list format: FP8 token counts padded (dense and per
# expert), a speedup that falls again at the largest size and a repeat run that disagrees;
# the exact policy written, the explanation's key lines, mixing with an mxtrain report, and a
# malformed record rejected with the file and record index and nothing written.
# Usage: policy_loongforge_cli.sh /path/to/mxtrain   (run by CTest as `cli_policy_loongforge`)
set -u
source "$(dirname "$0")/lib.sh"
MXTRAIN=$(realpath "${1:?usage: policy_loongforge_cli.sh /path/to/mxtrain}") || exit 1
[ -x "$MXTRAIN" ] || { echo "not an executable: $MXTRAIN"; exit 1; }
workdir policy
has() { grep -qxF -- "$2" <<<"$1" || fail "$3: no line '$2' in output:"$'\n'"$1"; }

# rec MODEL CASE KIND UB PRECISION NUM_TOKENS TOTAL_MS NUM_GEMMS — one LoongForge record.
rec() {
  local shape in=64 out=128
  case $3 in
    *_grouped) shape="[$6, $in]"; oshape="[$6, $out]" ;;
    *) shape="[$6, 1, $in]"; oshape="[$6, 1, $out]" ;;
  esac
  printf '{"case_name": "%s", "model_name": "%s", "module_name": "TE", "module_kind": "%s",
  "precision": "%s", "input_shape": %s, "output_shape": %s, "num_tokens": %s,
  "forward_ms": 0.1, "backward_ms": 0.2, "total_ms": %s, "tokens_per_second": 1000.0,
  "forward_flops": 1.0, "backward_flops": 2.0, "total_flops": 3.0, "achieved_tflops": 1.0,
  "tp_size": 1, "etp_size": 1, "num_gemms": %s, "ub_name": "%s"}' \
    "$2" "$1" "$3" "$5" "$shape" "$oshape" "$6" "$7" "$8" "$4"
}
# pair SEQ UNPADDED PADDED SPEEDUP KIND — bf16 (SPEEDUP ms) and fp8 (1 ms) records of one case.
pair() {
  local model="llm_s$1_b1" kind=$5 case ub g=1
  case $kind in
    row) case=llm_self_attention_proj; ub=proj ;;
    column_grouped) case=llm_moe_fc1; ub=fc1; g=4 ;;
  esac
  rec "$model" $case $kind $ub bf16 "$2" "$4" $g; echo ,
  rec "$model" $case $kind $ub fp8 "$3" 1.0 $g
}
# report FILE "SEQ:SPEEDUP ..." "SEQ:SPEEDUP ..." — proj sizes, then grouped fc1 sizes (top-k 2).
# FP8 pads 424 tokens to 432 rows; grouped FP8 pads each expert's split (+48 / +32 rows).
report() {
  local file=$1 first=1 p seq s
  {
    echo "["
    for p in $2; do
      seq=${p%%:*} s=${p##*:}
      [ $first = 1 ] || echo ,; first=0
      pair "$seq" "$seq" $(( seq == 424 ? 432 : seq )) "$s" row
    done
    for p in $3; do
      seq=${p%%:*} s=${p##*:}
      echo ,
      pair "$seq" $(( seq * 2 )) $(( seq * 2 + (seq == 424 ? 48 : 32) )) "$s" column_grouped
    done
    echo "]"
  } > "$file"
}
report run1.json "424:1.15 1024:0.95 2048:1.2 4096:1.2 8192:0.92" "424:1.1 1024:1.2"
report run2.json "424:1.2 1024:1.1 2048:1.3 4096:1.25 8192:0.9" "424:1.2 1024:1.3"

# Merge: proj wins at 424 and at 2048..4096 in both runs (1024 loses in run1, 8192 in both):
# the longer run [2048, 4096]. The grouped case wins everywhere from 848 routed rows.
out=$("$MXTRAIN" policy merge --reports run1.json run2.json --output policy.json 2>&1) ||
  fail "merge exited $?: $out"
expected='{
  "version": 1,
  "speedup_threshold": 1.0,
  "recipe": "blockwise",
  "rules": {
    "row": {
      "proj": [
        {"tp": 1, "min_tokens": 2048, "max_tokens": 4096, "measured_speedup": 1.2}
      ]
    },
    "column_grouped": [
      {"etp": 1, "num_gemms": 4, "min_tokens": 848, "measured_speedup": 1.1}
    ]
  }
}'
[ "$(cat policy.json 2>/dev/null)" = "$expected" ] ||
  fail "merged policy differs:"$'\n'"$(cat policy.json 2>/dev/null)"
has "$out" "      424:1.15+x2 1024:0.95-x2 2048:1.20+x2 4096:1.20+x2 8192:0.90-x2" "merge summary"
has "$out" "      note: FP8 also wins at [424, 424]; not emitted (shorter than the chosen range)" \
  "merge summary"

# Explain: LoongForge's own merge (the later file replaces the earlier) starts FP8 at 1024,
# open-ended, and never pairs the padded cases.
out=$("$MXTRAIN" policy explain --reports run1.json run2.json --policy policy.json 2>&1) ||
  fail "explain exited $?: $out"
has "$out" "rules: from policy.json" "explain"
has "$out" "  rule: FP8 for tokens [2048, 4096]" "explain"
has "$out" "  why: FP8 wins in every report at each of the 2 sizes 2048..4096, the longest such run; below it 1024 loses (0.950x in run1.json llm_s1024_b1/llm_self_attention_proj); above it 8192 loses (0.900x in run2.json llm_s8192_b1/llm_self_attention_proj), so max_tokens = 4096" "explain"
has "$out" "  LoongForge's merge: FP8 for tokens [1024, inf); differs at 2 sizes:" "explain"
has "$out" "    1024: LoongForge FP8, here BF16; FP8 at 0.950x (run1.json llm_s1024_b1/llm_self_attention_proj, worst of 2): FP8 changes the time by +5.3% (0.9500 -> 1.0000 ms)" "explain"
has "$out" "    8192: LoongForge FP8, here BF16; FP8 at 0.900x (run2.json llm_s8192_b1/llm_self_attention_proj, worst of 2): FP8 changes the time by +11.1% (0.9000 -> 1.0000 ms)" "explain"
has "$out" "    it paired no BF16/FP8 records at 424 (fp8 ran 432 rows) (FP8 num_tokens padded)" "explain"
has "$out" "  LoongForge's merge: no rule (BF16); differs at 2 sizes:" "explain"
has "$out" "    848: LoongForge BF16, here FP8; FP8 at 1.100x (run1.json llm_s424_b1/llm_moe_fc1, worst of 2): BF16 changes the time by +10.0% (1.0000 -> 1.1000 ms)" "explain"

# Mixed with mxtrain's own report: its recipe is recorded, its key gets its rule.
cat > own.json <<'JSON'
{"version": 1, "machine": {"cpu": "c", "isa": "scalar", "threads": 1, "hostname": "h"},
 "recipe": "blockwise", "tp": 1, "ep": 1, "etp": 1, "model": "m.yaml",
 "points": [{"kind": "row", "name": "fc2", "tp": 1, "in": 64, "out": 32, "tokens": 512,
             "bf16_ms": 1.5, "bf16_spread": 0.0, "fp8_ms": 1.0, "fp8_spread": 0.0,
             "speedup": 1.5, "spread": 0.0}]}
JSON
out=$("$MXTRAIN" policy merge --reports run1.json own.json run2.json --output mixed.json 2>&1) ||
  fail "mixed merge exited $?: $out"
out=$("$MXTRAIN" policy show mixed.json --json) || fail "show mixed.json exited $?"
has "$out" '  "recipe": "blockwise",' "mixed policy"
has "$out" '        {"tp": 1, "min_tokens": 512, "measured_speedup": 1.5}' "mixed policy"
has "$out" '        {"tp": 1, "min_tokens": 2048, "max_tokens": 4096, "measured_speedup": 1.2}' \
  "mixed policy"

# A malformed record: one clear error naming the file and record index; the existing output
# is left as it was and no temporary file remains.
sed '0,/"total_ms": 1.0/s//"total_ms": 0/' run2.json > bad.json
cp policy.json before.json
expect_error --at-start "malformed record" "bad.json: [1].total_ms: must be a finite number > 0, got 0 [" \
  "$MXTRAIN" policy merge --reports run1.json bad.json --output policy.json
cmp -s before.json policy.json || fail "a failed merge changed policy.json"
[ "$(ls -A | grep -c '^\.')" -eq 0 ] || fail "temporary files left: $(ls -A)"

finish cli_policy_loongforge
