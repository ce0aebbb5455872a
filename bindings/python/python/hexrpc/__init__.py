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

Errors are subclasses of ``hexrpc.Error`` and carry ``stage``, ``cause`` and ``status``.
"""

from ._hexrpc import (
    Batch,
    DspError,
    Error,
    Failed,
    HandleError,
    InvalidArgument,
    LaunchRefused,
    Lease,
    Library,
    NeedsRecovery,
    Session,
    Unavailable,
    View,
    __version__,
    bench_build_library,
    bench_kernel_image,
    bench_counters,
    bench_model_image,
    detect_board,
)

__all__ = [
    "Batch",
    "DspError",
    "Error",
    "Failed",
    "HandleError",
    "InvalidArgument",
    "LaunchRefused",
    "Lease",
    "Library",
    "NeedsRecovery",
    "Session",
    "Unavailable",
    "View",
    "__version__",
    "bench_build_library",
    "bench_kernel_image",
    "bench_counters",
    "bench_model_image",
    "detect_board",
]
