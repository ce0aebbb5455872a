"""Imported dma-bufs on the bench (``Session.import_fd``, ``Model.bind_input``): a frame served by
a second, real process (the ``bench-frame-server`` binary, openpilot's VisionIPC's stand-in),
whose descriptor arrives over a UNIX socket with ``SCM_RIGHTS``, imported into a session and read
in place by a model run with nothing copied; a read-only import's numpy view read-only; forged
descriptors refused before any FastRPC request; the server closing its descriptor or exiting
mid-stream breaking nothing.

The server is found at ``HEXRPC_FRAME_SERVER``, else next to ``HEXRPC_CLI``, else in this
checkout's ``target/debug`` (``cargo build -p hexrpc-scenarios --bin bench-frame-server``)."""

import ctypes
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import hexrpc

# The sample model's input (uint8 [1, N]) and the served buffer: two frames' worth, whole pages.
N = 64 << 10
FRAME_LEN = 2 * N
PAGE = 4096


def _server_exe():
    env = os.environ.get("HEXRPC_FRAME_SERVER")
    if env:
        assert os.access(env, os.X_OK), f"HEXRPC_FRAME_SERVER={env} is not an executable file"
        return env
    places = []
    if os.environ.get("HEXRPC_CLI"):
        places.append(pathlib.Path(os.environ["HEXRPC_CLI"]).parent / "bench-frame-server")
    places.append(pathlib.Path(__file__).resolve().parents[3] / "target" / "debug" / "bench-frame-server")
    for p in places:
        if os.access(p, os.X_OK):
            return str(p)
    pytest.skip(
        "no bench-frame-server binary (looked at HEXRPC_FRAME_SERVER, next to HEXRPC_CLI, and at "
        + ", ".join(map(str, places))
        + "): build it with `cargo build -p hexrpc-scenarios --bin bench-frame-server`"
    )


def frame(n, length=FRAME_LEN):
    """Frame ``n`` as the server writes it (``hexrpc_scenarios::frame_server::frame_byte``)."""
    i = np.arange(length, dtype=np.uint32)
    return ((i * 7 + n * 13) % 256).astype(np.uint8)


class FrameServer:
    """The client's end of a ``bench-frame-server`` process (tests/scenarios/src/frame_server.rs
    documents the protocol): it connects to our socket, sends the buffer's length with its
    descriptor, and answers each 5-byte command with ``k``."""

    def __init__(self, exe, length=FRAME_LEN, allocator="ion"):
        self.dir = tempfile.mkdtemp(prefix="hexrpc-frames-")
        path = os.path.join(self.dir, "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.proc = None
        self.fd = None
        try:
            listener.bind(path)
            listener.listen(1)
            listener.settimeout(0.05)
            self.proc = subprocess.Popen([exe, allocator, path, str(length)])
            deadline = time.monotonic() + 60
            while True:
                try:
                    self.conn, _ = listener.accept()
                    break
                except TimeoutError:
                    pass
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the frame server exited ({self.proc.returncode}) before it connected")
                if time.monotonic() > deadline:
                    raise RuntimeError("the frame server did not connect within 60 s")
            self.conn.settimeout(60)
            msg, fds, _, _ = socket.recv_fds(self.conn, 8, 1, socket.MSG_CMSG_CLOEXEC)
            assert len(fds) == 1, f"the frame server sent {len(fds)} descriptors"
            self.fd = fds[0]
            assert len(msg) == 8 and int.from_bytes(msg, "little") == length, msg
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()
        self.length = length

    def _command(self, op, arg=0):
        self.conn.sendall(op + arg.to_bytes(4, "little"))
        assert self.conn.recv(1) == b"k", f"the frame server did not answer {op!r}"

    def write_frame(self, n):
        """Has the server write frame ``n`` over its whole buffer; returns once it is written."""
        self._command(b"F", n)

    def close_server_fd(self):
        """Has the server close its own descriptor of the buffer (it keeps writing through its
        mapping)."""
        self._command(b"C")

    def close_received(self):
        """Closes the descriptor this process received (an import's duplicate keeps the buffer)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def kill_mid_stream(self):
        """Has the server exit at once, releasing nothing; returns its exit status."""
        self.conn.sendall(b"X\0\0\0\0")
        return self.proc.wait(timeout=60)

    def close(self):
        self.close_received()
        if getattr(self, "conn", None) is not None:
            self.conn.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def server():
    srv = FrameServer(_server_exe())
    yield srv
    srv.close()


@pytest.fixture
def session():
    with hexrpc.Session.bench() as s:
        yield s


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def get_writable_buffer(obj):
    """``PyObject_GetBuffer(obj, PyBUF_WRITABLE)`` (released at once if it is granted)."""
    view = ctypes.create_string_buffer(256)  # room for a Py_buffer
    get = ctypes.pythonapi.PyObject_GetBuffer
    get.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int]
    get(obj, ctypes.addressof(view), 0x0001)
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.c_void_p]
    release(ctypes.addressof(view))


def sample_output(x):
    """The sample model's outputs for input ``x``: ``y = x + 3``, ``z = y + 5`` (uint8)."""
    return (x + np.uint8(3)).reshape(1, -1), (x + np.uint8(8)).reshape(1, -1)


def test_a_read_only_import_is_a_read_only_numpy_view_of_the_frame(session, server):
    server.write_frame(1)
    lease = session.import_fd(server.fd, FRAME_LEN)
    assert not lease.writable and lease.size == FRAME_LEN and not lease.closed
    a = np.frombuffer(lease, dtype=np.uint8)
    assert not a.flags.writeable, "a read-only import exported writable: a write would fault the interpreter"
    with pytest.raises(ValueError):
        a[0] = 1
    with pytest.raises(ValueError):
        a.setflags(write=True)
    assert np.array_equal(a, frame(1)), "the array shows the served frame"
    # The memory is shared with the server: its next frame shows through the same array.
    server.write_frame(2)
    assert np.array_equal(a, frame(2))
    # A View and hexrpc.array of it are read-only too, and show their range.
    v = lease.view(N, N)
    b = hexrpc.array(v, np.uint8, (1, N))
    assert not b.flags.writeable and np.array_equal(b[0], frame(2)[N:])
    m = memoryview(v)
    assert m.readonly and m.nbytes == N
    with pytest.raises(TypeError):
        m[0] = 1
    # A writable request is refused, naming why; ctypes, which checks the flag, refuses too.
    for target in (lease, v):
        with pytest.raises(BufferError, match="read-only import"):
            get_writable_buffer(target)
        with pytest.raises(TypeError, match="not writable"):
            (ctypes.c_char * N).from_buffer(target)
    del a, b, m
    lease.close()


def test_a_writable_import_and_an_allocation_export_writable(session, server):
    server.write_frame(3)
    rw = session.import_fd(server.fd, FRAME_LEN, writable=True)
    assert rw.writable
    a = np.frombuffer(rw, dtype=np.uint8)
    assert a.flags.writeable
    a[:16] = 0xEE
    # Another import of the same buffer (read-only) sees the write: one buffer, two leases.
    ro = session.import_fd(server.fd, FRAME_LEN)
    r = np.frombuffer(ro, dtype=np.uint8)
    assert (r[:16] == 0xEE).all() and np.array_equal(r[16:], frame(3)[16:])
    own = session.alloc(PAGE)
    assert own.writable and np.frombuffer(own, np.uint8).flags.writeable
    (ctypes.c_char * PAGE).from_buffer(own)[0] = b"\x07"
    assert np.frombuffer(own, np.uint8)[0] == 7
    get_writable_buffer(rw)
    get_writable_buffer(own.view(0, PAGE))
    del a, r


def test_a_model_input_bound_to_a_served_frame_runs_with_nothing_copied(session, server):
    frame_lease = session.import_fd(server.fd, FRAME_LEN)
    bound = hexrpc.Model(hexrpc.bench_sample_model(N), session=session)
    copying = hexrpc.Model(hexrpc.bench_sample_model(N), session=session)
    assert bound.last_run is None and not bound.is_bound("x")
    bound.bind_input("x", frame_lease)
    assert bound.is_bound("x") and bound.is_bound(0) and not copying.is_bound("x")
    for n in range(4):
        server.write_frame(n)
        before = hexrpc.bench_counters(session)
        out = bound.run()
        after = hexrpc.bench_counters(session)
        assert bound.last_run.input_bytes_copied == 0 and bound.last_run.calls == 1, bound.last_run
        assert after["invokes"] - before["invokes"] == 1, "one FastRPC call a run"
        bound_copied = after["bytes_copied"] - before["bytes_copied"]
        y, z = sample_output(frame(n)[:N])
        assert np.array_equal(out["y"], y) and np.array_equal(out["z"], z), f"frame {n} was not read in place"
        # The same frame copied in: the same outputs, its N bytes copied into the model.
        before = hexrpc.bench_counters(session)["bytes_copied"]
        want = copying.run(frame(n)[:N].reshape(1, N))
        copying_copied = hexrpc.bench_counters(session)["bytes_copied"] - before
        assert copying.last_run.input_bytes_copied == N
        assert all(np.array_equal(out[k], want[k]) for k in ("y", "z")), f"frame {n}: bound and copied runs differ"
        # Neither call moves the frame through the driver's copy buffers: the bound one carries
        # one lease-table entry more (8 bytes).
        assert bound_copied < 4096 and bound_copied <= copying_copied + 8, (bound_copied, copying_copied)
    # None for the bound input reads the same; an array for it is refused before anything is sent.
    out = bound.run(None)
    assert np.array_equal(out["z"], sample_output(frame(3)[:N])[1])
    out = bound.run(x=None, deadline_ms=5000)
    assert np.array_equal(out["y"], sample_output(frame(3)[:N])[0])
    sent = hexrpc.bench_counters(session)["fastrpc_requests"]
    for args, kwargs in (((frame(0)[:N].reshape(1, N),), {}), ((), {"x": frame(0)[:N].reshape(1, N)})):
        with pytest.raises(hexrpc.InvalidArgument, match="'x' is bound"):
            bound.run(*args, **kwargs)
    assert hexrpc.bench_counters(session)["fastrpc_requests"] == sent, "nothing sent"
    # A profiled run reports the same.
    out, profile = bound.run_profiled()
    assert bound.last_run.input_bytes_copied == 0 and len(profile.records) == bound.launches
    # Unbound, the input is copied in again.
    assert bound.unbind_input("x") is True and not bound.is_bound("x") and bound.unbind_input(0) is False
    with pytest.raises(hexrpc.InvalidArgument, match="missing input 'x'"):
        bound.run()
    server.write_frame(9)
    out = bound.run(np.frombuffer(frame_lease, np.uint8)[:N].reshape(1, N))
    assert bound.last_run.input_bytes_copied == N
    assert np.array_equal(out["z"], sample_output(frame(9)[:N])[1])
    bound.close()
    copying.close()


def test_a_view_binds_at_its_own_offset_and_refusals_change_nothing(session, server):
    frame_lease = session.import_fd(server.fd, FRAME_LEN)
    m = hexrpc.Model(hexrpc.bench_sample_model(N), session=session)
    server.write_frame(5)
    second_half = sample_output(frame(5)[N:])
    # A view's offset counts: the view of the second half, and the lease at offset N, alike.
    for target, offset in ((frame_lease.view(N, N), 0), (frame_lease, N), (frame_lease.view(N - 128, N + 128), 128)):
        m.bind_input("x", target, offset)
        out = m.run()
        assert np.array_equal(out["y"], second_half[0]), (target, offset)
        assert m.last_run.input_bytes_copied == 0
    # What the model cannot take: InvalidArgument naming it, the binding as it was.
    sent = hexrpc.bench_counters(session)["fastrpc_requests"]
    other = hexrpc.Session.bench()
    elsewhere = other.alloc(N)
    for target, offset, needle in [
        (frame_lease.view(0, N - 1), 0, "does not fit the view of 65535 bytes"),
        (frame_lease.view(N, N), 128, "at offset 128 does not fit the view"),
        (frame_lease, N + 128, "does not fit the lease of 131072 bytes"),
        (frame_lease, 64, "128"),
        (elsewhere, 0, "another session"),
    ]:
        with pytest.raises(hexrpc.InvalidArgument, match=needle) as e:
            m.bind_input("x", target, offset)
        assert e.value.stage == "model-bind", e.value.stage
        assert m.is_bound("x")
    with pytest.raises(hexrpc.InvalidArgument, match="no input 'w'"):
        m.bind_input("w", frame_lease)
    with pytest.raises(hexrpc.InvalidArgument, match="1 inputs"):
        m.bind_input(1, frame_lease)
    with pytest.raises(TypeError):
        m.bind_input("x", bytearray(N))
    closed = session.alloc(N)
    closed.close()
    with pytest.raises(hexrpc.HandleError):
        m.bind_input("x", closed)
    assert hexrpc.bench_counters(session)["fastrpc_requests"] == sent, "nothing sent"
    server.write_frame(6)
    assert np.array_equal(m.run()["z"], sample_output(frame(6)[N:])[1]), "the binding after the refusals"
    elsewhere.close()
    other.close()
    m.close()


def test_forged_descriptors_are_refused_naming_the_cause_with_nothing_sent(session, server, tmp_path):
    r, w = os.pipe()
    a, b = socket.socketpair()
    regular = tmp_path / "file"
    regular.write_bytes(b"\0" * FRAME_LEN)
    f = os.open(regular, os.O_RDONLY)
    closed_r, closed_w = os.pipe()
    os.close(closed_r)
    os.close(closed_w)
    fds_before = open_fds()
    sent = hexrpc.bench_counters(session)["fastrpc_requests"]
    cases = [
        (r, PAGE, "not a dma-buf"),
        (w, PAGE, "not a dma-buf"),
        (a.fileno(), PAGE, "not a dma-buf"),
        (f, PAGE, "not a dma-buf"),
        (closed_r, PAGE, "not open in this process"),
        (-1, PAGE, "not open in this process"),
        (1 << 40, PAGE, "not a descriptor number"),
        (server.fd, FRAME_LEN + 1, f"{FRAME_LEN + 1} bytes asked for, beyond the dma-buf's {FRAME_LEN} bytes"),
        (server.fd, 0, "0 bytes"),
        (server.fd, -PAGE, "negative"),
    ]
    try:
        for fd, size, needle in cases:
            with pytest.raises(hexrpc.InvalidArgument, match=needle) as e:
                session.import_fd(fd, size)
            assert e.value.stage == "import", (fd, e.value.stage)
            assert hexrpc.bench_counters(session)["fastrpc_requests"] == sent, f"fd {fd}: a FastRPC request was sent"
        assert open_fds() == fds_before, "a refusal left a descriptor behind"
        # The caller's descriptors are still the caller's, open.
        for fd in (r, w, a.fileno(), f, server.fd):
            os.fstat(fd)
        os.write(w, b"still mine")
        assert os.read(r, 10) == b"still mine"
        # The session is unharmed: the real buffer imports.
        assert session.import_fd(server.fd, FRAME_LEN).size == FRAME_LEN
    finally:
        for fd in (r, w, f):
            os.close(fd)
        a.close()
        b.close()


def test_the_server_closing_its_fd_or_exiting_mid_stream_breaks_nothing(server):
    fds_before = open_fds()
    with hexrpc.Session.bench() as session:
        lease = session.import_fd(server.fd, FRAME_LEN)
        m = hexrpc.Model(hexrpc.bench_sample_model(N), session=session)
        m.bind_input("x", lease)
        server.write_frame(1)
        # Both of the buffer's other descriptors go: the server's and the one this process received.
        server.close_server_fd()
        server.close_received()
        assert np.array_equal(m.run()["z"], sample_output(frame(1)[:N])[1])
        server.write_frame(2)  # the server still writes through its mapping
        assert np.array_equal(m.run()["z"], sample_output(frame(2)[:N])[1])
        # The server exits mid-stream, releasing nothing: the import still holds the last frame.
        assert server.kill_mid_stream() == 0
        out = m.run()
        assert np.array_equal(out["y"], sample_output(frame(2)[:N])[0]) and m.last_run.input_bytes_copied == 0
        a = np.frombuffer(lease, np.uint8)
        assert np.array_equal(a, frame(2)), "the numpy view after the server exited"
        del a
        # Closing the Lease object does not end the binding: the model holds the import.
        lease.close()
        assert np.array_equal(m.run()["z"], sample_output(frame(2)[:N])[1])
        assert m.unbind_input("x")
        m.close()
    assert open_fds() <= fds_before, "the import's descriptor outlived its session"
