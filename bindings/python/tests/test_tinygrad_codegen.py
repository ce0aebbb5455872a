"""What tinygrad is told about HEXRPC: the DSP's code generation, and the launch's buffer limit.

* Code generation: tinygrad 0.14 gives a kernel its DSP code generation (upcasts by 128, loads
  grouped up to 128 lanes, upcasts above 16) when the renderer target's device is ``"DSP"``.
  Every kernel here is rendered twice, by ``HEXRPCRenderer`` and by tinygrad's own
  ``DSPRenderer`` with tinygrad's DSP target, and the kernel functions must be the same text
  but for the alignment tinygrad's DSP promises and HEXRPC does not (``align_value(128)`` on
  buffers, vector types aligned to their size): a buffer view at any offset computes what numpy
  does (an aligned HVX load at an unaligned address reads the wrong bytes);
  the elementwise kernel must use 128-lane vectors (a generic C backend groups 4). Nothing is
  compiled for that (a compiler that returns no binary): the sources are compared.
* While BEAM search is on, the target names HEXRPC (tinygrad's search allocates and times its
  candidates on the target's device): BEAM runs on HEXRPC and never opens tinygrad's DSP
  device.
* Buffers: a hexrpc launch carries at most 15 buffers (the launch ABI's ``MAX_BUFFERS``; a
  16-buffer signature is refused), and tinygrad splits a kernel that would use more, with no
  ``MAX_KERNEL_BUFFERS`` set: a 20-way concat is scheduled as kernels of at most 15 buffers each
  and its result is the concatenation.

* A kernel that build-lib compiles without HVX (clang-19 cannot select HVX instructions for it)
  is a ``HEXRPCBuildWarning`` naming it, though build-lib runs with ``-q``; the library still
  builds, and the warning can be made an error.

The numerics of float kernels under the DSP's code generation are what the rest of the suite
checks (test_tinygrad.py, test_tinygrad_ops.py, test_export.py, test_compare.py).
"""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from tinygrad_bench import require_executor

tinygrad = require_executor()

import hexrpc  # noqa: E402
import hexrpc.tinygrad as hexrpc_tinygrad  # noqa: E402  (registers the device)
from tinygrad import Device, Tensor  # noqa: E402
from tinygrad.codegen import to_program  # noqa: E402
from tinygrad.device import Compiler  # noqa: E402
from tinygrad.helpers import Context, Target  # noqa: E402
from tinygrad.runtime.ops_dsp import DSPRenderer  # noqa: E402
from tinygrad.schedule import rangeify  # noqa: E402
from tinygrad.uop.ops import Ops  # noqa: E402


class _SourceOnly(Compiler):
    """A compiler that builds nothing: the renderers' sources are what is compared."""

    def compile(self, src: str) -> bytes:
        return b""


def _renderers():
    hexrpc_ren = hexrpc_tinygrad.HEXRPCRenderer(Target(device="HEXRPC"))
    dsp_ren = DSPRenderer(Target(device="DSP"))
    hexrpc_ren.compiler = dsp_ren.compiler = _SourceOnly()
    return hexrpc_ren, dsp_ren


def _kernel_asts(t: Tensor):
    return [call.src[0] for call in t.schedule_linear().src if call.src[0].op is Ops.SINK]


def _kernel_part(src: str) -> tuple[list[str], str]:
    """(vector typedefs, the kernel function) of a rendered source: without DSPRenderer's v1
    entry and its declarations, and without HEXRPCRenderer's record."""
    lines = src.splitlines()
    typedefs = [ln for ln in lines if ln.startswith("typedef ") and "ext_vector_type" in ln]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("__attribute__((noinline)) void"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith(("int entry(", "/* hexrpc-kernel:")))
    return typedefs, "\n".join(lines[start:end])


def _sources(t: Tensor) -> list[tuple[str, str]]:
    hexrpc_ren, dsp_ren = _renderers()
    return [(to_program(ast, hexrpc_ren).src[2].arg, to_program(ast, dsp_ren).src[2].arg) for ast in _kernel_asts(t)]


CASES = {
    "elementwise": lambda: Tensor.empty(4096, device="HEXRPC") * 2 + 1,
    "relu-sum per row": lambda: Tensor.empty(64, 1024, device="HEXRPC").relu().sum(axis=1),
    "matmul": lambda: Tensor.empty(64, 128, device="HEXRPC") @ Tensor.empty(128, 256, device="HEXRPC"),
    "conv2d": lambda: Tensor.empty(1, 8, 32, 32, device="HEXRPC").conv2d(Tensor.empty(16, 8, 3, 3, device="HEXRPC"), padding=1),
}


_C_SIZES = {"float": 4, "double": 8, "__fp16": 2, "half": 2, "signed char": 1, "unsigned char": 1, "char": 1, "_Bool": 1, "bool": 1,
            "short": 2, "unsigned short": 2, "int": 4, "unsigned int": 4, "long long": 8, "unsigned long long": 8}


def _without_alignment_promises(typedefs: list[str], body: str) -> tuple[list[str], str]:
    """DSPRenderer's kernel as HEXRPCRenderer renders it: no ``align_value(128)`` on buffers,
    vector types aligned to their element (HEXRPCRenderer's class documentation)."""
    def element_aligned(line: str) -> str:
        m = re.fullmatch(r"typedef (.+?) (\w+) __attribute__\(\(aligned\((\d+)\),ext_vector_type\((\d+)\)\)\);", line)
        assert m, line
        return f"typedef {m[1]} {m[2]} __attribute__((aligned({_C_SIZES[m[1]]}),ext_vector_type({m[4]})));"

    return [element_aligned(t) for t in typedefs], body.replace(" restrict __attribute__((align_value(128)))", " restrict")


@pytest.mark.parametrize("case", list(CASES))
def test_hexrpc_renders_the_kernels_tinygrad_renders_for_its_dsp(case):
    sources = _sources(CASES[case]())
    assert sources
    for ours, dsp in sources:
        assert "align_value" in dsp and "align_value" not in ours
        assert _kernel_part(ours) == _without_alignment_promises(*_kernel_part(dsp)), f"HEXRPC:\n{ours}\n\nDSP:\n{dsp}"
        assert ours.rstrip().endswith("*/") and "int entry(" not in ours


def test_elementwise_kernels_get_128_lane_vectors():
    """The DSP heuristics' mark: an elementwise kernel of 4096 floats upcast by 128 and loaded
    and stored as one 128-lane (512-byte) vector per iteration; a generic C backend upcasts by
    4 and uses float4."""
    ((ours, _),) = _sources(CASES["elementwise"]())
    typedefs, body = _kernel_part(ours)
    assert typedefs == ["typedef float float128 __attribute__((aligned(4),ext_vector_type(128)));"], ours
    assert "*((float128*)" in body and "float4" not in ours, ours


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


def test_the_target_names_dsp_and_hexrpc_while_beam_search_is_on():
    ren = Device["HEXRPC"].renderer
    assert type(ren) is hexrpc_tinygrad.HEXRPCRenderer
    assert ren.target.device == "DSP" and ren.hexrpc_target.device == "HEXRPC"
    assert ren.target.arch == ren.hexrpc_target.arch
    with Context(BEAM=1):
        assert ren.target.device == "HEXRPC"
    assert ren.target.device == "DSP"
    again = pickle.loads(pickle.dumps(ren))
    assert type(again) is hexrpc_tinygrad.HEXRPCRenderer and again.hexrpc_target == ren.hexrpc_target
    assert again.target.device == "DSP"


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
    sess = Device["HEXRPC"].session
    n = hexrpc_tinygrad.MAX_LAUNCH_BUFFERS
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
