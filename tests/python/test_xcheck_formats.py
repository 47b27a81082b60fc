"""tests/python/test_xcheck_formats.py — mxtrain's element and scale formats against
ml_dtypes (0.5.4), the NumPy float8 / bfloat16 types JAX and others use.

Reference functions called (ml_dtypes through NumPy's casts):
- decode: `codes.view(ml_dtypes.float8_e4m3fn | float8_e5m2 | float8_e8m0fnu | bfloat16)
  .astype(numpy.float32)`;
- encode: `x.astype(ml_dtypes.float8_e4m3fn | float8_e5m2 | bfloat16)` on float32 x (round to
  nearest, ties to even).
against mxtrain's `mxtrain.decode(codes, fmt)` / `mxtrain.encode(x, fmt)` (formats.h:
e4m3_to_f32, e5m2_to_f32, e8m0_to_f32, f32_to_e4m3, f32_to_e5m2 — the scalar references;
bf16 through the dispatched f32_to_bf16_array / bf16_to_f32_array on every kernel path) and
the vectorised FP8 encoder inside the MX quantize kernels (`mxtrain.quantize` on every path,
see test_quantize_kernels_encode_like_ml_dtypes).

What is checked:
- every code of E4M3, E5M2, E8M0 (256 each) and BF16 (65,536) decodes to ml_dtypes' value,
  bit for bit (NaN codes to NaN: the same codes are NaN in both);
- a sweep of float32 values encodes to ml_dtypes' code: every FP8 value and its negation,
  the values half-way between adjacent codes and one FP32 ulp either side, half the smallest
  subnormal and around it, FP32 subnormals, +-0, the largest finite value, half a step above
  it and around that, 2·max, FLT_MAX, +-Inf, NaNs with several payloads, 2^20 random bit
  patterns and 2^18 random values spread over the format's exponent range.

Named differences (asserted exactly, and in docs/numerics.md, "Cross-checks against the field's
code"):
- SATFINITE. mxtrain saturates finite values to +-max; ml_dtypes' astype does not: E4M3 values
  of magnitude above 464 (half-way from 448 to the would-be next code) become NaN (0x7F/0xFF),
  E5M2 values of magnitude 61440 and above (half-way to 65536; the tie goes to the even code,
  0x7C) become +-Inf. So the encode check compares mxtrain with ml_dtypes on the clamped value
  (finite x clipped to [-max, max]; Inf and NaN unclamped), and separately asserts that the
  unclamped comparison differs on exactly those values and nowhere else.
- BF16 NAN PAYLOAD. f32_to_bf16 keeps a NaN's sign and top payload bits ((bits >> 16) |
  0x0040); ml_dtypes returns the canonical quiet NaN 0x7FC0 with the sign. Both are NaN of the
  same sign; every non-NaN input gives the same bits.
- E8M0 has no encode in mxtrain: a scale byte comes from a block's amax by the MX scale rule
  (ceil / floor of a log2, test_xcheck_mx.py checks it against torchao), never from rounding one
  value to nearest as ml_dtypes' astype(float8_e8m0fnu) does.

4-bit hook: when mxtrain has E2M1, add ("e2m1", ml_dtypes.float4_e2m1fn, ...) to FP8 below
(the sweep is generic in the format; test_e2m1_hook fails as soon as mxtrain.decode accepts
"e2m1", so the entry cannot be forgotten).

Run by CTest as python_test_xcheck_formats; exits 77 (skipped) without ml_dtypes unless
MXTRAIN_REQUIRE_CHECKS=1 (checks_env.py).
"""

import numpy as np

from checks_env import require

ml_dtypes = require("ml_dtypes")

import mxtrain

# name -> (ml_dtypes type, largest finite, unclamped ml_dtypes result differs from satfinite
# for finite |x| ...: (threshold, inclusive))
FP8 = {
    "e4m3": (ml_dtypes.float8_e4m3fn, 448.0, (464.0, False)),
    "e5m2": (ml_dtypes.float8_e5m2, 57344.0, (61440.0, True)),
}
F32 = np.float32
U32 = np.uint32


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def f32(bits):
    return np.asarray(bits, U32).view(F32)


def bits(x):
    return np.asarray(x, F32).view(U32)


def first_diff(a, b, x=None):
    i = np.flatnonzero(a != b)[:5]
    return ", ".join(f"x={x[j]!r} (0x{bits(x)[j]:08x}): mxtrain {a[j]} ml_dtypes {b[j]}"
                     if x is not None else f"#{j}: {a[j]} vs {b[j]}" for j in i)


def ulps_around(v):
    v = np.asarray(v, F32)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.concatenate([v, np.nextafter(v, F32(np.inf)), np.nextafter(v, F32(-np.inf))])


def fp8_sweep(ml_type, maxv, seed):
    """The sweep of the docstring for one format, float32, with negations."""
    codes = np.arange(256, dtype=np.uint8)
    vals = codes.view(ml_type).astype(F32)
    pos = np.unique(vals[np.isfinite(vals) & (vals >= 0)])  # 0, subnormals, normals, max
    mid = ((pos[:-1].astype(np.float64) + pos[1:]) / 2).astype(F32)  # exact: 5 bits
    assert np.all((mid.astype(np.float64) * 2) == pos[:-1].astype(np.float64) + pos[1:])
    step_top = pos[-1] - pos[-2]
    sub = pos[1]  # smallest subnormal
    fi = np.finfo(F32)
    special = [sub / 2, sub / 4, sub * 0.75, maxv + step_top / 2, maxv + step_top,
               maxv * 2, fi.max, fi.tiny, fi.tiny / 2, f32(1), f32(0x007FFFFF),
               2.0 ** -126, 1e-30, 1e-40]
    rng = np.random.default_rng(seed)
    randbits = f32(rng.integers(0, 2 ** 32, size=1 << 20, dtype=np.uint64).astype(U32))
    emin = int(np.floor(np.log2(sub)))
    emax = int(np.floor(np.log2(maxv)))
    e = rng.integers(emin - 3, emax + 3, size=1 << 18)
    m = rng.integers(0, 1 << 23, size=1 << 18)
    spread = f32(((e + 127) << 23 | m).astype(U32))
    x = np.concatenate([pos, ulps_around(mid), ulps_around(np.array(special, F32)),
                        randbits, spread]).astype(F32)
    x = np.concatenate([x, -x])
    nan = f32([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF])
    return np.concatenate([x, f32([0, 0x80000000]), np.array([np.inf, -np.inf], F32), nan])


def satfinite(x, maxv):
    return np.where(np.isfinite(x), np.clip(x, -maxv, maxv), x).astype(F32)


def test_decode_every_code():
    codes = np.arange(256, dtype=np.uint8)
    for name, ml_type in [("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2),
                          ("e8m0", ml_dtypes.float8_e8m0fnu)]:
        with np.errstate(invalid="ignore"):
            want = codes.view(ml_type).astype(F32)
        got = mxtrain.decode(codes, name)
        nan_w, nan_g = np.isnan(want), np.isnan(got)
        check(np.array_equal(nan_w, nan_g), f"{name}: NaN codes differ: mxtrain "
              f"{codes[nan_g].tolist()} ml_dtypes {codes[nan_w].tolist()}")
        check(np.array_equal(bits(got)[~nan_g], bits(want)[~nan_w]),
              f"{name}: decode differs: {first_diff(bits(got), bits(want))}")
        print(f"decode {name}: 256 codes equal ml_dtypes ({int(nan_g.sum())} NaN codes)")
    # BF16: all 65,536 patterns on every kernel path (bf16_to_f32_array is dispatched).
    c16 = np.arange(1 << 16, dtype=np.uint16)
    want = bits(c16.view(ml_dtypes.bfloat16).astype(F32))
    for isa in mxtrain.info()["supported_isas"]:
        mxtrain.set_isa(isa)
        try:
            got = bits(mxtrain.decode(c16, "bf16"))
        finally:
            mxtrain.set_isa(None)
        check(np.array_equal(got, want), f"bf16 decode, isa {isa}: {first_diff(got, want)}")
    print("decode bf16: 65536 codes equal ml_dtypes on every path")


def test_encode_sweep():
    for k, (name, (ml_type, maxv, (thr, incl))) in enumerate(FP8.items()):
        x = fp8_sweep(ml_type, maxv, seed=10 + k)
        got = mxtrain.encode(x, name)
        with np.errstate(invalid="ignore", over="ignore"):
            want = satfinite(x, maxv).astype(ml_type).view(np.uint8)
            raw = x.astype(ml_type).view(np.uint8)
        check(np.array_equal(got, want),
              f"{name} encode differs from ml_dtypes on the satfinite value: "
              f"{first_diff(got, want, x)}")
        # SATFINITE: the unclamped comparison differs exactly where ml_dtypes overflows.
        a = np.abs(x)
        expect = np.isfinite(x) & ((a >= thr) if incl else (a > thr))
        differs = got != raw
        check(np.array_equal(differs, expect),
              f"{name}: unclamped ml_dtypes differs from mxtrain on "
              f"{int(differs.sum())} values, expected exactly the {int(expect.sum())} finite "
              f"values with |x| {'>=' if incl else '>'} {thr}: "
              f"{first_diff(differs, expect, x)}")
        over = raw[expect]
        ovf = 0x7F if name == "e4m3" else 0x7C  # ml_dtypes: NaN (E4M3), Inf (E5M2)
        check(np.all((over & 0x7F) == ovf), f"{name}: ml_dtypes overflow codes {np.unique(over)}")
        check(np.all((got[expect] & 0x7F) == (0x7E if name == "e4m3" else 0x7B)),
              f"{name}: mxtrain does not saturate to max")
        print(f"encode {name}: {x.size} values equal ml_dtypes on the satfinite value; "
              f"{int(expect.sum())} overflow values (|x| {'>=' if incl else '>'} {thr:g}) "
              f"saturate in mxtrain, ml_dtypes gives {'NaN' if name == 'e4m3' else 'Inf'}")


def test_encode_bf16():
    rng = np.random.default_rng(3)
    every = f32(np.arange(1 << 16, dtype=U32) << 16)
    mid = f32((np.arange(1 << 16, dtype=U32) << 16) | 0x8000)  # half-way to the next
    x = np.concatenate([ulps_around(every), ulps_around(mid),
                        f32(rng.integers(0, 2 ** 32, size=1 << 20, dtype=np.uint64).astype(U32)),
                        f32(rng.integers(1, 1 << 23, size=4096).astype(U32))])  # subnormals
    x = np.concatenate([x, -x]).astype(F32)
    nan = np.isnan(x)
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    for isa in mxtrain.info()["supported_isas"]:
        mxtrain.set_isa(isa)
        try:
            got = mxtrain.encode(x, "bf16")
        finally:
            mxtrain.set_isa(None)
        check(np.array_equal(got[~nan], want[~nan]),
              f"bf16 encode, isa {isa}: {first_diff(got[~nan], want[~nan], x[~nan])}")
        # BF16 NAN PAYLOAD: both NaN of the same sign; mxtrain keeps the top payload bits.
        check(np.all((got[nan] & 0x7FFF) > 0x7F80) and np.all((want[nan] & 0x7FFF) > 0x7F80),
              "bf16: a NaN encoded to a non-NaN")
        check(np.array_equal(got[nan] >> 15, want[nan] >> 15), "bf16: NaN sign differs")
        check(np.array_equal(got[nan], ((bits(x[nan]) >> 16) | 0x40).astype(np.uint16)),
              "bf16: mxtrain's NaN is not (bits >> 16) | 0x0040")
        check(np.all((want[nan] & 0x7FFF) == 0x7FC0), "bf16: ml_dtypes' NaN is not 0x7FC0")
    print(f"encode bf16: {x.size} values ({int(nan.sum())} NaN: same sign, payload named) equal "
          f"ml_dtypes on every path {mxtrain.info()['supported_isas']}")


def test_quantize_kernels_encode_like_ml_dtypes():
    """The vectorised FP8 encoder (the "magic add" and 16-bit word paths inside the quantize
    kernels, docs/numerics.md "Kernel paths") against ml_dtypes: every block starts with an
    anchor element that makes its scale exactly 2^0, so each other code is the element's own
    FP8 encoding. rceil: anchor max (e = 0 for amax in (max/2, max]); floor: anchor the
    largest float below 2^(emax+1) (e = 0 for amax in [2^emax, 2^(emax+1))), so values in
    (max, 2^(emax+1)) pass through the kernels' satfinite clamp. Rows of K = 69 (two full
    blocks and a ragged one of 5) for the rowwise copies; the transposed matrix for the
    colwise copies; FP32 and BF16 inputs; every kernel path."""
    for k, (name, (ml_type, maxv, _)) in enumerate(FP8.items()):
        emax = int(np.floor(np.log2(maxv)))
        x = fp8_sweep(ml_type, maxv, seed=20 + k)
        x = x[np.isfinite(x)]
        for rounding, anchor in [("rceil", F32(maxv)),
                                 ("floor", np.nextafter(F32(2.0 ** (emax + 1)), F32(0)))]:
            v = x[np.abs(x) <= anchor]
            for src in ("f32", "bf16"):
                vals = v if src == "f32" else v.astype(ml_dtypes.bfloat16).astype(F32)
                vals = vals[np.abs(vals) <= anchor]
                K, slots = 69, [c for c in range(69) if c % 32 != 0]
                rows = -(-vals.size // len(slots))
                X = np.zeros((rows, K), F32)
                X[:, [0, 32, 64]] = anchor
                flat = np.zeros(rows * len(slots), F32)
                flat[:vals.size] = vals
                X[:, slots] = flat.reshape(rows, len(slots))
                want = satfinite(X, maxv).astype(ml_type).view(np.uint8)
                inputs = [(X, "rowwise"), (np.ascontiguousarray(X.T), "colwise")]
                for isa in mxtrain.info()["supported_isas"]:
                    mxtrain.set_isa(isa)
                    try:
                        for A, layout in inputs:
                            a = A if src == "f32" else (bits(A) >> 16).astype(np.uint16)
                            q = mxtrain.quantize(a, recipe="mxfp8", elem=name,
                                                 scale_rounding=rounding)
                            check(np.all(q[layout + "_scale"] == 127),
                                  f"{name} {rounding} {layout}: anchor did not give scale 2^0")
                            got = q[layout] if layout == "rowwise" else q[layout].T
                            check(np.array_equal(got, want),
                                  f"{name} {rounding} {src} {layout} isa {isa}: "
                                  f"{first_diff(got.ravel(), want.ravel(), X.ravel())}")
                    finally:
                        mxtrain.set_isa(None)
            print(f"quantize kernels, {name} {rounding}: {v.size} values through rowwise and "
                  f"colwise, FP32 and BF16 input, on {mxtrain.info()['supported_isas']} equal "
                  f"ml_dtypes (satfinite)")


def test_e2m1_hook():
    try:
        mxtrain.decode(np.zeros(1, np.uint8), "e2m1")
    except ValueError:
        return
    raise AssertionError("mxtrain now decodes e2m1: add it to FP8 in this test "
                         "(ml_dtypes.float4_e2m1fn) so its codes and rounding are cross-checked")


def main():
    test_decode_every_code()
    test_encode_sweep()
    test_encode_bf16()
    test_quantize_kernels_encode_like_ml_dtypes()
    test_e2m1_hook()
    print("test_xcheck_formats: all checks passed")


if __name__ == "__main__":
    main()
