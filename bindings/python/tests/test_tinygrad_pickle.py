"""openpilot's flow on HEXRPC: a ``TinyJit`` captured and pickled in one process, loaded and run in
another whose ``PATH`` has no compiler (qemu-hexagon only, for the bench's DSP shell, which is
built before and named by ``HEXRPC_BENCH_SHELL``).

The pickle carries the kernel-table libraries of the jit's HEXRPC graphs
(:mod:`hexrpc.tinygrad.pickling`), so the loaded jit runs in as many FastRPC calls per run as in
the process that made it, with outputs bit-identical; what its first run adds to a steady run
is printed (bench wall time; the run itself is Hexagon code under qemu-hexagon) and bounded
loosely (a rebuilt table would cost tens of seconds). A pickle without its tables (one made before this, or by a process
that dropped them) still runs: the graph says why and launches its kernels one by one.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tinygrad_bench import no_compiler_environment, require_executor  # noqa: E402

require_executor()

import hexrpc  # noqa: E402
import hexrpc.tinygrad  # noqa: E402,F401
from hexrpc.tinygrad import pickling  # noqa: E402
from tinygrad import Device, Tensor  # noqa: E402

LOAD_AND_RUN = textwrap.dedent(
    """
    import json, pickle, sys, time
    import numpy as np
    t0 = time.monotonic()
    import hexrpc, hexrpc.tinygrad
    from tinygrad import Device, Tensor
    with open(sys.argv[1], "rb") as f:
        jit = pickle.load(f)
    t1 = time.monotonic()
    x = np.load(sys.argv[2])
    dev = Device["HEXRPC"]
    out = jit(**{sys.argv[3]: Tensor(x, device="HEXRPC").realize()})
    first = [o.numpy() for o in out]
    t2 = time.monotonic()
    c0 = hexrpc.bench_counters(dev.session)["invokes"]
    [o.numpy() for o in jit(**{sys.argv[3]: Tensor(x, device="HEXRPC").realize()})]
    t3 = time.monotonic()
    calls = hexrpc.bench_counters(dev.session)["invokes"] - c0
    for i, o in enumerate(first):
        np.save(f"{sys.argv[4]}/{i}.npy", o)
    print(json.dumps({"unpickle_s": t1 - t0, "first_run_s": t2 - t1, "steady_run_s": t3 - t2, "calls_per_run": calls,
                      "graph_fallbacks": dev.stats.graph_fallbacks}))
    """
)


@pytest.fixture(scope="module")
def no_compiler_env(tmp_path_factory):
    return no_compiler_environment(tmp_path_factory.mktemp("only-qemu"), HEXRPC_BENCH="1")


@pytest.fixture(scope="module")
def classifier_jit():
    """The PP-OCR classifier under TinyJit on HEXRPC, captured; (jit, input name, input array,
    outputs of the input, FastRPC calls per run)."""
    import importlib.util

    from hexrpc.export import onnx_jit
    from hexrpc.onnx_model import random_inputs

    for mod in ("rapidocr_onnxruntime", "onnx"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed (pip install onnx rapidocr-onnxruntime==1.4.4)")
    from pathlib import Path

    path = Path(importlib.util.find_spec("rapidocr_onnxruntime").origin).parent / "models" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
    jit, prepared = onnx_jit(path, {None: (1, 3, 48, 192)})
    (name,) = prepared.inputs
    for seed in range(3):
        jit(**{name: Tensor(random_inputs(prepared.inputs, seed)[name], device="HEXRPC").realize()})
    x = random_inputs(prepared.inputs, 9)[name]
    dev = Device["HEXRPC"]
    c0 = hexrpc.bench_counters(dev.session)["invokes"]
    want = [o.numpy() for o in jit(**{name: Tensor(x, device="HEXRPC").realize()})]
    calls = hexrpc.bench_counters(dev.session)["invokes"] - c0
    return jit, name, x, want, calls


def load_elsewhere(pkl, x, name, env, tmp_path) -> tuple[dict, list[np.ndarray]]:
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN, str(pkl), str(tmp_path / "x.npy"), name, str(out)],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    outs = [np.load(out / f"{i}.npy") for i in range(len(list(out.iterdir())))]
    return stats | {"stderr": r.stderr}, outs


def test_a_pickled_classifier_jit_loads_with_no_compiler_at_the_same_calls_per_run(classifier_jit, no_compiler_env, tmp_path):
    jit, name, x, want, calls = classifier_jit
    assert pickling.tables_of(jit), "the captured jit's graphs built no kernel table"
    pkl = tmp_path / "cls.pkl"
    pkl.write_bytes(pickle.dumps(jit))
    stats, got = load_elsewhere(pkl, x, name, no_compiler_env, tmp_path)
    print(f"\nPP-OCR classifier jit: {pkl.stat().st_size} bytes pickled; in a process with no compiler: {stats} (bench wall time)")
    assert stats["graph_fallbacks"] == 0, stats["stderr"]
    assert stats["calls_per_run"] == calls, (stats, calls)
    # What the first run adds beyond a steady run (the run itself is Hexagon code under
    # qemu-hexagon here): making the graphs from the carried tables, opening them. Measured and
    # printed above (0.43 s here; the figure in the README). The bound is a hang bound, ten
    # times that, not the target: a jit that rebuilt its tables would take 30 s or more, and a
    # loaded 2-core CI machine must not fail a fair run (docs/bench.md 4.2).
    assert stats["first_run_s"] - stats["steady_run_s"] < 5.0, stats
    assert len(got) == len(want) and all(g.tobytes() == w.tobytes() for g, w in zip(got, want))


def test_a_pickle_without_its_tables_falls_back_to_single_launches_and_says_why(classifier_jit, no_compiler_env, tmp_path, monkeypatch):
    jit, name, x, want, calls = classifier_jit
    monkeypatch.setattr(pickling, "tables_of", lambda jit: {})
    pkl = tmp_path / "bare.pkl"
    pkl.write_bytes(pickle.dumps(jit))
    stats, got = load_elsewhere(pkl, x, name, no_compiler_env, tmp_path)
    assert stats["graph_fallbacks"] >= 1, stats
    assert "launches them one by one" in stats["stderr"] and "could not be built or found" in stats["stderr"], stats["stderr"]
    assert stats["calls_per_run"] > calls, (stats, calls)
    assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want))
