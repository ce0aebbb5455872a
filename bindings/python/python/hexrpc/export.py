"""Export, at the desk: a ``TinyJit`` on the HEXRPC device (or an ONNX model run through tinygrad's
``OnnxRunner``) written as one model file (``docs/model-format.md``) that a device runs with no
compiler, from C, Rust, Python (:class:`hexrpc.Model`) and ``hexrpc model run``.

    python -m hexrpc.export MODEL.onnx --input x=1x3x48x192 -o model.hxm

or, for a jit captured by hand (as openpilot's ``compile3.py`` does)::

    import hexrpc.tinygrad                      # registers the HEXRPC device
    from hexrpc.export import export_jit
    step = TinyJit(lambda x: model(x).realize())
    data = export_jit(step, {"x": Tensor(x, device="HEXRPC").realize()}, output_names=["y"])
    Path("model.hxm").write_bytes(data)

How a run becomes a file (:func:`export_jit`)
    The jit is run until tinygrad has captured it, then once more while the device records every
    launch it makes (:class:`hexrpc.tinygrad.capture.Capture`): the kernel, its buffers with that
    run's inputs in place, its scalars. Each distinct kernel source goes into a kernel-table
    library (``hexrpc build-lib --table``, the same build as the device's graphs: this is the
    one step that needs the compiler), at most ``MAX_BATCH_KERNELS`` kernels a library; the
    launches become records of the launch ABI's batch form, in run order, one step per run of
    launches of one library. Every lease the launches touch becomes an arena, as long as the
    furthest byte any of them uses (rounded to ``ARENA_ALIGN``), and keeps its offsets. A
    buffer range a launch reads before any launch of the run writes it (tinygrad's ``ins`` and
    ``outs`` of the kernel) and that is not an input is a weight: its bytes go into the file
    (runs of zeros as zero ranges). A weight range that a later launch writes is state carried
    from one run to the next, which a model file does not hold: refused. So is a launch that
    writes an input's bytes: a file's inputs are only read, so a device can bind one to a buffer
    it does not own (an imported camera frame, ``Model.bind_input``) without it being written. Inputs and outputs are
    the jit's argument tensors and returned tensors, with their dtype and shape.

    The file is then opened on the same session and run on the same inputs, and its outputs
    must equal the jit's bit for bit (``verify=True``): an export that would give other numbers
    is refused here, at the desk, not found on a device.

Provenance: the source's name and SHA-256 (the ONNX file's bytes, or what the caller passes),
tinygrad's version, hexrpc's version (written by the native writer), the entry ABI and the
libraries' Hexagon architecture.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import hexrpc

__all__ = ["ExportError", "device_model", "export_jit", "export_onnx", "main", "onnx_jit"]


class ExportError(Exception):
    """What stops an export, said in terms of the model (which launch, which buffer)."""


def _require_tinygrad():
    try:
        import hexrpc.tinygrad  # noqa: F401  (registers the HEXRPC device)
        import tinygrad
    except ImportError as e:
        raise ExportError(f"exporting needs tinygrad (pip install tinygrad==0.14.0): {e}") from None
    return tinygrad


def _tensors(value: Any, names: Sequence[str] | None, what: str) -> list[tuple[str, Any]]:
    """``(name, Tensor)`` pairs of a jit's arguments or results: one tensor, a sequence or a
    mapping of them."""
    from tinygrad import Tensor

    if isinstance(value, Tensor):
        items = [(None, value)]
    elif isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = [(None, v) for v in value]
    else:
        raise ExportError(f"the {what} must be a Tensor, or a list, tuple or dict of them (got {type(value).__name__})")
    for k, v in items:
        if not isinstance(v, Tensor):
            raise ExportError(f"the {what} {k!r} is a {type(v).__name__}, not a Tensor")
    if names is not None:
        if len(names) != len(items):
            raise ExportError(f"{len(names)} {what} names for {len(items)} {what}s")
        items = [(n, v) for n, (_, v) in zip(names, items)]
    prefix = "input" if what == "input" else "output"
    out = [(str(k) if k is not None else f"{prefix}{i}", v) for i, (k, v) in enumerate(items)]
    if len({k for k, _ in out}) != len(out):
        raise ExportError(f"two {what}s share a name: {[k for k, _ in out]}")
    return out


def _device_buffer(t: Any, what: str):
    """The HEXRPCBuffer behind realized tensor ``t``."""
    from .tinygrad.memory import HEXRPCBuffer

    buf = t.uop.buffer
    if not str(buf.device).startswith("HEXRPC"):
        raise ExportError(f"{what} is on {buf.device}, not on HEXRPC")
    b = buf.ensure_allocated()._buf
    if not isinstance(b, HEXRPCBuffer):
        raise ExportError(f"{what}: its buffer is not a HEXRPC buffer ({type(b).__name__})")
    return b


def _np_dtype_name(dtype: Any, what: str) -> str:
    from tinygrad.dtype import _to_np_dtype

    np_dt = _to_np_dtype(dtype)
    if np_dt is None:
        raise ExportError(f"{what} has dtype {dtype}, which numpy (and a model file) has no name for")
    return np.dtype(np_dt).name


def _kernel_uops(jit: Any) -> dict[int, Any]:
    """The ``PROGRAM`` UOp of every kernel the captured jit launches on its own, by the identity
    of its HEXRPCProgram (tinygrad's runtime cache gives the same program for the same UOp)."""
    from tinygrad.engine.realize import get_runtime
    from tinygrad.uop.ops import Ops

    out = {}
    for call in jit.captured.linear.src:
        ast = call.src[0]
        if ast.op is Ops.PROGRAM:
            out[id(get_runtime(ast.device if isinstance(ast.device, str) else ast.device[0], ast))] = ast
    return out


def _elf_arch(image: bytes) -> int:
    return int.from_bytes(image[36:40], "little") & 0xFFF


class _Arena:
    """One lease of the run as a file arena: what the launches read first (weights) and wrote."""

    def __init__(self, index: int, size: int):
        self.index = index
        self.size = size
        self.image = np.zeros(size, np.uint8)
        self.weight = np.zeros(size, bool)
        self.written = np.zeros(size, bool)
        self.io = np.zeros(size, bool)


def export_jit(
    jit: Any,
    inputs: Mapping[str, Any] | Sequence[Any],
    *,
    output_names: Sequence[str] | None = None,
    source_name: str = "",
    source_digest: bytes | None = None,
    verify: bool = True,
) -> bytes:
    """The model file of ``jit`` (a ``TinyJit`` whose kernels run on HEXRPC) called with
    ``inputs`` (a dict: called by keyword, names kept; a sequence: by position, named
    ``input0``...), as bytes. See the module documentation for what is written and refused."""
    _require_tinygrad()
    from tinygrad import Tensor

    from .tinygrad.capture import Capture
    from .tinygrad.device import HEXRPCProgram
    from .tinygrad.graph import BATCH_MAX_KERNELS, rename_kernel
    from .tinygrad.kernels import KernelRecord, build_batch_library

    by_name = isinstance(inputs, Mapping)
    named_inputs = _tensors(dict(inputs) if by_name else list(inputs), None, "input")
    for name, t in named_inputs:
        if not str(t.device).startswith("HEXRPC"):
            raise ExportError(f"input {name!r} is on {t.device}: put the inputs on HEXRPC (Tensor(..., device='HEXRPC'))")
    Tensor.realize(*[t for _, t in named_inputs])

    def call():
        return jit(**dict(named_inputs)) if by_name else jit(*[t for _, t in named_inputs])

    for _ in range(3):
        if getattr(jit, "captured", None) is not None:
            break
        call()
    if getattr(jit, "captured", None) is None:
        raise ExportError("the jit did not capture in three runs (is it a TinyJit?)")
    with Capture() as cap:
        result = call()
    named_outputs = _tensors(result, output_names, "output")
    if not cap.launches:
        raise ExportError("the jit's run launched nothing on HEXRPC")

    singles = _kernel_uops(jit)
    # Kernels: one table entry per distinct source, in order of first launch.
    table: dict[str, int] = {}
    sources: list[tuple[str, Any]] = []
    launches = []  # (kernel index, bufs, vals, outs, ins)
    for n, launch in enumerate(cap.launches):
        uop = launch.kernel
        if isinstance(uop, HEXRPCProgram):
            uop = singles.get(id(launch.kernel))
            if uop is None:
                raise ExportError(f"launch {n} ({launch.kernel.name}): its kernel is not one of the captured jit's")
        src = uop.src[2].arg
        if src not in table:
            rec = KernelRecord.parse(src)
            table[src] = len(sources)
            sources.append(rename_kernel(src, rec, f"{rec.name}_hk{len(sources)}"))
        launches.append((table[src], launch.bufs, launch.vals, tuple(uop.arg.outs), tuple(uop.arg.ins)))

    # Arenas: each lease any launch, input or output touches, as long as its furthest used byte.
    ends: dict[int, int] = {}
    io_bufs = [(f"input {n!r}", _device_buffer(t, f"input {n!r}")) for n, t in named_inputs]
    io_bufs += [(f"output {n!r}", _device_buffer(t, f"output {n!r}")) for n, t in named_outputs]
    all_bufs = [b for _, bufs, _, _, _ in launches for b in bufs] + [b for _, b in io_bufs]
    for b in all_bufs:
        lid = b.lease.lease_id
        ends[lid] = max(ends.get(lid, 0), b.lease.arena_offset + b.offset + b.size)
    align = hexrpc.ARENA_ALIGN
    arenas = {lid: _Arena(i, -(-end // align) * align) for i, (lid, end) in enumerate(ends.items())}

    def place(b) -> tuple[_Arena, int, int]:
        return arenas[b.lease.lease_id], b.lease.arena_offset + b.offset, b.size

    for _, b in io_bufs[: len(named_inputs)]:
        a, at, n = place(b)
        a.io[at : at + n] = True

    # Weights: read before any write of the run, not an input; state (a weight written later) refused.
    for j, (k, bufs, _, outs, ins) in enumerate(launches):
        for i in ins:
            a, at, n = place(bufs[i])
            first = ~a.written[at : at + n] & ~a.io[at : at + n] & ~a.weight[at : at + n]
            if first.any():
                host = np.frombuffer(bufs[i].host(), np.uint8)
                a.image[at : at + n][first] = host[first]
                a.weight[at : at + n] |= first
        for i in outs:
            a, at, n = place(bufs[i])
            if a.io[at : at + n].any():
                raise ExportError(
                    f"launch {j} ({sources[k][1].name}) writes an input's bytes: a model file's inputs are only read "
                    "(a device may bind an input to a buffer it does not own, such as a camera frame)"
                )
            if a.weight[at : at + n].any():
                raise ExportError(
                    f"launch {j} ({sources[k][1].name}) writes bytes that an earlier launch read as weights: "
                    "the jit carries state from one run to the next, which a model file does not hold"
                )
            a.written[at : at + n] = True
    for name, b in io_bufs[len(named_inputs) :]:
        a, at, n = place(b)
        if a.weight[at : at + n].any():
            raise ExportError(f"{name} overlaps bytes read as weights")

    # Libraries: at most MAX_BATCH_KERNELS kernels each; steps: runs of launches of one library.
    libs = [sources[i : i + BATCH_MAX_KERNELS] for i in range(0, len(sources), BATCH_MAX_KERNELS)]
    images = [build_batch_library(chunk) for chunk in libs]
    arch = {_elf_arch(img) for img in images}
    if len(arch) != 1:
        raise ExportError(f"the libraries were built for different Hexagon architectures: {sorted(hex(a) for a in arch)}")
    steps: list[tuple[int, list]] = []
    for k, bufs, vals, _, _ in launches:
        lib = k // BATCH_MAX_KERNELS
        views = []
        for b in bufs:
            a, at, n = place(b)
            views.append((a.index, at, n))
        if not steps or steps[-1][0] != lib:
            steps.append((lib, []))
        steps[-1][1].append((k % BATCH_MAX_KERNELS, views, [int(v) & 0xFFFF_FFFF_FFFF_FFFF for v in vals]))

    init = []
    for a in arenas.values():
        idx = np.flatnonzero(a.weight)
        if idx.size == 0:
            continue
        # Contiguous runs of weight bytes.
        cuts = np.flatnonzero(np.diff(idx) != 1) + 1
        for run in np.split(idx, cuts):
            lo, hi = int(run[0]), int(run[-1]) + 1
            init.append((a.index, lo, a.image[lo:hi].tobytes()))

    io = []
    for (direction, items) in (("input", named_inputs), ("output", named_outputs)):
        for name, t in items:
            a, at, _ = place(_device_buffer(t, f"{direction} {name!r}"))
            io.append((name, direction, _np_dtype_name(t.dtype, f"{direction} {name!r}"), [int(d) for d in t.shape], a.index, at))

    try:
        tinygrad_version = importlib.metadata.version("tinygrad")
    except importlib.metadata.PackageNotFoundError:
        tinygrad_version = "unknown"
    digest = source_digest if source_digest is not None else hashlib.sha256("\0".join(s for s, _ in sources).encode()).digest()
    data = hexrpc._hexrpc.write_model(
        arch=arch.pop(),
        source_name=source_name,
        source_digest=digest,
        tinygrad_version=tinygrad_version,
        libraries=[(f"hexrpc_model_{i}", img) for i, img in enumerate(images)],
        arenas=[(a.size, align) for a in arenas.values()],
        init=init,
        steps=steps,
        io=io,
    )
    if verify:
        _verify(data, named_inputs, named_outputs)
    return data


@contextlib.contextmanager
def device_model(data: bytes):
    """A :class:`hexrpc.Model` of ``data`` on the HEXRPC device's session, beside tinygrad: the
    session's library table (``hexrpc.MAX_LIBRARIES``) is shared with tinygrad's programs and
    graphs, so room for the file's libraries is made first (single kernels closed, least
    recently used first) and kept while the model is open."""
    from tinygrad import Device

    dev = Device["HEXRPC"]
    with dev.libraries.reserved(_library_count(data)), hexrpc.Model(data, session=dev.session) as m:
        yield m


def _library_count(data: bytes) -> int:
    """Libraries in a file, from its section table (docs/model-format.md: the header's section
    count at 24, 24-byte entries from 64, kind 2 holding 32-byte entries). Only a count of slots
    to make room for: the file is validated whole when it is opened."""
    import struct

    if len(data) < 64 or data[:8] != b"HXMODEL\0":
        return 1
    sections = struct.unpack_from("<I", data, 24)[0]
    for i in range(min(sections, 16)):
        if len(data) < 64 + 24 * (i + 1):
            break
        kind, _, _, length = struct.unpack_from("<IIQQ", data, 64 + 24 * i)
        if kind == 2:  # Libraries: 32 bytes each
            return max(1, length // 32)
    return 1


def _verify(data: bytes, named_inputs, named_outputs) -> None:
    """Runs the file on the device's session and compares its outputs with the jit's, bit for bit."""
    want = {n: t.numpy() for n, t in named_outputs}
    with device_model(data) as m:
        got = m.run(**{n: t.numpy() for n, t in named_inputs})
    for name, w in want.items():
        g = got[name]
        if g.shape != w.shape or g.dtype != w.dtype or g.tobytes() != w.tobytes():
            bad = int(np.count_nonzero(g.view(np.uint8) != w.view(np.uint8))) if g.nbytes == w.nbytes else -1
            raise ExportError(f"the exported file's output {name!r} differs from the jit's ({bad} bytes differ): not written")


def onnx_jit(path: str | Path, shapes: Mapping[str, tuple[int, ...]]):
    """``(jit, prepared)``: a ``TinyJit`` that runs the ONNX model at ``path`` (inputs pinned to
    ``shapes``) through tinygrad's ``OnnxRunner`` on HEXRPC, called by keyword with one realized
    HEXRPC tensor per input and returning the graph's outputs in order; and the prepared model
    (:func:`hexrpc.onnx_model.prepare`: its inputs' shapes and dtypes, its output names)."""
    _require_tinygrad()
    from tinygrad import TinyJit
    from tinygrad.helpers import Context

    from .onnx_model import TinygradRun, prepare

    prepared = prepare(path, shapes)
    run = TinygradRun(prepared, "HEXRPC")
    names = prepared.outputs

    def step(**kw):
        with Context(DEV="HEXRPC"):
            outs = run.runner(kw)
        return [outs[n].realize() for n in names]

    jit = TinyJit(step)
    jit._hexrpc_runner = run  # keeps the runner (and the file its tensors read) alive with the jit
    return jit, prepared


def export_onnx(path: str | Path, shapes: Mapping[str, tuple[int, ...]], *, seed: int = 0, verify: bool = True) -> bytes:
    """The model file of the ONNX model at ``path`` with its inputs pinned to ``shapes``, captured
    through tinygrad's ``OnnxRunner`` under ``TinyJit`` on HEXRPC (:func:`onnx_jit`; inputs:
    seeded random arrays, :func:`hexrpc.onnx_model.random_inputs`)."""
    from tinygrad import Tensor

    from .onnx_model import random_inputs

    jit, prepared = onnx_jit(path, shapes)
    arrays = random_inputs(prepared.inputs, seed)
    inputs = {k: Tensor(v, device="HEXRPC").realize() for k, v in arrays.items()}
    digest = hashlib.sha256(Path(path).read_bytes()).digest()
    return export_jit(jit, inputs, output_names=prepared.outputs, source_name=Path(path).name, source_digest=digest, verify=verify)


def _shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: use NAME=DxDx... (e.g. x=1x3x48x192)")
    try:
        shape = tuple(int(d) for d in dims.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: dimensions must be integers separated by x") from None
    if any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: dimensions must be positive")
    return name, shape


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m hexrpc.export``: see ``--help``."""
    p = argparse.ArgumentParser(
        prog="python -m hexrpc.export",
        description=(
            "Export an ONNX model as a hexrpc model file: captured through tinygrad on the HEXRPC device "
            "(the bench with HEXRPC_BENCH=1), its kernels built into kernel-table libraries (clang-19, "
            "ld.lld-19: the one step that needs them), checked by running the file and comparing its "
            "outputs with tinygrad's bit for bit, then written. The file runs with no compiler: "
            "hexrpc model run, hexrpc.Model, hexrpc_model_open (C), hexrpc_sdk::Model (Rust)."
        ),
        epilog="Exit status: 0 written; 1 the export failed (the message says why); 2 bad arguments.",
    )
    p.add_argument("model", help="the ONNX model file")
    p.add_argument("--input", action="append", type=_shape, default=[], metavar="NAME=DxD...", help="an input's shape (repeat per input)")
    p.add_argument("-o", "--output", required=True, help="the model file to write (.hxm)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs the capture runs on (default 0)")
    p.add_argument("--no-verify", action="store_true", help="do not run the file to compare it with tinygrad before writing it")
    args = p.parse_args(argv)
    try:
        data = export_onnx(args.model, dict(args.input), seed=args.seed, verify=not args.no_verify)
    except (ExportError, hexrpc.Error, OSError) as e:
        print(f"hexrpc.export: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001  (onnx_model.ModelError and tinygrad's own errors)
        print(f"hexrpc.export: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    out = Path(args.output)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    print(f"wrote {out} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
