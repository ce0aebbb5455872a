"""A forced DSP restart in the middle of a pytest session: the first test runs a kernel that
faults on the DSP (a write through a null pointer: the bench's executor sees qemu-hexagon die,
which is a DSP restart); only that kernel's call fails, and the tests after it, in the same
process and on the same device, pass without anyone calling ``recover()``. The tests run in
file order (pytest's default), which is what this module checks. Skips like test_tinygrad.py
without the executor's tools or the ``hexrpc`` tool."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tinygrad_bench import require_executor  # noqa: E402

require_executor()

import hexrpc.tinygrad as hx  # noqa: E402
from tinygrad import Device, Tensor, TinyJit, dtypes  # noqa: E402

rng = np.random.default_rng(23)
STATE: dict[str, int] = {}


def f32(*shape):
    return rng.uniform(-2, 2, size=shape).astype(np.float32)


def faulting_program(dev) -> hx.HEXRPCProgram:
    """A tinygrad program on HEXRPC whose kernel writes through a null pointer."""
    rec = hx.KernelRecord("crash_k", "buf")
    src = "void crash_k(float* restrict a) {\n  *(volatile float*)0x10 = a[0];\n}\n" + rec.render()
    lib = hx.build_library([(src, rec)])
    obj = SimpleNamespace(name="crash_k", lib=lib, signature=(("a", 0, dtypes.float32, (16,)),))
    return hx.HEXRPCProgram(dev, obj)


def test_1_a_faulting_kernel_fails_alone_and_the_device_recovers():
    dev = Device["HEXRPC"]
    x = Tensor(f32(16), device="HEXRPC").realize()
    prg = faulting_program(dev)
    STATE["recoveries"] = dev.hub.recovery_count
    with pytest.raises(hx.DSPRestartError) as e:
        prg(x.uop.buffer._buf)
    assert e.value.recovered, e.value
    assert e.value.kernel == "crash_k"
    assert "restart" in e.value.reason and "faulted" in e.value.reason and "crash_k" in str(e.value), e.value
    assert dev.hub.recovery_count == STATE["recoveries"] + 1
    assert dev.session.healthy


def test_2_elementwise_after_the_restart():
    a, b = f32(300), f32(300)
    got = (Tensor(a, device="HEXRPC") * Tensor(b, device="HEXRPC") + 1).numpy()
    np.testing.assert_allclose(got, a * b + 1, rtol=1e-5, atol=1e-6)  # a*b+1 may be one fused multiply-add


def test_3_matmul_and_reduce_after_the_restart():
    a, b = f32(32, 48), f32(48, 16)
    got = (Tensor(a, device="HEXRPC") @ Tensor(b, device="HEXRPC")).sum(axis=1).numpy()
    want = (Tensor(a, device="CPU") @ Tensor(b, device="CPU")).sum(axis=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_4_jit_after_the_restart():
    w = f32(64)

    @TinyJit
    def step(x):
        return ((x * Tensor(w, device="HEXRPC")).softmax() + x.exp()).realize()

    for _ in range(4):
        a = f32(64)
        got = step(Tensor(a, device="HEXRPC").realize()).numpy()
        want = ((Tensor(a, device="CPU") * Tensor(w, device="CPU")).softmax() + Tensor(a, device="CPU").exp()).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # No restart since the forced one: nothing else needed recovering.
    assert Device["HEXRPC"].hub.recovery_count == STATE["recoveries"] + 1
