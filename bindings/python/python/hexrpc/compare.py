"""``python -m hexrpc.compare``: an ONNX model on the HEXRPC tinygrad device beside a reference,
node by node, then its full-model latency under ``TinyJit``.

What it does
    The model runs with tinygrad's ONNX runner (``tinygrad.nn.onnx.OnnxRunner``) on the device
    under test (``HEXRPC``, see :mod:`hexrpc.tinygrad`) and on the reference, onnxruntime's CPU
    provider or tinygrad's CPU device, on the same input: uniform in [-1, 1], drawn from a
    generator seeded with ``--seed``. The outputs of the selected nodes are compared, in graph
    order, and the first node past its tolerance is named: the node whose kernels went wrong
    first (later nodes inherit its error). Then the model runs ``--runs`` times as one
    ``TinyJit`` function on the device under test, and the host wall time of each run, with the
    bench's counters, is summarised.

How node values are exposed
    onnxruntime: the selected nodes' outputs are added to the graph's outputs, and the session
    runs with graph optimizations off. tinygrad: the runner's value of each selected node is
    realized right after the node's op (a kernel boundary per node), see
    :mod:`hexrpc.onnx_model`. ``Constant`` nodes are not compared: their values are the
    model's bytes, and a wrong copy shows in their first consumer.

What the tool changes in the model (a copy; see :mod:`hexrpc.onnx_model`)
    Dynamic input dimensions (-1, ``?``, named) are pinned to ``--input``. Tensors with no
    elements get an explicit empty ``raw_data``: tinygrad's ``OnnxPBParser._parse_TensorProto``
    asserts exactly one data field and an empty tensor (the PP-OCRv4 detector's Resize ``roi``,
    ``Constant`` nodes of dims ``[0]``) has none, so without this tinygrad stops while loading.

Tolerance
    A floating value is within tolerance when every element satisfies
    ``|dut - ref| <= atol * max(1, S) + rtol * |ref|``, where ``S`` is the largest ``|ref|`` of
    that node output, and NaN and infinity sit in the same places; integers and booleans must be
    equal. So ``atol`` is absolute for outputs within [-1, 1] and relative to the output's scale
    above: two float32 implementations summing in another order differ by a few ulp of the
    terms, which grow with the output (random inputs drive the detector's deep layers to several
    thousand, where tinygrad on CPU and onnxruntime differ by 6e-3), while a wrong kernel is off
    by the order of ``S``. Defaults by the reference's dtype: float32 atol 1e-5, rtol 1e-3 (on
    the two PP-OCR models the worst node uses 12 % and 27 % of it); float16 and bfloat16 atol
    1e-2, rtol 1e-2; float64 atol 1e-7, rtol 1e-6. ``max rel`` is the largest
    ``|dut - ref| / |ref|`` over elements with ``|ref| > atol`` (others have no meaningful
    relative error); the JSON's ``tolerance_used`` is the largest error over its allowance.

Latency (what each figure is)
    Each figure is labelled: *emulated* is host wall time with the kernels run under
    qemu-hexagon on the bench (a measure of the emulation, not of a DSP); *simulated* comes from
    the bench's cost model or its simulated driver (``hexrpc.bench_counters``); *device* is
    measured on a device. Off the bench, FastRPC calls are the device's own count (single
    launches plus batch runs) and DSP maps and bytes copied are not known.

Memory shared with the DSP changes under the host while a kernel runs; the tool reads a node's
value only after the launches that write it have returned (every HEXRPC launch is synchronous).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hexrpc.onnx_model import (
    ModelError,
    NodeInfo,
    OrtRun,
    PreparedModel,
    TinygradRun,
    check_cache_dirs,
    check_seed,
    check_shape,
    prepare,
    random_inputs,
)

__all__ = [
    "BENCH_CALL_LIMIT_MS",
    "DEFAULT_TOLERANCES",
    "EXIT_PAST",
    "EXIT_USAGE",
    "EXIT_WITHIN",
    "Latency",
    "NodeRow",
    "Options",
    "Report",
    "Tolerance",
    "bench_call_limit",
    "compare_values",
    "main",
    "parse_args",
    "percentile",
    "run",
    "select_nodes",
]

EXIT_WITHIN, EXIT_PAST, EXIT_USAGE = 0, 1, 2

#: tinygrad's jit runs a function plainly once, captures it on the second call and replays the
#: capture from the third: the runs before the measured ones.
WARMUP_RUNS = 2

#: The bench's per-call limit (ms) this tool opens its session with on the bench, unless
#: ``HEXRPC_BENCH_CALL_LIMIT_MS`` is set (see :func:`bench_call_limit`). The bench's own default
#: is 10 s; one TinyJit graph of YOLOv8n at 1x3x160x160 or PP-OCRv4's recognizer at 1x3x48x320
#: is one FastRPC call and outlasts that under qemu-hexagon.
BENCH_CALL_LIMIT_MS = 600_000


# -------------------------------------------------------------------------------------------------
# Tolerance and comparison


@dataclass(frozen=True)
class Tolerance:
    """``|dut - ref| <= atol * max(1, scale) + rtol * |ref|`` elementwise, where ``scale`` is the
    largest ``|ref|`` of the value compared; (0, 0) is exact equality."""

    atol: float
    rtol: float

    def allowed(self, ref_abs: np.ndarray, scale: float) -> np.ndarray:
        return self.atol * max(1.0, scale) + self.rtol * ref_abs

    def __str__(self) -> str:
        return "exact" if self.atol == 0 and self.rtol == 0 else f"atol {self.atol:g} rtol {self.rtol:g}"


#: Per reference dtype (see the module documentation); integers and booleans are exact.
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(1e-5, 1e-3),
    "float16": Tolerance(1e-2, 1e-2),
    "bfloat16": Tolerance(1e-2, 1e-2),
    "float64": Tolerance(1e-7, 1e-6),
}
EXACT = Tolerance(0.0, 0.0)


def tolerance_for(dtype: np.dtype, table: Mapping[str, Tolerance]) -> Tolerance:
    return table.get(np.dtype(dtype).name, EXACT) if np.dtype(dtype).kind == "f" else EXACT


@dataclass
class NodeRow:
    """One compared node output."""

    index: int
    op: str
    output: str
    shape: list[int] | None
    dtype: str | None
    max_abs: float | None
    max_rel: float | None
    atol: float
    rtol: float
    within: bool
    note: str = ""
    #: Largest |dut - ref| / allowed (see :class:`Tolerance`): 1 is the edge of the tolerance.
    tolerance_used: float | None = None
    #: Largest finite |ref| (the scale the tolerance's atol is relative to above 1).
    ref_max_abs: float | None = None


def compare_values(dut: np.ndarray | None, ref: np.ndarray | None, tol: Tolerance) -> tuple[float | None, float | None, bool, str]:
    """(max abs error, max rel error, within, note) of ``dut`` against ``ref``."""
    max_abs, max_rel, within, note, _ = compare_detail(dut, ref, tol)
    return max_abs, max_rel, within, note


def compare_detail(dut: np.ndarray | None, ref: np.ndarray | None, tol: Tolerance) -> tuple[float | None, float | None, bool, str, float | None]:
    """:func:`compare_values` and the largest ``|dut - ref|`` over its allowance
    (:meth:`Tolerance.allowed`) among the finite elements (how much of its tolerance the node uses; ``None`` for exact comparisons)."""
    if ref is None and dut is None:
        return None, None, True, "no value on either side", None
    if ref is None or dut is None:
        return None, None, False, "no value from the device" if dut is None else "no value from the reference", None
    dut, ref = np.asarray(dut), np.asarray(ref)
    if dut.shape != ref.shape:
        return None, None, False, f"shape {list(dut.shape)} != reference {list(ref.shape)}", None
    if dut.size == 0:
        return 0.0, 0.0, True, "empty", None
    if ref.dtype.kind in "fc" or dut.dtype.kind in "fc":
        a, b = dut.astype(np.float64), ref.astype(np.float64)
        notes = []
        nan_ok = np.array_equal(np.isnan(a), np.isnan(b))
        if not nan_ok:
            notes.append("NaN in other places")
        inf_a, inf_b = np.isinf(a), np.isinf(b)
        inf_ok = np.array_equal(inf_a, inf_b) and np.array_equal(a[inf_a], b[inf_b])
        if not inf_ok:
            notes.append("infinities differ")
        fin = np.isfinite(a) & np.isfinite(b)
        err = np.abs(a[fin] - b[fin])
        mag = np.abs(b[fin])
        scale = float(mag.max()) if mag.size else 0.0
        max_abs = float(err.max()) if err.size else 0.0
        big = mag > max(tol.atol, np.finfo(np.float64).tiny)
        max_rel = float((err[big] / mag[big]).max()) if big.any() else 0.0
        allowed = tol.allowed(mag, scale)
        close = bool(np.all(err <= allowed))
        used = None
        if err.size and allowed.min() > 0:
            used = float((err / allowed).max())
        return max_abs, max_rel, close and nan_ok and inf_ok, "; ".join(notes), used
    a, b = dut.astype(np.int64) if dut.dtype.kind == "b" else dut, ref.astype(np.int64) if ref.dtype.kind == "b" else ref
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    max_abs = float(diff.max())
    big = np.abs(b) > 0
    max_rel = float((diff[big] / np.abs(b[big])).max()) if big.any() else 0.0
    return max_abs, max_rel, bool(np.array_equal(a, b)), "", None


# -------------------------------------------------------------------------------------------------
# Options


@dataclass
class Options:
    """What one comparison does (the command line, parsed)."""

    model: str
    shapes: dict[str | None, tuple[int, ...]]
    reference: str = "onnxruntime"
    device: str = "HEXRPC"
    nodes: str = "all"
    runs: int = 20
    seed: int = 0
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    json: bool = False
    profile: bool = False


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected dimensions joined by x, e.g. 1x3x48x192") from None
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"shape {text!r}: every dimension must be a positive integer")
    try:
        return check_shape("--input", dims)
    except ModelError as e:
        raise argparse.ArgumentTypeError(f"shape {text!r}: {str(e).removeprefix('input --input: ')}") from None


def parse_seed(text: str) -> int:
    try:
        return check_seed(int(text))
    except (ValueError, ModelError):
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer from 0 to {(1 << 64) - 1}") from None


def parse_input(text: str) -> tuple[str | None, tuple[int, ...]]:
    name, sep, shape = text.rpartition("=")
    return (name if sep else None), parse_shape(shape)


def parse_tolerance(text: str) -> tuple[list[str], Tolerance]:
    """``[DTYPE:]atol=A,rtol=R`` (either part may be left out: it keeps the default)."""
    dtypes, _, spec = text.rpartition(":")
    names = [d.strip() for d in dtypes.split("+")] if dtypes else [k for k in DEFAULT_TOLERANCES]
    for n in names:
        if n not in DEFAULT_TOLERANCES:
            raise argparse.ArgumentTypeError(f"tolerance {text!r}: no floating dtype {n!r} (known: {', '.join(DEFAULT_TOLERANCES)})")
    vals: dict[str, float] = {}
    for part in spec.split(","):
        key, eq, num = part.partition("=")
        key = key.strip()
        if not eq or key not in ("atol", "rtol"):
            raise argparse.ArgumentTypeError(f"tolerance {text!r}: expected atol=A and/or rtol=R, comma-separated")
        try:
            v = float(num)
        except ValueError:
            raise argparse.ArgumentTypeError(f"tolerance {text!r}: {num!r} is not a number") from None
        if not (v >= 0 and math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"tolerance {text!r}: {key} must be finite and >= 0")
        vals[key] = v
    return names, Tolerance(vals.get("atol", math.nan), vals.get("rtol", math.nan))


def parse_nodes(text: str) -> str:
    if text == "all":
        return text
    kind, _, num = text.rpartition(":")
    if kind not in ("", "first") or not num.isdigit() or int(num) <= 0:
        raise argparse.ArgumentTypeError(f"--nodes {text!r}: expected all, K or first:K (K a positive integer)")
    return text


HELP = """\
DESCRIPTION
  Runs MODEL with tinygrad's ONNX runner on the HEXRPC device and on a reference, on one seeded
  random input, compares the output of every selected node (graph order), names the first node
  past tolerance, then times the whole model as a TinyJit function on HEXRPC.

  The input is uniform in [-1, 1] (floating inputs; integer inputs uniform in [0, 4)), drawn
  from numpy's default generator seeded with --seed, input by input in graph order: the same
  arrays on both sides.

NODE SELECTION (--nodes)
  all       every node except Constant nodes (their values are the model's bytes; a wrong copy
            shows in their first consumer).
  K         K of those nodes evenly spread over the graph (the first and the last included).
  first:K   the first K of those nodes.
  The model's outputs are always compared too (as their producing nodes).

MODEL CHANGES (made to a copy; the file is not written)
  Dynamic input dimensions (-1, ?, named) are pinned to --input; a fixed dimension that
  disagrees is an error. Tensors with no elements (the PP-OCRv4 detector's Resize roi, Constant
  nodes of dims [0]) carry no data field, and tinygrad 0.14's parser
  (OnnxPBParser._parse_TensorProto: "only 1 data field is allowed") stops on them: they get an
  explicit empty raw_data. The report lists both.

TOLERANCE (--tolerance)
  Floating values: within when every element has |dut - ref| <= atol * max(1, S) + rtol * |ref|,
  S the largest |ref| of that output (atol is absolute up to 1, relative to the output's scale
  above), and NaN and infinity sit in the same places. Integers and booleans: equal. Defaults by
  the reference's dtype:
    float32            atol 1e-5  rtol 1e-3
    float16, bfloat16  atol 1e-2  rtol 1e-2
    float64            atol 1e-7  rtol 1e-6
  --tolerance [DTYPE[+DTYPE...]:]atol=A,rtol=R changes them (no DTYPE: every floating dtype);
  repeat it for several. max rel is over elements with |ref| > atol.

LATENCY
  --runs N TinyJit runs of the whole model on HEXRPC, after %(warmup)d warm-up runs (tinygrad's jit runs
  plainly, then captures, then replays): the input is copied to the device before each run and
  the output left there. Host wall time p50, p99, p99.9 and max (nearest rank; with fewer than
  1000 runs p99.9 is the maximum). On the bench (HEXRPC_BENCH=1), per run: the invokes'
  simulated time, FastRPC calls (invokes), DSP maps (HAP_mmap calls of the DSP-side entries,
  with the driver's MMAP requests) and KiB copied (derived from the bench's cost model). Labels:
    emulated   host wall time; on the bench the kernels run under qemu-hexagon
    simulated  the bench's cost model or its simulated driver's count
    device     measured on a device (HEXRPC_BENCH unset)
  --runs 0 skips the latency.

PROFILE
  --profile (with --runs above 0): during the measured runs, every kernel's DSP time, read on
  the DSP right around each kernel call (HAP_perf_get_time_us, written by the entry after each
  batch's status), summed per tinygrad kernel name: launches and microseconds per run, and the
  share of the DSP time. The line above the table says what the kernel times add up to per run
  beside the run's host wall time. On the bench these are emulated figures (Hexagon code under
  qemu-hexagon: the host's clock), labelled so; on a device, device figures. A batch whose
  library was built before per-record times counts as one untimed sum. On the bench each row
  also has the kernel's emulated packets per run and its HVX share (see EMULATED PACKETS). In
  --json: latency.kernels (packets_per_run, hvx_share on the bench) and latency.profile_summary.

EMULATED PACKETS
  On the bench the latency block has emulated_packets, emulated_instructions and emulated_hvx:
  what qemu-hexagon executed per jit run, by its own counters (the bench's DSP shell reads them
  around each call and each kernel). They are emulated packets, not DSP time: exact and
  repeatable run to run (p50 equal to max), where host time under qemu is noise; compare two
  builds of one model with them (fewer packets, a larger HVX share), never a deadline.

OUTPUT
  A table (node index, op type, output name, shape, max abs error, max rel error, tolerance,
  within/PAST), the first node past tolerance, then the latency block. With --json: one JSON
  document with the same content (keys: model, inputs, seed, reference, device, selection,
  tolerances, prepared, nodes, first_past, latency, error, failure, exit_status) and nothing else
  on stdout. Progress goes to stderr. The report is printed whole whatever fails on the device:
  a failure in the per-node phase names the node the device was running (failure.node) and
  keeps the values of every node before it; a failure in the latency phase keeps every node's
  values and names the run (warm-up or measured) and, when the error says, the kernel. The
  whole model runs there as one TinyJit function, whose kernels fuse nodes, so the tool then
  runs the model node by node once more: the node where that rerun fails is named
  (failure.located_by says so); if it does not fail, failure.why_no_node says so.

EXIT STATUS
  0  every compared node within tolerance
  1  some node past tolerance, or the device under test failed (in either phase; see OUTPUT)
  2  usage error (a shape past its limit, a negative seed, ...), an unreadable model, a model
     tinygrad's ONNX runner cannot load or run (an unknown opset domain, an op it lacks), a
     missing package, a cache that cannot be written, the reference failed

ENVIRONMENT
  HEXRPC_BENCH=1  run on hexrpc's bench (kernels under qemu-hexagon); else on the device.
  HEXRPC_BENCH_CALL_LIMIT_MS
                  bench only: how long one DSP call may run before the bench ends the DSP
                  process (a restart, and the device fails), in milliseconds. The bench's
                  default is 10000 (10 s), but the latency phase runs the whole model as TinyJit
                  graphs, each one FastRPC call, and under qemu-hexagon a real model's graph
                  takes longer; so on the bench this tool opens its session with %(call_limit)d
                  (%(call_limit_min)d min) unless this variable is set, which wins (set it to
                  raise the limit further). The limit is the session's, so it holds for the
                  per-node phase too.
  HEXRPC_CLI      the hexrpc tool that builds the kernels (else `hexrpc` on PATH).
  CC              the C compiler of tinygrad's CPU device (--reference cpu), e.g. clang-19.
  XDG_CACHE_HOME  where the caches go (else ~/.cache): tinygrad's kernel cache (tinygrad/;
                  CACHEDB=FILE moves it, CACHELEVEL=0 turns it off) and the bench's build cache
                  of its DSP shell (hexrpc/exec-build; HEXRPC_EXEC_CACHE=DIR moves it). A cache
                  that cannot be written is an environment error (exit 2), checked first.

EXAMPLES
  HEXRPC_BENCH=1 python -m hexrpc.compare cls.onnx --input 1x3x48x192
  python -m hexrpc.compare det.onnx --input x=1x3x64x64 --nodes 40 --runs 100 --json
  python -m hexrpc.compare cls.onnx --input 1x3x48x192 --reference cpu --tolerance float32:atol=1e-5
"""


class _Parser(argparse.ArgumentParser):
    """A usage error is one line on standard error (the argument and what it must be), exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (--help for usage)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m hexrpc.compare",
        description="Compare an ONNX model on HEXRPC with a reference, node by node, and time it under TinyJit.",
        epilog=HELP % {"warmup": WARMUP_RUNS, "call_limit": BENCH_CALL_LIMIT_MS, "call_limit_min": BENCH_CALL_LIMIT_MS // 60_000},
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL.onnx", help="the ONNX model (at most 2 GiB, no external data)")
    p.add_argument(
        "--input",
        metavar="[NAME=]SHAPE",
        action="append",
        type=parse_input,
        required=True,
        help="shape of an input, dimensions joined by x (1x3x48x192); NAME= may be left out for a model with one input; "
        "repeat for several inputs. Pins the model's dynamic dimensions.",
    )
    p.add_argument("--reference", choices=("onnxruntime", "cpu"), default="onnxruntime", help="onnxruntime's CPU provider (default) or tinygrad's CPU device")
    p.add_argument("--device", default="HEXRPC", help="the tinygrad device under test (default HEXRPC)")
    p.add_argument("--nodes", default="all", type=parse_nodes, metavar="all|K|first:K", help="which nodes to compare (default all; see NODE SELECTION)")
    p.add_argument("--runs", type=int, default=20, metavar="N", help="TinyJit runs to time after the warm-up (default 20; 0: no latency)")
    p.add_argument("--tolerance", action="append", type=parse_tolerance, default=[], metavar="[DTYPE:]atol=A,rtol=R", help="see TOLERANCE")
    p.add_argument("--seed", type=parse_seed, default=0, metavar="S", help="seed of the random input, 0 to 2^64-1 (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.add_argument(
        "--profile",
        action="store_true",
        help="with the latency runs: where the DSP time went, per tinygrad kernel (see PROFILE)",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """The command line as :class:`Options` (argparse exits 2 on a usage error)."""
    ns = build_parser().parse_args(argv)
    if ns.runs < 0:
        build_parser().error("--runs must be >= 0")
    shapes: dict[str | None, tuple[int, ...]] = {}
    for name, shape in ns.input:
        if name in shapes:
            build_parser().error(f"--input {name or '(the only input)'} given twice")
        shapes[name] = shape
    if None in shapes and len(shapes) > 1:
        build_parser().error("--input without NAME= is only for a model with one input")
    tols = dict(DEFAULT_TOLERANCES)
    for names, t in ns.tolerance:
        for n in names:
            old = tols[n]
            tols[n] = Tolerance(old.atol if math.isnan(t.atol) else t.atol, old.rtol if math.isnan(t.rtol) else t.rtol)
    if ns.profile and ns.runs == 0:
        build_parser().error("--profile times the latency runs: it needs --runs above 0")
    return Options(ns.model, shapes, ns.reference, ns.device, ns.nodes, ns.runs, ns.seed, tols, ns.json, ns.profile)


# -------------------------------------------------------------------------------------------------
# Selection


def select_nodes(nodes: Sequence[NodeInfo], spec: str, outputs: Sequence[str] = ()) -> tuple[list[int], str]:
    """(indices of the nodes to compare, in graph order; a sentence saying which). Constant nodes
    are never selected; the producers of the graph's ``outputs`` always are."""
    candidates = [n.index for n in nodes if n.op != "Constant"]
    producers = {n.index for n in nodes for o in n.outputs if o and o in set(outputs)}
    skipped = len(nodes) - len(candidates)
    if spec == "all":
        chosen, how = candidates, f"all {len(candidates)} nodes except {skipped} Constant nodes"
    elif spec.startswith("first:"):
        k = int(spec.split(":")[1])
        chosen, how = candidates[:k], f"the first {min(k, len(candidates))} of {len(candidates)} non-Constant nodes"
    else:
        k = min(int(spec), len(candidates))
        picks = sorted({round(x) for x in np.linspace(0, len(candidates) - 1, k)}) if k > 1 else [len(candidates) - 1]
        chosen, how = [candidates[p] for p in picks], f"{len(picks)} of {len(candidates)} non-Constant nodes, evenly spread"
    extra = sorted(producers - set(chosen))
    if extra:
        how += f", and the {len(extra)} producing the model's outputs"
    return sorted(set(chosen) | producers), how


# -------------------------------------------------------------------------------------------------
# Latency


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0 < q <= 100) of ``values``."""
    v = sorted(values)
    return v[max(0, math.ceil(q / 100 * len(v)) - 1)]


def _summary(values: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99), "p99.9": percentile(values, 99.9), "max": max(values)}


@dataclass
class Latency:
    """The latency block: per-run figures summarised, each with its label."""

    runs: int
    warmup_runs: int
    on_bench: bool
    figures: dict[str, dict[str, Any]]
    #: With ``--profile``: per tinygrad kernel, ``{kernel, launches_per_run, us_per_run,
    #: share}`` (the most time first), each record's time measured on the DSP around its kernel
    #: (``label`` says emulated or device); ``None`` without.
    kernels: list[dict[str, Any]] | None = None
    #: With ``--profile``: the label of the kernel times, the DSP us per run they add up to, and
    #: batches whose library did not time its records (their time is in ``untimed_us_per_run``).
    profile_summary: dict[str, Any] | None = None


def _device_calls(dev) -> int:
    s = getattr(dev, "stats", None)
    return (s.launches + s.batch_runs) if s is not None else 0


def measure_latency(model: PreparedModel, arrays: Mapping[str, np.ndarray], device: str, runs: int,
                    progress: dict[str, Any] | None = None, profile: bool = False) -> Latency:
    """``runs`` TinyJit runs of the whole model on ``device`` after :data:`WARMUP_RUNS`.
    ``progress``, when given, holds the run under way (``run``: 1-based within its kind,
    ``warmup``: whether it is a warm-up run), for the report of a failure."""
    progress = progress if progress is not None else {}
    from tinygrad import Device, Tensor, TinyJit

    import hexrpc

    tg = TinygradRun(model, device)
    names = list(arrays)
    dev = Device[device]
    session = getattr(dev, "session", None)
    counters: Callable[[], dict[str, Any]] | None = None
    exec_counts: Callable[[], dict[str, Any]] | None = None
    if session is not None:
        try:
            hexrpc.bench_counters(session)
            counters = functools.partial(hexrpc.bench_counters, session)
            exec_counts = functools.partial(hexrpc.take_exec_counts, session)
        except hexrpc.Error:
            counters = None

    def step(*xs):
        outs = [o for o in tg.runner(dict(zip(names, xs))).values() if isinstance(o, Tensor)]
        Tensor.realize(*outs)
        return outs

    jit = TinyJit(step)
    wall: list[float] = []
    per: dict[str, list[float]] = {}
    times: list[tuple[str | None, int]] = []
    # Per kernel name: [packets, instructions, hvx] over the timed runs (bench, --profile).
    kernel_counts: dict[str, list[int]] = {}
    if profile and not hasattr(dev, "profile"):
        raise ModelError(f"--profile: the device {device} does not report per-kernel DSP times (HEXRPC does)")
    from tinygrad.helpers import Context

    with Context(DEV=device):
        for i in range(WARMUP_RUNS + runs):
            progress["warmup"], progress["run"] = i < WARMUP_RUNS, (i + 1 if i < WARMUP_RUNS else i + 1 - WARMUP_RUNS)
            xs = [tg.inputs({k: arrays[k]})[k] for k in names]
            c0, k0 = (counters() if counters else None), _device_calls(dev)
            if exec_counts is not None:
                exec_counts()  # what ran before this run is not its count
            n_times = len(times)
            timed = profile and i >= WARMUP_RUNS
            if timed:
                dev.profile = times
            t0 = time.perf_counter()
            try:
                jit(*xs)
            finally:
                if timed:
                    dev.profile = None
            t1 = time.perf_counter()
            c1, k1 = (counters() if counters else None), _device_calls(dev)
            ec = exec_counts() if exec_counts is not None else None
            if i < WARMUP_RUNS:
                continue
            wall.append(t1 - t0)
            if ec is not None:
                inv = ec["invokes"]
                for key in ("packets", "instructions", "hvx"):
                    per.setdefault(f"emulated_{key}", []).append(sum(x[key] for x in inv) if not ec["dropped"] else None)
                if timed:
                    _attribute_counts(inv, times[n_times:], kernel_counts)
            if c0 is not None and c1 is not None:
                d = {k: (c1[k] - c0[k]) if c1.get(k) is not None and c0.get(k) is not None else None for k in c1}
                for k, v in d.items():
                    per.setdefault(k, []).append(v)
            else:
                per.setdefault("device_calls", []).append(k1 - k0)
    on_bench = counters is not None
    figs: dict[str, dict[str, Any]] = {
        "host_wall_s": {"label": "emulated" if on_bench else "device", **_summary(wall),
                        "what": "host wall time of one jit run" + (" (kernels under qemu-hexagon)" if on_bench else "")},
    }
    if on_bench:
        def add(key, src, what, scale=1.0):
            vals = per.get(src)
            if not vals or any(v is None for v in vals):
                figs[key] = {"label": "simulated", "what": what, "p50": None, "p99": None, "p99.9": None, "max": None}
                return
            figs[key] = {"label": "simulated", "what": what, **_summary([v * scale for v in vals])}

        add("simulated_us", "simulated_invoke_us", "the invokes' latency by the bench's cost model")
        add("fastrpc_calls", "invokes", "FastRPC INVOKE ioctls counted by the bench's driver")
        add("dsp_maps", "dsp_maps", "HAP_mmap calls the DSP-side entries made (bench ledger)")
        add("driver_maps", "driver_maps", "FastRPC MMAP requests to the driver")
        add("copied_kib", "copied_kib", "KiB copied user<->kernel by the invokes (each rounded up to a KiB; from the cost model)")
        for key, what in (
            ("packets", "Hexagon packets qemu-hexagon executed per jit run (its own count: emulated packets, not DSP time)"),
            ("instructions", "Hexagon instructions qemu-hexagon executed per jit run (emulated)"),
            ("hvx", "HVX instructions among them (emulated)"),
        ):
            vals = per.get(f"emulated_{key}")
            if vals and all(v is not None for v in vals):
                figs[f"emulated_{key}"] = {"label": "emulated", "what": what, **_summary(vals)}
        dropped = [v for k in ("ledger_dropped", "latencies_dropped") for v in per.get(k, []) if v]
        if dropped:
            figs["note"] = {"label": "simulated", "what": "the bench's logs dropped entries: maps, time and copies undercount"}
    else:
        figs["fastrpc_calls"] = {"label": "device", "what": "single launches + batch runs counted by the device", **_summary(per["device_calls"])}
        for key in ("dsp_maps", "copied_kib"):
            figs[key] = {"label": "device", "what": "not known off the bench", "p50": None, "p99": None, "p99.9": None, "max": None}
    lat = Latency(runs, WARMUP_RUNS, on_bench, figs)
    if profile:
        lat.kernels, lat.profile_summary = _per_kernel(times, runs, on_bench, sum(wall))
        if kernel_counts:
            for r in lat.kernels:
                c = kernel_counts.get(r["kernel"])
                if c is not None:
                    r["packets_per_run"] = c[0] / runs
                    r["hvx_share"] = (c[2] / c[1]) if c[1] else 0.0
    return lat


def _attribute_counts(invokes: Sequence[dict[str, Any]], run_times: Sequence[tuple[str | None, int]],
                      acc: dict[str, list[int]]) -> None:
    """Adds each kernel's emulated counts of one run to ``acc`` by kernel name: the batch and
    program invokes' per-kernel counts, in run order, are the run's timed records (``run_times``,
    in the same order). Nothing is added when they do not pair one to one (an untimed batch, a
    single launch, a count the bench could not split)."""
    kernels: list[tuple[int, int, int]] = []
    for inv in invokes:
        if inv["method"] not in (2, 3, 5):
            continue
        if inv["kernels"] is None:
            return
        kernels.extend(inv["kernels"])
    if len(kernels) != len(run_times) or any(name is None for name, _ in run_times):
        return
    for (name, _), (p, n, h) in zip(run_times, kernels):
        a = acc.setdefault(name, [0, 0, 0])  # type: ignore[arg-type]
        a[0] += p
        a[1] += n
        a[2] += h


def _per_kernel(times: Sequence[tuple[str | None, int]], runs: int, on_bench: bool, wall_s: float):
    """The per-kernel table of ``--profile`` from the ``(kernel, us)`` of ``runs`` runs."""
    acc: dict[str, list[int]] = {}
    untimed = 0
    for name, us in times:
        if name is None:
            untimed += us
            continue
        n_us = acc.setdefault(name, [0, 0])
        n_us[0] += 1
        n_us[1] += us
    total = sum(us for _, us in acc.values())
    rows = [
        {"kernel": k, "launches_per_run": n / runs, "us_per_run": us / runs, "share": (us / total) if total else 0.0}
        for k, (n, us) in acc.items()
    ]
    rows.sort(key=lambda r: (-r["us_per_run"], r["kernel"]))
    label = "emulated" if on_bench else "device"
    summary = {
        "label": label,
        "what": "DSP time around each kernel call (HAP_perf_get_time_us)" + (": Hexagon code under qemu-hexagon, host time" if on_bench else ""),
        "dsp_us_per_run": total / runs,
        "untimed_us_per_run": untimed / runs,
        "wall_us_per_run": wall_s * 1e6 / runs,
    }
    return rows, summary


# -------------------------------------------------------------------------------------------------
# Running


@dataclass
class Report:
    """Everything the comparison found (what ``--json`` prints)."""

    model: str
    inputs: dict[str, list[int]]
    seed: int
    reference: str
    device: str
    selection: str
    tolerances: dict[str, dict[str, float]]
    prepared: dict[str, Any]
    nodes: list[NodeRow]
    first_past: NodeRow | None
    latency: Latency | None
    error: str | None = None
    #: The device under test's failure, if any: phase ("nodes" or "latency"), node, op and
    #: output (the node it was running, per-node phase), run and warmup (latency phase), kernel
    #: (when the error names one), error; in the latency phase, the node a node-by-node rerun
    #: failed at (located_by says so) or why_no_node.
    failure: dict[str, Any] | None = None

    @property
    def exit_status(self) -> int:
        return EXIT_PAST if self.first_past is not None or self.failure is not None else EXIT_WITHIN

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["exit_status"] = self.exit_status
        return d


def bench_call_limit(device: str, environ: Mapping[str, str]) -> int | None:
    """The per-call limit (ms) this tool gives the bench's session for ``device`` in the
    environment ``environ``: :data:`BENCH_CALL_LIMIT_MS` for ``HEXRPC`` (or ``HEXRPC:n``) on the
    bench (``HEXRPC_BENCH`` set, not ``0``); ``None`` (the session's own limit) off the bench,
    for another device, or when ``HEXRPC_BENCH_CALL_LIMIT_MS`` is set (the user's limit)."""
    if device.split(":")[0].upper() != "HEXRPC" or environ.get("HEXRPC_BENCH", "") in ("", "0"):
        return None
    if "HEXRPC_BENCH_CALL_LIMIT_MS" in environ:
        return None
    return BENCH_CALL_LIMIT_MS


def _open_device(device: str, log: Callable[[str], None] | None = None) -> None:
    from tinygrad import Device

    if device.split(":")[0].upper() == "HEXRPC":
        import hexrpc.tinygrad  # noqa: F401  (registers the device)

        if (limit := bench_call_limit(device, os.environ)) is not None:
            if hexrpc.tinygrad.set_bench_call_limit(limit):
                what = f"the bench's per-call limit is {limit} ms (HEXRPC_BENCH_CALL_LIMIT_MS sets another)"
            else:
                what = "the bench's session was already open: its per-call limit stays"
            if log is not None:
                log(f"compare: {what}")
    try:
        Device[device]
    except Exception as e:  # noqa: BLE001  (a device's constructor raises anything)
        raise ModelError(f"the device {device} cannot be opened: {e}") from None


def _node_tracker(around_node: Callable[[int], AbstractContextManager[Any]] | None):
    """(``current``, ``track``): ``track(i)`` is the ``around_node`` seam for a device run that
    records in ``current["node"]`` the node the device is working on (-1 before any) and enters
    the caller's ``around_node(i)`` too."""
    current = {"node": -1}

    @contextlib.contextmanager
    def track(i):
        current["node"] = i
        with around_node(i) if around_node else contextlib.nullcontext():
            yield

    return current, track


def run(opts: Options, *, around_node: Callable[[int], AbstractContextManager[Any]] | None = None, log=None) -> Report:
    """Runs one comparison. ``around_node`` is passed to the device under test's run (see
    :meth:`hexrpc.onnx_model.TinygradRun.run`). Raises :class:`ModelError` (exit status 2)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    check_cache_dirs()
    model = prepare(opts.model, opts.shapes)
    arrays = random_inputs(model.inputs, opts.seed)
    chosen, how = select_nodes(model.nodes, opts.nodes, model.outputs)
    _open_device(opts.device, log)
    # Loaded first: a model tinygrad's runner cannot load is refused (exit 2) before the
    # reference runs. A failure of the device itself here is a result, as on any node.
    dut, load_error = None, None
    try:
        dut = TinygradRun(model, opts.device)
    except ModelError:
        raise
    except Exception as e:  # noqa: BLE001  (the device under test's failure is a result)
        load_error = e
    log(f"compare: {opts.model}: {len(model.nodes)} nodes; comparing {how}")

    if opts.reference == "onnxruntime":
        _, ref_nodes = OrtRun(model, chosen).run(arrays)
    else:
        _open_device("CPU")
        try:
            _, ref_nodes = TinygradRun(model, "CPU").run(arrays, chosen)
        except ModelError:
            raise
        except Exception as e:  # noqa: BLE001  (any failure of the reference is a usage error)
            raise ModelError(f"the reference (tinygrad CPU) failed: {type(e).__name__}: {e}") from None
    log(f"compare: reference ({opts.reference}) done; running on {opts.device}")

    error, failed_at, failure = None, -1, None
    current, track = _node_tracker(around_node)

    t0 = time.perf_counter()
    # Filled node by node: a failure keeps the values of every node before it.
    dut_nodes: dict[int, list[Any]] = {}
    try:
        if load_error is not None:
            raise load_error
        assert dut is not None
        dut.run(arrays, chosen, around_node=track, into=dut_nodes)
    except ModelError:  # the model is not one tinygrad can run (exit 2), not a device failure
        raise
    except Exception as e:  # noqa: BLE001  (any failure of the device under test is a result)
        error, failed_at = f"{type(e).__name__}: {e}", current["node"]
        failure = _failure("nodes", e, node=failed_at, model=model)
        log(f"compare: {opts.device} failed at node {failed_at}: {error}")
    log(f"compare: {opts.device} node values in {time.perf_counter() - t0:.1f} s")

    rows: list[NodeRow] = []
    first = None
    for i in chosen:
        if error is not None and i >= failed_at:
            break
        node = model.nodes[i]
        refs, duts = ref_nodes.get(i, []), dut_nodes.get(i, [])
        for k, name in enumerate(node.outputs):
            if not name:
                continue
            r = refs[k] if k < len(refs) else None
            d = duts[k] if k < len(duts) else None
            tol = tolerance_for(r.dtype if r is not None else np.float32, opts.tolerances)
            max_abs, max_rel, within, note, used = compare_detail(d, r, tol)
            shape = list(np.shape(r)) if r is not None else (list(np.shape(d)) if d is not None else None)
            dt = str(r.dtype) if r is not None else None
            if r is not None and d is not None and np.asarray(d).dtype != r.dtype:
                note = "; ".join(x for x in (note, f"device dtype {np.asarray(d).dtype}") if x)
            scale = None
            if r is not None and r.dtype.kind in "fc" and r.size and np.isfinite(r).any():
                scale = float(np.abs(r[np.isfinite(r)]).max())
            row = NodeRow(i, node.op, name, shape, dt, _finite(max_abs), _finite(max_rel), tol.atol, tol.rtol, within, note, _finite(used), scale)
            rows.append(row)
            if not within and first is None:
                first = row
    if error is not None:
        # The node the device was working on when it failed (selected or not); -1: before any.
        node = model.nodes[failed_at] if failed_at >= 0 else NodeInfo(-1, "(model load)", "", ("",))
        row = NodeRow(node.index, node.op, node.outputs[0] if node.outputs else "", None, None, None, None, 0.0, 0.0, False, f"the device failed: {error}")
        rows.append(row)
        first = first or row

    latency = None
    if opts.runs > 0 and error is None:
        log(f"compare: {WARMUP_RUNS} warm-up + {opts.runs} TinyJit runs on {opts.device}")
        progress: dict[str, Any] = {"run": None, "warmup": None}
        try:
            latency = measure_latency(model, arrays, opts.device, opts.runs, progress=progress, profile=opts.profile)
        except ModelError:
            raise
        except Exception as e:  # noqa: BLE001  (a failure of the device under test is a result)
            error = f"{type(e).__name__}: {e}"
            failure = _failure("latency", e, run=progress["run"], warmup=progress["warmup"])
            log(f"compare: {opts.device} failed in the latency phase ({_where(failure)}): {error}")
            _locate(failure, e, model, arrays, opts.device, chosen, around_node, log)
    return Report(
        model=opts.model,
        inputs={k: list(v[0]) for k, v in model.inputs.items()},
        seed=opts.seed,
        reference=opts.reference,
        device=opts.device,
        selection=how,
        tolerances={k: {"atol": t.atol, "rtol": t.rtol} for k, t in opts.tolerances.items()},
        prepared={"pinned_inputs": {k: list(v) for k, v in model.pinned.items()}, "empty_tensors_filled": model.filled},
        nodes=rows,
        first_past=first,
        latency=latency,
        error=error,
        failure=failure,
    )


def _failure(phase: str, e: BaseException, *, node: int | None = None, model: PreparedModel | None = None,
             run: int | None = None, warmup: bool | None = None) -> dict[str, Any]:
    """What the report says of a failure of the device under test (the JSON's ``failure``)."""
    info = model.nodes[node] if model is not None and node is not None and node >= 0 else None
    return {
        "phase": phase,
        "node": info.index if info is not None else None,
        "op": info.op if info is not None else None,
        "output": (info.outputs[0] if info.outputs else "") if info is not None else None,
        "run": run,
        "warmup": warmup,
        "kernel": getattr(e, "kernel", None),
        "error": f"{type(e).__name__}: {e}",
        "why_no_node": None if phase == "nodes" else
        "the latency phase runs the whole model as one TinyJit function, whose kernels fuse several nodes; "
        "every node's values above were measured before it",
        "located_by": None,
    }


def _locate(failure: dict[str, Any], e: BaseException, model: PreparedModel, arrays: Mapping[str, np.ndarray], device: str,
            chosen: Sequence[int], around_node: Callable[[int], AbstractContextManager[Any]] | None, log) -> None:
    """After a failure in the latency phase (whose kernels fuse nodes), runs the model node by
    node once more, as the per-node phase does: if the device fails again, the node it was
    running is named (``failure["node"]``, ``located_by``); if it does not, ``why_no_node`` says
    so. Skipped when the device did not recover from the failure (a run would fail at its first
    kernel, naming no node truly)."""
    if getattr(e, "recovered", True) is False:
        failure["why_no_node"] += "; not located: the device did not recover"
        return
    log(f"compare: locating the failure: the model node by node on {device} once more")
    current, track = _node_tracker(around_node)

    try:
        TinygradRun(model, device).run(arrays, chosen, around_node=track)
    except ModelError:
        raise
    except Exception as again:  # noqa: BLE001  (the device's failure is the finding)
        info = model.nodes[current["node"]] if current["node"] >= 0 else None
        if info is not None:
            failure.update(node=info.index, op=info.op, output=info.outputs[0] if info.outputs else "",
                           located_by=f"a node-by-node rerun failed at this node: {type(again).__name__}: {again}", why_no_node=None)
            log(f"compare: the rerun failed at node {info.index} {info.op}")
            return
    failure["why_no_node"] += "; a node-by-node rerun did not fail (a fault of the fused kernels, or one that does not repeat)"


def _where(f: dict[str, Any]) -> str:
    if f["phase"] == "nodes":
        return f"node {f['node']} {f['op']}" if f["node"] is not None else "loading the model onto the device"
    where = "before its first run" if f["run"] is None else f"{'warm-up' if f['warmup'] else 'measured'} run {f['run']}"
    where += f", kernel {f['kernel']}" if f["kernel"] else ""
    if f["node"] is not None:
        where += f"; node {f['node']} {f['op']} (located by a node-by-node rerun)"
    return where


# -------------------------------------------------------------------------------------------------
# Printing


def _finite(v: float | None) -> float | None:
    """``v``, or ``None`` when it is not finite (JSON has no infinity)."""
    return v if v is None or math.isfinite(v) else None


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def render(rep: Report) -> str:
    """The report as text: prepared-model notes, the table, the first node past, the latency."""
    out: list[str] = []
    ins = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in rep.inputs.items())
    out.append(f"model {rep.model}: input {ins}, seed {rep.seed}; {rep.device} against {rep.reference}")
    if rep.prepared["pinned_inputs"]:
        out.append("pinned: " + ", ".join(f"{k} {v} -> {rep.inputs[k]}" for k, v in rep.prepared["pinned_inputs"].items()))
    if rep.prepared["empty_tensors_filled"]:
        out.append(f"empty tensors given an explicit empty raw_data (tinygrad's parser needs one data field): {len(rep.prepared['empty_tensors_filled'])}")
    out.append(f"nodes: {rep.selection}")
    out.append("tolerance: |dut - ref| <= atol * max(1, largest |ref| of the output) + rtol * |ref|; integers exact")
    w_out = max([len("output")] + [min(len(r.output), 40) for r in rep.nodes])
    w_op = max([len("op")] + [len(r.op) for r in rep.nodes])
    hdr = f"{'#':>5}  {'op':<{w_op}}  {'output':<{w_out}}  {'shape':<16}  {'max abs':>9}  {'max rel':>9}  {'tolerance':<22}  result"
    out.append(hdr)
    for r in rep.nodes:
        name = r.output if len(r.output) <= 40 else ".." + r.output[-38:]
        shape = "x".join(map(str, r.shape)) if r.shape is not None else "-"
        if r.shape == []:
            shape = "scalar"
        tol = str(Tolerance(r.atol, r.rtol))
        res = "within" if r.within else "PAST"
        line = f"{r.index:>5}  {r.op:<{w_op}}  {name:<{w_out}}  {shape:<16}  {_num(r.max_abs):>9}  {_num(r.max_rel):>9}  {tol:<22}  {res}"
        if r.note:
            line += f"  ({r.note})"
        out.append(line)
    past = sum(1 for r in rep.nodes if not r.within)
    out.append(f"{len(rep.nodes)} node outputs compared: {len(rep.nodes) - past} within tolerance, {past} past")
    used = [r for r in rep.nodes if r.tolerance_used is not None]
    if used:
        w = max(used, key=lambda r: r.tolerance_used)
        out.append(f"closest to its tolerance: node {w.index} {w.op} ({w.output!r}) at {w.tolerance_used:.0%} of it")
    if rep.first_past is not None:
        f = rep.first_past
        out.append(
            f"FIRST PAST TOLERANCE: node {f.index} {f.op} (output {f.output!r}): max abs {_num(f.max_abs)}, max rel {_num(f.max_rel)}, "
            f"tolerance {Tolerance(f.atol, f.rtol)}" + (f"; {f.note}" if f.note else "")
        )
    elif rep.failure is None:
        out.append("every compared node is within tolerance")
    if rep.failure is not None:
        f = rep.failure
        out.append(f"DEVICE FAILED in the {'per-node' if f['phase'] == 'nodes' else 'latency'} phase, {_where(f)}: {f['error']}")
        if f["why_no_node"]:
            out.append(f"  (no node named: {f['why_no_node']})")
        if f["located_by"]:
            out.append(f"  ({f['located_by']})")
    if rep.latency is not None:
        lat = rep.latency
        out.append(
            f"latency: {lat.runs} TinyJit runs on {rep.device} after {lat.warmup_runs} warm-up runs "
            f"(input copied in before each run, output left on the device; p99.9 is the max below 1000 runs)"
        )
        for key, f in lat.figures.items():
            if key == "note":
                out.append(f"  note: {f['what']} [{f['label']}]")
                continue
            unit = {"host_wall_s": "s", "simulated_us": "us"}.get(key, "count" if key.startswith("emulated_") else "")
            vals = "  ".join(f"{q} {_fmt(f[q], unit)}" for q in ("p50", "p99", "p99.9", "max"))
            out.append(f"  {key:<14} {vals}  [{f['label']}: {f['what']}]")
        if lat.kernels is not None and lat.profile_summary is not None:
            s = lat.profile_summary
            out.append(
                f"where the DSP time went, per run [{s['label']}: {s['what']}]: {s['dsp_us_per_run']:.0f} us in kernels "
                f"of {s['wall_us_per_run']:.0f} us host wall time"
                + (f", {s['untimed_us_per_run']:.0f} us in batches whose library does not time records" if s["untimed_us_per_run"] else "")
            )
            width = max([len(r["kernel"]) for r in lat.kernels] + [6])
            counted = any("packets_per_run" in r for r in lat.kernels)
            out.append(f"  {'kernel':<{width}}  launches      us  share" + ("  packets (emulated)    HVX" if counted else ""))
            for r in lat.kernels:
                line = f"  {r['kernel']:<{width}}  {r['launches_per_run']:8g}  {r['us_per_run']:6.0f}  {100 * r['share']:4.1f}%"
                if "packets_per_run" in r:
                    line += f"  {r['packets_per_run']:18,.0f}  {100 * r['hvx_share']:4.1f}%"
                out.append(line)
    return "\n".join(out)


def _fmt(v, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == "s":
        return f"{v:.3f} s"
    if unit == "us":
        return f"{v:.0f} us"
    if unit == "count":
        return f"{v:,.0f}"
    return f"{v:g}"


def main(argv: Sequence[str] | None = None) -> int:
    """The command; returns its exit status."""
    try:
        opts = parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return int(e.code or 0)
    try:
        rep = run(opts)
    except ModelError as e:
        print(f"compare: {e}", file=sys.stderr)
        return EXIT_USAGE
    if opts.json:
        json.dump(rep.to_json(), sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(render(rep))
    return rep.exit_status


if __name__ == "__main__":
    sys.exit(main())
