"""tests/python/test_example.py — runs examples/python/train_mxlinear.py for a few dozen steps
with each MX recipe; the example itself exits non-zero unless the loss halves. Exits 77
(CTest: skipped) when PyTorch is not importable (checks_env.py). Run by CTest as python_test_example.
"""

import os
import subprocess
import sys

from checks_env import require

torch = require("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "python", "train_mxlinear.py")

if __name__ == "__main__":
    for recipe in ("mxfp8", "mxfp8-32x32"):
        p = subprocess.run([sys.executable, EXAMPLE, "--steps", "60", "--recipe", recipe],
                           capture_output=True, text=True)
        print(p.stdout, p.stderr, sep="")
        if p.returncode != 0:
            sys.exit(f"train_mxlinear.py --recipe {recipe} failed ({p.returncode})")
    print("test_example: all passed")
