"""Per-jit-run FastRPC calls and simulated latency of a small CNN on HEXRPC, on the bench: as one
batch (the HEXRPC graph) and kernel by kernel. Figures are the bench's cost model (60 us per
crossing + 2 us per KiB copied): simulated, never device figures.

    HEXRPC_CLI=target/release/hexrpc CC=clang-19 python bindings/python/examples/tinygrad_jit_figures.py
"""

import os

os.environ.setdefault("HEXRPC_BENCH", "1")
os.environ.setdefault("CC", "clang-19")

import numpy as np  # noqa: E402

import hexrpc  # noqa: E402
import hexrpc.tinygrad  # noqa: E402,F401  (registers the device)
from tinygrad import Device, Tensor, TinyJit  # noqa: E402

RUNS = 8
dev = Device["HEXRPC"]
rng = np.random.default_rng(5)
shapes = [(8, 1, 3, 3), (8, 8, 3, 3), (16, 8, 3, 3), (16, 16, 3, 3), (16, 10)]
w = [Tensor((rng.standard_normal(s) * 0.2).astype(np.float32), device="HEXRPC").realize() for s in shapes]


def net(x: Tensor) -> Tensor:
    x = x.conv2d(w[0], padding=1).relu()
    x = x.conv2d(w[1], padding=1).relu().max_pool2d()
    x = x.conv2d(w[2], padding=1).relu()
    x = x.conv2d(w[3], padding=1).relu().max_pool2d()
    return (x.mean(axis=(2, 3)) @ w[4]).softmax()


def measure(graph: bool) -> list[tuple[int, float, int]]:
    """(invokes, simulated us, kernels launched) per run."""
    saved = dev.graph
    if not graph:
        dev.graph = None
    try:
        step = TinyJit(lambda x: net(x).realize())
        out = []
        for _ in range(RUNS):
            x = Tensor(rng.uniform(-1, 1, size=(2, 1, 16, 16)).astype(np.float32), device="HEXRPC").realize()
            c0, k0 = hexrpc.bench_counters(dev.session), dev.stats.launches + dev.stats.batched_launches
            step(x)
            c1, k1 = hexrpc.bench_counters(dev.session), dev.stats.launches + dev.stats.batched_launches
            out.append((c1["invokes"] - c0["invokes"], c1["simulated_invoke_us"] - c0["simulated_invoke_us"], k1 - k0))
        return out
    finally:
        dev.graph = saved


for name, graph in (("one batch", True), ("kernel by kernel", False)):
    runs = measure(graph)[2:]  # after tinygrad's warm-up and capture runs
    inv, us, kernels = runs[-1]
    print(f"{name:16s}: {kernels} kernels, {inv} invoke(s), {np.median([r[1] for r in runs]):.0f} us simulated per jit run")
