#!/usr/bin/env bash
# Builds the tests with AddressSanitizer + UndefinedBehaviorSanitizer (build-asan,
# RelWithDebInfo) and runs the ones chosen in docs/reliability.md: the kernel paths (the
# core tests compare every compiled ISA path with the scalar reference, and the quantize
# CLI runs once per MXTRAIN_ISA), the parsers (io, policy, config), the layers and trainer,
# the CLI error cases, and the MPI tests at 2 ranks. Any finding fails the run
# (-fno-sanitize-recover, halt_on_error). OpenMPI's own allocations at MPI_Init are
# suppressed for LeakSanitizer by scripts/lsan_openmpi.supp.
# Usage: scripts/sanitize.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -O1 -g1: quicker to build than -O2 -g, still fast enough to run and with line numbers.
# The Python module is left out: it is loaded into Debian's unsanitized interpreter, where the
# ASan runtime cannot come first without preloading it into Python, NumPy and PyTorch too.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMXTRAIN_BUILD_BENCH=OFF \
  -DMXTRAIN_BUILD_PYTHON=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
cmake --build build-asan -j "$(nproc)"

# fast_unwind_on_malloc=0: OpenMPI's dlopen'ed components have no frame pointers, so the
# fast unwinder stops inside them and the suppressions (which match library names anywhere
# in the allocation stack) never see libopen-pal / libmpi; the slow unwinder gets the whole
# stack.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1:fast_unwind_on_malloc=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan_openmpi.supp:print_suppressions=0:fast_unwind_on_malloc=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 4-rank and 1-rank MPI variants repeat the 2-rank code paths; cli_fsdp_train trains every
# recipe at 1, 2 and 4 ranks (the 2-rank FSDP path is covered by fsdp_train_mpi_test_np2);
# cli_info_bench times benchmarks, which sanitizers only slow down; package_example installs
# the libraries and builds a program against them without the sanitizer flags (the package
# test of the normal build covers it); cli_unprivileged reruns io and CLI cases as `nobody`,
# who cannot read this tree's LeakSanitizer suppressions (the normal build runs it);
# mpi_train_signal trains 4000 steps three times over (five 2-rank launches) so that
# mpirun's delayed SIGTERM finds the run still going (8 minutes under the sanitizers); its
# stop path is the one cli_signals runs here, its FSDP steps fsdp_train_mpi_test_np2's.
# mpi_train_parity_tiny and _tiny-moe run every layout's 20 steps on configs/tiny*.yaml (3 and
# 12 minutes on a 2-core Xeon under the sanitizers, each alone on both cores);
# mpi_train_parity_mpi_tiny and _mpi_tiny_moe run the same layouts and script on smaller models.
# mpi_train_per_rank_options repeats the launch agreement that mpi_train_launch_agreement runs
# here, once per option and layout (about 40 launches).
ctest --test-dir build-asan --output-on-failure -j 2 --timeout 900 \
  -E '_np4$|_np1$|_nompirun$|^cli_fsdp_train$|^cli_info_bench$|^package_example$|^cli_unprivileged$|^mpi_train_signal$|^mpi_train_parity_tiny(-moe)?$|^mpi_train_per_rank_options$' "$@"

# The CLI kernel dispatch under each forced path this CPU supports.
for isa in $(./build-asan/mxtrain info --json | python3 -c '
import json, sys
print(" ".join(json.load(sys.stdin).get("supported_isas", [])))'); do
  echo "== cli_quantize with MXTRAIN_ISA=$isa"
  MXTRAIN_ISA=$isa bash tests/cli/quantize_cli.sh ./build-asan/mxtrain
done
