"""What the HEXRPC device launched, in order, while a :class:`Capture` is active: the kernel (the
``PROGRAM`` UOp of a graph's call, or the :class:`~hexrpc.tinygrad.device.HEXRPCProgram` of a
kernel launched on its own), its buffers (:class:`~hexrpc.tinygrad.memory.HEXRPCBuffer`, the
inputs of that run substituted) and its scalar values. :mod:`hexrpc.export` turns one such
record of a ``TinyJit`` run into a model file. Recording costs one ``None`` check per launch
when no capture is active."""

from __future__ import annotations

from typing import Any, NamedTuple


class Launch(NamedTuple):
    """One launch as the device made it."""

    #: The ``PROGRAM`` UOp (a graph's call) or the ``HEXRPCProgram`` (a kernel on its own).
    kernel: Any
    #: The buffers, in parameter order.
    bufs: list
    #: The scalar values (bound Variables), in parameter order.
    vals: tuple


class Capture:
    """A context manager: every launch the HEXRPC device makes while it is active is appended to
    :attr:`launches`. One capture at a time per process."""

    active: Capture | None = None

    def __init__(self) -> None:
        self.launches: list[Launch] = []

    def __enter__(self) -> Capture:
        if Capture.active is not None:
            raise RuntimeError("HEXRPC: a capture is already active")
        Capture.active = self
        return self

    def __exit__(self, *exc) -> None:
        Capture.active = None
