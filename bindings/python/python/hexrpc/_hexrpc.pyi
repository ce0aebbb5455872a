"""Type stubs of hexrpc's native module."""

import os
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Literal

__version__: str
MAX_LIBRARIES: int
ARENA_ALIGN: int
ARENA_BLOCKS: int
MAX_BATCH_LAUNCHES: int
MAX_BATCH_LEASES: int
MAX_BATCH_RECORD_BYTES: int
MAX_BATCH_KERNELS: int
BATCH_STACK_BYTES: int
"""The stack a thread needs for Batch.push and Batch.run (64 KiB, the interpreter's frames included)."""

class Error(Exception):
    """Base class of every hexrpc error."""

    stage: str
    """The stage that failed: "session-start", "alloc", "library-open", "launch-pack", "invoke", "recover", "handle", ..."""
    cause: str
    """The cause, readable."""
    status: str
    """The class: "handle", "invalid", "refused", "unavailable", "recoverable", "dsp", "failed"."""
    unsent: bool
    """True when the call was refused without being sent because the session needed recovery
    first: nothing reached the DSP, and the same call can be made again after ``recover()``."""

class HandleError(Error): ...
class InvalidArgument(Error): ...
class LaunchRefused(Error): ...
class Unavailable(Error): ...
class NeedsRecovery(Error): ...
class DspError(Error): ...
class Failed(Error): ...
class ForkedSession(Error):
    """The object belongs to a session the parent process opened before ``os.fork()`` (or a
    ``multiprocessing`` "fork" start): its DSP process is the parent's, so nothing was sent.
    Open a new session in the child. Closing the inherited one there releases only the child's
    copy and sends nothing."""

class Session:
    """A session: the DSP process, its channel, the ION device and the reverse file service (a
    listener thread) that answers the DSP. A context manager: leaving the ``with`` block closes
    it. After ``os.fork()`` the child's copy (and its libraries, leases, batches, models) raises
    ``ForkedSession`` on every use before anything is sent; closing it there sends nothing. Open
    a new session in the child."""

    @staticmethod
    def open(
        board: str | None = None, *, pm_qos: bool = True, power: Literal["off", "sustained", "burst"] = "sustained"
    ) -> Session: ...
    @staticmethod
    def bench(
        executor: bool = False,
        returning_launches: bool = False,
        call_limit_ms: int | None = None,
        *,
        pm_qos: bool = True,
        power: Literal["off", "sustained", "burst"] = "sustained",
    ) -> Session: ...
    @property
    def pm_qos_state(self) -> Literal["sent", "not-asked", "not-available", "refused"]: ...
    def alloc(self, size: int) -> Lease: ...
    def import_fd(self, fd: int, size: int, writable: bool = False) -> Lease:
        """The first ``size`` bytes of the dma-buf behind ``fd`` (another process's, received
        with ``SCM_RIGHTS``) as a lease used in place. ``fd`` stays the caller's (duplicated,
        never closed). Read-only unless ``writable``: the exports are read-only then. A number
        that is not open, not a dma-buf, ``size`` 0 or past the buffer: ``InvalidArgument``
        (stage "import"), before any FastRPC request."""
    def arena(self, size: int) -> Arena: ...
    def open_library(
        self,
        image: bytes | bytearray | str | os.PathLike[str],
        signature: str | None = None,
        abi: Literal["v1", "v2"] | None = None,
        name: str | None = None,
    ) -> Library: ...
    def recover(self) -> None: ...
    def restart_dsp(self) -> None: ...
    @property
    def healthy(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def last_restart(self) -> str | None: ...
    def close(self) -> None:
        """Closes every library, lease and arena made from the session, then the session: the DSP
        process and the listener thread have ended when it returns. Closing twice is allowed.

        Raises ``BufferError`` (naming how many) while buffers of the session's leases are
        exported: memoryviews, numpy arrays (:func:`hexrpc.array` too) of a :class:`Lease` or
        :class:`View`, also of a lease already closed. Nothing is closed then and the session
        stays usable: release the exports (``del`` the arrays, ``memoryview.release()``) and call
        ``close()`` again. After ``close()``, every new export (``memoryview(view)``,
        ``numpy.frombuffer(lease)``, ...) raises ``BufferError`` saying the session is closed."""
    def __enter__(self) -> Session: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        """``close()``. Leaving the block normally while buffers are exported raises its
        ``BufferError``; leaving it by an exception keeps that exception: the session is left
        open with a ``ResourceWarning`` naming the exports, to be closed once they are released."""

class Lease:
    """An ION buffer shared with the DSP, or an imported dma-buf (``Session.import_fd``);
    supports the buffer protocol (bytes, read-only for a read-only import: a writable request
    raises ``BufferError``). An
    export (memoryview, numpy array) keeps its memory mapped after ``close()``, and its session
    cannot close until the export is released (``Session.close`` raises ``BufferError``); no
    export can be made of a closed lease or of a lease of a closed session (``BufferError``)."""

    def view(self, offset: int, length: int) -> View: ...
    @property
    def size(self) -> int: ...
    @property
    def lease_id(self) -> int:
        """The id of the lease the DSP maps for it (its arena's, for a sub-allocation)."""
    @property
    def arena_offset(self) -> int:
        """Where it starts in the lease the DSP maps (its offset in its arena; 0 for its own)."""
    @property
    def in_arena(self) -> bool: ...
    @property
    def writable(self) -> bool:
        """False for a read-only import; its exports (and its views') are read-only."""
    @property
    def closed(self) -> bool: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def close(self) -> None: ...
    def __enter__(self) -> Lease: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool: ...

class Arena:
    """One ION buffer carved into 128-byte aligned sub-allocations (each a :class:`Lease`), all
    one lease for the DSP."""

    def alloc(self, size: int, align: int = 0) -> Lease: ...
    @property
    def size(self) -> int: ...
    @property
    def used(self) -> int: ...
    @property
    def free(self) -> int: ...
    @property
    def largest_free(self) -> int: ...
    @property
    def live(self) -> int: ...
    @property
    def lease_id(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def __len__(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Arena: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool: ...

class View:
    """``length`` bytes at ``offset`` of a lease; supports the buffer protocol (exactly those
    bytes, read-only for a read-only import), with its lease's rules: an export holds the lease's memory and keeps its session from
    closing (``Session.close`` raises ``BufferError``) until released; after the lease or its
    session is closed, exports raise ``BufferError``."""

    @property
    def offset(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def lease(self) -> Lease: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

class Library:
    def launch(
        self,
        views: Sequence[View | Lease],
        scalars: Iterable[int | float] | None = None,
        deadline_ms: int | None = None,
    ) -> int: ...
    @property
    def signature(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> Library: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool: ...

def bench_model_image(model: str) -> bytes: ...
def bench_kernel_image(kernel: str, signature: str, abi: Literal["v1", "v2"] = "v2") -> bytes: ...
def build_library(
    kernel_c: str | os.PathLike[str],
    signature: str,
    out: str | os.PathLike[str],
    abi: Literal["v1", "v2"] = "v2",
    kernel_name: str | None = None,
) -> os.PathLike[str]: ...

bench_build_library = build_library

def bench_shell() -> os.PathLike[str]: ...
def bench_raw_ioctl_ns(batches: int = 30, batch: int = 10000) -> tuple[float, float]: ...
def write_model(
    *,
    arch: int,
    source_name: str,
    source_digest: bytes,
    tinygrad_version: str,
    libraries: Sequence[tuple[str, bytes]],
    arenas: Sequence[tuple[int, int]],
    init: Sequence[tuple[int, int, bytes]],
    steps: Sequence[tuple[int, Sequence[tuple[int, Sequence[tuple[int, int, int]], Sequence[int]]]]],
    io: Sequence[tuple[str, str, str, Sequence[int], int, int]],
) -> bytes: ...

class Batch:
    """Launches of a library's kernel table, run together in one FastRPC call. ``kernels``: the
    table's kernel signatures (e.g. ``"buf,buf,u32"``), in table order. Raises
    ``InvalidArgument`` at once for a library whose build record says it has no kernel table
    (built without ``hexrpc build-lib --table``) or names another table. The records are packed
    on the heap: ``push`` and ``run`` need at most ``BATCH_STACK_BYTES`` (64 KiB) of the calling
    thread's stack."""
    def __init__(self, library: Library, kernels: Sequence[str]) -> None: ...
    def push(self, kernel: int, views: Sequence[View | Lease], scalars: Iterable[int | float] | None = None) -> int: ...
    def set_scalar(self, record: int, index: int, value: int | float) -> None: ...
    def set_view(self, record: int, index: int, view: View | Lease) -> None: ...
    def set_views(self, places: Sequence[tuple[int, int]], view: View | Lease) -> None: ...
    def run(self, deadline_ms: int | None = None) -> int: ...
    def run_profiled(self, deadline_ms: int | None = None) -> tuple[int, list[int] | None]: ...
    def __len__(self) -> int: ...

def detect_board(model: str) -> str | None: ...
def bench_counters(session: Session) -> dict[str, int | float]: ...
def take_exec_counts(session: Session) -> dict[str, Any]: ...
def flush_logs() -> None: ...
def set_log_level(name: Literal["off", "error", "warn", "info", "debug", "trace"]) -> None: ...
