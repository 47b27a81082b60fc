#!/usr/bin/env bash
# tests/mpi/train_nvfp4_mpi.sh — `mxtrain train --recipe nvfp4` at tensor, sequence and expert
# parallel layouts (docs/distributed.md, "NVFP4 at a layout"): each per-tensor scale of a tensor
# whose pieces several ranks hold comes from the amax agreed over them.
#
# - With gradients rounded to nearest even (--fp4-stochastic-rounding false) the layouts that
#   cut at 16-element block edges reproduce one process: tp 2, tp 2 + SP (exact wire) on
#   tests/data/mpi_tiny.yaml, every loss within 1e-4 relative over 12 steps; ep 2 on
#   tests/data/mpi_tiny_moe.yaml against grad_accum 2, its first 4 losses equal;
# - nvfp4 as registered (stochastic rounding draws other bits on a rank's slice than one
#   process does) at tp 2, tp 2 + SP on both wires, ep 2, MoE tp 2 + SP and ep 2 x etp 2: finite
#   losses whose largest distance over 12 steps from one process with the same global batch is
#   at most twice that process's own spread over micro-batch splits (train_parity_mpi.sh's
#   envelope);
# - bytes: the sequence-parallel all-gathers send 9/32 of bf16's bytes per element on the
#   rowwise wire (E2M1 codes and a 1x16 E4M3 scale, 0.5625 bytes, against 2) and 3/8 on the
#   exact wire, plus the agreed tensor scale (4 bytes) of every gathered copy; expert dispatch
#   9/32 of bf16's plus the tensor scale of every pack (4 bytes to the other rank, forward and
#   backward);
# - with --fsdp at tp 2 (dp 1 and dp 2) and ep 2 x etp 2, gradients rounded to nearest even:
#   FSDP agrees a weight slice's amax over its data-parallel replicas, then over the slice's
#   group (the layer's own agreement), so the gathered codes are the layout's own: tp 2's
#   losses bit for bit over 12 and 6 steps; ep 2 x etp 2's first 4 losses bit for bit (after
#   them FSDP's gradient sums over the MoE layout take another order, as they do in mxfp8).
# Usage: train_nvfp4_mpi.sh MXTRAIN MPIEXEC   (CTest `mpi_train_nvfp4`)
source "$(dirname "$0")/support/train_lib.sh"
avx512_bf16_kernels
cfg=$DATA/mpi_tiny.yaml
moe=$DATA/mpi_tiny_moe.yaml
STEPS=12
RNE=(--recipe nvfp4 --fp4-stochastic-rounding false)

# Equal up to FP32 sum order where the slices are whole blocks.
"$BIN" train --config "$cfg" "${RNE[@]}" --steps $STEPS --quiet --metrics-out "$TMP/one.jsonl"
mpi 2 train --config "$cfg" "${RNE[@]}" --steps $STEPS --tp 2 --quiet --metrics-out "$TMP/tp.jsonl"
same_losses "$TMP/one.jsonl" "$TMP/tp.jsonl" "nvfp4 (nearest-even grads): tp 2 vs 1 process" $STEPS
mpi 2 train --config "$cfg" "${RNE[@]}" --steps $STEPS --tp 2 --sequence-parallel --quiet \
  --metrics-out "$TMP/sp.jsonl"
same_losses "$TMP/one.jsonl" "$TMP/sp.jsonl" "nvfp4 (nearest-even grads): tp 2 + SP vs 1 process" \
  $STEPS
"$BIN" train --config "$moe" "${RNE[@]}" --steps $STEPS --grad-accum 2 --quiet \
  --metrics-out "$TMP/moe_one.jsonl" 2> /dev/null
mpi 2 train --config "$moe" "${RNE[@]}" --steps $STEPS --ep 2 --quiet \
  --metrics-out "$TMP/moe_ep.jsonl" 2> /dev/null
# Each expert's gradient is one process's bit for bit, the dense ones' sum over the ranks is
# added in another order: the first steps' losses are one process's exactly, and the ulps
# grow (NVFP4's non-power-of-two scales carry an ulp of an amax into block scales: measured
# 1.1e-4 relative by step 12, 8.6e-5 by step 8), held to the envelope below.
cmp <(field "$TMP/moe_one.jsonl" loss | head -4) <(field "$TMP/moe_ep.jsonl" loss | head -4) ||
  { echo "FAIL: nvfp4 (nearest-even grads) ep 2: the first 4 losses differ from 1 process x 2"; exit 1; }
echo "nvfp4 (nearest-even grads): ep 2 vs 1 process x 2: the first 4 losses equal"

# maxdiff A B: the largest |loss_A - loss_B| over the steps (both must have STEPS finite losses).
maxdiff() {
  paste <(field "$1" loss) <(field "$2" loss) | awk -v steps=$STEPS -v a="$2" '
    { n++; if ($2 !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) { printf "%s: loss %s\n", a, $2 > "/dev/stderr"; exit 1 }
      d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
    END { if (n != steps) { printf "%s: %d steps, expected %d\n", a, n, steps > "/dev/stderr"; exit 1 }
          printf "%.6g", m }'
}
# family CONFIG NAME G: one process with global batch G at every power-of-two micro-batch size
# u (grad_accum G / u): NAME_<u>.jsonl.
family() {
  local u
  for ((u = 1; u <= $3; u *= 2)); do
    "$BIN" train --config "$1" --recipe nvfp4 --steps $STEPS --micro-batch-size $u \
      --grad-accum $(($3 / u)) --quiet --metrics-out "$TMP/$2_$u.jsonl" 2> /dev/null
  done
}
# envelope LABEL NAME G U FILE: FILE's distance from NAME_<U> at most twice the largest distance
# of NAME_<u> from NAME_<U> over the other u.
envelope() {
  local self=0 d u
  for ((u = 1; u <= $3; u *= 2)); do
    [ $u = "$4" ] && continue
    d=$(maxdiff "$TMP/$2_$4.jsonl" "$TMP/$2_$u.jsonl")
    self=$(awk -v a="$self" -v b="$d" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
  done
  d=$(maxdiff "$TMP/$2_$4.jsonl" "$5")
  printf '%s: max |dloss| over %d steps %.3g, one process own spread %.3g\n' "$1" $STEPS "$d" "$self"
  awk -v a="$d" -v b="$self" 'BEGIN { exit (a <= 2 * b) ? 0 : 1 }' ||
    { echo "FAIL: $1 is further than twice one process's own spread"; exit 1; }
}

# nvfp4 as registered (stochastic rounding): within the envelope.
MB=$(sed -n 's/.*micro_batch_size: *\([0-9]*\).*/\1/p' "$cfg")
family "$cfg" dense $MB
for wire in "" "--sequence-parallel" "--sequence-parallel --sp-wire rowwise"; do
  # shellcheck disable=SC2086
  mpi 2 train --config "$cfg" --recipe nvfp4 --steps $STEPS --tp 2 $wire --quiet \
    --metrics-out "$TMP/l.jsonl"
  envelope "nvfp4: tp 2 $wire" dense $MB $MB "$TMP/l.jsonl"
done
MBE=$(sed -n 's/.*micro_batch_size: *\([0-9]*\).*/\1/p' "$moe")
family "$moe" moe1 $MBE
mpi 2 train --config "$moe" --recipe nvfp4 --steps $STEPS --tp 2 --sequence-parallel --quiet \
  --metrics-out "$TMP/l.jsonl" 2> /dev/null
envelope "nvfp4 MoE: tp 2 + SP" moe1 $MBE $MBE "$TMP/l.jsonl"
family "$moe" moe2 $((2 * MBE))
mpi 2 train --config "$moe" --recipe nvfp4 --steps $STEPS --ep 2 --quiet \
  --metrics-out "$TMP/l.jsonl" 2> /dev/null
envelope "nvfp4 MoE: ep 2" moe2 $((2 * MBE)) $MBE "$TMP/l.jsonl"
mpi 4 train --config "$moe" --recipe nvfp4 --steps $STEPS --ep 2 --etp 2 --quiet \
  --micro-batch-size $((MBE / 2)) --metrics-out "$TMP/l.jsonl" 2> /dev/null
envelope "nvfp4 MoE: ep 2 x etp 2" moe2 $((2 * MBE)) $((MBE / 2)) "$TMP/l.jsonl"

# Bytes per step (exact counts: 2 layers; per layer the exact wire gathers 8 copies, the
# rowwise wire 4, each with its 4-byte tensor scale; dispatch: one pack scale each way).
for recipe in bf16 nvfp4; do
  mpi 2 train --config "$cfg" --recipe $recipe --steps 1 --tp 2 --sequence-parallel --quiet \
    --metrics-out "$TMP/b_exact_$recipe.jsonl"
  mpi 2 train --config "$cfg" --recipe $recipe --steps 1 --tp 2 --sequence-parallel \
    --sp-wire rowwise --quiet --metrics-out "$TMP/b_rowwise_$recipe.jsonl"
done
ag() { field "$1" tp_allgather_bytes | head -1; }
ratio() {  # ratio LABEL NVFP4_BYTES BF16_BYTES NUM DEN EXTRA
  awk -v l="$1" -v a="$2" -v b="$3" -v n="$4" -v d="$5" -v e="$6" 'BEGIN {
    printf "%s nvfp4 / bf16 = %.6f (%d bytes against %d)\n", l, a / b, a, b
    exit (b > 0 && a == b * n / d + e) ? 0 : 1 }' || { echo "FAIL: unexpected $1"; exit 1; }
}
ratio "exact wire: tp_allgather_bytes" "$(ag "$TMP/b_exact_nvfp4.jsonl")" \
  "$(ag "$TMP/b_exact_bf16.jsonl")" 3 8 $((2 * 8 * 4))
ratio "rowwise wire: tp_allgather_bytes" "$(ag "$TMP/b_rowwise_nvfp4.jsonl")" \
  "$(ag "$TMP/b_rowwise_bf16.jsonl")" 9 32 $((2 * 4 * 4))
# Dispatch with the same routing: one MoE layer behind a BF16 attention block, step 1.
{ sed 's/n_layers: 2/n_layers: 1/' "$moe"; echo "  overrides: {'layers.*.attention.*': bf16}"; } \
  | sed 's/^precision: {recipe: mxfp8}$/precision:\n  recipe: mxfp8/' > "$TMP/moe1.yaml"
for recipe in bf16 nvfp4; do
  mpi 2 train --config "$TMP/moe1.yaml" --recipe $recipe --steps 1 --ep 2 --quiet \
    --metrics-out "$TMP/d_$recipe.jsonl"
done
d() { field "$1" ep_dispatch_bytes | head -1; }
ratio "ep_dispatch_bytes" "$(d "$TMP/d_nvfp4.jsonl")" "$(d "$TMP/d_bf16.jsonl")" 9 32 8

# FSDP at the layouts: the same codes as without it.
same_bits() {  # same_bits LABEL A B N: the first N losses of A and B equal to the bit
  cmp <(field "$2" loss | head -"$4") <(field "$3" loss | head -"$4") ||
    { echo "FAIL: $1: the first $4 losses differ"; exit 1; }
  [ "$(field "$3" loss | wc -l)" -ge "$4" ] || { echo "FAIL: $1: fewer than $4 steps"; exit 1; }
  echo "$1: the first $4 losses equal"
}
mpi 2 train --config "$cfg" "${RNE[@]}" --steps $STEPS --tp 2 --fsdp --quiet \
  --metrics-out "$TMP/tpf.jsonl"
same_bits "nvfp4 (nearest-even grads): tp 2 with FSDP vs tp 2" "$TMP/tp.jsonl" "$TMP/tpf.jsonl" \
  $STEPS
for f in "" --fsdp; do
  mpi 4 train --config "$cfg" "${RNE[@]}" --steps 6 --tp 2 $f --quiet \
    --metrics-out "$TMP/tp4$f.jsonl"
  mpi 4 train --config "$moe" "${RNE[@]}" --steps 4 --ep 2 --etp 2 $f --quiet \
    --metrics-out "$TMP/etp$f.jsonl" 2> /dev/null
done
same_bits "nvfp4 (nearest-even grads): tp 2 x dp 2 with FSDP vs without" "$TMP/tp4.jsonl" \
  "$TMP/tp4--fsdp.jsonl" 6
same_bits "nvfp4 (nearest-even grads): ep 2 x etp 2 with FSDP vs without" "$TMP/etp.jsonl" \
  "$TMP/etp--fsdp.jsonl" 4
echo "nvfp4 at the layouts: all checks passed"
