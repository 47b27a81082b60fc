#!/usr/bin/env bash
# tests/cli/quantize_cli.sh — end-to-end check of the real `mxtrain quantize` / `dequantize`
# binary: exit codes, the files written, an exact round trip on values MXFP8 represents
# exactly, one clear error line for each bad input, and no partial output left behind.
# Usage: quantize_cli.sh /path/to/mxtrain   (run by CTest as `cli_quantize`)
set -u
source "$(dirname "$0")/lib.sh"
MXTRAIN=$(realpath "${1:?usage: quantize_cli.sh /path/to/mxtrain}") || exit 1
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
expect_error "unknown recipe" "unknown recipe 'mxfp4'; registered recipes:" \
  "$MXTRAIN" quantize --input x.npy --recipe mxfp4 --out-dir e1
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
AFTER=$(ls -A | grep -v -e '^out.txt$' -e '^err.txt$')
[ "$BEFORE" = "$AFTER" ] || fail "failed commands left files behind: $(diff <(echo "$BEFORE") <(echo "$AFTER"))"
[ ! -e e1 ] && [ ! -e e2.npy ] || fail "partial output exists"

finish cli_quantize
