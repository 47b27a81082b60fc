#!/usr/bin/env bash
# prepare-data throughput and memory, and training memory from shards, on a 10 MB and a
# 100 MB corpus. Both corpora are built here, in a temporary directory removed at the end,
# from the Debian fortunes text: its entries in a different random order for each repetition
# until the size is reached (never committed). Each measurement is its own process, peak RSS
# from the OS (/usr/bin/time -f %M); the two sizes alternate for ROUNDS rounds.
#   prepare-data: MB/s = input bytes / the command's own seconds (its --json), peak RSS;
#   training: TRAIN_STEPS steps of configs/demo.yaml's model from each corpus's shards, peak RSS.
# Usage: bash scripts/data_bench.sh   (MXTRAIN_BIN overrides build/mxtrain; ROUNDS=N, default
#        3; VOCAB, default 4096; TRAIN_STEPS, default 60)
# Output: runs/data_bench/rows.jsonl and a table on stdout (medians, ranges).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${MXTRAIN_BIN:-build/mxtrain}")
[ -x "$bin" ] || bash scripts/build.sh
rounds=${ROUNDS:-3}
vocab=${VOCAB:-4096}
steps=${TRAIN_STEPS:-60}
out=$PWD/runs/data_bench
rm -rf "$out"
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mxt_data_bench_XXXXXX")
trap 'rm -rf "$tmp"' EXIT

python3 - "$tmp" <<'PY'
import glob, os, random, sys
tmp = sys.argv[1]
entries = []
for f in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if os.path.isfile(f) and not f.endswith((".dat", ".u8")):
        text = open(f, "rb").read().decode("utf-8", "replace")
        entries += [e.strip("\n") + "\n" for e in text.split("\n%\n") if e.strip()]
for name, size in (("c10", 10_000_000), ("c100", 100_000_000)):
    with open(f"{tmp}/{name}.txt", "w") as out:
        n, rep = 0, 0
        while n < size:
            order = list(entries)
            random.Random(rep).shuffle(order)
            for e in order:
                out.write(e + "\n")
                n += len(e.encode()) + 1
                if n >= size:
                    break
            rep += 1
PY
ls -l "$tmp"/c10.txt "$tmp"/c100.txt >&2
"$bin" tokenizer train --input fortunes --vocab-size "$vocab" --out "$tmp/tok.model" --quiet

sed -e "s|vocab_size: [0-9]*|vocab_size: $vocab|" -e "s|steps: [0-9]*|steps: $steps|" \
    -e "s|eval_every: [0-9]*|eval_every: 0|" configs/demo.yaml | grep -v '^\s*\(tokenizer\|path\):' > "$tmp/base.yaml"
for round in $(seq 1 "$rounds"); do
  for c in c10 c100; do
    rm -rf "$tmp/sh_$c"
    /usr/bin/time -f %M -o "$tmp/prep.rss" "$bin" prepare-data --input "$tmp/$c.txt" \
      --tokenizer "$tmp/tok.model" --out "$tmp/sh_$c" --json --quiet > "$tmp/prep.json"
    python3 - "$tmp/prep.json" "$tmp/prep.rss" "$c" "$round" >> "$out/rows.jsonl" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(json.dumps({"what": "prepare-data", "corpus": sys.argv[3], "round": int(sys.argv[4]),
                  "input_bytes": j["input_bytes"], "seconds": j["seconds"],
                  "mb_per_s": j["mb_per_s"], "tokens": j["train_tokens"] + j["val_tokens"],
                  "peak_rss_kib": int(open(sys.argv[2]).read().split()[-1])}))
PY
  done
  for c in c10 c100; do
    python3 - "$tmp/base.yaml" "$tmp/tok.model" "$tmp/sh_$c" > "$tmp/train_$c.yaml" <<'PY'
import sys
text = open(sys.argv[1]).read()
text = text.replace("model:\n", f"model:\n  tokenizer: {sys.argv[2]}\n", 1)
text = text.replace("data:\n", f"data:\n  path: {sys.argv[3]}\n", 1)
print(text)
PY
    /usr/bin/time -f %M -o "$tmp/train.rss" "$bin" train --config "$tmp/train_$c.yaml" --quiet \
      --metrics-out "$tmp/train.jsonl" > /dev/null
    python3 - "$tmp/train.jsonl" "$tmp/train.rss" "$c" "$round" >> "$out/rows.jsonl" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
print(json.dumps({"what": "train", "corpus": sys.argv[3], "round": int(sys.argv[4]),
                  "steps": s["steps"], "peak_rss_kib": int(open(sys.argv[2]).read().split()[-1]),
                  "tokens_per_s": s["tokens_per_s"]}))
PY
  done
done
python3 - "$out/rows.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(v):  # the true median: mean of the middle two for an even count
    v = sorted(v); n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
def show(what, key, scale, unit):
    for c in ("c10", "c100"):
        v = [r[key] * scale for r in rows if r["what"] == what and r["corpus"] == c]
        print(f"{what:<13} {c:<5} {key:<13} {med(v):9.1f} {unit} ({min(v):.1f}-{max(v):.1f}, "
              f"{len(v)} runs)")
show("prepare-data", "mb_per_s", 1, "MB/s")
show("prepare-data", "peak_rss_kib", 1 / 1024, "MiB")
show("train", "peak_rss_kib", 1 / 1024, "MiB")
for what in ("prepare-data", "train"):
    a = med([r["peak_rss_kib"] for r in rows if r["what"] == what and r["corpus"] == "c100"])
    b = med([r["peak_rss_kib"] for r in rows if r["what"] == what and r["corpus"] == "c10"])
    print(f"{what}: peak RSS 100 MB / 10 MB = {a / b:.3f}x")
PY
