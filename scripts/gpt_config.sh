#!/usr/bin/env bash
# A GPT config for speed comparisons at one model shape: configs/tiny.yaml with d_model, heads
# and d_ff replaced, sequences of 256, micro-batch 8, STEPS optimizer steps and evaluation
# off, printed on stdout. Used by trainer_bench.sh and gemm_shapes.sh.
# Usage: bash scripts/gpt_config.sh D_MODEL HEADS D_FF STEPS > file.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 4 ] || { echo "usage: gpt_config.sh D_MODEL HEADS D_FF STEPS" >&2; exit 1; }
sed -e "s/^  d_model: .*/  d_model: $1/; s/^  n_heads: .*/  n_heads: $2/; s/^  d_ff: .*/  d_ff: $3/" \
    -e "s/^  max_seq_len: .*/  max_seq_len: 256/; s/^  seq_len: .*/  seq_len: 256/" \
    -e "s/^  micro_batch_size: .*/  micro_batch_size: 8/; s/^  steps: .*/  steps: $4/" \
    -e "s/^  eval_every: .*/  eval_every: 100000/; s/^  eval_batches: .*/  eval_batches: 1/" \
    configs/tiny.yaml
