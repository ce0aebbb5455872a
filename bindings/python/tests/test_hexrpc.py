"""The hexrpc Python package on the bench: launches at non-zero offsets, errors, recovery,
deadlines, closing. The executor test skips (with the reason) without clang-19/qemu-hexagon."""

import gc
import os

import numpy as np
import pytest

import hexrpc


@pytest.fixture
def sess():
    with hexrpc.Session.bench() as s:
        yield s



def executor_session():
    """A bench session whose DSP runs kernels under the executor (qemu-hexagon), or a skip of the
    calling test naming what is missing."""
    try:
        return hexrpc.Session.bench(executor=True)
    except hexrpc.Unavailable as e:
        pytest.skip(f"executor unavailable: {e.cause}")

def test_scale_at_nonzero_offsets_zero_copy(sess):
    lib = sess.open_library(hexrpc.bench_model_image("scale_f32"), signature="buf,buf,f32", name="scale")
    lease = sess.alloc(64 * 1024)
    assert lease.size == 64 * 1024 and len(lease) == 64 * 1024
    mem = np.frombuffer(lease, dtype=np.uint8)  # zero-copy: writes land in the ION buffer
    x_off, y_off, n = 4100, 32 * 1024 + 16, 256
    x = mem[x_off : x_off + 4 * n].view(np.float32)
    y = mem[y_off : y_off + 4 * n].view(np.float32)
    x[:] = np.arange(n, dtype=np.float32) - 100.0
    xv, yv = lease.view(x_off, 4 * n), lease.view(y_off, 4 * n)
    assert (xv.offset, xv.length) == (x_off, 4 * n)
    for a in (0.5, 2.0, -3.25):
        us = lib.launch([xv, yv], [a])
        assert isinstance(us, int) and us >= 0
        np.testing.assert_array_equal(y, np.float32(a) * x)
    assert lib.signature == "buf,buf,f32"
    del x, y, mem


def test_add_from_path_and_whole_lease(sess, tmp_path):
    path = tmp_path / "add_u8.so"
    path.write_bytes(hexrpc.bench_model_image("add_u8"))
    with sess.open_library(path, signature="buf,buf,u32") as lib, sess.alloc(4096) as src, sess.alloc(8192) as dst:
        a = np.frombuffer(src, dtype=np.uint8)
        b = np.frombuffer(dst, dtype=np.uint8)
        a[123:223] = np.arange(100, dtype=np.uint8) * 3
        lib.launch([src.view(123, 100), dst.view(5000, 100)], [7], deadline_ms=2000)
        np.testing.assert_array_equal(b[5000:5100], (np.arange(100, dtype=np.uint8) * 3 + 7).astype(np.uint8))
        # A whole lease is a view of offset 0.
        a[:] = 1
        lib.launch([src, dst.view(0, 4096)], [1])
        assert (b[:4096] == 2).all()
        del a, b
    assert lib.closed and src.closed and dst.closed


def test_errors_carry_stage_and_cause(sess):
    image = hexrpc.bench_model_image("scale_f32")
    lib = sess.open_library(image, signature="buf,buf,f32")
    lease = sess.alloc(8192)
    with pytest.raises(hexrpc.LaunchRefused) as e:
        lib.launch([lease.view(0, 16)], [1.0])  # one buffer too few
    assert e.value.stage == "launch-pack" and "2 buffers" in e.value.cause and e.value.status == "refused"
    assert isinstance(e.value, hexrpc.Error)
    with pytest.raises(hexrpc.LaunchRefused):
        lib.launch([lease.view(0, 16), lease.view(16, 16)], ["two"])
    with pytest.raises(hexrpc.LaunchRefused):
        lib.launch([lease.view(0, 16), lease.view(16, 16)], [1.0, 2.0])
    with pytest.raises(hexrpc.InvalidArgument) as e:
        lease.view(8000, 1000)
    assert e.value.stage == "view"
    with pytest.raises(hexrpc.InvalidArgument) as e:
        sess.open_library(image, signature="buf,nope")
    assert e.value.stage == "library-open"
    with pytest.raises(hexrpc.InvalidArgument):
        sess.open_library(image, signature="buf,buf,f32", abi="v3")
    with pytest.raises(TypeError):
        sess.open_library(42, signature="buf")
    with pytest.raises(TypeError):
        lib.launch([1, 2], [1.0])
    with pytest.raises(hexrpc.Unavailable):
        sess.open_library("/nonexistent/lib.so", signature="buf")
    v1 = sess.open_library(image, signature="buf,buf,f32", abi="v1")
    with pytest.raises(hexrpc.LaunchRefused, match="v2"):
        v1.launch([lease.view(64, 16), lease.view(0, 16)], [1.0])
    # Offset 0 passes the v1 packer, but this library's entry is v2: the DSP refuses the launch.
    with pytest.raises(hexrpc.DspError) as e:
        v1.launch([lease.view(0, 16), lease.view(0, 16)], [1.0])
    assert e.value.stage == "invoke" and "AEE_EBADPARM" in e.value.cause
    with pytest.raises(hexrpc.InvalidArgument, match="build record"):
        sess.open_library(image)  # no signature, and the image has no build record
    with pytest.raises(hexrpc.InvalidArgument):
        hexrpc.bench_model_image("no-such-model")
    with pytest.raises(hexrpc.InvalidArgument):
        hexrpc.Session.open(board="no-such-board")


def test_launches_from_several_threads(sess):
    import threading

    lib = sess.open_library(hexrpc.bench_model_image("add_u8"), signature="buf,buf,u32")
    lease = sess.alloc(64 * 1024)
    mem = np.frombuffer(lease, dtype=np.uint8)
    mem[:256] = np.arange(256, dtype=np.uint8)
    errors = []

    def worker(t):
        try:
            out = lease.view(4096 * (t + 1) + t, 256)  # each thread its own output, odd offsets
            for k in range(50):
                lib.launch([lease.view(0, 256), out], [k])
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for t in range(4):
        start = 4096 * (t + 1) + t
        np.testing.assert_array_equal(mem[start : start + 256], (np.arange(256) + 49).astype(np.uint8))
    with pytest.raises(hexrpc.InvalidArgument):
        lib.launch([lease.view(0, 8), lease.view(8, 8)], [1], deadline_ms=0)
    del mem


def test_restart_and_recovery(sess):
    lib = sess.open_library(hexrpc.bench_model_image("add_u8"), signature="buf,buf,u32")
    lease = sess.alloc(4096)
    mem = np.frombuffer(lease, dtype=np.uint8)
    mem[:16] = 5
    views = [lease.view(0, 16), lease.view(1024, 16)]
    lib.launch(views, [1])
    sess.restart_dsp()
    with pytest.raises(hexrpc.NeedsRecovery) as e:
        lib.launch(views, [1])
    assert e.value.status == "recoverable"
    assert not sess.healthy
    # Once the session is known to need recovery, a call is refused without being sent.
    with pytest.raises(hexrpc.NeedsRecovery) as again:
        lib.launch(views, [1])
    assert again.value.unsent, again.value.cause
    sess.recover()
    assert sess.healthy
    lib.launch(views, [2])
    assert (mem[1024:1040] == 7).all()
    del mem


def test_latency_policy_keywords_reach_the_session():
    # The default: the PM-QoS vote on the bench's comma-three channel, and on the channel a
    # recovery opens.
    with hexrpc.Session.bench() as s:
        assert s.pm_qos_state == "sent"
        s.restart_dsp()
        s.recover()
        assert s.pm_qos_state == "sent"
    with hexrpc.Session.bench(pm_qos=False, power="burst") as s:
        assert s.pm_qos_state == "not-asked"
    with pytest.raises(hexrpc.InvalidArgument) as e:
        hexrpc.Session.bench(power="turbo")
    assert "sustained" in str(e.value)


def test_deadline_then_recover(sess):
    lib = sess.open_library(hexrpc.bench_model_image("sleep_ms"), signature="buf,u32")
    lease = sess.alloc(4096)
    with pytest.raises(hexrpc.NeedsRecovery) as e:
        lib.launch([lease.view(8, 4)], [400], deadline_ms=50)
    assert "deadline" in e.value.cause
    sess.recover()
    lib.launch([lease.view(8, 4)], [3], deadline_ms=5000)
    assert np.frombuffer(lease, dtype=np.uint8)[8:12].view(np.uint32)[0] == 3


def test_closing(sess):
    lib = sess.open_library(hexrpc.bench_model_image("add_u8"), signature="buf,buf,u32")
    lease = sess.alloc(4096)
    arr = np.frombuffer(lease, dtype=np.uint8)
    view = lease.view(0, 8)
    lease.close()  # deferred: the array still uses the memory
    assert lease.closed
    arr[:8] = 9  # still mapped
    assert arr[:8].sum() == 72
    with pytest.raises(hexrpc.HandleError):
        lease.view(0, 8)
    with pytest.raises(hexrpc.HandleError):
        lib.launch([view, view], [1])
    with pytest.raises(BufferError):
        memoryview(lease)
    del arr
    gc.collect()
    lease.close()  # twice is fine
    lib.close()
    lib.close()
    with pytest.raises(hexrpc.HandleError):
        lib.launch([], [])
    # Closing the session closes what was made from it.
    lib2 = sess.open_library(hexrpc.bench_model_image("add_u8"), signature="buf,buf,u32")
    lease2 = sess.alloc(4096)
    sess.close()
    assert sess.closed and lib2.closed and lease2.closed
    with pytest.raises(hexrpc.HandleError):
        sess.alloc(4096)
    with pytest.raises(hexrpc.HandleError):
        sess.recover()
    sess.close()


@pytest.mark.skipif(os.path.exists("/dev/ion"), reason="this machine has /dev/ion: a device session could start")
def test_device_session_names_the_missing_node():
    with pytest.raises(hexrpc.Unavailable) as e:
        hexrpc.Session.open(board="comma-three")
    assert e.value.stage == "heap-open" and e.value.status == "unavailable"
    # It names the node and the next step.
    assert "/dev/ion does not exist" in str(e.value) and "hexrpc probe" in str(e.value), e.value


def test_executor_relu_at_offsets():
    try:
        sess = hexrpc.Session.bench(executor=True)
        image = hexrpc.bench_kernel_image("relu_f32", "buf,buf,u32")
    except hexrpc.Unavailable as e:
        pytest.skip(f"executor unavailable: {e.cause}")
    with sess:
        lib = sess.open_library(image, signature="buf,buf,u32")
        lease = sess.alloc(16384)
        f = np.frombuffer(lease, dtype=np.float32)
        a_off, o_off, n = 1024, 8192 + 64, 64
        a = f[a_off // 4 : a_off // 4 + n]
        a[:] = (np.arange(n) % 7 - 3).astype(np.float32)
        lib.launch([lease.view(a_off, 4 * n), lease.view(o_off, 4 * n)], [n])
        np.testing.assert_array_equal(f[o_off // 4 : o_off // 4 + n], np.maximum(a, 0))
        del f, a


def test_executor_build_lib_record_gives_the_signature(tmp_path):
    sess = executor_session()
    src = tmp_path / "axpy_f32.c"
    src.write_text("void axpy_f32(const float *x, float *y, unsigned int n, float a) {\n"
                   "  for (unsigned int i = 0; i < n; i++) y[i] += a * x[i];\n}\n")
    so = hexrpc.bench_build_library(src, "buf,buf,u32,f32", tmp_path / "axpy_f32.so")
    with sess:
        with pytest.raises(hexrpc.InvalidArgument):
            sess.open_library(so, signature="buf,buf,u32", abi="v2")  # not what it was built for
        lib = sess.open_library(so)  # signature and ABI from the build record
        assert lib.signature == "buf,buf,u32,f32"
        lease = sess.alloc(8192)
        f = np.frombuffer(lease, dtype=np.float32)
        n, x_off, y_off = 32, 256, 4096 + 128
        x = f[x_off // 4 : x_off // 4 + n]
        y = f[y_off // 4 : y_off // 4 + n]
        x[:] = np.arange(n, dtype=np.float32)
        y[:] = 1.0
        lib.launch([lease.view(x_off, 4 * n), lease.view(y_off, 4 * n)], [n, 0.5])
        np.testing.assert_array_equal(y, 1.0 + np.float32(0.5) * x)
        del f, x, y


def _sleep_batch(sess, lease, ms):
    lib = sess.open_library(hexrpc.bench_model_image("sleep_ms_table"), signature="buf,u32")
    bt = hexrpc.Batch(lib, ["buf,u32"])
    bt.push(0, [lease.view(0, 4)], [ms])
    return lib, bt


def test_a_profiled_batch_reports_each_records_dsp_time(sess):
    lease = sess.alloc(4096)
    lib, bt = _sleep_batch(sess, lease, 1)
    bt.push(0, [lease.view(4, 4)], [2])
    bt.push(0, [lease.view(8, 4)], [3])
    us, times = bt.run_profiled()
    assert times is not None and len(times) == len(bt) == 3
    assert sum(times) == us, (times, us)
    bt.run()  # a plain run still works after a profiled one (it raises otherwise)
    with pytest.raises(hexrpc.InvalidArgument):
        bt.run_profiled(deadline_ms=0)


def test_batch_calls_during_a_run_do_not_freeze(sess):
    """While one thread is in a 2 s `run()` (GIL released), every other call on the batch
    completes: none waits, with the GIL held, for a lock the running thread keeps."""
    import threading

    lease = sess.alloc(4096)
    other = sess.alloc(4096)
    lib, bt = _sleep_batch(sess, lease, 2000)
    started = threading.Event()
    results = {}

    def long_run():
        started.set()
        results["long"] = bt.run(deadline_ms=20000)

    def the_rest():
        started.wait()
        import time

        time.sleep(0.3)  # the long run is in the DSP by now
        t0 = time.monotonic()
        results["len"] = len(bt)
        results["push"] = bt.push(0, [other.view(0, 4)], [1])
        bt.set_scalar(results["push"], 0, 2)
        results["repr"] = repr(bt)
        results["run"] = bt.run()
        results["elapsed"] = time.monotonic() - t0

    import faulthandler

    # A regression kills the test process (with every thread's traceback) instead of hanging CI:
    # the main thread cannot even return from join() while another thread holds the GIL.
    faulthandler.dump_traceback_later(30, exit=True)
    try:
        a = threading.Thread(target=long_run)
        b = threading.Thread(target=the_rest)
        a.start()
        b.start()
        b.join(10)
        assert not b.is_alive(), "calls on the batch blocked during its run"
        a.join(10)
        assert not a.is_alive()
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert results["len"] == 1
    assert results["push"] == 1
    assert "records=" in results["repr"]
    # The second run ran both records (the 2 ms one and the 2 s one) on its own snapshot.
    assert results["elapsed"] < 10
    assert "long" in results
    words = np.frombuffer(lease, dtype=np.uint32)
    assert words[0] == 2000
    assert np.frombuffer(other, dtype=np.uint32)[0] == 2
    lib.close()


def test_batch_refuses_a_closed_lease_like_a_launch(sess):
    lease = sess.alloc(4096)
    lib, bt = _sleep_batch(sess, lease, 1)
    assert bt.run() >= 0
    assert np.frombuffer(lease, dtype=np.uint32)[0] == 1
    view = lease.view(0, 4)
    lease.close()
    with pytest.raises(hexrpc.HandleError) as launch_err:
        lib.launch([view], [1])
    with pytest.raises(hexrpc.HandleError) as batch_err:
        bt.run()
    assert str(batch_err.value) == str(launch_err.value)
    assert batch_err.value.stage == launch_err.value.stage
    # A push naming the closed lease is refused as well.
    with pytest.raises(hexrpc.HandleError):
        bt.push(0, [view], [1])
    lib.close()


def test_batch_and_launch_refuse_a_zero_deadline_alike(sess):
    lease = sess.alloc(4096)
    lib, bt = _sleep_batch(sess, lease, 1)
    with pytest.raises(hexrpc.InvalidArgument) as launch_err:
        lib.launch([lease.view(0, 4)], [1], deadline_ms=0)
    with pytest.raises(hexrpc.InvalidArgument) as batch_err:
        bt.run(deadline_ms=0)
    assert str(batch_err.value) == str(launch_err.value)
    assert sess.healthy
    assert bt.run(deadline_ms=5000) >= 0 and bt.run(deadline_ms=None) >= 0
    lib.close()


def test_rust_warnings_reach_python_logging(sess, caplog):
    """The HAL's warning about a DSP restart (a Rust `log::warn!`) is a record of Python's
    `logging`, on a child of the logger `hexrpc`, before the exception it explains is raised."""
    import logging

    lib = sess.open_library(hexrpc.bench_model_image("add_u8"), signature="buf,buf,u32")
    lease = sess.alloc(4096)
    views = [lease.view(0, 16), lease.view(1024, 16)]
    lib.launch(views, [1])
    with caplog.at_level(logging.DEBUG, logger="hexrpc"):
        sess.restart_dsp()
        with pytest.raises(hexrpc.NeedsRecovery):
            lib.launch(views, [1])
        hexrpc.flush_logs()
    rust = [r for r in caplog.records if r.name.startswith("hexrpc.") and r.levelno == logging.WARNING]
    assert rust, [(r.name, r.getMessage()) for r in caplog.records]
    assert any("restart" in r.getMessage() for r in rust), [r.getMessage() for r in rust]
    sess.recover()


def test_log_level_names():
    hexrpc.set_log_level("debug")
    hexrpc.set_log_level("INFO")
    with pytest.raises(hexrpc.InvalidArgument):
        hexrpc.set_log_level("verbose")


def test_batch_set_view_updates_a_record_in_place(sess):
    """`set_view` points one buffer of a built record at another view (another lease too); the
    next run uses it; a record, index or lease count the batch cannot take is refused and leaves
    the record as it was."""
    a, b = sess.alloc(4096), sess.alloc(4096)
    lib, bt = _sleep_batch(sess, a, 1)
    bt.run()
    assert np.frombuffer(a, dtype=np.uint32)[0] == 1
    bt.set_view(0, 0, b.view(64, 4))
    bt.set_scalar(0, 0, 3)
    bt.run()
    assert np.frombuffer(b, dtype=np.uint32)[16] == 3
    assert np.frombuffer(a, dtype=np.uint32)[0] == 1  # the old view is no longer written
    with pytest.raises(hexrpc.LaunchRefused):
        bt.set_view(1, 0, a.view(0, 4))  # no record 1
    with pytest.raises(hexrpc.LaunchRefused):
        bt.set_view(0, 1, a.view(0, 4))  # the kernel has one buffer
    # Fill the batch to its distinct-lease capacity (b and 14 more; b named twice), then try to
    # bring in one more lease in place of one of b's views.
    leases = [sess.alloc(4096) for _ in range(14)]
    for lease in leases:
        bt.push(0, [lease.view(0, 4)], [1])
    bt.push(0, [b.view(128, 4)], [1])
    extra = sess.alloc(4096)
    with pytest.raises(hexrpc.LaunchRefused):
        bt.set_view(0, 0, extra.view(0, 4))
    bt.set_view(0, 0, leases[0].view(8, 4))  # an already-named lease fits
    bt.run()
    assert np.frombuffer(leases[0], dtype=np.uint32)[2] == 3
    # set_views: several places at once, all or none.
    with pytest.raises(hexrpc.LaunchRefused):
        bt.set_views([(0, 0), (99, 0)], b.view(256, 4))
    bt.set_scalar(0, 0, 5)
    bt.run()
    assert np.frombuffer(leases[0], dtype=np.uint32)[2] == 5, "a refused set_views changed nothing"
    bt.set_views([(0, 0), (1, 0)], b.view(256, 4))
    bt.set_scalar(1, 0, 6)
    bt.run()
    assert np.frombuffer(b, dtype=np.uint32)[64] == 6
    lib.close()


def test_executor_call_limit_is_settable_and_the_restart_says_why(tmp_path):
    """A kernel still running past `call_limit_ms` is ended by the bench's executor: the launch
    raises NeedsRecovery, `last_restart` names the limit, and after recover() the same library
    runs a short call."""
    try:
        sess = hexrpc.Session.bench(executor=True, call_limit_ms=300)
    except hexrpc.Unavailable as e:
        pytest.skip(f"executor unavailable: {e.cause}")
    src = tmp_path / "spin.c"
    src.write_text("void spin(unsigned int *out, unsigned int n) {\n"
                   "  volatile unsigned int x = 0;\n"
                   "  for (unsigned int i = 0; i < n; i++) x += i;\n  out[0] = x;\n}\n")
    so = hexrpc.build_library(src, "buf,u32", tmp_path / "spin.so")
    with sess:
        assert sess.last_restart is None
        lib = sess.open_library(so)
        lease = sess.alloc(4096)
        with pytest.raises(hexrpc.NeedsRecovery):
            lib.launch([lease.view(0, 4)], [4_000_000_000])
        why = sess.last_restart
        assert why is not None and "per-call limit of 300 ms" in why and "HEXRPC_BENCH_CALL_LIMIT_MS" in why, why
        sess.recover()
        lib.launch([lease.view(0, 4)], [10])
        assert np.frombuffer(lease, dtype=np.uint32)[0] == 45
    with pytest.raises(hexrpc.InvalidArgument):
        hexrpc.Session.bench(call_limit_ms=0)


def test_bench_call_limit_from_the_environment_is_checked(monkeypatch):
    monkeypatch.setenv("HEXRPC_BENCH_CALL_LIMIT_MS", "soon")
    with pytest.raises(hexrpc.InvalidArgument) as e:
        hexrpc.Session.bench()
    assert "HEXRPC_BENCH_CALL_LIMIT_MS" in str(e.value), e.value
    monkeypatch.setenv("HEXRPC_BENCH_CALL_LIMIT_MS", "2500")
    with hexrpc.Session.bench() as s:
        assert s.healthy


def test_view_exports_exactly_its_range_and_names_its_lease(sess):
    """A View supports the buffer protocol (its bytes of the lease, zero-copy) and `.lease`;
    `hexrpc.array` is a typed numpy view in one call; an exported view keeps the memory alive
    after close() as a lease export does."""
    lease = sess.alloc(8192)
    whole = hexrpc.array(lease, np.uint8)
    whole[:] = np.arange(8192, dtype=np.uint32).astype(np.uint8)
    v = lease.view(4096, 64)
    mv = memoryview(v)
    assert mv.nbytes == 64 and bytes(mv) == bytes(whole[4096:4160])
    f = hexrpc.array(v, np.float32, shape=(4, 4))
    assert f.shape == (4, 4)
    f[0, 0] = 1.5
    assert np.frombuffer(lease, dtype=np.float32)[1024] == 1.5
    assert v.lease.size == lease.size and len(v.lease) == 8192
    lib = sess.open_library(hexrpc.bench_model_image("add_u8"), signature="buf,buf,u32")
    lib.launch([v.lease.view(0, 16), v.lease.view(1024, 16)], [1])
    with pytest.raises(ValueError):
        hexrpc.array(lease.view(0, 6), np.float32)  # 6 bytes are not whole float32s
    del whole, mv
    lease.close()
    f[1, 1] = 2.0  # still mapped: the array holds an export
    assert f[1, 1] == 2.0
    with pytest.raises(BufferError):
        memoryview(v)  # no new exports of a closed lease
    del f
    lib.close()


def test_unknown_board_lists_the_device_boards():
    with pytest.raises(hexrpc.InvalidArgument) as e:
        hexrpc.Session.open(board="nope")
    for name in ("comma-three", "msm-android", "qcom-rb5", "upstream"):
        assert name in str(e.value), e.value
    assert "bench" not in str(e.value)


@pytest.mark.skipif(os.path.exists("/proc/device-tree/model"), reason="this machine has a device tree")
def test_open_without_a_board_detects_it_or_says_what_to_pass():
    with pytest.raises(hexrpc.Unavailable) as e:
        hexrpc.Session.open()
    assert e.value.stage == "board" and "pass a board by name" in str(e.value), e.value
    assert "comma-three" in str(e.value)


def test_batch_refuses_a_library_without_a_kernel_table_when_it_is_made(tmp_path):
    """`Batch(library, kernels)` reads the library's build record (kept from its open): a library
    built without a kernel table, or a `kernels` list other than its table, is refused by the
    constructor with `InvalidArgument`, not by `run()`."""
    import subprocess

    sess = executor_session()
    src = tmp_path / "bump_u8.c"
    src.write_text("void bump_u8(unsigned char *p, unsigned int n) {\n"
                   "  for (unsigned int i = 0; i < n; i++) p[i] += 1;\n}\n")
    try:
        single = hexrpc.build_library(src, "buf,u32", tmp_path / "single.so")
    except hexrpc.Unavailable as e:
        pytest.skip(f"library builder unavailable: {e.cause}")
    cli = os.environ.get("HEXRPC_CLI")
    if not cli:
        pytest.skip("HEXRPC_CLI (the hexrpc binary that builds kernel tables) is not set")
    table = tmp_path / "table.so"
    subprocess.run([cli, "-q", "build-lib", str(src), "--table", "bump_u8:buf,u32", "-o", str(table)], check=True)
    with sess:
        lib = sess.open_library(single)
        with pytest.raises(hexrpc.InvalidArgument) as e:
            hexrpc.Batch(lib, ["buf,u32"])
        assert "no kernel table" in e.value.cause and "--table" in e.value.cause, e.value.cause
        tlib = sess.open_library(table)
        with pytest.raises(hexrpc.InvalidArgument) as e:
            hexrpc.Batch(tlib, ["buf,u32", "buf,u32"])
        assert "not the library's kernel table" in e.value.cause, e.value.cause
        bt = hexrpc.Batch(tlib, ["buf,u32"])
        lease = sess.alloc(4096)
        mem = np.frombuffer(lease, dtype=np.uint8)
        mem[5:21] = 7
        bt.push(0, [lease.view(5, 16)], [16])
        bt.push(0, [lease.view(5, 16)], [16])
        bt.run(deadline_ms=60000)
        assert (mem[5:21] == 9).all() and mem[4] == 0 and mem[21] == 0
        del mem


def test_arena_sub_allocations_launch_as_views_of_one_lease(sess):
    """Sub-allocations of an arena are Leases of their own size for Python (buffer protocol,
    views relative to them) and ranges of the arena's lease for the DSP: a launch on two of them
    computes at the right bytes, both name the arena's lease id, and closing them gives their
    ranges back."""
    lib = sess.open_library(hexrpc.bench_model_image("scale_f32"), signature="buf,buf,f32")
    with sess.arena(1 << 20) as arena:
        assert arena.size == 1 << 20 and arena.used == 0 and arena.live == 0
        x, y = arena.alloc(1000), arena.alloc(4096, align=4096)
        assert (x.size, y.size) == (1000, 4096) and x.in_arena and y.in_arena
        assert x.lease_id == y.lease_id == arena.lease_id
        assert arena.live == 2 and arena.used == 1024 + 4096  # 1000 rounded up to the 128 granule
        xs, ys = np.frombuffer(x, dtype=np.float32), np.frombuffer(y, dtype=np.float32)
        xs[:] = np.arange(250, dtype=np.float32)
        lib.launch([x.view(40, 800), y.view(400, 800)], [3.0])
        np.testing.assert_array_equal(ys[100:300], 3.0 * xs[10:210])
        assert (ys[:100] == 0).all() and (ys[300:] == 0).all(), "only the view's bytes were written"
        # Views are checked against the sub-allocation, not the arena.
        with pytest.raises(hexrpc.InvalidArgument):
            x.view(900, 200)
        del xs, ys
        x.close()
        assert arena.live == 1 and arena.used == 4096
        # Refusals are typed and say why.
        with pytest.raises(hexrpc.InvalidArgument, match="largest free"):
            arena.alloc(2 << 20)
        with pytest.raises(hexrpc.InvalidArgument):
            arena.alloc(0)
        with pytest.raises(hexrpc.InvalidArgument):
            arena.alloc(64, align=100)
        y.close()
        assert arena.live == 0 and arena.largest_free == 1 << 20
    assert arena.closed
    with pytest.raises(hexrpc.HandleError):
        arena.alloc(64)


def test_arena_buffers_count_as_one_lease_of_a_batch(sess):
    """A batch carries at most MAX_BATCH_LEASES distinct leases: sub-allocations of one arena are
    one of them, so 40 buffers of one arena fit a batch where 40 leases of their own do not."""
    arena = sess.arena(1 << 20)
    bufs = [arena.alloc(64) for _ in range(40)]
    lib = sess.open_library(hexrpc.bench_model_image("sleep_ms_table"), signature="buf,u32")
    bt = hexrpc.Batch(lib, ["buf,u32"])
    for i, b in enumerate(bufs):
        bt.push(0, [b.view(0, 4)], [i % 3])
    bt.run()
    assert [int(np.frombuffer(b, dtype=np.uint32)[0]) for b in bufs] == [i % 3 for i in range(40)]
    # set_view to another sub-allocation of the same arena keeps the count.
    bt.set_view(0, 0, arena.alloc(64).view(0, 4))
    own = [sess.alloc(4096) for _ in range(hexrpc.MAX_BATCH_LEASES)]
    bt2 = hexrpc.Batch(lib, ["buf,u32"])
    for lease in own[:-1]:
        bt2.push(0, [lease.view(0, 4)], [1])
    bt2.push(0, [bufs[0].view(0, 4)], [1])  # the arena is the 15th lease
    with pytest.raises(hexrpc.LaunchRefused):
        bt2.push(0, [own[-1].view(0, 4)], [1])
    bt2.push(0, [bufs[1].view(0, 4)], [2])  # another buffer of the arena still fits
    bt2.run()
    lib.close()


def test_session_close_closes_arenas_and_their_buffers():
    s = hexrpc.Session.bench()
    arena = s.arena(1 << 16)
    buf = arena.alloc(256)
    s.close()
    assert arena.closed and buf.closed
    with pytest.raises(hexrpc.HandleError):
        buf.view(0, 4)


def test_the_largest_batch_pushes_and_runs_on_a_64_kib_thread(sess):
    """A batch's records are packed on the heap: a thread made with BATCH_STACK_BYTES (64 KiB) of
    stack pushes the largest batch (MAX_BATCH_LAUNCHES records on MAX_BATCH_LEASES leases), runs
    it, changes a scalar and runs it again. Its 66 KiB on the stack crashed such a thread."""
    import threading

    assert hexrpc.BATCH_STACK_BYTES == 64 * 1024
    lib = sess.open_library(hexrpc.bench_model_image("add_u8_table"), signature="buf,buf,u32")
    ins = [sess.alloc(4096) for _ in range(hexrpc.MAX_BATCH_LEASES - 1)]
    for i, lease in enumerate(ins):
        np.frombuffer(lease, dtype=np.uint8)[:] = 10 * i
    out = sess.alloc(4096)
    per = 4096 // hexrpc.MAX_BATCH_LAUNCHES
    n = len(ins)
    outcome = {}

    def work():
        try:
            bt = hexrpc.Batch(lib, ["buf,buf,u32"])
            for r in range(hexrpc.MAX_BATCH_LAUNCHES):
                bt.push(0, [ins[r % n].view(per * (r // n), per), out.view(per * r, per)], [1 + r % 3])
            try:
                bt.push(0, [ins[0].view(0, per), out.view(0, per)], [1])
                outcome["extra"] = "accepted"
            except hexrpc.LaunchRefused:
                outcome["extra"] = "refused"
            bt.run()
            bt.set_scalar(0, 0, 7)
            bt.run(deadline_ms=5000)
            outcome["records"] = len(bt)
        except BaseException as e:  # reported by the main thread
            outcome["error"] = repr(e)

    old = threading.stack_size(hexrpc.BATCH_STACK_BYTES)
    try:
        t = threading.Thread(target=work)
        t.start()
    finally:
        threading.stack_size(old)
    t.join()
    assert outcome == {"extra": "refused", "records": hexrpc.MAX_BATCH_LAUNCHES}, outcome
    got = np.frombuffer(out, dtype=np.uint8)
    for r in range(hexrpc.MAX_BATCH_LAUNCHES):
        k = 7 if r == 0 else 1 + r % 3
        assert (got[per * r : per * (r + 1)] == (10 * (r % n) + k) % 256).all(), (r, got[per * r : per * r + 4])
    lib.close()


def test_a_session_used_in_a_forked_child_is_refused_and_a_new_one_works():
    """After os.fork(), the child's copy of a session (its libraries, leases, batches) is refused
    with ForkedSession, which says why and what to do, and nothing of it reaches the parent's DSP
    process; closing it there sends nothing and does not hang; a new session in the child works;
    the parent's session works after the child ended."""
    import json
    import signal

    sess = hexrpc.Session.bench()
    lib = sess.open_library(hexrpc.bench_model_image("add_u8_table"), signature="buf,buf,u32")
    lease = sess.alloc(4096)
    mem = np.frombuffer(lease, dtype=np.uint8)
    mem[:16] = 40
    lib.launch([lease.view(0, 16), lease.view(2048, 16)], [2])
    assert mem[2048] == 42
    bt = hexrpc.Batch(lib, ["buf,buf,u32"])
    bt.push(0, [lease.view(0, 16), lease.view(1024, 16)], [1])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then _exit (no pytest teardown here)
        out = {}
        try:
            signal.alarm(30)  # a hang ends the child
            for name, call in [
                ("launch", lambda: lib.launch([lease.view(0, 16), lease.view(2048, 16)], [1])),
                ("alloc", lambda: sess.alloc(4096)),
                ("recover", lambda: sess.recover()),
                ("batch", lambda: bt.run()),
                ("open", lambda: sess.open_library(hexrpc.bench_model_image("add_u8"), signature="buf,buf,u32")),
            ]:
                try:
                    call()
                    out[name] = "accepted"
                except hexrpc.ForkedSession as e:
                    out[name] = "forked" if "fork()" in str(e) and "open a new session" in str(e) and e.status == "forked" else str(e)
                except Exception as e:  # noqa: BLE001  (reported to the parent)
                    out[name] = f"{type(e).__name__}: {e}"
            del mem  # the child's copy of the exported buffer
            lib.close()
            sess.close()
            out["closed"] = sess.closed
            with hexrpc.Session.bench() as s2:
                l2 = s2.open_library(hexrpc.bench_model_image("add_u8"), signature="buf,buf,u32")
                m2 = s2.alloc(4096)
                a = np.frombuffer(m2, dtype=np.uint8)
                a[:16] = 40
                l2.launch([m2.view(0, 16), m2.view(2048, 16)], [3])
                out["new"] = int(a[2048])
                del a
        except BaseException as e:  # noqa: BLE001
            out["error"] = f"{type(e).__name__}: {e}"
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    report = json.loads(os.read(r, 65536).decode() or "{}")
    os.close(r)
    assert os.WIFEXITED(status), f"the child did not exit (a hang ends it with SIGALRM): {status:#x} {report}"
    for name in ("launch", "alloc", "recover", "batch", "open"):
        assert report.get(name) == "forked", report
    assert report.get("closed") is True and report.get("new") == 43 and "error" not in report, json.dumps(report)
    # The parent's session is unaffected.
    lib.launch([lease.view(0, 16), lease.view(2048, 16)], [5])
    bt.run()
    assert mem[2048] == 45 and mem[1024] == 41
    del mem
    sess.close()
