"""tests/python/test_fp4_torchao.py — mxtrain's 4-bit quantizers byte for byte against the field's
code (docs/numerics.md, "4-bit formats"). Run by CTest as python_test_fp4_torchao; needs torch,
torchao and ml_dtypes from the cross-check environment (checks_env.require).

- E2M1 encode/decode (mxtrain.encode / decode, "e2m1") against ml_dtypes.float4_e2m1fn (every BF16 bit pattern, random FP32) and
  torchao's f32_to_f4_unpacked / f4_unpacked_to_f32.
- NVFP4 against torchao's nvfp4_quantize and NVFP4Tensor.to_nvfp4 / dequantize: without a
  per-tensor scale, with a given one, and with the one mxtrain derives from the tensor's amax
  (torchao's per_tensor_amax_to_scale); FP32 and BF16 input; rowwise blocks of 16.
- MXFP4 against torchao's to_mx(x, float4_e2m1fn_x2, 32, FLOOR / RCEIL), rowwise blocks of 32.
- TransformerEngine's order (order="te") against a transcription of TE's reference quantizer
  (transformer_engine/pytorch/custom_recipes/reference_nvfp4.py), and the inputs where TE's and
  torchao's orders give different bytes, listed.
- The random Hadamard transform against TE's reference (x @ (diag(signs) H) / 4).

Data: random normal rows over 2^-30..2^30, zeros, FP32 subnormals, huge values up to FLT_MAX,
E2M1 grid points and midpoints times E4M3 scales, NaN and ±Inf blocks; ragged widths compare
against torchao on the zero-padded tensor (its blocks need K % 16 == 0; a partial block's amax
is the same with zeros appended). The named differences are asserted case by case:
- torchao's RCEIL takes ceil(log2(fl(amax / 6))) with an FP32 log2, which rounds
  log2(2^j (1 + n·2^-23)) down to j for |j| >= 4 and small n: it then picks 2^j and saturates
  the block's largest element; mxtrain's rule is the exact ceil (2^(j+1));
- a per-tensor scale from an amax that is zero, below 2688·2^-126 or Inf: torchao's formulas
  give NaN scales (0/0), overflow, or zero every code; mxtrain uses the scale 1 (TE's rule for a
  zero or infinite amax);
- a NaN element: its code under a NaN scale is torchao's only when the NaN is the canonical one
  (its bit arithmetic maps NaN payloads to codes 2-4); the tests use canonical NaNs;
- ml_dtypes encodes NaN as 0x8 (+NaN) or 0x0 (-NaN) and torchao by payload; E2M1 has no NaN and
  mxtrain's f32_to_e2m1 gives 0.
"""

import sys

import numpy as np

from checks_env import require

torch, ml_dtypes, ao_nv, ao_mx, ao_cfg, ao_k = require(
    "torch", "ml_dtypes", "torchao.prototype.mx_formats.nvfp4_tensor",
    "torchao.prototype.mx_formats.mx_tensor", "torchao.prototype.mx_formats.config",
    "torchao.prototype.mx_formats.kernels")

import mxtrain

FLT_MAX = np.finfo(np.float32).max
FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL:", msg)


def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        check(False, f"{what}: shapes {a.shape} vs {b.shape}")
        return False
    ok = a.tobytes() == b.tobytes()
    if not ok:
        idx = np.argwhere(a.view(np.uint8).reshape(a.shape[0], -1)
                          != b.view(np.uint8).reshape(b.shape[0], -1))[:5].tolist()
        check(False, f"{what}: bytes differ at {idx}")
    return ok


# ---- data ------------------------------------------------------------------------------------

def adversarial(M, K, seed, nonfinite=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, K)) * np.exp2(rng.integers(-30, 31, size=(M, 1)))
    x = x.astype(np.float32)
    flat = x.reshape(-1)
    n = flat.size
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5], np.float32)
    e4m3 = np.arange(0x01, 0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    pick = rng.integers(0, n, size=n // 6)
    flat[pick] = (rng.choice(grid, pick.size) * rng.choice(e4m3, pick.size)
                  * rng.choice([-1, 1], pick.size)).astype(np.float32)
    specials = np.array([0.0, -0.0, 1e-40, -3e-42, 1.4e-45, FLT_MAX, -FLT_MAX, 3e38, 1e38,
                         2.0 ** -126, 6.0, -6.0, 1.5 * 2 ** 20], np.float32)
    pick = rng.integers(0, n, size=max(1, n // 25))
    flat[pick] = rng.choice(specials, pick.size)
    if nonfinite:
        pick = rng.integers(0, n, size=max(1, n // 200))
        flat[pick] = rng.choice(np.array([np.nan, np.inf, -np.inf], np.float32), pick.size)
    if n >= 64:  # an all-zero, an all-subnormal and an all-huge stretch
        flat[:16] = 0.0
        flat[16:32] = rng.choice(np.array([1e-39, -3e-41, 1.4e-45], np.float32), 16)
        flat[32:48] = rng.choice(np.array([3e38, -FLT_MAX, 1e37], np.float32), 16)
    return x


SHAPES = [(1, 16), (1, 32), (3, 48), (15, 64), (17, 96), (31, 160), (33, 256), (64, 512),
          (65, 1024)]
RAGGED = [(1, 1), (7, 15), (17, 17), (5, 31), (33, 33), (9, 47), (3, 65), (2, 127)]


def unpack(packed, K):
    """E2M1 codes [M, K] from torchao's / mxtrain's packed bytes [M, ceil(K/2)]."""
    p = np.asarray(packed, np.uint8)
    codes = np.stack([p & 0xF, p >> 4], axis=-1).reshape(p.shape[0], -1)
    return codes[:, :K]


def pad16(x, B=16):
    M, K = x.shape
    Kp = -(-K // B) * B
    out = np.zeros((M, Kp), np.float32)
    out[:, :K] = x
    return out


def t(x):
    return torch.from_numpy(np.ascontiguousarray(x))


# ---- E2M1 --------------------------------------------------------------------------------------

def test_e2m1():
    f4 = ml_dtypes.float4_e2m1fn
    bf = np.arange(65536, dtype=np.uint32)
    x = (bf << 16).view(np.float32)
    rng = np.random.default_rng(1)
    x = np.concatenate([x, rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64)
                        .astype(np.uint32).view(np.float32)])
    finite = ~np.isnan(x)
    ours = mxtrain.encode(x, "e2m1")
    theirs = x.astype(f4).view(np.uint8)
    same(ours[finite], theirs[finite], "e2m1 encode vs ml_dtypes.float4_e2m1fn")
    ao = ao_k.f32_to_f4_unpacked(t(x[finite])).numpy()
    same(ours[finite], ao, "e2m1 encode vs torchao f32_to_f4_unpacked")
    codes = np.arange(16, dtype=np.uint8)
    same(mxtrain.decode(codes, "e2m1"), codes.view(f4).astype(np.float32),
         "e2m1 decode vs ml_dtypes")
    same(mxtrain.decode(codes, "e2m1"), ao_k.f4_unpacked_to_f32(t(codes)).numpy(),
         "e2m1 decode vs torchao")
    # NaN: no E2M1 code; the references disagree (named in the module docstring).
    nan = np.array([np.nan, -np.nan], np.float32)
    check(mxtrain.encode(nan, "e2m1").tolist() == [0, 0], "mxtrain encodes NaN as 0")
    print("ml_dtypes NaN codes (+, -):", nan.astype(f4).view(np.uint8).tolist())
    # pack_uint4's nibble order.
    packed = ao_k.pack_uint4(t(np.array([[1, 2, 3, 4]], np.uint8))).numpy()
    check(packed.tolist() == [[0x21, 0x43]], f"pack_uint4 order {packed.tolist()}")


# ---- NVFP4 ---------------------------------------------------------------------------------------

def ao_nvfp4(x, pts):
    """torchao's nvfp4_quantize on zero-padded x: (scale bytes [M, Kp/16], codes [M, Kp])."""
    xp = pad16(x)
    s, d = ao_nv.nvfp4_quantize(t(xp), 16, None if pts is None else torch.tensor(pts))
    return s.view(torch.uint8).numpy(), unpack(d.view(torch.uint8).numpy(), xp.shape[1])


def bf16_bits(x):
    """x rounded to BF16 (torch's round to nearest even), as uint16 bit patterns."""
    return torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def ours_nvfp4(x, tensor_scale, amax=None, bf16=False):
    xin = x
    if bf16:  # BF16 bits through the uint16 input path; a given scale takes the float values
        xin = bf16_bits(x)
        if not isinstance(tensor_scale, str):
            xin = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    q = mxtrain.quantize_fp4(xin, kind="nvfp4", layout="rowwise", tensor_scale=tensor_scale,
                             amax=amax)
    return q


def p_of(amax):
    """torchao's per_tensor_amax_to_scale."""
    return ao_nv.per_tensor_amax_to_scale(torch.tensor(amax, dtype=torch.float32)).item()


def compare_nvfp4(x, what):
    M, K = x.shape
    nb = -(-K // 16)
    amax = np.float32(np.max(np.abs(x))) if not np.isnan(x).any() else np.float32(np.nan)
    # one level, given scale, scale from the amax (mxtrain's rule = torchao's where amax is
    # a normal multiple of 2688 * 2^-126 and finite)
    cases = [("none", None), (float(np.float32(0.37)), np.float32(0.37)),
             ("amax", p_of(float(amax)) if not np.isnan(amax) else float("nan"))]
    for ts, pts in cases:
        s, c = ao_nvfp4(x, pts)
        q = ours_nvfp4(x, ts)
        exact = ts != "amax" or np.isnan(amax) or (2688 * 2.0 ** -126 <= amax < np.inf)
        if not exact:
            # mxtrain used p = 1 (named difference): compare with torchao given 1.0.
            check(q["tensor_scale"][0] == 1.0, f"{what}: amax {amax} gives tensor scale 1")
            s, c = ao_nvfp4(x, 1.0)
        same(q["scale"], s[:, :nb], f"{what} nvfp4 tensor_scale={ts} scales")
        same(unpack(q["data"], K), c[:, :K], f"{what} nvfp4 tensor_scale={ts} codes")
        if ts == "amax" and exact:
            check(np.float32(q["tensor_scale"][0]).tobytes() == np.float32(pts).tobytes(),
                  f"{what}: tensor scale {q['tensor_scale'][0]} vs torchao {pts}")
        # BF16 input: torchao on the bfloat16 tensor.
        xb = torch.from_numpy(x).to(torch.bfloat16)
        xbf = xb.float().numpy()
        amax_b = np.float32(np.max(np.abs(xbf))) if not np.isnan(xbf).any() else np.nan
        if ts == "amax" and not np.isnan(amax_b) and not (2688 * 2.0 ** -126 <= amax_b < np.inf):
            continue
        pts_b = pts if ts != "amax" else (p_of(float(amax_b)) if not np.isnan(amax_b)
                                          else float("nan"))
        sb, cb = ao_nvfp4(xbf, pts_b)  # bf16 values are exactly these floats
        qb = ours_nvfp4(x, ts, bf16=True)
        same(qb["scale"], sb[:, :nb], f"{what} bf16 nvfp4 tensor_scale={ts} scales")
        same(unpack(qb["data"], K), cb[:, :K], f"{what} bf16 nvfp4 tensor_scale={ts} codes")


def test_nvfp4():
    for i, (M, K) in enumerate(SHAPES + RAGGED):
        for nonfinite in (False, True):
            compare_nvfp4(adversarial(M, K, 100 + i, nonfinite), f"{M}x{K} nf={nonfinite}")
    # All-zero, tiny and infinite tensors: the named per-tensor scale cases.
    for name, x in [("zeros", np.zeros((4, 32), np.float32)),
                    ("tiny", np.full((2, 16), 1e-36, np.float32)),
                    ("inf", np.where(np.arange(32) % 5 == 0, np.inf, 1.0)
                     .astype(np.float32).reshape(2, 16))]:
        compare_nvfp4(x, name)
        s, c = ao_nvfp4(x, p_of(float(np.max(np.abs(x)))))
        print(f"named case '{name}': torchao's scale bytes with per_tensor_amax_to_scale:",
              np.unique(s).tolist(), "codes:", np.unique(c).tolist())
    # The tensor class: to_nvfp4 and dequantize.
    x = adversarial(32, 64, 7, nonfinite=False)
    pts = torch.tensor(p_of(float(np.max(np.abs(x)))))
    nv = ao_nv.NVFP4Tensor.to_nvfp4(t(x), per_tensor_scale=pts)
    q = ours_nvfp4(x, "amax")
    same(q["data"], nv.qdata.view(torch.uint8).numpy(), "NVFP4Tensor.to_nvfp4 qdata")
    same(q["scale"], nv.scale.view(torch.uint8).numpy(), "NVFP4Tensor.to_nvfp4 scale")
    same(mxtrain.dequantize_fp4(q, 64), nv.dequantize(torch.float32).numpy(),
         "NVFP4Tensor.dequantize")
    nv1 = ao_nv.NVFP4Tensor.to_nvfp4(t(x))
    q1 = ours_nvfp4(x, "none")
    same(mxtrain.dequantize_fp4(q1, 64), nv1.dequantize(torch.float32).numpy(),
         "NVFP4Tensor.dequantize (one level)")


# ---- MXFP4 -------------------------------------------------------------------------------------

def exact_rceil_byte(amax):
    """ceil(log2(amax / 6)) + 127 in exact arithmetic, clamped (finite amax)."""
    if amax == 0 or amax < 2.0 ** -126:
        return 0
    m, e = np.frexp(np.float64(amax) / 6)  # amax/6 = m * 2^e, 0.5 <= m < 1, exact in double
    c = e if m > 0.5 else e - 1
    return int(min(max(c, -127), 127) + 127)


def compare_mxfp4(x, what):
    M, K = x.shape
    xp = pad16(x, 32)
    nb = -(-K // 32)
    for mode in ("floor", "rceil"):
        sm = ao_cfg.ScaleCalculationMode.FLOOR if mode == "floor" else \
            ao_cfg.ScaleCalculationMode.RCEIL
        s, d = ao_mx.to_mx(t(xp), torch.float4_e2m1fn_x2, 32, sm)
        s = s.view(torch.uint8).numpy()[:, :nb]
        c = unpack(d.view(torch.uint8).numpy(), xp.shape[1])[:, :K]
        q = mxtrain.quantize_fp4(x, kind="mxfp4", layout="rowwise", scale_rounding=mode)
        ours_s, ours_c = q["scale"], unpack(q["data"], K)
        if mode == "floor":
            same(ours_s, s, f"{what} mxfp4 floor scales")
            same(ours_c, c, f"{what} mxfp4 floor codes")
            continue
        # RCEIL: equal except the blocks where torchao's FP32 log2 rounds (named).
        diff = ours_s != s
        for r, b in np.argwhere(diff):
            blk = xp[r, b * 32:(b + 1) * 32]
            amax = np.float32(np.max(np.abs(blk)))
            want = exact_rceil_byte(amax)
            check(ours_s[r, b] == want and s[r, b] == want - 1,
                  f"{what} rceil block ({r},{b}) amax {amax!r}: mxtrain {ours_s[r, b]}, "
                  f"torchao {s[r, b]}, exact {want}")
        keep = np.repeat(~diff, 32, axis=1)[:, :K]
        same(np.where(keep, ours_c, 0), np.where(keep, c, 0), f"{what} mxfp4 rceil codes")
        if diff.any():
            print(f"{what}: {int(diff.sum())} RCEIL block(s) where torchao's log2 rounds")


def test_mxfp4():
    for i, (M, K) in enumerate(SHAPES + RAGGED):
        for nonfinite in (False, True):
            compare_mxfp4(adversarial(M, K, 300 + i, nonfinite), f"{M}x{K} nf={nonfinite}")
    # The RCEIL log2 cases, listed: amax = 6 * 2^j * (1 + n 2^-23).
    listed = []
    for j in (-20, -8, -4, -2, 0, 3, 4, 9, 40):
        for n in (1, 2, 3, 5, 8):
            amax = np.float32(np.ldexp(np.float32(1.5) + np.float32(n) * np.float32(2 ** -23),
                                       j + 2))
            x = np.full((1, 32), amax / 2, np.float32)
            x[0, 0] = amax
            s, _ = ao_mx.to_mx(t(x), torch.float4_e2m1fn_x2, 32,
                               ao_cfg.ScaleCalculationMode.RCEIL)
            q = mxtrain.quantize_fp4(x, kind="mxfp4", scale_rounding="rceil")
            ours, theirs = int(q["scale"][0, 0]), int(s.view(torch.uint8)[0, 0])
            check(ours == exact_rceil_byte(amax), f"rceil exact at 2^{j}(1+{n}u)")
            if ours != theirs:
                listed.append((j, n, ours, theirs))
    print("RCEIL inputs amax = 6*2^j*(1+n*2^-23) where torchao's byte differs (j, n, mxtrain, "
          "torchao):", listed)
    check(all(o == t_ + 1 for _, _, o, t_ in listed), "torchao picks the exponent below")
    check(all(abs(j) >= 4 for j, _, _, _ in listed), "only where |j| >= 4")


# ---- TransformerEngine's order ----------------------------------------------------------------

def te_reference(x):
    """reference_nvfp4.py's _quantize_blockwise_reference (1x16, non-pow2) in torch: (scale
    bytes, codes) for x [M, K], K % 16 == 0; NaN-free input."""
    xt = t(x)
    m, n = xt.shape
    xb = xt.view(m, n // 16, 16)
    vec_max = torch.amax(torch.abs(xb), dim=-1, keepdim=True).to(torch.float32)
    global_amax = torch.max(torch.abs(xt)).to(torch.float32).view(1)
    F4, F8 = torch.tensor(6.0), torch.tensor(448.0)
    gmax = torch.tensor(torch.finfo(torch.float32).max)
    ges = torch.min(torch.div(F8 * F4, global_amax), gmax)
    if ges == 0.0 or global_amax == 0.0:  # the CUDA kernel's rule (its reference keeps FLT_MAX)
        ges = torch.tensor(1.0)
    gds = torch.div(1.0, ges)
    mult = ges * torch.reciprocal(F4)
    ds = torch.min(vec_max * mult, gmax)
    ds = torch.clamp(ds, min=-F8, max=F8).to(torch.float8_e4m3fn)
    es = torch.min(torch.div(1.0, ds.to(torch.float32) * gds), gmax)
    y = torch.clamp(xb * es, -F4, F4).reshape(m, n)
    # cast_to_fp4x2's thresholds (round to nearest even); -0.0 gives code 0 there.
    r = torch.zeros_like(y, dtype=torch.uint8)
    for lo, hi, code, inc_lo, inc_hi in [(0, .25, 0, 1, 1), (.25, .75, 1, 0, 0),
                                         (.75, 1.25, 2, 1, 1), (1.25, 1.75, 3, 0, 0),
                                         (1.75, 2.5, 4, 1, 1), (2.5, 3.5, 5, 0, 0),
                                         (3.5, 5.0, 6, 1, 1)]:
        for sgn, off in ((1, 0), (-1, 8)):
            a = y * sgn
            lower = (a >= lo) if inc_lo else (a > lo)
            upper = (a <= hi) if inc_hi else (a < hi)
            if sgn == -1 and lo == 0:
                lower, upper = (a > 0), (a <= .25)
            r[lower & upper] = code + off
    r[y > 5.0] = 7
    r[y < -5.0] = 15
    return ds.view(torch.uint8).reshape(m, n // 16).numpy(), r.numpy()


def test_te_order():
    clamp = order = 0
    for i, (M, K) in enumerate(SHAPES):
        x = adversarial(M, K, 500 + i, nonfinite=False)
        s_te, c_te = te_reference(x)
        q = mxtrain.quantize_fp4(x, kind="nvfp4", order="te")
        same(q["scale"], s_te, f"{M}x{K} te order scales vs TE's reference")
        c = unpack(q["data"], K)
        # TE's cast writes 0x0 for a negative zero (also a tiny negative value whose scaled
        # value underflows to -0); mxtrain, torchao and ml_dtypes keep the sign (0x8). Named.
        neg0 = (c == 8) & (c_te == 0)
        same(np.where(neg0, 0, c), c_te, f"{M}x{K} te order codes vs TE's reference")
        qa = mxtrain.quantize_fp4(x, kind="nvfp4", order="torchao")
        for r, b in np.argwhere(qa["scale"] != q["scale"]):
            a, e = int(qa["scale"][r, b]), int(q["scale"][r, b])
            if a == 0x08 and e < 0x08:
                clamp += 1  # torchao clamps block scales at 2^-6, E4M3's smallest normal
            else:
                order += 1
                check(abs(a - e) == 1, f"{M}x{K} block ({r},{b}): orders give {a} and {e}")
    print(f"adversarial tensors: {clamp} block scales differ by torchao's 2^-6 clamp, {order} by "
          f"the order of the FP32 operations")
    # The order's own differences, listed: block amaxes b next to the point where
    # (b / 6) / p or b * (S_enc * (1/6)) crosses an E4M3 rounding midpoint.
    listed = []
    for A in (np.float32(1.0), np.float32(3.3), np.float32(87.15467), np.float32(1e-3),
              np.float32(2.5e7)):
        p = A / np.float32(2688)
        for mid in (np.float32(1.0625), np.float32(3.25), np.float32(200.0), np.float32(0.03515625)):
            b0 = np.float32(mid * np.float32(6) * p)
            bs = [b0]
            for _ in range(12):
                bs.append(np.nextafter(bs[-1], np.float32(np.inf)))
                bs.insert(0, np.nextafter(bs[0], np.float32(0)))
            x = np.zeros((len(bs), 16), np.float32)
            x[:, 0] = bs
            x[0, 1] = A
            if np.max(np.abs(x)) > A:
                continue
            qa = mxtrain.quantize_fp4(x, kind="nvfp4", order="torchao")
            qt = mxtrain.quantize_fp4(x, kind="nvfp4", order="te")
            for r in np.nonzero(qa["scale"][:, 0] != qt["scale"][:, 0])[0]:
                if r == 0:
                    continue
                listed.append((float(A), float(x[r, 0]), int(qa["scale"][r, 0]),
                               int(qt["scale"][r, 0])))
    print(f"{len(listed)} listed (tensor amax, block amax, torchao scale byte, TE scale byte):",
          listed[:12])
    check(len(listed) > 0, "the two orders' roundings differ next to E4M3 midpoints")
    check(all(abs(a - t_) == 1 for _, _, a, t_ in listed), "listed scales are neighbours")


# ---- the random Hadamard transform --------------------------------------------------------------

def test_rht():
    signs = torch.tensor([1.0, 1.0, 1.0, -1.0, 1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 1.0, -1.0,
                          1.0, -1.0, -1.0])
    h = torch.ones((1, 1))
    while h.shape[0] < 16:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    H = (signs * torch.eye(16)) @ h
    rng = np.random.default_rng(3)
    x = rng.integers(-8, 9, size=(48, 20)).astype(np.float32)  # T = 48 tokens, K = 20
    # TE applies the transform along the token axis of the transposed matrix: rows of 16 tokens.
    te = (t(x.T.copy()).reshape(-1, 16) @ (H * 0.25)).reshape(20, 48).T.numpy()
    same(mxtrain.rht_rows(x), np.ascontiguousarray(te), "rht_rows vs TE's reference (exact inputs)")
    xr = rng.standard_normal((32, 24)).astype(np.float32)
    ter = (t(xr.T.copy()).reshape(-1, 16) @ (H * 0.25)).reshape(24, 32).T.numpy()
    err = np.max(np.abs(mxtrain.rht_rows(xr) - ter)) / np.max(np.abs(ter))
    # 16 FP32 adds in another order: within 16 * 2^-24 of the magnitude.
    check(err < 16 * 2.0 ** -24 * 4, f"rht_rows vs TE on random data: relative {err}")


if __name__ == "__main__":
    torch.set_num_threads(2)
    test_e2m1()
    test_nvfp4()
    test_mxfp4()
    test_te_order()
    test_rht()
    if FAILS:
        print(f"test_fp4_torchao: {len(FAILS)} failure(s)")
        sys.exit(1)
    print("test_fp4_torchao: all passed")
