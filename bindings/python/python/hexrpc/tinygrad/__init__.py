"""A ``HEXRPC`` device for tinygrad 0.14: tinygrad's DSP kernels run through hexrpc.

After ``import hexrpc.tinygrad``, ``Device["HEXRPC"]`` and ``Tensor(..., device="HEXRPC")`` work.

What it registers with tinygrad (at import, in the running process; no file of tinygrad's is
changed)
    * the device: ``tinygrad.runtime.ops_hexrpc`` (below);
    * the kernel buffer limit: ``DEVICE_MAX_BUFS["HEXRPC"] = 15`` in
      ``tinygrad.schedule.rangeify`` (:data:`~hexrpc.tinygrad.kernels.MAX_LAUNCH_BUFFERS`, the
      launch ABI's ``MAX_BUFFERS``; :func:`~hexrpc.tinygrad.kernels.register_buffer_limit`), and
      the same for ``HEXRPC:n`` when that device opens (tinygrad looks a single device's kernels
      up by the whole name). tinygrad 0.14 splits a kernel that would use more buffers (YOLOv8's
      head concatenates 19) only for the devices in that dict, or for every device when
      ``MAX_KERNEL_BUFFERS`` is set (which still wins: tinygrad reads it first).

The DSP's code generation
    tinygrad gates its DSP code generation on ``renderer.target.device == "DSP"`` (upcasts by
    128, loads grouped up to 128 lanes, upcasts above 16), so :class:`HEXRPCRenderer`'s target
    names the device ``"DSP"``: HEXRPC's kernels are the kernels tinygrad renders for its own DSP
    device. While BEAM search is on (``BEAM``, ``JITBEAM``), the target is HEXRPC's own, because
    the search allocates and times its candidates on the target's device (see
    :class:`HEXRPCRenderer`).

How tinygrad finds it
    tinygrad 0.14 looks a device up by importing ``tinygrad.runtime.ops_<name>`` and taking the
    member named ``<NAME>Device`` (``tinygrad/device.py``, ``_Device.get_class``). Importing this
    package registers it in ``sys.modules`` under ``tinygrad.runtime.ops_hexrpc`` (and as the
    attribute ``ops_hexrpc`` of the ``tinygrad.runtime`` package), so the lookup finds
    :class:`HEXRPCDevice`. Nothing is written into tinygrad's installation; the registration lasts
    for the process (a child process that unpickles one of these classes imports its module, and
    with it this package, which registers it there too).

Where it runs (read when the device is first opened)
    ``HEXRPC_BENCH=1``
        hexrpc's bench with the executor: the simulated ION + adsprpc kernel, and the generated
        entries and tinygrad's kernels compiled for Hexagon and run under qemu-hexagon. Needs
        clang-19, ld.lld-19 and qemu-hexagon. Timings are *simulated* (the bench's cost model),
        never device figures. The bench ends a DSP call that runs longer than its per-call limit
        (a DSP restart): 10 s by default, ``HEXRPC_BENCH_CALL_LIMIT_MS`` or
        :func:`set_bench_call_limit` (before the first device opens) to raise it. A whole
        ``TinyJit`` graph of a real model runs as one call, and under qemu-hexagon that can
        outlast 10 s (``python -m hexrpc.compare`` raises the limit itself).
    otherwise
        the device's ``/dev/ion`` and ``/dev/adsprpc-smd`` with the board ``HEXRPC_BOARD``
        (``comma-three``, ``msm-android``); unset, the board whose device-tree model matches
        (as the ``hexrpc`` tool picks it), else ``comma-three``.

The pieces (one module each; every name is importable from ``hexrpc.tinygrad``)
    * :mod:`~hexrpc.tinygrad.kernels`: :class:`HEXRPCRenderer`, tinygrad's ``DSPRenderer`` (HVX
      vector types, 128-byte alignment attributes, no threads) for the kernel function; instead of
      tinygrad's v1 ``entry`` the source ends with a one-line record of the kernel's name and
      hexrpc signature. hexrpc generates its v2 entry from that record when the library is built,
      so views at non-zero offsets (which tinygrad's memory planner hands out) are mapped
      correctly. :class:`HEXRPCCompiler`: ``hexrpc build-lib`` with tinygrad's DSP flags
      (hexagonv65, HVX 128 B, ``-O2 -Wall -Werror -fno-stack-protector``); results cached by
      tinygrad's disk cache under a key that names the hexrpc tool binary's digest.
    * :mod:`~hexrpc.tinygrad.memory`: :class:`HEXRPCAllocator`, sub-allocations of a few arenas
      (:class:`ArenaPool`, leases of ``HEXRPC_ARENA_MIB`` MiB) per tinygrad buffer; ``_offset``
      gives a view (lease, offset, length) of the same lease; copies go through the lease's host
      mapping.
    * :mod:`~hexrpc.tinygrad.session`: the process's one session, its open libraries
      (:class:`LibraryCache`) and the recovery policy (:class:`DSPRestartError`).
    * :mod:`~hexrpc.tinygrad.device`: :class:`HEXRPCProgram`, one hexrpc launch (one FastRPC call)
      per kernel call, returning the DSP time in seconds; :class:`HEXRPCDevice`.
    * :mod:`~hexrpc.tinygrad.graph`: :class:`HEXRPCGraph` runs the kernels of a ``TinyJit``
      capture as one batch, one FastRPC call per jit run (``HEXRPC_GRAPH=0``: kernel by kernel).
    * :mod:`~hexrpc.tinygrad.stats`: :class:`DeviceStats`, what a device did.
    * :mod:`~hexrpc.tinygrad.pickling`: a ``TinyJit`` pickled on HEXRPC carries its graphs'
      kernel-table libraries, so loading it needs no compiler.
    * :mod:`~hexrpc.tinygrad.capture`: what the device launched (for :mod:`hexrpc.export`).

One session per process
    Every ``HEXRPC:n`` device of a process runs on one hexrpc session: the FastRPC drivers give a
    host process one DSP process, so a second session could not have its own. Buffers of
    ``HEXRPC:0`` and ``HEXRPC:1`` are leases of that session, and a jit or a graph may mix them.
    Each device keeps its own :class:`DeviceStats`.

Recovery without the caller
    After a DSP restart (a kernel that faulted, the bench's per-call limit
    ``HEXRPC_BENCH_CALL_LIMIT_MS``) or a missed deadline (``HEXRPC_DEADLINE_MS``), the device
    recovers the session by itself: the kernel whose call failed raises :class:`DSPRestartError`
    (saying why, when hexrpc knows), the session is rebuilt and its libraries reopened, and the
    next op runs. A launch that hexrpc refused without sending it, because the session already
    needed recovery (a restart noticed elsewhere), is sent again once the session is recovered,
    without failing. At most :data:`AUTO_RECOVERIES` recoveries per :data:`AUTO_RECOVERY_WINDOW_S`
    seconds: past that the error says so and ``Device["HEXRPC"].recover()`` is left to the
    caller. Each recovery is logged (logger ``hexrpc.tinygrad``).

Memory shared with the DSP changes under the host while a kernel runs; tinygrad only reads a
buffer after the launch that writes it has returned (every launch here is synchronous).
"""

from __future__ import annotations

import sys

# Every public name of the single module this package was split from stays importable from here
# (``hexrpc.tinygrad.X``); ``__all__`` is what it was (``X as X``: a name re-exported beside it).
from .device import HEXRPCDevice, HEXRPCProgram, signature_of
from .graph import BATCH_MAX_KERNELS as BATCH_MAX_KERNELS
from .graph import BATCH_MAX_LAUNCHES as BATCH_MAX_LAUNCHES
from .graph import BATCH_MAX_LEASES as BATCH_MAX_LEASES
from .graph import BATCH_MAX_RECORD_BYTES as BATCH_MAX_RECORD_BYTES
from .graph import INPUT_CACHE as INPUT_CACHE
from .graph import HEXRPCGraph
from .graph import batch_record_bytes as batch_record_bytes
from .graph import chunk_calls as chunk_calls
from .graph import rename_kernel as rename_kernel
from .kernels import MAX_LAUNCH_BUFFERS as MAX_LAUNCH_BUFFERS
from .kernels import TINYGRAD_CFLAGS as TINYGRAD_CFLAGS
from .kernels import beam_search_on as beam_search_on
from .kernels import HEXRPCBuildWarning as HEXRPCBuildWarning
from .kernels import HEXRPCCompiler, HEXRPCRenderer, KernelRecord, build_library, hexrpc_signature
from .kernels import build_batch_library as build_batch_library
from .kernels import register_buffer_limit as register_buffer_limit
from .kernels import hexrpc_cli as hexrpc_cli
from .kernels import scalar_kind as scalar_kind
from .memory import ARENA_BYTES as ARENA_BYTES
from .memory import ArenaPool as ArenaPool
from .memory import HEXRPCAllocator, HEXRPCBuffer
from .session import AUTO_RECOVERIES, AUTO_RECOVERY_WINDOW_S, DSPRestartError
from .session import LibraryCache as LibraryCache
from .session import device_board as device_board
from .session import on_bench as on_bench
from .session import open_session as open_session
from .session import restart_reason as restart_reason
from .session import set_bench_call_limit as set_bench_call_limit
from .stats import DeviceStats

__all__ = [
    "AUTO_RECOVERIES",
    "AUTO_RECOVERY_WINDOW_S",
    "DSPRestartError",
    "DeviceStats",
    "HEXRPCAllocator",
    "HEXRPCBuffer",
    "HEXRPCBuildWarning",
    "HEXRPCCompiler",
    "HEXRPCDevice",
    "HEXRPCGraph",
    "HEXRPCProgram",
    "HEXRPCRenderer",
    "KernelRecord",
    "build_library",
    "hexrpc_signature",
    "signature_of",
]

# -------------------------------------------------------------------------------------------------
# Registration


def _register() -> None:
    import tinygrad.runtime

    name = "tinygrad.runtime.ops_hexrpc"
    this = sys.modules[__name__]
    existing = sys.modules.get(name)
    if existing is not None and existing is not this:
        raise ImportError(f"{name} is already provided by {existing!r}")
    sys.modules[name] = this
    tinygrad.runtime.ops_hexrpc = this  # type: ignore[attr-defined]
    register_buffer_limit("HEXRPC")


_register()

from .pickling import register as _register_pickling  # noqa: E402

_register_pickling()
