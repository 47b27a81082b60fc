#!/usr/bin/env bash
# Every results table of README.md and docs/results/*.md equals what its committed raw rows
# render to (bench/harness/render.py), so no figure can go stale; and the check can fail: a
# copy of the tree with one figure changed, one raw row changed, or a table whose rows are
# missing is refused, naming the file and the table. Standard library Python only.
# Usage: tests/repo/results_tables.sh SOURCE_DIR
set -euo pipefail
src=$1
python3 "$src/bench/harness" check

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mxt_tables_XXXXXX")
trap 'rm -rf "$tmp"' EXIT
copy() {
  rm -rf "$tmp/t"
  mkdir -p "$tmp/t/docs" "$tmp/t/bench"
  cp -r "$src/bench/harness" "$tmp/t/bench/"
  cp -r "$src/docs/results" "$tmp/t/docs/"
  cp "$src/README.md" "$tmp/t/"
}
expect_fail() {  # what, pattern the message must contain
  local out rc=0
  out=$(python3 "$tmp/t/bench/harness" check 2>&1) || rc=$?
  if [ "$rc" = 0 ]; then echo "FAIL: check passed with $1"; exit 1; fi
  if ! grep -q -- "$2" <<< "$out"; then echo "FAIL: $1: no '$2' in: $out"; exit 1; fi
  echo "ok: $1 refused"
}

# 1. A figure typed into a rendered table.
copy
python3 - "$tmp/t/docs/results/data.md" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
i = s.index("<!-- table:data.prepare")
j = s.index("22.0 (19.5-28.6)", i)
open(p, "w").write(s[:j] + "23.0 (19.5-28.6)" + s[j + 16:])
PY
expect_fail "a hand-edited figure" "docs/results/data.md: table \`data.prepare data_zen4.jsonl\` differs"

# 2. A raw row changed under a committed table.
copy
python3 - "$tmp/t/docs/results/raw/data_zen4.jsonl" <<'PY'
import json, sys
p = sys.argv[1]
rows = [json.loads(l) for l in open(p)]
rows[0]["mb_per_s"] *= 2
open(p, "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
expect_fail "a changed raw row" "table \`data.prepare data_zen4.jsonl\` differs"

# 3. A table whose raw rows are gone.
copy
rm "$tmp/t/docs/results/raw/data_zen4.jsonl"
expect_fail "missing raw rows" "data_zen4.jsonl: FileNotFoundError"

# 4. The statistics the tables use: the true median (mean of the middle two) and per-round
#    ratios.
python3 - "$src/bench/harness" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from core import median, mrange, per_round
assert median([4, 1, 3, 2]) == 2.5, median([4, 1, 3, 2])
assert median([5, 1, 3]) == 3
assert mrange([1.0, 4.0, 2.0, 3.0]) == "2.5 (1.0-4.0)", mrange([1.0, 4.0, 2.0, 3.0])
rows = [{"t": "a", "round": 1, "v": 2.0}, {"t": "b", "round": 1, "v": 4.0},
        {"t": "a", "round": 2, "v": 3.0}, {"t": "b", "round": 2, "v": 3.0},
        {"t": "a", "round": 3, "v": 9.0}]  # round 3 has no b: not a ratio
assert per_round(rows, lambda r: r["t"], "a", "b", "v") == [0.5, 1.0]
print("ok: median, range and per-round ratios")
PY
echo "results tables: every committed table matches its raw rows; stale ones are refused"
