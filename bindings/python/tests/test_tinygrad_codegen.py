"""What tinygrad is told about HEXRPC: its renderer's target, alignment, and the launch's buffer limit.

* The target names HEXRPC, not "DSP": tinygrad 0.14's DSP code generation (upcasts by 128,
  128-lane loads) upcasts comparisons into 128-lane ``bool`` vectors, which clang packs one bit a
  lane, and every comparison came out wrong; comparisons of int8, uint32 and float32 must compute
  what numpy does. BEAM runs on HEXRPC and never opens tinygrad's DSP device.
* Alignment: HEXRPC renders no alignment promise (no ``align_value(128)`` on buffers, vector
  types aligned to their element), so a kernel on a buffer view at any byte offset computes what
  numpy does.
* Buffers: a hexrpc launch carries at most 15 buffers (the launch ABI's ``MAX_BUFFERS``; a
  16-buffer signature is refused), and tinygrad splits a kernel that would use more, with no
  ``MAX_KERNEL_BUFFERS`` set: a 20-way concat is scheduled as kernels of at most 15 buffers each
  and its result is the concatenation.
* A kernel that build-lib compiles without HVX (clang-19 cannot select HVX instructions for it)
  is a ``HEXRPCBuildWarning`` naming it, though build-lib runs with ``-q``; the library still
  builds, and the warning can be made an error.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

from tinygrad_bench import require_executor

tinygrad = require_executor()

import hexrpc  # noqa: E402
import hexrpc.tinygrad as hexrpc_tinygrad  # noqa: E402  (registers the device)
from tinygrad import Device, Tensor  # noqa: E402
from tinygrad.device import Compiler  # noqa: E402
from tinygrad.helpers import Context  # noqa: E402
from tinygrad.schedule import rangeify  # noqa: E402
from tinygrad.uop.ops import Ops  # noqa: E402


class _SourceOnly(Compiler):
    """A compiler that builds nothing: the renderers' sources are what is compared."""

    def compile(self, src: str) -> bytes:
        return b""


def _kernel_asts(t: Tensor):
    return [call.src[0] for call in t.schedule_linear().src if call.src[0].op is Ops.SINK]


@pytest.mark.parametrize("dtype", [np.int8, np.uint32, np.float32])
def test_comparisons_compute_what_numpy_does(dtype):
    """Comparisons give bool tensors. tinygrad 0.14's DSP code generation upcasts them into
    128-lane ``bool`` vectors, and clang's ``ext_vector_type`` of ``bool`` is packed one bit a
    lane, so a stored bool vector is not one byte a lane: with HEXRPC's target naming the device
    "DSP", every comparison here came out wrong (the ONNX node suite's equal, greater_equal and
    less_equal cases too). HEXRPC keeps its own target (HEXRPCRenderer's documentation)."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 5, (3, 4, 5)).astype(dtype)
    b = rng.integers(0, 5, (3, 4, 5)).astype(dtype)
    x, y = Tensor(a, device="HEXRPC"), Tensor(b, device="HEXRPC")
    for name, got, want in (("==", x == y, a == b), (">=", x >= y, a >= b), (">", x > y, a > b), ("<", x < y, a < b)):
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{dtype.__name__} {name}")


def test_the_renderer_target_is_hexrpcs():
    ren = Device["HEXRPC"].renderer
    assert type(ren) is hexrpc_tinygrad.HEXRPCRenderer
    assert ren.target.device == "HEXRPC" and ren.target == ren.hexrpc_target
    again = pickle.loads(pickle.dumps(ren))
    assert type(again) is hexrpc_tinygrad.HEXRPCRenderer and again.target == ren.target


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("start", [1, 3, 33, 128])
def test_kernels_on_a_buffer_view_at_any_offset_compute_what_numpy_does(dtype, start):
    """A realized slice of a realized tensor is a buffer view at the slice's byte offset (tinygrad
    ``Buffer.view``, the allocator's ``_offset``), which need not be 128-byte aligned: kernels that
    read it with 128-lane vectors must not assume it is (an HVX aligned load ignores the low
    address bits, so it would read the wrong bytes without a fault)."""
    a = (np.arange(8192) * 7 % 251).astype(dtype)
    t = Tensor(a, device="HEXRPC").realize()
    view = t[start : start + 4096].realize()
    got = (view + 1).numpy()
    want = a[start : start + 4096] + dtype(1)
    assert np.array_equal(got, want), f"offset {start * a.itemsize} bytes: first wrong at {np.flatnonzero(got != want)[:5]}"


def test_beam_search_times_its_candidates_on_hexrpc():
    """BEAM allocates its test buffers and times its candidates on the renderer target's device:
    HEXRPC's, never tinygrad's own DSP device (its own ION and FastRPC session)."""
    dev = Device["HEXRPC"]
    x = np.arange(300, dtype=np.float32)
    before = dev.stats.launches
    with Context(BEAM=1, IGNORE_BEAM_CACHE=1):
        out = (Tensor(x, device="HEXRPC") * 3 - 1).sum().numpy()
    assert out == (x * 3 - 1).sum()
    # The result's kernel and BEAM's timed candidates ran on HEXRPC.
    assert dev.stats.launches > before + 1
    assert not any(d.split(":")[0] == "DSP" for d in Device._opened_devices), Device._opened_devices


def test_a_launch_carries_at_most_15_buffers():
    assert hexrpc_tinygrad.MAX_LAUNCH_BUFFERS == 15
    assert rangeify.DEVICE_MAX_BUFS["HEXRPC"] == hexrpc_tinygrad.MAX_LAUNCH_BUFFERS
    n = hexrpc_tinygrad.MAX_LAUNCH_BUFFERS
    # A session of its own: the device's, after the rest of the suite, may hold a full table of
    # libraries (refused before any signature check).
    with hexrpc.Session.bench() as sess:
        with pytest.raises(hexrpc.InvalidArgument, match=f"more than {n} buffers"):
            sess.open_library(b"\x7fELF", signature=",".join(["buf"] * (n + 1)), abi="v2", name="sixteen")
        # 15 pass the signature check; the image (4 bytes) is what the DSP then refuses.
        with pytest.raises(hexrpc.DspError, match="ELF header"):
            sess.open_library(b"\x7fELF", signature=",".join(["buf"] * n), abi="v2", name="fifteen")


@pytest.mark.parametrize("device", ["HEXRPC", "HEXRPC:1"])
def test_a_20_way_concat_is_split_into_kernels_of_at_most_15_buffers(device, monkeypatch):
    monkeypatch.delenv("MAX_KERNEL_BUFFERS", raising=False)
    Device[device]
    parts = [np.full((4, 8), i, dtype=np.float32) for i in range(20)]
    lazy = Tensor.cat(*[Tensor.empty(4, 8, device=device) for _ in parts], dim=0) * 2
    counts = [len([u for u in ast.toposort() if u.op is Ops.PARAM and u.arg.slot >= 0]) for ast in _kernel_asts(lazy)]
    assert len(counts) >= 2 and max(counts) <= 15, counts
    if device == "HEXRPC":
        out = (Tensor.cat(*[Tensor(p, device=device) for p in parts], dim=0) * 2).numpy()
        np.testing.assert_array_equal(out, np.concatenate(parts) * 2)


# A kernel clang-19 cannot build with HVX (build-lib's own test uses the same source): the store of
# a 32-lane _Bool vector (an HVX predicate) fails instruction selection; without HVX it compiles.
_NO_HVX_KERNEL = (Path(__file__).resolve().parents[3] / "tools" / "libbuild" / "tests" / "data" / "no_hvx.c").read_text()


def test_a_kernel_built_without_hvx_is_a_build_warning_naming_it():
    from hexrpc.tinygrad.kernels import KernelRecord, build_library

    rec = KernelRecord("below", "buf,buf,i32")
    with pytest.warns(hexrpc_tinygrad.HEXRPCBuildWarning, match=r"kernel below compiled without HVX") as got:
        image = build_library([(_NO_HVX_KERNEL + rec.render(), rec)])
    assert len(got) == 1 and "Cannot select" in str(got[0].message)
    assert image[:4] == b"\x7fELF"
    # An ordinary kernel: no warning; and the caller can make the warning an error.
    ok = KernelRecord("add1", "buf,i32")
    with warnings.catch_warnings():
        warnings.simplefilter("error", hexrpc_tinygrad.HEXRPCBuildWarning)
        build_library([("void add1(int *a, int n) { for (int i = 0; i < n; i++) a[i] += 1; }\n" + ok.render(), ok)])
        with pytest.raises(hexrpc_tinygrad.HEXRPCBuildWarning):
            build_library([(_NO_HVX_KERNEL + rec.render(), rec)])
