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
    * :class:`HEXRPCAllocator`: sub-allocations of a few arenas (:class:`ArenaPool`, leases of
      ``HEXRPC_ARENA_MIB`` MiB) per tinygrad buffer; ``_offset`` gives a view (lease, offset,
      length) of the same lease; copies go through the lease's host mapping.
    * :class:`HEXRPCProgram`: one hexrpc launch (one FastRPC call) per kernel call; returns the DSP
      time in seconds.
    * :class:`HEXRPCGraph`: runs the kernels of a ``TinyJit`` capture as one batch, one FastRPC
      call per jit run (``HEXRPC_GRAPH=0``: kernel by kernel).

One session per process
    Every ``HEXRPC:n`` device of a process runs on one hexrpc session: the FastRPC drivers give a
    host process one DSP process, so a second session could not have its own. Buffers of
    ``HEXRPC:0`` and ``HEXRPC:1`` are leases of that session, and a jit or a graph may mix them.
    Each device keeps its own :class:`DeviceStats`.

Recovery without the caller
    After a DSP restart (a kernel that faulted, the bench's per-call limit
    ``HEXRPC_BENCH_CALL_LIMIT_MS``) or a missed deadline (``HEXRPC_DEADLINE_MS``), the device
    recovers the session by itself: the kernel whose call failed raises :class:`DSPRestartError`
    (saying why, when hexrpc knows), the session is rebuilt and its libraries reopened, and the
    next op runs. A launch that hexrpc refused without sending it, because the session already
    needed recovery (a restart noticed elsewhere), is sent again once the session is recovered,
    without failing. At most :data:`AUTO_RECOVERIES` recoveries per :data:`AUTO_RECOVERY_WINDOW_S`
    seconds: past that the error says so and ``Device["HEXRPC"].recover()`` is left to the
    caller. Each recovery is logged (logger ``hexrpc.tinygrad``).

Memory shared with the DSP changes under the host while a kernel runs; tinygrad only reads a
buffer after the launch that writes it has returned (every launch here is synchronous).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import re
import shutil
import subprocess
import sys
import tempfile
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hexrpc
from tinygrad.device import BufferSpec, Compiled, CompileError, Compiler, LRUAllocator, Program, TinyELF
from tinygrad.dtype import AddrSpace, dtypes
from tinygrad.engine.jit import GraphRunner
from tinygrad.helpers import Target
from tinygrad.renderer.cstyle import ClangRenderer
from tinygrad.runtime.ops_dsp import DSPRenderer
from tinygrad.uop.ops import PatternMatcher, UPat

__all__ = [
    "AUTO_RECOVERIES",
    "AUTO_RECOVERY_WINDOW_S",
    "DSPRestartError",
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

    #: clang-19 for Hexagon compiles a 16-bit integer -> ``__fp16`` cast as a copy of the bits
    #: (``hexrpc build-lib`` refuses such a kernel, docs/build-lib.md): widen to int first, which
    #: converts. tinygrad's half ``sqrt``/``sin`` contain such casts.
    extra_matcher = (
        PatternMatcher([(UPat.var("x", (dtypes.int16, dtypes.uint16)).cast(dtypes.half), lambda x: x.cast(dtypes.int32).cast(dtypes.half))])
        + DSPRenderer.extra_matcher
    )

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
    """A tinygrad buffer on HEXRPC: a view (``offset``, ``size``) of one hexrpc lease, which is a
    sub-allocation of an arena (``arena``) or, with ``HEXRPC_ARENA_MIB=0``, a lease of its own.
    The base buffer owns the lease (``owner``); buffers made by ``_offset`` share it and do not
    free it."""

    __slots__ = ("lease", "offset", "size", "owner", "arena", "_view")

    def __init__(self, lease, offset: int, size: int, owner: bool):
        self.lease, self.offset, self.size, self.owner = lease, offset, size, owner
        self.arena = None
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


#: Bytes of one arena: ``HEXRPC_ARENA_MIB`` MiB (default 16). A tensor larger than that gets an
#: arena of its own, rounded up to a MiB.
ARENA_BYTES = int(os.environ.get("HEXRPC_ARENA_MIB", "16") or "16") << 20


class ArenaPool:
    """The device memory of the process's session: arenas (one lease each, carved into 128-byte
    aligned sub-allocations by hexrpc's allocator), so a model's tensors are a few leases, not one
    each. A batch carries at most :data:`BATCH_MAX_LEASES` distinct leases per FastRPC call, and
    the DSP maps a lease once per process (the entry's map cache), so few leases is what lets a
    jit graph run in one call. ``HEXRPC_ARENA_MIB=0`` gives every buffer a lease of its own (the
    old behaviour, for comparison).

    The pool grows by whole arenas: an allocation takes the first arena (newest first) with a
    free range that fits, else a new arena of :data:`ARENA_BYTES` (or the allocation's size,
    rounded up to a MiB, when larger). An arena left with no live sub-allocation is closed,
    unless it is the newest (kept for the next allocation). What a kernel is given is still a
    view (lease, offset, length): the DSP maps the whole arena, and the entry checks the view
    against the arena's length (docs/kernel-rules.md, "Arenas")."""

    def __init__(self, session, arena_bytes: int = ARENA_BYTES):
        self.session, self.arena_bytes = session, arena_bytes
        self.arenas: list[Any] = []
        self.live: dict[int, int] = {}
        self.opened = 0

    def alloc(self, size: int, stats: DeviceStats) -> HEXRPCBuffer:
        if self.arena_bytes <= 0:
            return HEXRPCBuffer(self.session.alloc(size), 0, size, owner=True)
        for arena in reversed(self.arenas):
            if arena.largest_free >= size:
                try:
                    return self._take(arena, arena.alloc(size))
                except hexrpc.Error:
                    continue  # fragmented past what largest_free said: try the next arena
        mib = 1 << 20
        arena = self.session.arena(max(self.arena_bytes, (size + mib - 1) // mib * mib))
        self.arenas.append(arena)
        self.live[id(arena)] = 0
        self.opened += 1
        stats.arenas_opened += 1
        return self._take(arena, arena.alloc(size))

    def _take(self, arena, lease) -> HEXRPCBuffer:
        self.live[id(arena)] += 1
        buf = HEXRPCBuffer(lease, 0, lease.size, owner=True)
        buf.arena = arena
        return buf

    def free(self, buf: HEXRPCBuffer) -> None:
        buf._view = None
        buf.lease.close()
        arena = buf.arena
        if arena is None:
            return
        buf.arena = None
        left = self.live[id(arena)] = self.live[id(arena)] - 1
        if left == 0 and arena is not self.arenas[-1]:
            self.arenas.remove(arena)
            del self.live[id(arena)]
            arena.close()


class HEXRPCAllocator(LRUAllocator["HEXRPCDevice"]):
    """Sub-allocations of the session's arenas (:class:`ArenaPool`). Freed buffers are kept for
    reuse by tinygrad's LRU cache; a sub-allocation is returned to its arena when the cache is
    emptied or the device closes."""

    def _alloc(self, size: int, options: BufferSpec) -> HEXRPCBuffer:
        if options.external_ptr:
            raise RuntimeError("HEXRPC: external host pointers cannot be shared with the DSP (leases only)")
        return self.dev.hub.arenas.alloc(size, self.dev.stats)

    def _free(self, opaque: HEXRPCBuffer, options: BufferSpec):
        if opaque.owner:
            self.dev.hub.arenas.free(opaque)

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
    """The libraries open on the process's session. The HAL holds at most
    ``hexrpc.MAX_LIBRARIES`` libraries (its fixed table) and tinygrad keeps a program for every
    kernel it ever compiled, so single-kernel libraries are kept open least-recently-used first
    and reopened on demand only past that; graph libraries are pinned while their graph lives.
    ``opens`` counts every open, ``reopens`` the opens of a kernel whose library this cache had
    closed to make room (0 in a steady state that fits the table)."""

    #: hexrpc-hal's ``MAX_LIBRARIES``.
    MAX_OPEN_LIBRARIES = hexrpc.MAX_LIBRARIES

    def __init__(self, hub: _SessionHub):
        self.hub = hub
        self.lru: OrderedDict[int, Any] = OrderedDict()
        self.pinned = 0
        self.evicted: set[int] = set()
        self.opens = 0
        self.reopens = 0

    def _make_room(self, slots: int) -> None:
        while self.lru and len(self.lru) + self.pinned + slots > self.MAX_OPEN_LIBRARIES:
            key, old = self.lru.popitem(last=False)
            self.evicted.add(key)
            old.close()
        if self.pinned + slots > self.MAX_OPEN_LIBRARIES:
            raise RuntimeError(f"HEXRPC: more than {self.MAX_OPEN_LIBRARIES} graph libraries open at once")

    def get(self, key: int, image: bytes, signature: str, stats: DeviceStats, name: str = "kernel"):
        """The open library for ``key``, opened from ``image`` if it is not (``name`` is what
        hexrpc's logs and errors call it)."""
        lib = self.lru.get(key)
        if lib is not None:
            self.lru.move_to_end(key)
            return lib
        self._make_room(1)
        lib = self.hub.session.open_library(image, signature=signature, abi="v2", name=name)
        self.opens += 1
        stats.library_opens += 1
        if key in self.evicted:
            self.evicted.discard(key)
            self.reopens += 1
            stats.library_reopens += 1
        self.lru[key] = lib
        return lib

    def drop(self, key: int) -> None:
        self.evicted.discard(key)
        if (lib := self.lru.pop(key, None)) is not None:
            lib.close()

    def open_pinned(self, open_fn, stats: DeviceStats):
        """Opens a library that stays open until :meth:`unpin`."""
        self._make_room(1)
        lib = open_fn()
        self.opens += 1
        stats.library_opens += 1
        self.pinned += 1
        return lib

    def unpin(self, lib) -> None:
        self.pinned -= 1
        lib.close()


#: Automatic recoveries allowed per :data:`AUTO_RECOVERY_WINDOW_S` seconds before the device
#: stops recovering by itself (a kernel that restarts the DSP every time it runs would otherwise
#: loop: each recovery costs a new DSP process).
AUTO_RECOVERIES = 8
AUTO_RECOVERY_WINDOW_S = 60.0

_log = logging.getLogger("hexrpc.tinygrad")




class DSPRestartError(RuntimeError):
    """A kernel's call failed because the DSP restarted or its deadline passed. ``kernel`` names
    it, ``reason`` says why (when hexrpc knows), ``recovered`` whether the device recovered (then
    later ops run); ``__cause__`` is the hexrpc error."""

    def __init__(self, kernel: str, reason: str, recovered: bool):
        self.kernel, self.reason, self.recovered = kernel, reason, recovered
        then = "the device recovered; later ops run" if recovered else "the device did not recover (see the message)"
        super().__init__(f"HEXRPC: {kernel}: {reason}; {then}")


def restart_reason(session, err: BaseException) -> str:
    """Why the call that raised ``err`` failed: a missed deadline (from the error), the bench's
    account of why it ended the DSP process (per-call limit, fault, requested restart), else the
    error itself."""
    cause = str(getattr(err, "cause", "") or "")
    if "deadline" in cause or "deadline" in str(err):
        return f"the call passed its deadline ({err})"
    why = getattr(session, "last_restart", None)
    if why:
        return f"the DSP restarted: {why}"
    return f"the DSP restarted ({err})"


class _SessionHub:
    """The process's one hexrpc session, its library cache and its recovery policy, shared by
    every ``HEXRPC:n`` device."""

    _lock = threading.Lock()
    _hub: _SessionHub | None = None

    def __init__(self):
        self.session = open_session()
        self.libraries = LibraryCache(self)
        self.arenas = ArenaPool(self.session)
        self.recoveries: deque[float] = deque()
        self.recovery_count = 0

    @classmethod
    def get(cls) -> _SessionHub:
        with cls._lock:
            if cls._hub is None:
                cls._hub = _SessionHub()
            return cls._hub

    def _budget_left(self) -> bool:
        now = time.monotonic()
        while self.recoveries and now - self.recoveries[0] > AUTO_RECOVERY_WINDOW_S:
            self.recoveries.popleft()
        return len(self.recoveries) < AUTO_RECOVERIES

    def recover(self, why: str) -> None:
        """Rebuilds the session (libraries reopened by hexrpc) and counts it; raises the hexrpc
        error if that fails."""
        _log.warning("HEXRPC: recovering the session: %s", why)
        self.session.recover()
        self.recoveries.append(time.monotonic())
        self.recovery_count += 1

    def ensure_healthy(self) -> None:
        """Recovers a session that is already known to need it (a failure elsewhere), before
        opening a library (not per launch: see :meth:`recovered_unsent`)."""
        if not self.session.healthy and self._budget_left():
            self.recover("the session needed recovery before a launch")

    def recovered_unsent(self, err: BaseException) -> bool:
        """True when ``err`` says the call was refused before it was sent because the session
        already needed recovery (a restart noticed elsewhere, e.g. by the listener), and the
        session has now been recovered: the caller sends the call again, once. The launch path
        thus asks nothing of the session until a call fails."""
        if not getattr(err, "unsent", False) or not self._budget_left():
            return False
        try:
            self.recover("the session needed recovery before a launch")
        except hexrpc.Error:
            return False
        return True

    def failed(self, kernel: str, err: BaseException) -> DSPRestartError:
        """The error to raise for ``kernel`` whose call failed with ``err`` (``NeedsRecovery``),
        after recovering the session when the budget allows."""
        reason = restart_reason(self.session, err)
        if not self._budget_left():
            return DSPRestartError(
                kernel,
                f"{reason}; {AUTO_RECOVERIES} recoveries in {AUTO_RECOVERY_WINDOW_S:.0f} s, no more automatic ones: "
                'call Device["HEXRPC"].recover() to go on',
                recovered=False,
            )
        try:
            self.recover(f"{kernel}: {reason}")
        except hexrpc.Error as e:
            return DSPRestartError(kernel, f"{reason}; recovery failed: {e}", recovered=False)
        return DSPRestartError(kernel, reason, recovered=True)


class HEXRPCProgram(Program["HEXRPCDevice"]):
    """One compiled kernel: its library (opened on the session on first use, see
    :class:`LibraryCache`); each call is one hexrpc launch (one FastRPC call) that returns the
    DSP's time in seconds."""

    def __init__(self, dev: HEXRPCDevice, obj: TinyELF):
        self.dev, self.name, self.lib, self.tiny_signature = dev, obj.name, obj.lib, obj.signature
        self.hexrpc_signature, self.nbufs = signature_of(obj)
        dev.hub.ensure_healthy()
        dev.libraries.get(id(self), self.lib, self.hexrpc_signature, dev.stats, self.name)

    def __call__(self, *bufs: HEXRPCBuffer, global_size=(1, 1, 1), local_size=(1, 1, 1), vals: tuple[int, ...] = (), wait=False, **kw):
        if len(bufs) != self.nbufs:
            raise RuntimeError(f"HEXRPC: {self.name} takes {self.nbufs} buffers, got {len(bufs)}")
        hub = self.dev.hub
        library = self.dev.libraries.get(id(self), self.lib, self.hexrpc_signature, self.dev.stats, self.name)
        views, scalars = [b.view for b in bufs], list(vals)
        try:
            try:
                us = library.launch(views, scalars, deadline_ms=self.dev.deadline_ms)
            except hexrpc.NeedsRecovery as e:
                if not hub.recovered_unsent(e):
                    raise
                us = library.launch(views, scalars, deadline_ms=self.dev.deadline_ms)
        except hexrpc.NeedsRecovery as e:
            raise hub.failed(self.name, e) from e
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
    non-zero-offset views of the batches built; libraries opened on the session and how many of
    those reopened a library closed to make room; graph steps, how many rebuilt their batches
    (rather than updating them in place), and the host nanoseconds the graph spent per step
    outside its FastRPC calls (``graph_host_ns``, summed); arenas opened for the process's buffers
    (``arenas_opened``, counted on the device that asked)."""

    launches: int = 0
    nonzero_offset_views: int = 0
    batch_runs: int = 0
    batched_launches: int = 0
    library_opens: int = 0
    library_reopens: int = 0
    batched_nonzero_offset_views: int = 0
    graph_steps: int = 0
    graph_rebuilds: int = 0
    graph_host_ns: int = 0
    arenas_opened: int = 0


class HEXRPCDevice(Compiled):
    """tinygrad's ``HEXRPC`` device: see the module documentation."""

    def __init__(self, device: str = ""):
        self.stats = DeviceStats()
        self.hub = _SessionHub.get()
        self.session = self.hub.session
        self.libraries = self.hub.libraries
        deadline = os.environ.get("HEXRPC_DEADLINE_MS")
        self.deadline_ms: int | None = int(deadline) if deadline else None
        graph = HEXRPCGraph if os.environ.get("HEXRPC_GRAPH", "1") != "0" else None
        super().__init__(device, HEXRPCAllocator(self), [HEXRPCRenderer], HEXRPCProgram, graph=graph)

    def recover(self) -> None:
        """Rebuilds the session now (the device also does this by itself after a failed call, see
        the module documentation). Leases keep their memory; hexrpc reopens the open libraries
        (single kernels and graphs) on the new DSP process, so tinygrad's programs and jits keep
        working."""
        self.hub.recover("requested by Device.recover()")


# -------------------------------------------------------------------------------------------------
# Graph: a TinyJit capture as one batch

#: Capacity of one batch (hexrpc's launch ABI table, runtime/src/launch/abi.rs, as the native
#: module reports it): records, distinct leases, record bytes, kernels in one library's table.
BATCH_MAX_LAUNCHES, BATCH_MAX_LEASES, BATCH_MAX_RECORD_BYTES, BATCH_MAX_KERNELS = (
    hexrpc.MAX_BATCH_LAUNCHES,
    hexrpc.MAX_BATCH_LEASES,
    hexrpc.MAX_BATCH_RECORD_BYTES,
    hexrpc.MAX_BATCH_KERNELS,
)


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
        need = {b.lease.lease_id for b in bufs}
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


#: Input UOps whose tinygrad ``Buffer`` a graph remembers (see ``HEXRPCGraph._input_buffer``).
INPUT_CACHE = 64


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
    capture exceeds what one batch holds (:data:`BATCH_MAX_LEASES` distinct leases,
    :data:`BATCH_MAX_LAUNCHES` launches, :data:`BATCH_MAX_RECORD_BYTES` bytes of records,
    :data:`BATCH_MAX_KERNELS` kernels in a table): then the launches are split, in order, into as
    few batches (calls) as fit. Buffers are sub-allocations of a few arenas
    (:class:`ArenaPool`), so the lease limit is seldom what splits a graph. Input buffers that change between runs and bound Variables update the built records in
    place (``Batch.set_view``, ``Batch.set_scalar``); a batch is rebuilt only when a new input
    does not fit it (more distinct leases than it holds)."""

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
        self._batches: list[tuple[list[int], Any]] = []
        self._vals: list[tuple[int, ...]] = []
        self._var_calls: list[int] = []
        self._inputs: dict[int, HEXRPCBuffer] = {}
        self._input_slots: dict[int, list[tuple[Any, list[tuple[int, int]]]]] = {}
        self._record_of: dict[int, tuple[Any, int]] = {}
        self._uop_buffers: OrderedDict[int, tuple[Any, Any]] = OrderedDict()

    def _close_segment(self, sources: list[tuple[str, KernelRecord]]) -> None:
        seg = self.segments[-1]
        seg.signatures = [rec.signature for _, rec in sources]
        image = build_batch_library(sources)
        self.dev.hub.ensure_healthy()
        seg.library = self.dev.libraries.open_pinned(
            lambda: self.dev.session.open_library(image, signature=seg.signatures[0], abi="v2", name="graph"), self.dev.stats
        )

    def _buffers(self, j: int, input_uops) -> list[HEXRPCBuffer]:
        bufs = [b._buf for b in self.calls[j][2]]
        for pos, iidx in self.uop_replace[j]:
            bufs[pos] = input_uops[iidx].buffer._buf
        return bufs

    def _build(self, bufs: list[list[HEXRPCBuffer]], vals: list[tuple[int, ...]]) -> None:
        """Builds the batches from scratch and records where each input and each call's
        scalars live in them (so later steps update records in place)."""
        self._batches = []
        where: dict[int, tuple[Any, int]] = {}
        for seg in self.segments:
            for chunk in chunk_calls([(seg.kernel_of[j], bufs[j], len(vals[j])) for j in seg.calls]):
                batch = hexrpc.Batch(seg.library, seg.signatures)
                calls = [seg.calls[i] for i in chunk]
                for j in calls:
                    r = batch.push(seg.kernel_of[j], [b.view for b in bufs[j]], list(vals[j]))
                    where[j] = (batch, r)
                    self.dev.stats.batched_nonzero_offset_views += sum(1 for b in bufs[j] if b.offset)
                self._batches.append((calls, batch))
        # input index -> for each batch that reads it, the (record, position) places naming it
        slots: dict[int, dict[int, tuple[Any, list[tuple[int, int]]]]] = {}
        for j, uses in enumerate(self.uop_replace):
            batch, r = where[j]
            for pos, iidx in uses:
                slots.setdefault(iidx, {}).setdefault(id(batch), (batch, []))[1].append((r, pos))
        self._input_slots = {iidx: list(by_batch.values()) for iidx, by_batch in slots.items()}
        self._record_of = where
        self.dev.stats.graph_rebuilds += 1

    def _input_buffer(self, uop) -> HEXRPCBuffer:
        """The device buffer behind input ``uop``. tinygrad's ``UOp.buffer`` costs microseconds
        (it walks views and looks the UOp up), so the tinygrad ``Buffer`` of each input UOp seen
        is kept, by identity, for the most recent :data:`INPUT_CACHE` UOps; the device buffer is
        read from it every step (a reallocated ``Buffer`` gives its new one)."""
        hit = self._uop_buffers.get(id(uop))
        if hit is None or hit[0] is not uop:
            hit = (uop, uop.buffer)
            self._uop_buffers[id(uop)] = hit
            if len(self._uop_buffers) > INPUT_CACHE:
                self._uop_buffers.popitem(last=False)
        return hit[1]._buf

    def _update_inputs(self, input_uops) -> bool:
        """Points the records at this step's input buffers, in place; False when a new input
        does not fit its batch (then the caller rebuilds)."""
        for iidx, slots in self._input_slots.items():
            buf = self._input_buffer(input_uops[iidx])
            if buf is self._inputs.get(iidx):
                continue
            view = buf.view
            try:
                for batch, places in slots:
                    batch.set_views(places, view)
            except hexrpc.LaunchRefused:
                return False
            self._inputs[iidx] = buf
        return True

    def __call__(self, input_uops, var_vals: dict[str, int], wait=False):
        t0 = time.perf_counter_ns()
        if not self._batches or not self._update_inputs(input_uops):
            bufs = [self._buffers(j, input_uops) for j in range(len(self.calls))]
            vals = [tuple(prg.arg.vals({**var_vals, **dv})) for _, prg, _, dv in self.calls]
            self._build(bufs, vals)
            self._inputs = {iidx: input_uops[iidx].buffer._buf for iidx in self._input_slots}
            self._vals = vals
            # Calls whose scalars can change between steps: those with scalars at all.
            self._var_calls = [j for j, v in enumerate(vals) if v]
        elif self._var_calls:
            for j in self._var_calls:
                _, prg, _, dv = self.calls[j]
                new = tuple(prg.arg.vals({**var_vals, **dv}))
                old = self._vals[j]
                if new != old:
                    batch, r = self._record_of[j]
                    for i, (a, b) in enumerate(zip(old, new)):
                        if a != b:
                            batch.set_scalar(r, i, b)
                    self._vals[j] = new
        us, run_ns = 0, 0
        hub = self.dev.hub
        for calls, batch in self._batches:
            t = time.perf_counter_ns()
            try:
                try:
                    us += batch.run(deadline_ms=self.dev.deadline_ms)
                except hexrpc.NeedsRecovery as e:
                    if not hub.recovered_unsent(e):
                        raise
                    us += batch.run(deadline_ms=self.dev.deadline_ms)
            except hexrpc.NeedsRecovery as e:
                raise hub.failed(f"graph of {len(self.calls)} kernels", e) from e
            finally:
                run_ns += time.perf_counter_ns() - t
            self.dev.stats.batch_runs += 1
            self.dev.stats.batched_launches += len(calls)
        self.dev.stats.graph_steps += 1
        self.dev.stats.graph_host_ns += time.perf_counter_ns() - t0 - run_ns
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
