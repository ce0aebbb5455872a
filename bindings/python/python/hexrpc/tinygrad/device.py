"""tinygrad's ``HEXRPC`` device (:class:`HEXRPCDevice`) and its programs (:class:`HEXRPCProgram`:
one hexrpc launch, one FastRPC call, per kernel call)."""

from __future__ import annotations

import os

import hexrpc
from tinygrad.device import Compiled, Program, TinyELF

from .capture import Capture, Launch
from .graph import HEXRPCGraph
from .kernels import HEXRPCRenderer, register_buffer_limit
from .memory import HEXRPCAllocator, HEXRPCBuffer
from .session import _SessionHub
from .stats import DeviceStats

#: struct format of a scalar's dtype -> hexrpc signature kind.
_FMT_KINDS = {"b": "i8", "B": "u8", "h": "i16", "H": "u16", "i": "i32", "I": "u32", "q": "i64", "Q": "u64", "e": "f16", "f": "f32", "d": "f64"}


def signature_of(obj: TinyELF) -> tuple[str, int]:
    """(hexrpc signature, number of buffers) of a compiled kernel, from tinygrad's signature:
    buffers carry their shape, scalars (bound Variables) the shape ``()``."""
    kinds: list[str] = []
    for name, _, dt, shape in obj.signature:
        if shape != ():
            kinds.append("buf")
        elif (kind := _FMT_KINDS.get(dt.fmt or "")) is not None:
            kinds.append(kind)
        else:
            raise RuntimeError(f"HEXRPC: {obj.name}: scalar {name!r} of dtype {dt} has no hexrpc signature kind")
    nbufs = kinds.count("buf")
    if kinds[:nbufs] != ["buf"] * nbufs:
        raise RuntimeError(f"HEXRPC: {obj.name}: a buffer after a scalar; hexrpc needs buffers first")
    return ",".join(kinds), nbufs


class HEXRPCProgram(Program["HEXRPCDevice"]):
    """One compiled kernel: its library (opened on the session at its first launch, see
    :class:`LibraryCache`); each call is one hexrpc launch (one FastRPC call) that returns the
    DSP's time in seconds."""

    def __init__(self, dev: HEXRPCDevice, obj: TinyELF):
        self.dev, self.name, self.lib, self.tiny_signature = dev, obj.name, obj.lib, obj.signature
        self.hexrpc_signature, self.nbufs = signature_of(obj)
        # The library opens on the first launch, not here: tinygrad makes a program for every
        # kernel of a graph too, and a graph launches its kernels from its table (a jit loaded
        # from a pickle would otherwise open one library per kernel before its first run).

    def __call__(self, *bufs: HEXRPCBuffer, global_size=(1, 1, 1), local_size=(1, 1, 1), vals: tuple[int, ...] = (), wait=False, **kw):
        if len(bufs) != self.nbufs:
            raise RuntimeError(f"HEXRPC: {self.name} takes {self.nbufs} buffers, got {len(bufs)}")
        hub = self.dev.hub
        library = self.dev.libraries.get(id(self), self.lib, self.hexrpc_signature, self.dev.stats, self.name)
        views, scalars = [b.view for b in bufs], list(vals)
        if (cap := Capture.active) is not None:
            cap.launches.append(Launch(self, list(bufs), tuple(vals)))
        try:
            try:
                us = library.launch(views, scalars, deadline_ms=self.dev.deadline_ms)
            except hexrpc.NeedsRecovery as e:
                if not hub.recovered_unsent(e):
                    raise
                us = library.launch(views, scalars, deadline_ms=self.dev.deadline_ms)
        except hexrpc.NeedsRecovery as e:
            raise hub.failed(self.name, e) from e
        self.dev.stats.launches += 1
        self.dev.stats.nonzero_offset_views += sum(1 for b in bufs if b.offset)
        if self.dev.profile is not None:
            self.dev.profile.append((self.name, us))
        return us / 1e6

    def __del__(self):
        dev = getattr(self, "dev", None)
        if dev is not None and getattr(dev, "libraries", None) is not None:
            dev.libraries.drop(id(self))


class HEXRPCDevice(Compiled):
    """tinygrad's ``HEXRPC`` device: see the module documentation."""

    def __init__(self, device: str = ""):
        # "HEXRPC" is registered at import; "HEXRPC:1" ... when it opens.
        register_buffer_limit(device)
        self.stats = DeviceStats()
        self.hub = _SessionHub.get()
        self.session = self.hub.session
        self.libraries = self.hub.libraries
        deadline = os.environ.get("HEXRPC_DEADLINE_MS")
        self.deadline_ms: int | None = int(deadline) if deadline else None
        #: ``None``, or a list that each launch appends ``(kernel name, DSP us)`` to: a single
        #: kernel's time, or each record's of a graph's batches (measured on the DSP around the
        #: kernel call; a batch whose library does not time records appends
        #: ``(None, us of the whole batch)``). Set it to ``[]`` to profile, back to ``None`` to
        #: stop (``python -m hexrpc.compare --profile`` does).
        self.profile: list[tuple[str | None, int]] | None = None
        graph = HEXRPCGraph if os.environ.get("HEXRPC_GRAPH", "1") != "0" else None
        super().__init__(device, HEXRPCAllocator(self), [HEXRPCRenderer], HEXRPCProgram, graph=graph)

    def recover(self) -> None:
        """Rebuilds the session now (the device also does this by itself after a failed call, see
        the module documentation). Leases keep their memory; hexrpc reopens the open libraries
        (single kernels and graphs) on the new DSP process, so tinygrad's programs and jits keep
        working."""
        self.hub.recover("requested by Device.recover()")
