"""tinygrad 0.14 on the HEXRPC device, on hexrpc's bench with the executor.

Every kernel tinygrad generates for these ops is rendered by ``HEXRPCRenderer``, built by
``hexrpc build-lib`` (v2 entry) for Hexagon, loaded by the bench's simulated DSP and run under
qemu-hexagon on the bench's ION buffers; results are compared with tinygrad's CPU device.

Bounds: integer and data-movement results (i32 arithmetic, relu, where, max, the model's argmax)
must be equal; float results within ``rtol``/``atol`` stated per test. Hexagon and x86 both use
IEEE binary32, but clang may contract a*b+c into a fused multiply-add differently on the two
targets and tinygrad's CPU and DSP renderers may order a reduction differently, so sums and
products get a bound of a few ulp times the number of terms, not equality.

The module skips (with the reason) when the executor's tools (clang-19, ld.lld-19,
qemu-hexagon) or the ``hexrpc`` tool are missing.
"""

from __future__ import annotations


import numpy as np
import pytest

from tinygrad_bench import both, require_executor  # noqa: E402

tinygrad = require_executor()

import hexrpc  # noqa: E402
import hexrpc.tinygrad as hexrpc_tinygrad  # noqa: E402  (registers the device)
from tinygrad import Device, Tensor, TinyJit, Variable, dtypes  # noqa: E402


@pytest.fixture(scope="module")
def dev():
    return Device["HEXRPC"]


rng = np.random.default_rng(16)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def i32(*shape, lo=-1000, hi=1000):
    return rng.integers(lo, hi, size=shape, dtype=np.int32)


def test_device_is_registered(dev):
    assert type(dev).__name__ == "HEXRPCDevice"
    assert isinstance(dev.renderer, hexrpc_tinygrad.HEXRPCRenderer)
    t = Tensor([1.0, 2.0, 3.0], device="HEXRPC")
    assert t.device == "HEXRPC"
    np.testing.assert_array_equal(t.numpy(), np.array([1.0, 2.0, 3.0], np.float32))


#: The public names of ``hexrpc.tinygrad`` from when it was one module (before it became a
#: package of one module per responsibility).
_MODULE_NAMES = (
    "ARENA_BYTES AUTO_RECOVERIES AUTO_RECOVERY_WINDOW_S ArenaPool BATCH_MAX_KERNELS BATCH_MAX_LAUNCHES "
    "BATCH_MAX_LEASES BATCH_MAX_RECORD_BYTES DSPRestartError DeviceStats HEXRPCAllocator HEXRPCBuffer "
    "HEXRPCCompiler HEXRPCDevice HEXRPCGraph HEXRPCProgram HEXRPCRenderer INPUT_CACHE KernelRecord "
    "LibraryCache TINYGRAD_CFLAGS batch_record_bytes build_batch_library build_library chunk_calls "
    "device_board hexrpc_cli hexrpc_signature open_session rename_kernel restart_reason scalar_kind "
    "signature_of"
).split()


def test_package_keeps_the_module_names_and_has_no_import_cycle():
    """Every name the single module had is importable from ``hexrpc.tinygrad``, which is what
    tinygrad's lookup (``tinygrad.runtime.ops_hexrpc``) finds, and no module of the package
    imports (even only for type checking) one that imports it back."""
    import ast
    import sys
    from pathlib import Path

    assert [n for n in _MODULE_NAMES if not hasattr(hexrpc_tinygrad, n)] == []
    assert sys.modules["tinygrad.runtime.ops_hexrpc"] is hexrpc_tinygrad
    pkg = Path(hexrpc_tinygrad.__file__).parent
    deps = {}
    for f in pkg.glob("*.py"):
        tree = ast.parse(f.read_text())
        deps[f.stem] = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module}
    assert "__init__" not in set().union(*deps.values()), deps

    def reaches(start, goal, seen=()):
        return any(d == goal or (d not in seen and reaches(d, goal, (*seen, d))) for d in deps.get(start, ()))

    assert [m for m in deps if reaches(m, m)] == [], deps


def test_elementwise_f32():
    cpu, hex_ = both(lambda a, b: (a + b) * a - b / 3.0, f32(37, 29), f32(37, 29))
    np.testing.assert_allclose(hex_, cpu, rtol=2e-6, atol=2e-6)


def test_elementwise_i32():
    cpu, hex_ = both(lambda a, b: (a + b) * 3 - (a * b) + (a // 7), i32(1000), i32(1000))
    assert hex_.dtype == np.int32
    np.testing.assert_array_equal(hex_, cpu)


def test_relu_where_max():
    a, b = f32(33, 65), f32(33, 65)
    cpu, hex_ = both(lambda x, y: x.relu() + (x > y).where(x, -y) + x.maximum(y), a, b)
    np.testing.assert_array_equal(hex_, cpu)


def test_reduce_full():
    a = f32(4097, lo=0.0, hi=1.0)
    cpu, hex_ = both(lambda x: x.sum(), a)
    # n terms in [0, 1): |error| <= n * eps * sum|x| for either summation order.
    np.testing.assert_allclose(hex_, cpu, rtol=4097 * 1.2e-7)
    cpu, hex_ = both(lambda x: x.max(), a)
    np.testing.assert_array_equal(hex_, cpu)


def test_reduce_per_axis():
    a = f32(48, 75)
    for axis in (0, 1):
        cpu, hex_ = both(lambda x: x.sum(axis=axis), a)
        n = a.shape[axis]
        np.testing.assert_allclose(hex_, cpu, rtol=0, atol=n * 1.2e-7 * np.abs(a).sum(axis=axis).max())
        cpu, hex_ = both(lambda x: x.max(axis=axis), a)
        np.testing.assert_array_equal(hex_, cpu)


def test_exp():
    cpu, hex_ = both(lambda x: x.exp(), f32(1031, lo=-20.0, hi=20.0))
    np.testing.assert_allclose(hex_, cpu, rtol=4e-7)


def test_matmul():
    a, b = f32(45, 70), f32(70, 23)
    cpu, hex_ = both(lambda x, y: x @ y, a, b)
    np.testing.assert_allclose(hex_, cpu, rtol=0, atol=70 * 1.2e-7 * (np.abs(a) @ np.abs(b)).max())


def test_conv2d():
    x, w = f32(2, 3, 17, 19), f32(5, 3, 3, 3)
    cpu, hex_ = both(lambda a, b: a.conv2d(b, padding=1), x, w)
    np.testing.assert_allclose(hex_, cpu, rtol=0, atol=27 * 1.2e-7 * 27 * 4)


def test_softmax_uses_views_at_nonzero_offsets(dev):
    before = dev.stats.nonzero_offset_views
    x = f32(19, 130, lo=-8.0, hi=8.0)
    cpu, hex_ = both(lambda a: a.softmax(axis=-1), x)
    np.testing.assert_allclose(hex_, cpu, rtol=2e-6, atol=1e-9)
    # tinygrad's memory planner packs the softmax's intermediates into one buffer: views at
    # non-zero offsets, which only the v2 entry maps correctly.
    assert dev.stats.nonzero_offset_views > before


def test_symbolic_shape_bound_variable():
    a = f32(64)
    for n in (5, 17, 64):
        v = Variable("n", 1, 64).bind(n)
        cpu = (Tensor(a, device="CPU")[:v] * 2 + 1).sum().numpy()
        hex_ = (Tensor(a, device="HEXRPC")[:v] * 2 + 1).sum().numpy()
        np.testing.assert_allclose(hex_, cpu, rtol=n * 1.2e-7 * 4)


def test_int32_and_dtype_casts():
    a = i32(257, lo=-50, hi=50)
    cpu, hex_ = both(lambda x: (x.cast(dtypes.float32) * 0.5).cast(dtypes.int32) + x, a)
    np.testing.assert_array_equal(hex_, cpu)


class TwoLayerConvNet:
    """conv(1->4, 3x3) -> relu -> conv(4->8, 3x3, stride 2) -> relu -> mean over space -> linear(8->10)."""

    def __init__(self, device: str, weights: dict[str, np.ndarray]):
        self.w = {k: Tensor(v, device=device).realize() for k, v in weights.items()}

    def __call__(self, x: Tensor) -> Tensor:
        w = self.w
        x = x.conv2d(w["c1"], w["b1"], padding=1).relu()
        x = x.conv2d(w["c2"], w["b2"], stride=2).relu()
        x = x.mean(axis=(2, 3))
        return x.linear(w["fc"], w["fb"])


def model_weights() -> dict[str, np.ndarray]:
    r = np.random.default_rng(1600)
    g = lambda *s: (r.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    return {"c1": g(4, 1, 3, 3), "b1": g(4), "c2": g(8, 4, 3, 3), "b2": g(8), "fc": g(8, 10), "fb": g(10)}


def run_jitted(device: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    net = TwoLayerConvNet(device, model_weights())
    step = TinyJit(lambda x: net(x).realize())
    outs = []
    for a in inputs:
        outs.append(step(Tensor(a, device=device).realize()).numpy())
    return outs


def model_inputs(runs: int = 10) -> list[np.ndarray]:
    r = np.random.default_rng(1601)
    return [r.uniform(-1, 1, size=(2, 1, 12, 12)).astype(np.float32) for _ in range(runs)]


def test_two_layer_conv_net_under_tinyjit():
    inputs = model_inputs(10)
    cpu = run_jitted("CPU", inputs)
    hex_ = run_jitted("HEXRPC", inputs)
    for c, h in zip(cpu, hex_):
        # 36 products per output of conv2, 36 terms per mean, 8 per linear: a few ulp each.
        np.testing.assert_allclose(h, c, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(h.argmax(axis=1), c.argmax(axis=1))


def bench_counters(dev) -> dict:
    import hexrpc

    return hexrpc.bench_counters(dev.session)


def test_jit_runs_as_one_batch_per_run(dev):
    """After capture, every jit run is one FastRPC invoke on the bench (the whole model as one
    batch), where kernel-by-kernel launches take one invoke per kernel; outputs equal CPU's."""
    inputs = model_inputs(10)
    cpu = run_jitted("CPU", inputs)
    net = TwoLayerConvNet("HEXRPC", model_weights())
    step = TinyJit(lambda x: net(x).realize())
    runs, outs = [], []
    nz0 = dev.stats.batched_nonzero_offset_views
    for a in inputs:
        x = Tensor(a, device="HEXRPC").realize()
        c0, s0 = bench_counters(dev), (dev.stats.batch_runs, dev.stats.batched_launches, dev.stats.library_opens)
        y = step(x)
        c1 = bench_counters(dev)
        runs.append(
            {
                "invokes": c1["invokes"] - c0["invokes"],
                "simulated_us": c1["simulated_invoke_us"] - c0["simulated_invoke_us"],
                "batch_runs": dev.stats.batch_runs - s0[0],
                "batched": dev.stats.batched_launches - s0[1],
                "opens": dev.stats.library_opens - s0[2],
            }
        )
        outs.append(y.numpy())
    for c, h in zip(cpu, outs):
        np.testing.assert_allclose(h, c, rtol=1e-5, atol=1e-5)
    # Run 0 goes kernel by kernel (tinygrad's warm-up). Run 1 captures: the kernels run once more
    # one by one, then tinygrad lowers the capture and runs it through the graph, which builds
    # the kernel-table library, opens it (one invoke) and runs it. Every later run is one invoke.
    kernels = runs[1]["batched"]
    assert kernels > 1, runs
    assert runs[1]["opens"] == 1 and runs[1]["batch_runs"] == 1, runs
    for r in runs[2:]:
        assert (r["invokes"], r["batch_runs"], r["batched"], r["opens"]) == (1, 1, kernels, 0), runs
    # The memory planner put intermediates at non-zero offsets of one buffer: the batch carries
    # views at non-zero offsets (each checked and mapped by the generated entry).
    assert dev.stats.batched_nonzero_offset_views > nz0

    # The same model kernel by kernel: one invoke per kernel per run.
    saved, dev.graph = dev.graph, None
    try:
        net2 = TwoLayerConvNet("HEXRPC", model_weights())
        step2 = TinyJit(lambda x: net2(x).realize())
        per_kernel = []
        for a in inputs:
            x = Tensor(a, device="HEXRPC").realize()
            c0, l0 = bench_counters(dev), dev.stats.launches
            step2(x)
            c1 = bench_counters(dev)
            per_kernel.append((c1["invokes"] - c0["invokes"], c1["simulated_invoke_us"] - c0["simulated_invoke_us"], dev.stats.launches - l0))
    finally:
        dev.graph = saved
    for inv, _, launches in per_kernel[2:]:
        assert inv == launches == kernels, per_kernel
    batch_us = [r["simulated_us"] for r in runs[2:]]
    kernel_us = [us for _, us, _ in per_kernel[2:]]
    assert max(batch_us) < min(kernel_us), (batch_us, kernel_us)
    print(
        f"\nHEXRPC model ({kernels} kernels) per jit run after capture: batch {runs[2]['invokes']} invoke, "
        f"{np.median(batch_us):.0f} us simulated; kernel by kernel {per_kernel[2][0]} invokes, "
        f"{np.median(kernel_us):.0f} us simulated (bench cost model, not a device figure)"
    )


def test_jit_bound_variable_updates_between_runs(dev):
    """A jitted model over a symbolic length (two kernels, so tinygrad graphs them): the bound
    Variable's value changes every run and reaches the batch's scalars in place; each run after
    capture is one invoke."""
    a = f32(64)
    x = Tensor(a, device="HEXRPC").realize()

    def f(t, n):
        s = t[:n]
        out = ((s * 2 + 1).relu().sum(), (s * 0.5).exp().max())
        Tensor.realize(*out)
        return out

    step = TinyJit(f)
    lengths = [5, 9, 17, 33, 64, 7, 1, 40]
    invokes, batch_runs = [], []
    for n in lengths:
        c0, b0 = bench_counters(dev), dev.stats.batch_runs
        total, peak = step(x, Variable("n", 1, 64).bind(n))
        invokes.append(bench_counters(dev)["invokes"] - c0["invokes"])
        batch_runs.append(dev.stats.batch_runs - b0)
        v = a[:n].astype(np.float64)
        np.testing.assert_allclose(total.numpy(), np.maximum(v * 2 + 1, 0).sum(), rtol=n * 4 * 1.2e-7, atol=1e-5)
        np.testing.assert_allclose(peak.numpy(), np.exp(v * 0.5).max(), rtol=4e-7)
    assert all(i == 1 for i in invokes[2:]), invokes
    assert all(b == 1 for b in batch_runs[1:]), batch_runs


def test_signature_and_record_rules():
    sig = hexrpc_tinygrad.hexrpc_signature
    assert sig([None, None, "int", "float"]) == "buf,buf,i32,f32"
    assert sig([None, "unsigned long long"]) == "buf,u64"
    with pytest.raises(tinygrad.device.CompileError):
        sig([None, "int", None])  # a buffer after a scalar
    with pytest.raises(tinygrad.device.CompileError):
        sig([None, "__bf16"])  # no hexrpc kind
    rec = hexrpc_tinygrad.KernelRecord("E_4_2", "buf,buf,i32")
    src = "void E_4_2(float* a, float* b, int n) {}\n" + rec.render()
    assert hexrpc_tinygrad.KernelRecord.parse(src) == rec
    renamed, rec2 = hexrpc_tinygrad.rename_kernel(src, rec, "E_4_2_hk3")
    assert rec2 == hexrpc_tinygrad.KernelRecord("E_4_2_hk3", "buf,buf,i32")
    assert "void E_4_2_hk3(" in renamed and hexrpc_tinygrad.KernelRecord.parse(renamed) == rec2
    with pytest.raises(tinygrad.device.CompileError):
        hexrpc_tinygrad.KernelRecord.parse("void f(void) {}")


class _FakeLease:
    """What chunk_calls reads of a lease: the id of the lease the DSP maps."""

    def __init__(self, i: int):
        self.lease_id = i + 1


def test_batches_split_at_capacity():
    """chunk_calls keeps launches in order and starts a new batch (another call) only when the
    next launch would exceed the batch's distinct leases, launches or record bytes (the native
    module's capacities); leases are told apart by ``lease_id`` (sub-allocations of one arena
    share it)."""
    B, T = hexrpc_tinygrad.HEXRPCBuffer, hexrpc_tinygrad
    assert (T.BATCH_MAX_LAUNCHES, T.BATCH_MAX_LEASES) == (hexrpc.MAX_BATCH_LAUNCHES, hexrpc.MAX_BATCH_LEASES)
    leases = [_FakeLease(i) for i in range(40)]
    # 20 launches, each on two fresh leases: MAX_LEASES // 2 launches fit one batch.
    calls = [(0, [B(leases[2 * i], 0, 4, True), B(leases[2 * i + 1], 0, 4, True)], 0) for i in range(20)]
    per = T.BATCH_MAX_LEASES // 2
    assert T.chunk_calls(calls) == [list(range(i, min(i + per, 20))) for i in range(0, 20, per)]
    # Sub-allocations of one arena (one lease_id) count as one lease: all 20 fit.
    shared = [(0, [B(_FakeLease(7), 0, 4, True), B(_FakeLease(7), 64, 4, True)], 0) for _ in range(20)]
    assert T.chunk_calls(shared) == [list(range(20))]
    # MAX_LAUNCHES + 36 launches on one lease: MAX_LAUNCHES per batch.
    n = T.BATCH_MAX_LAUNCHES + 36
    one = [(0, [B(leases[0], 64 * i, 64, False)], 1) for i in range(n)]
    assert [len(c) for c in T.chunk_calls(one)] == [T.BATCH_MAX_LAUNCHES, 36]
    # Record bytes: 15 views + 40 scalars = 8 + 180 + 320 = 508 bytes each.
    fit = T.BATCH_MAX_RECORD_BYTES // 508
    assert fit < T.BATCH_MAX_LAUNCHES
    big = [(0, [B(leases[0], 0, 4, False)] * 15, 40) for _ in range(fit + 4)]
    assert [len(c) for c in T.chunk_calls(big)] == [fit, 4]


def test_dsp_restart_recovers_without_the_caller(dev, caplog):
    """A DSP restart between ops: the device recovers by itself (logged) and the same programs
    and a captured jit run again with correct results, without ``recover()``. Which call sees
    the restart first is a race: the session's listener usually notices it and the next launch
    recovers before it runs (no error); if the launch gets there first, that one op raises
    ``DSPRestartError`` and the device recovers after it. Either way exactly one recovery."""
    import logging

    a, b = f32(300), f32(300)
    ta, tb = Tensor(a, device="HEXRPC").realize(), Tensor(b, device="HEXRPC").realize()

    def f(x, y):
        out = ((x * y).relu(), (x - y).exp())
        Tensor.realize(*out)
        return out

    def first_op_after_restart(fn):
        try:
            return fn()
        except hexrpc_tinygrad.DSPRestartError as e:
            assert e.recovered and "restart" in e.reason, e
            return None

    step = TinyJit(f)
    for _ in range(3):
        step(ta, tb)
    n0 = dev.hub.recovery_count
    dev.session.restart_dsp()
    with caplog.at_level(logging.WARNING, logger="hexrpc"):
        first_op_after_restart(lambda: (ta + tb).numpy())
    assert dev.hub.recovery_count == n0 + 1
    assert any(r.name == "hexrpc.tinygrad" and "recovering" in r.getMessage() for r in caplog.records), caplog.records
    np.testing.assert_array_equal((ta + tb).numpy(), a + b)
    r, e = step(ta, tb)
    np.testing.assert_array_equal(r.numpy(), np.maximum(a * b, 0))
    np.testing.assert_allclose(e.numpy(), np.exp(a - b), rtol=4e-7)
    # A restart between jit runs: the next run or the one after is correct, one more recovery.
    dev.session.restart_dsp()
    first_op_after_restart(lambda: step(ta, tb))
    r, e = step(ta, tb)
    np.testing.assert_array_equal(r.numpy(), np.maximum(a * b, 0))
    assert dev.hub.recovery_count == n0 + 2


def test_jit_inputs_update_records_in_place(dev):
    """A jit whose inputs change every step (4 input tensors in turn) updates the built batch's
    records in place: one build, no rebuild per step; outputs equal CPU's."""
    xs = [f32(64) for _ in range(4)]
    w = f32(64)

    def f(x, y):  # softmax: reductions, then elementwise over their results: several kernels, one graph
        return (x * y).softmax().realize()

    cpu_step, hex_step = TinyJit(f), TinyJit(f)
    tw = Tensor(w, device="HEXRPC").realize()
    tx = [Tensor(x, device="HEXRPC").realize() for x in xs]
    cw = Tensor(w, device="CPU").realize()
    cx = [Tensor(x, device="CPU").realize() for x in xs]
    for i in range(3):
        hex_step(tx[i % 4], tw)
        cpu_step(cx[i % 4], cw)
    r0, s0 = dev.stats.graph_rebuilds, dev.stats.graph_steps
    for i in range(3, 23):
        got = hex_step(tx[i % 4], tw).numpy()
        want = cpu_step(cx[i % 4], cw).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert dev.stats.graph_steps - s0 == 20
    assert dev.stats.graph_rebuilds - r0 == 0, "an input change rebuilt the batch"


def test_two_devices_share_one_session_and_a_jit_mixes_them():
    """HEXRPC:1 runs on the process's one session (the drivers give a process one DSP process):
    its buffers are leases of that session, a jit over tensors of both devices runs, and copies
    between the devices are exact."""
    d0, d1 = Device["HEXRPC"], Device["HEXRPC:1"]
    assert d0.session is d1.session
    a, b = f32(256), f32(256)
    t0 = Tensor(a, device="HEXRPC").realize()
    t1 = Tensor(b, device="HEXRPC:1").realize()
    np.testing.assert_array_equal(t1.to("HEXRPC").numpy(), b)

    @TinyJit
    def g(x, y):
        return (x + y.to("HEXRPC")).realize(), (y * 2).realize()

    for _ in range(4):
        s, d = g(t0, t1)
    np.testing.assert_array_equal(s.numpy(), a + b)
    np.testing.assert_array_equal(d.numpy(), b * 2)


def test_board_detection():
    import hexrpc

    assert hexrpc.detect_board("comma tici\0") == "comma-three"
    assert hexrpc.detect_board("Some Other Board") is None


@pytest.mark.parametrize("limit", ["kernels", "leases"])
def test_graph_split_when_a_batch_would_not_fit(dev, monkeypatch, limit):
    """With the table capacity (kernels per library) or the batch capacity (distinct leases per
    call) made small, the same model runs as several libraries / batches per jit run, in order,
    with the same outputs; the number of invokes per run is the number of batches. For the
    lease limit every buffer is a lease of its own (``HEXRPC_ARENA_MIB=0``'s allocation; in
    arenas the whole model is one or two leases and nothing would split)."""
    if limit == "kernels":
        monkeypatch.setattr(hexrpc_tinygrad.graph, "BATCH_MAX_KERNELS", 2)
    else:
        monkeypatch.setattr(hexrpc_tinygrad.graph, "BATCH_MAX_LEASES", 4)
        monkeypatch.setattr(dev.hub.arenas, "arena_bytes", 0)
        dev.allocator.free_cache()  # cached buffers are arena sub-allocations
    inputs = model_inputs(5)
    cpu = run_jitted("CPU", inputs)
    net = TwoLayerConvNet("HEXRPC", model_weights())
    step = TinyJit(lambda x: net(x).realize())
    per_run = []
    for a, want in zip(inputs, cpu):
        x = Tensor(a, device="HEXRPC").realize()
        c0, b0 = bench_counters(dev), dev.stats.batch_runs
        got = step(x).numpy()
        per_run.append((bench_counters(dev)["invokes"] - c0["invokes"], dev.stats.batch_runs - b0))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for invokes, batches in per_run[2:]:
        assert batches > 1 and invokes == batches, per_run


def test_arena_pool_grows_by_whole_arenas_and_closes_empty_ones(dev):
    """The device's buffers come from arenas: many small buffers share one arena (one lease id),
    a buffer larger than an arena gets one of its own size, an arena left empty is closed unless
    it is the newest, and a tensor's bytes survive the round trip through a sub-allocation."""
    stats = hexrpc_tinygrad.DeviceStats()
    pool = hexrpc_tinygrad.ArenaPool(dev.session, arena_bytes=1 << 20)
    small = [pool.alloc(4000, stats) for _ in range(50)]
    assert len({b.lease.lease_id for b in small}) == 1 and stats.arenas_opened == 1
    assert all(b.lease.in_arena and b.lease.size == 4000 for b in small)
    first = small[0].arena
    big = pool.alloc(3 << 20, stats)
    assert stats.arenas_opened == 2 and big.arena.size == 3 << 20 and big.lease.lease_id != small[0].lease.lease_id
    # Sub-allocations never overlap: each keeps what was written to it.
    mem = [np.frombuffer(b.host(), dtype=np.uint8) for b in small]
    for i, m in enumerate(mem):
        m[:] = i
    assert all((m == i).all() for i, m in enumerate(mem)), "writes to one sub-allocation reached another"
    del mem
    for b in small:
        pool.free(b)
    assert first.closed and pool.arenas == [big.arena], "the empty older arena is closed"
    kept = big.arena
    pool.free(big)
    assert pool.arenas == [kept] and not kept.closed, "the newest arena stays for the next buffer"
    again = pool.alloc(4000, stats)
    assert stats.arenas_opened == 2, "an allocation reuses the kept arena"
    pool.free(again)


def test_dsp_time_reaches_tinygrad():
    """Each launch returns the entry's measured microseconds as seconds, which tinygrad adds up
    (GlobalCounters.time_sum_s). Under qemu-hexagon the clock is the emulator's host clock:
    emulated time, not DSP time."""
    from tinygrad.helpers import GlobalCounters

    a, b = Tensor(f32(96, 96), device="HEXRPC").realize(), Tensor(f32(96, 96), device="HEXRPC").realize()
    GlobalCounters.reset()
    (a @ b).realize()
    assert GlobalCounters.kernel_count >= 1
    assert 0 < GlobalCounters.time_sum_s < 60


def test_one_hot_and_losses_with_deep_expressions():
    """Kernels that were refused before: ``one_hot`` (clang-19's Hexagon backend cannot select
    HVX instructions for it; build-lib compiles it without HVX) and cross-entropy / NLL losses
    (their kernels nest expressions hundreds deep in clang's AST dump). Equal to CPU (one_hot),
    within float32 reduction bounds (losses)."""
    labels = rng.integers(0, 10, size=(32,), dtype=np.int32)
    cpu, hex_ = both(lambda t: t.one_hot(10), labels)
    np.testing.assert_array_equal(hex_, cpu)
    logits = f32(32, 10)
    for reduction in ("mean", "sum", "none"):
        cpu, hex_ = both(lambda x, y: x.sparse_categorical_crossentropy(y, reduction=reduction), logits, labels)
        np.testing.assert_allclose(hex_, cpu, rtol=1e-5, atol=1e-5)
    probs = rng.uniform(0, 1, size=(32, 10)).astype(np.float32)
    probs /= probs.sum(axis=1, keepdims=True)
    cpu, hex_ = both(lambda x, p: x.cross_entropy(p), logits, probs)
    np.testing.assert_allclose(hex_, cpu, rtol=1e-5, atol=1e-5)
