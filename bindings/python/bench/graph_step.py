"""hexrpc's own Python time per ``TinyJit`` step of a 10-kernel graph on the HEXRPC device whose 4
inputs change every step (4 sets of input tensors in turn): what ``HEXRPCGraph.__call__`` spends
outside its FastRPC call (finding the changed inputs, ``Batch.set_views`` on their records, the
Variables, the stats; ``DeviceStats.graph_host_ns`` / ``graph_steps``).

Two figures, host time of the measuring thread on this machine (install the wheel built with
``maturin build --release``), medians over 5 rounds; never device figures:

``graph_step_host_ns``
    the graph's own work alone: the captured graph is called directly with each step's inputs,
    its batches' ``run`` replaced by one that returns at once (no emulator runs in between).
``graph_step_host_ns_in_situ``
    the same work measured inside real jit steps, the kernels running under qemu-hexagon
    between them: on this 2-core machine the emulator evicts the caches and competes for the
    cores, which this figure includes (a device's DSP runs on its own cores).

Runs on the bench with the executor (``HEXRPC_BENCH=1``; needs clang-19, ld.lld-19, qemu-hexagon
and the ``hexrpc`` tool, ``HEXRPC_CLI``). Prints one JSON object.
"""

import json
import os
import statistics
import time

os.environ.setdefault("HEXRPC_BENCH", "1")
os.environ.setdefault("CC", "clang-19")

import numpy as np  # noqa: E402

import hexrpc.tinygrad  # noqa: E402,F401  (registers the device)
from tinygrad import Device, Tensor, TinyJit  # noqa: E402

KERNELS, INPUT_SETS, ROUNDS, STEPS = 10, 4, 5, 100


def model(a: Tensor, b: Tensor, c: Tensor, d: Tensor) -> Tensor:
    """Ten kernels: each `.contiguous()` ends one (tinygrad fuses what lies between)."""
    t = (a * b).contiguous()
    for i in range(KERNELS - 2):
        t = (t * 0.5 + (c if i % 2 else d)).contiguous()
    return (t + a).contiguous().realize()


class _ReturningRun:
    """Stands for a ``hexrpc.Batch`` in the graph's list of batches: ``run`` returns at once
    (the records are kept in the real batch, which ``set_views`` still updates)."""

    __slots__ = ("batch",)

    def __init__(self, batch):
        self.batch = batch

    def run(self, deadline_ms=None) -> int:
        return 0


def isolated_host_ns(step, sets, rounds: int = 5, steps: int = 2000) -> list[float]:
    """The captured graph called directly with the inputs of each step, its FastRPC call
    returning at once: ns per step of hexrpc's own Python (``graph_host_ns``)."""
    import gc

    from hexrpc.tinygrad import HEXRPCGraph

    graph = next(o for o in gc.get_objects() if isinstance(o, HEXRPCGraph))
    dev = graph.dev
    # The graph's arguments per input set, as tinygrad passes them (recorded from real steps).
    seen: list[tuple] = []
    call = HEXRPCGraph.__call__

    def record(self, input_uops, var_vals, wait=False):
        seen.append((input_uops, var_vals))
        return call(self, input_uops, var_vals, wait)

    HEXRPCGraph.__call__ = record
    try:
        for i in range(INPUT_SETS):
            step(*sets[i])
    finally:
        HEXRPCGraph.__call__ = call
    real = graph._batches
    graph._batches = [(calls, _ReturningRun(b)) for calls, b in real]
    out = []
    try:
        for _ in range(rounds):
            s0, h0 = dev.stats.graph_steps, dev.stats.graph_host_ns
            for i in range(steps):
                graph(*seen[i % len(seen)])
            out.append((dev.stats.graph_host_ns - h0) / (dev.stats.graph_steps - s0))
    finally:
        graph._batches = real
    return out


def main() -> None:
    dev = Device["HEXRPC"]
    rng = np.random.default_rng(24)
    sets = [[Tensor(rng.standard_normal(256).astype(np.float32), device="HEXRPC").realize() for _ in range(4)] for _ in range(INPUT_SETS)]
    step = TinyJit(model)
    for i in range(4):  # warm-up and capture
        step(*sets[i % INPUT_SETS])
    b0 = dev.stats.batched_launches
    step(*sets[0])
    kernels = dev.stats.batched_launches - b0
    host, run = [], []
    rebuilds0 = dev.stats.graph_rebuilds
    for _ in range(ROUNDS):
        s0, h0 = dev.stats.graph_steps, dev.stats.graph_host_ns
        t0 = time.perf_counter_ns()
        for i in range(STEPS):
            step(*sets[i % INPUT_SETS])
        wall = time.perf_counter_ns() - t0
        steps = dev.stats.graph_steps - s0
        host.append((dev.stats.graph_host_ns - h0) / steps)
        run.append(wall / steps)
    isolated = isolated_host_ns(step, sets)
    print(
        json.dumps(
            {
                "graph_step_host_ns": round(statistics.median(isolated)),
                "graph_step_host_ns_in_situ": round(statistics.median(host)),
                "graph_kernels": kernels,
                "input_sets": INPUT_SETS,
                "steps": ROUNDS * STEPS,
                "rebuilds_after_capture": dev.stats.graph_rebuilds - rebuilds0,
                "step_wall_ns_emulated": round(statistics.median(run)),
            }
        )
    )


if __name__ == "__main__":
    main()
