#!/usr/bin/env bash
# Sets everything up, builds, and runs the main job: a short MXFP8 training run of the tiny
# GPT on the English text of the Debian `fortunes` package. Results go to runs/demo/:
# metrics (JSON Lines), a loss plot (SVG) and the final checkpoint (safetensors).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
mkdir -p runs/demo
# Every output is checked writable before training starts (the trainer checks its own).
python3 tools/plot_losses.py --check --out runs/demo/loss.svg
./build/mxtrain train --config configs/tiny.yaml --recipe mxfp8 \
  --metrics-out runs/demo/metrics.jsonl --checkpoint-dir runs/demo/ckpt "$@"
python3 tools/plot_losses.py --out runs/demo/loss.svg --title "tiny GPT, mxfp8" \
  mxfp8=runs/demo/metrics.jsonl
echo "metrics: runs/demo/metrics.jsonl  plot: runs/demo/loss.svg  checkpoint: runs/demo/ckpt" >&2
