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


def no_compiler_environment(bin_dir, **extra) -> dict:
    """The environment of a process with no compiler, as on a device: ``PATH`` holds a link to
    qemu-hexagon in ``bin_dir`` and nothing else (no clang-19, ld.lld-19 or hexrpc tool), and the
    bench's DSP shell, built here with the tools (``hexrpc.bench_shell()``), is named by
    ``HEXRPC_BENCH_SHELL``; ``extra`` variables are added."""
    import hexrpc

    shell = hexrpc.bench_shell()
    os.symlink(shutil.which("qemu-hexagon"), os.path.join(bin_dir, "qemu-hexagon"))
    env = {k: v for k, v in os.environ.items() if k in ("HOME", "LD_LIBRARY_PATH", "PYTHONPATH", "LANG")}
    env.update(PATH=str(bin_dir), HEXRPC_BENCH_SHELL=str(shell), HEXRPC_LOG="warn", **extra)
    for tool in ("clang-19", "ld.lld-19", "hexrpc"):
        assert shutil.which(tool, path=env["PATH"]) is None, tool
    return env
