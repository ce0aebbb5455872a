"""A ``TinyJit`` capture as hexrpc batches (:class:`HEXRPCGraph`): the capture's kernels built into
kernel-table libraries, their launches split into as few batches as fit (:func:`chunk_calls`),
one FastRPC call per batch per jit run, inputs and Variables updated in place."""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import hexrpc
from tinygrad.device import CompileError
from tinygrad.engine.jit import GraphRunner

from .capture import Capture, Launch
from .kernels import KernelRecord, build_batch_library, table_key
from .memory import HEXRPCBuffer

#: Capacity of one batch (hexrpc's launch ABI table, runtime/src/launch/abi.rs, as the native
#: module reports it): records, distinct leases, record bytes, kernels in one library's table.
BATCH_MAX_LAUNCHES, BATCH_MAX_LEASES, BATCH_MAX_RECORD_BYTES, BATCH_MAX_KERNELS = (
    hexrpc.MAX_BATCH_LAUNCHES,
    hexrpc.MAX_BATCH_LEASES,
    hexrpc.MAX_BATCH_RECORD_BYTES,
    hexrpc.MAX_BATCH_KERNELS,
)


def batch_record_bytes(nviews: int, nscalars: int) -> int:
    """Bytes of one batch record: u32 kernel, u16 views, u16 scalars, 12 bytes per view (lease
    index, offset, length), 8 per scalar slot."""
    return 8 + 12 * nviews + 8 * nscalars


def rename_kernel(src: str, rec: KernelRecord, new_name: str) -> tuple[str, KernelRecord]:
    """``src`` with its kernel function (and record) renamed to ``new_name``: tinygrad names
    kernels by shape, so two different kernels of one jit can share a name, and one library
    cannot hold two functions of one name."""
    return re.sub(rf"\b{re.escape(rec.name)}\b", new_name, src), KernelRecord(new_name, rec.signature)


def chunk_calls(calls: list[tuple[int, list[HEXRPCBuffer], int]]) -> list[list[int]]:
    """Splits launches ``(kernel, buffers, scalar count)``, in order, into consecutive chunks that
    each fit one batch (launches, distinct leases, record bytes)."""
    chunks: list[list[int]] = []
    cur: list[int] = []
    leases: set[int] = set()
    nbytes = 0
    for j, (_, bufs, nscalars) in enumerate(calls):
        need = {b.lease.lease_id for b in bufs}
        rb = batch_record_bytes(len(bufs), nscalars)
        if len(need) > BATCH_MAX_LEASES or rb > BATCH_MAX_RECORD_BYTES:
            raise RuntimeError(f"HEXRPC: launch {j} alone does not fit a batch ({len(need)} leases, {rb} record bytes)")
        if cur and (len(cur) == BATCH_MAX_LAUNCHES or len(leases | need) > BATCH_MAX_LEASES or nbytes + rb > BATCH_MAX_RECORD_BYTES):
            chunks.append(cur)
            cur, leases, nbytes = [], set(), 0
        cur.append(j)
        leases |= need
        nbytes += rb
    if cur:
        chunks.append(cur)
    return chunks


log = logging.getLogger("hexrpc.tinygrad")

#: Input UOps whose tinygrad ``Buffer`` a graph remembers (see ``HEXRPCGraph._input_buffer``).
INPUT_CACHE = 64


@dataclass
class _Segment:
    """Consecutive launches of a graph whose kernels share one kernel-table library."""

    calls: list[int]
    kernel_of: dict[int, int]
    signatures: list[str]
    library: Any = None
    #: :func:`~hexrpc.tinygrad.kernels.table_key` of the table's sources.
    table_key: str = ""


class HEXRPCGraph(GraphRunner):
    """Runs the kernels of one ``TinyJit`` graph batch as hexrpc batches: one library built from
    the batch's kernel sources (a kernel table), and per jit run one FastRPC call, unless the
    capture exceeds what one batch holds (:data:`BATCH_MAX_LEASES` distinct leases,
    :data:`BATCH_MAX_LAUNCHES` launches, :data:`BATCH_MAX_RECORD_BYTES` bytes of records,
    :data:`BATCH_MAX_KERNELS` kernels in a table): then the launches are split, in order, into as
    few batches (calls) as fit. Buffers are sub-allocations of a few arenas
    (:class:`ArenaPool`), so the lease limit is seldom what splits a graph. Input buffers that change between runs and bound Variables update the built records in
    place (``Batch.set_view``, ``Batch.set_scalar``); a batch is rebuilt only when a new input
    does not fit it (more distinct leases than it holds)."""

    def __init__(self, linear, input_uops=()):
        super().__init__(linear, input_uops)
        from tinygrad.device import Device

        # The HEXRPCDevice (not imported here: hexrpc.tinygrad.device imports this module).
        self.dev: Any = Device[self.device]
        self.segments: list[_Segment] = []
        sources: list[tuple[str, KernelRecord]] = []
        table: dict[Any, int] = {}
        for j, (_, prg, _, _) in enumerate(self.calls):
            if prg.key not in table and len(table) == BATCH_MAX_KERNELS:
                self._close_segment(sources)
                sources, table = [], {}
            if not self.segments or self.segments[-1].library is not None:
                self.segments.append(_Segment([], {}, []))
            seg = self.segments[-1]
            if prg.key not in table:
                src = prg.src[2].arg
                rec = KernelRecord.parse(src)
                table[prg.key] = len(sources)
                sources.append(rename_kernel(src, rec, f"{rec.name}_hk{len(sources)}"))
            seg.calls.append(j)
            seg.kernel_of[j] = table[prg.key]
        self._close_segment(sources)
        #: Why this graph launches its kernels one by one (a table that could not be built or
        #: found), or None.
        self.fallback: str | None = None
        if any(seg.library is None for seg in self.segments):
            self.fallback = self._fallback_reason
            for seg in self.segments:
                if seg.library is not None:
                    self.dev.libraries.unpin(seg.library)
                    seg.library = None
            self.dev.stats.graph_fallbacks += 1
            log.warning("HEXRPC: a graph of %d kernels launches them one by one: %s", len(self.calls), self.fallback)
        self._batches: list[tuple[list[int], Any]] = []
        self._vals: list[tuple[int, ...]] = []
        self._var_calls: list[int] = []
        self._inputs: dict[int, HEXRPCBuffer] = {}
        self._input_slots: dict[int, list[tuple[Any, list[tuple[int, int]]]]] = {}
        self._record_of: dict[int, tuple[Any, int]] = {}
        self._uop_buffers: OrderedDict[int, tuple[Any, Any]] = OrderedDict()

    def _close_segment(self, sources: list[tuple[str, KernelRecord]]) -> None:
        seg = self.segments[-1]
        seg.signatures = [rec.signature for _, rec in sources]
        seg.table_key = table_key(sources)
        try:
            image = build_batch_library(sources)
        except CompileError as e:
            # No table (no compiler here and none carried in): the graph falls back to single
            # launches (see __init__), which the kernels' own libraries make possible.
            self._fallback_reason = f"its kernel table ({len(sources)} kernels) could not be built or found: {e}"
            return
        self.dev.hub.ensure_healthy()
        seg.library = self.dev.libraries.open_pinned(
            lambda: self.dev.session.open_library(image, signature=seg.signatures[0], abi="v2", name="graph"), self.dev.stats
        )

    def _buffers(self, j: int, input_uops) -> list[HEXRPCBuffer]:
        bufs = [b._buf for b in self.calls[j][2]]
        for pos, iidx in self.uop_replace[j]:
            bufs[pos] = input_uops[iidx].buffer._buf
        return bufs

    def _build(self, bufs: list[list[HEXRPCBuffer]], vals: list[tuple[int, ...]]) -> None:
        """Builds the batches from scratch and records where each input and each call's
        scalars live in them (so later steps update records in place)."""
        self._batches = []
        where: dict[int, tuple[Any, int]] = {}
        for seg in self.segments:
            for chunk in chunk_calls([(seg.kernel_of[j], bufs[j], len(vals[j])) for j in seg.calls]):
                batch = hexrpc.Batch(seg.library, seg.signatures)
                calls = [seg.calls[i] for i in chunk]
                for j in calls:
                    r = batch.push(seg.kernel_of[j], [b.view for b in bufs[j]], list(vals[j]))
                    where[j] = (batch, r)
                    self.dev.stats.batched_nonzero_offset_views += sum(1 for b in bufs[j] if b.offset)
                self._batches.append((calls, batch))
        # input index -> for each batch that reads it, the (record, position) places naming it
        slots: dict[int, dict[int, tuple[Any, list[tuple[int, int]]]]] = {}
        for j, uses in enumerate(self.uop_replace):
            batch, r = where[j]
            for pos, iidx in uses:
                slots.setdefault(iidx, {}).setdefault(id(batch), (batch, []))[1].append((r, pos))
        self._input_slots = {iidx: list(by_batch.values()) for iidx, by_batch in slots.items()}
        self._record_of = where
        self.dev.stats.graph_rebuilds += 1

    def _input_buffer(self, uop) -> HEXRPCBuffer:
        """The device buffer behind input ``uop``. tinygrad's ``UOp.buffer`` costs microseconds
        (it walks views and looks the UOp up), so the tinygrad ``Buffer`` of each input UOp seen
        is kept, by identity, for the most recent :data:`INPUT_CACHE` UOps; the device buffer is
        read from it every step (a reallocated ``Buffer`` gives its new one)."""
        hit = self._uop_buffers.get(id(uop))
        if hit is None or hit[0] is not uop:
            hit = (uop, uop.buffer)
            self._uop_buffers[id(uop)] = hit
            if len(self._uop_buffers) > INPUT_CACHE:
                self._uop_buffers.popitem(last=False)
        return hit[1]._buf

    def _update_inputs(self, input_uops) -> bool:
        """Points the records at this step's input buffers, in place; False when a new input
        does not fit its batch (then the caller rebuilds)."""
        for iidx, slots in self._input_slots.items():
            buf = self._input_buffer(input_uops[iidx])
            if buf is self._inputs.get(iidx):
                continue
            view = buf.view
            try:
                for batch, places in slots:
                    batch.set_views(places, view)
            except hexrpc.LaunchRefused:
                return False
            self._inputs[iidx] = buf
        return True

    def _run_singly(self, input_uops, var_vals: dict[str, int]) -> float:
        """The fallback: every kernel launched on its own (one FastRPC call each)."""
        us = 0.0
        for j, (_, prg, _, dv) in enumerate(self.calls):
            vals = tuple(prg.arg.vals({**var_vals, **dv}))
            bufs = self._buffers(j, input_uops)
            if (cap := Capture.active) is not None:
                cap.launches.append(Launch(prg, bufs, vals))
            us += self.runtimes[j](*bufs, vals=vals) or 0.0
        return us

    def __call__(self, input_uops, var_vals: dict[str, int], wait=False):
        if self.fallback is not None:
            return self._run_singly(input_uops, var_vals)
        t0 = time.perf_counter_ns()
        if not self._batches or not self._update_inputs(input_uops):
            bufs = [self._buffers(j, input_uops) for j in range(len(self.calls))]
            vals = [tuple(prg.arg.vals({**var_vals, **dv})) for _, prg, _, dv in self.calls]
            self._build(bufs, vals)
            self._inputs = {iidx: input_uops[iidx].buffer._buf for iidx in self._input_slots}
            self._vals = vals
            # Calls whose scalars can change between steps: those with scalars at all.
            self._var_calls = [j for j, v in enumerate(vals) if v]
        elif self._var_calls:
            for j in self._var_calls:
                _, prg, _, dv = self.calls[j]
                new = tuple(prg.arg.vals({**var_vals, **dv}))
                old = self._vals[j]
                if new != old:
                    batch, r = self._record_of[j]
                    for i, (a, b) in enumerate(zip(old, new)):
                        if a != b:
                            batch.set_scalar(r, i, b)
                    self._vals[j] = new
        if (cap := Capture.active) is not None:
            for j, (_, prg, _, _) in enumerate(self.calls):
                cap.launches.append(Launch(prg, self._buffers(j, input_uops), self._vals[j]))
        us, run_ns = 0, 0
        hub = self.dev.hub
        profile = self.dev.profile
        for calls, batch in self._batches:
            t = time.perf_counter_ns()
            try:
                try:
                    us += self._run_batch(batch, calls, profile)
                except hexrpc.NeedsRecovery as e:
                    if not hub.recovered_unsent(e):
                        raise
                    us += self._run_batch(batch, calls, profile)
            except hexrpc.NeedsRecovery as e:
                raise hub.failed(f"graph of {len(self.calls)} kernels", e) from e
            finally:
                run_ns += time.perf_counter_ns() - t
            self.dev.stats.batch_runs += 1
            self.dev.stats.batched_launches += len(calls)
        self.dev.stats.graph_steps += 1
        self.dev.stats.graph_host_ns += time.perf_counter_ns() - t0 - run_ns
        return us / 1e6

    def _run_batch(self, batch, calls, profile) -> int:
        """One batch; with ``profile`` a list, each record's ``(kernel name, us)`` appended."""
        if profile is None:
            return batch.run(deadline_ms=self.dev.deadline_ms)
        us, times = batch.run_profiled(deadline_ms=self.dev.deadline_ms)
        if times is None:
            profile.append((None, us))
        else:
            profile.extend((self._kernel_name(j), t) for j, t in zip(calls, times))
        return us

    def _kernel_name(self, j: int) -> str:
        """tinygrad's name of the kernel of graph call ``j``."""
        names = getattr(self, "_names", None)
        if names is None:
            names = self._names = [KernelRecord.parse(prg.src[2].arg).name for _, prg, _, _ in self.calls]
        return names[j]

    def __del__(self):
        self._batches = []
        for seg in getattr(self, "segments", []):
            if seg.library is not None:
                self.dev.libraries.unpin(seg.library)
                seg.library = None
