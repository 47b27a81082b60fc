#!/usr/bin/env bash
# Sets everything up, builds, and runs the main job: an MXFP8 training run of a small GPT
# (configs/demo.yaml) with a SentencePiece tokenizer on the English text of the Debian
# `fortunes` package, then a text sample generated from the final checkpoint. The tokenizer
# and the token shards are made once and cached under runs/cache/ (made again when the
# tokenizer file is missing; delete the directory to start over). Results go to runs/demo/:
# metrics (JSON Lines), a loss plot (SVG, nats per byte), the checkpoint and sample.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
mkdir -p runs/demo runs/cache
# Every output is checked writable before training starts (the trainer checks its own).
python3 tools/plot_losses.py --check --out runs/demo/loss.svg
bash scripts/demo_data.sh ./build/mxtrain
# A fresh run replaces the checkpoints of the previous demo run (mxtrain refuses a fresh run
# over another run's checkpoints unless told so); with --resume it continues them.
fresh=(--overwrite-checkpoints)
case " $* " in *" --resume "*) fresh=() ;; esac
./build/mxtrain train --config configs/demo.yaml --recipe mxfp8 \
  --metrics-out runs/demo/metrics.jsonl --checkpoint-dir runs/demo/ckpt "${fresh[@]}" "$@"
python3 tools/plot_losses.py --out runs/demo/loss.svg \
  --title "demo GPT (configs/demo.yaml, SentencePiece 4096), mxfp8" mxfp8=runs/demo/metrics.jsonl
echo "metrics: runs/demo/metrics.jsonl  plot: runs/demo/loss.svg  checkpoint: runs/demo/ckpt" >&2
echo "--- a sample from the trained model (mxtrain generate, seed 1) ---" >&2
./build/mxtrain generate --checkpoint runs/demo/ckpt --prompt "The meaning of life is" \
  --max-new-tokens 80 --seed 1 --quiet | tee runs/demo/sample.txt
