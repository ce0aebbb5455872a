"""Kernel sources and their libraries: hexrpc signatures of tinygrad kernels, the record the
renderer appends to a kernel's source (:class:`KernelRecord`), the renderer
(:class:`HEXRPCRenderer`) and the compiler (:class:`HEXRPCCompiler`, :func:`build_library`:
``hexrpc build-lib``). Nothing here opens a session."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from tinygrad.device import CompileError, Compiler
from tinygrad.dtype import AddrSpace, dtypes
from tinygrad.helpers import BEAM, Target, getenv
from tinygrad.renderer.cstyle import ClangRenderer
from tinygrad.runtime.ops_dsp import DSPRenderer
from tinygrad.uop.ops import PatternMatcher, UPat

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


#: Most buffers one hexrpc launch carries, and so one tinygrad kernel on HEXRPC: the launch ABI's
#: ``MAX_BUFFERS`` (runtime/src/launch/abi.rs), the number of buffers OR-ed into the
#: out-handles nibble of the FastRPC scalars word (FastRPC allows 15 handles of a kind per
#: call). A signature with more is refused when its library is opened ("more than 15 buffers").
#: :func:`register_buffer_limit` registers it in tinygrad's ``DEVICE_MAX_BUFS``, so tinygrad
#: splits a kernel that would use more (a big concat) into several.
MAX_LAUNCH_BUFFERS = 15


def register_buffer_limit(device: str) -> None:
    """Tells tinygrad's scheduler that a kernel on ``device`` (``"HEXRPC"``, ``"HEXRPC:1"``)
    uses at most :data:`MAX_LAUNCH_BUFFERS` buffers, its output included: tinygrad 0.14's
    ``DEVICE_MAX_BUFS`` (``tinygrad.schedule.rangeify``), which ``_limit_bufs`` reads for each
    kernel's device to split one that would use more."""
    from tinygrad.schedule import rangeify

    rangeify.DEVICE_MAX_BUFS[device] = MAX_LAUNCH_BUFFERS


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


def beam_search_on() -> bool:
    """Whether tinygrad's BEAM search may run for the kernels compiled now: ``BEAM`` (the
    context variable, from the environment or ``Context(BEAM=...)``) or ``JITBEAM`` (the
    environment; what ``TinyJit`` searches its kernels with) at least 1."""
    return BEAM.value >= 1 or getenv("JITBEAM", 0) >= 1


class HEXRPCRenderer(DSPRenderer):
    """tinygrad's DSP renderer for the kernel function, with tinygrad's DSP code generation; the
    entry is hexrpc's (v2), generated at build time from the record this renderer appends.

    **Not the DSP's code generation.** tinygrad 0.14 gives a kernel its DSP choices when
    ``renderer.target.device == "DSP"`` (``codegen/opt/heuristic.py`` upcasts by 128,
    ``codegen/late/coalesce.py`` groups loads up to 128 lanes, ``codegen/opt/postrange.py`` allows
    upcasts above 16). HEXRPC's target names HEXRPC, so it does not get them: those choices upcast
    a comparison into a 128-lane ``bool`` vector, clang's ``ext_vector_type`` of ``bool`` is packed
    one bit a lane, and a stored bool vector is then not one byte a lane. With the target naming
    "DSP", every comparison of int8, uint32 and float32 tensors came out wrong (the ONNX node
    suite's equal, greater_equal and less_equal cases, test_tinygrad_codegen.py). The target stays
    HEXRPC's until bool vectors are rendered one byte a lane. BEAM search then allocates and times
    its candidates on HEXRPC (it reads the target's device).

    **Alignment: what HEXRPC renders differently from tinygrad's DSP.** tinygrad's DSP renderer
    promises clang that every buffer is 128-byte aligned (``align_value(128)`` on each buffer
    parameter) and types each vector with its natural alignment (``uchar128`` aligned to 128),
    so clang emits aligned HVX loads and stores. A buffer need not be aligned: a realized slice of
    a realized tensor is a buffer view at the slice's byte offset (``Buffer.view``, the
    allocator's ``_offset``), and an aligned HVX load at an unaligned address ignores the low
    address bits: it reads the wrong bytes and nothing faults (a uint8 kernel on a view at offset
    1 computed the wrong values, test_tinygrad_codegen.py). So HEXRPC promises nothing: no
    ``align_value`` on buffers, and vector types aligned to their element (clang then emits
    unaligned HVX accesses, ``vmemu``, right at any address).
    """

    #: No alignment promise on buffers (see the class documentation).
    buffer_suffix = " restrict"

    #: clang-19 for Hexagon compiles a 16-bit integer -> ``__fp16`` cast as a copy of the bits
    #: (``hexrpc build-lib`` refuses such a kernel, docs/build-lib.md): widen to int first, which
    #: converts. tinygrad's half ``sqrt``/``sin`` contain such casts.
    extra_matcher = (
        PatternMatcher([(UPat.var("x", (dtypes.int16, dtypes.uint16)).cast(dtypes.half), lambda x: x.cast(dtypes.int32).cast(dtypes.half))])
        + DSPRenderer.extra_matcher
    )

    def __init__(self, target: Target):
        # tinygrad passes DEV's target for "HEXRPC" (``Compiled._select_renderer``).
        self.hexrpc_target, self.compiler = target, HEXRPCCompiler()

    @property
    def target(self) -> Target:  # type: ignore[override]
        """HEXRPC's own target (see the class documentation: not the DSP's, whose code generation
        gets comparisons wrong)."""
        return self.hexrpc_target

    def __reduce__(self):
        return self.__class__, (self.hexrpc_target,)

    def render_vector_prefix(self, dt, count: int) -> str:
        """A vector type aligned to its element, not to its size (see the class documentation)."""
        vec = self._render_dtype(dt, count, AddrSpace.REG)
        return f"typedef {self.render_dtype(dt)} {vec} __attribute__((aligned({dt.itemsize}),ext_vector_type({count})));"

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


class HEXRPCBuildWarning(UserWarning):
    """``hexrpc build-lib`` compiled a kernel without HVX: clang-19 could not select HVX
    instructions for it, so it was rebuilt as scalar code (the same results, not vectorised; the
    library's build record counts it, ``hexrpc model info`` shows the count). The message is
    build-lib's own: the kernel's name and clang's reason. Make it an error with
    ``warnings.simplefilter("error", HEXRPCBuildWarning)``."""


#: How ``hexrpc build-lib`` starts a warning on stderr (printed even under ``-q``).
BUILD_WARNING_PREFIX = "hexrpc build-lib: warning: "


def _forward_build_warnings(stderr: str) -> int:
    """Re-raises each of build-lib's warning lines in ``stderr`` as a :class:`HEXRPCBuildWarning`;
    returns how many there were."""
    n = 0
    for line in stderr.splitlines():
        if line.startswith(BUILD_WARNING_PREFIX):
            warnings.warn(line[len(BUILD_WARNING_PREFIX) :], HEXRPCBuildWarning, stacklevel=3)
            n += 1
    return n


def build_library(sources: list[tuple[str, KernelRecord]], *, table: bool = False, cli: str | None = None) -> bytes:
    """Builds one Hexagon library with ``hexrpc build-lib`` from ``(source, record)`` pairs and
    returns its bytes. One source without ``table`` gives a plain v2 library (``entry`` launches
    that kernel); otherwise a kernel-table library (``--table``, in the given order) whose entry
    also runs batches. Each source is its own translation unit, so the kernels' names must
    differ. A kernel build-lib compiles without HVX is a :class:`HEXRPCBuildWarning` (build-lib
    runs with ``-q``, which silences its progress, never its warnings)."""
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
        _forward_build_warnings(res.stderr)
        if res.returncode != 0:
            names = ", ".join(rec.name for _, rec in sources)
            raise CompileError(f"HEXRPC: hexrpc build-lib failed (exit {res.returncode}) for {names}:\n{res.stderr}")
        return out.read_bytes()


#: Kernel-table libraries of this process, by :func:`table_key` of their sources: built here, or
#: carried in by an unpickled ``TinyJit`` (:func:`hexrpc.tinygrad.pickling`). tinygrad's disk
#: cache keeps single kernels, not tables.
_TABLE_LIBRARIES: dict[str, bytes] = {}


def table_key(sources: list[tuple[str, KernelRecord]]) -> str:
    """The key of a kernel table: SHA-256 of its kernels' names, signatures and sources, in order."""
    h = hashlib.sha256()
    for src, rec in sources:
        h.update(f"{rec.name}\0{rec.signature}\0{len(src)}\0".encode() + src.encode())
    return h.hexdigest()


def build_batch_library(sources: list[tuple[str, KernelRecord]]) -> bytes:
    """:func:`build_library` for a kernel table, built once per process and set of sources (or
    found among the tables an unpickled jit carried)."""
    key = table_key(sources)
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
