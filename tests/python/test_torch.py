"""tests/python/test_torch.py — mxtrain.torch: mx_linear / MXLinear against the engine's
quantized numerics and against exact FP32 gradients. Exits 77 (CTest: skipped) when PyTorch
is not importable (checks_env.py). Run by CTest as python_test_torch.

Tolerances:
- forward: y equals dequantize(x)·dequantize(W)ᵀ up to FP32 summation order. The MX values
  expand exactly to BF16 and their products are exact in FP32, so any summation order is
  within γ_K · (|x̂|·|Ŵ|ᵀ) of the exact sum (mx_ref.assert_within_sum_bound).
- dgrad / wgrad: likewise equal to the products of the quantized operands the recipe
  prescribes (dy rowwise · W colwise or tile; dyᵀ colwise · x colwise) within γ_K.
- against exact FP64 gradients of the unquantized layer: cosine similarity > 0.99
  (E4M3 rounds each element by at most 2^-4 relative, so the cosine of a random-data
  gradient stays far above that; measured values are printed).
"""

import copy
import sys

from checks_env import require

torch = require("torch")

import numpy as np

import mxtrain
import mxtrain.torch as mxt
from mx_ref import assert_within_sum_bound, cosine, decode

COSINE_MIN = 0.99


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def deq(a, recipe_layout, elem="e4m3"):
    """Quantize a float32 numpy array and decode the requested copy independently."""
    recipe, layout = recipe_layout
    q = mxtrain.quantize(np.ascontiguousarray(a, np.float32), recipe=recipe, elem=elem)
    if layout == "tile":
        return decode(q["data"], q["scale"], elem, "tile")
    return decode(q[layout], q[layout + "_scale"], elem, layout)


def test_numerics():
    torch.manual_seed(0)
    T, I, O = 75, 130, 66
    for recipe in ("mxfp8", "mxfp8-32x32"):
        wl = "tile" if recipe == "mxfp8-32x32" else None
        for defer in (False, True):
            x = (torch.randn(T, I) * torch.exp2(torch.randint(-6, 6, (T, 1)).float()))
            w = torch.randn(O, I) * 0.1
            x.requires_grad_(True)
            w.requires_grad_(True)
            y = mxt.mx_linear(x, w, recipe=recipe, defer_backward_quant=defer)
            xn, wn = x.detach().numpy(), w.detach().numpy()
            what = f"{recipe} defer={defer}"
            assert_within_sum_bound(y.detach().numpy(), deq(xn, ("mxfp8", "rowwise")),
                                    deq(wn, (recipe, wl or "rowwise")).T, f"forward {what}")
            g = torch.randn(T, O)
            y.backward(g)
            gn = g.numpy()
            check(x.grad.shape == x.shape and w.grad.shape == w.shape, "gradient shapes")
            assert_within_sum_bound(x.grad.numpy(), deq(gn, ("mxfp8", "rowwise")),
                                    deq(wn, (recipe, wl or "colwise")), f"dgrad {what}")
            assert_within_sum_bound(w.grad.numpy(), deq(gn, ("mxfp8", "colwise")).T,
                                    deq(xn, ("mxfp8", "colwise")), f"wgrad {what}")
            # Against the exact gradients of the unquantized layer.
            x64, w64, g64 = (t.detach().double() for t in (x, w, g))
            cx = cosine(x.grad, g64 @ w64)
            cw = cosine(w.grad, g64.T @ x64)
            cy = cosine(y.detach(), x64 @ w64.T)
            print(f"{what}: cosine y {cy:.5f} dx {cx:.5f} dW {cw:.5f}")
            check(min(cx, cw, cy) > COSINE_MIN, f"{what}: cosine below {COSINE_MIN}")


def test_bias_bf16_and_shapes():
    torch.manual_seed(1)
    lin = torch.nn.Linear(48, 20)
    m = mxt.MXLinear.from_linear(lin, recipe="mxfp8")
    check(torch.equal(m.weight, lin.weight) and torch.equal(m.bias, lin.bias), "from_linear")
    x = torch.randn(3, 5, 48, requires_grad=True)
    y = m(x)
    check(y.shape == (3, 5, 20), f"3-D input: {tuple(y.shape)}")
    y.square().sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    y2 = lin(x2)
    y2.square().sum().backward()
    for name, a, b in (("y", y, y2), ("dx", x.grad, x2.grad), ("dW", m.weight.grad, lin.weight.grad),
                       ("db", m.bias.grad, lin.bias.grad)):
        c = cosine(a.detach(), b.detach())
        check(a.shape == b.shape and c > COSINE_MIN, f"MXLinear {name}: cosine {c}")
    # The bias is added in FP32 after the product and db = Σ dy.
    xb = torch.randn(7, 48)
    nob = mxt.mx_linear(xb, lin.weight.detach())
    withb = mxt.mx_linear(xb, lin.weight.detach(), lin.bias.detach())
    check(torch.equal(withb, nob + lin.bias.detach()), "bias is not added in FP32")
    # BF16 tensors in and out (the engine works in FP32 at the boundary).
    xh = torch.randn(6, 48).bfloat16().requires_grad_(True)
    yh = m(xh)
    yh.float().sum().backward()
    check(yh.dtype == torch.bfloat16 and xh.grad.dtype == torch.bfloat16, "bf16 dtypes")
    # Only what is asked for: no dx when x does not require grad.
    m.zero_grad()
    m(torch.randn(6, 48)).sum().backward()
    check(m.weight.grad is not None and m.bias.grad is not None, "dW / db missing")
    # The bf16 recipe runs too, close to FP32.
    mb = mxt.MXLinear.from_linear(lin, recipe="bf16")
    c = cosine(mb(xb).detach(), lin(xb).detach())
    check(c > 0.9999, f"bf16 recipe cosine {c}")
    # A deep copy gets its own engine layer and the same results.
    mc = copy.deepcopy(m)
    check(torch.equal(mc(xb), m(xb)) and mc._layer is not m._layer, "deepcopy")
    try:
        mxt.mx_linear(torch.randn(4, 47), lin.weight)
    except ValueError as e:
        check("[..., 48]" in str(e), str(e))
    else:
        raise AssertionError("wrong in_features accepted")


def test_weight_reuse_and_updates():
    torch.manual_seed(2)
    m = mxt.MXLinear(64, 32, bias=False, recipe="mxfp8")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(16, 64)
    for _ in range(3):  # three micro-batches: the weight is quantized once
        m(x).sum().backward()
    check(m._layer.weight_quantizations == 1, f"{m._layer.weight_quantizations} quantizations")
    opt.step()
    y = m(x)
    check(m._layer.weight_quantizations == 2, "the step's new weight was not re-quantized")
    assert_within_sum_bound(y.detach().numpy(), deq(x.numpy(), ("mxfp8", "rowwise")),
                            deq(m.weight.detach().numpy(), ("mxfp8", "rowwise")).T,
                            "forward after the update")
    # The functional form keeps one engine layer per weight tensor: two forwards with
    # different weights, then both backwards, give what each gives alone.
    w1, w2 = torch.randn(8, 64, requires_grad=True), torch.randn(8, 64, requires_grad=True)
    xa = x.clone().requires_grad_(True)
    ya, yb = mxt.mx_linear(xa, w1), mxt.mx_linear(xa, w2)
    (ya.sum() + 2 * yb.sum()).backward()
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    mxt.mx_linear(x1, w1).sum().backward()
    (2 * mxt.mx_linear(x2, w2)).sum().backward()
    check(torch.equal(xa.grad, x1.grad + x2.grad), "interleaved calls: dx differs")
    check(torch.equal(w1.grad, w2.grad / 2), "dW = dyᵀ·x (dy doubled for w2)")
    # defer_backward_quant reads x again in backward: changing x in place is refused.
    xd = torch.randn(16, 64, requires_grad=True)
    xv = xd * 1.0
    y = mxt.mx_linear(xv, w1, defer_backward_quant=True)
    with torch.no_grad():
        xv.add_(1.0)
    try:
        y.sum().backward()
    except RuntimeError as e:
        check("modified by an inplace operation" in str(e), str(e))
    else:
        raise AssertionError("backward after an in-place change of x was accepted")



def test_one_backward_per_forward():
    """A second backward through one call (retain_graph=True) is a RuntimeError that says
    what to do, not a pybind11 signature dump; no second derivative is made up."""
    m = mxt.MXLinear(64, 32)
    x = torch.randn(4, 64, requires_grad=True)
    y = m(x)
    y.sum().backward(retain_graph=True)
    try:
        y.sum().backward()
    except RuntimeError as e:
        check("a second backward through the same MXLinear call" in str(e) and
              "run the forward again" in str(e), str(e))
    else:
        raise AssertionError("a second backward through one call was accepted")
    g, = torch.autograd.grad(m(x).sum(), x, create_graph=True)
    check(g.grad_fn is None, "the gradient claims a graph it does not have")


if __name__ == "__main__":
    torch.set_num_threads(2)
    test_numerics()
    test_bias_bf16_and_shapes()
    test_weight_reuse_and_updates()
    test_one_backward_per_forward()
    print("test_torch: all passed")
