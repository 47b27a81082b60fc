#!/usr/bin/env bash
# tests/cli/info_bench_cli.sh — the `mxtrain info` and `mxtrain bench quantize` contract:
# kernel-path selection (--isa, MXTRAIN_ISA), the JSON fields other tools read, and a clear
# error for an unknown path.
# Usage: info_bench_cli.sh /path/to/mxtrain   (run by CTest as `cli_info_bench`)
set -u
source "$(dirname "$0")/lib.sh"
MXTRAIN=$(realpath "${1:?usage: info_bench_cli.sh /path/to/mxtrain}") || exit 1
[ -x "$MXTRAIN" ] || { echo "not an executable: $MXTRAIN"; exit 1; }
workdir info_bench
has() { grep -q -- "$2" <<<"$1" || fail "$3: no '$2' in output"; }

out=$("$MXTRAIN" info --json) || fail "info --json exited $?"
for key in '"supported_isas"' '"best_isa"' '"active_isa"' '"kernels"' '"avx512vbmi"'; do
  has "$out" "$key" "info --json"
done

has "$out" '"gemm_path"' "info --json"

out=$(MXTRAIN_ISA=scalar "$MXTRAIN" info) || fail "MXTRAIN_ISA=scalar info exited $?"
has "$out" "active path: scalar" "MXTRAIN_ISA=scalar info"
has "$out" "MX GEMM path: scalar" "MXTRAIN_ISA=scalar info"
out=$(MXTRAIN_ISA=avx2 "$MXTRAIN" info 2>/dev/null) &&
  has "$out" "MX GEMM path: avx2" "MXTRAIN_ISA=avx2 info"

out=$("$MXTRAIN" bench gemm --m 3 --k 70 --n 33 --iters 1 --warmup 0 --json) ||
  fail "bench gemm exited $?"
[ "$(grep -c '"op"' <<<"$out")" -eq 9 ] || fail "bench gemm: want 9 rows (3 recipes x 3 ops)"
for key in '"recipe"' '"op"' '"m"' '"k"' '"n"' '"ms"' '"bf16_ms"' '"wgrad"'; do
  has "$out" "$key" "bench gemm --json"
done
out=$("$MXTRAIN" --isa scalar info) || fail "--isa scalar info exited $?"
has "$out" "quantize_mx_{rowwise,colwise,tile32,dual}_{f32,bf16}_ref" "--isa scalar info"

expect_error "--isa sse9" "valid names: scalar, avx2, avx512, avx512vbmi" "$MXTRAIN" --isa sse9 info

out=$("$MXTRAIN" bench quantize --rows 64 --cols 96 --iters 1 --scalar-iters 1 --json) ||
  fail "bench quantize exited $?"
rows=$(grep -c '"name"' <<<"$out")
[ "$rows" -ge 12 ] || fail "bench quantize printed $rows rows, want >= 12"
for key in '"threads"' '"gb_per_s"' '"memcpy_gb_per_s"' '"fraction_of_memcpy"' \
           '"cache_settle_bytes"' '"quantize_dual_bf16"' '"quantize_tile32_f32"'; do
  has "$out" "$key" "bench quantize --json"
done
[ "$(grep -c '"name"' <<<"$("$MXTRAIN" bench quantize --rows 33 --cols 40 --iters 1 \
  --no-scalar --no-settle --json)")" -eq 12 ] || fail "--no-scalar: want 12 rows"

finish cli_info_bench
