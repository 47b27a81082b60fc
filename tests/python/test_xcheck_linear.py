"""tests/python/test_xcheck_linear.py — the PyTorch bridge (mxtrain.torch.MXLinear /
mx_linear) against torchao's emulated MXFP8 linear, same weights, same recipe.

Reference: torchao 0.18's MXFP8 training linear,
torchao.prototype.moe_training.mxfp8_linear.MXFP8Linear(in, out, bias,
kernel_preference=KernelPreference.EMULATED, scale_calculation_mode=ScaleCalculationMode.RCEIL)
— its forward is `_to_mxfp8_then_scaled_mm` → the autograd function `mx_mm` of the same file,
which quantizes with ScaledTensor.to_mx (→ torchao.prototype.mx_formats.mx_tensor.to_mx) and
multiplies the dequantized operands with torch.mm in the input's dtype (the EMULATED gemm of
mx_tensor._addmm_mx_dispatch). For E5M2 gradients, mx_mm.apply is called directly with
grad_elem_dtype=torch.float8_e5m2 (MXFP8Linear fixes E4M3). mxtrain: MXLinear.from_linear with
recipe "mxfp8" (and "mxfp8-e5m2grad"), defer_backward_quant off and on.

Quantized operands: every to_mx call of torchao's forward and backward is recorded (the test
wraps mx_tensor.to_mx) and identified by its input. torchao quantizes exactly mxtrain's six
copies, along the same axes (asserted):
  forward  x rowwise (blocks along in),  W rowwise (along in)
  dgrad    dy rowwise (along out),       W colwise (to_mx(W.t().contiguous()): along out)
  wgrad    dy colwise (along T),         x colwise (to_mx(x.t().contiguous()): along T)
Each is compared byte for byte (codes and E8M0 scales) with mxtrain.quantize of the same
tensor — the quantize_dual the engine's Linear runs (test_torch.py checks the layer's outputs
equal the products of those copies).

Outputs and gradients: y, dx, dW (and db) of both are sums of the same exact products (byte-
equal operands; an MX product of two FP8 values and two powers of two is exact in FP32), taken
in different orders: mxtrain's FP32 GEMM kernels and torch.mm's FP32 GEMM. Any order of K
FP32 additions is within γ_K·Σ|a_i·b_i| of the exact sum (γ_K = K·2^-24/(1 − K·2^-24)), so
the two may differ by up to 2·γ_K·Σ|a_i·b_i| (plus one rounding of the bias add on each side,
γ_{K+1}); that is the tolerance, per element, with Σ|a_i·b_i| computed from the decoded
operands in float64. db is Σ_T dy on both sides (2·γ_T·Σ|dy|). Each side is also checked on
its own against the exact float64 product within γ_K.

Recipe differences, named:
- OUTPUT DTYPE: torchao's emulated linear runs the product in the input's dtype; with BF16
  activations it dequantizes to BF16 and torch.mm returns BF16. mxtrain's bridge converts x to
  FP32 (exact), multiplies with FP32 accumulation and rounds y to BF16 once at the boundary.
  The BF16 case here asserts operands byte-equal and y, dx, dW within 2·γ_K·Σ|a b| +
  2^-8·(|exact| + γ_K·Σ|a b|) (each side rounds an FP32 sum to BF16 once; torch's CPU BF16 mm
  accumulates in FP32 — measured: identical bits here). The main comparison is in FP32.
- RAGGED SHAPES: torchao's to_mx needs every quantized axis (T, in, out) to be a multiple of
  32 and raises AssertionError otherwise (asserted for in = 70); mxtrain handles partial
  blocks. The comparison uses T = 96, in = 160, out = 64.
- 32x32 weight tiles (mxfp8-32x32): no torchao counterpart; not compared.
- torchao's MXFP8TrainingOpConfig defaults to out_dtype bf16 for grouped GEMMs and offers
  wgrad_with_hp (wgrad from unquantized operands); mxtrain's grouped experts keep FP32 outputs
  and always quantize wgrad. Not used here.

Run by CTest as python_test_xcheck_linear; exits 77 (skipped) without torch / torchao unless
MXTRAIN_REQUIRE_CHECKS=1 (checks_env.py).
"""

import warnings

import numpy as np

from checks_env import require

torch, _ = require("torch", "torchao")
warnings.filterwarnings("ignore", message=".*Enum subclass.*")
import torchao.prototype.mx_formats.mx_tensor as ao_mx  # noqa: E402
from torchao.prototype.moe_training import mxfp8_linear as ao_lin  # noqa: E402
from torchao.prototype.mx_formats.config import (MXFP8Dim0CastKernelChoice,  # noqa: E402
                                                 MXFP8Dim1CastKernelChoice,
                                                 ScaleCalculationMode)
from torchao.quantization.quantize_.common.kernel_preference import KernelPreference  # noqa: E402

import mxtrain  # noqa: E402
import mxtrain.torch as mxt  # noqa: E402
from mx_ref import decode, gamma  # noqa: E402

T_SHAPE, IN, OUT = (2, 48), 160, 64  # x [2, 48, 160]: T = 96 tokens
ELEM_TORCH = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


class Recorder:
    """Wraps torchao's to_mx: keeps (hp input float32, codes, scales, elem) of every call."""

    def __init__(self):
        self.calls = []
        self.orig = ao_mx.to_mx

    def __enter__(self):
        def rec(data_hp, elem_dtype, block_size, scaling_mode=ScaleCalculationMode.FLOOR,
                is_swizzled_scales=False):
            check(block_size == 32 and scaling_mode == ScaleCalculationMode.RCEIL and
                  not is_swizzled_scales, f"to_mx called with {block_size}, {scaling_mode}")
            s, d = self.orig(data_hp, elem_dtype, block_size, scaling_mode, is_swizzled_scales)
            elem = {v: k for k, v in ELEM_TORCH.items()}[elem_dtype]
            self.calls.append((data_hp.detach().float().numpy().copy(),
                               d.view(torch.uint8).numpy().copy(),
                               s.view(torch.uint8).numpy().copy(), elem))
            return s, d
        ao_mx.to_mx = rec
        return self

    def __exit__(self, *exc):
        ao_mx.to_mx = self.orig


def torchao_run(x, w, b, dy, grad_elem):
    """torchao's emulated MX linear: (y, dx, dW, db, recorded to_mx calls)."""
    xt = x.clone().requires_grad_(True)
    with Recorder() as r:
        if grad_elem == "e4m3":
            lin = ao_lin.MXFP8Linear(IN, OUT, bias=b is not None, dtype=x.dtype,
                                     kernel_preference=KernelPreference.EMULATED,
                                     scale_calculation_mode=ScaleCalculationMode.RCEIL)
            with torch.no_grad():
                lin.weight.copy_(w)
                if b is not None:
                    lin.bias.copy_(b)
            y = lin(xt)
            wgrad = lambda: lin.weight.grad  # noqa: E731
            bgrad = lambda: None if b is None else lin.bias.grad  # noqa: E731
        else:
            wt = w.clone().requires_grad_(True)
            y = ao_lin.mx_mm.apply(xt, wt, torch.float8_e4m3fn, torch.float8_e4m3fn,
                                   ELEM_TORCH[grad_elem], 32, KernelPreference.EMULATED,
                                   MXFP8Dim0CastKernelChoice.TORCH,
                                   MXFP8Dim1CastKernelChoice.TORCH,
                                   ScaleCalculationMode.RCEIL, False)
            wgrad, bgrad = (lambda: wt.grad), (lambda: None)
        y.backward(dy)
    return y.detach(), xt.grad, wgrad(), bgrad(), r.calls


def mxtrain_run(x, w, b, dy, recipe, defer):
    lin = torch.nn.Linear(IN, OUT, bias=b is not None, dtype=x.dtype)
    with torch.no_grad():
        lin.weight.copy_(w)
        if b is not None:
            lin.bias.copy_(b)
    m = mxt.MXLinear.from_linear(lin, recipe=recipe, defer_backward_quant=defer)
    xt = x.clone().requires_grad_(True)
    y = m(xt)
    y.backward(dy)
    return y.detach(), xt.grad, m.weight.grad, None if b is None else m.bias.grad


def identify(calls, x2, w, dy2, grad_elem):
    """Maps each recorded to_mx call to (tensor name, layout) by its input; checks torchao made
    exactly mxtrain's six copies. Returns {(name, layout): (codes, scales, elem)} in mxtrain's
    [rows, cols] orientation."""
    tensors = {"x": x2, "W": w, "dy": dy2}
    out = {}
    for hp, codes, scales, elem in calls:
        hit = None
        for name, t in tensors.items():
            if hp.shape == t.shape and np.array_equal(hp, t, equal_nan=True):
                hit = (name, "rowwise", codes, scales)
            elif hp.shape == t.T.shape and np.array_equal(hp, t.T, equal_nan=True):
                hit = (name, "colwise", codes.T, scales.T)
        check(hit is not None, f"to_mx was called on a tensor that is not x, W or dy "
              f"(shape {hp.shape})")
        key = hit[:2]
        check(key not in out, f"torchao quantized {key} twice")
        out[key] = (hit[2], hit[3], elem)
    want = {("x", "rowwise"), ("W", "rowwise"), ("dy", "rowwise"), ("W", "colwise"),
            ("dy", "colwise"), ("x", "colwise")}
    check(set(out) == want, f"torchao's copies {sorted(out)} are not mxtrain's {sorted(want)}")
    for (name, _), (_, _, elem) in out.items():
        check(elem == (grad_elem if name == "dy" else "e4m3"), f"{name} quantized to {elem}")
    return out


def within_pair_bound(got_mx, got_ta, a, bmat, extra, what):
    """got_* ≈ a·bmat (+ bias): each within γ_{K+1}·(Σ|a b| + |bias|) of the exact float64
    sum, and each other within twice that. Returns max |mxtrain − torchao| / max |exact|."""
    exact = a @ bmat + (0 if extra is None else extra.astype(np.float64))
    k = a.shape[1] + (0 if extra is None else 1)
    mag = np.abs(a) @ np.abs(bmat) + (0 if extra is None else np.abs(extra.astype(np.float64)))
    bound = (gamma(k) + k * 2.0 ** -52) * mag
    for side, g in (("mxtrain", got_mx), ("torchao", got_ta)):
        err = np.abs(g.astype(np.float64) - exact)
        check(np.all(err <= bound), f"{what}: {side} exceeds the FP32 summation bound by "
              f"{np.max(err - bound):g}")
    d = np.abs(got_mx.astype(np.float64) - got_ta.astype(np.float64))
    check(np.all(d <= 2 * bound), f"{what}: mxtrain and torchao differ beyond 2·γ_K")
    scale = np.max(np.abs(exact))
    return float(np.max(d) / scale) if scale > 0 else 0.0


def compare(grad_elem, recipe, bias, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*T_SHAPE, IN, generator=g) * torch.exp2(
        torch.randint(-6, 7, (*T_SHAPE, 1), generator=g).float())
    x[0, 5] = 0.0  # a zero row: zero blocks in x's rowwise copy
    # Rows of W spread over 2^-5..2^3 (times 0.05): the per-row 1x32 scales differ, so an
    # operand quantized along another axis (or in 32x32 tiles) would round other bits.
    w = torch.randn(OUT, IN, generator=g) * 0.05 * torch.exp2(
        torch.randint(-5, 4, (OUT, 1), generator=g).float())
    b = torch.randn(OUT, generator=g) if bias else None
    dy = torch.randn(*T_SHAPE, OUT, generator=g) * torch.exp2(
        torch.randint(-10, 3, (*T_SHAPE, 1), generator=g).float())
    y_ta, dx_ta, dw_ta, db_ta, calls = torchao_run(x, w, b, dy, grad_elem)
    x2, dy2, wn = x.reshape(-1, IN).numpy(), dy.reshape(-1, OUT).numpy(), w.numpy()
    ops = identify(calls, x2, wn, dy2, grad_elem)
    for (name, layout), (codes, scales, elem) in ops.items():
        q = mxtrain.quantize({"x": x2, "W": wn, "dy": dy2}[name], recipe="mxfp8", elem=elem,
                             scale_rounding="rceil")
        check(np.array_equal(q[layout], codes) and np.array_equal(q[layout + "_scale"], scales),
              f"{recipe}: torchao's {name} {layout} copy differs from mxtrain.quantize's")
    dec = {k: decode(c, s, e, k[1]) for k, (c, s, e) in ops.items()}
    worst = {}
    for defer in (False, True):
        y, dx, dw, db = mxtrain_run(x, w, b, dy, recipe, defer)
        what = f"{recipe} bias={bias} defer={defer}"
        worst["y"] = within_pair_bound(y.reshape(-1, OUT).numpy(), y_ta.reshape(-1, OUT).numpy(),
                                       dec[("x", "rowwise")], dec[("W", "rowwise")].T,
                                       None if b is None else np.broadcast_to(b.numpy(),
                                                                              (x2.shape[0], OUT)),
                                       f"forward {what}")
        worst["dx"] = within_pair_bound(dx.reshape(-1, IN).numpy(),
                                        dx_ta.reshape(-1, IN).numpy(), dec[("dy", "rowwise")],
                                        dec[("W", "colwise")], None, f"dgrad {what}")
        worst["dW"] = within_pair_bound(dw.numpy(), dw_ta.numpy(), dec[("dy", "colwise")].T,
                                        dec[("x", "colwise")], None, f"wgrad {what}")
        if bias:
            ones = np.ones((1, x2.shape[0]))
            worst["db"] = within_pair_bound(db.numpy()[None], db_ta.numpy()[None], ones,
                                            dy2.astype(np.float64), None, f"bias grad {what}")
    print(f"{recipe} (torchao grad {grad_elem}) bias={bias}: six operands byte-equal; largest "
          f"|mxtrain − torchao| / max|exact|: " +
          ", ".join(f"{k} {v:.2g}" for k, v in worst.items()))


def test_bf16():
    """OUTPUT DTYPE: BF16 activations and weight."""
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(*T_SHAPE, IN, generator=g) * 2).bfloat16()
    w = (torch.randn(OUT, IN, generator=g) * 0.05).bfloat16()
    dy = torch.randn(*T_SHAPE, OUT, generator=g).bfloat16()
    y_ta, dx_ta, dw_ta, _, calls = torchao_run(x, w, None, dy, "e4m3")
    x2, dy2, wn = (t.float().reshape(-1, t.shape[-1]).numpy() for t in (x, dy, w))
    ops = identify(calls, x2, wn, dy2, "e4m3")
    for (name, layout), (codes, scales, _) in ops.items():
        q = mxtrain.quantize({"x": x2, "W": wn, "dy": dy2}[name])
        check(np.array_equal(q[layout], codes) and np.array_equal(q[layout + "_scale"], scales),
              f"bf16: torchao's {name} {layout} copy differs from mxtrain.quantize's")
    y, dx, dw, _ = mxtrain_run(x, w, None, dy, "mxfp8", False)
    check(y.dtype == y_ta.dtype == torch.bfloat16, f"dtypes {y.dtype} {y_ta.dtype}")
    dec = {k: decode(c, s, "e4m3", k[1]) for k, (c, s, _) in ops.items()}
    worst = {}
    for what, got, ref, a, bm in (
            ("y", y.reshape(-1, OUT), y_ta.reshape(-1, OUT), dec[("x", "rowwise")],
             dec[("W", "rowwise")].T),
            ("dx", dx.reshape(-1, IN), dx_ta.reshape(-1, IN), dec[("dy", "rowwise")],
             dec[("W", "colwise")]),
            ("dW", dw, dw_ta, dec[("dy", "colwise")].T, dec[("x", "colwise")])):
        # Each side: an FP32 sum within γ_K·Σ|a b| of the exact one, then rounded to BF16
        # (2^-9 relative); so the two differ by at most
        # 2·γ_K·Σ|a b| + 2^-8·(|exact| + γ_K·Σ|a b|).
        exact = a @ bm
        g = gamma(a.shape[1]) * (np.abs(a) @ np.abs(bm))
        bound = 2 * g + 2.0 ** -8 * (np.abs(exact) + g)
        d = np.abs(got.float().numpy().astype(np.float64) - ref.float().numpy())
        check(np.all(d <= bound), f"bf16 {what}: beyond one BF16 rounding + 2·γ_K")
        worst[what] = (float(np.max(d / np.maximum(np.abs(exact), 1e-30))),
                       float(np.mean(d > 0)))
    print("bf16: six operands byte-equal; y, dx, dW within two BF16 roundings + 2·γ_K "
          "(largest relative difference, share of elements that differ: " +
          ", ".join(f"{k} {v[0]:.2g} {v[1]:.0%}" for k, v in worst.items()) + ")")


def test_ragged_refused():
    lin = ao_lin.MXFP8Linear(70, 32, bias=False, kernel_preference=KernelPreference.EMULATED,
                             scale_calculation_mode=ScaleCalculationMode.RCEIL)
    try:
        lin(torch.randn(32, 70))
    except AssertionError as e:
        check("must be divisible by block_size 32" in str(e), str(e))
    else:
        raise AssertionError("torchao accepted in_features 70: compare ragged shapes too")
    y = mxt.MXLinear(70, 32, bias=False)(torch.randn(33, 70))
    check(y.shape == (33, 32), "mxtrain ragged shape")
    print("ragged: torchao refuses in_features 70 (to_mx's divisibility assertion); mxtrain runs")


def main():
    torch.set_num_threads(2)
    for isa in mxtrain.info()["supported_isas"]:
        mxtrain.set_isa(isa)
        try:
            print(f"-- kernel path {isa}")
            compare("e4m3", "mxfp8", bias=True, seed=1)
            compare("e4m3", "mxfp8", bias=False, seed=2)
            compare("e5m2", "mxfp8-e5m2grad", bias=False, seed=3)
        finally:
            mxtrain.set_isa(None)
    test_bf16()
    test_ragged_refused()
    print("test_xcheck_linear: all checks passed")


if __name__ == "__main__":
    main()
