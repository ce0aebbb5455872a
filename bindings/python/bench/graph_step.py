"""graph_step_host_ns: hexrpc's own host time per ``TinyJit`` step of a 10-kernel graph on the
HEXRPC device whose 4 inputs change every step (4 sets of input tensors in turn), i.e. what
``HEXRPCGraph.__call__`` spends outside its FastRPC calls (``DeviceStats.graph_host_ns`` /
``graph_steps``: finding the changed inputs, ``Batch.set_view`` on their records, the stats). The
FastRPC call itself (``Batch.run``: the records packed and one ioctl) is excluded and printed
beside it as ``graph_run_ns``, measured around the whole step from Python.

Runs on the bench with the executor (``HEXRPC_BENCH=1``; needs clang-19, ld.lld-19,
qemu-hexagon and the ``hexrpc`` tool, ``HEXRPC_CLI``): the kernels really run, under
qemu-hexagon, so a step's wall time is emulated time and is not reported as a figure. Host time
on this machine, median over 5 rounds of 100 steps; not a device figure. Prints one JSON object.
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
    print(
        json.dumps(
            {
                "graph_step_host_ns": round(statistics.median(host)),
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
