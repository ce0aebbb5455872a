"""Device memory: the tinygrad buffer (:class:`HEXRPCBuffer`, a view of a hexrpc lease), the arenas
the leases are carved from (:class:`ArenaPool`) and tinygrad's allocator over them
(:class:`HEXRPCAllocator`).

Memory shared with the DSP changes under the host while a kernel runs; tinygrad only reads a
buffer after the launch that writes it has returned (every launch here is synchronous)."""

from __future__ import annotations

import os
from typing import Any

import hexrpc
from tinygrad.device import BufferSpec, LRUAllocator

from .stats import DeviceStats

class HEXRPCBuffer:
    """A tinygrad buffer on HEXRPC: a view (``offset``, ``size``) of one hexrpc lease, which is a
    sub-allocation of an arena (``arena``) or, with ``HEXRPC_ARENA_MIB=0``, a lease of its own.
    The base buffer owns the lease (``owner``); buffers made by ``_offset`` share it and do not
    free it."""

    __slots__ = ("lease", "offset", "size", "owner", "arena", "_view")

    def __init__(self, lease, offset: int, size: int, owner: bool):
        self.lease, self.offset, self.size, self.owner = lease, offset, size, owner
        self.arena = None
        self._view = None

    @property
    def view(self):
        """The hexrpc view (lease, offset, length) a launch takes; made once per buffer."""
        if self._view is None:
            self._view = self.lease.view(self.offset, self.size)
        return self._view

    def host(self) -> memoryview:
        """The bytes of this view in the lease's host mapping."""
        return memoryview(self.lease).cast("B")[self.offset : self.offset + self.size]


#: Bytes of one arena: ``HEXRPC_ARENA_MIB`` MiB (default 16). A tensor larger than that gets an
#: arena of its own, rounded up to a MiB.
ARENA_BYTES = int(os.environ.get("HEXRPC_ARENA_MIB", "16") or "16") << 20


class ArenaPool:
    """The device memory of the process's session: arenas (one lease each, carved into 128-byte
    aligned sub-allocations by hexrpc's allocator), so a model's tensors are a few leases, not one
    each. A batch carries at most :data:`BATCH_MAX_LEASES` distinct leases per FastRPC call, and
    the DSP maps a lease once per process (the entry's map cache), so few leases is what lets a
    jit graph run in one call. ``HEXRPC_ARENA_MIB=0`` gives every buffer a lease of its own (the
    old behaviour, for comparison).

    The pool grows by whole arenas: an allocation takes the first arena (newest first) with a
    free range that fits, else a new arena of :data:`ARENA_BYTES` (or the allocation's size,
    rounded up to a MiB, when larger). An arena left with no live sub-allocation is closed,
    unless it is the newest (kept for the next allocation). What a kernel is given is still a
    view (lease, offset, length): the DSP maps the whole arena, and the entry checks the view
    against the arena's length (docs/kernel-rules.md, "Arenas")."""

    def __init__(self, session, arena_bytes: int = ARENA_BYTES):
        self.session, self.arena_bytes = session, arena_bytes
        self.arenas: list[Any] = []
        self.live: dict[int, int] = {}
        self.opened = 0

    def alloc(self, size: int, stats: DeviceStats) -> HEXRPCBuffer:
        if self.arena_bytes <= 0:
            return HEXRPCBuffer(self.session.alloc(size), 0, size, owner=True)
        for arena in reversed(self.arenas):
            if arena.largest_free >= size:
                try:
                    return self._take(arena, arena.alloc(size))
                except hexrpc.Error:
                    continue  # fragmented past what largest_free said: try the next arena
        mib = 1 << 20
        arena = self.session.arena(max(self.arena_bytes, (size + mib - 1) // mib * mib))
        self.arenas.append(arena)
        self.live[id(arena)] = 0
        self.opened += 1
        stats.arenas_opened += 1
        return self._take(arena, arena.alloc(size))

    def _take(self, arena, lease) -> HEXRPCBuffer:
        self.live[id(arena)] += 1
        buf = HEXRPCBuffer(lease, 0, lease.size, owner=True)
        buf.arena = arena
        return buf

    def free(self, buf: HEXRPCBuffer) -> None:
        buf._view = None
        buf.lease.close()
        arena = buf.arena
        if arena is None:
            return
        buf.arena = None
        left = self.live[id(arena)] = self.live[id(arena)] - 1
        if left == 0 and arena is not self.arenas[-1]:
            self.arenas.remove(arena)
            del self.live[id(arena)]
            arena.close()


class HEXRPCAllocator(LRUAllocator["HEXRPCDevice"]):
    """Sub-allocations of the session's arenas (:class:`ArenaPool`). Freed buffers are kept for
    reuse by tinygrad's LRU cache; a sub-allocation is returned to its arena when the cache is
    emptied or the device closes."""

    def _alloc(self, size: int, options: BufferSpec) -> HEXRPCBuffer:
        if options.external_ptr:
            raise RuntimeError("HEXRPC: external host pointers cannot be shared with the DSP (leases only)")
        return self.dev.hub.arenas.alloc(size, self.dev.stats)

    def _free(self, opaque: HEXRPCBuffer, options: BufferSpec):
        if opaque.owner:
            self.dev.hub.arenas.free(opaque)

    def _as_buffer(self, src: HEXRPCBuffer) -> memoryview:
        return src.host()

    def _copyin(self, dest: HEXRPCBuffer, src: memoryview):
        dest.host()[: src.nbytes] = src.cast("B")

    def _copyout(self, dest: memoryview, src: HEXRPCBuffer):
        dest.cast("B")[:] = src.host()[: dest.nbytes]

    def _offset(self, buf: HEXRPCBuffer, size: int, offset: int) -> HEXRPCBuffer:
        return HEXRPCBuffer(buf.lease, buf.offset + offset, size, owner=False)
