"""Model files exported at the desk (:mod:`hexrpc.export`) and run as on a device: in a process
whose ``PATH`` holds qemu-hexagon and nothing else (no clang-19, no ld.lld-19, no ``hexrpc``
tool; the bench's DSP shell is built before, in this process, and named by
``HEXRPC_BENCH_SHELL``), from Python with no tinygrad imported, from ``hexrpc model run`` and
from a C program (``HEXRPC_C_MODEL_RUN``: .ci/bindings builds bindings/c/examples/model_run.c).

Each run's outputs must equal tinygrad's HEXRPC run of the same jit on the same input bit for
bit, in one FastRPC call per run and no DSP map in a steady run. Networks: a small CNN, the
ResNet-18-shaped network of ``test_tinygrad_networks`` and an ONNX model written here with
``onnx.helper`` through ``python -m hexrpc.export`` (within tolerance of onnxruntime too). What
an export must refuse (state carried between runs, inputs off the device) is refused naming it.
Times are the bench's (simulated DSP, Hexagon code under qemu-hexagon), not device figures.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tinygrad_bench import no_compiler_environment, require_executor  # noqa: E402

require_executor()

import hexrpc  # noqa: E402
import hexrpc.tinygrad  # noqa: E402,F401  (registers the device)
from hexrpc.export import ExportError, device_model, export_jit  # noqa: E402
from tinygrad import Tensor, TinyJit, nn  # noqa: E402
from test_tinygrad_networks import ResNet18, place, random_weights  # noqa: E402


def cli() -> str:
    return os.environ.get("HEXRPC_CLI") or shutil.which("hexrpc") or "hexrpc"


@pytest.fixture(scope="module")
def no_compiler_env(tmp_path_factory):
    """The environment of a process with no compiler: PATH holds qemu-hexagon only, and the
    bench's DSP shell (built here, with the tools) is named by HEXRPC_BENCH_SHELL."""
    env = no_compiler_environment(tmp_path_factory.mktemp("only-qemu"))
    if root := os.environ.get("HEXRPC_EXPORT_DIR"):
        Path(root).mkdir(parents=True, exist_ok=True)
        (Path(root) / "bench-shell").write_text(env["HEXRPC_BENCH_SHELL"])
    return env


RUN_PY = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import hexrpc
    path, inputs, out_dir = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    s = hexrpc.Session.bench(executor=True)
    with hexrpc.Model(path, session=s) as m:
        arrays = {k: np.load(v) for k, v in inputs.items()}
        m.run(**arrays)  # the first run maps the arenas on the DSP
        c0 = hexrpc.bench_counters(s)
        runs = 3
        for _ in range(runs):
            out = m.run(**arrays)
        c1 = hexrpc.bench_counters(s)
        for i, t in enumerate(m.outputs):
            np.save(f"{out_dir}/{i}.npy", out[t.name])
        print(json.dumps({
            "calls_per_run": (c1["invokes"] - c0["invokes"]) / runs,
            "dsp_maps": c1["dsp_maps"] - c0["dsp_maps"],
            "model_calls_per_run": m.calls_per_run,
            "tinygrad_imported": any(k.startswith("tinygrad") for k in sys.modules),
        }))
    s.close()
    """
)


def keep_for_aarch64(label: str, model: Path, npys: dict[str, str], cli_out: Path, want: dict[str, np.ndarray]) -> None:
    """With ``HEXRPC_EXPORT_DIR`` set (.ci/test does), keeps the file, its inputs and this x86-64
    run's outputs in ``DIR/label/`` with the arguments of ``hexrpc model run`` (``args``, one per
    line, paths relative to the directory): CI runs the same file on the aarch64 build under
    qemu-aarch64 and compares the outputs byte for byte (``.ci/aarch64-models``)."""
    root = os.environ.get("HEXRPC_EXPORT_DIR")
    if not root:
        return
    d = Path(root) / label
    d.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model, d / "model.hxm")
    args = []
    for i, (k, v) in enumerate(npys.items()):
        shutil.copyfile(v, d / f"in-{i}.npy")
        np.load(v).tofile(d / f"in-{i}.bin")
        args.append(f"--input={k}=in-{i}.npy")
    for i, k in enumerate(want):
        shutil.copyfile(cli_out / f"{i}.npy", d / f"expect-{i}.npy")
        want[k].tofile(d / f"expect-{i}.bin")
        args.append(f"--output={k}=out-{i}.npy")
    (d / "args").write_text("\n".join(args) + "\n")


def run_everywhere(data: bytes, inputs: dict[str, np.ndarray], want: dict[str, np.ndarray], env, tmp_path: Path, label: str) -> dict:
    """Runs the file from Python, the CLI and (when built) C in processes with ``env``; every
    output must equal ``want`` (in the file's output order) bit for bit. Outputs are saved by
    index: ONNX names may hold ``/``. Returns the Python run's counters."""
    model = tmp_path / "model.hxm"
    model.write_bytes(data)
    npys = {}
    for k, v in inputs.items():
        npys[k] = str(tmp_path / f"in-{k}.npy")
        np.save(npys[k], v)

    def same(name: str, got: np.ndarray, how: str):
        w = want[name]
        assert got.dtype == w.dtype and got.shape == w.shape, (how, name, got.dtype, got.shape, w.dtype, w.shape)
        assert got.tobytes() == w.tobytes(), f"{how}: output {name} differs from tinygrad's HEXRPC run"

    # Python, no tinygrad.
    py_out = tmp_path / "py"
    py_out.mkdir()
    r = subprocess.run([sys.executable, "-c", RUN_PY, str(model), json.dumps(npys), str(py_out)], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    assert not stats["tinygrad_imported"], "hexrpc.Model imported tinygrad"
    assert stats["calls_per_run"] == 1 and stats["model_calls_per_run"] == 1, stats
    assert stats["dsp_maps"] == 0, stats
    for i, name in enumerate(want):
        same(name, np.load(py_out / f"{i}.npy"), "Python")

    # The CLI (a static tool on a device; here the desk build, run with the same PATH).
    cli_out = tmp_path / "cli"
    cli_out.mkdir()
    args = [cli(), "model", "run", str(model), "--bench", "--runs", "2"]
    args += [f"--input={k}={v}" for k, v in npys.items()]
    args += [f"--output={k}={cli_out / str(i)}.npy" for i, k in enumerate(want)]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "in 1 FastRPC call(s) each" in r.stdout, r.stdout
    for i, name in enumerate(want):
        same(name, np.load(cli_out / f"{i}.npy"), "hexrpc model run")
    keep_for_aarch64(label, model, npys, cli_out, want)

    # C (.ci/bindings builds it; outside CI the part is skipped, saying so).
    c_prog = os.environ.get("HEXRPC_C_MODEL_RUN")
    if c_prog:
        c_out = tmp_path / "c"
        c_out.mkdir()
        bins = []
        for k, v in inputs.items():
            bins.append(str(tmp_path / f"in-{k}.bin"))
            np.ascontiguousarray(v).tofile(bins[-1])
        r = subprocess.run([c_prog, "--bench", "--outputs", str(c_out), str(model), *bins], env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr + r.stdout
        assert "in 1 FastRPC call(s)" in r.stdout, r.stdout
        for i, (name, w) in enumerate(want.items()):
            same(name, np.fromfile(c_out / f"{i}.bin", dtype=w.dtype).reshape(w.shape), "C")
    else:
        print("(C part not run: HEXRPC_C_MODEL_RUN is not set; .ci/bindings sets it)")
    return stats


def small_cnn(seed: int):
    rng = np.random.default_rng(seed)
    c1, c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 3)
    for c in (c1, c2):
        c.weight.replace(Tensor(rng.standard_normal(c.weight.shape).astype(np.float32), device="HEXRPC").realize())
        c.bias.replace(Tensor(rng.standard_normal(c.bias.shape).astype(np.float32), device="HEXRPC").realize())
    return lambda x: c2(c1(x).relu()).mean(axis=(2, 3))


def export_and_reference(fn, x: np.ndarray):
    """(file bytes, tinygrad's HEXRPC output on ``x`` from a jit run after the export)."""
    step = TinyJit(lambda x: fn(x).realize())
    data = export_jit(step, {"x": Tensor(x, device="HEXRPC").realize()}, output_names=["y"], source_name="test")
    want = step(x=Tensor(x, device="HEXRPC").realize()).numpy()
    return data, want


def test_a_small_cnn_exported_runs_with_no_compiler_bit_identical(no_compiler_env, tmp_path):
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    data, want = export_and_reference(small_cnn(0), x)
    run_everywhere(data, {"x": x}, {"y": want}, no_compiler_env, tmp_path, "small-cnn")


def test_resnet18_exported_runs_with_no_compiler_bit_identical(no_compiler_env, tmp_path):
    model = place(ResNet18(), random_weights(ResNet18(), 7), "HEXRPC")
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    data, want = export_and_reference(model, x)
    with device_model(data) as m:
        print(f"\nResNet-18-shaped: {len(data)} bytes, {m.launches} launches in {m.calls_per_run} FastRPC call(s) a run")
    run_everywhere(data, {"x": x}, {"y": want}, no_compiler_env, tmp_path, "resnet18")


def test_an_onnx_model_exported_by_the_command_matches_tinygrad_and_onnxruntime(no_compiler_env, tmp_path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    out = tmp_path / "tiny.hxm"
    env = dict(os.environ, HEXRPC_BENCH="1")
    r = subprocess.run([sys.executable, "-m", "hexrpc.export", str(path), "--input", "x=1x3x16x16", "-o", str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stdout
    data = out.read_bytes()
    x = np.random.default_rng(4).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    # tinygrad's HEXRPC run of the same model and input, as the reference.
    from hexrpc.onnx_model import TinygradRun, prepare

    ref, _ = TinygradRun(prepare(path, {"x": (1, 3, 16, 16)}), "HEXRPC").run({"x": x})
    run_everywhere(data, {"x": x}, {"y": ref["y"]}, no_compiler_env, tmp_path, "onnx-tiny")
    onnxruntime_y = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(ref["y"], onnxruntime_y, rtol=1e-4, atol=1e-5)


def test_the_command_refuses_bad_arguments_with_status_2_and_a_failed_export_with_1(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hexrpc.export", "m.onnx", "--input", "x=1xAx3", "-o", "o.hxm"], capture_output=True, text=True)
    assert r.returncode == 2 and "dimensions must be integers" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "hexrpc.export", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--input" in r.stdout and "Exit status" in r.stdout
    bad = tmp_path / "not.onnx"
    bad.write_bytes(b"not a model")
    r = subprocess.run([sys.executable, "-m", "hexrpc.export", str(bad), "-o", str(tmp_path / "o.hxm")], capture_output=True, text=True, env=dict(os.environ, HEXRPC_BENCH="1"))
    assert r.returncode == 1 and "not an ONNX model" in r.stderr, r.stderr
    assert not (tmp_path / "o.hxm").exists()


def test_a_jit_that_carries_state_between_runs_is_refused():
    state = Tensor(np.zeros(16, np.float32), device="HEXRPC").realize()

    def step(x):
        state.assign(state + x).realize()
        return (state * 2).realize()

    with pytest.raises(ExportError, match="carries state"):
        export_jit(TinyJit(step), {"x": Tensor(np.ones(16, np.float32), device="HEXRPC").realize()})


def test_a_jit_that_writes_its_input_is_refused():
    # A file's inputs are only read: a device may bind one to a camera frame it does not own.
    def step(x):
        x.assign(x + 1).realize()
        return (x * 2).realize()

    with pytest.raises(ExportError, match="writes an input's bytes"):
        export_jit(TinyJit(step), {"x": Tensor(np.ones(16, np.float32), device="HEXRPC").realize()})


def test_inputs_off_the_device_are_refused_naming_them():
    with pytest.raises(ExportError, match="input 'x' is on CPU"):
        export_jit(TinyJit(lambda x: (x + 1).realize()), {"x": Tensor(np.ones(4, np.float32), device="CPU").realize()})


def rapidocr_model(name: str) -> Path:
    import importlib.util

    for mod in ("rapidocr_onnxruntime", "onnxruntime"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} is not installed (pip install onnxruntime rapidocr-onnxruntime==1.4.4)")
    path = Path(importlib.util.find_spec("rapidocr_onnxruntime").origin).parent / "models" / name
    if not path.is_file():
        pytest.skip(f"rapidocr_onnxruntime has no {path}")
    return path


@pytest.mark.parametrize(
    "name, shape",
    [("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)), ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 64, 64))],
    ids=["classifier", "detector"],
)
def test_pp_ocr_exported_runs_with_no_compiler_bit_identical_and_near_onnxruntime(name, shape, no_compiler_env, tmp_path):
    import hashlib
    import time

    import onnxruntime as ort
    from hexrpc.export import onnx_jit
    from hexrpc.onnx_model import random_inputs

    path = rapidocr_model(name)
    jit, prepared = onnx_jit(path, {None: shape})
    (iname,) = prepared.inputs
    t0 = time.monotonic()
    data = export_jit(
        jit,
        {iname: Tensor(random_inputs(prepared.inputs, 0)[iname], device="HEXRPC").realize()},
        output_names=prepared.outputs,
        source_name=name,
        source_digest=hashlib.sha256(path.read_bytes()).digest(),
    )
    exported_s = time.monotonic() - t0
    # Another input than the capture's: tinygrad's HEXRPC run of it is the reference.
    x = random_inputs(prepared.inputs, 11)[iname]
    want = {n: t.numpy() for n, t in zip(prepared.outputs, jit(**{iname: Tensor(x, device="HEXRPC").realize()}))}
    with device_model(data) as m:
        shape_of = (m.launches, m.calls_per_run)
    stats = run_everywhere(data, {iname: x}, want, no_compiler_env, tmp_path, "pp-ocr-classifier" if "cls" in name else "pp-ocr-detector")
    print(
        f"\n{name} {shape}: exported in {exported_s:.1f} s (bench), {len(data)} bytes, {shape_of[0]} launches in "
        f"{shape_of[1]} FastRPC call(s) a run; no-compiler runs: {stats}"
    )
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {iname: x})
    for n, o in zip(prepared.outputs, got):
        np.testing.assert_allclose(want[n], o, rtol=1e-3, atol=1e-4, err_msg=f"{name}: output {n} against onnxruntime")
