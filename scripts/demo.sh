#!/usr/bin/env bash
# Sets everything up, builds, and runs the main job: a short MXFP8 training run of the tiny
# GPT on the English text of the Debian `fortunes` package. Results go to runs/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
mkdir -p runs/demo
./build/mxtrain train --config configs/tiny.yaml --recipe mxfp8 \
  --metrics-out runs/demo/metrics.jsonl --checkpoint-dir runs/demo/ckpt "$@"
