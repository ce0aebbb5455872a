"""pytest plugin for running tinygrad's own tests on hexrpc's ``HEXRPC`` device.

Loaded by ``tinygrad_suite.py`` with ``-p tinygrad_suite_plugin`` (this directory on
``PYTHONPATH``). pytest imports a ``-p`` plugin before it collects any test module, so when the
device under test is ``HEXRPC`` (``DEV=HEXRPC``) this imports :mod:`hexrpc.tinygrad` first, which
registers the device before tinygrad's tests look it up (many of them read
``Device[Device.DEFAULT]`` in decorators, at import).

It also bounds each test's call phase (``--tg-timeout`` seconds, 0: none) with ``SIGALRM``: the
test fails with ``TimeoutError`` and the run goes on. tinygrad's own conftest instead aborts the
whole process after ``TEST_TIMEOUT``, which would lose every later result. A launch blocked in
hexrpc returns to Python within the bench's per-call limit, so the alarm is seen then.

At the end of the session it prints the HEXRPC device's counters (``DeviceStats``) and, if
``TG_SUITE_STATS`` names a file, writes them there as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal

import pytest

if os.environ.get("DEV", "").split(":")[0].upper() == "HEXRPC":
    os.environ.setdefault("HEXRPC_BENCH", "1")
    import hexrpc.tinygrad  # noqa: F401  (registers the device)


def pytest_addoption(parser):
    parser.addoption("--tg-timeout", type=float, default=300.0, help="seconds one test may run (0: no limit)")


class _TestTimeout(TimeoutError):
    pass


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    limit = item.config.getoption("--tg-timeout")
    if not limit or not hasattr(signal, "SIGALRM"):
        return (yield)

    def expire(signum, frame):
        raise _TestTimeout(f"test exceeded --tg-timeout={limit:g}s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def pytest_sessionfinish(session, exitstatus):
    import sys

    mod = sys.modules.get("hexrpc.tinygrad")
    if mod is None:
        return
    from tinygrad.device import Device

    if "HEXRPC" not in Device._opened_devices:
        return
    stats = dataclasses.asdict(Device["HEXRPC"].stats)
    print(f"\nHEXRPC device stats: {stats}")
    if path := os.environ.get("TG_SUITE_STATS"):
        with open(path, "w") as f:
            json.dump(stats, f)
