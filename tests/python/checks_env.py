"""tests/python/checks_env.py — the packages a Python test needs from the cross-check
environment (requirements.txt, made by scripts/pyenv.sh).

`require("torch", "torchao")` imports them and returns the modules. When one is missing the
test reports "skipped" (exit 77, CTest's SKIP_RETURN_CODE), unless MXTRAIN_REQUIRE_CHECKS=1
(CTest sets it when the build was configured with the environment's interpreter,
MXTRAIN_CHECK_PYTHON): then a missing package is a failure, so no cross-check is skipped on a
machine where the environment installed.
"""

import importlib
import os
import sys

SKIP = 77


def require(*names):
    mods = []
    for name in names:
        try:
            mods.append(importlib.import_module(name))
        except ImportError as e:
            msg = (f"{name} is not importable ({e}); scripts/pyenv.sh makes the environment "
                   f"that has it (requirements.txt)")
            if os.environ.get("MXTRAIN_REQUIRE_CHECKS") == "1":
                print(f"FAIL: {msg}", file=sys.stderr)
                sys.exit(1)
            print(f"SKIP: {msg}")
            sys.exit(SKIP)
    return mods[0] if len(mods) == 1 else mods
