"""hexrpc.Model on the bench: the bench's sample model file opened from bytes and from a path,
run in one FastRPC call with numpy arrays in and out, every bad input refused naming it, a
damaged file refused before anything is sent, and importing hexrpc imports no tinygrad."""

import subprocess
import sys

import numpy as np
import pytest

import hexrpc


@pytest.fixture
def session():
    with hexrpc.Session.bench() as s:
        yield s


def test_the_sample_model_runs_in_one_call_with_numpy_in_and_out(session, tmp_path):
    path = tmp_path / "sample.hxm"
    path.write_bytes(hexrpc.bench_sample_model(300))
    for source in (str(path), path, path.read_bytes()):
        with hexrpc.Model(source, session=session) as m:
            assert [t.name for t in m.inputs] == ["x"] and [t.name for t in m.outputs] == ["y", "z"]
            assert m.inputs[0] == hexrpc.Tensor("x", "uint8", (1, 300), 300)
            assert (m.launches, m.calls_per_run) == (2, 1)
            x = (np.arange(300) % 250).astype(np.uint8).reshape(1, 300)
            before = hexrpc.bench_counters(session)["invokes"]
            out = m.run(x)
            assert hexrpc.bench_counters(session)["invokes"] - before == 1, "one FastRPC call a run"
            assert np.array_equal(out["y"], x + 3) and np.array_equal(out["z"], x + 8)
            assert out["z"].dtype == np.uint8 and out["z"].shape == (1, 300)
            out = m.run(x=x + 1, deadline_ms=5000)
            assert np.array_equal(out["z"], x + 9)


def test_a_profiled_run_names_each_record_after_its_kernel(session):
    with hexrpc.Model(hexrpc.bench_sample_model(64), session=session) as m:
        x = np.arange(64, dtype=np.uint8).reshape(1, 64)
        out, profile = m.run_profiled(x)
        assert np.array_equal(out["z"], x + 8), "the outputs as a plain run writes them"
        assert profile.untimed_calls == 0
        assert len(profile.records) == m.launches
        assert [r.record for r in profile.records] == list(range(m.launches))
        assert all(isinstance(r, hexrpc.KernelTime) and r.kernel for r in profile.records), profile
        assert sum(r.us for r in profile.records) == profile.dsp_us
        assert sum(n for _, n, _ in profile.by_kernel()) == m.launches


def test_bad_inputs_are_refused_naming_the_input(session):
    m = hexrpc.Model(hexrpc.bench_sample_model(16), session=session)
    x = np.zeros((1, 16), np.uint8)
    for args, kwargs, needle in [
        ((), {}, "missing input 'x'"),
        ((np.zeros((1, 15), np.uint8),), {}, "shape [1, 15]"),
        ((np.zeros((1, 16), np.float32),), {}, "dtype float32"),
        ((x, x), {}, "has 1 inputs"),
        ((), {"w": x}, "no input 'w'"),
        ((x,), {"x": x}, "given twice"),
    ]:
        with pytest.raises(hexrpc.InvalidArgument) as e:
            m.run(*args, **kwargs)
        assert needle in str(e.value), (needle, str(e.value))
    m.close()


def test_a_damaged_file_is_refused_before_anything_is_sent(session):
    good = bytearray(hexrpc.bench_sample_model(16))
    good[-50] ^= 1
    with pytest.raises(hexrpc.InvalidArgument) as e:
        hexrpc.Model(bytes(good), session=session)
    assert "CRC-32" in str(e.value)
    with pytest.raises(hexrpc.InvalidArgument):
        hexrpc.Model(bytes(good[:100]), session=session)


def test_importing_hexrpc_imports_no_tinygrad():
    code = "import sys, hexrpc; m = hexrpc.Model; assert 'tinygrad' not in sys.modules, sorted(k for k in sys.modules if 'tinygrad' in k)"
    subprocess.run([sys.executable, "-c", code], check=True)
