"""mxtrain.torch — PyTorch bridge: a Linear layer whose forward, dgrad and wgrad run in the
engine's quantized Linear (the numerics of `mxtrain train`).

    mx_linear(x, weight, bias=None, recipe="mxfp8", defer_backward_quant=False)
    MXLinear(in_features, out_features, bias=True, recipe="mxfp8", defer_backward_quant=False)
    MXLinear.from_linear(torch.nn.Linear, recipe="mxfp8")

x is [..., in] on the CPU (any float dtype; the engine works in FP32 at the layer boundary:
x is converted to float32, y is returned in x's dtype, gradients in their inputs' dtypes).
Forward calls the engine's Linear::forward, backward its Linear::backward; each weight
tensor gets its own engine layer, which re-quantizes the weight only when its values change.
One backward per forward, first derivatives only: a second backward through the same call
(retain_graph=True) and double backward (create_graph=True, then differentiating the
gradient) raise a RuntimeError saying so. See docs/python.md.
"""

import math
import threading
import weakref

import torch as _torch

from . import _mxtrain

__all__ = ["mx_linear", "MXLinear"]


def _f32(t, what):
    """t as a contiguous float32 CPU tensor (t itself, detached, when it already is one)."""
    if t.device.type != "cpu":
        raise ValueError(f"{what} must be on the CPU, got device {t.device}")
    if not t.is_floating_point():
        raise TypeError(f"{what} must be a floating-point tensor, got {t.dtype}")
    return t.detach().to(_torch.float32).contiguous()


class _MXLinearFunction(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        if x.dim() < 1 or x.shape[-1] != layer.in_features:
            raise ValueError(f"x has shape {tuple(x.shape)}, the layer takes [..., "
                             f"{layer.in_features}]")
        layer.set_weight(_f32(weight, "weight").numpy())
        if bias is not None:
            layer.set_bias(_f32(bias, "bias").numpy())
        x2 = _f32(x.reshape(-1, layer.in_features), "x")
        y, state = layer.forward(x2.numpy())
        ctx.layer, ctx.state, ctx.x_shape, ctx.x_dtype = layer, state, x.shape, x.dtype
        # With defer_backward_quant the engine reads x2 again in backward: saving it lets torch
        # refuse a backward after x was modified in place (x2 shares x's version counter when
        # it is a view of x).
        ctx.save_for_backward(weight, bias, x2 if layer.defer_backward_quant else None)
        return _torch.from_numpy(y).reshape(*x.shape[:-1], layer.out_features).to(x.dtype)

    @staticmethod
    @_torch.autograd.function.once_differentiable  # no second derivative: torch says so
    def backward(ctx, dy):
        if ctx.state is None:  # retain_graph=True and a second backward through this call
            raise RuntimeError(
                "mxtrain.torch: a second backward through the same MXLinear call; the engine "
                "frees what it saved for backward after the first one, so run the forward "
                "again (retain_graph=True cannot keep it)")
        weight, bias, _ = ctx.saved_tensors  # raises if any was modified in place
        layer = ctx.layer
        # Unchanged since forward (torch checked), so this only compares; if the layer's
        # weight were another one now, backward would raise mxtrain.Error.
        layer.set_weight(_f32(weight, "weight").numpy())
        dy2 = _f32(dy.reshape(-1, layer.out_features), "dy").numpy()
        dx, dw, db = layer.backward(ctx.state, dy2, bool(ctx.needs_input_grad[0]))
        ctx.state = None
        gx = _torch.from_numpy(dx).reshape(ctx.x_shape).to(ctx.x_dtype) if dx is not None else None
        gw = _torch.from_numpy(dw).to(weight.dtype) if ctx.needs_input_grad[1] else None
        gb = (_torch.from_numpy(db).to(bias.dtype)
              if bias is not None and ctx.needs_input_grad[2] else None)
        return gx, gw, gb, None


# id(weight) -> (weak reference to weight, {(recipe, defer, bias, in, out): layer}). Keyed by
# id, not by the tensor: a WeakKeyDictionary would compare tensors with ==, which torch
# makes elementwise.
_layers_lock = threading.RLock()  # re-entrant: a finalizer may run inside the lock
_layers = {}


def _drop_layers(key):
    with _layers_lock:
        entry = _layers.get(key)
        if entry is not None and entry[0]() is None:
            del _layers[key]


def _layer_for(weight, has_bias, recipe, defer):
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    out_f, in_f = weight.shape
    key = (recipe, bool(defer), bool(has_bias), int(in_f), int(out_f))
    with _layers_lock:
        entry = _layers.get(id(weight))
        if entry is None or entry[0]() is not weight:
            entry = (weakref.ref(weight), {})
            _layers[id(weight)] = entry
            weakref.finalize(weight, _drop_layers, id(weight))
        layer = entry[1].get(key)
        if layer is None:
            layer = _mxtrain.Linear(int(in_f), int(out_f), bool(has_bias), recipe, bool(defer))
            entry[1][key] = layer
        return layer


def mx_linear(x, weight, bias=None, recipe="mxfp8", defer_backward_quant=False):
    """y = x·weightᵀ + bias with forward, dgrad and wgrad in the engine's quantized Linear.

    x [..., in], weight [out, in], bias [out] or None; all on the CPU. recipe: a registered
    recipe name (mxtrain.recipes()): "mxfp8", "mxfp8-32x32" or "bf16".
    """
    layer = _layer_for(weight, bias is not None, recipe, defer_backward_quant)
    return _MXLinearFunction.apply(x, weight, bias, layer)


class MXLinear(_torch.nn.Module):
    """torch.nn.Linear's interface and initialisation, computed by the engine's Linear."""

    def __init__(self, in_features, out_features, bias=True, recipe="mxfp8",
                 defer_backward_quant=False, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.recipe, self.defer_backward_quant = recipe, defer_backward_quant
        self.weight = _torch.nn.Parameter(_torch.empty(out_features, in_features, dtype=dtype))
        self.bias = (_torch.nn.Parameter(_torch.empty(out_features, dtype=dtype))
                     if bias else None)
        self._layer = _mxtrain.Linear(in_features, out_features, bias, recipe,
                                      defer_backward_quant)
        self.reset_parameters()

    def reset_parameters(self):  # as torch.nn.Linear
        _torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            _torch.nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_linear(cls, linear, recipe="mxfp8", defer_backward_quant=False):
        """An MXLinear with a copy of a torch.nn.Linear's weight and bias."""
        m = cls(linear.in_features, linear.out_features, linear.bias is not None, recipe,
                defer_backward_quant, dtype=linear.weight.dtype)
        with _torch.no_grad():
            m.weight.copy_(linear.weight)
            if linear.bias is not None:
                m.bias.copy_(linear.bias)
        return m

    def forward(self, x):
        return _MXLinearFunction.apply(x, self.weight, self.bias, self._layer)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, recipe={self.recipe!r}"
                + (", defer_backward_quant=True" if self.defer_backward_quant else ""))

    def __getstate__(self):  # the engine layer is rebuilt, not pickled / deep-copied
        state = self.__dict__.copy()
        state.pop("_layer", None)
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        self._layer = _mxtrain.Linear(self.in_features, self.out_features,
                                      self.bias is not None, self.recipe,
                                      self.defer_backward_quant)
