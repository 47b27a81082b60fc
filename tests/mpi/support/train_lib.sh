# tests/mpi/support/train_lib.sh — shell helpers for the tests that run `mxtrain train` under
# mpirun (tests/mpi/train_*_mpi.sh): sourced, not run. Sets BIN, MPIEXEC, DATA and a temporary
# directory TMP removed on exit, and brings rank_pid / show_procs (procs.sh); `mpi` launches
# with a time limit; `same_losses` compares the per-step losses (and validation losses) of two
# metrics files.
set -euo pipefail
BIN=$(realpath "${1:?usage: $0 /path/to/mxtrain /path/to/mpiexec ...}")
MPIEXEC=${2:?usage: $0 /path/to/mxtrain /path/to/mpiexec ...}
DATA=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../data" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/mxt_mpi_train_XXXXXX")
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/procs.sh"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# mpi NP ARGS...: mxtrain under mpirun with NP ranks, at most 300 s.
mpi() {
  local np=$1
  shift
  timeout 300 "$MPIEXEC" --oversubscribe -np "$np" "$BIN" "$@"
}

# avx512_bf16_kernels: the AVX512-BF16 product kernels, oneDNN's and mxtrain's, also on a CPU
# with AMX-BF16. For the tests that compare layouts with one process within a spread: on AMX
# tiles the sums round otherwise, and how close sequence parallelism then stays to one process
# is not what these tests establish (docs/distributed.md, "Parity").
avx512_bf16_kernels() { export MXTRAIN_AMX=0 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16; }

# field FILE KEY: the KEY values of FILE's JSON lines that have it, one per line.
field() { grep "\"$2\"" "$1" | sed "s/.*\"$2\":\([^,}]*\).*/\1/"; }

# same_losses FILE_A FILE_B LABEL STEPS [KEYS]: per-step `loss` and every `val_loss` (or the
# KEYS given, e.g. "loss") agree within 1e-4 relative, and FILE_A has STEPS losses.
same_losses() {
  local key
  for key in ${5:-loss val_loss}; do
    paste <(field "$1" "$key") <(field "$2" "$key") | awk -v label="$3 $key" -v steps="$4" \
        -v key="$key" '
      { n++; if (NF != 2) { printf "%s: line %d: one file has fewer values\n", label, n; exit 1 }
        d = $1 - $2; if (d < 0) d = -d; a = ($1 < 0) ? -$1 : $1; r = d / a
        if (r > worst) worst = r }
      END {
        if (key == "loss" && n != steps) { printf "%s: expected %d steps, got %d\n", label, steps, n; exit 1 }
        if (n == 0) { printf "%s: no values\n", label; exit 1 }
        printf "%s: worst relative difference %.3g over %d values\n", label, worst, n
        exit (worst <= 1e-4) ? 0 : 1
      }'
  done
}

# summary FILE KEY: KEY of the metrics summary line.
summary() { grep '"summary"' "$1" | sed "s/.*\"$2\":\([^,}]*\).*/\1/"; }
