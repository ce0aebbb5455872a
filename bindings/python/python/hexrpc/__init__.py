"""hexrpc: run compiled kernels on the Hexagon CDSP through FastRPC.

    import numpy as np
    import hexrpc

    with hexrpc.Session.bench() as sess:              # on a device: hexrpc.Session.open(board="comma-three")
        lease = sess.alloc(64 * 1024)
        x = np.frombuffer(lease, dtype=np.float32)    # zero-copy view of the ION buffer
        x[1024:1280] = np.arange(256, dtype=np.float32)
        lib = sess.open_library(hexrpc.bench_model_image("scale_f32"), signature="buf,buf,f32")
        dsp_us = lib.launch([lease.view(4096, 1024), lease.view(32768, 1024)], [2.0])
        assert (x[8192:8448] == 2.0 * x[1024:1280]).all()
        del x                                         # release the exported buffer before closing

Closing: ``Session.close()`` (and leaving its ``with`` block) closes every library, lease and
arena made from the session and ends its DSP process and listener thread before it returns.
While a buffer of one of its leases is exported (a memoryview, a numpy array, ``hexrpc.array``),
it raises ``BufferError`` naming how many exports are alive and closes nothing: the session is
still usable; release them (``del``, ``memoryview.release()``) and close again. (Leaving the
``with`` block by an exception keeps that exception and leaves the session open, with a
``ResourceWarning``.) After close, every export of its leases and views raises ``BufferError``.

Arenas: ``sess.arena(16 << 20)`` is one ION buffer carved into 128-byte aligned sub-allocations;
``arena.alloc(n)`` returns a :class:`Lease` of ``n`` bytes (buffer protocol, views relative to it,
launches, batches) that the DSP sees as a range of the arena's lease, so any number of them
count as one of the 15 leases a batch (one FastRPC call) can carry. Closing the sub-allocation
gives its range back once no call uses it.

Errors are subclasses of ``hexrpc.Error`` and carry ``stage``, ``cause`` and ``status``.

Logs: hexrpc's Rust log records (why the bench ended a DSP process, why a recovery ran, what
the reverse file service refused) go to Python's ``logging``, on the logger ``hexrpc`` and its
children (``hexrpc.bench.executor``, ``hexrpc.hal.session``, ...). ``HEXRPC_LOG`` (``off``,
``error``, ``warn``, ``info``, ``debug``, ``trace``; default ``info``) or
:func:`set_log_level` choose which records are made; ``logging``'s configuration what is shown.
Records arrive before the exception they explain, and otherwise within a fraction of a second
(:func:`flush_logs` moves them at once).
"""

import threading as _threading
import time as _time

from ._hexrpc import (
    ARENA_ALIGN,
    ARENA_BLOCKS,
    BATCH_STACK_BYTES,
    MAX_BATCH_KERNELS,
    MAX_BATCH_LAUNCHES,
    MAX_BATCH_LEASES,
    MAX_BATCH_RECORD_BYTES,
    Arena,
    Batch,
    DspError,
    Error,
    Failed,
    ForkedSession,
    HandleError,
    InvalidArgument,
    LaunchRefused,
    Lease,
    Library,
    NeedsRecovery,
    Session,
    Unavailable,
    MAX_LIBRARIES,
    View,
    __version__,
    bench_build_library,
    build_library,
    bench_kernel_image,
    bench_counters,
    take_exec_counts,
    bench_model_image,
    bench_sample_model,
    bench_shell,
    bench_raw_ioctl_ns,
    detect_board,
    flush_logs,
    set_log_level,
)
from .model import KernelTime, Model, Profile, RunReport, Tensor

__all__ = [
    "ARENA_ALIGN",
    "ARENA_BLOCKS",
    "BATCH_STACK_BYTES",
    "MAX_BATCH_KERNELS",
    "MAX_BATCH_LAUNCHES",
    "MAX_BATCH_LEASES",
    "MAX_BATCH_RECORD_BYTES",
    "Arena",
    "Batch",
    "DspError",
    "Error",
    "Failed",
    "ForkedSession",
    "HandleError",
    "InvalidArgument",
    "LaunchRefused",
    "Lease",
    "Library",
    "NeedsRecovery",
    "Session",
    "Unavailable",
    "MAX_LIBRARIES",
    "View",
    "__version__",
    "bench_build_library",
    "build_library",
    "bench_kernel_image",
    "bench_counters",
    "take_exec_counts",
    "bench_model_image",
    "bench_sample_model",
    "bench_shell",
    "bench_raw_ioctl_ns",
    "KernelTime",
    "Model",
    "Profile",
    "RunReport",
    "Tensor",
    "array",
    "detect_board",
    "flush_logs",
    "set_log_level",
]


def array(buf: "Lease | View", dtype: object = "uint8", shape: "int | tuple[int, ...] | None" = None):
    """A numpy array over the bytes of ``buf`` (a :class:`Lease`, all of it, or a :class:`View`,
    its range), zero-copy: writes through it are the DSP's input, and after a launch has returned
    it shows the DSP's output. The array of a read-only import (``Session.import_fd``,
    ``Lease.writable`` False) is read-only. ``dtype``: any numpy dtype; ``shape``: default one dimension of
    as many elements as fit (the byte length must be a multiple of the item size).

    Like ``numpy.frombuffer(buf, dtype).reshape(shape)`` (which works too): the array holds an
    export of the lease, so closing the lease releases its memory only when the array is gone,
    and ``Session.close()`` raises ``BufferError`` while it is alive. Raises ``BufferError``
    for a closed lease or a lease of a closed session.
    """
    import numpy as np

    a = np.frombuffer(buf, dtype=dtype)
    return a if shape is None else a.reshape(shape)


def _pump_logs(period_s: float = 0.2) -> None:
    """Moves Rust log records made on other threads into ``logging`` a few times a second (a
    daemon thread; it sleeps in Python, so interpreter shutdown stops it cleanly)."""
    while True:
        _time.sleep(period_s)
        flush_logs()


_threading.Thread(target=_pump_logs, name="hexrpc-logs", daemon=True).start()
