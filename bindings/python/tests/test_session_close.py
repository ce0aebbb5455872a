"""`Session.close()` with buffers of its leases still exported: a
memoryview or numpy array kept past `close()` used to keep the session's DSP process and its
listener thread alive, silently, until it was released. Now `close()` raises `BufferError`
naming how many exports are alive and leaves the session as it was (usable); once they are
released, `close()` ends the session, its listener thread included, and every export made after
that is refused with a `BufferError` that says the session is closed.

Threads are Rust's (the reverse file service's listener, `hexrpc-reverse`): they are counted by
their names in /proc/self/task/*/comm. `hexrpc-watchdog` is the process's deadline watchdog (one
per process, started by the first deadline, drivers/src/watchdog.rs), not a session's."""

import gc
import os
import time
import warnings

import numpy as np
import pytest

import hexrpc

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc/self/task to name threads")


def hexrpc_threads() -> list[str]:
    """The names of this process's threads that hexrpc's Rust side made (`hexrpc-...`)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            continue  # the thread ended while the directory was read
    return sorted(n for n in names if n.startswith("hexrpc-"))


def listeners() -> int:
    return hexrpc_threads().count("hexrpc-reverse")


def session_threads() -> list[str]:
    """hexrpc's threads other than the process-wide watchdog."""
    return [n for n in hexrpc_threads() if n != "hexrpc-watchdog"]


def settle(want_listeners: int, timeout_s: float = 5.0) -> int:
    """The number of listener threads once it is `want_listeners`, or after `timeout_s` (a new
    thread takes its name once it runs, a moment after the session has started it)."""
    t0 = time.monotonic()
    while listeners() != want_listeners and time.monotonic() - t0 < timeout_s:
        time.sleep(0.01)
    return listeners()


def test_close_with_live_exports_raises_and_keeps_the_session_usable():
    before, threads_before = listeners(), session_threads()
    sess = hexrpc.Session.bench()
    assert settle(before + 1) == before + 1, f"a session has its listener: {hexrpc_threads()}"
    lib = sess.open_library(hexrpc.bench_model_image("add_u8"), signature="buf,buf,u32")
    lease = sess.alloc(8192)
    view = lease.view(4096, 64)
    mv = memoryview(view)  # one export (of a View)
    arr = np.frombuffer(lease, dtype=np.uint8)  # another (of the Lease)

    with pytest.raises(BufferError) as e:
        sess.close()
    msg = str(e.value)
    assert "2 exported buffers" in msg and "release" in msg, msg
    # Nothing was closed: the session, its library and lease work as before.
    assert not sess.closed and not lease.closed and not lib.closed and sess.healthy
    assert settle(before + 1) == before + 1, "the session (and its listener) is still there, as close() said"
    arr[:64] = 5
    lib.launch([lease.view(0, 64), view], [2])
    assert bytes(mv) == bytes([7] * 64), "the export still shows the lease's bytes"
    other = sess.alloc(4096)
    assert other.size == 4096

    # A lease closed while exported still counts: its export holds the session too.
    lease.close()
    assert lease.closed
    with pytest.raises(BufferError, match="2 exported buffers"):
        sess.close()
    mv.release()
    with pytest.raises(BufferError, match="1 exported buffer "):
        sess.close()
    del arr
    gc.collect()

    sess.close()
    assert sess.closed and lib.closed and other.closed
    # The listener is joined by close() itself; a channel's closer thread may take a moment.
    assert listeners() == before, f"no listener thread left after close: {hexrpc_threads()}"
    t0 = time.monotonic()
    while session_threads() != threads_before and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    assert session_threads() == threads_before, f"every thread of the session ended: {hexrpc_threads()}"
    sess.close()  # twice is fine


def test_every_export_after_close_is_refused_with_a_clear_error():
    before = listeners()
    sess = hexrpc.Session.bench()
    lease = sess.alloc(4096)
    sub = sess.arena(1 << 16).alloc(256)
    view = lease.view(128, 64)
    sess.close()
    assert settle(before) == before, f"no listener thread left after close: {hexrpc_threads()}"
    for what, export in [
        ("memoryview(view)", lambda: memoryview(view)),
        ("memoryview(lease)", lambda: memoryview(lease)),
        ("numpy.frombuffer(lease)", lambda: np.frombuffer(lease, dtype=np.uint8)),
        ("numpy.frombuffer(view)", lambda: np.frombuffer(view, dtype=np.uint8)),
        ("hexrpc.array(view)", lambda: hexrpc.array(view, np.float32)),
        ("memoryview(arena sub-allocation)", lambda: memoryview(sub)),
        ("bytes(view)", lambda: bytes(view)),
    ]:
        with pytest.raises(BufferError, match="session is closed") as e:
            export()
        assert "Session.close()" in str(e.value), f"{what}: {e.value}"
    assert listeners() == before


def test_with_block_leaving_with_an_exception_is_not_masked_by_live_exports():
    """Leaving a `with` block by an exception while an export is alive (the traceback keeps the
    block's arrays) raises that exception, not BufferError; the session stays open, with a
    ResourceWarning that says so, and closes once the export is released."""
    before = listeners()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ZeroDivisionError):
            with hexrpc.Session.bench() as sess:
                arr = hexrpc.array(sess.alloc(4096), np.uint32)
                arr[0] = 1 // 0
    assert any(issubclass(w.category, ResourceWarning) and "1 exported buffer" in str(w.message) for w in caught), [
        str(w.message) for w in caught
    ]
    assert not sess.closed and settle(before + 1) == before + 1, "left open, with its listener"
    del arr
    sess.close()
    assert sess.closed and settle(before) == before

    # Leaving it normally with an export alive: BufferError, as close() raises.
    with pytest.raises(BufferError, match="1 exported buffer "):
        with hexrpc.Session.bench() as sess:
            mv = memoryview(sess.alloc(4096))
    assert not sess.closed
    mv.release()
    sess.close()
    assert settle(before) == before, f"no listener thread left: {hexrpc_threads()}"
