#!/usr/bin/env bash
# tests/mpi/train_parallel_mpi.sh — `mxtrain train` with a tensor-parallel layout
# (docs/distributed.md, "Parallel layouts") against one process.
#
# - tp 2 on 2 ranks, for bf16, mxfp8 and mxfp8-32x32: 20 steps whose losses are one process's
#   within 1e-4 relative (this model's widths, d_model 64 and d_ff 128, split into whole MX
#   blocks, so the MX runs come out equal bit for bit; the row-parallel sums add per-rank
#   partial sums, which moves BF16 roundings a little);
# - the same with --sequence-parallel (each rank 128 of the 256 tokens: whole MX blocks, so the
#   FP8 gathers are the one-process copies), where mxfp8's all-gathers send 0.6875x bf16's
#   bytes (docs/distributed.md, "Bytes on the wire"); with --sp-wire rowwise (one per-token
#   copy per all-gather) bf16, mxfp8 and blockwise within 1e-4 and mxfp8 at 0.515625x;
# - tp 2 x dp 2 on 4 ranks against one process with grad_accum 2;
# - a layout 3 ranks cannot hold is refused on every rank at once, naming why;
# - checkpoints hold whole tensors: a tp 2 checkpoint resumed by one process, and a
#   one-process checkpoint resumed at tp 2, continue the uninterrupted run within 1e-4;
# - every step row carries the tensor-parallel bytes, the summary the layout;
# - --init-from a Hugging Face directory at tp 2 starts where one process starts;
# - expert parallelism: ep 2 on 2 ranks (dense layers data-parallel over the same ranks)
#   against one process with grad_accum 2, for bf16, mxfp8, mxfp8-32x32 and blockwise, within
#   1e-4 over 8 steps (each expert's gradient is one process's bit for bit; the dense
#   gradients' sum over the ranks is added in another order than one process's accumulation,
#   and BF16 and FP8 roundings carry that along: docs/distributed.md has the 20-step figures);
#   ep 2 x edp 2 and ep 2 x etp 2 on 4 ranks against grad_accum 4, an ep 2 x etp 2
#   checkpoint resumed in one process; mxfp8 sends 0.5156x (= 66/128) of bf16's dispatch bytes
#   when both route the same tokens;
# - a layout refused: ep that does not divide the experts;
# - tensor parallelism on an MoE model, with sequence parallelism: tp 2 (and tp 2 with ep 2) on
#   2 ranks within 1e-4 of one process, losses and load-balancing losses; tp 2 x ep 2 x etp 2
#   on 4 ranks, stopped at step 4 and resumed in one process, against grad_accum 2; tp without
#   sequence parallelism refused;
# - FSDP with a layout (--fsdp shards each slice over its data-parallel replicas, expert slices
#   over their expert-data-parallel ones): tp 2 x dp 2, tp 2 + SP, ep 2 x edp 2, ep 2 x etp 2 against one
#   process within 1e-4 over 8 steps, and a tp 2 x dp 2 FSDP checkpoint resumed in one process;
# - adaptive FP8 at the layout: bench-layers under mpirun at tp 2 (sequence parallel, both
#   wires), at ep 2, etp 2 and ep 2 x etp 2 writes reports keyed tp 2, etp 2 and
#   num_gemms = experts / ep; policy merge takes them with a
#   one-process report; a dry run at tp 2 decides with tp 2, and every decision row says so.
# Usage: train_parallel_mpi.sh MXTRAIN MPIEXEC   (CTest `mpi_train_parallel`)
source "$(dirname "$0")/support/train_lib.sh"
avx512_bf16_kernels
cfg=$DATA/mpi_tiny.yaml

for recipe in bf16 mxfp8 mxfp8-32x32; do
  "$BIN" train --config "$cfg" --recipe "$recipe" --steps 20 --quiet \
    --metrics-out "$TMP/one_$recipe.jsonl"
  mpi 2 train --config "$cfg" --recipe "$recipe" --steps 20 --tp 2 --quiet \
    --metrics-out "$TMP/tp2.jsonl"
  same_losses "$TMP/one_$recipe.jsonl" "$TMP/tp2.jsonl" "$recipe: tp 2 vs 1 process" 20
  mpi 2 train --config "$cfg" --recipe "$recipe" --steps 20 --tp 2 --sequence-parallel --quiet \
    --metrics-out "$TMP/sp_$recipe.jsonl"
  same_losses "$TMP/one_$recipe.jsonl" "$TMP/sp_$recipe.jsonl" "$recipe: tp 2 + SP vs 1 process" 20
done
# Bytes all-gathered per step under sequence parallelism, mxfp8 against bf16 (exact counts:
# per layer and [N/2, 64] shard, forward the two norm outputs' rowwise copies, backward their
# colwise copies and the two residual gradients' rowwise + colwise copies — 8.25 bytes per
# element against bf16's 6 x 2).
ag() { field "$1" tp_allgather_bytes | head -1; }
awk -v a="$(ag "$TMP/sp_mxfp8.jsonl")" -v b="$(ag "$TMP/sp_bf16.jsonl")" \
  'BEGIN { r = a / b; printf "tp_allgather_bytes mxfp8 / bf16 = %.4f\n", r; exit (r == 0.6875) ? 0 : 1 }' ||
  { echo "unexpected all-gather bytes"; exit 1; }
# The rowwise wire (parallel.sp_wire): one per-token copy per all-gather, the wgrad copies made
# from it on every rank. Within 1e-4 of one process for mxfp8 and blockwise, and mxfp8 sends
# exactly 66/128 of bf16's bytes (per element 1 + 1/32 against 2, both on the same wire).
for recipe in bf16 mxfp8 blockwise; do
  [ "$recipe" = blockwise ] && "$BIN" train --config "$cfg" --recipe blockwise --steps 20 \
    --quiet --metrics-out "$TMP/one_blockwise.jsonl"
  mpi 2 train --config "$cfg" --recipe "$recipe" --steps 20 --tp 2 --sequence-parallel \
    --sp-wire rowwise --quiet --metrics-out "$TMP/spr_$recipe.jsonl"
  same_losses "$TMP/one_$recipe.jsonl" "$TMP/spr_$recipe.jsonl" \
    "$recipe: tp 2 + SP (rowwise wire) vs 1 process" 20
done
awk -v a="$(ag "$TMP/spr_mxfp8.jsonl")" -v b="$(ag "$TMP/spr_bf16.jsonl")" \
  'BEGIN { r = a / b; printf "rowwise wire: tp_allgather_bytes mxfp8 / bf16 = %.6f\n", r
           exit (r == 0.515625) ? 0 : 1 }' || { echo "unexpected rowwise-wire bytes"; exit 1; }
grep -q '"sequence_parallel":true,"sp_wire":"rowwise","tp":2}' "$TMP/spr_mxfp8.jsonl" ||
  { tail -1 "$TMP/spr_mxfp8.jsonl"; echo "no wire in the summary's layout"; exit 1; }

# Tensor-parallel bytes in every step row; the layout in the summary.
[ "$(field "$TMP/tp2.jsonl" tp_comm_bytes | head -1)" -gt 0 ] ||
  { echo "no tp_comm_bytes in the step rows"; exit 1; }
grep -q '"layout":{"dp":1,"edp":2,"ep":1,"etp":1,"sequence_parallel":false,"tp":2}' \
  "$TMP/tp2.jsonl" || { tail -1 "$TMP/tp2.jsonl"; echo "no layout in the summary"; exit 1; }

"$BIN" train --config "$cfg" --recipe mxfp8 --steps 20 --grad-accum 2 --quiet \
  --metrics-out "$TMP/one_ga2.jsonl"
mpi 4 train --config "$cfg" --recipe mxfp8 --steps 20 --tp 2 --quiet \
  --metrics-out "$TMP/tp2dp2.jsonl"
same_losses "$TMP/one_ga2.jsonl" "$TMP/tp2dp2.jsonl" "mxfp8: tp 2 x dp 2 vs 1 process x 2" 20

# A layout the world size does not divide: every rank stops at start-up.
t0=$SECONDS
if mpi 3 train --config "$cfg" --tp 2 --steps 2 --quiet > "$TMP/err.txt" 2>&1; then
  echo "tp 2 on 3 ranks should have failed"; exit 1
fi
grep -q "parallel layout: 3 ranks cannot hold tp 2: the world size must be a multiple of tp" \
  "$TMP/err.txt" || { cat "$TMP/err.txt"; exit 1; }
[ $((SECONDS - t0)) -le 60 ] || { echo "the refused layout took $((SECONDS - t0)) s"; exit 1; }

# Resume across layouts, both ways.
mpi 2 train --config "$cfg" --steps 20 --tp 2 --quiet --stop-after 10 \
  --checkpoint-dir "$TMP/ck_tp" --metrics-out "$TMP/a.jsonl"
"$BIN" train --config "$cfg" --steps 20 --quiet --resume --checkpoint-dir "$TMP/ck_tp" \
  --metrics-out "$TMP/a.jsonl"
same_losses "$TMP/one_mxfp8.jsonl" "$TMP/a.jsonl" "tp 2 checkpoint resumed in 1 process" 20 loss
"$BIN" train --config "$cfg" --steps 20 --quiet --stop-after 10 \
  --checkpoint-dir "$TMP/ck_one" --metrics-out "$TMP/b.jsonl"
mpi 2 train --config "$cfg" --steps 20 --tp 2 --quiet --resume --checkpoint-dir "$TMP/ck_one" \
  --metrics-out "$TMP/b.jsonl"
same_losses "$TMP/one_mxfp8.jsonl" "$TMP/b.jsonl" "1-process checkpoint resumed at tp 2" 20 loss
# A Hugging Face directory (mxtrain export) as the start of a tp 2 run: each rank keeps its
# slices of the imported tensors, and the losses are those of one process starting from it.
"$BIN" export --checkpoint "$TMP/ck_one" --format hf --out "$TMP/hf" > /dev/null
"$BIN" train --config "$cfg" --steps 3 --quiet --init-from "$TMP/hf" --metrics-out "$TMP/i1.jsonl"
mpi 2 train --config "$cfg" --steps 3 --tp 2 --quiet --init-from "$TMP/hf" \
  --metrics-out "$TMP/i2.jsonl"
same_losses "$TMP/i1.jsonl" "$TMP/i2.jsonl" "--init-from at tp 2" 3 loss
# Expert parallelism.
moe=$DATA/mpi_tiny_moe.yaml
for recipe in bf16 mxfp8 mxfp8-32x32 blockwise; do
  "$BIN" train --config "$moe" --recipe "$recipe" --steps 8 --grad-accum 2 --quiet \
    --metrics-out "$TMP/moe_one.jsonl" 2> /dev/null
  mpi 2 train --config "$moe" --recipe "$recipe" --steps 8 --ep 2 --quiet \
    --metrics-out "$TMP/moe_ep2.jsonl" 2> /dev/null
  same_losses "$TMP/moe_one.jsonl" "$TMP/moe_ep2.jsonl" "$recipe: ep 2 vs 1 process x 2" 8
done
"$BIN" train --config "$moe" --steps 8 --grad-accum 4 --quiet --metrics-out "$TMP/moe_one4.jsonl"
mpi 4 train --config "$moe" --steps 8 --ep 2 --quiet --metrics-out "$TMP/moe_ep2x2.jsonl"
same_losses "$TMP/moe_one4.jsonl" "$TMP/moe_ep2x2.jsonl" "mxfp8: ep 2 x edp 2 vs 1 process x 4" 8
grep -q '"layout":{"dp":4,"edp":2,"ep":2,"etp":1,"sequence_parallel":false,"tp":1}' \
  "$TMP/moe_ep2x2.jsonl" || { tail -1 "$TMP/moe_ep2x2.jsonl"; echo "no EP layout"; exit 1; }
for recipe in bf16 mxfp8; do
  "$BIN" train --config "$moe" --recipe "$recipe" --steps 8 --grad-accum 4 --quiet \
    --metrics-out "$TMP/moe_one4_$recipe.jsonl"
  mpi 4 train --config "$moe" --recipe "$recipe" --steps 8 --ep 2 --etp 2 --quiet \
    --metrics-out "$TMP/moe_etp.jsonl"
  same_losses "$TMP/moe_one4_$recipe.jsonl" "$TMP/moe_etp.jsonl" "$recipe: ep 2 x etp 2 vs 1 process x 4" 8
done
mpi 4 train --config "$moe" --steps 8 --ep 2 --etp 2 --quiet --stop-after 4 \
  --checkpoint-dir "$TMP/ck_etp" --metrics-out "$TMP/moe_etp_r.jsonl"
"$BIN" train --config "$moe" --steps 8 --grad-accum 4 --quiet --resume \
  --checkpoint-dir "$TMP/ck_etp" --metrics-out "$TMP/moe_etp_r.jsonl"
same_losses "$TMP/moe_one4_mxfp8.jsonl" "$TMP/moe_etp_r.jsonl" "ep 2 x etp 2 checkpoint resumed in 1 process" 8 loss
# Dispatch bytes with the same routing: one MoE layer behind a BF16 attention block, step 1.
{ sed 's/n_layers: 2/n_layers: 1/' "$moe"; echo "  overrides: {'layers.*.attention.*': bf16}"; } \
  | sed 's/^precision: {recipe: mxfp8}$/precision:\n  recipe: mxfp8/' > "$TMP/moe1.yaml"
for recipe in bf16 mxfp8; do
  mpi 2 train --config "$TMP/moe1.yaml" --recipe "$recipe" --steps 1 --ep 2 --quiet \
    --metrics-out "$TMP/moe1_$recipe.jsonl"
done
d() { field "$1" ep_dispatch_bytes | head -1; }
awk -v a="$(d "$TMP/moe1_mxfp8.jsonl")" -v b="$(d "$TMP/moe1_bf16.jsonl")" \
  'BEGIN { r = a / b; printf "ep_dispatch_bytes mxfp8 / bf16 = %.6f\n", r; exit (b > 0 && r == 66 / 128) ? 0 : 1 }' ||
  { echo "unexpected dispatch bytes"; exit 1; }
if mpi 2 train --config "$moe" --ep 3 --steps 1 --quiet > "$TMP/err.txt" 2>&1; then
  echo "ep 3 with 4 experts should have failed"; exit 1
fi
grep -q "parallel.ep 3 must divide model.moe.num_experts (4)" "$TMP/err.txt" ||
  { cat "$TMP/err.txt"; exit 1; }
# Tensor parallelism on an MoE model (with sequence parallelism, as Megatron requires): each
# rank routes its own token shard, the load-balancing loss counted over the tp group. tp 2 on
# 2 ranks against one process (bf16, mxfp8), with ep 2 on the same ranks; tp 2 x ep 2 x etp 2
# on 4 ranks against grad_accum 2; a tp 2 checkpoint of it resumed in one process; tp without
# sequence parallelism refused.
for recipe in bf16 mxfp8; do
  "$BIN" train --config "$moe" --recipe "$recipe" --steps 8 --quiet \
    --metrics-out "$TMP/moe_one1_$recipe.jsonl"
  mpi 2 train --config "$moe" --recipe "$recipe" --steps 8 --tp 2 --sequence-parallel --quiet \
    --metrics-out "$TMP/moe_tp.jsonl"
  same_losses "$TMP/moe_one1_$recipe.jsonl" "$TMP/moe_tp.jsonl" "$recipe MoE: tp 2 + SP vs 1 process" 8
  same_losses "$TMP/moe_one1_$recipe.jsonl" "$TMP/moe_tp.jsonl" "$recipe MoE: tp 2 + SP aux" 8 aux_loss
done
mpi 2 train --config "$moe" --steps 8 --tp 2 --sequence-parallel --ep 2 --quiet \
  --metrics-out "$TMP/moe_tpep.jsonl"
same_losses "$TMP/moe_one1_mxfp8.jsonl" "$TMP/moe_tpep.jsonl" "MoE: tp 2 + SP, ep 2 vs 1 process" 8
"$BIN" train --config "$moe" --steps 8 --grad-accum 2 --quiet --metrics-out "$TMP/moe_one2.jsonl"
mpi 4 train --config "$moe" --steps 8 --tp 2 --sequence-parallel --ep 2 --etp 2 --quiet \
  --stop-after 4 --checkpoint-dir "$TMP/ck_tpmoe" --metrics-out "$TMP/moe_tpx.jsonl"
"$BIN" train --config "$moe" --steps 8 --grad-accum 2 --quiet --resume \
  --checkpoint-dir "$TMP/ck_tpmoe" --metrics-out "$TMP/moe_tpx.jsonl"
same_losses "$TMP/moe_one2.jsonl" "$TMP/moe_tpx.jsonl" \
  "MoE: tp 2 + SP x ep 2 x etp 2 (4 steps, resumed in 1 process) vs 1 process x 2" 8 loss
if "$BIN" train --config "$moe" --tp 2 --dry-run > "$TMP/err.txt" 2>&1; then
  echo "tp 2 on an MoE model without sequence parallelism should have failed"; exit 1
fi
grep -q "parallel.tp 2 on an MoE model needs parallel.sequence_parallel: true" "$TMP/err.txt" ||
  { cat "$TMP/err.txt"; exit 1; }
# FSDP with a layout.
"$BIN" train --config "$cfg" --steps 8 --quiet --metrics-out "$TMP/f1.jsonl"
"$BIN" train --config "$cfg" --steps 8 --grad-accum 2 --quiet --metrics-out "$TMP/f2.jsonl"
mpi 4 train --config "$cfg" --steps 8 --tp 2 --fsdp --quiet --metrics-out "$TMP/ft.jsonl" \
  --checkpoint-dir "$TMP/ck_ft" --stop-after 4
cp -r "$TMP/ck_ft" "$TMP/ck_ft1"
cp "$TMP/ft.jsonl" "$TMP/fr.jsonl"
mpi 4 train --config "$cfg" --steps 8 --tp 2 --fsdp --quiet --metrics-out "$TMP/ft.jsonl" \
  --checkpoint-dir "$TMP/ck_ft" --resume
same_losses "$TMP/f2.jsonl" "$TMP/ft.jsonl" "tp 2 x dp 2 with FSDP (resumed at step 4) vs 1 x 2" 8 loss
"$BIN" train --config "$cfg" --steps 8 --grad-accum 2 --quiet --metrics-out "$TMP/fr.jsonl" \
  --checkpoint-dir "$TMP/ck_ft1" --resume
same_losses "$TMP/f2.jsonl" "$TMP/fr.jsonl" "tp 2 x dp 2 FSDP checkpoint resumed in 1 process" 8 loss
mpi 2 train --config "$cfg" --steps 8 --tp 2 --sequence-parallel --fsdp --quiet \
  --metrics-out "$TMP/fs.jsonl"
same_losses "$TMP/f1.jsonl" "$TMP/fs.jsonl" "tp 2 + SP with FSDP vs 1 process" 8
mpi 4 train --config "$moe" --steps 8 --ep 2 --fsdp --quiet --metrics-out "$TMP/fe.jsonl"
same_losses "$TMP/moe_one4.jsonl" "$TMP/fe.jsonl" "ep 2 x edp 2 with FSDP vs 1 x 4" 8
mpi 4 train --config "$moe" --steps 8 --ep 2 --etp 2 --fsdp --quiet --metrics-out "$TMP/fe.jsonl"
same_losses "$TMP/moe_one4.jsonl" "$TMP/fe.jsonl" "ep 2 x etp 2 with FSDP vs 1 x 4" 8

# Adaptive FP8 at the layout.
bl() { "$@" --tokens 256 --iters 1 --warmup 0 --quiet > /dev/null; }
bl "$BIN" bench-layers --config "$cfg" --report "$TMP/r1.json"
bl mpi 2 bench-layers --config "$cfg" --tp 2 --sequence-parallel --report "$TMP/r2.json"
bl mpi 2 bench-layers --config "$moe" --ep 2 --report "$TMP/re.json"
[ "$(grep -c '"tp": 2' "$TMP/r2.json")" -ge 4 ] || { echo "no tp 2 points"; exit 1; }
[ "$(grep -c '"num_gemms": 2' "$TMP/re.json")" = 2 ] || { echo "no ep 2 expert points"; exit 1; }
# Expert-tensor parallel (rows all-gathered over etp, partial sums reduce-scattered back) at
# etp 2 and ep 2 x etp 2; the rowwise sequence-parallel wire.
bl mpi 2 bench-layers --config "$moe" --etp 2 --report "$TMP/ret.json"
[ "$(grep -c '"kind": "[a-z]*_grouped", "name": "fc[12]", "etp": 2' "$TMP/ret.json")" = 2 ] ||
  { echo "no etp 2 expert points"; exit 1; }
bl mpi 4 bench-layers --config "$moe" --ep 2 --etp 2 --report "$TMP/ret4.json"
[ "$(grep -c '"num_gemms": 2' "$TMP/ret4.json")" = 2 ] &&
  [ "$(grep -c '"kind": "[a-z]*_grouped", "name": "fc[12]", "etp": 2' "$TMP/ret4.json")" = 2 ] ||
  { echo "no ep 2 x etp 2 expert points"; exit 1; }
bl mpi 2 bench-layers --config "$cfg" --tp 2 --sequence-parallel --sp-wire rowwise \
  --report "$TMP/r2w.json"
[ "$(grep -c '"tp": 2' "$TMP/r2w.json")" -ge 4 ] || { echo "no rowwise-wire tp 2 points"; exit 1; }
"$BIN" policy merge --reports "$TMP/r1.json" "$TMP/r2.json" --output "$TMP/pol.json" > /dev/null
mpi 2 train --config "$cfg" --tp 2 --dry-run --fp8-policy "$TMP/pol.json" \
  --decisions-out "$TMP/dec.json" 2> "$TMP/err.txt"
grep -q "policy: no rule for layernorm_column/qkv tp=2\|policy: tokens" "$TMP/err.txt" ||
  { cat "$TMP/err.txt"; echo "no tp 2 decisions printed"; exit 1; }
[ "$(grep -c '"tp": 2' "$TMP/dec.json")" = 9 ] || { cat "$TMP/dec.json"; exit 1; }
echo "parallel layouts: all checks passed"
