#!/usr/bin/env bash
# Peak memory per rank under FSDP (ZeRO-3) against one process, on a parameter-heavy dense GPT
# (configs/params1024.yaml, 51 M parameters), measured by the OS: every process runs under
# /usr/bin/time -f %M (peak RSS, KiB). The global batch is the same for every world size
# (4 sequences: micro_batch_size 4 / W per rank). One rank per core's worth of threads:
# OMP_NUM_THREADS=1 under mpirun.
# Usage: bash scripts/fsdp_memory.sh   (MXTRAIN_BIN overrides build/mxtrain; RANKS="2 4";
#        RUNS="mxfp8-32x32 bf16:reshard ...")
# Output: runs/fsdp_memory/*.{rss,jsonl}, a Markdown table on stdout and
#         runs/fsdp_memory/rows.jsonl (tools/fsdp_tables.py memory).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
ranks=${RANKS:-"2 4"}
runs=${RUNS:-"mxfp8-32x32 mxfp8:on-demand mxfp8:all bf16:reshard"}
out=runs/fsdp_memory
rm -rf "$out"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for run in $runs; do
  recipe=${run%%:*}; mode=${run#*:}; [ "$mode" = "$run" ] && mode=-
  cfg=$out/$recipe-$mode.yaml
  if [ "$mode" = on-demand ] || [ "$mode" = all ]; then
    sed "s/^precision:/fsdp:\n  mxfp8_gather: $mode\nprecision:/" configs/params1024.yaml > "$cfg"
  else
    cp configs/params1024.yaml "$cfg"
  fi
  tag=$recipe-$mode
  /usr/bin/time -f %M -o "$out/$tag-w1.rss.0" "$bin" train --config "$cfg" --recipe "$recipe" \
    --quiet --metrics-out "$out/$tag-w1.jsonl"
  for np in $ranks; do
    OMP_NUM_THREADS=1 mpirun --oversubscribe -np "$np" sh -c \
      "/usr/bin/time -f %M -o $out/$tag-w$np.rss.\$OMPI_COMM_WORLD_RANK $bin train \
       --config $cfg --recipe $recipe --fsdp --micro-batch-size $((4 / np)) --quiet \
       --metrics-out $out/$tag-w$np.jsonl"
  done
done
python3 tools/fsdp_tables.py memory "$out"
