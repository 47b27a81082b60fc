#!/usr/bin/env bash
# tests/mpi/train_parity_mpi.sh — 20-step losses of every parallel layout against one process
# (docs/distributed.md, "Parity"), for bf16 and mxfp8, on one model.
#
# Each layout runs `mxtrain train` under mpirun for 20 steps. Its reference is one process with
# the same global batch in the same order (grad_accum dp x the layout's) that sums its products
# in the layout's order: for a layout with row-parallel products (tp, etp) the products are
# summed as that many ranks sum them (GPT::set_split_sums, through mpi_split_sums_train);
# expert and data parallelism change no product, so their reference is the plain one process.
# The envelope: max over the 20 steps of |loss_layout - loss_reference| is at most twice how
# far that one process is from itself with the same global batch split into micro-batches
# differently — the largest max-over-steps distance of the runs with every other power-of-two
# micro_batch_size (grad_accum adjusted). tp 2 alone (no SP, one replica) computes exactly
# what its reference computes: its 20 losses must be equal, bit for bit.
# Also printed, not asserted: the distance from the plain one process (the product order
# changed too), which docs/distributed.md quotes.
#
# Usage: train_parity_mpi.sh MXTRAIN MPIEXEC SPLIT_TRAIN MODEL
#   MODEL: tiny (configs/tiny.yaml), mpi_tiny, tiny-moe (configs/tiny-moe.yaml), mpi_tiny_moe
#   (CTest mpi_train_parity_<MODEL>)
source "$(dirname "$0")/support/train_lib.sh"
avx512_bf16_kernels
SPLIT=$(realpath "${3:?usage: $0 MXTRAIN MPIEXEC SPLIT_TRAIN MODEL}")
MODEL=${4:?usage: $0 MXTRAIN MPIEXEC SPLIT_TRAIN MODEL}
SRC=$(cd "$DATA/../.." && pwd)
case $MODEL in
  tiny) cfg=$SRC/configs/tiny.yaml; moe=0 ;;
  tiny-moe) cfg=$SRC/configs/tiny-moe.yaml; moe=1 ;;
  mpi_tiny) cfg=$DATA/mpi_tiny.yaml; moe=0 ;;
  mpi_tiny_moe) cfg=$DATA/mpi_tiny_moe.yaml; moe=1 ;;
  *) echo "unknown model $MODEL"; exit 2 ;;
esac
STEPS=20
MB=$(sed -n 's/.*micro_batch_size: *\([0-9]*\).*/\1/p' "$cfg")
# The experts' d_ff: `moe: {..., d_ff: N}` on one line, or `d_ff: N` in a `moe:` block.
D_FF_E=$(sed -n -e 's/.*moe:.*d_ff: *\([0-9]*\).*/\1/p' \
  -e '/^  moe:/,/^[a-z]/s/^ *d_ff: *\([0-9]*\).*/\1/p' "$cfg" | tail -1)

# maxdiff A B: the largest |loss_A - loss_B| over the steps (both files must have STEPS).
maxdiff() {
  paste <(field "$1" loss) <(field "$2" loss) | awk -v steps=$STEPS -v a="$1" '
    { n++; d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
    END { if (n != steps) {
            printf "%s: %d steps, expected %d\n", a, n, steps > "/dev/stderr"; exit 1 }
          printf "%.6g", m }'
}

# one NAME TP ETP G U: one process, global batch G sequences in micro-batches of U, its
# products summed as TP and ETP ranks sum them (1 1: its own order); NAME_<U>.jsonl.
one() {
  local name=$1 tp=$2 etp=$3 G=$4 u=$5
  [ -s "$TMP/${name}_$u.jsonl" ] && return
  timeout 300 "$SPLIT" "$cfg" "$TMP/${name}_$u.jsonl" "$tp" "$etp" precision.recipe=$recipe \
    training.steps=$STEPS training.micro_batch_size=$u training.grad_accum=$((G / u))
}

# family NAME TP ETP G: `one` at every power-of-two micro_batch_size up to G.
family() {
  local u
  for ((u = 1; u <= $4; u *= 2)); do one "$@" $u; done
}

# self_distance NAME G U: how far NAME_<U> is from NAME_<u> for the other micro sizes u, the
# largest.
self_distance() {
  local name=$1 G=$2 ref=$3 u worst=0 d
  for ((u = 1; u <= G; u *= 2)); do
    [ $u = "$ref" ] && continue
    d=$(maxdiff "$TMP/${name}_$ref.jsonl" "$TMP/${name}_$u.jsonl")
    worst=$(awk -v a="$worst" -v b="$d" 'BEGIN { m = a; if (b + 0 > a + 0) m = b; print m }')
  done
  echo "$worst"
}

# layout LABEL NP REFERENCE G U EXACT FLAGS...: the layout's run (micro-batches of U sequences
# per data-parallel rank) against REFERENCE_<U>, of a family of global batch G; EXACT 1: the
# losses must be the reference's bit for bit.
layout() {
  local label=$1 np=$2 ref=$3 G=$4 u=$5 exact=$6
  shift 6
  mpi "$np" train --config "$cfg" --recipe "$recipe" --steps $STEPS --micro-batch-size "$u" \
    --quiet "$@" --metrics-out "$TMP/par.jsonl"
  local d self plain
  d=$(maxdiff "$TMP/par.jsonl" "$TMP/${ref}_$u.jsonl")
  self=$(self_distance "$ref" "$G" "$u")
  one "one_G$G" 1 1 "$G" "$u"  # the plain one process, for the record
  plain=$(maxdiff "$TMP/par.jsonl" "$TMP/one_G${G}_$u.jsonl")
  local ratio
  ratio=$(awk -v a="$d" -v b="$self" \
    'BEGIN { r = 0; if (b > 0) r = a / b; else if (a > 0) r = "inf"; print r }')
  printf '%s %s %s: max |Δloss| over %d steps %.3g against one process summing as it does' \
    "$MODEL" "$recipe" "$label" $STEPS "$d"
  printf ' (its own spread over micro-batch splits %.3g, ratio %.3g);' "$self" "$ratio"
  printf ' %.3g against the plain one process\n' "$plain"
  if [ "$exact" = 1 ]; then
    cmp -s <(field "$TMP/par.jsonl" loss) <(field "$TMP/${ref}_$u.jsonl" loss) ||
      { echo "FAIL: $label should equal its reference bit for bit"; exit 1; }
  fi
  awk -v a="$d" -v b="$self" 'BEGIN { exit (a <= 2 * b) ? 0 : 1 }' ||
    { echo "FAIL: $label is further than twice one process's own spread"; exit 1; }
}

# Every layout's global batch is the config's micro_batch_size MB (2 ranks with tp 2) or 2 MB
# (2 data-parallel ranks of MB, or 4 of MB/2), so one family per product order serves them all.
H=$((MB / 2))
for recipe in bf16 mxfp8; do
  rm -f "$TMP"/*.jsonl
  family tp_G$MB 2 1 $MB
  if [ $moe = 0 ]; then
    layout "tp 2" 2 tp_G$MB $MB $MB 1 --tp 2
    layout "tp 2 + SP" 2 tp_G$MB $MB $MB 0 --tp 2 --sequence-parallel
    layout "tp 2 x dp 2" 4 tp_G$MB $MB $H 0 --tp 2
  else
    # Expert-tensor parallelism's reference sums as etp 2 does where each rank's slice of
    # the experts' hidden units is whole MX blocks (a 32-multiple); otherwise (mpi_tiny_moe:
    # 20 units) the plain one process.
    etp_split=2
    [ "$recipe" != bf16 ] && [ $((D_FF_E / 2 % 32)) != 0 ] && etp_split=1
    family one_G$((2 * MB)) 1 1 $((2 * MB))
    family etp_G$((2 * MB)) 1 $etp_split $((2 * MB))
    layout "MoE tp 2 + SP" 2 tp_G$MB $MB $MB 0 --tp 2 --sequence-parallel
    layout "ep 2" 2 one_G$((2 * MB)) $((2 * MB)) $MB 0 --ep 2
    layout "ep 2 x edp 2" 4 one_G$((2 * MB)) $((2 * MB)) $H 0 --ep 2
    layout "ep 2 x etp 2" 4 etp_G$((2 * MB)) $((2 * MB)) $H 0 --ep 2 --etp 2
  fi
done
echo "parity $MODEL: all layouts within their envelopes"
