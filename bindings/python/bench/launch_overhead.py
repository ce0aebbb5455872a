"""python_launch_overhead_ns: one ``lib.launch(views, scalars)`` from Python through a bench
session whose launch ioctl returns at once (``Session.bench(returning_launches=True)``), for 3
views and 2 scalars (v2), as ``launch_overhead_ns`` measures the packer. Median over 30 batches of
10,000 launches of the thread's CPU time per launch (``time.thread_time_ns``; the wall-clock
median is printed beside it). Host time on this machine; not a device figure. Prints one JSON
object. Run by bindings/bench.sh."""

import json
import statistics
import time

import hexrpc

BATCHES, BATCH = 30, 10_000

with hexrpc.Session.bench(returning_launches=True) as sess:
    lib = sess.open_library(hexrpc.bench_model_image("scale_f32"), signature="buf,buf,buf,i32,f32", name="overhead")
    lease = sess.alloc(65536)
    views = [lease.view(0, 4096), lease.view(4096, 4096), lease.view(8192, 4096)]
    scalars = [3, 0.5]
    launch = lib.launch
    for _ in range(BATCH):
        launch(views, scalars)
    cpu, wall = [], []
    for _ in range(BATCHES):
        c, w = time.thread_time_ns(), time.perf_counter_ns()
        for _ in range(BATCH):
            launch(views, scalars)
        cpu.append((time.thread_time_ns() - c) / BATCH)
        wall.append((time.perf_counter_ns() - w) / BATCH)
print(json.dumps({"python_launch_overhead_ns": round(statistics.median(cpu), 1),
                  "python_launch_overhead_wall_ns": round(statistics.median(wall), 1),
                  "launches": BATCHES * BATCH}))
