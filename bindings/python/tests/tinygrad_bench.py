"""The set-up every tinygrad test module on HEXRPC shares: the bench with the executor
(``HEXRPC_BENCH=1``), tinygrad's CPU device compiling with clang-19 (tinygrad's default ``clang``
is named clang-19 on Debian), and a module-level skip, with the reason, when the executor's tools
(clang-19, ld.lld-19, qemu-hexagon), the ``hexrpc`` tool or tinygrad are missing."""

from __future__ import annotations

import os
import shutil

import pytest


def require_executor():
    """Sets the environment for the bench and returns the ``tinygrad`` module, or skips the
    calling module."""
    os.environ.setdefault("CC", "clang-19")
    os.environ.setdefault("HEXRPC_BENCH", "1")
    missing = [t for t in ("clang-19", "ld.lld-19", "qemu-hexagon") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"the bench executor needs {', '.join(missing)} (not found on PATH)", allow_module_level=True)
    if not (os.environ.get("HEXRPC_CLI") or shutil.which("hexrpc")):
        pytest.skip("the hexrpc tool was not found (set HEXRPC_CLI or put `hexrpc` on PATH)", allow_module_level=True)
    return pytest.importorskip("tinygrad")


def both(fn, *arrays):
    """Runs ``fn`` on tensors made from ``arrays`` on CPU and on HEXRPC; returns both results
    (numpy arrays), CPU's first."""
    from tinygrad import Tensor

    out = []
    for device in ("CPU", "HEXRPC"):
        ts = [Tensor(a, device=device) for a in arrays]
        out.append(fn(*ts).numpy())
    return out[0], out[1]
