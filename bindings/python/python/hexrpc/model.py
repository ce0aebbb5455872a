"""``hexrpc.Model``: a model file (compiled at the desk by ``python -m hexrpc.export``) opened on
a session and run in one FastRPC call, with numpy arrays in and out.

    import numpy as np
    import hexrpc

    model = hexrpc.Model("classifier.hxm")                 # a device session of this board
    print(model.inputs)                                     # [Tensor(name='x', dtype='float32', shape=(1, 3, 48, 192))]
    outputs = model.run(x=np.zeros((1, 3, 48, 192), np.float32))

On the bench: ``hexrpc.Model(path, session=hexrpc.Session.bench())``. Importing this module (or
``hexrpc``) does not import tinygrad; numpy is imported when a model runs.

An input can be bound to a lease the model reads in place, a camera frame another process
shares (``Session.import_fd``) for instance; a run then leaves it out and copies none of it:

    frame = session.import_fd(fd, size)                    # read-only, the fd stays yours
    model.bind_input("x", frame)                            # or a View: frame.view(offset, n)
    outputs = model.run()                                   # "x" read where it is
    assert model.last_run.input_bytes_copied == 0
"""

from typing import NamedTuple

from ._hexrpc import _Model


class Tensor(NamedTuple):
    """An input or output of a model."""

    name: str
    dtype: str
    shape: tuple
    nbytes: int


class RunReport(NamedTuple):
    """What one run did (:attr:`Model.last_run`)."""

    launches: int
    """Kernel launches."""
    calls: int
    """FastRPC calls."""
    dsp_us: int
    """Microseconds the DSP reported (on the bench: emulated or simulated)."""
    input_bytes_copied: int
    """Bytes of the inputs copied into the model's memory: 0 when every input is bound
    (:meth:`Model.bind_input`)."""


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

    ``last_run``: the :class:`RunReport` of the last run that completed (``None`` before one).
    """

    def __init__(self, source, session=None):
        self._m = _Model(source, session)
        self.inputs = [Tensor(n, d, tuple(s), b) for (n, d, s, b) in self._m.inputs()]
        self.outputs = [Tensor(n, d, tuple(s), b) for (n, d, s, b) in self._m.outputs()]
        self.launches, self.calls_per_run = self._m.shape_of_run()
        self.last_run = None

    def _index(self, input):
        """The index of ``input``, a name or an index."""
        from . import InvalidArgument

        if isinstance(input, str):
            for i, t in enumerate(self.inputs):
                if t.name == input:
                    return i
            raise InvalidArgument(f"the model has no input {input!r} (its inputs: {', '.join(t.name for t in self.inputs)})")
        if isinstance(input, int) and not isinstance(input, bool):
            if not 0 <= input < len(self.inputs):
                raise InvalidArgument(f"input {input}: the model has {len(self.inputs)} inputs")
            return input
        raise TypeError(f"an input is named by its name (str) or index (int), not {type(input).__name__}")

    def bind_input(self, input, target, offset=0):
        """Binds ``input`` (its name or index) to memory the model then reads in place: every
        run leaves the input out (or passes ``None`` for it) and copies none of it.

        ``target``: a :class:`hexrpc.Lease` of the model's session, the input's bytes at
        ``offset``; or a :class:`hexrpc.View`, at ``view.offset + offset`` of its lease, the
        input within the view. A read-only import (``Session.import_fd``) is typical: a camera
        frame another process writes. Whatever is in the memory when a run's call reaches the
        DSP is what the model reads: keeping it still during a run is the writer's and the
        caller's protocol. The model holds the lease until the input is unbound or bound again,
        or the model closed (closing the Lease object does not end the binding).

        Raises :class:`hexrpc.InvalidArgument` (stage ``model-bind``), the binding unchanged, for
        a lease of another session, bytes past the lease or view, an offset whose remainder by
        128 differs from the input's in the file, or a lease the model's call cannot carry.
        """
        self._m.bind_input(self._index(input), target, offset)

    def unbind_input(self, input):
        """Unbinds ``input`` (its name or index): from the next run on it is given to
        :meth:`run` and copied in again. Returns True if it was bound."""
        return self._m.unbind_input(self._index(input))

    def is_bound(self, input):
        """True if ``input`` (its name or index) is bound (:meth:`bind_input`)."""
        return self._m.bound()[self._index(input)]

    def run(self, *args, deadline_ms=None, **kwargs):
        """Runs the model once and returns ``{name: numpy array}`` of its outputs.

        Inputs by position (in ``self.inputs`` order) or by name; each is converted to the
        input's dtype only if it already has it (a different dtype or shape raises
        :class:`hexrpc.InvalidArgument`, naming the input). A bound input (:meth:`bind_input`)
        is left out, or given as ``None`` (by position, to reach the inputs after it); an array
        for it raises :class:`hexrpc.InvalidArgument` before anything is sent. ``deadline_ms``
        bounds the run; a run past it, or a DSP restart, raises :class:`hexrpc.NeedsRecovery`:
        recover the session and run again. :attr:`last_run` says what the run did.
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
        for t, bound in zip(self.inputs, self._m.bound()):
            v = given.get(t.name)
            if bound:
                if v is not None:
                    raise InvalidArgument(
                        f"input {t.name!r} is bound to a lease (Model.bind_input): leave it out of the run (or pass None), "
                        f"or unbind_input({t.name!r}) first"
                    )
                ins.append(None)
                continue
            if v is None:
                raise InvalidArgument(f"missing input {t.name!r} ({t.dtype} {list(t.shape)})")
            a = np.asarray(v)
            if a.dtype != np.dtype(t.dtype):
                raise InvalidArgument(f"input {t.name!r}: dtype {a.dtype} where the model's input is {t.dtype}")
            if tuple(a.shape) != t.shape:
                raise InvalidArgument(f"input {t.name!r}: shape {list(a.shape)} where the model's input is {list(t.shape)}")
            ins.append(memoryview(np.ascontiguousarray(a)).cast("B"))
        outs = [np.empty(t.shape, dtype=t.dtype) for t in self.outputs]
        views = [memoryview(o).cast("B") for o in outs]
        result = {t.name: o for t, o in zip(self.outputs, outs)}
        if not profiled:
            self.last_run = RunReport(*self._m.run(ins, views, deadline_ms))
            return result, None
        launches, calls, dsp_us, copied, records, untimed = self._m.run_profiled(ins, views, deadline_ms)
        self.last_run = RunReport(launches, calls, dsp_us, copied)
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
