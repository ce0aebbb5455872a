"""tinygrad with many distinct kernels on HEXRPC (bench + executor): each kernel's library is
opened once and stays open; running them again in turn opens nothing (the HAL's library table,
``hexrpc.MAX_LIBRARIES``, holds them all). Skips like test_tinygrad.py without the executor's
tools or the ``hexrpc`` tool."""

from __future__ import annotations


import numpy as np

from tinygrad_bench import require_executor  # noqa: E402

require_executor()

import hexrpc  # noqa: E402
import hexrpc.tinygrad  # noqa: E402,F401  (registers the device)
from tinygrad import Device, Tensor  # noqa: E402

KERNELS = 200


def test_200_distinct_kernels_open_once_and_never_reopen():
    assert hexrpc.MAX_LIBRARIES >= KERNELS + 16, hexrpc.MAX_LIBRARIES
    dev = Device["HEXRPC"]
    x = np.arange(64, dtype=np.float32)
    tx = Tensor(x, device="HEXRPC").realize()
    # Each constant is part of its kernel's source: 200 different kernels, 200 programs.
    ops = [lambda t, k=k: (t * float(k + 1) + float(k)) for k in range(KERNELS)]
    opens0, reopens0, launches0 = dev.stats.library_opens, dev.stats.library_reopens, dev.stats.launches
    for k, op in enumerate(ops):
        np.testing.assert_array_equal(op(tx).numpy(), x * np.float32(k + 1) + np.float32(k))
    first = dev.stats.library_opens - opens0
    launched = dev.stats.launches - launches0
    assert launched >= KERNELS, launched
    assert first <= KERNELS, (first, KERNELS)
    # Steady state: the same kernels again, twice, in turn: no open, no reopen.
    opens1 = dev.stats.library_opens
    for _ in range(2):
        for k, op in enumerate(ops):
            np.testing.assert_array_equal(op(tx).numpy(), x * np.float32(k + 1) + np.float32(k))
    assert dev.stats.library_opens == opens1, (dev.stats.library_opens - opens1, "opens in steady state")
    assert dev.stats.library_reopens == reopens0
    launches = dev.stats.launches - launches0
    print(f"\n{KERNELS} distinct kernels, {launches} launches: {dev.stats.library_opens - opens0} library opens, "
          f"{dev.stats.library_reopens - reopens0} reopens ({(dev.stats.library_opens - opens0) / launches:.3f} opens per launch)")
