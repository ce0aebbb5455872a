"""A ``HEXRPC`` device for tinygrad 0.14: tinygrad's DSP kernels run through hexrpc.

After ``import hexrpc.tinygrad``, ``Device["HEXRPC"]`` and ``Tensor(..., device="HEXRPC")`` work.

How tinygrad finds it
    tinygrad 0.14 looks a device up by importing ``tinygrad.runtime.ops_<name>`` and taking the
    member named ``<NAME>Device`` (``tinygrad/device.py``, ``_Device.get_class``). Importing this
    module registers it in ``sys.modules`` under ``tinygrad.runtime.ops_hexrpc`` (and as the
    attribute ``ops_hexrpc`` of the ``tinygrad.runtime`` package), so the lookup finds
    :class:`HEXRPCDevice`. Nothing is written into tinygrad's installation; the registration lasts
    for the process. Child processes (tinygrad's parallel compile workers) import this module
    again through :class:`HEXRPCCompiler`'s module path, which registers it there too.

Where it runs (read when the device is first opened)
    ``HEXRPC_BENCH=1``
        hexrpc's bench with the executor: the simulated ION + adsprpc kernel, and the generated
        entries and tinygrad's kernels compiled for Hexagon and run under qemu-hexagon. Needs
        clang-19, ld.lld-19 and qemu-hexagon. Timings are *simulated* (the bench's cost model),
        never device figures.
    otherwise
        the device's ``/dev/ion`` and ``/dev/adsprpc-smd`` with the board ``HEXRPC_BOARD``
        (``comma-three``, ``msm-android``, ...); unset, hexrpc picks the board by probing.

The pieces
    * :class:`HEXRPCRenderer`: tinygrad's ``DSPRenderer`` (HVX vector types, 128-byte alignment
      attributes, no threads) for the kernel function; instead of tinygrad's v1 ``entry`` the
      source ends with a one-line record of the kernel's name and hexrpc signature. hexrpc
      generates its v2 entry from that record when the library is built, so views at non-zero
      offsets (which tinygrad's memory planner hands out) are mapped correctly.
    * :class:`HEXRPCCompiler`: ``hexrpc build-lib`` with tinygrad's DSP flags (hexagonv65, HVX
      128 B, ``-O2 -Wall -Werror -fno-stack-protector``); results cached by tinygrad's disk cache
      under a key that names the hexrpc tool's version.
    * :class:`HEXRPCAllocator`: one ION lease per tinygrad buffer; ``_offset`` gives a view
      (lease, offset, length) of the same lease; copies go through the lease's host mapping.
    * :class:`HEXRPCProgram`: one hexrpc launch (one FastRPC call) per kernel call; returns the DSP
      time in seconds.
    * :class:`HEXRPCGraph`: runs the kernels of a ``TinyJit`` capture as one batch, one FastRPC
      call per jit run.

Memory shared with the DSP changes under the host while a kernel runs; tinygrad only reads a
buffer after the launch that writes it has returned (every launch here is synchronous).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinygrad.device import Allocator, BufferSpec, Compiled, Compiler, CompileError, Program, TinyELF
from tinygrad.dtype import AddrSpace, DType, dtypes
from tinygrad.helpers import Target
from tinygrad.renderer.cstyle import ClangRenderer
from tinygrad.runtime.ops_dsp import DSPRenderer

__all__ = [
    "HEXRPCDevice",
    "HEXRPCRenderer",
    "HEXRPCCompiler",
    "HEXRPCAllocator",
    "HEXRPCProgram",
    "KernelRecord",
    "hexrpc_signature",
]

# -------------------------------------------------------------------------------------------------
# Signatures

#: tinygrad scalar dtypes -> hexrpc signature kinds (runtime/src/launch/signature.rs).
_SCALAR_KINDS: dict[DType, str] = {
    dtypes.int8: "i8",
    dtypes.uint8: "u8",
    dtypes.int16: "i16",
    dtypes.uint16: "u16",
    dtypes.int32: "i32",
    dtypes.uint32: "u32",
    dtypes.int64: "i64",
    dtypes.uint64: "u64",
    dtypes.float16: "f16",
    dtypes.float32: "f32",
    dtypes.float64: "f64",
}


def _scalar_kind(dt: DType) -> str:
    # tinygrad's symbolic Variables have the abstract dtype `index`; the C renderer prints it as
    # `int` (ClangRenderer type_map), so it travels as i32.
    if dt == dtypes.index:
        return "i32"
    try:
        return _SCALAR_KINDS[dt.scalar()]
    except KeyError:
        raise CompileError(f"HEXRPC: a kernel scalar of dtype {dt} has no hexrpc signature kind") from None


def hexrpc_signature(kinds_in_order: list[tuple[bool, DType]]) -> str:
    """The hexrpc signature string (``"buf,buf,i32"``) of a kernel whose parameters are, in order,
    ``(is_buffer, dtype)``. Buffers must come first (the launch ABI numbers slots by parameter)."""
    out: list[str] = []
    seen_scalar = False
    for is_buf, dt in kinds_in_order:
        if is_buf:
            if seen_scalar:
                raise CompileError("HEXRPC: a buffer parameter after a scalar; hexrpc needs buffers first")
            out.append("buf")
        else:
            seen_scalar = True
            out.append(_scalar_kind(dt))
    return ",".join(out)


@dataclass(frozen=True)
class KernelRecord:
    """What the renderer records at the end of a kernel's source: its C name and signature."""

    name: str
    signature: str

    MARKER = "hexrpc-kernel"
    _RE = re.compile(r"/\* hexrpc-kernel: ([A-Za-z_][A-Za-z0-9_]*) \[([a-z0-9,]*)\] \*/\s*$")

    def render(self) -> str:
        return f"/* {self.MARKER}: {self.name} [{self.signature}] */"

    @classmethod
    def parse(cls, src: str) -> KernelRecord:
        m = cls._RE.search(src)
        if m is None:
            raise CompileError("HEXRPC: the source has no hexrpc-kernel record (was it rendered by HEXRPCRenderer?)")
        return cls(m.group(1), m.group(2))


# -------------------------------------------------------------------------------------------------
# Renderer


class HEXRPCRenderer(DSPRenderer):
    """tinygrad's DSP renderer for the kernel function; the entry is hexrpc's (v2), generated at
    build time from the record this renderer appends."""

    device = "HEXRPC"

    def __init__(self, target: Target):
        self.target, self.compiler = target, HEXRPCCompiler()

    def _render_defines(self, uops) -> list[str]:
        # Only the kernel's own vector typedefs: the v1 entry's declarations (remote_arg, HAP_*)
        # belong to the entry, which hexrpc generates in its own translation unit.
        return ClangRenderer._render_defines(self, uops)

    def _render_entry(self, function_name: str, bufs) -> str:
        params = [(u.addrspace != AddrSpace.ALU, u.dtype) for _, (u, _) in bufs]
        return KernelRecord(function_name, hexrpc_signature(params)).render()


# -------------------------------------------------------------------------------------------------
# Compiler

#: tinygrad's DSPCompiler flags beyond what ``hexrpc build-lib`` always passes
#: (``--target=hexagon -mcpu=hexagonv65 -mhvx=v65 -mhvx-length=128b -O2 -fPIC -ffreestanding
#: -nostdlib``, plus ``-fno-builtin``).
TINYGRAD_CFLAGS = ("-Wall", "-Werror", "-fno-stack-protector")


def hexrpc_cli() -> str:
    """The ``hexrpc`` tool: ``$HEXRPC_CLI``, else ``hexrpc`` on ``PATH``."""
    cli = os.environ.get("HEXRPC_CLI") or shutil.which("hexrpc")
    if not cli:
        raise CompileError("HEXRPC: the hexrpc tool was not found (set HEXRPC_CLI or put `hexrpc` on PATH)")
    return cli


def _cli_digest(cli: str) -> str:
    """The first 16 hex digits of the tool binary's SHA-256: the entry it generates is part of
    every library, so another build of the tool must not reuse cached libraries."""
    path = cli if os.path.sep in cli else (shutil.which(cli) or cli)
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as e:
        raise CompileError(f"HEXRPC: cannot read {path}: {e}") from e


def build_library(sources: list[tuple[str, KernelRecord]], *, cli: str | None = None) -> bytes:
    """Builds one Hexagon library with ``hexrpc build-lib`` from ``(source, record)`` pairs and
    returns its bytes. One source gives a plain v2 library (``entry`` launches that kernel)."""
    cli = cli or hexrpc_cli()
    if len(sources) != 1:
        raise CompileError("HEXRPC: building several kernels into one library needs hexrpc's batch build")
    src, rec = sources[0]
    with tempfile.TemporaryDirectory(prefix="hexrpc-tg-") as d:
        kernel_c, out = Path(d) / "kernel.c", Path(d) / "kernel.so"
        kernel_c.write_text(src)
        cmd = [cli, "-q", "build-lib", str(kernel_c), "--signature", rec.signature, "--kernel", rec.name, "-o", str(out)]
        cmd += [f"--cflag={f}" for f in TINYGRAD_CFLAGS]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CompileError(f"HEXRPC: `{' '.join(cmd)}` could not run: {e}") from e
        if res.returncode != 0:
            raise CompileError(f"HEXRPC: hexrpc build-lib failed (exit {res.returncode}) for {rec.name}:\n{res.stderr}")
        return out.read_bytes()


class HEXRPCCompiler(Compiler):
    """Builds a rendered kernel into a Hexagon library with ``hexrpc build-lib`` (v2 entry)."""

    def __init__(self, cli: str | None = None):
        self._cli = cli
        # The cache key names the tool's build: another hexrpc (another entry) is another key.
        try:
            key = f"compile_hexrpc_{_cli_digest(cli or hexrpc_cli())}"
        except CompileError:
            key = None
        super().__init__(key)

    def compile(self, src: str) -> bytes:
        return build_library([(src, KernelRecord.parse(src))], cli=self._cli)

    def disassemble(self, lib: bytes):
        from tinygrad.helpers import cpu_objdump

        cpu_objdump(lib, "llvm-objdump-19")


# -------------------------------------------------------------------------------------------------
# Registration


def _register() -> None:
    import tinygrad.runtime

    name = "tinygrad.runtime.ops_hexrpc"
    this = sys.modules[__name__]
    existing = sys.modules.get(name)
    if existing is not None and existing is not this:
        raise ImportError(f"{name} is already provided by {existing!r}")
    sys.modules[name] = this
    tinygrad.runtime.ops_hexrpc = this  # type: ignore[attr-defined]


_register()
