"""A ``HEXRPC`` device for tinygrad 0.14: tinygrad's DSP kernels run through hexrpc.

After ``import hexrpc.tinygrad``, ``Device["HEXRPC"]`` and ``Tensor(..., device="HEXRPC")`` work.

How tinygrad finds it
    tinygrad 0.14 looks a device up by importing ``tinygrad.runtime.ops_<name>`` and taking the
    member named ``<NAME>Device`` (``tinygrad/device.py``, ``_Device.get_class``). Importing this
    module registers it in ``sys.modules`` under ``tinygrad.runtime.ops_hexrpc`` (and as the
    attribute ``ops_hexrpc`` of the ``tinygrad.runtime`` package), so the lookup finds
    :class:`HEXRPCDevice`. Nothing is written into tinygrad's installation; the registration lasts
    for the process (a child process that unpickles one of these classes imports this module,
    which registers it there too).

Where it runs (read when the device is first opened)
    ``HEXRPC_BENCH=1``
        hexrpc's bench with the executor: the simulated ION + adsprpc kernel, and the generated
        entries and tinygrad's kernels compiled for Hexagon and run under qemu-hexagon. Needs
        clang-19, ld.lld-19 and qemu-hexagon. Timings are *simulated* (the bench's cost model),
        never device figures.
    otherwise
        the device's ``/dev/ion`` and ``/dev/adsprpc-smd`` with the board ``HEXRPC_BOARD``
        (``comma-three``, ``msm-android``); unset, the board whose device-tree model matches
        (as the ``hexrpc`` tool picks it), else ``comma-three``.

The pieces
    * :class:`HEXRPCRenderer`: tinygrad's ``DSPRenderer`` (HVX vector types, 128-byte alignment
      attributes, no threads) for the kernel function; instead of tinygrad's v1 ``entry`` the
      source ends with a one-line record of the kernel's name and hexrpc signature. hexrpc
      generates its v2 entry from that record when the library is built, so views at non-zero
      offsets (which tinygrad's memory planner hands out) are mapped correctly.
    * :class:`HEXRPCCompiler`: ``hexrpc build-lib`` with tinygrad's DSP flags (hexagonv65, HVX
      128 B, ``-O2 -Wall -Werror -fno-stack-protector``); results cached by tinygrad's disk cache
      under a key that names the hexrpc tool binary's digest.
    * :class:`HEXRPCAllocator`: one lease per tinygrad buffer; ``_offset`` gives a view
      (lease, offset, length) of the same lease; copies go through the lease's host mapping.
    * :class:`HEXRPCProgram`: one hexrpc launch (one FastRPC call) per kernel call; returns the DSP
      time in seconds.
    * :class:`HEXRPCGraph`: runs the kernels of a ``TinyJit`` capture as one batch, one FastRPC
      call per jit run (``HEXRPC_GRAPH=0``: kernel by kernel).

After ``hexrpc.NeedsRecovery`` (DSP restart, missed deadline, ``HEXRPC_DEADLINE_MS``) call
``Device["HEXRPC"].recover()``.

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
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hexrpc
from tinygrad.device import BufferSpec, Compiled, CompileError, Compiler, LRUAllocator, Program, TinyELF
from tinygrad.dtype import AddrSpace
from tinygrad.engine.jit import GraphRunner
from tinygrad.helpers import Target
from tinygrad.renderer.cstyle import ClangRenderer
from tinygrad.runtime.ops_dsp import DSPRenderer

__all__ = [
    "DeviceStats",
    "HEXRPCAllocator",
    "HEXRPCBuffer",
    "HEXRPCCompiler",
    "HEXRPCDevice",
    "HEXRPCGraph",
    "HEXRPCProgram",
    "HEXRPCRenderer",
    "KernelRecord",
    "build_library",
    "hexrpc_signature",
    "signature_of",
]

# -------------------------------------------------------------------------------------------------
# Signatures

#: The C type a kernel receives a scalar as (what tinygrad's C renderer prints) -> hexrpc signature
#: kind (runtime/src/launch/signature.rs).
_C_SCALAR_KINDS: dict[str, str] = {
    "signed char": "i8",
    "char": "i8",
    "unsigned char": "u8",
    "short": "i16",
    "unsigned short": "u16",
    "int": "i32",
    "unsigned int": "u32",
    "long long": "i64",
    "long": "i64",
    "unsigned long long": "u64",
    "unsigned long": "u64",
    "half": "f16",
    "__fp16": "f16",
    "float": "f32",
    "double": "f64",
}


def scalar_kind(c_type: str) -> str:
    """The hexrpc signature kind of a kernel scalar parameter of C type ``c_type``."""
    try:
        return _C_SCALAR_KINDS[c_type.strip()]
    except KeyError:
        raise CompileError(f"HEXRPC: a kernel scalar of C type {c_type!r} has no hexrpc signature kind") from None


def hexrpc_signature(params: list[str | None]) -> str:
    """The hexrpc signature string (``"buf,buf,i32"``) of a kernel whose parameters are, in order,
    ``None`` for a buffer or the C type of a scalar. Buffers must come first (the launch ABI
    numbers slots by parameter)."""
    out: list[str] = []
    for c_type in params:
        if c_type is None:
            if out and out[-1] != "buf":
                raise CompileError("HEXRPC: a buffer parameter after a scalar; hexrpc needs buffers first")
            out.append("buf")
        else:
            out.append(scalar_kind(c_type))
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

    def __init__(self, target: Target):
        self.target, self.compiler = target, HEXRPCCompiler()

    def _render_defines(self, uops) -> list[str]:
        # Only the kernel's own vector typedefs: the v1 entry's declarations (remote_arg, HAP_*)
        # belong to the entry, which hexrpc generates in its own translation unit.
        return ClangRenderer._render_defines(self, uops)

    def _render_entry(self, function_name: str, bufs) -> str:
        params = [self._render_dtype(u.dtype) if u.addrspace == AddrSpace.ALU else None for _, (u, _) in bufs]
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


def build_library(sources: list[tuple[str, KernelRecord]], *, table: bool = False, cli: str | None = None) -> bytes:
    """Builds one Hexagon library with ``hexrpc build-lib`` from ``(source, record)`` pairs and
    returns its bytes. One source without ``table`` gives a plain v2 library (``entry`` launches
    that kernel); otherwise a kernel-table library (``--table``, in the given order) whose entry
    also runs batches. Each source is its own translation unit, so the kernels' names must
    differ."""
    cli = cli or hexrpc_cli()
    if not sources:
        raise CompileError("HEXRPC: no kernel to build")
    with tempfile.TemporaryDirectory(prefix="hexrpc-tg-") as d:
        out = Path(d) / "kernels.so"
        files = []
        for i, (src, _) in enumerate(sources):
            files.append(Path(d) / f"k{i}.c")
            files[-1].write_text(src)
        if len(sources) == 1 and not table:
            rec = sources[0][1]
            cmd = [cli, "-q", "build-lib", str(files[0]), "--signature", rec.signature, "--kernel", rec.name]
        else:
            cmd = [cli, "-q", "build-lib", *map(str, files)]
            cmd += [f"--table={f}:{rec.name}:{rec.signature}" for f, (_, rec) in zip(files, sources)]
        cmd += ["-o", str(out)] + [f"--cflag={f}" for f in TINYGRAD_CFLAGS]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CompileError(f"HEXRPC: `{' '.join(cmd)}` could not run: {e}") from e
        if res.returncode != 0:
            names = ", ".join(rec.name for _, rec in sources)
            raise CompileError(f"HEXRPC: hexrpc build-lib failed (exit {res.returncode}) for {names}:\n{res.stderr}")
        return out.read_bytes()


#: Built kernel-table libraries of this process, by the digest of their sources (tinygrad's disk
#: cache keeps single kernels; a jit's table is rebuilt once per process).
_TABLE_LIBRARIES: dict[str, bytes] = {}


def build_batch_library(sources: list[tuple[str, KernelRecord]]) -> bytes:
    """:func:`build_library` for a kernel table, built once per process and set of sources."""
    h = hashlib.sha256()
    for src, rec in sources:
        h.update(f"{rec.name}\0{rec.signature}\0{len(src)}\0".encode() + src.encode())
    key = h.hexdigest()
    if (lib := _TABLE_LIBRARIES.get(key)) is None:
        lib = _TABLE_LIBRARIES[key] = build_library(sources, table=True)
    return lib


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
# Session, memory, programs


def device_board() -> str:
    """``HEXRPC_BOARD``, else the board whose device-tree model matches this machine's (the same
    rule as the ``hexrpc`` tool), else ``comma-three``."""
    if board := os.environ.get("HEXRPC_BOARD"):
        return board
    for path in ("/proc/device-tree/model", "/sys/firmware/devicetree/base/model"):
        try:
            model = Path(path).read_text(errors="replace")
        except OSError:
            continue
        return hexrpc.detect_board(model) or "comma-three"
    return "comma-three"


def open_session():
    """The hexrpc session the device runs on: the bench with the executor when ``HEXRPC_BENCH=1``,
    otherwise the device with the board ``HEXRPC_BOARD`` (unset: hexrpc probes for it)."""
    if os.environ.get("HEXRPC_BENCH", "") not in ("", "0"):
        return hexrpc.Session.bench(executor=True)
    return hexrpc.Session.open(board=device_board())


class HEXRPCBuffer:
    """A tinygrad buffer on HEXRPC: a view (``offset``, ``size``) of one lease. The base buffer
    owns the lease (``owner``); buffers made by ``_offset`` share it and do not free it."""

    __slots__ = ("lease", "offset", "size", "owner", "_view")

    def __init__(self, lease, offset: int, size: int, owner: bool):
        self.lease, self.offset, self.size, self.owner = lease, offset, size, owner
        self._view = None

    @property
    def view(self):
        """The hexrpc view (lease, offset, length) a launch takes; made once per buffer."""
        if self._view is None:
            self._view = self.lease.view(self.offset, self.size)
        return self._view

    def host(self) -> memoryview:
        """The bytes of this view in the lease's host mapping."""
        return memoryview(self.lease).cast("B")[self.offset : self.offset + self.size]


class HEXRPCAllocator(LRUAllocator["HEXRPCDevice"]):
    """leases from the device's hexrpc session. Freed buffers are kept for reuse by tinygrad's
    LRU cache; a lease is returned to hexrpc when the cache is emptied or the device closes."""

    def _alloc(self, size: int, options: BufferSpec) -> HEXRPCBuffer:
        if options.external_ptr:
            raise RuntimeError("HEXRPC: external host pointers cannot be shared with the DSP (leases only)")
        return HEXRPCBuffer(self.dev.session.alloc(size), 0, size, owner=True)

    def _free(self, opaque: HEXRPCBuffer, options: BufferSpec):
        if opaque.owner:
            opaque._view = None
            opaque.lease.close()

    def _as_buffer(self, src: HEXRPCBuffer) -> memoryview:
        return src.host()

    def _copyin(self, dest: HEXRPCBuffer, src: memoryview):
        dest.host()[: src.nbytes] = src.cast("B")

    def _copyout(self, dest: memoryview, src: HEXRPCBuffer):
        dest.cast("B")[:] = src.host()[: dest.nbytes]

    def _offset(self, buf: HEXRPCBuffer, size: int, offset: int) -> HEXRPCBuffer:
        return HEXRPCBuffer(buf.lease, buf.offset + offset, size, owner=False)


#: struct format of a scalar's dtype -> hexrpc signature kind.
_FMT_KINDS = {"b": "i8", "B": "u8", "h": "i16", "H": "u16", "i": "i32", "I": "u32", "q": "i64", "Q": "u64", "e": "f16", "f": "f32", "d": "f64"}


def signature_of(obj: TinyELF) -> tuple[str, int]:
    """(hexrpc signature, number of buffers) of a compiled kernel, from tinygrad's signature:
    buffers carry their shape, scalars (bound Variables) the shape ``()``."""
    kinds: list[str] = []
    for name, _, dt, shape in obj.signature:
        if shape != ():
            kinds.append("buf")
        elif (kind := _FMT_KINDS.get(dt.fmt or "")) is not None:
            kinds.append(kind)
        else:
            raise RuntimeError(f"HEXRPC: {obj.name}: scalar {name!r} of dtype {dt} has no hexrpc signature kind")
    nbufs = kinds.count("buf")
    if kinds[:nbufs] != ["buf"] * nbufs:
        raise RuntimeError(f"HEXRPC: {obj.name}: a buffer after a scalar; hexrpc needs buffers first")
    return ",".join(kinds), nbufs


class LibraryCache:
    """The libraries open on the device's session. A hexrpc session holds at most
    ``MAX_OPEN_LIBRARIES`` libraries (the HAL's fixed table) and tinygrad keeps a program for
    every kernel it ever compiled, so single-kernel libraries are kept open least-recently-used
    first and reopened on demand; graph libraries are pinned while their graph lives."""

    #: hexrpc-hal's ``MAX_LIBRARIES``.
    MAX_OPEN_LIBRARIES = 16

    def __init__(self, dev: HEXRPCDevice):
        self.dev = dev
        self.lru: OrderedDict[int, Any] = OrderedDict()
        self.pinned = 0

    def _make_room(self, slots: int) -> None:
        while self.lru and len(self.lru) + self.pinned + slots > self.MAX_OPEN_LIBRARIES:
            _, old = self.lru.popitem(last=False)
            old.close()
        if self.pinned + slots > self.MAX_OPEN_LIBRARIES:
            raise RuntimeError(f"HEXRPC: more than {self.MAX_OPEN_LIBRARIES} graph libraries open at once")

    def get(self, key: int, image: bytes, signature: str):
        """The open library for ``key``, opened from ``image`` if it is not."""
        lib = self.lru.get(key)
        if lib is not None:
            self.lru.move_to_end(key)
            return lib
        self._make_room(1)
        lib = self.dev.session.open_library(image, signature=signature, abi="v2")
        self.dev.stats.library_opens += 1
        self.lru[key] = lib
        return lib

    def drop(self, key: int) -> None:
        if (lib := self.lru.pop(key, None)) is not None:
            lib.close()

    def open_pinned(self, open_fn):
        """Opens a library that stays open until :meth:`unpin`."""
        self._make_room(1)
        lib = open_fn()
        self.dev.stats.library_opens += 1
        self.pinned += 1
        return lib

    def unpin(self, lib) -> None:
        self.pinned -= 1
        lib.close()


class HEXRPCProgram(Program["HEXRPCDevice"]):
    """One compiled kernel: its library (opened on the session on first use, see
    :class:`LibraryCache`); each call is one hexrpc launch (one FastRPC call) that returns the
    DSP's time in seconds."""

    def __init__(self, dev: HEXRPCDevice, obj: TinyELF):
        self.dev, self.name, self.lib, self.tiny_signature = dev, obj.name, obj.lib, obj.signature
        self.hexrpc_signature, self.nbufs = signature_of(obj)
        dev.libraries.get(id(self), self.lib, self.hexrpc_signature)

    def __call__(self, *bufs: HEXRPCBuffer, global_size=(1, 1, 1), local_size=(1, 1, 1), vals: tuple[int, ...] = (), wait=False, **kw):
        if len(bufs) != self.nbufs:
            raise RuntimeError(f"HEXRPC: {self.name} takes {self.nbufs} buffers, got {len(bufs)}")
        library = self.dev.libraries.get(id(self), self.lib, self.hexrpc_signature)
        us = library.launch([b.view for b in bufs], list(vals), deadline_ms=self.dev.deadline_ms)
        self.dev.stats.launches += 1
        self.dev.stats.nonzero_offset_views += sum(1 for b in bufs if b.offset)
        return us / 1e6

    def __del__(self):
        dev = getattr(self, "dev", None)
        if dev is not None and getattr(dev, "libraries", None) is not None:
            dev.libraries.drop(id(self))


@dataclass
class DeviceStats:
    """What the device did, for tests and reports: single launches and how many of their views were
    at a non-zero offset; batch runs (one FastRPC call each), the launches they carried and the
    non-zero-offset views of the batches built; libraries opened on the session."""

    launches: int = 0
    nonzero_offset_views: int = 0
    batch_runs: int = 0
    batched_launches: int = 0
    library_opens: int = 0
    batched_nonzero_offset_views: int = 0


class HEXRPCDevice(Compiled):
    """tinygrad's ``HEXRPC`` device: see the module documentation."""

    def __init__(self, device: str = ""):
        self.stats = DeviceStats()
        self.session = open_session()
        self.libraries = LibraryCache(self)
        deadline = os.environ.get("HEXRPC_DEADLINE_MS")
        self.deadline_ms: int | None = int(deadline) if deadline else None
        graph = HEXRPCGraph if os.environ.get("HEXRPC_GRAPH", "1") != "0" else None
        super().__init__(device, HEXRPCAllocator(self), [HEXRPCRenderer], HEXRPCProgram, graph=graph)

    def recover(self) -> None:
        """After ``hexrpc.NeedsRecovery`` (a DSP restart or a missed deadline): rebuilds the
        session once. Leases keep their memory; hexrpc reopens the open libraries (single kernels
        and graphs) on the new DSP process, so tinygrad's programs and jits keep working."""
        self.session.recover()


# -------------------------------------------------------------------------------------------------
# Graph: a TinyJit capture as one batch

#: Capacity of one batch (hexrpc's launch ABI table, runtime/src/launch/abi.rs): records, distinct
#: leases, record bytes, kernels in one library's table.
BATCH_MAX_LAUNCHES, BATCH_MAX_LEASES, BATCH_MAX_RECORD_BYTES, BATCH_MAX_KERNELS = 64, 15, 8192, 64


def batch_record_bytes(nviews: int, nscalars: int) -> int:
    """Bytes of one batch record: u32 kernel, u16 views, u16 scalars, 12 bytes per view (lease
    index, offset, length), 8 per scalar slot."""
    return 8 + 12 * nviews + 8 * nscalars


def rename_kernel(src: str, rec: KernelRecord, new_name: str) -> tuple[str, KernelRecord]:
    """``src`` with its kernel function (and record) renamed to ``new_name``: tinygrad names
    kernels by shape, so two different kernels of one jit can share a name, and one library
    cannot hold two functions of one name."""
    return re.sub(rf"\b{re.escape(rec.name)}\b", new_name, src), KernelRecord(new_name, rec.signature)


def chunk_calls(calls: list[tuple[int, list[HEXRPCBuffer], int]]) -> list[list[int]]:
    """Splits launches ``(kernel, buffers, scalar count)``, in order, into consecutive chunks that
    each fit one batch (launches, distinct leases, record bytes)."""
    chunks: list[list[int]] = []
    cur: list[int] = []
    leases: set[int] = set()
    nbytes = 0
    for j, (_, bufs, nscalars) in enumerate(calls):
        need = {id(b.lease) for b in bufs}
        rb = batch_record_bytes(len(bufs), nscalars)
        if len(need) > BATCH_MAX_LEASES or rb > BATCH_MAX_RECORD_BYTES:
            raise RuntimeError(f"HEXRPC: launch {j} alone does not fit a batch ({len(need)} leases, {rb} record bytes)")
        if cur and (len(cur) == BATCH_MAX_LAUNCHES or len(leases | need) > BATCH_MAX_LEASES or nbytes + rb > BATCH_MAX_RECORD_BYTES):
            chunks.append(cur)
            cur, leases, nbytes = [], set(), 0
        cur.append(j)
        leases |= need
        nbytes += rb
    if cur:
        chunks.append(cur)
    return chunks


@dataclass
class _Segment:
    """Consecutive launches of a graph whose kernels share one kernel-table library."""

    calls: list[int]
    kernel_of: dict[int, int]
    signatures: list[str]
    library: Any = None


class HEXRPCGraph(GraphRunner):
    """Runs the kernels of one ``TinyJit`` graph batch as hexrpc batches: one library built from
    the batch's kernel sources (a kernel table), and per jit run one FastRPC call, unless the
    capture exceeds what one batch holds (15 distinct leases, 64 launches, 8 KiB of records, 64
    kernels in a table): then the launches are split, in order, into as few batches (calls) as
    fit. Input buffers that change between runs rebuild the records (host only); bound Variables
    update the scalars in place."""

    def __init__(self, linear, input_uops=()):
        super().__init__(linear, input_uops)
        from tinygrad.device import Device

        self.dev: HEXRPCDevice = Device[self.device]  # type: ignore[assignment]
        self.segments: list[_Segment] = []
        sources: list[tuple[str, KernelRecord]] = []
        table: dict[Any, int] = {}
        for j, (_, prg, _, _) in enumerate(self.calls):
            if prg.key not in table and len(table) == BATCH_MAX_KERNELS:
                self._close_segment(sources)
                sources, table = [], {}
            if not self.segments or self.segments[-1].library is not None:
                self.segments.append(_Segment([], {}, []))
            seg = self.segments[-1]
            if prg.key not in table:
                src = prg.src[2].arg
                rec = KernelRecord.parse(src)
                table[prg.key] = len(sources)
                sources.append(rename_kernel(src, rec, f"{rec.name}_hk{len(sources)}"))
            seg.calls.append(j)
            seg.kernel_of[j] = table[prg.key]
        self._close_segment(sources)
        self._bound: tuple | None = None
        self._batches: list[tuple[list[int], Any]] = []
        self._vals: list[tuple[int, ...]] = []

    def _close_segment(self, sources: list[tuple[str, KernelRecord]]) -> None:
        seg = self.segments[-1]
        seg.signatures = [rec.signature for _, rec in sources]
        image = build_batch_library(sources)
        seg.library = self.dev.libraries.open_pinned(lambda: self.dev.session.open_library(image, signature=seg.signatures[0], abi="v2"))

    def _buffers(self, j: int, input_uops) -> list[HEXRPCBuffer]:
        bufs = [b._buf for b in self.calls[j][2]]
        for pos, iidx in self.uop_replace[j]:
            bufs[pos] = input_uops[iidx].buffer._buf
        return bufs

    def _build(self, bufs: list[list[HEXRPCBuffer]], vals: list[tuple[int, ...]]) -> None:
        self._batches = []
        for seg in self.segments:
            for chunk in chunk_calls([(seg.kernel_of[j], bufs[j], len(vals[j])) for j in seg.calls]):
                batch = hexrpc.Batch(seg.library, seg.signatures)
                calls = [seg.calls[i] for i in chunk]
                for j in calls:
                    batch.push(seg.kernel_of[j], [b.view for b in bufs[j]], list(vals[j]))
                    self.dev.stats.batched_nonzero_offset_views += sum(1 for b in bufs[j] if b.offset)
                self._batches.append((calls, batch))

    def __call__(self, input_uops, var_vals: dict[str, int], wait=False):
        bufs = [self._buffers(j, input_uops) for j in range(len(self.calls))]
        vals = [tuple(prg.arg.vals({**var_vals, **dv})) for _, prg, _, dv in self.calls]
        # The lease objects themselves (compared by identity), not their ids: holding them keeps
        # an id from being reused by a new lease while the old batch still names the old one.
        bound = tuple((b.lease, b.offset, b.size) for bs in bufs for b in bs)
        if self._bound is None or len(bound) != len(self._bound) or any(
            x[0] is not y[0] or x[1:] != y[1:] for x, y in zip(bound, self._bound)
        ):
            # Views are part of a batch's records: new input buffers mean new records.
            self._build(bufs, vals)
            self._bound, self._vals = bound, vals
        elif vals != self._vals:
            for calls, batch in self._batches:
                for r, j in enumerate(calls):
                    for i, (old, new) in enumerate(zip(self._vals[j], vals[j])):
                        if old != new:
                            batch.set_scalar(r, i, new)
            self._vals = vals
        us = 0
        for calls, batch in self._batches:
            us += batch.run(deadline_ms=self.dev.deadline_ms)
            self.dev.stats.batch_runs += 1
            self.dev.stats.batched_launches += len(calls)
        return us / 1e6

    def __del__(self):
        self._batches = []
        for seg in getattr(self, "segments", []):
            if seg.library is not None:
                self.dev.libraries.unpin(seg.library)
                seg.library = None


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
