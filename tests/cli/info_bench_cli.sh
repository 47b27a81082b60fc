#!/usr/bin/env bash
# tests/cli/info_bench_cli.sh — the `mxtrain info`, `mxtrain bench quantize / gemm / peak`
# contract: kernel-path selection (--isa, MXTRAIN_ISA), the JSON fields other tools read, the
# percentage of peak in bench gemm's rows, and a clear error for an unknown path.
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
has "$out" "scaled FP8 GEMM path: scalar" "MXTRAIN_ISA=scalar info"
out=$(MXTRAIN_ISA=avx2 "$MXTRAIN" info 2>/dev/null) &&
  has "$out" "scaled FP8 GEMM path: avx2" "MXTRAIN_ISA=avx2 info"

out=$("$MXTRAIN" bench gemm --m 3 --k 70 --n 33 --iters 1 --warmup 0 --json) ||
  fail "bench gemm exited $?"
[ "$(grep -c '"op"' <<<"$out")" -eq 9 ] || fail "bench gemm: want 9 rows (3 recipes x 3 ops)"
for key in '"recipe"' '"op"' '"m"' '"k"' '"n"' '"ms"' '"bf16_ms"' '"wgrad"'; do
  has "$out" "$key" "bench gemm --json"
done
# --bf16-shapes: the BF16 product under both of oneDNN's shapings in one run; a bad shaping
# (flag or MXTRAIN_GEMM_SHAPES) is refused before any work.
"$MXTRAIN" bench gemm --m 3,40 --k 70 --n 33 --iters 1 --warmup 0 --recipes bf16 \
  --bf16-shapes exact,runtime --json > shapes.json || fail "bench gemm --bf16-shapes exited $?"
python3 - shapes.json <<'PY' || fail "bench gemm --bf16-shapes: $(head -c 600 shapes.json)"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 12, len(rows)  # 2 m x 3 ops x (bf16, bf16@other)
shapings = {(r["m"], r["op"]): set() for r in rows}
for r in rows:
    shapings[(r["m"], r["op"])].add(r["bf16_shapes"])
    assert r["recipe"] in ("bf16", "bf16@exact", "bf16@runtime"), r
    assert r["recipe"] == "bf16" or r["recipe"] == "bf16@" + r["bf16_shapes"], r
    assert abs(r["vs_bf16"] - r["ms"] / r["bf16_ms"]) <= 1e-9 * r["vs_bf16"], r
assert all(s == {"exact", "runtime"} for s in shapings.values()), shapings
PY
expect_error "bench gemm --bf16-shapes bogus" "--bf16-shapes: unknown shaping 'bogus'" \
  "$MXTRAIN" bench gemm --m 3 --k 8 --n 8 --iters 1 --json --bf16-shapes bogus
expect_error "MXTRAIN_GEMM_SHAPES=bogus" "MXTRAIN_GEMM_SHAPES=bogus is not a choice" \
  env MXTRAIN_GEMM_SHAPES=bogus "$MXTRAIN" bench gemm --m 3 --k 8 --n 8 --iters 1 --json
expect_error "MXTRAIN_STREAM_ROWS=17" "MXTRAIN_STREAM_ROWS=17 is not a row count from 0" \
  env MXTRAIN_STREAM_ROWS=17 "$MXTRAIN" bench gemm --m 3 --k 8 --n 8 --iters 1 --json
expect_error "MXTRAIN_STREAM_ROWS=4x" "MXTRAIN_STREAM_ROWS=4x is not a row count from 0" \
  env MXTRAIN_STREAM_ROWS=4x "$MXTRAIN" bench gemm --m 3 --k 8 --n 8 --iters 1 --json
# --cold: the same rows, each saying it ran with its operands flushed from the caches.
"$MXTRAIN" bench gemm --m 3 --k 70 --n 33 --iters 1 --warmup 0 --cold --json > cold.json ||
  fail "bench gemm --cold exited $?"
python3 - cold.json <<'PY' || fail "bench gemm --cold: $(head -c 600 cold.json)"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 9 and all(r["cold"] is True for r in rows), rows
assert all(r["ms"] > 0 for r in rows), rows
PY
# bench gemm reports each row against the peak: measured in the run, or the one given.
"$MXTRAIN" bench gemm --m 5 --k 64 --n 40 --iters 1 --warmup 0 --json > measured.json ||
  fail "bench gemm (peak measured) exited $?"
"$MXTRAIN" bench gemm --m 5 --k 64 --n 40 --iters 1 --warmup 0 --peak 100 --json > given.json ||
  fail "bench gemm --peak exited $?"
python3 - measured.json given.json <<'PY' || fail "bench gemm peak fields: $(head -c 400 given.json)"
import json, sys
measured, given = (json.load(open(f)) for f in sys.argv[1:3])
for r in measured:
    assert r["peak_source"] == "measured" and r["peak_gflops"] > 0 and r["peak_threads"] >= 1, r
    assert r["peak_kind"] in ("amx_bf16", "avx512_bf16", "fp32_fma", "fp32_ref"), r
for r in given:
    assert r["peak_source"] == "given" and r["peak_gflops"] == 100 and "peak_kind" not in r, r
    flops = 2 * r["m"] * r["k"] * r["n"]
    assert abs(r["gflops"] - flops / (r["ms"] * 1e6)) <= 1e-9 * r["gflops"], r
    assert abs(r["pct_of_peak"] - r["gflops"]) <= 1e-9 * r["gflops"], r  # peak 100 GFLOP/s
PY

# bench peak: every kind the path runs at each thread count, the three streams, a reference.
"$MXTRAIN" bench peak --json --quiet --reps 3 --rep-ms 2 --buffer-mib 2 --threads 1,2 > peak.json ||
  fail "bench peak exited $?"
MXTRAIN_ISA=scalar "$MXTRAIN" bench peak --json --quiet --reps 1 --rep-ms 2 --no-memory \
  > peak_scalar.json || fail "MXTRAIN_ISA=scalar bench peak exited $?"
python3 - peak.json peak_scalar.json <<'PY' || fail "bench peak --json: $(head -c 600 peak.json)"
import json, sys
p, s = (json.load(open(f)) for f in sys.argv[1:3])
kinds = [r["kind"] for r in p["compute"]]
assert kinds[-2:] == ["fp32_ref", "fp32_ref"] and len(kinds) % 2 == 0, kinds
assert [r["threads"] for r in p["compute"]] == [1, 2] * (len(kinds) // 2), p["compute"]
ref = p["reference"]
assert ref["kind"] == kinds[0] and ref["threads"] == 2 and ref["gflops"] == p["compute"][1]["gflops"]
flops = {"amx_bf16": 16384, "avx512_bf16": 64, "fp32_ref": 2}
for r in p["compute"]:
    assert r["min_gflops"] <= r["gflops"] <= r["max_gflops"] and r["reps"] == 3, r
    assert r["flops_per_instruction"] == flops.get(r["kind"], r["flops_per_instruction"]), r
assert [(m["stream"], m["threads"]) for m in p["memory"]] == [
    (s, t) for s in ("read", "write", "copy") for t in (1, 2)], p["memory"]
for m in p["memory"]:
    assert m["buffer_bytes"] == 2 << 20 and m["min_gb_per_s"] <= m["gb_per_s"] <= m["max_gb_per_s"]
    assert m["bytes_per_rep"] % (m["buffer_bytes"] * (2 if m["stream"] == "copy" else 1)) == 0
assert s["kernel_path"] == "scalar" and s["memory"] == [] and s["reference"]["kind"] == "fp32_ref"
assert "the reference is the FP32 multiply-add" in s["reference"]["note"], s["reference"]
PY
out=$("$MXTRAIN" bench peak --quiet --reps 1 --rep-ms 1 --buffer-mib 1 --threads 1) ||
  fail "bench peak (table) exited $?"
has "$out" "reference peak:" "bench peak"
has "$out" "memory bandwidth" "bench peak"

out=$("$MXTRAIN" --isa scalar info) || fail "--isa scalar info exited $?"
has "$out" "quantize_mx_{rowwise,colwise,tile32,dual}_{f32,bf16}_ref" "--isa scalar info"

expect_error "--isa sse9" "valid names: scalar, avx2, avx512, avx512vbmi" "$MXTRAIN" --isa sse9 info

out=$("$MXTRAIN" bench quantize --rows 64 --cols 96 --iters 1 --scalar-iters 1 --json) ||
  fail "bench quantize exited $?"
rows=$(grep -c '"name"' <<<"$out")
[ "$rows" -ge 24 ] || fail "bench quantize printed $rows rows, want >= 24"
for key in '"threads"' '"gb_per_s"' '"memcpy_gb_per_s"' '"fraction_of_memcpy"' \
           '"cache_settle_bytes"' '"quantize_dual_bf16"' '"quantize_tile32_f32"' \
           '"quantize_b128_dual_f32"' '"quantize_b128_tile_bf16"' '"scales": "fp32_pow2"'; do
  has "$out" "$key" "bench quantize --json"
done
[ "$(grep -c '"name"' <<<"$("$MXTRAIN" bench quantize --rows 33 --cols 40 --iters 1 \
  --no-scalar --no-settle --json)")" -eq 24 ] || fail "--no-scalar: want 24 rows"

# The 4-bit passes: every op on both inputs (the transformed amaxes on FP32 only) at 1 and 2
# threads, with the bytes each writes for x [33, 40]: codes 33 x 20 bytes, plus the scales
# (rowwise 33 x 3, colwise 3 x 40, tiles 3 x 3 E4M3; MXFP4 33 x 2 or 2 x 40 E8M0) and NVFP4's
# 4-byte tensor scale.
"$MXTRAIN" bench quantize --rows 33 --cols 40 --iters 1 --no-scalar --no-settle --formats fp4 \
  --json >fp4.json || fail "bench quantize --formats fp4 exited $?"
python3 - fp4.json <<'PY' || fail "bench quantize --formats fp4: $(head -c 300 fp4.json)"
import json, sys
rows = json.load(open(sys.argv[1]))
want = {"nvfp4_amax": 0, "nvfp4_rht_amax": 0, "nvfp4_amaxes": 0, "nvfp4_rowwise": 763,
        "nvfp4_rowwise_te": 763, "nvfp4_rowwise_sr": 763, "nvfp4_colwise_rht": 784, "nvfp4_colwise_rht_sr": 784,
        "nvfp4_tile16": 673, "mxfp4_rowwise": 726, "mxfp4_colwise": 740}
seen = {(r["op"], r["input"], r["threads"]) for r in rows}
expect = {(op, i, t) for op in want for i in ("f32", "bf16") for t in (1, 2)
          if not (op in ("nvfp4_rht_amax", "nvfp4_amaxes") and i == "bf16")}
assert seen == expect and len(rows) == len(expect), sorted(seen ^ expect)
for r in rows:
    assert r["bytes_written"] == want[r["op"]], (r["name"], r["bytes_written"])
    assert r["bytes_read"] == 33 * 40 * (4 if r["input"] == "f32" else 2), r["name"]
    assert r["ns_per_elem"] > 0 and r["median_ns_per_elem"] >= r["ns_per_elem"], r["name"]
PY
expect_error "--formats fp5" "fp5 not in {mx,fp4}" "$MXTRAIN" bench quantize --formats fp5

finish cli_info_bench
