"""What a ``HEXRPC`` device did (:class:`DeviceStats`), counted by the device, its memory and its
graphs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DeviceStats:
    """What the device did, for tests and reports: single launches and how many of their views were
    at a non-zero offset; batch runs (one FastRPC call each), the launches they carried and the
    non-zero-offset views of the batches built; libraries opened on the session and how many of
    those reopened a library closed to make room; graph steps, how many rebuilt their batches
    (rather than updating them in place), and the host nanoseconds the graph spent per step
    outside its FastRPC calls (``graph_host_ns``, summed); arenas opened for the process's buffers
    (``arenas_opened``, counted on the device that asked); graphs that launch their kernels one
    by one because their kernel table could not be built or found (``graph_fallbacks``)."""

    launches: int = 0
    nonzero_offset_views: int = 0
    batch_runs: int = 0
    batched_launches: int = 0
    library_opens: int = 0
    library_reopens: int = 0
    batched_nonzero_offset_views: int = 0
    graph_steps: int = 0
    graph_rebuilds: int = 0
    graph_host_ns: int = 0
    arenas_opened: int = 0
    graph_fallbacks: int = 0
