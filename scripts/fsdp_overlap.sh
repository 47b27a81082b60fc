#!/usr/bin/env bash
# Communication time under FSDP training, total (in flight) and exposed (waiting), with and
# without prefetch and the progress thread, at 2 and 4 ranks, on configs/params1024.yaml
# (micro_batch_size 2 per rank, OMP_NUM_THREADS=1). Medians over steps 2..STEPS of rank 0's
# metrics (comm_total_ms, comm_exposed_ms, allgather_ms, reduce_scatter_ms, step_ms).
# Usage: bash scripts/fsdp_overlap.sh [STEPS, default 5]
#        (MXTRAIN_BIN overrides build/mxtrain; RANKS="2 4"; RECIPES="mxfp8-32x32 bf16")
# Output: runs/fsdp_overlap/*.jsonl, a Markdown table on stdout and
#         runs/fsdp_overlap/rows.jsonl (tools/fsdp_tables.py overlap).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MXTRAIN_BIN:-build/mxtrain}
[ -x "$bin" ] || bash scripts/build.sh
steps=${1:-5}
ranks=${RANKS:-"2 4"}
recipes=${RECIPES:-"mxfp8-32x32 bf16"}
out=runs/fsdp_overlap
rm -rf "$out"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# prefetch depth : progress thread
settings="0:false 1:false 1:true 2:true"
for np in $ranks; do
  for recipe in $recipes; do
    # Settings take turns, so machine load hits them alike.
    for s in $settings; do
      p=${s%%:*}; t=${s##*:}
      sed "s/^precision:/fsdp:\n  prefetch: $p\n  progress_thread: $t\nprecision:/" \
        configs/params1024.yaml > "$out/p$p-$t.yaml"
      mpirun --oversubscribe -np "$np" "$bin" train --config "$out/p$p-$t.yaml" --recipe "$recipe" \
        --fsdp --micro-batch-size 2 --steps "$steps" --quiet \
        --metrics-out "$out/w$np-$recipe-p$p-$t.jsonl"
    done
  done
done
python3 tools/fsdp_tables.py overlap "$out"
