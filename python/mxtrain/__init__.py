"""mxtrain: MX (OCP microscaling) quantization, the MX GEMM and the quantized Linear layer of
the mxtrain engine, on NumPy arrays.

    quantize(x, recipe="mxfp8", elem=None, scale_rounding=None) -> dict of uint8 arrays
    dequantize(q, recipe="mxfp8", elem=None, layout=None)        -> float32 array
    matmul(x, w, recipe="mxfp8", elem=None, scale_rounding=None) -> float32 x·wᵀ
    Linear(in_features, out_features, bias=False, recipe="mxfp8", defer_backward_quant=False)
    recipes() -> list of dicts (as `mxtrain recipes --json`)
    info()    -> dict (as `mxtrain info --json`)
    encode(x, format) / decode(codes, format) -> one value at a time: e4m3, e5m2, e8m0, bf16
    set_isa(name or None), active_isa()
    Error     -> raised for errors the engine reports (a RuntimeError)

mxtrain.torch (imported separately; needs PyTorch) has mx_linear and MXLinear.
See docs/python.md.
"""

import json as _json

from ._mxtrain import (Error, Linear, LinearState, active_isa, decode, dequantize, encode,
                       matmul, quantize, set_isa)
from . import _mxtrain

__all__ = ["Error", "Linear", "LinearState", "active_isa", "decode", "dequantize", "encode",
           "info", "matmul", "quantize", "recipes", "set_isa"]


def info():
    """What `mxtrain info --json` prints: CPU features, kernel paths, OpenMP threads."""
    return _json.loads(_mxtrain._info_json())


def recipes():
    """The registered recipes, as `mxtrain recipes --json` prints them (registration order)."""
    return _json.loads(_mxtrain._recipes_json())
