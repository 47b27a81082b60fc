#!/usr/bin/env bash
# tests/cli/quantize_cli.sh — end-to-end check of the real `mxtrain quantize` / `dequantize`
# binary: exit codes, the files written, an exact round trip on values MXFP8 represents
# exactly, one clear error line for each bad input, and no partial output left behind.
# Usage: quantize_cli.sh /path/to/mxtrain   (run by CTest as `cli_quantize`)
set -u
source "$(dirname "$0")/lib.sh"
MXTRAIN=$(realpath "${1:?usage: quantize_cli.sh /path/to/mxtrain}") || exit 1
CONFIGS=$(realpath "$(dirname "$0")/../../configs") || exit 1
[ -x "$MXTRAIN" ] || { echo "not an executable: $MXTRAIN"; exit 1; }
workdir quantize

# write_npy PATH DESCR SHAPE COUNT BYTES...: a .npy file (v1.0 header padded to 64 bytes)
# whose data is COUNT items cycling through the given item byte strings (printf escapes).
write_npy() {
  local path=$1 descr=$2 shape=$3 count=$4
  shift 4
  local items=("$@")
  local dict="{'descr': '$descr', 'fortran_order': False, 'shape': $shape, }"
  local total=$(( (10 + ${#dict} + 1 + 63) / 64 * 64 ))
  local hlen=$(( total - 10 )) pad=$(( total - 10 - ${#dict} - 1 ))
  {
    printf '\x93NUMPY\x01\x00'
    printf "\\x$(printf %02x $((hlen & 255)))\\x$(printf %02x $((hlen >> 8)))"
    printf '%s' "$dict"
    printf "%${pad}s\n" ''
    local i
    for ((i = 0; i < count; i++)); do printf "${items[i % ${#items[@]}]}"; done
  } > "$path"
}

# Float32 values 1.0, -2.5, 0.15625, 448, 896: every 1x32 block and 32x32 tile holds 896,
# so the scale is 2 (rceil, E4M3) and every value / 2 is an exact E4M3 value.
F32=('\x00\x00\x80\x3f' '\x00\x00\x20\xc0' '\x00\x00\x20\x3e' '\x00\x00\xe0\x43' '\x00\x00\x60\x44')
M=33 K=40
write_npy x.npy '<f4' "($M, $K)" $((M * K)) "${F32[@]}"
write_npy cube.npy '<f4' '(2, 3, 4)' 24 "${F32[@]}"
write_npy f64.npy '<f8' "($M, $K)" $((M * K)) '\x00\x00\x00\x00\x00\x00\xf0\x3f'
printf 'just some text\n' > text.npy
DATA_BYTES=$((M * K * 4))

expect_ok() {  # expect_ok DESCRIPTION CMD...
  local what=$1
  shift
  "$@" > out.txt 2> err.txt
  local rc=$?
  [ "$rc" -eq 0 ] || fail "$what: exit $rc ($(cat err.txt))"
}

# ---- success paths ------------------------------------------------------------------------
expect_ok "quantize mxfp8" "$MXTRAIN" quantize --input x.npy --recipe mxfp8 --out-dir q
[ "$(ls q | tr '\n' ' ')" = "colwise.npy colwise_scale.npy meta.json rowwise.npy rowwise_scale.npy " ] ||
  fail "mxfp8 output files: $(ls -A q | tr '\n' ' ')"
grep -q "'shape': (33, 2)" q/rowwise_scale.npy || fail "rowwise_scale.npy is not [M, ceil(K/32)]"
grep -q "'shape': (2, 40)" q/colwise_scale.npy || fail "colwise_scale.npy is not [ceil(M/32), K]"
grep -q "'descr': '|u1'" q/rowwise.npy || fail "rowwise.npy is not uint8"
expect_ok "dequantize mxfp8" "$MXTRAIN" dequantize --in-dir q --recipe mxfp8 --output y.npy
cmp -s <(tail -c $DATA_BYTES x.npy) <(tail -c $DATA_BYTES y.npy) || fail "mxfp8 round trip not exact"

# nvfp4: the weight is one 16x16-tile copy of packed codes [M, ceil(K/2)] with its tensor scale;
# the input's colwise copy is of the transformed matrix. Values 1, -2.5, 0.15625, 448, 896: not
# all on one block's E2M1 grid, so the round trip is checked within E2M1's half step below.
expect_ok "quantize nvfp4" "$MXTRAIN" quantize --input x.npy --recipe nvfp4 --out-dir n4
[ "$(ls n4 | tr '\n' ' ')" = "data.npy meta.json scale.npy tensor_scale.npy " ] ||
  fail "nvfp4 output files: $(ls -A n4 | tr '\n' ' ')"
grep -q "'shape': (33, 20)" n4/data.npy || fail "nvfp4 data.npy is not [M, ceil(K/2)]"
grep -q "'shape': (3, 3)" n4/scale.npy || fail "nvfp4 scale.npy is not [ceil(M/16), ceil(K/16)]"
grep -q '"codes_per_byte": 2' n4/meta.json || fail "nvfp4 meta.json lacks codes_per_byte"
expect_ok "dequantize nvfp4" "$MXTRAIN" dequantize --in-dir n4 --recipe nvfp4 --output n4y.npy
expect_ok "quantize nvfp4 input" "$MXTRAIN" quantize --input x.npy --recipe nvfp4 --role input \
  --nvfp4-order te --out-dir n4i
grep -q '"colwise_rht": true' n4i/meta.json || fail "nvfp4 input: colwise copy not marked RHT"
grep -q '"order": "te"' n4i/meta.json || fail "nvfp4 --nvfp4-order te not recorded"
expect_ok "quantize mxfp4" "$MXTRAIN" quantize --input x.npy --recipe mxfp4 --out-dir m4
grep -q "'shape': (33, 20)" m4/rowwise.npy || fail "mxfp4 rowwise.npy is not [M, ceil(K/2)]"
expect_ok "dequantize mxfp4" "$MXTRAIN" dequantize --in-dir m4 --recipe mxfp4 --output m4y.npy

expect_ok "quantize mxfp8-32x32" "$MXTRAIN" quantize --input x.npy --recipe mxfp8-32x32 \
  --scale-rounding floor --elem e4m3 --out-dir t
[ "$(ls t | tr '\n' ' ')" = "data.npy meta.json scale.npy " ] || fail "tile output files: $(ls t)"
grep -q "'shape': (2, 2)" t/scale.npy || fail "scale.npy is not [ceil(M/32), ceil(K/32)]"
grep -q '"scale_rounding": "floor"' t/meta.json || fail "meta.json lacks the rounding"
expect_ok "dequantize mxfp8-32x32" "$MXTRAIN" dequantize --in-dir t --recipe mxfp8-32x32 \
  --elem e4m3 --output yt.npy
cmp -s <(tail -c $DATA_BYTES x.npy) <(tail -c $DATA_BYTES yt.npy) || fail "tile round trip not exact"

# Re-quantizing into an earlier output replaces it as a whole.
expect_ok "replace output" "$MXTRAIN" quantize --input x.npy --recipe mxfp8-32x32 --out-dir q
[ "$(ls q | tr '\n' ' ')" = "data.npy meta.json scale.npy " ] || fail "replaced output: $(ls q)"

# ---- blockwise: FP32 scale_inv grids, exact bytes -------------------------------------------
# bytes_at FILE COUNT: the first COUNT data bytes of a v1.0 .npy (after its header), as hex.
bytes_at() {
  local hlen=$(od -An -tu2 -j8 -N2 "$1" | tr -d ' ')
  tail -c +$((10 + hlen + 1)) "$1" | head -c "$2" | od -An -tx1 | tr -s ' \n' ' ' |
    sed 's/^ //;s/ $//'
}
# Rows hold 1, -2.5, 0.15625, 448, 896 cyclically and K = 40 is a multiple of 5, so every
# 1x128 row block (and the one 128x128 tile) has amax 896: scale 448/896 = 0.5, scale_inv 2
# (0x40000000), codes 0.5 -1.25 0.078125 224 448 = 30 ba 1a 76 7e. Column c holds one value:
# scales 256, 128, 2048, 1, 0.5 (pow2 of 448/amax), codes 256 -320 320 448 448.
expect_ok "quantize blockwise" "$MXTRAIN" quantize --input x.npy --recipe blockwise --out-dir b
[ "$(ls b | tr '\n' ' ')" = "colwise.npy colwise_scale_inv.npy meta.json rowwise.npy rowwise_scale_inv.npy " ] ||
  fail "blockwise output files: $(ls -A b | tr '\n' ' ')"
grep -q "'descr': '<f4', 'fortran_order': False, 'shape': (33, 1)" b/rowwise_scale_inv.npy ||
  fail "rowwise_scale_inv.npy is not float32 [M, ceil(K/128)]"
grep -q "'descr': '<f4', 'fortran_order': False, 'shape': (1, 40)" b/colwise_scale_inv.npy ||
  fail "colwise_scale_inv.npy is not float32 [ceil(M/128), K]"
[ "$(bytes_at b/rowwise.npy 5)" = "30 ba 1a 76 7e" ] || fail "rowwise codes: $(bytes_at b/rowwise.npy 5)"
[ "$(bytes_at b/colwise.npy 5)" = "78 fa 7a 7e 7e" ] || fail "colwise codes: $(bytes_at b/colwise.npy 5)"
[ "$(bytes_at b/rowwise_scale_inv.npy 8)" = "00 00 00 40 00 00 00 40" ] ||
  fail "rowwise scale_inv: $(bytes_at b/rowwise_scale_inv.npy 8)"
[ "$(bytes_at b/colwise_scale_inv.npy 24)" = "00 00 80 3b 00 00 00 3c 00 00 00 3a 00 00 80 3f 00 00 00 40 00 00 80 3b" ] ||
  fail "colwise scale_inv: $(bytes_at b/colwise_scale_inv.npy 24)"
grep -q '"scale_type": "fp32_pow2"' b/meta.json && grep -q '"role": "input"' b/meta.json ||
  fail "blockwise meta.json lacks role / scale_type: $(cat b/meta.json)"
expect_ok "dequantize blockwise" "$MXTRAIN" dequantize --in-dir b --recipe blockwise --output yb.npy
cmp -s <(tail -c $DATA_BYTES x.npy) <(tail -c $DATA_BYTES yb.npy) || fail "blockwise round trip not exact"
# Role weight: one 128x128 tile; --fp32-scales with --amax-epsilon 1000 (above the amax): scale
# fl32(448/1000) = 0.448, scale_inv 2.2321427 (0x400edb6d), codes of 0.448 -1.12 0.07 200.704
# 401.408 = 0.4375 -1.125 0.0703125 208 416 = 2e b9 19 75 7d.
expect_ok "quantize blockwise weight" "$MXTRAIN" quantize --input x.npy --recipe blockwise \
  --role weight --fp32-scales --amax-epsilon 1000 --out-dir bw
[ "$(ls bw | tr '\n' ' ')" = "data.npy meta.json scale_inv.npy " ] || fail "weight files: $(ls bw)"
grep -q "'shape': (1, 1)" bw/scale_inv.npy || fail "scale_inv.npy is not [ceil(M/128), ceil(K/128)]"
[ "$(bytes_at bw/scale_inv.npy 4)" = "6d db 0e 40" ] || fail "weight scale_inv: $(bytes_at bw/scale_inv.npy 4)"
[ "$(bytes_at bw/data.npy 5)" = "2e b9 19 75 7d" ] || fail "weight codes: $(bytes_at bw/data.npy 5)"
grep -q '"scale_type": "fp32"' bw/meta.json && grep -q '"amax_epsilon": 1000' bw/meta.json ||
  fail "weight meta.json: $(cat bw/meta.json)"
expect_ok "dequantize blockwise weight" "$MXTRAIN" dequantize --in-dir bw --recipe blockwise \
  --output ybw.npy
# 0.4375 * 2.2321427 in FP32 = 0.97656244 (0x3f79ffff)
[ "$(bytes_at ybw.npy 4)" = "ff ff 79 3f" ] || fail "weight dequantize: $(bytes_at ybw.npy 4)"
expect_ok "blockwise e5m2" "$MXTRAIN" quantize --input x.npy --recipe blockwise --elem e5m2 \
  --out-dir b5
# E5M2 max 57344: scale pow2(57344/896 = 64) = 64, codes 64 -160 10 28672 57344.
[ "$(bytes_at b5/rowwise.npy 5)" = "54 d9 49 77 7b" ] || fail "e5m2 codes: $(bytes_at b5/rowwise.npy 5)"

# ---- errors: exit code 1, one message, nothing written --------------------------------------
cp -r t t_bad && rm t_bad/scale.npy
BEFORE=$(ls -A | grep -v -e '^out.txt$' -e '^err.txt$')
expect_error "missing input" "file not found: nothere.npy" \
  "$MXTRAIN" quantize --input nothere.npy --recipe mxfp8 --out-dir e1
expect_error "not a .npy" "not a .npy file" \
  "$MXTRAIN" quantize --input text.npy --recipe mxfp8 --out-dir e1
expect_error "3-D input" "expected a 2-D array, got shape (2, 3, 4)" \
  "$MXTRAIN" quantize --input cube.npy --recipe mxfp8 --out-dir e1
expect_error "float64 input" "expected dtype float32" \
  "$MXTRAIN" quantize --input f64.npy --recipe mxfp8 --out-dir e1
expect_error "unknown recipe" "unknown recipe 'mxfp6'; registered recipes:" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp6 --out-dir e1
expect_error "bf16 recipe" "recipe 'bf16' does not quantize" \
  "$MXTRAIN" quantize --input x.npy --recipe bf16 --out-dir e1
expect_error "bad elem" "unknown element format 'e3m4'" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp8 --elem e3m4 --out-dir e1
expect_error "bad rounding" "unknown scale rounding 'ceil'" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp8 --scale-rounding ceil --out-dir e1
expect_error --at-start "unknown option" "The following argument was not expected: --bogus" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp8 --out-dir e1 --bogus
expect_error "missing parent" "parent directory" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp8 --out-dir nodir/e1
expect_error "recipe mismatch" "was quantized with recipe 'mxfp8-32x32', but --recipe is 'mxfp8'" \
  "$MXTRAIN" dequantize --in-dir t --recipe mxfp8 --output e2.npy
expect_error "elem mismatch" "holds e4m3 data, but --elem is e5m2" \
  "$MXTRAIN" dequantize --in-dir t --recipe mxfp8-32x32 --elem e5m2 --output e2.npy
expect_error "not a quantize dir" "meta.json: file not found" \
  "$MXTRAIN" dequantize --in-dir . --recipe mxfp8 --output e2.npy
expect_error "output dir missing" "the directory does not exist" \
  "$MXTRAIN" dequantize --in-dir t --recipe mxfp8-32x32 --output nodir/e2.npy
expect_error "missing scale file" "file not found: t_bad/scale.npy" \
  "$MXTRAIN" dequantize --in-dir t_bad --recipe mxfp8-32x32 --output e2.npy
expect_error "unknown role" "unknown role 'bias'; valid choices: input (default), weight" \
  "$MXTRAIN" quantize --input x.npy --recipe blockwise --role bias --out-dir e1
expect_error "negative epsilon" "--amax-epsilon must be a finite number >= 0, got -1" \
  "$MXTRAIN" quantize --input x.npy --recipe blockwise --amax-epsilon -1 --out-dir e1
expect_error "NaN epsilon" "--amax-epsilon: \`nan\` is not a finite number" \
  "$MXTRAIN" quantize --input x.npy --recipe blockwise --amax-epsilon nan --out-dir e1
expect_error "fp32 scales with MX" "--fp32-scales applies to FP32-scaled recipes (blockwise)" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp8 --fp32-scales --out-dir e1
expect_error "epsilon with MX" "--amax-epsilon applies to FP32-scaled recipes (blockwise)" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp8-32x32 --amax-epsilon 0 --out-dir e1
expect_error "role with MX" "--role applies to FP32-scaled recipes (blockwise)" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp8 --role input --out-dir e1
expect_error "rounding with blockwise" "--scale-rounding applies to MX recipes" \
  "$MXTRAIN" quantize --input x.npy --recipe blockwise --scale-rounding floor --out-dir e1
expect_error "blockwise recipe mismatch" "was quantized with recipe 'blockwise', but --recipe is 'mxfp8'" \
  "$MXTRAIN" dequantize --in-dir b --recipe mxfp8 --output e2.npy
# Delayed-scaling settings on a recipe without an amax history stop training at start-up.
expect_error --within 20 "amax history on fp8-current" \
  "--amax-history-len: \`precision.amax_history_len\` applies to recipes with delayed scaling" \
  "$MXTRAIN" train --config "$CONFIGS/tiny.yaml" --recipe fp8-current --amax-history-len 16 --steps 1
# 4-bit: the options that apply to other recipes are refused by name, and the reverse.
expect_error "nvfp4 order on mxfp8" "--nvfp4-order applies to recipe nvfp4, not 'mxfp8'" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp8 --nvfp4-order te --out-dir e1
expect_error "grad role on blockwise" "--role grad applies to 4-bit recipes (nvfp4, mxfp4)" \
  "$MXTRAIN" quantize --input x.npy --recipe blockwise --role grad --out-dir e1
expect_error "e2m1 on mxfp8" "--elem e2m1 applies to 4-bit recipes (nvfp4, mxfp4)" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp8 --elem e2m1 --out-dir e1
expect_error "rounding on nvfp4" "--scale-rounding applies to E8M0 scales (MX, mxfp4)" \
  "$MXTRAIN" quantize --input x.npy --recipe nvfp4 --scale-rounding floor --out-dir e1
expect_error --within 20 "fp4 switch on mxfp8" \
  "--fp4-rht: \`precision.fp4_rht\` applies to 4-bit recipes (nvfp4, mxfp4)" \
  "$MXTRAIN" train --config "$CONFIGS/tiny.yaml" --recipe mxfp8 --fp4-rht false --steps 1
AFTER=$(ls -A | grep -v -e '^out.txt$' -e '^err.txt$')
[ "$BEFORE" = "$AFTER" ] || fail "failed commands left files behind: $(diff <(echo "$BEFORE") <(echo "$AFTER"))"
[ ! -e e1 ] && [ ! -e e2.npy ] || fail "partial output exists"

finish cli_quantize
