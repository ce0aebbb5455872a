"""What a deadline adds to a Python launch and to a Python batch run, each beside the same call
without one, measured interleaved in one process: for every round, each case runs ``CALLS``
calls in turn (the order rotates from round to round); a figure is the median over the rounds of
the measuring thread's CPU time per call (``time.thread_time_ns``), a ratio the median over the
rounds of the two sides' ratio in that round (both measured within milliseconds of each other,
so a machine whose speed swings between rounds moves both). Host time on this machine, on the
bench (a simulated kernel and DSP); never a device figure.

Run it on the release build of the package::

    maturin develop --release -m bindings/python/Cargo.toml   # (or pip install a `maturin build --release` wheel)
    python bindings/python/bench/deadline_overhead.py [--rounds 9] [--calls 2000]

Prints one JSON object:

``python_launch_ns`` / ``python_deadline_launch_ns`` / ``python_deadline_launch_ratio``
    ``lib.launch(views, scalars)`` against ``lib.launch(views, scalars, deadline_ms=1000)``, 3 views
    and 2 scalars (v2) as ``launch_overhead.py``, on a session whose launch ioctl returns at once
    (``Session.bench(returning_launches=True)``).
``python_launch_deadline_none_ns``
    ``lib.launch(views, scalars, deadline_ms=None)``: what passing the keyword alone costs (what
    ``hexrpc.tinygrad`` pays on every launch).
``python_batch_run_ns`` / ``python_deadline_batch_run_ns`` / ``python_deadline_batch_ratio``
    ``batch.run()`` against ``batch.run(deadline_ms=1000)``, 5 records of the bench model
    ``sleep_ms_table`` (0 ms each). A run needs the DSP's status record, which a returning session
    never writes, so these run on the bench's simulated DSP: the figures are mostly the simulated
    round trip (tens of µs, which swing by several µs on a busy machine).
``python_deadline_batch_extra_ns``
    What the deadline adds to ``batch.run``, without the simulator: the same batch on a returning
    session, where every run sends its ioctl and then raises ``hexrpc.Failed`` ("the library did
    not run the batch", no status record), with and without the deadline (both sides pay the same
    error path); the difference of the two medians.
``gettid_ns``
    ``threading.get_native_id()``: one ``gettid`` system call (CPython asks the kernel on every
    call) and a trivial C call. The bench's seam makes this system call for every call with a
    deadline (the thread the watchdog would interrupt); a device's seam (``RustixSys``) asks once
    per thread.
"""

import argparse
import json
import statistics
import threading
import time

import hexrpc

DEADLINE_MS = 1000


def interleaved(cases: dict, rounds: int, calls: int) -> dict[str, list[float]]:
    """CPU ns per call of each case in every round, the cases run in turn within a round."""
    names = list(cases)
    for f in cases.values():  # warm-up: caches, the watchdog thread, this thread's slot
        for _ in range(calls):
            f()
    per: dict[str, list[float]] = {n: [] for n in names}
    clock = time.thread_time_ns
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            f = cases[n]
            t = clock()
            for _ in range(calls):
                f()
            per[n].append((clock() - t) / calls)
    return per


def median(v: list[float]) -> float:
    return statistics.median(v)


def ratio(num: list[float], den: list[float]) -> float:
    """The median over the rounds of ``num / den`` in the same round."""
    return statistics.median(a / b for a, b in zip(num, den))


def launches(rounds: int, calls: int) -> dict[str, list[float]]:
    with hexrpc.Session.bench(returning_launches=True) as sess:
        lib = sess.open_library(hexrpc.bench_model_image("scale_f32"), signature="buf,buf,buf,i32,f32", name="overhead")
        lease = sess.alloc(65536)
        views = [lease.view(0, 4096), lease.view(4096, 4096), lease.view(8192, 4096)]
        scalars = [3, 0.5]
        launch = lib.launch
        return interleaved(
            {
                "plain": lambda: launch(views, scalars),
                "deadline": lambda: launch(views, scalars, deadline_ms=DEADLINE_MS),
                "deadline_none": lambda: launch(views, scalars, deadline_ms=None),
                "gettid": threading.get_native_id,
            },
            rounds,
            calls,
        )


def batch_runs(rounds: int, calls: int) -> dict[str, list[float]]:
    with hexrpc.Session.bench() as sess:
        lib = sess.open_library(hexrpc.bench_model_image("sleep_ms_table"), signature="buf,u32", name="overhead")
        lease = sess.alloc(65536)
        batch = hexrpc.Batch(lib, ["buf,u32"])
        for i in range(5):
            batch.push(0, [lease.view(128 * i, 4)], [0])
        run = batch.run
        return interleaved({"plain": lambda: run(), "deadline": lambda: run(deadline_ms=DEADLINE_MS)}, rounds, calls)


def returning_batch_runs(rounds: int, calls: int) -> dict[str, list[float]]:
    with hexrpc.Session.bench(returning_launches=True) as sess:
        lib = sess.open_library(hexrpc.bench_model_image("sleep_ms_table"), signature="buf,u32", name="overhead")
        lease = sess.alloc(65536)
        batch = hexrpc.Batch(lib, ["buf,u32"])
        for i in range(5):
            batch.push(0, [lease.view(128 * i, 4)], [0])
        run, failed = batch.run, hexrpc.Failed
        for kw in ({}, {"deadline_ms": DEADLINE_MS}):  # the error path measured is this one
            try:
                run(**kw)
                raise SystemExit("a batch on a returning session ran: measure it as a plain run")
            except failed as e:
                if "did not run the batch" not in str(e):
                    raise

        def plain():
            try:
                run()
            except failed:
                pass

        def deadline():
            try:
                run(deadline_ms=DEADLINE_MS)
            except failed:
                pass

        return interleaved({"plain": plain, "deadline": deadline}, rounds, calls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    la = launches(a.rounds, a.calls)
    ba = batch_runs(a.rounds, a.calls)
    br = returning_batch_runs(a.rounds, a.calls)
    print(
        json.dumps(
            {
                "python_launch_ns": round(median(la["plain"])),
                "python_deadline_launch_ns": round(median(la["deadline"])),
                "python_deadline_launch_ratio": round(ratio(la["deadline"], la["plain"]), 3),
                "python_launch_deadline_none_ns": round(median(la["deadline_none"])),
                "python_batch_run_ns": round(median(ba["plain"])),
                "python_deadline_batch_run_ns": round(median(ba["deadline"])),
                "python_deadline_batch_ratio": round(ratio(ba["deadline"], ba["plain"]), 3),
                "python_deadline_batch_extra_ns": round(median(br["deadline"]) - median(br["plain"])),
                "gettid_ns": round(median(la["gettid"])),
                "rounds": a.rounds,
                "calls": a.calls,
            }
        )
    )


if __name__ == "__main__":
    main()
