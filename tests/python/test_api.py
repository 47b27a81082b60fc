"""tests/python/test_api.py — the rest of the `mxtrain` module: error types and messages,
info() / recipes() against `mxtrain info --json` / `mxtrain recipes --json`, matmul against
the dequantized operands, the Linear class, and that the GIL is released while kernels run.
Run by CTest as python_test_api.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading

import numpy as np

import mxtrain
from mx_ref import assert_within_sum_bound, decode, run_cli


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def raises(exc_type, fn, *args, contains=None, equals=None, **kw):
    try:
        fn(*args, **kw)
    except exc_type as e:
        msg = str(e)
        check(contains is None or contains in msg, f"message lacks {contains!r}: {msg!r}")
        check(equals is None or msg == equals, f"message {msg!r} != {equals!r}")
        return msg
    except Exception as e:  # noqa: BLE001 - report the wrong type
        raise AssertionError(f"expected {exc_type.__name__}, got {type(e).__name__}: {e}")
    raise AssertionError(f"expected {exc_type.__name__}, nothing was raised")


def cli_error(*args):
    """The message `mxtrain ARGS` prints after 'error: ' (and it fails)."""
    rc, _, err = run_cli(*args, check=False)
    check(rc == 1 and err.startswith("error: "), f"CLI did not fail cleanly: {rc} {err!r}")
    return err[len("error: "):].rstrip("\n")


def test_errors(tmp):
    x = np.ones((4, 40), np.float32)
    xin = os.path.join(tmp, "x.npy")
    np.save(xin, x)
    out = os.path.join(tmp, "q")
    # Names: ValueError with the engine's own message (the CLI prints the same text).
    raises(ValueError, mxtrain.quantize, x, recipe="mxfp9",
           equals=cli_error("quantize", "--input", xin, "--recipe", "mxfp9", "--out-dir", out))
    raises(ValueError, mxtrain.quantize, x, elem="e3m4",
           equals=cli_error("quantize", "--input", xin, "--recipe", "mxfp8", "--elem", "e3m4",
                            "--out-dir", out))
    raises(ValueError, mxtrain.quantize, x, scale_rounding="up",
           equals=cli_error("quantize", "--input", xin, "--recipe", "mxfp8",
                            "--scale-rounding", "up", "--out-dir", out))
    m = raises(ValueError, mxtrain.quantize, x, recipe="mxfp9", contains="registered recipes")
    for name in (r["name"] for r in mxtrain.recipes()):
        check(name in m, f"unknown-recipe message does not list {name}: {m}")
    raises(ValueError, mxtrain.quantize, x, recipe="bf16", contains="does not quantize")
    raises(ValueError, mxtrain.Linear, 8, 8, False, "nope", contains="unknown recipe 'nope'")
    raises(ValueError, mxtrain.Linear, 0, 8, contains="in and out must be >= 1")
    raises(ValueError, mxtrain.Linear, 8, 8, False, "bf16", True,
           contains="defer_backward_quant needs a quantized recipe")
    # Arrays: type problems are TypeError, shape/layout problems ValueError.
    raises(TypeError, mxtrain.quantize, x.astype(np.float64), contains="float32")
    raises(TypeError, mxtrain.quantize, x.astype(np.int32), contains="got int32")
    raises(TypeError, mxtrain.quantize, x.astype(">f4"), contains="float32")
    raises(TypeError, mxtrain.quantize, [[1.0, 2.0]], contains="numpy.ndarray, got list")
    raises(TypeError, mxtrain.quantize, x, elem=3)
    raises(TypeError, mxtrain.quantize, x, recipe=None)
    raises(ValueError, mxtrain.quantize, np.ones((2, 3, 4), np.float32), contains="2-D")
    raises(ValueError, mxtrain.quantize, np.ones(5, np.float32), contains="2-D")
    raises(ValueError, mxtrain.quantize, np.ones((0, 4), np.float32), contains="empty")
    raises(ValueError, mxtrain.quantize, x[:, ::2], contains="C-contiguous")
    raises(ValueError, mxtrain.quantize, x.T, contains="C-contiguous")
    q = mxtrain.quantize(x)
    raises(ValueError, mxtrain.dequantize, q, layout="tile", contains="valid: rowwise, colwise")
    raises(ValueError, mxtrain.dequantize, q, recipe="mxfp8-32x32", contains="no 'data' array")
    bad = dict(q, rowwise_scale=q["rowwise_scale"][:, :1].copy())
    raises(ValueError, mxtrain.dequantize, bad, contains="(4, 2) scale grid")
    raises(TypeError, mxtrain.dequantize, dict(q, rowwise=q["rowwise"].astype(np.int16)),
           contains="uint8")
    raises(TypeError, mxtrain.dequantize, [q], contains="dict")
    raises(ValueError, mxtrain.matmul, x, np.ones((3, 41), np.float32), contains="[N, K]")
    raises(ValueError, mxtrain.matmul, x, x, recipe="bf16", elem="e5m2", contains="do not apply")
    raises(ValueError, mxtrain.set_isa, "sse2", contains="sse2")
    # Engine errors raised inside the library: mxtrain.Error, a RuntimeError.
    check(issubclass(mxtrain.Error, RuntimeError), "mxtrain.Error is not a RuntimeError")
    lin = mxtrain.Linear(40, 8, recipe="mxfp8")
    lin.set_weight(np.ones((8, 40), np.float32))
    _, st = lin.forward(x)
    lin.set_weight(np.full((8, 40), 2, np.float32))
    raises(mxtrain.Error, lin.backward, st, np.ones((4, 8), np.float32),
           contains="weight changed between forward and backward")
    lin.set_weight(np.ones((8, 40), np.float32))  # another version: still refused
    raises(mxtrain.Error, lin.backward, st, np.ones((4, 8), np.float32), contains="version")
    _, st = lin.forward(x)
    raises(ValueError, lin.backward, st, np.ones((5, 8), np.float32), contains="(4, 8)")
    lin.backward(st, np.ones((4, 8), np.float32))
    raises(ValueError, lin.backward, st, np.ones((4, 8), np.float32), contains="already used")
    raises(ValueError, lin.forward, np.ones((4, 41), np.float32), contains="[T, 40]")
    raises(ValueError, lin.set_weight, np.ones((40, 8), np.float32), contains="[out, in]")
    raises(ValueError, lin.set_bias, np.ones(8, np.float32), contains="without a bias")


def test_info_and_recipes():
    _, out, _ = run_cli("info", "--json")
    check(mxtrain.info() == json.loads(out), "info() differs from `mxtrain info --json`")
    _, out, _ = run_cli("recipes", "--json")
    check(mxtrain.recipes() == json.loads(out), "recipes() differs from `mxtrain recipes --json`")
    # Under another kernel path and thread count, in a fresh process for both.
    env = dict(os.environ, MXTRAIN_ISA="scalar", OMP_NUM_THREADS="1")
    _, out, _ = run_cli("info", "--json", env=env)
    py = subprocess.run([sys.executable, "-c", "import json, mxtrain; print(json.dumps(mxtrain.info()))"],
                        capture_output=True, text=True, env=env, check=True).stdout
    got = json.loads(py)
    check(got == json.loads(out), "info() differs from the CLI under MXTRAIN_ISA=scalar")
    check(got["active_isa"] == "scalar" and got["omp_max_threads"] == 1,
          f"environment not honoured: {got['active_isa']}, {got['omp_max_threads']}")


def test_matmul():
    rng = np.random.default_rng(5)
    M, K, N = 37, 161, 45
    x = (rng.standard_normal((M, K)) * np.exp2(rng.integers(-8, 8, (M, 1)))).astype(np.float32)
    w = (rng.standard_normal((N, K)) * 0.05).astype(np.float32)
    for recipe, wl in (("mxfp8", "rowwise"), ("mxfp8-32x32", "tile")):
        for elem in (None, "e5m2"):
            e = elem or "e4m3"
            y = mxtrain.matmul(x, w, recipe=recipe, elem=elem)
            check(y.dtype == np.float32 and y.shape == (M, N), f"matmul shape {y.shape}")
            qx = mxtrain.quantize(x, recipe="mxfp8", elem=e)
            qw = mxtrain.quantize(w, recipe=recipe, elem=e)
            xd = decode(qx["rowwise"], qx["rowwise_scale"], e, "rowwise")
            wd = (decode(qw["data"], qw["scale"], e, "tile") if wl == "tile"
                  else decode(qw["rowwise"], qw["rowwise_scale"], e, "rowwise"))
            assert_within_sum_bound(y, xd, wd.T, f"matmul {recipe} {e}")
    # FP32-scaled recipes: the product of their own copies (blockwise: x rowwise 1x128 and W's
    # 128x128 tiles; fp8-current: one scale per tensor), and the Linear forward's bytes.
    for recipe in ("blockwise", "fp8-current"):
        y = mxtrain.matmul(x, w, recipe=recipe)
        qx = mxtrain.quantize(x, recipe=recipe, role="input")
        qw = mxtrain.quantize(w, recipe=recipe, role="weight")
        xd = mxtrain.dequantize(qx, recipe=recipe, layout="rowwise" if recipe == "blockwise"
                                else None).astype(np.float64)
        wd = mxtrain.dequantize(qw, recipe=recipe, layout="tile" if recipe == "blockwise"
                                else None).astype(np.float64)
        assert_within_sum_bound(y, xd, wd.T, f"matmul {recipe}")
        lin = mxtrain.Linear(K, N, recipe=recipe)
        lin.set_weight(w)
        check(np.array_equal(lin.forward(x)[0], y), f"matmul {recipe} differs from Linear.forward")
    raises(ValueError, mxtrain.matmul, x, w, recipe="blockwise", scale_rounding="floor",
           contains="applies to MX recipes")
    y = mxtrain.matmul(x, w, recipe="bf16")
    xb = (x.view(np.uint32) + 0x7FFF + ((x.view(np.uint32) >> 16) & 1)) & 0xFFFF0000
    wb = (w.view(np.uint32) + 0x7FFF + ((w.view(np.uint32) >> 16) & 1)) & 0xFFFF0000
    assert_within_sum_bound(y, xb.view(np.float32).astype(np.float64),
                            wb.view(np.float32).astype(np.float64).T, "matmul bf16")


def test_gil_released():
    """While one thread is inside a long kernel call, another thread runs Python code.

    The switch interval is raised to 10 s, so the interpreter itself does not preempt the
    kernel's thread within the test; the main thread wakes from its wait and finds the
    kernel still running only if the binding released the GIL."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1024, 2048)).astype(np.float32)
    w = rng.standard_normal((2048, 2048)).astype(np.float32)
    lin = mxtrain.Linear(2048, 2048, recipe="mxfp8")
    lin.set_weight(w)
    calls = {"matmul": lambda: mxtrain.matmul(x, w), "Linear.forward": lambda: lin.forward(x)}
    old = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    try:
        for name, call in calls.items():
            state = {"done": False}
            started = threading.Event()

            def worker():
                started.set()
                call()
                state["done"] = True

            t = threading.Thread(target=worker)
            t.start()
            started.wait()
            seen_running = not state["done"]
            t.join()
            check(seen_running, f"{name} held the GIL for the whole call")
    finally:
        sys.setswitchinterval(old)


def test_linear_class():
    rng = np.random.default_rng(9)
    T, I, O = 70, 96, 40
    x = rng.standard_normal((T, I)).astype(np.float32)
    w = (rng.standard_normal((O, I)) * 0.1).astype(np.float32)
    b = rng.standard_normal(O).astype(np.float32)
    lin = mxtrain.Linear(I, O, bias=True, recipe="mxfp8")
    check(lin.set_weight(w) and not lin.set_weight(w.copy()), "set_weight change detection")
    check(lin.weight_version == 1, f"weight_version {lin.weight_version}")
    lin.set_bias(b)
    y1, s1 = lin.forward(x)
    y2, s2 = lin.forward(x)  # two outstanding forwards, one weight quantization
    check(np.array_equal(y1, y2) and lin.weight_quantizations == 1, "weight reuse")
    dy = rng.standard_normal((T, O)).astype(np.float32)
    dx, dw, db = lin.backward(s1, dy)
    dx2, dw2, db2 = lin.backward(s2, dy, need_dx=False)
    check(dx2 is None and np.array_equal(dw, dw2) and np.array_equal(db, db2),
          "dW / db are per call, not accumulated")
    check(dx.shape == (T, I) and dw.shape == (O, I) and db.shape == (O,), "gradient shapes")
    check(np.allclose(db, dy.sum(0, dtype=np.float64), rtol=1e-5, atol=1e-5), "db = Σ dy")
    lin.set_weight(w * 2)
    lin.forward(x)
    check(lin.weight_quantizations == 2 and lin.weight_version == 2, "re-quantized on change")


def test_linear_sizes():
    # Element counts that overflow, and sizes no machine holds, are mxtrain.Error (a
    # RuntimeError) naming the parameter: never a wrapped count, never a bare MemoryError.
    raises(mxtrain.Error, mxtrain.Linear, 1 << 40, 1 << 40,
           contains="parameter `python.weight`: its shape has more than 2^48 elements")
    raises(mxtrain.Error, mxtrain.Linear, 1 << 20, 1 << 20,
           contains="parameter `python.weight`: its value and gradient need 8192 GiB")
    check(mxtrain.Linear(40, 8).out_features == 8, "a small layer still builds")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="mxt_py_api_") as tmp:
        test_errors(tmp)
    test_info_and_recipes()
    test_matmul()
    test_linear_class()
    test_linear_sizes()
    test_gil_released()
    print("test_api: all passed")
