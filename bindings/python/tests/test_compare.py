"""``hexrpc.compare`` (an ONNX model on HEXRPC beside onnxruntime, node by node) on the bench.

* The PP-OCR mobile text-direction classifier that ``rapidocr_onnxruntime`` ships
  (``ch_ppocr_mobile_v2.0_cls_infer.onnx``, input 1x3x48x192): every one of its 258 compared
  nodes within the tool's float32 tolerance of onnxruntime, and the latency block with its
  labelled figures.
* A wrong kernel result: after the kernels of one chosen node have run on HEXRPC, their output
  buffer (the lease) is overwritten, so the corruption reaches the tool through the device's copy
  out and the later kernels that read it; the tool must name exactly that node first and exit 1.
* The pieces without the device: the comparison rule, node selection, percentiles, the model
  preparation (pinned dimensions, the empty TensorProto tinygrad's parser trips on), usage errors.

The classifier's tests skip, saying so, when ``rapidocr_onnxruntime`` or ``onnxruntime`` is not
installed (.ci/bindings installs both).

* YOLOv8n from ``nudenet`` 3.4.2 (``nudenet/320n.onnx``) at 1x3x160x160, run as a user runs it: a
  ``python -m hexrpc.compare`` process with neither ``MAX_KERNEL_BUFFERS`` nor
  ``HEXRPC_BENCH_CALL_LIMIT_MS`` set, every node within tolerance, exit 0. Long (about 18 min on
  this 2-core machine), so opt-in: ``HEXRPC_LONG_TESTS=1``; it skips, saying so, without
  ``nudenet`` (.ci/onnx-suite installs it and runs this test).
* The bench's per-call limit ``compare`` opens its session with: the decision, the help text,
  the limit reaching the session, and a fresh ``compare`` process saying which it got.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinygrad_bench import require_executor

require_executor()
onnx = pytest.importorskip("onnx", reason="hexrpc.compare needs the onnx package (pip install 'hexrpc[onnx]')")

import hexrpc.tinygrad as hexrpc_tinygrad  # noqa: E402  (registers the device)
from hexrpc import compare  # noqa: E402
from hexrpc.onnx_model import ModelError, fill_empty_tensors, pin_input_dims, prepare, random_inputs  # noqa: E402


def rapidocr_model(name: str) -> Path:
    for mod in ("rapidocr_onnxruntime", "onnxruntime"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed (pip install onnxruntime rapidocr-onnxruntime==1.4.4)")
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    path = Path(spec.origin).parent / "models" / name
    if not path.is_file():
        pytest.skip(f"rapidocr_onnxruntime has no {path}")
    return path


CLS = "ch_ppocr_mobile_v2.0_cls_infer.onnx"


# -------------------------------------------------------------------------------------------------
# The classifier on HEXRPC


def test_classifier_every_node_within_tolerance_of_onnxruntime():
    path = rapidocr_model(CLS)
    opts = compare.parse_args([str(path), "--input", "1x3x48x192", "--runs", "3", "--profile"])
    rep = compare.run(opts)
    assert rep.error is None
    # 566 nodes, 308 of them Constant: 258 compared, every output of each.
    assert len(rep.nodes) == 258
    past = [(r.index, r.op, r.output, r.max_abs) for r in rep.nodes if not r.within]
    assert not past, past
    assert rep.first_past is None and rep.exit_status == compare.EXIT_WITHIN
    # Not a comparison of zeros: the classifier's output is a softmax over two classes.
    last = rep.nodes[-1]
    assert last.op == "Identity" and last.shape == [1, 2]
    assert all(r.tolerance_used is None or r.tolerance_used <= 1 for r in rep.nodes)
    assert rep.prepared["pinned_inputs"] == {"x": [-1, 3, "?", "?"]}

    lat = rep.latency
    assert lat is not None and lat.runs == 3 and lat.on_bench
    figs = lat.figures
    assert figs["host_wall_s"]["label"] == "emulated"
    for key in ("simulated_us", "fastrpc_calls", "dsp_maps", "driver_maps", "copied_kib"):
        assert figs[key]["label"] == "simulated", key
        assert figs[key]["p50"] is not None, key
    # A replayed jit run is one or a few hexrpc batches: at least one FastRPC call, far fewer
    # than the kernels it runs; each costs the bench's 60 us per crossing at least.
    assert 1 <= figs["fastrpc_calls"]["max"] < 100
    assert figs["simulated_us"]["p50"] >= 60 * figs["fastrpc_calls"]["p50"]
    for key, f in figs.items():
        if "p50" in f and f["p50"] is not None:
            assert f["p50"] <= f["p99"] <= f["p99.9"] <= f["max"], key

    # --profile: every record's DSP time, named after its tinygrad kernel (not the table's
    # renamed copy), adding up to less than the run's wall time.
    s = lat.profile_summary
    assert s is not None and s["label"] == "emulated" and s["untimed_us_per_run"] == 0
    assert 0 < s["dsp_us_per_run"] <= s["wall_us_per_run"], s
    kernels = lat.kernels
    assert kernels and all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k["kernel"]) for k in kernels), kernels
    assert not any(re.search(r"_hk[0-9]+$", k["kernel"]) for k in kernels), "the table's renamed copies"
    assert sum(k["launches_per_run"] for k in kernels) > figs["fastrpc_calls"]["p50"], "more kernels than calls: batches"
    assert abs(sum(k["us_per_run"] for k in kernels) - s["dsp_us_per_run"]) < 1e-6
    assert abs(sum(k["share"] for k in kernels) - 1) < 1e-9
    assert [k["us_per_run"] for k in kernels] == sorted((k["us_per_run"] for k in kernels), reverse=True)

    # Emulated packets: what qemu-hexagon executed per run, exactly the same in every run (host
    # time is not), each kernel's share of it with its HVX share.
    packets = figs["emulated_packets"]
    assert packets["label"] == "emulated" and "not DSP time" in packets["what"]
    assert packets["p50"] == packets["max"] > 0, packets
    assert figs["emulated_instructions"]["p50"] == figs["emulated_instructions"]["max"] >= packets["p50"]
    assert all("packets_per_run" in k and 0 <= k["hvx_share"] <= 1 for k in kernels), kernels
    assert 0 < sum(k["packets_per_run"] for k in kernels) < packets["p50"]

    text = compare.render(rep)
    assert "every compared node is within tolerance" in text
    assert "emulated_packets" in text and "packets (emulated)" in text
    assert "where the DSP time went, per run [emulated:" in text and kernels[0]["kernel"] in text
    assert "[emulated:" in text and "[simulated:" in text
    doc = json.loads(json.dumps(rep.to_json(), allow_nan=False))
    assert doc["exit_status"] == 0 and len(doc["nodes"]) == 258 and doc["latency"]["figures"]["fastrpc_calls"]["label"] == "simulated"


def _a_middle_conv(path, opts):
    """A Conv in the middle of the selection (it runs kernels of its own, a Reshape would not),
    and a tracker for ``compare.run(around_node=...)``: ``current["node"]`` is the node the device
    is working on (``None`` between nodes)."""
    model = prepare(path, opts.shapes)
    chosen, _ = compare.select_nodes(model.nodes, opts.nodes, model.outputs)
    target = next(i for i in chosen[15:] if model.nodes[i].op == "Conv")
    current = {"node": None}

    @contextlib.contextmanager
    def around(i):
        current["node"] = i
        try:
            yield
        finally:
            current["node"] = None

    return target, current, around


def test_a_corrupted_kernel_result_is_named_first(monkeypatch):
    path = rapidocr_model(CLS)
    # The first 40 compared nodes; the rest of the model runs fused at the output.
    opts = compare.parse_args([str(path), "--input", "1x3x48x192", "--runs", "0", "--nodes", "first:40"])
    target, current, around = _a_middle_conv(path, opts)
    fired = []
    real_call = hexrpc_tinygrad.HEXRPCProgram.__call__

    def corrupting_call(self, *bufs, **kw):
        t = real_call(self, *bufs, **kw)
        if current["node"] == target:
            # The kernel's output (tinygrad passes it first) in the lease, as the DSP left it.
            out = np.frombuffer(bufs[0].host(), dtype=np.uint8).view(np.float32)
            out += np.float32(0.5)
            fired.append(self.name)
        return t

    monkeypatch.setattr(hexrpc_tinygrad.HEXRPCProgram, "__call__", corrupting_call)
    rep = compare.run(opts, around_node=around)
    assert fired, "no HEXRPC kernel ran while the target node was realized"
    assert rep.first_past is not None and rep.first_past.index == target, (target, rep.first_past)
    assert rep.exit_status == compare.EXIT_PAST
    before = [r for r in rep.nodes if r.index < target]
    assert before and all(r.within for r in before)
    # The corruption travelled through the device: a later node that reads it is past too.
    assert any(not r.within for r in rep.nodes if r.index > target)
    assert f"FIRST PAST TOLERANCE: node {target} Conv" in compare.render(rep)


def _failing_at(monkeypatch, when):
    """Makes HEXRPC kernel launches (single and graph) raise the device's DSP failure while
    ``when(kind)`` says so; returns the list of kernels it failed."""
    from hexrpc.tinygrad.graph import HEXRPCGraph
    from hexrpc.tinygrad.session import DSPRestartError

    failed = []
    real_call, real_graph = hexrpc_tinygrad.HEXRPCProgram.__call__, HEXRPCGraph.__call__

    def call(self, *bufs, **kw):
        if when("kernel"):
            failed.append(self.name)
            raise DSPRestartError(self.name, "the DSP process ended (injected by the test)", recovered=True)
        return real_call(self, *bufs, **kw)

    def graph(self, *args, **kw):
        if when("graph"):
            failed.append(f"graph of {len(self.calls)} kernels")
            raise DSPRestartError(failed[-1], "the DSP process ended (injected by the test)", recovered=True)
        return real_graph(self, *args, **kw)

    monkeypatch.setattr(hexrpc_tinygrad.HEXRPCProgram, "__call__", call)
    monkeypatch.setattr(HEXRPCGraph, "__call__", graph)
    return failed


def test_a_device_failure_at_a_node_names_it_and_keeps_the_nodes_before(monkeypatch):
    path = rapidocr_model(CLS)
    opts = compare.parse_args([str(path), "--input", "1x3x48x192", "--runs", "2", "--nodes", "first:40", "--json"])
    target, current, around = _a_middle_conv(path, opts)
    failed = _failing_at(monkeypatch, lambda kind: kind == "kernel" and current["node"] == target)
    rep = compare.run(opts, around_node=around)
    assert failed, "no HEXRPC kernel ran for the target node"
    f = rep.failure
    assert f is not None and f["phase"] == "nodes" and f["node"] == target and f["op"] == "Conv", f
    assert f["kernel"] == failed[0] and "injected by the test" in f["error"]
    # Every compared node before it kept its value (none is a missing-value PAST).
    before = [r for r in rep.nodes if r.index < target]
    assert len(before) >= 15 and all(r.within and r.max_abs is not None for r in before), [(r.index, r.note) for r in before if not r.within]
    assert rep.first_past is not None and rep.first_past.index == target and "the device failed" in rep.first_past.note
    assert rep.latency is None and rep.exit_status == compare.EXIT_PAST
    doc = json.loads(json.dumps(rep.to_json(), allow_nan=False))
    assert doc["failure"]["node"] == target and doc["exit_status"] == 1 and doc["first_past"]["index"] == target
    assert len(doc["nodes"]) == len(before) + 1
    assert f"DEVICE FAILED in the per-node phase, node {target} Conv" in compare.render(rep)


def test_a_device_failure_in_the_latency_phase_keeps_every_node_and_is_located(monkeypatch):
    """The device fails at the captured TinyJit function's first run (its batches fuse nodes),
    and again at a chosen Conv when the tool reruns the model node by node to locate it."""
    path = rapidocr_model(CLS)
    opts = compare.parse_args([str(path), "--input", "1x3x48x192", "--runs", "3", "--nodes", "first:20", "--json"])
    target, current, around = _a_middle_conv(path, opts)
    phase = {"latency": False}
    real_measure = compare.measure_latency

    def measure(*args, **kw):
        phase["latency"] = True
        return real_measure(*args, **kw)

    monkeypatch.setattr(compare, "measure_latency", measure)

    def when(kind):
        if not phase["latency"]:
            return False
        if kind == "graph":  # tinygrad's jit runs its capture from the second warm-up run
            return not failed
        return bool(failed) and current["node"] == target  # the rerun, at the chosen node

    failed = _failing_at(monkeypatch, when)
    rep = compare.run(opts, around_node=around)
    assert len(failed) == 2 and failed[0].startswith("graph of"), failed
    f = rep.failure
    assert f is not None and f["phase"] == "latency" and f["warmup"] is True and f["run"] == 2 and f["kernel"] == failed[0], f
    assert f["node"] == target and f["op"] == "Conv" and "node-by-node rerun failed" in f["located_by"] and f["why_no_node"] is None, f
    # Every compared node kept its value from the per-node phase.
    assert len(rep.nodes) >= 20 and all(r.within and r.max_abs is not None for r in rep.nodes)
    assert rep.first_past is None and rep.latency is None and rep.exit_status == compare.EXIT_PAST
    doc = json.loads(json.dumps(rep.to_json(), allow_nan=False))
    assert doc["failure"]["node"] == target and len(doc["nodes"]) == len(rep.nodes) and doc["exit_status"] == 1
    text = compare.render(rep)
    assert "DEVICE FAILED in the latency phase, warm-up run 2, kernel graph of" in text and f"node {target} Conv (located by" in text


def test_a_model_tinygrad_cannot_load_or_run_is_exit_2_not_a_device_failure(tmp_path, capsys):
    from onnx import TensorProto, helper

    def save(name, node, x_shape, y_shape, opsets):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)
        m = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid(*o) for o in opsets])
        m.ir_version = 8
        path = tmp_path / name
        path.write_bytes(m.SerializeToString())
        return path

    # onnxruntime runs both; tinygrad 0.14's runner cannot load the first (an opset domain it
    # does not know) and has no Det for the second.
    domain = save("domain.onnx", helper.make_node("Relu", ["x"], ["y"]), [1, 4], [1, 4], [("", 13), ("com.example.custom", 1)])
    det = save("det.onnx", helper.make_node("Det", ["x"], ["y"]), [2, 2], [], [("", 13)])
    for path, shape, want in ((domain, "1x4", "cannot load the model"), (det, "2x2", "node 0 (Det")):
        assert compare.main([str(path), "--input", shape, "--runs", "0", "--json"]) == compare.EXIT_USAGE
        cap = capsys.readouterr()
        # (Progress lines may come before it on stderr.)
        assert cap.out == "" and "Traceback" not in cap.err and want in cap.err.splitlines()[-1], cap.err


# -------------------------------------------------------------------------------------------------
# YOLOv8n (nudenet 3.4.2) on HEXRPC, as a user runs it

#: The environment variables that would make the YOLOv8n run pass for another reason than the
#: device's own registrations: tinygrad's buffer limit for every device, and the bench's call
#: limit (compare raises it itself).
_USER_SETTINGS = ("MAX_KERNEL_BUFFERS", "HEXRPC_BENCH_CALL_LIMIT_MS")


def nudenet_model() -> Path:
    for mod in ("nudenet", "onnxruntime"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed (pip install nudenet==3.4.2; it ships YOLOv8n as nudenet/320n.onnx)")
    path = Path(importlib.util.find_spec("nudenet").origin).parent / "320n.onnx"
    if not path.is_file():
        pytest.skip(f"nudenet has no {path} (this test is for nudenet 3.4.2)")
    return path


@pytest.mark.skipif(
    not os.environ.get("HEXRPC_LONG_TESTS"),
    reason="long: about 18 min of qemu-hexagon on 2 cores (332 node outputs, then whole-model TinyJit runs of 33 s); "
    "opt in with HEXRPC_LONG_TESTS=1",
)
def test_yolov8n_runs_every_node_within_tolerance_with_no_settings():
    """YOLOv8n from nudenet 3.4.2 at 1x3x160x160 through ``python -m hexrpc.compare``, against
    onnxruntime, in a process whose environment sets neither tinygrad's ``MAX_KERNEL_BUFFERS``
    nor the bench's call limit: its head's 19-buffer concat must be split by HEXRPC's own
    registration (15 buffers) and its whole-model TinyJit graphs must fit the call limit
    compare gives the bench. Every node within tolerance, exit 0."""
    path = nudenet_model()
    env = {k: v for k, v in os.environ.items() if k not in _USER_SETTINGS}
    res = subprocess.run(
        [sys.executable, "-m", "hexrpc.compare", str(path), "--input", "1x3x160x160", "--runs", "1", "--json"],
        capture_output=True, text=True, env=env, timeout=3600, check=False,
    )
    assert res.returncode == compare.EXIT_WITHIN, res.stderr[-4000:]
    rep = json.loads(res.stdout)
    assert rep["inputs"] == {"images": [1, 3, 160, 160]} and rep["error"] is None and rep["failure"] is None
    # 323 nodes, none of them Constant; the last is the detector's output, [1, 22, 525]:
    # 4 box coordinates and nudenet's 18 class scores at 20x20 + 10x10 + 5x5 anchor points.
    assert len(rep["nodes"]) >= 323 and all(r["within"] for r in rep["nodes"]), [r for r in rep["nodes"] if not r["within"]][:3]
    assert rep["nodes"][-1]["output"] == "output0" and rep["nodes"][-1]["shape"] == [1, 22, 525]
    assert "per-call limit is %d ms" % compare.BENCH_CALL_LIMIT_MS in res.stderr
    lat = rep["latency"]
    assert lat["runs"] == 1 and lat["figures"]["fastrpc_calls"]["p50"] >= 1


# -------------------------------------------------------------------------------------------------
# The bench's per-call limit


def test_compare_gives_the_bench_its_own_call_limit_unless_the_user_set_one():
    limit = compare.bench_call_limit
    assert compare.BENCH_CALL_LIMIT_MS > 10_000
    assert limit("HEXRPC", {"HEXRPC_BENCH": "1"}) == compare.BENCH_CALL_LIMIT_MS
    assert limit("HEXRPC:1", {"HEXRPC_BENCH": "1"}) == compare.BENCH_CALL_LIMIT_MS
    assert limit("hexrpc", {"HEXRPC_BENCH": "yes"}) == compare.BENCH_CALL_LIMIT_MS
    # The user's limit wins, whatever it is.
    assert limit("HEXRPC", {"HEXRPC_BENCH": "1", "HEXRPC_BENCH_CALL_LIMIT_MS": "2500"}) is None
    assert limit("HEXRPC", {"HEXRPC_BENCH": "1", "HEXRPC_BENCH_CALL_LIMIT_MS": "900000"}) is None
    # Off the bench there is no such limit; another device has no bench session.
    assert limit("HEXRPC", {}) is None
    assert limit("HEXRPC", {"HEXRPC_BENCH": "0"}) is None
    assert limit("CPU", {"HEXRPC_BENCH": "1"}) is None


def test_help_says_what_the_call_limit_is_and_how_to_raise_it(capsys):
    assert compare.main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "HEXRPC_BENCH_CALL_LIMIT_MS" in out and "default is 10000 (10 s)" in out, out
    assert f"opens its session with {compare.BENCH_CALL_LIMIT_MS}" in out and "unless this variable is set" in out, out


_CALL_LIMIT_PROBE = """
import sys
import hexrpc, hexrpc.tinygrad as ht
from tinygrad import Device
assert ht.set_bench_call_limit(300)
dev = Device["HEXRPC"]
assert not ht.set_bench_call_limit(400)  # the session is open: its limit stays
lib = dev.session.open_library(hexrpc.build_library(sys.argv[1], "buf,u32", sys.argv[2]))
lease = dev.session.alloc(4096)
try:
    lib.launch([lease.view(0, 4)], [4_000_000_000])
except hexrpc.NeedsRecovery:
    pass
print(dev.session.last_restart)
"""


def test_the_limit_set_before_the_device_opens_is_the_sessions(tmp_path):
    """``set_bench_call_limit`` (what compare calls) reaches the session the HEXRPC device opens:
    a kernel spinning past 300 ms is ended there and the restart names that limit. In a process
    of its own: the limit is fixed when the process's session opens."""
    src = tmp_path / "spin.c"
    src.write_text("void spin(unsigned int *out, unsigned int n) {\n"
                   "  volatile unsigned int x = 0;\n"
                   "  for (unsigned int i = 0; i < n; i++) x += i;\n  out[0] = x;\n}\n")
    env = {k: v for k, v in os.environ.items() if k not in _USER_SETTINGS}
    res = subprocess.run([sys.executable, "-c", _CALL_LIMIT_PROBE, str(src), str(tmp_path / "spin.so")],
                         capture_output=True, text=True, env=env, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "per-call limit of 300 ms" in res.stdout, res.stdout


def test_compare_opens_the_bench_with_its_limit(tmp_path):
    """The decision is applied: a run in a fresh process says which limit the session got, and
    leaves the user's alone."""
    model = tmp_path / "m.onnx"
    model.write_bytes(_model([1, 3, 4, 5]).SerializeToString())
    base = {k: v for k, v in os.environ.items() if k not in _USER_SETTINGS}
    cmd = [sys.executable, "-m", "hexrpc.compare", str(model), "--input", "1x3x4x5", "--runs", "1"]
    ours = subprocess.run(cmd, capture_output=True, text=True, env=base, timeout=600, check=False)
    assert ours.returncode == 0, ours.stderr[-3000:]
    assert f"the bench's per-call limit is {compare.BENCH_CALL_LIMIT_MS} ms" in ours.stderr, ours.stderr
    users = subprocess.run(cmd, capture_output=True, text=True, env={**base, "HEXRPC_BENCH_CALL_LIMIT_MS": "2500"}, timeout=600, check=False)
    assert users.returncode == 0, users.stderr[-3000:]
    assert "per-call limit" not in users.stderr, users.stderr


# -------------------------------------------------------------------------------------------------
# Without the device


def test_comparison_rule():
    tol = compare.Tolerance(1e-4, 1e-3)
    # Outputs within [-1, 1]: atol is absolute, 1e-4 + 1e-3 * |ref| per element.
    ref = np.array([0.5, -0.25, 0.0])
    assert compare.compare_values(ref + [5.9e-4, -3.4e-4, 9e-5], ref, tol)[2]
    assert not compare.compare_values(ref + [0.0, 0.0, 1.1e-4], ref, tol)[2]
    assert not compare.compare_values(ref + [6.1e-4, 0.0, 0.0], ref, tol)[2]
    # Above 1, atol scales with the output's largest |ref|: 1e-4 * 1000 for the zero here.
    big = np.array([1000.0, 0.0])
    max_abs, max_rel, within, _ = compare.compare_values(big + [0.0, 0.09], big, tol)
    assert within and max_abs == pytest.approx(0.09) and max_rel == 0.0
    assert not compare.compare_values(big + [0.0, 0.11], big, tol)[2]
    _, _, _, _, used = compare.compare_detail(big + [0.0, 0.05], big, tol)
    assert used == pytest.approx(0.5)
    # NaN in the same places is equal; elsewhere it is not.
    n = np.array([np.nan, 1.0], dtype=np.float32)
    assert compare.compare_values(n, n.copy(), tol)[2]
    assert not compare.compare_values(np.array([1.0, 1.0], dtype=np.float32), n, tol)[2]
    assert not compare.compare_values(np.array([np.inf], np.float32), np.array([-np.inf], np.float32), tol)[2]
    # Shapes must agree; integers are exact.
    assert not compare.compare_values(np.zeros((2, 1)), np.zeros((1, 2)), tol)[2]
    assert not compare.compare_values(np.array([3], np.int64), np.array([4], np.int64), tol)[2]
    assert compare.compare_values(np.array([3], np.int32), np.array([3], np.int64), tol)[2]
    assert compare.tolerance_for(np.dtype(np.int64), compare.DEFAULT_TOLERANCES) == compare.EXACT


def test_node_selection():
    from hexrpc.onnx_model import NodeInfo

    nodes = [NodeInfo(i, "Constant" if i % 3 == 0 else "Add", f"n{i}", (f"o{i}",)) for i in range(30)]
    computed = [n.index for n in nodes if n.op != "Constant"]
    chosen, how = compare.select_nodes(nodes, "all", ["o29"])
    assert chosen == computed and "10 Constant" in how
    chosen, _ = compare.select_nodes(nodes, "5", ["o29"])
    assert len(chosen) == 5 and chosen[0] == computed[0] and chosen[-1] == computed[-1]
    chosen, how = compare.select_nodes(nodes, "first:3", ["o29"])
    assert chosen == computed[:3] + [29] and "producing the model's outputs" in how


def test_percentiles_nearest_rank():
    v = list(range(1, 101))
    assert compare.percentile(v, 50) == 50 and compare.percentile(v, 99) == 99 and compare.percentile(v, 99.9) == 100
    assert compare.percentile([7.0], 99.9) == 7.0


def _model(dims, empty_constant=False):
    h = onnx.helper
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, dims)
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    nodes = [h.make_node("Relu", ["x"], ["r"])]
    if empty_constant:
        nodes.append(h.make_node("Constant", [], ["roi"], value=h.make_tensor("roi_t", onnx.TensorProto.FLOAT, [0], [])))
        nodes.append(h.make_node("Resize", ["r", "roi", "scales"], ["y"], mode="nearest"))
        inits = [h.make_tensor("scales", onnx.TensorProto.FLOAT, [4], [1, 1, 2, 2])]
    else:
        nodes.append(h.make_node("Identity", ["r"], ["y"]))
        inits = []
    return h.make_model(h.make_graph(nodes, "g", [x], [y], inits), opset_imports=[h.make_opsetid("", 13)])


def test_dynamic_dims_are_pinned_and_fixed_ones_checked():
    m = _model([-1, 3, "h", "w"])
    assert pin_input_dims(m, {None: (1, 3, 4, 5)}) == {"x": (-1, 3, "h", "w")}
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 4, 5]
    with pytest.raises(ModelError, match="fixed at 3"):
        pin_input_dims(_model([-1, 3, 4, 5]), {None: (1, 2, 4, 5)})
    with pytest.raises(ModelError, match="rank"):
        pin_input_dims(_model([-1, 3]), {None: (1, 3, 4)})
    with pytest.raises(ModelError, match="no graph input"):
        pin_input_dims(_model([1, 3]), {"z": (1, 3)})


def test_empty_tensorproto_trips_tinygrad_and_is_filled(tmp_path):
    """tinygrad 0.14's parser asserts exactly one data field; a zero-element tensor has none."""
    from tinygrad.nn.onnx import OnnxRunner

    m = _model([1, 1, 2, 2], empty_constant=True)
    raw = tmp_path / "raw.onnx"
    raw.write_bytes(m.SerializeToString())
    with pytest.raises(AssertionError, match="only 1 data field"):
        OnnxRunner(raw)
    assert fill_empty_tensors(m) == ["roi_t"]
    fixed = tmp_path / "fixed.onnx"
    fixed.write_bytes(m.SerializeToString())
    from tinygrad import Tensor
    from tinygrad.helpers import Context

    with Context(DEV="CPU"):
        out = OnnxRunner(fixed)({"x": Tensor(np.array([[[[1.0, -1.0], [2.0, 3.0]]]], dtype=np.float32))})["y"].numpy()
    assert out.shape == (1, 1, 4, 4) and out[0, 0, 0, 0] == 1.0 and out[0, 0, 0, 2] == 0.0


def test_usage_and_model_errors_exit_2(tmp_path, capsys):
    assert compare.main(["m.onnx", "--input", "1xfoo"]) == compare.EXIT_USAGE
    assert compare.main(["m.onnx"]) == compare.EXIT_USAGE  # --input is required
    assert compare.main([str(tmp_path / "missing.onnx"), "--input", "1x3"]) == compare.EXIT_USAGE
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xff\xff not protobuf")
    assert compare.main([str(junk), "--input", "1x3"]) == compare.EXIT_USAGE
    bad_shape = tmp_path / "m.onnx"
    bad_shape.write_bytes(_model([-1, 3, 4, 5]).SerializeToString())
    assert compare.main([str(bad_shape), "--input", "1x2x4x5"]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert "missing.onnx" in err and "not an ONNX model" in err and "fixed at 3" in err
    assert compare.main(["--help"]) == 0
    out = capsys.readouterr().out
    for section in ("NODE SELECTION", "TOLERANCE", "LATENCY", "PROFILE", "EXIT STATUS", "ENVIRONMENT", "EXAMPLES"):
        assert section in out


def test_bad_inputs_are_one_line_usage_errors(capsys):
    cases = [
        ["--input", "2x1000000000000000000"],  # a dimension past its limit
        ["--input", "2x99999999999999999999999"],  # past int64
        ["--input", "65536x65536"],  # more elements than any run can hold
        ["--input", "1x3", "--seed", "-1"],
        ["--input", "1x3", "--seed", "1e3"],
        ["--input", "1x3", "--runs", "-1"],
        ["--input", "1x3", "--runs", "0", "--profile"],  # nothing to profile
        [],
    ]
    for args in cases:
        assert compare.main(["m.onnx", *args]) == compare.EXIT_USAGE, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("python -m hexrpc.compare: "), (args, err)
    assert "limit" not in err  # (the last: a missing --input names the argument)
    assert compare.main(["m.onnx", "--input", "65536x65536"]) == compare.EXIT_USAGE
    assert "4294967296 elements, more than 2147483648" in capsys.readouterr().err


def test_the_model_module_raises_its_own_error_for_such_shapes_and_seeds():
    with pytest.raises(ModelError, match="dimension 1 is 1000000000000000000; each must be an integer from 1 to 2147483647"):
        pin_input_dims(_model([-1, 3, 4, 5]), {None: (2, 10**18, 4, 5)})
    with pytest.raises(ModelError, match="dimension 0 is 36893488147419103232"):
        pin_input_dims(_model([-1, 3, 4, 5]), {None: (1 << 65, 3, 4, 5)})
    with pytest.raises(ModelError, match="elements, more than 2147483648"):
        pin_input_dims(_model([-1, 3, 4, 5]), {None: (200_000_000, 3, 4, 5)})
    with pytest.raises(ModelError, match="seed -1"):
        random_inputs({"x": ((1, 3), np.dtype("float32"))}, -1)


def test_a_cache_that_cannot_be_written_is_an_environment_error(tmp_path, capsys, monkeypatch):
    model = tmp_path / "m.onnx"
    model.write_bytes(_model([1, 3, 4, 5]).SerializeToString())
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    # A cache directory below a regular file cannot be made, whoever runs the test (root too).
    for var in ("CACHEDB", "HEXRPC_EXEC_CACHE", "CACHELEVEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "cache"))
    assert compare.main([str(model), "--input", "1x3x4x5"]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert "environment: tinygrad's cache directory" in err and "not writable" in err and "CACHELEVEL=0" in err, err
    monkeypatch.setenv("CACHELEVEL", "0")  # tinygrad's off: the bench's build cache is next
    assert compare.main([str(model), "--input", "1x3x4x5"]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert "environment: the bench's build cache directory" in err and "HEXRPC_EXEC_CACHE=DIR" in err, err


def test_tolerance_option():
    opts = compare.parse_args(["m.onnx", "--input", "1x3", "--tolerance", "float32:atol=1e-6", "--tolerance", "rtol=0.5"])
    assert opts.tolerances["float32"] == compare.Tolerance(1e-6, 0.5)
    assert opts.tolerances["float16"] == compare.Tolerance(1e-2, 0.5)
    assert compare.main(["m.onnx", "--input", "1x3", "--tolerance", "int8:atol=1"]) == compare.EXIT_USAGE
