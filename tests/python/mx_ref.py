"""tests/python/mx_ref.py — helpers shared by the Python tests: where the built `mxtrain`
program is, running it, an independent NumPy decoder of MX data, and the FP32 summation
error bound the GEMM comparisons use.

The decoder follows docs/numerics.md directly (E4M3 / E5M2 code tables, value =
code · 2^(scale − 127), NaN for a 0xFF scale) in float64, so it shares no code with the
engine's dequantize.
"""

import os
import subprocess
import sys

import numpy as np

SKIP = 77  # CTest SKIP_RETURN_CODE for these scripts


def mxtrain_bin():
    path = os.environ.get("MXTRAIN_BIN")
    if not path or not os.access(path, os.X_OK):
        sys.exit("MXTRAIN_BIN must name the built mxtrain program (CTest sets it)")
    return path


def run_cli(*args, env=None, check=True):
    """Runs `mxtrain ARGS...`; returns (returncode, stdout, stderr)."""
    p = subprocess.run([mxtrain_bin(), *map(str, args)], capture_output=True, text=True,
                       env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"mxtrain {' '.join(map(str, args))} failed: {p.stderr}")
    return p.returncode, p.stdout, p.stderr


def _code_table(elem):
    t = np.empty(256, dtype=np.float64)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        if elem == "e4m3":
            e, m = (b >> 3) & 0xF, b & 7
            if e == 15 and m == 7:
                v = np.nan
            elif e == 0:
                v = m * 2.0 ** -9
            else:
                v = (1 + m / 8) * 2.0 ** (e - 7)
        else:
            e, m = (b >> 2) & 0x1F, b & 3
            if e == 31:
                v = np.inf if m == 0 else np.nan
            elif e == 0:
                v = m * 2.0 ** -16
            else:
                v = (1 + m / 4) * 2.0 ** (e - 15)
        t[b] = s * v
    return t


TABLES = {"e4m3": _code_table("e4m3"), "e5m2": _code_table("e5m2")}


def expand_scales(scale, rows, cols, layout):
    """The scale byte of every element, [rows, cols]."""
    if layout == "rowwise":
        return np.repeat(scale, 32, axis=1)[:, :cols]
    if layout == "colwise":
        return np.repeat(scale, 32, axis=0)[:rows, :]
    return np.repeat(np.repeat(scale, 32, axis=0), 32, axis=1)[:rows, :cols]


def decode(data, scale, elem, layout):
    """float64 values of MX data (NaN where the scale is 0xFF)."""
    s = expand_scales(scale, *data.shape, layout).astype(np.int64)
    v = TABLES[elem][data] * np.exp2((s - 127).astype(np.float64))
    v[s == 255] = np.nan
    return v


def gamma(n):
    """γ_n = n·u / (1 − n·u), u = 2^-24: the standard bound for summing n exact FP32 products
    in any order (each of the at most n additions rounds once, relative error ≤ u), so the
    result is within γ_n · Σ|a_i b_i| of the exact sum."""
    u = 2.0 ** -24
    return n * u / (1 - n * u)


def assert_within_sum_bound(got, a, b, what):
    """got ≈ a·b where a·b is a sum of exactly representable FP32 products (MX/BF16 values
    expanded to BF16: 8-bit significands multiply exactly in FP32)."""
    exact = a @ b  # float64: its own rounding is within n·2^-53 · Σ|a_i b_i|, added below
    n = a.shape[1]
    bound = (gamma(n) + n * 2.0 ** -52) * (np.abs(a) @ np.abs(b))
    err = np.abs(got.astype(np.float64) - exact)
    worst = np.max(err - bound)
    assert worst <= 0, f"{what}: error exceeds the FP32 summation bound by {worst:g}"


def cosine(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
