"""python_model_run_ns: ``hexrpc.Model.run`` with numpy arrays in and out, through a bench session
whose FastRPC ioctl returns at once (``Session.bench(returning_launches=True)``), beside one raw
``INVOKE_ATTRS`` ioctl measured in the same process (``hexrpc.bench_raw_ioctl_ns``), as a ratio.

Models: the bench's sample model (1,024-byte input, two 1,024-byte outputs) and every ``.hxm``
given on the command line (exported files; their libraries load in the executor's shell, so
qemu-hexagon and the shell are needed: ``HEXRPC_BENCH_SHELL`` or the toolchain), run on zeros.
Median over BATCHES batches of the thread's CPU time per run (``time.thread_time_ns``), wall time
beside it. Host time on this machine; not a device figure. Prints one JSON object.

Usage: python bindings/python/bench/model_overhead.py [FILE.hxm...]"""

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import hexrpc

BATCHES, BATCH = 30, 2_000


def measure(run) -> tuple[float, float]:
    for _ in range(BATCH):
        run()
    cpu, wall = [], []
    for _ in range(BATCHES):
        c, w = time.thread_time_ns(), time.perf_counter_ns()
        for _ in range(BATCH):
            run()
        cpu.append((time.thread_time_ns() - c) / BATCH)
        wall.append((time.perf_counter_ns() - w) / BATCH)
    return statistics.median(cpu), statistics.median(wall)


raw_cpu, raw_wall = hexrpc.bench_raw_ioctl_ns()
out = {"raw_invoke_ioctl_ns": round(raw_cpu, 1), "models": [], "platform": "bench", "seam": "returning"}
sources = [("sample", hexrpc.bench_sample_model(1024))] + [(Path(p).parent.name or p, Path(p).read_bytes()) for p in sys.argv[1:]]
for name, data in sources:
    with hexrpc.Session.bench(returning_launches=True) as sess:
        m = hexrpc.Model(data, session=sess)
        inputs = {t.name: np.zeros(t.shape, dtype=t.dtype) for t in m.inputs}
        cpu, wall = measure(lambda: m.run(**inputs))
        out["models"].append({
            "model": name,
            "input_bytes": sum(t.nbytes for t in m.inputs),
            "python_model_run_ns": round(cpu, 1),
            "python_model_run_wall_ns": round(wall, 1),
            "ratio_to_raw_ioctl": round(cpu / raw_cpu, 1),
            "beyond_raw_ioctl_ns": round(cpu - raw_cpu, 1),
        })
        m.close()
print(json.dumps(out))
