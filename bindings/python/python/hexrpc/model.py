"""``hexrpc.Model``: a model file (compiled at the desk by ``python -m hexrpc.export``) opened on
a session and run in one FastRPC call, with numpy arrays in and out.

    import numpy as np
    import hexrpc

    model = hexrpc.Model("classifier.hxm")                 # a device session of this board
    print(model.inputs)                                     # [Tensor(name='x', dtype='float32', shape=(1, 3, 48, 192))]
    outputs = model.run(x=np.zeros((1, 3, 48, 192), np.float32))

On the bench: ``hexrpc.Model(path, session=hexrpc.Session.bench())``. Importing this module (or
``hexrpc``) does not import tinygrad; numpy is imported when a model runs.
"""

from typing import NamedTuple

from ._hexrpc import _Model


class Tensor(NamedTuple):
    """An input or output of a model."""

    name: str
    dtype: str
    shape: tuple
    nbytes: int


class KernelTime(NamedTuple):
    """One record's DSP time in a profiled run (:meth:`Model.run_profiled`)."""

    call: int
    """The FastRPC call (program) it ran in, in run order."""
    record: int
    """Its index in that call."""
    kernel: str
    """Its kernel's name (tinygrad's, from the library's build record)."""
    us: int
    """Microseconds around the kernel call on the DSP (on the bench: emulated or simulated)."""


class Profile(NamedTuple):
    """Where a run's DSP time went (:meth:`Model.run_profiled`)."""

    records: list
    """Every timed record, a :class:`KernelTime`, in run order."""
    untimed_calls: int
    """Calls whose library does not time its records (built before per-record times)."""
    dsp_us: int
    """The run's DSP microseconds as the entries summed them."""

    def by_kernel(self):
        """``[(kernel, records, us)]``, the most time first (ties by name)."""
        acc = {}
        for r in self.records:
            n, us = acc.get(r.kernel, (0, 0))
            acc[r.kernel] = (n + 1, us + r.us)
        return sorted(((k, n, us) for k, (n, us) in acc.items()), key=lambda t: (-t[2], t[0]))


class Model:
    """A model file opened on a session (see the module docs).

    ``source``: a path (str or os.PathLike; the file is mapped read-only while it is opened) or
    the file's bytes. ``session``: a :class:`hexrpc.Session`; ``None`` opens a device session of
    this machine's board for the model. The file is validated whole before anything reaches the
    DSP: a file cut short, corrupted, edited or built for another hexrpc raises
    :class:`hexrpc.InvalidArgument` naming the part, the field and the values.
    """

    def __init__(self, source, session=None):
        self._m = _Model(source, session)
        self.inputs = [Tensor(n, d, tuple(s), b) for (n, d, s, b) in self._m.inputs()]
        self.outputs = [Tensor(n, d, tuple(s), b) for (n, d, s, b) in self._m.outputs()]
        self.launches, self.calls_per_run = self._m.shape_of_run()

    def run(self, *args, deadline_ms=None, **kwargs):
        """Runs the model once and returns ``{name: numpy array}`` of its outputs.

        Inputs by position (in ``self.inputs`` order) or by name; each is converted to the
        input's dtype only if it already has it (a different dtype or shape raises
        :class:`hexrpc.InvalidArgument`, naming the input). ``deadline_ms`` bounds the run; a run
        past it, or a DSP restart, raises :class:`hexrpc.NeedsRecovery`: recover the session and
        run again.
        """
        return self._run(args, kwargs, deadline_ms, False)[0]

    def run_profiled(self, *args, deadline_ms=None, **kwargs):
        """:meth:`run`, and where the DSP time went: returns ``(outputs, profile)``, ``profile`` a
        :class:`Profile` of each record's time measured on the DSP around its kernel, named after
        the kernel. On the bench the times are emulated (Hexagon code under qemu-hexagon: host
        time) or simulated (the bench's library models), never device figures."""
        return self._run(args, kwargs, deadline_ms, True)

    def _run(self, args, kwargs, deadline_ms, profiled):
        """One run; ``(outputs, profile or None)``."""
        import numpy as np

        from . import InvalidArgument

        if len(args) > len(self.inputs):
            raise InvalidArgument(f"the model has {len(self.inputs)} inputs; {len(args)} were given")
        given = dict(zip((t.name for t in self.inputs), args))
        for k, v in kwargs.items():
            if k in given:
                raise InvalidArgument(f"input {k!r} given twice")
            given[k] = v
        unknown = set(given) - {t.name for t in self.inputs}
        if unknown:
            raise InvalidArgument(f"the model has no input {sorted(unknown)[0]!r} (its inputs: {', '.join(t.name for t in self.inputs)})")
        ins = []
        for t in self.inputs:
            if t.name not in given:
                raise InvalidArgument(f"missing input {t.name!r} ({t.dtype} {list(t.shape)})")
            a = np.asarray(given[t.name])
            if a.dtype != np.dtype(t.dtype):
                raise InvalidArgument(f"input {t.name!r}: dtype {a.dtype} where the model's input is {t.dtype}")
            if tuple(a.shape) != t.shape:
                raise InvalidArgument(f"input {t.name!r}: shape {list(a.shape)} where the model's input is {list(t.shape)}")
            ins.append(memoryview(np.ascontiguousarray(a)).cast("B"))
        outs = [np.empty(t.shape, dtype=t.dtype) for t in self.outputs]
        views = [memoryview(o).cast("B") for o in outs]
        result = {t.name: o for t, o in zip(self.outputs, outs)}
        if not profiled:
            self._m.run(ins, views, deadline_ms)
            return result, None
        _, _, dsp_us, records, untimed = self._m.run_profiled(ins, views, deadline_ms)
        return result, Profile([KernelTime(*r) for r in records], untimed, dsp_us)

    def close(self):
        """Releases the model's arenas, records and libraries."""
        self._m.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        if not hasattr(self, "calls_per_run"):
            return "hexrpc.Model(not opened)"
        return f"hexrpc.Model({len(self.inputs)} inputs, {len(self.outputs)} outputs, {self.launches} launches in {self.calls_per_run} call(s) a run)"
