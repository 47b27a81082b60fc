"""tests/python/test_xcheck_mx.py — mxtrain's MX quantizer against torchao's (0.18).

Reference function: torchao.prototype.mx_formats.mx_tensor.to_mx(data_hp, elem_dtype,
block_size=32, scaling_mode) — the eager PyTorch quantizer behind ScaledTensor.to_mx and torchao's
emulated MX training (KernelPreference.EMULATED) — with elem_dtype torch.float8_e4m3fn /
torch.float8_e5m2 and scaling_mode config.ScaleCalculationMode.RCEIL / FLOOR, matched to
mxtrain's scale rules `rceil` / `floor`. It returns (scale as float8_e8m0fnu, data as the
element dtype); both are compared as bytes with `mxtrain.quantize(x, recipe="mxfp8", elem,
scale_rounding)` (the engine's quantize_dual):
- rowwise (1x32 along K): to_mx(x) against the `rowwise` / `rowwise_scale` copies;
- colwise (32x1 along M): to_mx(x.T.contiguous()) transposed back against `colwise` /
  `colwise_scale`;
on every kernel path (mxtrain.set_isa over info()["supported_isas"]: scalar, avx2, avx512,
avx512vbmi as the CPU has them), for FP32 and BF16 inputs, E4M3 and E5M2, rceil and floor, on
random data spread over 2^-40..2^40, all-zero blocks (with -0), FP32 subnormals, tiny blocks
(scale byte 0), huge values (up to FLT_MAX), NaN/Inf-bearing blocks, the scale boundaries
(amax at and one ulp around max_elem·2^j and 2^k for j, k over the whole range) and the floor
rule's saturation (amax 480·2^k), and on ragged shapes.

Ragged edges: to_mx refuses a last dimension that is not a multiple of 32 (it raises
AssertionError "... must be divisible by block_size 32"; asserted). mxtrain quantizes the
partial block over its valid elements. The test compares the full blocks with to_mx of the
full-block part, and the partial block with to_mx of the tensor padded with +0 to a multiple
of 32: zeros do not change a block's amax, so mxtrain's partial block equals torchao's padded
block on the valid elements, byte for byte (scale included).

Every block is byte-equal except in these named cases, where the test predicts torchao's
bytes from the input alone and asserts them exactly (docs/numerics.md, "Cross-checks against
the field's code"):
- NEG_ZERO: a block of zeros holding -0. mxtrain writes 0x00 for every element (the sign of
  -0 is dropped); torchao keeps the sign (0x80). Scales equal (0x00). Same values.
- SCALE_BYTE_0: a nonzero block whose scale byte is 0 (2^-127: amax below about 2^-118).
  mxtrain stores fp8(x·2^127). torchao RCEIL multiplies by 1 instead (as TransformerEngine's
  exp2f_rcp(0) does), so the codes are fp8(x) (zeros, as |x| < 2^-118); torchao FLOOR divides
  by FLT_MIN = 2^-126 (its scale is clamped to the smallest normal), so the codes are
  fp8(x·2^126), one binade below mxtrain's. Scales equal (0x00).
- RCEIL_LOG2: torchao RCEIL computes the exponent as ceil(torch.log2(fl32(amax/max_elem)))
  in FP32. When the quotient is just above a power of two 2^j, FP32 log2 rounds to exactly j
  (for |j| large enough), or the quotient itself rounds down to 2^-127 in FP32's subnormal
  range, so torchao's scale byte is one below ceil(log2(amax/max_elem)) — mxtrain's, which
  takes the exponent from the bits of amax as TransformerEngine's float_to_e8m0 does — and
  torchao's largest element saturates to max_elem. Codes: fp8(satfinite(x / 2^e_torchao)).
- NAN_BLOCK (a NaN among the block's elements): scales equal (0xFF). mxtrain writes the
  canonical NaN code for every element; torchao RCEIL writes x·NaN (a NaN code, sign and, for
  E5M2, the code 0x7F/0xFF instead of 0x7E vary), FLOOR x / 2^128 (NaN for NaN and Inf
  elements, +-0 for finite ones). Every element decodes to NaN in both (the scale is NaN).
- INF_BLOCK (+-Inf but no NaN): mxtrain: scale 0xFF, every element NaN. torchao RCEIL: scale
  0xFE (2^127) and codes fp8(satfinite(x·2^-127)), as TransformerEngine does; FLOOR: scale
  from the exponent bits of Inf, 255 − emax_elem (247 E4M3, 240 E5M2), codes
  fp8(satfinite(x / 2^(128 − emax_elem))). torchao's Inf elements become ±max_elem codes.

TransformerEngine (the rule to follow where torchao differs from it) runs on CUDA only; its
MXFP8 scale rule is transcribed from its source (te_rceil_byte: float_to_e8m0 of amax ·
fl32(1/max_elem)) and mxtrain's rceil scale bytes are checked against it on every block with a
finite amax: equal except TE_SUBNORMAL_PRODUCT (amax just above max_elem·2^-127: TE's FP32
product rounds down to 2^-127 and gives byte 0, mxtrain's exact ceil 1). Where TE agrees with
torchao against mxtrain — SCALE_BYTE_0 under rceil (TE's exp2f_rcp(0) = 1), INF_BLOCK under rceil
(TE's float_to_e8m0(Inf) = 0xFE), NEG_ZERO, TE_SUBNORMAL_PRODUCT — docs/numerics.md says so.

Run by CTest as python_test_xcheck_mx; exits 77 (skipped) without torch / torchao unless
MXTRAIN_REQUIRE_CHECKS=1 (checks_env.py).
"""

import warnings

import numpy as np

from checks_env import require

torch, _ = require("torch", "torchao")
warnings.filterwarnings("ignore", message=".*Enum subclass.*")
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402
from torchao.prototype.mx_formats.mx_tensor import to_mx  # noqa: E402

import mxtrain  # noqa: E402

F32, U32 = np.float32, np.uint32
FLT_MAX = np.finfo(F32).max
ELEMS = {"e4m3": (torch.float8_e4m3fn, 448.0, 8), "e5m2": (torch.float8_e5m2, 57344.0, 15)}
MODES = {"rceil": ScaleCalculationMode.RCEIL, "floor": ScaleCalculationMode.FLOOR}
CASES = ("NEG_ZERO", "SCALE_BYTE_0", "RCEIL_LOG2", "NAN_BLOCK", "INF_BLOCK")


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


# ---- torchao ----------------------------------------------------------------------------

def torchao_q(x, elem, mode, bf16):
    """to_mx of x [R, K] (K a multiple of 32), as (codes uint8 [R, K], scales uint8 [R, K/32])."""
    t = torch.from_numpy(x)
    if bf16:
        t = t.to(torch.bfloat16)  # exact: x holds BF16 values
    s, d = to_mx(t, ELEMS[elem][0], 32, MODES[mode])
    return d.view(torch.uint8).numpy().copy(), s.view(torch.uint8).numpy().copy()


# ---- the named cases: torchao's bytes predicted from the input ---------------------------

def enc(v, elem):
    """fp8(satfinite(v)) by mxtrain's scalar encoder (checked against ml_dtypes in
    test_xcheck_formats.py); Inf clamps to max as torch.clamp does before torchao's cast."""
    maxv = ELEMS[elem][1]
    v = np.asarray(v, F32)
    return mxtrain.encode(np.ascontiguousarray(np.where(np.isnan(v), v, np.clip(v, -maxv, maxv)),
                                               dtype=F32), elem)


def fp8_nan(c, elem):
    return (c & 0x7F) == 0x7F if elem == "e4m3" else (c & 0x7F) > 0x7C


def torch_rceil_exponents(x, elem):
    """ceil(log2(fl32(amax / max_elem))) clamped to [-127, 127] for every block of x [R, K]
    (K a multiple of 32), computed by the torch operations torchao's RCEIL runs, on a tensor
    of the same shape (so that the same vectorised torch.log2 kernel rounds it)."""
    R, K = x.shape
    amax = torch.amax(torch.abs(torch.from_numpy(x).reshape(R, K // 32, 32)), -1).unsqueeze(-1)
    e = torch.clamp(torch.ceil(torch.log2(amax / ELEMS[elem][1])), min=-127, max=127)
    return e.squeeze(-1).numpy()


def predict(xb, s_mx, elem, mode, e_torch):
    """torchao's (case, scale byte, codes, NaN-only mask) for one block xb [32] (float32), or
    None where it must equal mxtrain's bytes. s_mx is mxtrain's scale byte for the block,
    e_torch its torch_rceil_exponents entry."""
    maxv, emax = ELEMS[elem][1], ELEMS[elem][2]
    nan, inf = np.isnan(xb), np.isinf(xb)
    with np.errstate(over="ignore", invalid="ignore"):
        if nan.any():
            if mode == "rceil":
                return "NAN_BLOCK", 255, None, np.ones(32, bool)
            mask = nan | inf
            return "NAN_BLOCK", 255, enc(np.where(mask, 0, xb / F32(np.inf)), elem), mask
        if inf.any():
            if mode == "rceil":
                return "INF_BLOCK", 254, enc(xb * F32(2.0 ** -127), elem), None
            return "INF_BLOCK", 255 - emax, enc(xb / F32(2.0 ** (128 - emax)), elem), None
    amax = F32(np.max(np.abs(xb)))
    if amax == 0:
        if np.signbit(xb).any():
            return "NEG_ZERO", 0, np.where(np.signbit(xb), 0x80, 0).astype(np.uint8), None
        return None
    if mode == "rceil":
        e = int(e_torch)
        b = e + 127
        codes = enc(xb if b == 0 else xb * F32(2.0 ** -e), elem)  # byte 0: x·1
        if b != s_mx:
            return "RCEIL_LOG2", b, codes, None
        if b == 0:
            return "SCALE_BYTE_0", 0, codes, None
        return None
    if s_mx == 0:
        return "SCALE_BYTE_0", 0, enc(xb * F32(2.0 ** 126), elem), None  # x / FLT_MIN
    return None


def te_rceil_byte(amax, maxv):
    """TransformerEngine's MXFP8 scale byte for finite amax >= 0, transcribed from its source
    (transformer_engine/common/util/ptx.cuh, float_to_e8m0, called as
    float_to_e8m0(block_amax * Quantized_Limits<OType>::max_norm_rcp)): the FP32 product
    amax · fl32(1/max_elem), its exponent field rounded up when the mantissa is nonzero (0xFE
    kept: satfinite), and for an FP32-subnormal product 1 only above 2^-127. TE runs on CUDA
    only, so this transcription stands in for it."""
    with np.errstate(over="ignore"):
        v = (amax.astype(F32) * (F32(1) / F32(maxv))).astype(F32)
    u = v.view(U32)
    e, m = (u >> 23) & 0xFF, u & 0x7FFFFF
    up = (m > 0) & (e != 0xFE) & ~((e == 0) & (m <= 0x400000))
    return np.where(v == 0, 0, e + up).astype(np.int64), v


def check_te_rule(x, s_mx, elem, what, counts):
    """mxtrain's rceil scale bytes against TransformerEngine's rule on every block with a
    finite amax. One named case: TE_SUBNORMAL_PRODUCT — amax just above max_elem·2^-127,
    where TE's product rounds down to 2^-127 in FP32's subnormal range (TE byte 0, mxtrain's
    exact ceil gives 1)."""
    R, K = x.shape
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(x.reshape(R, K // 32, 32)), axis=2)
    fin = np.isfinite(amax)
    te, v = te_rceil_byte(np.where(fin, amax, 0), ELEMS[elem][1])
    diff = fin & (te != s_mx)
    named = diff & (v < F32(2.0 ** -126)) & (te == 0) & (s_mx == 1)
    check(np.array_equal(diff, named), f"{what}: mxtrain's rceil scale differs from "
          f"TransformerEngine's rule outside TE_SUBNORMAL_PRODUCT: amax "
          f"{amax[diff & ~named][:4].tolist()}, mxtrain {s_mx[diff & ~named][:4].tolist()}, "
          f"TE {te[diff & ~named][:4].tolist()}")
    counts["TE_SUBNORMAL_PRODUCT"] = counts.get("TE_SUBNORMAL_PRODUCT", 0) + int(named.sum())
    counts["TE rule equal"] = counts.get("TE rule equal", 0) + int((fin & ~diff).sum())


def compare_blocks(x, d_mx, s_mx, d_ta, s_ta, elem, mode, what, counts, valid):
    """x, d_* [R, K] and s_* [R, K/32] in torchao's rowwise orientation; K a multiple of 32,
    columns from `valid` on are padding (d_mx holds torchao's codes there)."""
    R, K = x.shape
    nb = K // 32
    xs, dm, dt = (a.reshape(R, nb, 32) for a in (x, d_mx, d_ta))
    same_s = s_mx == s_ta
    same_d = np.all(dm == dt, axis=2)
    with np.errstate(invalid="ignore"):
        e_torch = torch_rceil_exponents(x, elem) if mode == "rceil" else np.zeros((R, nb))
    if mode == "floor":  # the floor rule's saturation agrees: count the blocks that show it
        with np.errstate(invalid="ignore", over="ignore"):
            amax = np.max(np.abs(xs), axis=2)
            e = s_mx.astype(np.float64) - 127
            sat = ((s_mx > 0) & (s_mx < 255) & np.isfinite(amax) &
                   (amax * np.exp2(-e) > ELEMS[elem][1]))
        check(np.all(same_s[sat] & same_d[sat]), f"{what}: a saturating floor block differs")
        key = "floor saturation (equal)"
        counts[key] = counts.get(key, 0) + int(sat.sum())
    for r, j in zip(*np.nonzero(~(same_s & same_d) | ~np.isfinite(xs).all(axis=2)
                                | (np.abs(xs).max(axis=2) < 2.0 ** -100))):
        p = predict(xs[r, j], s_mx[r, j], elem, mode, e_torch[r, j])
        where = f"{what}: block ({r}, {j}), x[:4] {xs[r, j][:4].tolist()}"
        if p is None:
            check(same_s[r, j] and same_d[r, j],
                  f"{where}: differs outside the named cases: scale mxtrain {s_mx[r, j]} "
                  f"torchao {s_ta[r, j]}, codes mxtrain {dm[r, j][:6]} torchao {dt[r, j][:6]}")
            continue
        case, sb, codes, nan_only = p
        counts[case] = counts.get(case, 0) + 1
        check(s_ta[r, j] == sb, f"{where}: {case}: torchao scale {s_ta[r, j]}, predicted {sb}")
        m = np.zeros(32, bool) if nan_only is None else nan_only
        check(np.all(fp8_nan(dt[r, j][m], elem)), f"{where}: {case}: torchao codes "
              f"{dt[r, j][m][:6]} where NaN was predicted")
        if codes is not None:
            check(np.array_equal(dt[r, j][~m], codes[~m]),
                  f"{where}: {case}: torchao codes {dt[r, j][~m][:6]}, predicted {codes[~m][:6]}")
        # mxtrain's side of the case, as docs/numerics.md states it (valid elements only).
        v = (j * 32 + np.arange(32)) < valid
        dm_v = dm[r, j][v]
        if case in ("NAN_BLOCK", "INF_BLOCK"):
            check(s_mx[r, j] == 255 and np.all(dm_v == (0x7F if elem == "e4m3" else 0x7E)),
                  f"{where}: {case}: mxtrain is not scale 0xFF with canonical NaN codes")
        elif case == "NEG_ZERO":
            check(s_mx[r, j] == 0 and np.all(dm_v == 0), f"{where}: mxtrain -0 block")
        elif case == "SCALE_BYTE_0":
            check(s_mx[r, j] == 0 and np.array_equal(dm_v, enc(xs[r, j] * F32(2.0 ** 127),
                                                               elem)[v]),
                  f"{where}: mxtrain's byte-0 block is not fp8(x·2^127)")
        elif case == "RCEIL_LOG2":
            check(s_mx[r, j] == s_ta[r, j] + 1, f"{where}: RCEIL_LOG2 scale mxtrain "
                  f"{s_mx[r, j]} torchao {s_ta[r, j]}")


# ---- mxtrain ----------------------------------------------------------------------------

def mxtrain_q(x, elem, mode, bf16):
    a = (x.view(U32) >> 16).astype(np.uint16) if bf16 else x
    return mxtrain.quantize(a, recipe="mxfp8", elem=elem, scale_rounding=mode)


def pad32(a):
    K = a.shape[1]
    Kp = -(-K // 32) * 32
    if Kp == K:
        return a
    out = np.zeros((a.shape[0], Kp), a.dtype)
    out[:, :K] = a
    return out


def compare(x, elem, mode, bf16, name, counts, te_counts):
    """mxtrain (every path) against torchao for x [M, K] (float32 holding BF16 values when
    bf16), rowwise and colwise."""
    M, K = x.shape
    # torchao's rowwise orientation for each of mxtrain's copies: (rows to quantize, how to
    # bring mxtrain's copy into that orientation).
    views = {"rowwise": (x, lambda d: d, lambda s: s),
             "colwise": (np.ascontiguousarray(x.T), lambda d: d.T, lambda s: s.T)}
    ref = {}
    for layout, (xr, _, _) in views.items():
        full = (xr.shape[1] // 32) * 32
        if full != xr.shape[1]:
            try:
                torchao_q(np.ascontiguousarray(xr), elem, mode, bf16)
            except AssertionError as e:
                check("must be divisible by block_size 32" in str(e), f"to_mx's refusal: {e}")
            else:
                raise AssertionError("to_mx accepted a ragged last dimension: compare the "
                                     "partial block directly")
        ref[layout] = torchao_q(np.ascontiguousarray(pad32(xr)), elem, mode, bf16)
    isa_bytes = None
    for isa in mxtrain.info()["supported_isas"]:
        mxtrain.set_isa(isa)
        try:
            q = mxtrain_q(x, elem, mode, bf16)
        finally:
            mxtrain.set_isa(None)
        got = tuple(q[k].tobytes() for k in ("rowwise", "rowwise_scale", "colwise",
                                             "colwise_scale"))
        if isa_bytes is not None:  # one comparison with torchao serves every path
            check(got == isa_bytes, f"{name}: isa {isa} gives other bytes than the first path")
            continue
        isa_bytes = got
        for layout, (xr, dview, sview) in views.items():
            d_mx, s_mx = dview(q[layout]), sview(q[layout + "_scale"])
            d_ta, s_ta = ref[layout]
            R, Kr = xr.shape
            d_ta = d_ta[:, :Kr]
            # Pad mxtrain's copy like torchao's input (zeros never change a block's bytes
            # beyond the valid elements, which are the ones compared).
            dm = np.zeros((R, s_ta.shape[1] * 32), np.uint8)
            dt = np.zeros_like(dm)
            dm[:, :Kr], dt[:, :Kr] = d_mx, d_ta
            # Where the partial block's padding would be compared, compare torchao with itself.
            dm[:, Kr:] = ref[layout][0][:, Kr:]
            dt[:, Kr:] = ref[layout][0][:, Kr:]
            what = f"{name} {elem} {mode} {'bf16' if bf16 else 'f32'} {layout}"
            compare_blocks(pad32(xr), dm, np.ascontiguousarray(s_mx), dt, s_ta, elem, mode,
                           what, counts, Kr)
            if mode == "rceil":
                check_te_rule(pad32(xr), np.ascontiguousarray(s_mx).astype(np.int64), elem,
                              what, te_counts)


# ---- data -------------------------------------------------------------------------------

def datasets():
    rng = np.random.default_rng(40)
    d = {}
    d["random"] = (rng.standard_normal((96, 128)) *
                   np.exp2(rng.integers(-40, 41, size=(96, 1)))).astype(F32)
    z = np.zeros((64, 64), F32)
    z[::3, ::5] = -0.0
    z[40:, :] = rng.standard_normal((24, 64)).astype(F32)  # zeros next to data
    d["zero"] = z
    d["subnormal"] = (rng.standard_normal((64, 64)) * 1e-40).astype(F32)
    tiny = rng.standard_normal((64, 64)) * np.exp2(rng.integers(-135, -110, size=(64, 1)))
    d["tiny"] = tiny.astype(F32)
    huge = rng.uniform(-1, 1, (64, 64)) * FLT_MAX
    huge[::7, 0] = FLT_MAX
    huge[3::7, 1] = -FLT_MAX
    d["huge"] = huge.astype(F32)
    nf = (rng.standard_normal((64, 96)) * 4).astype(F32)
    for (r, c), v in zip(rng.integers(0, [64, 96], size=(40, 2)),
                         rng.choice([np.nan, np.inf, -np.inf], 40)):
        nf[r, c] = v
    d["naninf"] = nf
    # Scale boundaries: one block per row, its amax at and one ulp around max_elem·2^j and
    # 2^k, the other elements random below it.
    rows = []
    for base in [448.0, 57344.0, 1.0, 480.0]:
        for j in range(-150, 129):
            if base * 2.0 ** j > FLT_MAX:
                continue
            a = F32(base * 2.0 ** j)
            if a == 0:
                continue
            for v in (np.nextafter(a, F32(0)), a, np.nextafter(a, F32(np.inf))):
                if not np.isfinite(v):
                    continue
                row = (rng.uniform(-1, 1, 32) * v).astype(F32)
                row[rng.integers(0, 32)] = v * rng.choice([-1, 1])
                rows.append(row)
    b = np.array(rows, F32)
    d["boundaries"] = b.reshape(-1, 64) if b.shape[0] % 2 == 0 else b[:-1].reshape(-1, 64)
    # Ragged shapes: both axes off the 32-grid, and one below a single block.
    d["ragged"] = (rng.standard_normal((45, 77)) *
                   np.exp2(rng.integers(-8, 9, size=(45, 1)))).astype(F32)
    rg = d["ragged"]
    rg[5, 70:] = -0.0
    rg[9, 64:] = np.inf
    d["ragged_small"] = (rng.standard_normal((1, 31)) * 3).astype(F32)
    return d


def to_bf16_values(x):
    """x rounded to BF16 (nearest even), kept as float32."""
    u = x.view(U32)
    nan = np.isnan(x)
    r = ((u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(U32) << 16
    r = np.where(nan, u & 0xFFFF0000 | 0x00400000, r).astype(U32)
    return r.view(F32)


def main():
    data = datasets()
    totals = {}
    for elem in ELEMS:
        for mode in MODES:
            counts, te_counts = {}, {}
            for name, x in data.items():
                for bf16 in (False, True):
                    xv = to_bf16_values(x) if bf16 else x
                    compare(xv, elem, mode, bf16, name, counts, te_counts)
            if not counts.get("floor saturation (equal)", 1):
                del counts["floor saturation (equal)"]
            print(f"{elem} {mode}: byte-equal except the named cases (blocks) {counts}")
            if mode == "rceil":
                print(f"{elem} rceil scale bytes against TransformerEngine's rule: {te_counts}")
                check(te_counts.get("TE_SUBNORMAL_PRODUCT", 0) > 0,
                      "TE_SUBNORMAL_PRODUCT was never exercised")
            for c, n in counts.items():
                totals[(elem, mode, c)] = n
            # Each named case this rule can produce was exercised (so none passes unseen).
            expect = {"NEG_ZERO", "SCALE_BYTE_0", "NAN_BLOCK", "INF_BLOCK"}
            expect.add("RCEIL_LOG2" if mode == "rceil" else "floor saturation (equal)")
            check(expect <= set(counts), f"{elem} {mode}: cases never exercised: "
                  f"{sorted(expect - set(counts))}")
    print(f"kernel paths: {mxtrain.info()['supported_isas']}")
    print("test_xcheck_mx: all checks passed")


if __name__ == "__main__":
    main()
