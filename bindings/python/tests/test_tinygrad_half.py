"""tinygrad 0.14 half-precision (float16) kernels on the HEXRPC device, on hexrpc's bench with the
executor, compared with tinygrad's CPU device.

tinygrad renders ``half`` as ``__fp16`` (a storage type: each load widens to float, each store
rounds to half). clang-19 has no compiler runtime for Hexagon, so ``hexrpc build-lib`` links the
conversion helpers (``__extendhfsf2``, ``__truncsfhf2``, ...) into each library that calls them
(docs/build-lib.md); before it did, every such kernel was refused with "the library imports
symbols the DSP does not provide".

Bounds: conversions (float32 -> half -> float32, half -> int32) are IEEE round-to-nearest-even or
exact and must be equal bit for bit (NaN positions equal, payloads not compared), also against
numpy's own conversion. Arithmetic in half is rounded to half after every operation on both
devices; clang may contract a*b+c into a fused multiply-add differently on x86 and Hexagon, so
elementwise results get one half ulp of relative slack and the matmul a bound of a half ulp per
term (2^-11 * K * max(|a| @ |b|)).

The module skips (with the reason) when the executor's tools (clang-19, ld.lld-19, qemu-hexagon)
or the ``hexrpc`` tool are missing.
"""

from __future__ import annotations


import numpy as np

from tinygrad_bench import both, require_executor  # noqa: E402

tinygrad = require_executor()

import hexrpc.tinygrad  # noqa: E402,F401  (registers the device)
from tinygrad import Tensor, dtypes  # noqa: E402

HALF_EPS = 2.0**-10  # the spacing of halves in [1, 2)

rng = np.random.default_rng(1616)


def f16(*shape, lo=-4.0, hi=4.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float16)


def assert_same_bits(got: np.ndarray, want: np.ndarray):
    """Equal dtype and shape, NaN where ``want`` has NaN, every other element bit for bit (so the
    sign of a zero counts)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
    g, w = got[~nan].view(bits), want[~nan].view(bits)
    bad = np.nonzero(g != w)[0]
    assert bad.size == 0, f"{bad.size} differ, first: got {got[~nan][bad[:5]]}, want {want[~nan][bad[:5]]}"


def edge_f32() -> np.ndarray:
    """Values whose conversion to half is easy to get wrong: zeros, float subnormals, half
    subnormals and the ties around them, the largest half and the overflow threshold, infinities,
    NaN, ties between neighbouring normal halves (which go to the even one) and their neighbours."""
    tiny = 2.0**-24  # the smallest half subnormal
    vals = [
        0.0,
        -0.0,
        1e-45,
        1.2e-38,
        tiny / 2,  # tie between 0 and the smallest subnormal: 0
        tiny * 0.75,
        tiny,
        tiny * 1.5,  # tie: 2 units (even)
        tiny * 2.5,  # tie: 2 units
        tiny * 1023,
        tiny * 1023.5,  # tie: rounds into the smallest normal
        2.0**-14,
        1.0,
        1.0 + 2.0**-11,  # tie: 1.0
        1.0 + 3 * 2.0**-11,  # tie: up, to the even 1 + 2^-9
        2049.0,  # tie: 2048
        2051.0,  # tie: 2052
        65504.0,
        65519.0,
        65520.0,  # tie between the largest half and 2^16: inf
        65536.0,
        3.4e38,
        np.inf,
        -np.inf,
        np.nan,
    ]
    x = np.array(vals, dtype=np.float32)
    mids = (np.arange(0x3C00, 0x3D00, dtype=np.uint16).view(np.float16).astype(np.float32) + 2.0**-11).astype(np.float32)
    around = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
    x = np.concatenate([x, around, rng.uniform(-70000, 70000, 3000).astype(np.float32)])
    return np.concatenate([x, -x])


def test_half_elementwise():
    a, b = f16(37, 29), f16(37, 29, lo=0.5, hi=3.0)
    cpu, hex_ = both(lambda x, y: (x + y) * x - y / 3, a, b)
    assert hex_.dtype == np.float16
    np.testing.assert_allclose(hex_.astype(np.float32), cpu.astype(np.float32), rtol=HALF_EPS, atol=2.0**-14)
    # A plain add is one rounding of an exact sum: equal bit for bit, and to numpy's.
    cpu, hex_ = both(lambda x, y: x + y, a, b)
    assert_same_bits(hex_, cpu)
    assert_same_bits(hex_, a + b)


def test_half_matmul():
    a, b = f16(45, 70, lo=-1, hi=1), f16(70, 23, lo=-1, hi=1)
    cpu, hex_ = both(lambda x, y: x @ y, a, b)
    assert hex_.dtype == np.float16
    bound = 70 * 2.0**-11 * (np.abs(a.astype(np.float32)) @ np.abs(b.astype(np.float32))).max()
    np.testing.assert_allclose(hex_.astype(np.float32), cpu.astype(np.float32), rtol=HALF_EPS, atol=bound)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(hex_.astype(np.float64), exact, rtol=HALF_EPS, atol=bound)


def test_cast_float32_half_float32():
    x = edge_f32()
    with np.errstate(over="ignore"):
        want16 = x.astype(np.float16)  # numpy: IEEE round to nearest, ties to even
    # tinygrad folds cast(half).cast(float32) in one kernel away; the half tensor materialised in
    # between makes it two kernels, float32 -> half and half -> float32.
    cpu, hex_ = both(lambda t: t.cast(dtypes.half).contiguous().realize().cast(dtypes.float32), x)
    assert hex_.dtype == np.float32
    assert_same_bits(hex_, cpu)
    assert_same_bits(hex_, want16.astype(np.float32))
    cpu, hex_ = both(lambda t: t.cast(dtypes.half), x)
    assert_same_bits(hex_, cpu)
    assert_same_bits(hex_, want16)


def test_cast_every_half_to_float32():
    h = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    cpu, hex_ = both(lambda t: t.cast(dtypes.float32), h)
    assert_same_bits(hex_, cpu)
    assert_same_bits(hex_, h.astype(np.float32))


def test_cast_half_to_int():
    h = np.concatenate([f16(2000, lo=-60000, hi=60000), f16(2000, lo=-3, hi=3), np.array([0, -0.0, 0.5, -0.5, 65504, -65504, 6e-8], np.float16)])
    cpu, hex_ = both(lambda t: t.cast(dtypes.int32), h)
    assert hex_.dtype == np.int32
    np.testing.assert_array_equal(hex_, cpu)
    np.testing.assert_array_equal(hex_, np.trunc(h.astype(np.float64)).astype(np.int32))
    # float32 -> half -> int32: the rounding to half first.
    x = rng.uniform(-3000, 3000, 4000).astype(np.float32)
    cpu, hex_ = both(lambda t: t.cast(dtypes.half).cast(dtypes.int32), x)
    np.testing.assert_array_equal(hex_, cpu)
    np.testing.assert_array_equal(hex_, np.trunc(x.astype(np.float16).astype(np.float64)).astype(np.int32))


def test_short_to_half_casts_and_half_math():
    """16-bit integers to half, and half sqrt / sin / exp2 / log2 (whose tinygrad decompositions
    cast 16-bit integers to half): the renderer widens such a cast to int first, which clang-19
    converts (it copies the bits of a direct short -> __fp16 cast on Hexagon, and build-lib refuses
    that). Integer casts are exact; sin, exp2 and log2 equal CPU's; sqrt within one half ulp (the
    DSP kernel uses tinygrad's polynomial, the CPU clang's sqrtf)."""
    s = np.concatenate([np.arange(-2048, 2048, 7, dtype=np.int16), np.array([-32768, 32767, -1, 0, 1], np.int16)])
    cpu, hex_ = both(lambda t: t.cast(dtypes.half), s)
    assert_same_bits(hex_, cpu)
    u = np.array([0, 1, 2047, 2048, 2049, 65504 // 32, 65535], np.uint16)
    cpu, hex_ = both(lambda t: t.cast(dtypes.half), u)
    assert_same_bits(hex_, cpu)
    x = f16(500, lo=0.01, hi=8.0)
    for fn in (lambda t: t.sin(), lambda t: t.exp2(), lambda t: t.log2()):
        cpu, hex_ = both(fn, x)
        assert_same_bits(hex_, cpu)
    cpu, hex_ = both(lambda t: t.sqrt(), x)
    np.testing.assert_allclose(hex_.astype(np.float32), cpu.astype(np.float32), rtol=HALF_EPS, atol=0)
