"""Whole networks under ``TinyJit`` on the HEXRPC device beside tinygrad's CPU device.

Two networks built from ``tinygrad.nn`` with seeded random weights (the same numbers on both
devices):

* a ResNet-18-shaped classifier: 7x7/2 stem, 3x3/2 max pool, four stages of two basic blocks
  (conv-BN-ReLU-conv-BN + shortcut, 1x1/2 conv-BN shortcut where the shape changes), global
  average pool, linear; input 1x3x32x32, ``WIDTH`` channels in the first stage (ResNet-18 has 64;
  the shape is the same, the narrower width keeps the run short under qemu-hexagon);
* a pre-norm transformer block: LayerNorm, 4-head self-attention (q, k, v, output projections),
  residual, LayerNorm, MLP 64 -> 256 -> 64 with GELU, residual; input 1x16x64.

Outputs: within ``rtol``/``atol`` of CPU (stated per test: sums of a few thousand terms through
a dozen layers, each a few ulp, in a possibly different order).

FastRPC calls per jit run. After the capture (run 1) a jit run is tinygrad's captured list of
kernels, which tinygrad's jit cuts into graph batches (``JIT_BATCH_SIZE``: 32 kernels, then 64,
128, ...; a batch of one kernel is launched on its own). ``HEXRPCGraph`` runs each graph batch
as hexrpc batches, cutting the launches, in order, wherever the next launch would exceed one
batch's capacity: ``hexrpc.MAX_BATCH_LAUNCHES`` launches, ``hexrpc.MAX_BATCH_LEASES`` distinct
leases (buffers are sub-allocations of a few arenas, so distinct leases are the arenas a graph
touches) or ``hexrpc.MAX_BATCH_RECORD_BYTES`` of records (8 bytes + 12 per view + 8 per scalar
each). One hexrpc batch run is one FastRPC call. So the expected number of calls per run is
computed here from the captured graphs themselves with that rule (the test's own count, not the
device's) plus the kernels launched on their own, and it must equal both the device's counters
(``stats.batch_runs`` + ``stats.launches`` deltas) and the bench's count of FastRPC invokes; and
it is at most 2 per run (one per tinygrad graph batch: these networks are one or two). With only
the launch limit it would be ``ceil(kernels / MAX_BATCH_LAUNCHES)`` per graph; the test prints
both. Times printed are the bench's cost model: *simulated*, not device figures.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from tinygrad_bench import require_executor  # noqa: E402

# The set-up of every tinygrad test module here: the bench with the executor, CPU with clang-19,
# a module-level skip when the tools are missing.
require_executor()

import hexrpc  # noqa: E402
import hexrpc.tinygrad as hexrpc_tinygrad  # noqa: E402  (registers the device)
from tinygrad import Device, Tensor, TinyJit, nn  # noqa: E402
from tinygrad.nn.state import get_state_dict  # noqa: E402

#: Channels of the ResNet's first stage (ResNet-18: 64); stages have WIDTH x 1, 2, 4, 8.
WIDTH = 16
RUNS = 4

# One hexrpc batch (runtime/src/launch/abi.rs, as the native module reports it): launches,
# distinct leases, record bytes.
MAX_LAUNCHES, MAX_LEASES, MAX_RECORD_BYTES = hexrpc.MAX_BATCH_LAUNCHES, hexrpc.MAX_BATCH_LEASES, hexrpc.MAX_BATCH_RECORD_BYTES


# -------------------------------------------------------------------------------------------------
# Networks


class BasicBlock:
    def __init__(self, cin: int, cout: int, stride: int):
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm(cout)
        self.down = (nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm(cout)) if stride != 1 or cin != cout else None

    def __call__(self, x: Tensor) -> Tensor:
        out = self.bn1(self.conv1(x)).relu()
        out = self.bn2(self.conv2(out))
        short = self.down[1](self.down[0](x)) if self.down else x
        return (out + short).relu()


class ResNet18:
    def __init__(self, width: int = WIDTH, classes: int = 10):
        self.conv1 = nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm(width)
        widths = [width, 2 * width, 4 * width, 8 * width]
        self.layers, cin = [], width
        for i, w in enumerate(widths):
            self.layers.append([BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)])
            cin = w
        self.fc = nn.Linear(cin, classes)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.bn1(self.conv1(x)).relu().max_pool2d(kernel_size=(3, 3), stride=2, padding=1)
        for stage in self.layers:
            for block in stage:
                x = block(x)
        return self.fc(x.mean(axis=(2, 3)))


class TransformerBlock:
    def __init__(self, dim: int = 64, heads: int = 4, hidden: int = 256):
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def __call__(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = (f(h).reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        att = q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(att)
        return x + self.fc2(self.fc1(self.ln2(x)).gelu())


def random_weights(model, seed: int) -> dict[str, np.ndarray]:
    """Seeded weights for every tensor of ``model``'s state: He-scaled conv/linear weights (so
    activations stay O(1) through the depth), BN running variances in [0.5, 1.5]."""
    r = np.random.default_rng(seed)
    out = {}
    for name, t in get_state_dict(model).items():
        shape = t.shape
        if name.endswith("num_batches_tracked"):
            continue
        if name.endswith("running_var"):
            a = r.uniform(0.5, 1.5, shape)
        elif name.endswith("running_mean") or name.endswith("bias"):
            a = r.uniform(-0.1, 0.1, shape)
        elif len(shape) == 1:  # BN / LayerNorm scale
            a = r.uniform(0.8, 1.2, shape)
        else:
            fan_in = int(np.prod(shape[1:]))
            a = r.standard_normal(shape) * math.sqrt(2.0 / fan_in)
        out[name] = a.astype(np.float32)
    return out


def place(model, weights: dict[str, np.ndarray], device: str):
    for name, t in get_state_dict(model).items():
        if name in weights:
            t.replace(Tensor(weights[name], device=device).realize())
        else:
            t.replace(t.to(device).realize())
    return model


# -------------------------------------------------------------------------------------------------
# Counting


def expected_calls(graph) -> tuple[int, list[int]]:
    """FastRPC calls one run of ``graph`` (an ``HEXRPCGraph``) takes, counted here from its
    launches: a new call starts where the next launch would make more than MAX_LAUNCHES launches,
    MAX_LEASES distinct leases (told apart by ``lease_id``: the sub-allocations of one arena are
    one lease) or MAX_RECORD_BYTES of records in the current one. Returns (calls, launches per
    call)."""
    assert not graph.vars, "these networks bind no Variables (no scalar slots)"
    sizes: list[int] = []
    n, leases, nbytes = 0, set(), 0
    for _, _, bufs, _ in graph.calls:
        need = {b._buf.lease.lease_id for b in bufs}
        rb = 8 + 12 * len(bufs)
        if n and (n == MAX_LAUNCHES or len(leases | need) > MAX_LEASES or nbytes + rb > MAX_RECORD_BYTES):
            sizes.append(n)
            n, leases, nbytes = 0, set(), 0
        n, leases, nbytes = n + 1, leases | need, nbytes + rb
    sizes.append(n)
    return len(sizes), sizes


@pytest.fixture
def dev():
    return Device["HEXRPC"]


@pytest.fixture
def graphs(dev, monkeypatch):
    """Every ``HEXRPCGraph`` the device builds during the test, in order."""
    made = []

    class Recording(hexrpc_tinygrad.HEXRPCGraph):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(dev, "graph", Recording)
    return made


def run_net(model_cls, seed: int, inputs: list[np.ndarray], device: str, dev=None, graphs=None):
    model = place(model_cls(), random_weights(model_cls(), seed), device)
    step = TinyJit(lambda x: model(x).realize())
    outs, per_run = [], []
    for i, a in enumerate(inputs):
        x = Tensor(a, device=device).realize()
        if dev is not None:
            c0 = hexrpc.bench_counters(dev.session)
            s0 = (dev.stats.batch_runs, dev.stats.batched_launches, dev.stats.launches, dev.stats.library_opens)
        t0 = time.monotonic()
        y = step(x)
        wall = time.monotonic() - t0
        if dev is not None:
            c1 = hexrpc.bench_counters(dev.session)
            per_run.append({
                "invokes": c1["invokes"] - c0["invokes"],
                "simulated_us": c1["simulated_invoke_us"] - c0["simulated_invoke_us"],
                "dsp_maps": c1["dsp_maps"] - c0["dsp_maps"],
                "batch_runs": dev.stats.batch_runs - s0[0],
                "batched_launches": dev.stats.batched_launches - s0[1],
                "launches": dev.stats.launches - s0[2],
                "opens": dev.stats.library_opens - s0[3],
                "wall_s": wall,
            })
        outs.append(y.numpy())
    return outs, per_run


def check_calls(name: str, per_run: list[dict], graphs: list) -> None:
    assert graphs, "tinygrad built no HEXRPC graph for the jit"
    counted = [expected_calls(g) for g in graphs]
    want_batches = sum(c for c, _ in counted)
    graphed = sum(len(g.calls) for g in graphs)
    for r in per_run[2:]:
        # Every captured kernel runs in a graph or on its own; nothing is reopened after capture.
        assert r["batched_launches"] == graphed and r["opens"] == 0, (r, graphed)
        assert r["batch_runs"] == want_batches, (r, counted)
        # One FastRPC call per batch and per kernel launched on its own, as the bench counts them.
        assert r["invokes"] == r["batch_runs"] + r["launches"], r
        # No more calls than tinygrad's own graph split makes (these networks: one or two).
        assert r["invokes"] <= 2, (r, [len(g.calls) for g in graphs])
        # The graph libraries' entries keep their leases mapped (the map cache): nothing is
        # mapped on the DSP once the jit runs in steady state.
        assert r["dsp_maps"] == 0, r
    r = per_run[-1]
    kernels = r["batched_launches"] + r["launches"]
    launch_only = sum(math.ceil(len(g.calls) / MAX_LAUNCHES) for g in graphs) + r["launches"]
    print(
        f"\n{name}: {kernels} kernels per jit run ({len(graphs)} tinygrad graph batches of "
        f"{[len(g.calls) for g in graphs]} kernels, {r['launches']} on their own) -> "
        f"{r['invokes']} FastRPC calls per run (hexrpc batches of {[s for _, ss in counted for s in ss]} launches; "
        f"{launch_only} if only the {MAX_LAUNCHES}-launch limit applied); simulated DSP time "
        f"{np.median([p['simulated_us'] for p in per_run[2:]]):.0f} us per run (bench cost model, simulated); "
        f"host wall {np.median([p['wall_s'] for p in per_run[2:]]):.2f} s per run"
    )


def test_resnet18_under_tinyjit(dev, graphs):
    r = np.random.default_rng(1800)
    inputs = [r.uniform(-1, 1, size=(1, 3, 32, 32)).astype(np.float32) for _ in range(RUNS)]
    cpu, _ = run_net(ResNet18, 18, inputs, "CPU")
    hex_, per_run = run_net(ResNet18, 18, inputs, "HEXRPC", dev, graphs)
    for c, h in zip(cpu, hex_):
        # 18 layers; the widest sums have 9 * 8 * WIDTH terms. Relative error a few ulp per term
        # and layer, bounded by 1e-4 of the largest logit.
        assert np.abs(c).max() > 1e-2  # a dead network would compare zeros
        np.testing.assert_allclose(h, c, rtol=1e-4, atol=1e-4 * np.abs(c).max())
    check_calls("ResNet-18-shaped (1x3x32x32)", per_run, graphs)


def test_transformer_block_under_tinyjit(dev, graphs):
    r = np.random.default_rng(1900)
    inputs = [r.standard_normal((1, 16, 64)).astype(np.float32) for _ in range(RUNS)]
    cpu, _ = run_net(TransformerBlock, 19, inputs, "CPU")
    hex_, per_run = run_net(TransformerBlock, 19, inputs, "HEXRPC", dev, graphs)
    for c, h in zip(cpu, hex_):
        # Sums of 64 and 256 terms, softmax over 16, two LayerNorms: a few ulp each.
        np.testing.assert_allclose(h, c, rtol=1e-4, atol=1e-4 * np.abs(c).max())
    check_calls("transformer block (seq 16, dim 64, 4 heads)", per_run, graphs)
