#!/usr/bin/env bash
# Parallel layouts against one process (docs/results/parallel.md): step time, exposed
# communication, bytes per step and the largest rank's peak RSS (from the OS: every process
# runs under /usr/bin/time -f %M), for bf16 and mxfp8, ROUNDS rounds alternating the layouts.
#   dense: configs/params1024.yaml (51 M parameters) in one process, at tp 2, tp 2 with
#          sequence parallelism (exact and rowwise wires), and tp 2 x dp 2 on 4 ranks (micro-batch 2: the same global
#          batch of 4 sequences everywhere);
#   MoE:   configs/moe8.yaml (8 experts, top-2) in one process with grad_accum 2, at ep 2, and
#          at ep 2 x edp 2 on 4 ranks (micro-batch 2): the same global batch of 8 sequences.
# Ranks share this machine's cores: OMP_NUM_THREADS=1 under mpirun, the one-process runs use
# every core.
# Usage: bash scripts/parallel_bench.sh   (ROUNDS=3, RECIPES="bf16 mxfp8", MXTRAIN_BIN)
# Output: runs/parallel/*.{jsonl,rss.*}, docs/results/raw/parallel_rows.jsonl (one row per run)
#         and the tables of tools/parallel_table.py on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
rounds=${ROUNDS:-3}
recipes=${RECIPES:-"bf16 mxfp8"}
out=runs/parallel
rm -rf "$out"
mkdir -p "$out" docs/results/raw
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
machine=$("$bin" info | head -1)

# run TAG NP CONFIG ARGS...: one training run, every process under /usr/bin/time.
run() {
  local tag=$1 np=$2 cfg=$3
  shift 3
  if [ "$np" = 1 ]; then
    /usr/bin/time -f %M -o "$out/$tag.rss.0" "$bin" train --config "$cfg" --quiet \
      --metrics-out "$out/$tag.jsonl" "$@"
  else
    OMP_NUM_THREADS=1 mpirun --oversubscribe -np "$np" sh -c \
      "/usr/bin/time -f %M -o $out/$tag.rss.\$OMPI_COMM_WORLD_RANK $bin train --config $cfg \
       --quiet --metrics-out $out/$tag.jsonl $*"
  fi
}

layouts=(
  "dense-1 1 configs/params1024.yaml"
  "dense-tp2 2 configs/params1024.yaml --tp 2"
  "dense-tp2-sp 2 configs/params1024.yaml --tp 2 --sequence-parallel"
  "dense-tp2-sprow 2 configs/params1024.yaml --tp 2 --sequence-parallel --sp-wire rowwise"
  "dense-tp2xdp2 4 configs/params1024.yaml --tp 2 --micro-batch-size 2"
  "moe-1 1 configs/moe8.yaml --grad-accum 2"
  "moe-ep2 2 configs/moe8.yaml --ep 2"
  "moe-ep2xedp2 4 configs/moe8.yaml --ep 2 --micro-batch-size 2"
)
for round in $(seq "$rounds"); do
  for recipe in $recipes; do
    for l in "${layouts[@]}"; do
      read -r name np cfg args <<< "$l"
      tag=$name-$recipe-r$round
      echo "== round $round: $name $recipe" >&2
      # shellcheck disable=SC2086
      run "$tag" "$np" "$cfg" --recipe "$recipe" $args
    done
  done
done
python3 tools/parallel_table.py "$out" "$machine" > docs/results/raw/parallel_rows.jsonl.new
mv docs/results/raw/parallel_rows.jsonl.new docs/results/raw/parallel_rows.jsonl
python3 tools/parallel_table.py --table docs/results/raw/parallel_rows.jsonl
