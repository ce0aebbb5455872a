"""tinygrad ops on the HEXRPC device against tinygrad's CPU device, one test per op.

Each case builds its inputs once from a seeded generator, runs the same tinygrad expression on
``CPU`` and on ``HEXRPC`` (hexrpc's bench with the executor: every kernel is rendered by
``HEXRPCRenderer``, built for Hexagon by ``hexrpc build-lib`` and run under qemu-hexagon) and
compares the two results. No torch: the reference is tinygrad's CPU device.

Bounds (per case, in the table below):

* ``exact``: integer arithmetic, comparisons, selections, casts from integers, data movement,
  max/min and argmax: the same IEEE/two's-complement operations on the same values, so the
  results must be equal bit for bit.
* elementwise float arithmetic (+, -, *, /, sqrt): ``rtol=atol=2e-6``. Both targets are binary32,
  but clang contracts ``a*b+c`` into a fused multiply-add differently for x86 and Hexagon.
* transcendental functions (exp, log, sin, tanh, sigmoid, pow, gelu...): tinygrad computes them
  with its own polynomial decompositions on both devices; bounded by a few ulp, ``rtol=1e-5``
  (plus a small ``atol`` where the result crosses zero).
* reductions, matmul, convolution, normalisation: ``n`` terms summed in a possibly different
  order: ``atol = n * 1.2e-7 * (sum of |terms|)``, stated per case as a function of the inputs.

The module skips (with the reason) when the executor's tools (clang-19, ld.lld-19,
qemu-hexagon) or the ``hexrpc`` tool are missing, like ``test_tinygrad.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from tinygrad_bench import require_executor  # noqa: E402

# The set-up of every tinygrad test module here: the bench with the executor, CPU with clang-19,
# a module-level skip when the tools are missing.
require_executor()

import hexrpc.tinygrad  # noqa: E402,F401  (registers the device)
from tinygrad import Tensor, dtypes  # noqa: E402

EPS32 = 1.2e-7  # binary32 unit roundoff (2**-23 ~ 1.19e-7)


def f32(r: np.random.Generator, *shape, lo=-2.0, hi=2.0) -> np.ndarray:
    return r.uniform(lo, hi, size=shape).astype(np.float32)


def i32(r: np.random.Generator, *shape, lo=-1000, hi=1000) -> np.ndarray:
    return r.integers(lo, hi, size=shape, dtype=np.int32)


@dataclass
class Case:
    """One op: ``fn`` over tensors made from ``make(rng)``; ``exact`` or the float bounds."""

    name: str
    fn: Callable[..., Tensor]
    make: Callable[[np.random.Generator], list[np.ndarray]]
    exact: bool = False
    rtol: float = 0.0
    atol: float | Callable[[list[np.ndarray]], float] = 0.0


def ew(name, fn, make, **kw):
    """Elementwise float arithmetic: rtol=atol=2e-6 unless given."""
    kw.setdefault("rtol", 2e-6)
    kw.setdefault("atol", 2e-6)
    return Case(name, fn, make, **kw)


def tr(name, fn, make, **kw):
    """Transcendental: rtol=1e-5, atol=1e-6 unless given."""
    kw.setdefault("rtol", 1e-5)
    kw.setdefault("atol", 1e-6)
    return Case(name, fn, make, **kw)


def ex(name, fn, make, **kw):
    return Case(name, fn, make, exact=True, **kw)


one = lambda *s, **k: (lambda r: [f32(r, *s, **k)])  # noqa: E731
two = lambda s1, s2, **k: (lambda r: [f32(r, *s1, **k), f32(r, *s2, **k)])  # noqa: E731
ints = lambda *shapes, **k: (lambda r: [i32(r, *s, **k) for s in shapes])  # noqa: E731

CASES: list[Case] = [
    # -- unary math
    tr("exp", lambda x: x.exp(), one(333, lo=-20, hi=20)),
    tr("exp2", lambda x: x.exp2(), one(333, lo=-30, hi=30)),
    tr("log", lambda x: x.log(), one(333, lo=1e-3, hi=1e3)),
    tr("log2", lambda x: x.log2(), one(333, lo=1e-3, hi=1e3)),
    tr("sin", lambda x: x.sin(), one(333, lo=-10, hi=10)),
    tr("cos", lambda x: x.cos(), one(333, lo=-10, hi=10)),
    ew("sqrt", lambda x: x.sqrt(), one(333, lo=0, hi=100)),
    ew("rsqrt", lambda x: x.rsqrt(), one(333, lo=0.01, hi=100)),
    ex("relu", lambda x: x.relu(), one(17, 33)),
    tr("sigmoid", lambda x: x.sigmoid(), one(17, 33, lo=-12, hi=12)),
    tr("tanh", lambda x: x.tanh(), one(17, 33, lo=-6, hi=6)),
    tr("gelu", lambda x: x.gelu(), one(17, 33, lo=-5, hi=5)),
    ex("abs_neg", lambda x: -x.abs(), one(17, 33)),
    ew("reciprocal", lambda x: x.reciprocal(), one(17, 33, lo=0.1, hi=10)),
    ex("floor_ceil_trunc", lambda x: x.floor() + 2 * x.ceil() - 3 * x.trunc(), one(257, lo=-50, hi=50)),
    # -- binary with broadcasting
    ew("add_broadcast", lambda a, b: a + b, two((3, 1, 5), (1, 4, 5))),
    ew("sub_broadcast", lambda a, b: a - b, two((7, 9), (9,))),
    ew("mul_broadcast", lambda a, b: a * b, two((6, 1), (1, 11))),
    ew("div_broadcast", lambda a, b: a / b, lambda r: [f32(r, 5, 8), f32(r, 8, lo=0.5, hi=3)]),
    ex("maximum_minimum", lambda a, b: a.maximum(b) - a.minimum(b) * 0.5, two((4, 31), (4, 31))),
    tr("pow", lambda a, b: a.pow(b), lambda r: [f32(r, 64, lo=0.1, hi=4), f32(r, 64, lo=-3, hi=3)]),
    ex("int_add_mul_sub", lambda a, b: a * 3 + b - a * b, ints((40, 7), (7,), lo=-300, hi=300)),
    ex("int_idiv_mod", lambda a, b: a // b + a % b, lambda r: [i32(r, 301), i32(r, 301, lo=1, hi=50)]),
    ex("int_bitwise", lambda a, b: (a & b) ^ (a | 5), ints((129,), (129,))),
    ex("int_shift", lambda a: (a << 3) + (a >> 2), ints((129,), lo=0, hi=1 << 20)),
    # -- reductions
    Case("sum_all", lambda x: x.sum(), one(4099, lo=0, hi=1), rtol=4099 * EPS32),
    Case("sum_axis0", lambda x: x.sum(axis=0), one(48, 75), atol=lambda a: 48 * EPS32 * float(np.abs(a[0]).sum(0).max())),
    Case("sum_axes12_keepdim", lambda x: x.sum(axis=(1, 2), keepdim=True), one(5, 12, 13),
         atol=lambda a: 156 * EPS32 * float(np.abs(a[0]).sum((1, 2)).max())),
    ex("max_axis1", lambda x: x.max(axis=1), one(37, 53)),
    ex("min_axis0", lambda x: x.min(axis=0), one(37, 53)),
    Case("mean_axis_neg1", lambda x: x.mean(axis=-1), one(16, 200), atol=lambda a: 200 * EPS32 * float(np.abs(a[0]).mean(-1).max()) * 2),
    Case("var_std", lambda x: x.var(axis=1) + x.std(axis=0).sum(), one(20, 30), rtol=1e-5, atol=1e-5),
    ex("int_sum", lambda x: x.sum(axis=1), ints((33, 100))),
    # -- matmul / conv
    Case("matmul", lambda a, b: a @ b, two((45, 70), (70, 23)),
         atol=lambda a: 70 * EPS32 * float((np.abs(a[0]) @ np.abs(a[1])).max())),
    Case("batched_matmul", lambda a, b: a @ b, two((3, 9, 16), (3, 16, 5)),
         atol=lambda a: 16 * EPS32 * float((np.abs(a[0]) @ np.abs(a[1])).max())),
    Case("conv2d_stride_pad", lambda x, w: x.conv2d(w, stride=2, padding=1), two((2, 3, 15, 13), (6, 3, 3, 3)), atol=27 * EPS32 * 27 * 4),
    Case("conv2d_groups", lambda x, w: x.conv2d(w, groups=2, padding=1), two((1, 4, 9, 9), (6, 2, 3, 3)), atol=18 * EPS32 * 18 * 4),
    Case("avg_pool2d", lambda x: x.avg_pool2d(kernel_size=(2, 2)), one(2, 3, 10, 10), atol=4 * EPS32 * 4 * 2),
    ex("max_pool2d", lambda x: x.max_pool2d(kernel_size=(3, 3), stride=2), one(2, 3, 11, 11)),
    # -- movement
    ex("reshape", lambda x: (x.reshape(6, 35) + 1).reshape(210), one(5, 6, 7)),
    ex("permute", lambda x: x.permute(2, 0, 1).contiguous(), one(5, 6, 7)),
    ex("pad", lambda x: x.pad(((1, 2), (0, 3))), one(5, 6)),
    ex("shrink", lambda x: x.shrink(((1, 4), (2, 6))).contiguous(), one(5, 9)),
    ex("flip", lambda x: x.flip(0, 1), one(5, 9)),
    ex("expand", lambda x: x.reshape(1, 9).expand(4, 9).contiguous(), one(9)),
    ex("cat", lambda a, b: a.cat(b, dim=1), two((4, 3), (4, 5))),
    ex("stack", lambda a, b: Tensor.stack(a, b, dim=0), two((4, 3), (4, 3))),
    ex("repeat_transpose", lambda x: x.repeat(2, 3).T.contiguous(), one(3, 4)),
    ex("gather", lambda x, i: x.gather(1, i), lambda r: [f32(r, 6, 10), r.integers(0, 10, size=(6, 4), dtype=np.int32)]),
    ex("slice_step", lambda x: x[1::2, ::-3].contiguous(), one(11, 13)),
    ex("index_by_tensor", lambda x, i: x[i], lambda r: [f32(r, 12, 5), r.integers(0, 12, size=(7,), dtype=np.int32)]),
    # -- casts
    ex("f32_to_i32", lambda x: x.cast(dtypes.int32), one(300, lo=-1e6, hi=1e6)),
    ex("i32_to_f32", lambda x: x.cast(dtypes.float32), ints((300,), lo=-(1 << 24), hi=1 << 24)),
    ex("f32_to_u8", lambda x: x.cast(dtypes.uint8), one(300, lo=0, hi=255)),
    ex("i32_to_i8_to_i32", lambda x: x.cast(dtypes.int8).cast(dtypes.int32), ints((300,), lo=-128, hi=128)),
    ex("bool_to_f32", lambda a, b: (a < b).cast(dtypes.float32), two((50,), (50,))),
    ex("i32_to_i64_mul", lambda x: x.cast(dtypes.int64) * (1 << 20), ints((64,), lo=-(1 << 20), hi=1 << 20)),
    ex("bitcast_f32_u32", lambda x: x.bitcast(dtypes.uint32), one(64)),
    # -- where / comparisons
    ex("where_cmp", lambda a, b: (a > b).where(a, b * 2) + (a == a.round()).where(1.0, 0.0), two((9, 17), (9, 17))),
    ex("cmp_int", lambda a, b: ((a < b).cast(dtypes.int32) + (a != b).cast(dtypes.int32) * 2), ints((200,), (200,), lo=-5, hi=5)),
    # -- composites
    tr("softmax", lambda x: x.softmax(axis=-1), one(19, 130, lo=-8, hi=8), rtol=1e-5, atol=1e-9),
    tr("log_softmax", lambda x: x.log_softmax(axis=1), one(7, 50, lo=-8, hi=8), rtol=1e-5, atol=1e-5),
    Case("layernorm", lambda x, w, b: x.layernorm(axis=-1) * w + b, lambda r: [f32(r, 12, 64), f32(r, 64), f32(r, 64)], rtol=1e-5, atol=2e-5),
    Case("cumsum", lambda x: x.cumsum(axis=1), one(6, 70), atol=lambda a: 70 * EPS32 * float(np.abs(a[0]).sum(1).max())),
    ex("int_cumsum", lambda x: x.cumsum(axis=0), ints((90, 3))),
    ex("argmax_argmin", lambda x: x.argmax(axis=1) * 100 + x.argmin(axis=0).sum(), one(23, 41)),
]


def run(device: str, case: Case, arrays: list[np.ndarray]) -> np.ndarray:
    return case.fn(*[Tensor(a, device=device) for a in arrays]).numpy()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_matches_cpu(case: Case):
    arrays = case.make(np.random.default_rng(sum(map(ord, case.name))))
    cpu = run("CPU", case, arrays)
    hex_ = run("HEXRPC", case, arrays)
    assert hex_.shape == cpu.shape and hex_.dtype == cpu.dtype, (hex_.shape, hex_.dtype, cpu.shape, cpu.dtype)
    if case.exact:
        np.testing.assert_array_equal(hex_, cpu)
    else:
        atol = case.atol(arrays) if callable(case.atol) else case.atol
        np.testing.assert_allclose(hex_, cpu, rtol=case.rtol, atol=atol)


def test_cases_cover_the_op_kinds():
    """At least 40 comparisons, and none of them a constant: each case's CPU result depends on
    its inputs (a case whose output did not change with the inputs could not catch a wrong
    kernel)."""
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)
    for case in CASES:
        a = run("CPU", case, case.make(np.random.default_rng(1)))
        b = run("CPU", case, case.make(np.random.default_rng(2)))
        assert a.shape != b.shape or not np.array_equal(a, b), case.name
