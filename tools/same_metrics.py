#!/usr/bin/env python3
"""Checks that an interrupted-and-resumed run's metrics equal an uninterrupted run's.

Usage: tools/same_metrics.py REFERENCE.jsonl RUN.jsonl STEPS [LABEL]

RUN must have exactly one training row (a `loss`) for each step 1..STEPS, in order, and one
validation row per validation step; every loss and validation loss must equal REFERENCE's
bit for bit (the JSON numbers compared as the doubles they parse to). Exit status 1 with the
first differences on failure. Used by tests/cli/signals_cli.sh, tests/mpi/train_signal_mpi.sh
and scripts/soak.sh.
"""
import json
import sys


def rows(path, label):
    out = {"loss": {}, "val_loss": {}}
    order = []
    for line in open(path):
        r = json.loads(line)
        for key, seen in out.items():
            if key in r:
                if r["step"] in seen:
                    sys.exit(f"{label}: {path}: the {key} of step {r['step']} appears twice")
                seen[r["step"]] = r[key]
                if key == "loss":
                    order.append(r["step"])
    if order != sorted(order):
        sys.exit(f"{label}: {path}: training rows out of order")
    return out


def main():
    ref_path, run_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    label = sys.argv[4] if len(sys.argv) > 4 else run_path
    ref, run = rows(ref_path, label), rows(run_path, label)
    if sorted(run["loss"]) != list(range(1, steps + 1)):
        sys.exit(f"{label}: {len(run['loss'])} training rows, expected steps 1..{steps} once each")
    for key in ref:
        bad = [s for s in ref[key] if ref[key][s] != run[key].get(s)]
        if bad or ref[key].keys() != run[key].keys():
            sys.exit(f"{label}: {key} differs from the uninterrupted run at steps {bad[:5]}")
    print(f"{label}: {steps} losses and {len(ref['val_loss'])} validation losses equal the "
          "uninterrupted run's, every step once")


if __name__ == "__main__":
    main()
