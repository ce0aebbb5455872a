"""ONNX's backend node tests with tinygrad's ONNX runner on tinygrad's CPU device and on HEXRPC.

    python bindings/python/tools/onnx_suite.py [--sample K] [--seed S] [--match REGEX] [--data DIR]
                                               [--isolate N] [--json FILE] [--list]

The cases
    Each node test of the ``onnx`` package is one small model (usually one node) with inputs and
    the outputs ONNX's reference implementation gives. Wheels of ``onnx`` since 1.19 no longer
    ship the generated files (``onnx/backend/test/data/node/*/model.onnx`` and
    ``test_data_set_0/*.pb``); they ship the generators, ``onnx.backend.test.case.node``, and
    :func:`generated_cases` runs them (about 20 s, no network). ``--data DIR`` reads a directory
    in the files' layout instead (``DIR/<test>/model.onnx``, ``DIR/<test>/test_data_set_0/``),
    e.g. an older ``onnx``'s ``backend/test/data/node`` or the output of ONNX's
    ``backend-test-tools generate-data``. Only the first data set of a case is run.

How a case is judged (the rule of ONNX's own backend runner)
    Each device runs the model unchanged with ``tinygrad.nn.onnx.OnnxRunner`` (through
    :class:`hexrpc.onnx_model.TinygradRun`) on the case's inputs. It passes when it produced as many
    outputs as expected and each has the expected shape and dtype and is within the case's
    ``rtol``/``atol`` (``numpy.testing.assert_allclose``; exact for integers, booleans and
    strings; sequences element by element). Anything raised (an op tinygrad does not have, a
    kernel that does not build) fails the case, with the error as its reason.

The report
    Cases that pass on both devices, fail on both, pass on CPU only (each with HEXRPC's error,
    and the cause when :data:`KNOWN_DIFFERENCES` lists it) and pass on HEXRPC only. The exit
    status is 1 when a case passes on CPU only and is not in :data:`KNOWN_DIFFERENCES`, 0
    otherwise, 2 on a usage error. Listed cases that pass on both are named (the list is stale
    for them).

Isolation (``--isolate N``)
    Runs the cases in child processes of ``N`` cases each; a child that dies (a crash in a CPU
    kernel, the emulator) fails the case it was running on both devices with the exit status,
    and a new child takes the rest. Each child generates the cases again (about 20 s).

Runs on the bench like the other tinygrad tools here: ``HEXRPC_BENCH=1``, ``HEXRPC_CLI``, and
``CC=clang-19`` for tinygrad's CPU device (all set by the caller).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Cases that pass on tinygrad's CPU device and fail on HEXRPC, by name, each with its cause.
#: Measured with tinygrad 0.14.0 and onnx 1.23 on the bench.
KNOWN_DIFFERENCES: dict[str, str] = {}

DEVICES = ("CPU", "HEXRPC")


@dataclass
class Case:
    """One node test: its name, model bytes, inputs and expected outputs (first data set), and
    its tolerance."""

    name: str
    model: bytes
    inputs: list[Any]
    outputs: list[Any]
    rtol: float
    atol: float


@dataclass
class Outcome:
    """What one device did with one case: passed, or why not; seconds taken."""

    ok: bool
    error: str
    seconds: float


# -------------------------------------------------------------------------------------------------
# Cases


def generated_cases() -> list[Case]:
    """Every node test the installed ``onnx`` package generates, sorted by name."""
    import warnings

    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    out = []
    for c in cases:
        if c.model is None or not c.data_sets:
            continue
        ins, outs = c.data_sets[0]
        out.append(Case(c.name, c.model.SerializeToString(), list(ins), list(outs), c.rtol, c.atol))
    return sorted(out, key=lambda c: c.name)


def _read_value(path: Path, type_proto) -> Any:
    """A test-data ``.pb`` file of the value type ``type_proto``."""
    import onnx
    from onnx import numpy_helper

    data = path.read_bytes()
    if type_proto.HasField("sequence_type"):
        p = onnx.SequenceProto()
        p.ParseFromString(data)
        return numpy_helper.to_list(p)
    if type_proto.HasField("optional_type"):
        p = onnx.OptionalProto()
        p.ParseFromString(data)
        return numpy_helper.to_optional(p)
    if type_proto.HasField("map_type"):
        p = onnx.MapProto()
        p.ParseFromString(data)
        return numpy_helper.to_dict(p)
    p = onnx.TensorProto()
    p.ParseFromString(data)
    return numpy_helper.to_array(p)


def directory_cases(root: Path) -> list[Case]:
    """The cases of a directory in ONNX's test-data layout (rtol 1e-3, atol 1e-7: what the
    generators use unless a case says otherwise, which the files do not record)."""
    import onnx

    out = []
    for d in sorted(p for p in root.iterdir() if (p / "model.onnx").is_file()):
        data = (d / "model.onnx").read_bytes()
        model = onnx.load_model_from_string(data)
        init = {t.name for t in model.graph.initializer}
        ins_vi = [i for i in model.graph.input if i.name not in init]
        ds = d / "test_data_set_0"
        ins = [_read_value(ds / f"input_{j}.pb", vi.type) for j, vi in enumerate(ins_vi) if (ds / f"input_{j}.pb").exists()]
        outs = [_read_value(ds / f"output_{j}.pb", vi.type) for j, vi in enumerate(model.graph.output)]
        out.append(Case(d.name, data, ins, outs, 1e-3, 1e-7))
    return out


def select(names: Sequence[str], sample: int | None, seed: int, match: str | None = None) -> list[str]:
    """The names to run, sorted: those matching ``match`` (a regular expression searched in the
    name), then a uniform sample of ``sample`` of them drawn with ``random.Random(seed)`` (all
    when ``sample`` is ``None`` or not smaller)."""
    pool = sorted(n for n in names if match is None or re.search(match, n))
    if sample is not None and sample < len(pool):
        pool = sorted(random.Random(seed).sample(pool, sample))
    return pool


# -------------------------------------------------------------------------------------------------
# Judging


def check_outputs(got: Sequence[Any], want: Sequence[Any], rtol: float, atol: float) -> None:
    """Raises ``AssertionError`` unless ``got`` matches ``want`` (see the module documentation)."""
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, (list, tuple)):
            if not isinstance(g, (list, tuple)):
                raise AssertionError(f"output {i}: {type(g).__name__}, expected a sequence")  # noqa: TRY004  (a failed case)
            check_outputs(g, w, rtol, atol)
            continue
        if w is None:
            if g is not None:
                raise AssertionError(f"output {i}: a value, expected none")
            continue
        if g is None:
            raise AssertionError(f"output {i}: no value")
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            raise AssertionError(f"output {i}: shape {g.shape}, expected {w.shape}")
        if w.dtype == object:
            np.testing.assert_array_equal(g, w)
            continue
        if g.dtype != w.dtype:
            raise AssertionError(f"output {i}: dtype {g.dtype}, expected {w.dtype}")
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    lines = [x for x in text.splitlines() if x.strip()]
    return " | ".join(lines[:6])[:600]


def run_case(case: Case, device: str) -> Outcome:
    """Runs ``case`` on ``device`` and judges it."""
    from hexrpc.onnx_model import TinygradRun

    t0 = time.perf_counter()
    try:
        tg = TinygradRun(case.model, device)
        names = list(tg.runner.graph_inputs)
        if len(names) != len(case.inputs):
            raise AssertionError(f"the model has {len(names)} inputs, the case {len(case.inputs)}")
        outs, _ = tg.run(dict(zip(names, case.inputs)))
        check_outputs([outs[k] for k in tg.runner.graph_outputs], case.outputs, case.rtol, case.atol)
    except Exception as e:  # noqa: BLE001  (every failure is a result here)
        return Outcome(False, _short(e), time.perf_counter() - t0)
    return Outcome(True, "", time.perf_counter() - t0)


def run_cases(cases: Iterable[Case], devices: Sequence[str] = DEVICES, progress=None) -> dict[str, dict[str, Outcome]]:
    """{case name: {device: outcome}}, the devices in turn for each case."""
    if "HEXRPC" in devices:
        import hexrpc.tinygrad  # noqa: F401  (registers the device)
    res: dict[str, dict[str, Outcome]] = {}
    for c in cases:
        res[c.name] = {d: run_case(c, d) for d in devices}
        if progress:
            progress(c.name, res[c.name])
    return res


# -------------------------------------------------------------------------------------------------
# Report


@dataclass
class Summary:
    """The four groups, and the CPU-only cases outside :data:`KNOWN_DIFFERENCES`."""

    both: list[str]
    neither: list[str]
    cpu_only: list[str]
    hexrpc_only: list[str]
    unexpected: list[str]
    stale_known: list[str]


def summarise(results: dict[str, dict[str, Outcome]], known: dict[str, str] = KNOWN_DIFFERENCES) -> Summary:
    both, neither, cpu_only, hex_only = [], [], [], []
    for name, r in sorted(results.items()):
        c, h = r["CPU"].ok, r["HEXRPC"].ok
        (both if c and h else cpu_only if c else hex_only if h else neither).append(name)
    unexpected = [n for n in cpu_only if n not in known]
    stale = [n for n in both if n in known]
    return Summary(both, neither, cpu_only, hex_only, unexpected, stale)


def render(results: dict[str, dict[str, Outcome]], s: Summary, known: dict[str, str] = KNOWN_DIFFERENCES) -> str:
    out = [
        (
            f"{len(results)} cases: {len(s.both)} pass on both, {len(s.neither)} fail on both, "
            f"{len(s.cpu_only)} pass on CPU only ({len(s.unexpected)} not known), {len(s.hexrpc_only)} pass on HEXRPC only"
        )
    ]
    cpu_s = sum(r["CPU"].seconds for r in results.values())
    hex_s = sum(r["HEXRPC"].seconds for r in results.values())
    out.append(f"time: CPU {cpu_s:.0f} s, HEXRPC {hex_s:.0f} s (host wall; HEXRPC kernels built by hexrpc build-lib, run under qemu-hexagon on the bench)")
    if s.cpu_only:
        out.append("passes on CPU only (HEXRPC's error; cause when known):")
        for n in s.cpu_only:
            cause = f"  [known: {known[n]}]" if n in known else "  [NOT KNOWN]"
            out.append(f"  {n}: {results[n]['HEXRPC'].error}{cause}")
    if s.hexrpc_only:
        out.append("passes on HEXRPC only (CPU's error):")
        for n in s.hexrpc_only:
            out.append(f"  {n}: {results[n]['CPU'].error}")
    if s.stale_known:
        out.append("listed as known differences but pass on both (remove them): " + ", ".join(s.stale_known))
    return "\n".join(out)


# -------------------------------------------------------------------------------------------------
# Command


def write_atomically(path: Path, text: str) -> None:
    """Writes ``text`` to a new file beside ``path`` (created exclusively) and renames it over
    ``path``: a reader sees the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _load(args) -> dict[str, Case]:
    cases = directory_cases(Path(args.data)) if args.data else generated_cases()
    return {c.name: c for c in cases}


#: What starts each line of a child's protocol on its stdout (anything else there is passed on).
CHILD_MARK = "@onnx_suite@ "


def _child(args) -> int:
    """Child of ``--isolate``: runs the cases named on stdin; on stdout, a line
    ``{"start": name}`` before each case and one with its outcomes after it (each line begins with
    :data:`CHILD_MARK`)."""
    cases = _load(args)
    names = [n for n in sys.stdin.read().split() if n]
    import hexrpc.tinygrad  # noqa: F401

    for n in names:
        print(CHILD_MARK + json.dumps({"start": n}), flush=True)
        r = {d: run_case(cases[n], d) for d in DEVICES}
        print(CHILD_MARK + json.dumps({"name": n, **{d: asdict(o) for d, o in r.items()}}), flush=True)
    return 0


def _isolated(args, names: list[str], progress) -> dict[str, dict[str, Outcome]]:
    res: dict[str, dict[str, Outcome]] = {}
    todo = list(names)
    while todo:
        chunk, todo = todo[: args.isolate], todo[args.isolate :]
        cmd = [sys.executable, os.path.abspath(__file__), "--child"] + (["--data", args.data] if args.data else [])
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write("\n".join(chunk))
        p.stdin.close()
        running = None
        for line in p.stdout:
            if not line.startswith(CHILD_MARK):
                sys.stderr.write(line)  # something in the child printed to stdout
                continue
            msg = json.loads(line[len(CHILD_MARK) :])
            if "start" in msg:
                running = msg["start"]
                continue
            res[msg["name"]] = {d: Outcome(**msg[d]) for d in DEVICES}
            progress(msg["name"], res[msg["name"]])
            running = None
        rc = p.wait()
        if running is not None or rc != 0:
            done = set(res)
            left = [n for n in chunk if n not in done]
            if running is not None:
                why = f"the child process died (exit status {rc}) running this case"
                res[running] = {d: Outcome(False, why, 0.0) for d in DEVICES}
                progress(running, res[running])
                left = [n for n in left if n != running]
            elif left:
                raise RuntimeError(f"the child process ended (exit status {rc}) before its cases ran")
            todo = left + todo
    return res


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="onnx_suite.py", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sample", type=int, metavar="K", help="run a uniform sample of K cases (default: all)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the sample (default 0)")
    p.add_argument("--match", metavar="REGEX", help="only cases whose name REGEX matches (before sampling)")
    p.add_argument("--data", metavar="DIR", help="read the cases from DIR (ONNX's test-data layout) instead of generating them")
    p.add_argument("--isolate", type=int, metavar="N", help="run the cases in child processes of N cases each")
    p.add_argument("--json", metavar="FILE", help="also write every outcome as JSON to FILE ('-': stdout)")
    p.add_argument("--list", action="store_true", help="print the selected names and exit")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(args)
    if args.sample is not None and args.sample <= 0:
        p.error("--sample must be positive")
    if args.isolate is not None and args.isolate <= 0:
        p.error("--isolate must be positive")
    try:
        cases = _load(args)
    except (OSError, ImportError) as e:
        print(f"onnx_suite: cannot load the cases: {e}", file=sys.stderr)
        return 2
    names = select(list(cases), args.sample, args.seed, args.match)
    if args.list:
        print("\n".join(names))
        return 0
    t0 = time.perf_counter()

    def progress(name, r):
        marks = " ".join(f"{d} {'ok' if o.ok else 'FAIL'} {o.seconds:.1f}s" for d, o in r.items())
        print(f"[{time.perf_counter() - t0:7.0f}s] {name}: {marks}", file=sys.stderr, flush=True)

    try:
        results = _isolated(args, names, progress) if args.isolate else run_cases((cases[n] for n in names), progress=progress)
    except Exception:  # noqa: BLE001  (the harness broke: report it, exit 2)
        traceback.print_exc()
        return 2
    s = summarise(results)
    print(render(results, s))
    print(f"wall time: {time.perf_counter() - t0:.0f} s for {len(names)} cases")
    if args.json:
        doc = {"cases": {n: {d: asdict(o) for d, o in r.items()} for n, r in results.items()}, "summary": asdict(s)}
        if args.json == "-":
            json.dump(doc, sys.stdout, indent=1)
        else:
            write_atomically(Path(args.json), json.dumps(doc, indent=1) + "\n")
    return 1 if s.unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
