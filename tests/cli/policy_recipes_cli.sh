#!/usr/bin/env bash
# tests/cli/policy_recipes_cli.sh — recipes per policy rule from the command line: hand-made
# bench-layers reports of mxfp8 and nvfp4 on configs/tiny.yaml's layers merged into one
# policy (the exact file, the summary's and `policy explain`'s choice per key), a report of
# one recipe merging into the file it always gave, `policy show` and `policy decide`, the
# tiny model's --dry-run decisions giving modules different recipes from one policy, the
# run/policy recipe checks (what is refused, what --allow-policy-recipe-mismatch turns into a
# warning), malformed recipes refused by file and JSON path, a short training run of a policy
# mixing mxfp8 and nvfp4 with finite metrics, and (with MPIEXEC) a rule's recipe refused at a
# tensor-parallel layout it cannot run at (fp8-current), an nvfp4 rule run there.
# Usage: policy_recipes_cli.sh /path/to/mxtrain SOURCE_DIR [MPIEXEC]
#        (run by CTest as `cli_policy_recipes`)
set -u
source "$(dirname "$0")/lib.sh"
MXTRAIN=$(realpath "${1:?usage: policy_recipes_cli.sh /path/to/mxtrain SOURCE_DIR [MPIEXEC]}") ||
  exit 1
SRC=$(realpath "${2:?usage: policy_recipes_cli.sh /path/to/mxtrain SOURCE_DIR [MPIEXEC]}") ||
  exit 1
MPIEXEC=${3:-}
[ -x "$MXTRAIN" ] || { echo "not an executable: $MXTRAIN"; exit 1; }
TINY=$SRC/configs/tiny.yaml
workdir policy_recipes
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
has() { grep -qxF -- "$2" <<<"$1" || fail "$3: no line '$2' in output:"$'\n'"$1"; }
write_corpus corpus.txt

# point KIND NAME IN OUT TOKENS SPEEDUP — one paired point, bf16 SPEEDUP ms against fp8 1 ms.
point() {
  printf '{"kind": "%s", "name": "%s", "tp": 1, "in": %s, "out": %s, "tokens": %s,
  "bf16_ms": %s, "bf16_spread": 0.0, "fp8_ms": 1.0, "fp8_spread": 0.0, "speedup": %s,
  "spread": 0.0}' "$1" "$2" "$3" "$4" "$5" "$6" "$6"
}
# report FILE RECIPE QKV PROJ FC1 FC2 — each "s512 s1024 s2048": the speedups at 512, 1024
# and 2048 tokens of one of tiny.yaml's layers (tiny's shapes).
report() {
  local file=$1 recipe=$2 first=1 i t s
  local -a keys=("layernorm_column qkv 128 384" "row proj 128 128" "layernorm_column fc1 128 768"
                 "row fc2 384 128")
  local -a sweeps=("$3" "$4" "$5" "$6")
  {
    printf '{"version": 1, "machine": {"cpu": "c", "isa": "scalar", "threads": 1, "hostname": '
    printf '"h"}, "recipe": "%s", "tp": 1, "ep": 1, "etp": 1, "model": "tiny.yaml", "points": [' \
      "$recipe"
    for i in 0 1 2 3; do
      t=512
      for s in ${sweeps[$i]}; do
        [ $first = 1 ] || printf ',\n'
        first=0
        point ${keys[$i]} $t "$s"
        t=$((t * 2))
      done
    done
    printf ']}\n'
  } > "$file"
}
# mxfp8: qkv wins from 1024 at 1.1, proj from 512 at 1.2, fc1 from 512 at 1.1, fc2 nowhere.
# nvfp4: qkv from 1024 at 1.3, proj from 1024 at 1.1, fc1 from 512 at 1.1, fc2 from 1024 at 1.05.
report mx.json mxfp8 "0.9 1.1 1.2" "1.2 1.3 1.4" "1.1 1.2 1.3" "0.8 0.9 0.95"
report nv.json nvfp4 "1.0 1.3 1.5" "0.9 1.1 1.2" "1.1 1.15 1.2" "0.9 1.05 1.1"

# ---- merge: per key the recipe whose rule has the largest measured speedup ---------------
# qkv: nvfp4 (1.3 > 1.1); proj: mxfp8 (1.2 > 1.1); fc1: a tie at 1.1, mxfp8 is earlier in the
# registry; fc2: only nvfp4 has a rule.
out=$("$MXTRAIN" policy merge --reports nv.json mx.json --output mixed.json 2>&1) ||
  fail "merge exited $?: $out"
expected='{
  "version": 1,
  "speedup_threshold": 1.0,
  "measured_recipes": ["mxfp8", "nvfp4"],
  "rules": {
    "layernorm_column": {
      "fc1": [
        {"tp": 1, "min_tokens": 512, "recipe": "mxfp8", "measured_speedup": 1.1}
      ],
      "qkv": [
        {"tp": 1, "min_tokens": 1024, "recipe": "nvfp4", "measured_speedup": 1.3}
      ]
    },
    "row": {
      "fc2": [
        {"tp": 1, "min_tokens": 1024, "recipe": "nvfp4", "measured_speedup": 1.05}
      ],
      "proj": [
        {"tp": 1, "min_tokens": 512, "recipe": "mxfp8", "measured_speedup": 1.2}
      ]
    }
  }
}'
[ "$(cat mixed.json 2>/dev/null)" = "$expected" ] ||
  fail "merged policy differs:"$'\n'"$(cat mixed.json 2>/dev/null)"
has "$out" "merged 2 reports (recipes mxfp8, nvfp4, speedup threshold 1): 4 rules from 4 measured keys" \
  "merge summary"
has "$out" "      nvfp4: 512:1.00- 1024:1.30+ 2048:1.50+" "merge summary"
has "$out" "        nvfp4 for tokens [1024, inf), min speedup 1.300" "merge summary"
has "$out" "      chosen: nvfp4, the largest measured speedup (mxfp8 1.1000 over [1024, inf); nvfp4 1.3000 over [1024, inf))" \
  "merge summary"
has "$out" "      chosen: mxfp8, the earliest in the registry's order of those tied at the largest measured speedup (mxfp8 1.1000 over [512, inf); nvfp4 1.1000 over [512, inf))" \
  "merge summary"
has "$out" "      chosen: nvfp4, the only recipe with a rule (mxfp8: no rule; nvfp4 1.0500 over [1024, inf))" \
  "merge summary"

# A report of one recipe merges into the file it always gave: the policy's recipe, no rule
# naming one.
"$MXTRAIN" policy merge --reports mx.json --output mx_policy.json > /dev/null 2>&1 ||
  fail "one-recipe merge failed"
expected='{
  "version": 1,
  "speedup_threshold": 1.0,
  "recipe": "mxfp8",
  "rules": {
    "layernorm_column": {
      "fc1": [
        {"tp": 1, "min_tokens": 512, "measured_speedup": 1.1}
      ],
      "qkv": [
        {"tp": 1, "min_tokens": 1024, "measured_speedup": 1.1}
      ]
    },
    "row": {
      "proj": [
        {"tp": 1, "min_tokens": 512, "measured_speedup": 1.2}
      ]
    }
  }
}'
[ "$(cat mx_policy.json 2>/dev/null)" = "$expected" ] ||
  fail "one-recipe policy differs:"$'\n'"$(cat mx_policy.json 2>/dev/null)"

# ---- explain, show, decide -----------------------------------------------------------------
out=$("$MXTRAIN" policy explain --reports mx.json nv.json 2>&1) || fail "explain exited $?: $out"
has "$out" "  recipes measured: mxfp8, nvfp4" "explain"
has "$out" "    why: nvfp4 wins in every report at each of the 2 sizes 1024..2048, the longest such run; below it 512 loses (1.000x in nv.json); it reaches the largest measured size, so there is no upper bound" \
  "explain"
has "$out" "  recipe: nvfp4, the largest measured speedup (mxfp8 1.1000 over [1024, inf); nvfp4 1.3000 over [1024, inf))" \
  "explain"
out=$("$MXTRAIN" policy show mixed.json 2>&1) || fail "show exited $?: $out"
has "$out" "policy: version 1, speedup_threshold 1, recipe (not recorded), measured recipes mxfp8, nvfp4, 4 rules" \
  "show"
out=$("$MXTRAIN" policy decide mixed.json --kind layernorm_column --name qkv --tokens 1024 2>&1) ||
  fail "decide exited $?: $out"
has "$out" "nvfp4  layernorm_column tokens=1024: tokens 1024 >= min_tokens 1024 (recipe nvfp4, measured speedup 1.300)" \
  "decide"
out=$("$MXTRAIN" policy decide mx_policy.json --kind layernorm_column --name qkv --tokens 1024 2>&1)
has "$out" "FP8   layernorm_column tokens=1024: tokens 1024 >= min_tokens 1024 (measured speedup 1.100)" \
  "decide, one-recipe policy"

# ---- the trainer's decisions: one policy, modules in different recipes ---------------------
# module precision, one per line, from a --decisions-out file.
precisions() {
  python3 -c 'import json, sys
for d in json.load(open(sys.argv[1])): print(d["module"], d["precision"])' "$1"
}
want=""
for l in 0 1 2 3; do
  want+="layers.$l.attention.qkv nvfp4"$'\n'"layers.$l.attention.proj mxfp8"$'\n'
  want+="layers.$l.mlp.fc1 mxfp8"$'\n'"layers.$l.mlp.fc2 nvfp4"$'\n'
done
want+="lm_head bf16"
# dry RECIPE POLICY OUT [FLAGS...] — a dry run of tiny.yaml, decisions to OUT, stderr to OUT.err.
dry() {
  local recipe=$1 pol=$2 o=$3
  shift 3
  "$MXTRAIN" train --config "$TINY" --data corpus.txt --recipe "$recipe" --fp8-policy "$pol" \
    --dry-run --quiet --decisions-out "$o" "$@" > /dev/null 2> "$o.err"
}
for run in mxfp8 nvfp4; do  # both are among the policy's recipes; every rule names its own
  dry $run mixed.json d_$run.json || fail "dry run ($run) exited $?: $(cat d_$run.json.err)"
  [ "$(precisions d_$run.json)" = "$want" ] ||
    fail "decisions with --recipe $run:"$'\n'"$(precisions d_$run.json)"
  grep -q "^warning: " d_$run.json.err && fail "dry run ($run) warned: $(grep "^warning: " d_$run.json.err)"
done
python3 -c 'import json, sys
d = {x["module"]: x for x in json.load(open(sys.argv[1]))}
assert d["layers.2.attention.qkv"]["reason"] == "policy: tokens 1024 >= min_tokens 1024 (recipe nvfp4, measured speedup 1.300)", d["layers.2.attention.qkv"]
assert d["layers.2.mlp.fc1"]["reason"] == "policy: tokens 1024 >= min_tokens 512 (recipe mxfp8, measured speedup 1.100)", d["layers.2.mlp.fc1"]
' d_mxfp8.json || fail "decision reasons"

# A run recipe the policy did not measure: refused, or with the flag a warning (the rules still
# run the recipes they name).
expect_error --at-start "run recipe not measured" \
  "policy mixed.json was measured with recipes mxfp8, nvfp4 but this run uses blockwise (its rules run the recipes they name); re-run bench-layers --recipe blockwise and merge its report in, or pass --allow-policy-recipe-mismatch" \
  "$MXTRAIN" train --config "$TINY" --data corpus.txt --recipe blockwise --fp8-policy mixed.json \
  --dry-run
dry blockwise mixed.json d_bw.json --allow-policy-recipe-mismatch ||
  fail "allowed mismatch did not start: $(cat d_bw.json.err)"
grep -qxF "warning: policy mixed.json was measured with recipes mxfp8, nvfp4 but this run uses blockwise (its rules run the recipes they name); using it anyway (precision.allow_policy_recipe_mismatch)" \
  d_bw.json.err || fail "no mismatch warning: $(cat d_bw.json.err)"
[ "$(precisions d_bw.json)" = "$want" ] || fail "decisions with --recipe blockwise"

# A policy whose rules partly name no recipe: those were measured with its `recipe` and run the
# run's, so another run recipe is refused for them (allowed: they run it).
cat > hand.json <<'JSON'
{"version": 1, "speedup_threshold": 1.0, "recipe": "mxfp8",
 "rules": {"layernorm_column": {"qkv": [{"tp": 1, "min_tokens": 0, "recipe": "nvfp4"}]},
           "row": {"proj": [{"tp": 1, "min_tokens": 0}],
                   "fc2": [{"tp": 1, "min_tokens": 0, "recipe": "mxfp4"}]}}}
JSON
dry mxfp8 hand.json d_hand.json || fail "hand.json dry run: $(cat d_hand.json.err)"
[ "$(precisions d_hand.json | head -4)" = "layers.0.attention.qkv nvfp4
layers.0.attention.proj mxfp8
layers.0.mlp.fc1 bf16
layers.0.mlp.fc2 mxfp4" ] || fail "hand.json decisions:"$'\n'"$(precisions d_hand.json)"
expect_error --at-start "rules naming no recipe, another run recipe" \
  "policy hand.json: its rule that names no recipe was measured with recipe mxfp8 but this run uses nvfp4, which it would run; re-run bench-layers --recipe nvfp4, name each rule's recipe, or pass --allow-policy-recipe-mismatch" \
  "$MXTRAIN" train --config "$TINY" --data corpus.txt --recipe nvfp4 --fp8-policy hand.json --dry-run
dry nvfp4 hand.json d_hand4.json --allow-policy-recipe-mismatch ||
  fail "hand.json allowed: $(cat d_hand4.json.err)"
grep -qxF "warning: policy hand.json: its rule that names no recipe was measured with recipe mxfp8 but this run uses nvfp4, which it would run; using it anyway (precision.allow_policy_recipe_mismatch)" \
  d_hand4.json.err || fail "no warning for hand.json: $(cat d_hand4.json.err)"
[ "$(precisions d_hand4.json | head -2)" = "layers.0.attention.qkv nvfp4
layers.0.attention.proj nvfp4" ] || fail "hand.json allowed decisions:"$'\n'"$(precisions d_hand4.json)"

# ---- refusals: one line naming the file and JSON path; nothing written ---------------------
sed 's/"recipe": "nvfp4"/"recipe": "nvfp5"/' hand.json > bad.json
expect_error --at-start "unknown rule recipe" \
  'bad.json: rules.layernorm_column.qkv[0].recipe: unknown recipe "nvfp5" (quantized recipes: mxfp8, ' \
  "$MXTRAIN" train --config "$TINY" --data corpus.txt --fp8-policy bad.json --dry-run
sed 's/"recipe": "mxfp4"/"recipe": "bf16"/' hand.json > bad2.json
expect_error --at-start "bf16 rule recipe" \
  'bad2.json: rules.row.fc2[0].recipe: bf16 is not a quantized recipe' \
  "$MXTRAIN" policy show bad2.json
sed 's/"recipe": "nvfp4"/"recipe": "mxfp9"/' nv.json > x.json
expect_error --at-start "merge of an unregistered recipe" \
  'policy merge: x.json measured recipe "mxfp9", which is not a registered quantized recipe' \
  "$MXTRAIN" policy merge --reports mx.json x.json --output never.json
[ -e never.json ] && fail "a refused merge wrote a policy"

# ---- a short training run mixing mxfp8 and nvfp4: it trains, every metric is finite ----
"$MXTRAIN" train --config "$TINY" --data corpus.txt --fp8-policy mixed.json --steps 4 --quiet \
  --metrics-out m.jsonl --decisions-out d_train.json 2> train.err ||
  fail "training exited $?: $(cat train.err)"
[ "$(precisions d_train.json)" = "$want" ] || fail "training decisions differ from the dry run's"
python3 -c 'import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r and "step" in r]
assert len(steps) == 4, rows
def finite(v, where):
    if isinstance(v, bool): return
    if v is None or (isinstance(v, float) and not math.isfinite(v)): raise SystemExit("not finite: %s in %s" % (where, rows))
    if isinstance(v, dict):
        for k, x in v.items(): finite(x, k)
for r in rows: finite(r, "row")
assert rows[-1].get("summary") and math.isfinite(rows[-1]["final_loss"]), rows[-1]
# Seeded and deterministic: four steps of warm-up lower the loss (5.6 -> about 4.8).
assert steps[-1]["loss"] < steps[0]["loss"] - 0.3, [r["loss"] for r in steps]
' m.jsonl || fail "metrics: $(cat m.jsonl)"

# ---- a rule's recipe at a tensor-parallel layout ------------------------------------------
if [ -n "$MPIEXEC" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  cat > tp2.json <<'JSON'
{"version": 1, "speedup_threshold": 1.0, "measured_recipes": ["fp8-current", "nvfp4", "mxfp4"],
 "rules": {"layernorm_column": {"qkv": [{"tp": 2, "min_tokens": 0, "recipe": "fp8-current"}],
                                "fc1": [{"tp": 1, "min_tokens": 0, "recipe": "nvfp4"}]},
           "row": {"proj": [{"tp": 2, "min_tokens": 0, "recipe": "mxfp4"}]}}}
JSON
  # One FP8 scale per tensor cannot run there: refused, naming the rule and the module.
  timeout 120 "$MPIEXEC" --oversubscribe -np 2 "$MXTRAIN" train --config "$TINY" --data corpus.txt \
    --recipe mxfp4 --tp 2 --fp8-policy tp2.json --dry-run --quiet > tp.out 2>&1 &&
    fail "an fp8-current rule at tp 2 was accepted"
  grep -qF "error: policy tp2.json: the rule for layernorm_column/qkv tp=2 gives module layers.0.attention.qkv recipe fp8-current, but one scale per tensor is not built for tensor or expert parallelism" \
    tp.out || fail "tp refusal: $(head -c 600 tp.out)"
  # NVFP4 (its tensor scales agreed over the tp group) and mxfp4 there run; the tp=1 rule
  # matches no module at tp 2.
  sed -i 's/"tp": 2, "min_tokens": 0, "recipe": "fp8-current"/"tp": 2, "min_tokens": 0, "recipe": "nvfp4"/' tp2.json
  timeout 120 "$MPIEXEC" --oversubscribe -np 2 "$MXTRAIN" train --config "$TINY" --data corpus.txt \
    --recipe mxfp4 --tp 2 --fp8-policy tp2.json --dry-run --quiet --decisions-out d_tp.json \
    > tp.out 2>&1 || fail "nvfp4 and mxfp4 rules at tp 2: $(head -c 600 tp.out)"
  [ "$(precisions d_tp.json | head -4)" = "layers.0.attention.qkv nvfp4
layers.0.attention.proj mxfp4
layers.0.mlp.fc1 bf16
layers.0.mlp.fc2 bf16" ] || fail "tp 2 decisions:"$'\n'"$(precisions d_tp.json)"
fi

finish cli_policy_recipes
