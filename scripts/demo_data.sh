#!/usr/bin/env bash
# The main job's data: a 4096-piece SentencePiece tokenizer trained on the Debian `fortunes`
# text and its token shards, at the two paths configs/demo.yaml reads (model.tokenizer,
# data.path), cached under runs/cache/. Made again when the tokenizer or the shards are
# missing, or when the shards were made with another tokenizer.
# Usage: bash scripts/demo_data.sh [MXTRAIN]   (default build/mxtrain; used by demo.sh and
#        the benchmark harness's main-job suites)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/mxtrain}
tok=runs/cache/fortunes-sp4096.model
shards=runs/cache/fortunes-sp4096
mkdir -p runs/cache
if [ ! -s "$tok" ] || [ ! -s "$shards/shards.json" ] || ! cmp -s "$tok" "$shards/tokenizer.model"; then
  "$bin" tokenizer train --input fortunes --vocab-size 4096 --out "$tok"
  "$bin" prepare-data --input fortunes --tokenizer "$tok" --out "$shards"
fi
