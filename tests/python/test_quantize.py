"""tests/python/test_quantize.py — mxtrain.quantize / dequantize against the `mxtrain
quantize` / `mxtrain dequantize` programs, byte for byte, and against an independent decoder.

Matrix: shapes with ragged edges (1, 31, 33, 2^n ± 1), data with NaN / ±Inf blocks, FP32
subnormals, zero blocks, values at the E4M3 saturation edge (480 = 1.875·2^8) and near
FLT_MAX; both scale rules (rceil, floor); E4M3 and E5M2; mxfp8 (rowwise + colwise) and
mxfp8-32x32 (tiles). Also BF16 input (uint16 bits), every kernel path against the default,
and the round-trip error bound of docs/numerics.md. blockwise (FP32 scale_inv grids, 1x128 /
128x128 blocks): both roles, both elements, pow2 and fp32 scales, amax epsilons, against the
CLI's bytes, an independent NumPy statement of the scale rule and dequantize, BF16 input and
every kernel path. Run by CTest as python_test_quantize.
"""

import os
import sys
import tempfile

import numpy as np

import mxtrain
from mx_ref import TABLES, decode, expand_scales, run_cli

SHAPES = [(1, 1), (1, 31), (31, 33), (33, 1), (32, 32), (63, 65), (65, 129), (129, 255),
          (257, 31)]
RECIPES = {"mxfp8": [("rowwise", "rowwise_scale", "rowwise"),
                     ("colwise", "colwise_scale", "colwise")],
           "mxfp8-32x32": [("data", "scale", "tile")]}
FLT_MAX = np.finfo(np.float32).max


def awkward(shape, seed):
    """Normal data with per-row magnitudes over 2^-20..2^20 and special values sprinkled in."""
    rng = np.random.default_rng(seed)
    M, K = shape
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-20, 21, size=(M, 1)))
    x = x.astype(np.float32)
    specials = [np.nan, np.inf, -np.inf, 480.0, -480.0, 1e-40, -1e-42, FLT_MAX, -0.0, 0.0,
                2.0 ** -126, 448.0, 57344.0, 61440.0]
    n = max(1, M * K // 40)
    idx = rng.integers(0, M * K, size=n)
    x.reshape(-1)[idx] = rng.choice(np.array(specials, np.float32), size=n)
    if M * K >= 64:  # one all-subnormal and one all-zero stretch
        x.reshape(-1)[:32] = rng.choice(np.array([1e-39, -3e-41, 1.4e-45], np.float32), 32)
        x.reshape(-1)[-32:] = 0.0
    return x


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def same_bytes(a, b, what):
    check(a.dtype == b.dtype and a.shape == b.shape,
          f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
    check(a.tobytes() == b.tobytes(), f"{what}: bytes differ at "
          f"{np.argwhere(a.view(np.uint8).reshape(a.shape[0], -1) != b.view(np.uint8).reshape(b.shape[0], -1))[:5].tolist()}")


def test_matches_cli(tmp):
    runs = 0
    for si, shape in enumerate(SHAPES):
        x = awkward(shape, si)
        xin = os.path.join(tmp, f"x{si}.npy")
        np.save(xin, x)
        for recipe, copies in RECIPES.items():
            for elem in ("e4m3", "e5m2"):
                for rounding in ("rceil", "floor"):
                    out = os.path.join(tmp, f"q{si}_{recipe}_{elem}_{rounding}")
                    run_cli("quantize", "--input", xin, "--recipe", recipe, "--elem", elem,
                            "--scale-rounding", rounding, "--out-dir", out)
                    q = mxtrain.quantize(x, recipe=recipe, elem=elem, scale_rounding=rounding)
                    files = sorted(f[:-4] for f in os.listdir(out) if f.endswith(".npy"))
                    check(sorted(q) == files, f"keys {sorted(q)} vs CLI files {files}")
                    what = f"{shape} {recipe} {elem} {rounding}"
                    for name in files:
                        same_bytes(q[name], np.load(os.path.join(out, name + ".npy")),
                                   f"{what} {name}")
                    # dequantize: CLI output (first copy) and the independent decoder (all).
                    yout = out + ".y.npy"
                    run_cli("dequantize", "--in-dir", out, "--recipe", recipe, "--output", yout)
                    first = copies[0][2]
                    same_bytes(mxtrain.dequantize(q, recipe=recipe, elem=elem, layout=first),
                               np.load(yout), f"{what} dequantize vs CLI")
                    for data, scale, layout in copies:
                        y = mxtrain.dequantize(q, recipe=recipe, elem=elem, layout=layout)
                        ref = decode(q[data], q[scale], elem, layout)
                        nan = np.isnan(ref)
                        check(np.array_equal(np.isnan(y), nan), f"{what} {layout}: NaN places")
                        with np.errstate(over="ignore"):  # 256·2^120 = 2^128 -> Inf, as documented
                            ref32 = ref[~nan].astype(np.float32)
                        check(np.array_equal(y[~nan], ref32),
                              f"{what} {layout}: dequantize differs from the decoder")
                        check(np.all(y[nan].view(np.uint32) == 0x7FC00000),
                              f"{what} {layout}: NaN is not the canonical 0x7FC00000")
                    runs += 1
    check(runs == len(SHAPES) * 2 * 2 * 2, "not every case ran")
    # The matrix really contains what it claims.
    x = awkward((129, 255), 7)
    q = mxtrain.quantize(x)
    check((q["rowwise_scale"] == 0xFF).any(), "no NaN/Inf block in the test data")
    check((q["rowwise_scale"] == 0x00).any(), "no zero/subnormal block in the test data")
    qf = mxtrain.quantize(x, scale_rounding="floor")
    check((qf["rowwise"] & 0x7F == 0x7E).any(), "no saturated E4M3 element under floor")
    print(f"cli byte equality: {runs} cases")


def test_bf16_input():
    for si, shape in enumerate(SHAPES):
        x = awkward(shape, 100 + si)
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncation: some BF16 values
        xf = (bits.astype(np.uint32) << 16).view(np.float32)  # ... exactly as FP32
        for recipe in RECIPES:
            for elem in ("e4m3", "e5m2"):
                qb = mxtrain.quantize(bits, recipe=recipe, elem=elem)
                qf = mxtrain.quantize(xf, recipe=recipe, elem=elem)
                for k in qf:
                    same_bytes(qb[k], qf[k], f"bf16 input {shape} {recipe} {elem} {k}")


def test_every_isa_same_bytes():
    isas = mxtrain.info()["supported_isas"]
    x = awkward((129, 255), 3)
    ref = {}
    try:
        for isa in isas:
            mxtrain.set_isa(isa)
            check(mxtrain.active_isa() == isa, f"set_isa({isa}) did not take")
            for recipe in RECIPES:
                for rounding in ("rceil", "floor"):
                    q = mxtrain.quantize(x, recipe=recipe, scale_rounding=rounding)
                    for k, v in q.items():
                        key = (recipe, rounding, k)
                        if key in ref:
                            same_bytes(v, ref[key], f"isa {isa} {key}")
                        else:
                            ref[key] = v
    finally:
        mxtrain.set_isa(None)
    print(f"kernel paths compared: {isas}")


def test_round_trip():
    rng = np.random.default_rng(11)
    # Error bound of docs/numerics.md (rceil never saturates): per element at most 2^-(m+1)
    # relative in the normal range, half the smallest FP8 subnormal · 2^e below it.
    for elem, mbits, sub in (("e4m3", 3, 2.0 ** -9), ("e5m2", 2, 2.0 ** -16)):
        x = (rng.standard_normal((97, 161)) * np.exp2(rng.integers(-30, 30, (97, 1))))
        x = x.astype(np.float32)
        for recipe, copies in RECIPES.items():
            q = mxtrain.quantize(x, recipe=recipe, elem=elem)
            for data, scale, layout in copies:
                y = mxtrain.dequantize(q, recipe=recipe, elem=elem, layout=layout)
                e = np.exp2(expand_scales(q[scale], 97, 161, layout).astype(np.float64) - 127)
                bound = np.maximum(np.abs(x) * 2.0 ** -(mbits + 1), sub / 2 * e)
                err = np.abs(y.astype(np.float64) - x)
                check(np.all(err <= bound), f"round trip {elem} {recipe} {layout}: "
                      f"worst excess {np.max(err - bound):g}")
    # Exact: every 1x32 block (rowwise) or tile holds ±448·2^e and E4M3 values times 2^e.
    codes = rng.integers(0, 0x7F, size=(40, 70)).astype(np.uint8)  # finite, non-negative
    sign = np.where(rng.random((40, 70)) < 0.5, -1.0, 1.0)
    vals = sign * decode(codes, np.full((40, 3), 127, np.uint8), "e4m3", "rowwise")
    vals[:, ::32] = 448.0
    vals[::32, :] = 448.0
    ex = np.exp2(rng.integers(-100, 100, size=(40, 1))).astype(np.float64)
    x = (vals * ex).astype(np.float32)
    y = mxtrain.dequantize(mxtrain.quantize(x), layout="rowwise")
    check(np.array_equal(y, x), "rowwise round trip of exactly representable data is not exact")
    x = vals.astype(np.float32) * np.float32(2.0 ** -50)
    y = mxtrain.dequantize(mxtrain.quantize(x, recipe="mxfp8-32x32"), recipe="mxfp8-32x32")
    check(np.array_equal(y, x), "tile round trip of exactly representable data is not exact")


BLOCK_FILES = {"input": [("rowwise", "rowwise_scale_inv", "rowwise"),
                         ("colwise", "colwise_scale_inv", "colwise")],
               "weight": [("data", "scale_inv", "tile")]}
MAX_ELEM = {"e4m3": 448.0, "e5m2": 57344.0}


def block_scale_inv(x, layout, elem, pow2, eps):
    """The scale rule of docs/numerics.md "Blockwise FP32 scaling" in NumPy: scale_inv grid."""
    M, K = x.shape
    a = np.abs(x.astype(np.float32))
    a = np.where(np.isnan(a), np.float32(0), a)  # NaN ignored by the amax
    rb = 1 if layout == "rowwise" else 128
    cb = 1 if layout == "colwise" else 128
    R, C = -(-M // rb), -(-K // cb)
    amax = np.zeros((R, C), np.float32)
    for i in range(R):
        for j in range(C):
            amax[i, j] = a[i * rb:(i + 1) * rb, j * cb:(j + 1) * cb].max()
    amax = np.maximum(amax, np.float32(eps))  # amax < eps -> eps
    with np.errstate(divide="ignore", over="ignore"):
        scale = np.float32(MAX_ELEM[elem]) / amax
    scale = np.where(np.isinf(scale), np.finfo(np.float32).max, scale).astype(np.float32)
    scale = np.where((amax == 0) | np.isinf(amax), np.float32(1), scale).astype(np.float32)
    if pow2:
        scale = (scale.view(np.uint32) & np.uint32(0xFF800000)).view(np.float32)
    return (np.float32(1) / scale).astype(np.float32)


def test_blockwise(tmp):
    runs = 0
    shapes = [(1, 1), (31, 129), (129, 127), (130, 257)]
    for si, shape in enumerate(shapes):
        x = awkward(shape, 200 + si)
        xin = os.path.join(tmp, f"bx{si}.npy")
        np.save(xin, x)
        for role, copies in BLOCK_FILES.items():
            for elem in ("e4m3", "e5m2"):
                for fp32 in (False, True):
                    for eps in (None, 1e-3):
                        out = os.path.join(tmp, f"b{si}_{role}_{elem}_{fp32}_{eps}")
                        args = ["--role", role, "--elem", elem, "--out-dir", out]
                        args += ["--fp32-scales"] if fp32 else []
                        args += ["--amax-epsilon", str(eps)] if eps is not None else []
                        run_cli("quantize", "--input", xin, "--recipe", "blockwise", *args)
                        q = mxtrain.quantize(x, recipe="blockwise", role=role, elem=elem,
                                             amax_epsilon=eps, fp32_scales=fp32)
                        files = sorted(f[:-4] for f in os.listdir(out) if f.endswith(".npy"))
                        check(sorted(q) == files, f"keys {sorted(q)} vs CLI files {files}")
                        what = f"blockwise {shape} {role} {elem} fp32={fp32} eps={eps}"
                        for name in files:
                            same_bytes(q[name], np.load(os.path.join(out, name + ".npy")),
                                       f"{what} {name}")
                        yout = out + ".y.npy"
                        run_cli("dequantize", "--in-dir", out, "--recipe", "blockwise",
                                "--output", yout)
                        first = copies[0][2]
                        same_bytes(mxtrain.dequantize(q, recipe="blockwise", elem=elem),
                                   np.load(yout), f"{what} dequantize")
                        for data, scale, layout in copies:
                            want = block_scale_inv(x, layout, elem, not fp32, eps or 0.0)
                            same_bytes(q[scale], want, f"{what} {scale} vs the NumPy rule")
                            # dequantize = code value * scale_inv in FP32
                            full = np.repeat(np.repeat(want, 1 if layout == "rowwise" else 128,
                                                       axis=0)[:shape[0]],
                                             1 if layout == "colwise" else 128,
                                             axis=1)[:, :shape[1]]
                            vals = TABLES[elem][q[data]]  # code values (float64, exact)
                            y = (vals.astype(np.float32) * full).astype(np.float32)
                            got = mxtrain.dequantize(q, recipe="blockwise", elem=elem,
                                                     layout=layout)
                            check(np.array_equal(np.isnan(got), np.isnan(y)), f"{what} NaN")
                            ok = ~np.isnan(y)
                            same_bytes(got[ok], y[ok], f"{what} dequantize {layout}")
                        runs += 1
    # BF16 input gives the bytes of its FP32 value; every kernel path the same bytes.
    x = awkward((129, 255), 7)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    xf = (bits.astype(np.uint32) << 16).view(np.float32)
    for role in BLOCK_FILES:
        qb = mxtrain.quantize(bits, recipe="blockwise", role=role)
        qf = mxtrain.quantize(xf, recipe="blockwise", role=role)
        for k in qf:
            same_bytes(qb[k], qf[k], f"blockwise bf16 input {role} {k}")
    ref = {}
    try:
        for isa in mxtrain.info()["supported_isas"]:
            mxtrain.set_isa(isa)
            for role in BLOCK_FILES:
                for k, v in mxtrain.quantize(x, recipe="blockwise", role=role).items():
                    if (role, k) in ref:
                        same_bytes(v, ref[(role, k)], f"blockwise isa {isa} {role} {k}")
                    else:
                        ref[(role, k)] = v
    finally:
        mxtrain.set_isa(None)
    # The options' errors are those of the CLI, as ValueError.
    for kwargs, frag in [({"role": "bias"}, "unknown role 'bias'"),
                         ({"amax_epsilon": -1.0}, "must be a finite number >= 0"),
                         ({"amax_epsilon": float("nan")}, "must be a finite number >= 0"),
                         ({"scale_rounding": "floor"}, "applies to MX recipes")]:
        try:
            mxtrain.quantize(x, recipe="blockwise", **kwargs)
            raise AssertionError(f"{kwargs}: no error")
        except ValueError as e:
            check(frag in str(e), f"{kwargs}: {e}")
    for kwargs in ({"fp32_scales": True}, {"amax_epsilon": 0.0}, {"role": "input"}):
        try:
            mxtrain.quantize(x, recipe="mxfp8", **kwargs)
            raise AssertionError(f"mxfp8 {kwargs}: no error")
        except ValueError as e:
            check("applies to FP32-scaled recipes (blockwise)" in str(e), f"{kwargs}: {e}")
    # matmul and the Linear layer keep no amax history: delayed scaling is refused at once.
    for what, f in (("matmul", lambda: mxtrain.matmul(x[:, :4].copy(), x[:4, :4].copy(),
                                                       recipe="fp8-delayed")),
                    ("the Python Linear", lambda: mxtrain.Linear(4, 4, recipe="fp8-delayed"))):
        try:
            f()
            raise AssertionError("fp8-delayed product ran")
        except ValueError as e:
            check(str(e).startswith("fp8-delayed takes its scales from amax histories, which a "
                                    "training run keeps and updates after every optimizer "
                                    f"step; {what} keeps none"), str(e))
    print(f"blockwise cli byte equality: {runs} cases")


def test_fp8_current(tmp):
    # Hand-computed: amax 5 -> scale 448/5 = 89.6 (FP32, not a power of two), scale_inv
    # 0x3C36DB6E; 5 -> 0x7E, 1 -> 88 (0x6B), -2.5 -> 0xF6, 0 -> 0.
    q = mxtrain.quantize(np.array([[5, 1], [-2.5, 0]], np.float32), recipe="fp8-current")
    check(sorted(q) == ["data", "scale_inv"], f"keys {sorted(q)}")
    check(q["data"].tobytes() == bytes([0x7E, 0x6B, 0xF6, 0x00]), q["data"].tobytes().hex())
    check(q["scale_inv"].dtype == np.float32 and q["scale_inv"].shape == (1,),
          f"scale_inv {q['scale_inv'].dtype} {q['scale_inv'].shape}")
    check(q["scale_inv"].tobytes() == bytes([0x6E, 0xDB, 0x36, 0x3C]), q["scale_inv"].tobytes().hex())
    # The CLI writes the same bytes; both dequantize to the same values.
    for si, shape in enumerate([(1, 1), (31, 129), (130, 257)]):
        x = awkward(shape, 300 + si)
        xin = os.path.join(tmp, f"tx{si}.npy")
        np.save(xin, x)
        for role, elem, eps in (("input", "e4m3", None), ("weight", "e5m2", 1e-3)):
            out = os.path.join(tmp, f"t{si}_{role}")
            args = ["--role", role, "--elem", elem, "--out-dir", out]
            args += ["--amax-epsilon", str(eps)] if eps is not None else []
            run_cli("quantize", "--input", xin, "--recipe", "fp8-current", *args)
            q = mxtrain.quantize(x, recipe="fp8-current", role=role, elem=elem, amax_epsilon=eps)
            what = f"fp8-current {shape} {role}"
            for name in ("data", "scale_inv"):
                same_bytes(q[name], np.load(os.path.join(out, name + ".npy")), f"{what} {name}")
            run_cli("dequantize", "--in-dir", out, "--recipe", "fp8-current", "--output",
                    out + ".y.npy")
            same_bytes(mxtrain.dequantize(q, recipe="fp8-current", elem=elem),
                       np.load(out + ".y.npy"), f"{what} dequantize")
    for kwargs, msg in (({"recipe": "fp8-delayed"}, "delayed scaling needs an amax history"),
                        ({"recipe": "fp8-current", "fp32_scales": True}, "FP32 scales already")):
        try:
            mxtrain.quantize(np.ones((2, 2), np.float32), **kwargs)
            raise AssertionError(f"{kwargs} was not refused")
        except ValueError as e:
            check(msg in str(e), f"{kwargs}: {e}")
    print("fp8-current: hand-computed bytes, cli byte equality")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="mxt_py_quantize_") as tmp:
        test_matches_cli(tmp)
        test_blockwise(tmp)
        test_fp8_current(tmp)
    test_bf16_input()
    test_every_isa_same_bytes()
    test_round_trip()
    print("test_quantize: all passed")
