#!/usr/bin/env bash
# tests/mpi/train_hosts_mpi.sh — launching with an explicit host list, as on several machines
# (docs/distributed.md, "Running on several machines"), here with every slot on localhost:
# a hostfile (`localhost slots=2`) with the TCP transport forced between the ranks
# (`--mca btl self,tcp`, what separate machines use), and `--host localhost:2`. Both runs
# match one process with the same global batch. And ranks that find different corpora at the
# same data.path (two working directories standing in for two machines) stop with an error.
# Usage: train_hosts_mpi.sh MXTRAIN MPIEXEC   (CTest `mpi_train_hostfile`)
source "$(dirname "$0")/support/train_lib.sh"
cfg=$DATA/mpi_tiny.yaml
printf 'localhost slots=2\n' > "$TMP/hosts"

"$BIN" train --config "$cfg" --grad-accum 2 --steps 2 --quiet --metrics-out "$TMP/one.jsonl"
timeout 300 "$MPIEXEC" --hostfile "$TMP/hosts" -np 2 --mca btl self,tcp \
  "$BIN" train --config "$cfg" --fsdp --steps 2 --quiet --metrics-out "$TMP/hostfile.jsonl"
same_losses "$TMP/one.jsonl" "$TMP/hostfile.jsonl" "hostfile, btl tcp" 2
timeout 300 "$MPIEXEC" --host localhost:2 -np 2 \
  "$BIN" train --config "$cfg" --fsdp --steps 2 --quiet --metrics-out "$TMP/hostlist.jsonl"
same_losses "$TMP/one.jsonl" "$TMP/hostlist.jsonl" "--host localhost:2" 2
mkdir -p "$TMP/a" "$TMP/b"
for i in $(seq 300); do echo "line $i of a corpus that every machine should have"; done > "$TMP/a/corpus.txt"
{ cat "$TMP/a/corpus.txt"; echo "one more line on the second machine"; } > "$TMP/b/corpus.txt"
if timeout 300 "$MPIEXEC" --oversubscribe -np 1 -wdir "$TMP/a" "$BIN" train --config "$cfg" \
     --fsdp --steps 1 --data corpus.txt --quiet : -np 1 -wdir "$TMP/b" "$BIN" train \
     --config "$cfg" --fsdp --steps 1 --data corpus.txt --quiet > "$TMP/err.txt" 2>&1; then
  echo "different corpora should have failed"; exit 1
fi
grep -q "error: training data (corpus.txt) differs across ranks" "$TMP/err.txt" ||
  { cat "$TMP/err.txt"; echo "no corpus mismatch error"; exit 1; }
echo "host lists: all checks passed"
