"""The process's one hexrpc session (:class:`_SessionHub`, shared by every ``HEXRPC:n`` device):
where it runs (:func:`open_session`), the libraries open on it (:class:`LibraryCache`) and the
recovery policy after a DSP restart or a missed deadline (:class:`DSPRestartError`,
:data:`AUTO_RECOVERIES` per :data:`AUTO_RECOVERY_WINDOW_S`)."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

import hexrpc

from .memory import ArenaPool
from .stats import DeviceStats

def device_board() -> str:
    """``HEXRPC_BOARD``, else the board whose device-tree model matches this machine's (the same
    rule as the ``hexrpc`` tool), else ``comma-three``."""
    if board := os.environ.get("HEXRPC_BOARD"):
        return board
    for path in ("/proc/device-tree/model", "/sys/firmware/devicetree/base/model"):
        try:
            model = Path(path).read_text(errors="replace")
        except OSError:
            continue
        return hexrpc.detect_board(model) or "comma-three"
    return "comma-three"


def on_bench() -> bool:
    """Whether the device runs on the bench (``HEXRPC_BENCH`` set to anything but ``0``)."""
    return os.environ.get("HEXRPC_BENCH", "") not in ("", "0")


def open_session(bench_call_limit_ms: int | None = None):
    """The hexrpc session the device runs on: the bench with the executor when ``HEXRPC_BENCH=1``
    (its per-call limit ``bench_call_limit_ms``; ``None``: ``HEXRPC_BENCH_CALL_LIMIT_MS``, else
    the bench's 10000 ms), otherwise the device with the board ``HEXRPC_BOARD`` (unset: hexrpc
    probes for it)."""
    if on_bench():
        return hexrpc.Session.bench(executor=True, call_limit_ms=bench_call_limit_ms)
    return hexrpc.Session.open(board=device_board())


def set_bench_call_limit(ms: int) -> bool:
    """Makes the process's session, when it opens on the bench, open with a per-call limit of
    ``ms`` milliseconds (how long the bench's executor lets one DSP call run before it ends the
    DSP process: a restart; the bench's default is 10000, or ``HEXRPC_BENCH_CALL_LIMIT_MS``). The
    limit is the session's, fixed when it opens and kept by its recoveries, so it must be set
    before the first ``HEXRPC`` device opens: returns ``False`` (and changes nothing) when the
    session is already open, ``True`` otherwise. Off the bench it has no effect."""
    if ms < 1:
        raise ValueError(f"a per-call limit must be a positive number of milliseconds, not {ms}")
    with _SessionHub._lock:
        if _SessionHub._hub is not None:
            return False
        _SessionHub.bench_call_limit_ms = ms
        return True


class LibraryCache:
    """The libraries open on the process's session. The HAL holds at most
    ``hexrpc.MAX_LIBRARIES`` libraries (its fixed table) and tinygrad keeps a program for every
    kernel it ever compiled, so single-kernel libraries are kept open least-recently-used first
    and reopened on demand only past that; graph libraries are pinned while their graph lives.
    ``opens`` counts every open, ``reopens`` the opens of a kernel whose library this cache had
    closed to make room (0 in a steady state that fits the table)."""

    #: hexrpc-hal's ``MAX_LIBRARIES``.
    MAX_OPEN_LIBRARIES = hexrpc.MAX_LIBRARIES

    def __init__(self, hub: _SessionHub):
        self.hub = hub
        self.lru: OrderedDict[int, Any] = OrderedDict()
        self.pinned = 0
        self.evicted: set[int] = set()
        self.opens = 0
        self.reopens = 0

    def _make_room(self, slots: int) -> None:
        while self.lru and len(self.lru) + self.pinned + slots > self.MAX_OPEN_LIBRARIES:
            key, old = self.lru.popitem(last=False)
            self.evicted.add(key)
            old.close()
        if self.pinned + slots > self.MAX_OPEN_LIBRARIES:
            raise RuntimeError(f"HEXRPC: more than {self.MAX_OPEN_LIBRARIES} graph libraries open at once")

    def get(self, key: int, image: bytes, signature: str, stats: DeviceStats, name: str = "kernel"):
        """The open library for ``key``, opened from ``image`` if it is not (``name`` is what
        hexrpc's logs and errors call it)."""
        lib = self.lru.get(key)
        if lib is not None:
            self.lru.move_to_end(key)
            return lib
        self.hub.ensure_healthy()
        self._make_room(1)
        lib = self.hub.session.open_library(image, signature=signature, abi="v2", name=name)
        self.opens += 1
        stats.library_opens += 1
        if key in self.evicted:
            self.evicted.discard(key)
            self.reopens += 1
            stats.library_reopens += 1
        self.lru[key] = lib
        return lib

    def drop(self, key: int) -> None:
        self.evicted.discard(key)
        if (lib := self.lru.pop(key, None)) is not None:
            lib.close()

    def open_pinned(self, open_fn, stats: DeviceStats):
        """Opens a library that stays open until :meth:`unpin`."""
        self._make_room(1)
        lib = open_fn()
        self.opens += 1
        stats.library_opens += 1
        self.pinned += 1
        return lib

    def unpin(self, lib) -> None:
        self.pinned -= 1
        lib.close()

    @contextlib.contextmanager
    def reserved(self, slots: int):
        """Room for ``slots`` libraries that something else opens on the session (a model file
        run beside tinygrad: :func:`hexrpc.export.device_model`), counted as pinned while the
        ``with`` block lasts: single kernels are closed, least recently used first, to make it."""
        self._make_room(slots)
        self.pinned += slots
        try:
            yield
        finally:
            self.pinned -= slots


#: Automatic recoveries allowed per :data:`AUTO_RECOVERY_WINDOW_S` seconds before the device
#: stops recovering by itself (a kernel that restarts the DSP every time it runs would otherwise
#: loop: each recovery costs a new DSP process).
AUTO_RECOVERIES = 8
AUTO_RECOVERY_WINDOW_S = 60.0

_log = logging.getLogger("hexrpc.tinygrad")


class DSPRestartError(RuntimeError):
    """A kernel's call failed because the DSP restarted or its deadline passed. ``kernel`` names
    it, ``reason`` says why (when hexrpc knows), ``recovered`` whether the device recovered (then
    later ops run); ``__cause__`` is the hexrpc error."""

    def __init__(self, kernel: str, reason: str, recovered: bool):
        self.kernel, self.reason, self.recovered = kernel, reason, recovered
        then = "the device recovered; later ops run" if recovered else "the device did not recover (see the message)"
        super().__init__(f"HEXRPC: {kernel}: {reason}; {then}")


def restart_reason(session, err: BaseException) -> str:
    """Why the call that raised ``err`` failed: a missed deadline (from the error), the bench's
    account of why it ended the DSP process (per-call limit, fault, requested restart), else the
    error itself."""
    cause = str(getattr(err, "cause", "") or "")
    if "deadline" in cause or "deadline" in str(err):
        return f"the call passed its deadline ({err})"
    why = getattr(session, "last_restart", None)
    if why:
        return f"the DSP restarted: {why}"
    return f"the DSP restarted ({err})"


class _SessionHub:
    """The process's one hexrpc session, its library cache and its recovery policy, shared by
    every ``HEXRPC:n`` device."""

    _lock = threading.Lock()
    _hub: _SessionHub | None = None
    #: The bench's per-call limit the session opens with (:func:`set_bench_call_limit`);
    #: ``None``: ``HEXRPC_BENCH_CALL_LIMIT_MS``, else the bench's default.
    bench_call_limit_ms: int | None = None

    def __init__(self):
        self.session = open_session(self.bench_call_limit_ms)
        self.libraries = LibraryCache(self)
        self.arenas = ArenaPool(self.session)
        self.recoveries: deque[float] = deque()
        self.recovery_count = 0

    @classmethod
    def get(cls) -> _SessionHub:
        with cls._lock:
            if cls._hub is None:
                cls._hub = _SessionHub()
            return cls._hub

    def _budget_left(self) -> bool:
        now = time.monotonic()
        while self.recoveries and now - self.recoveries[0] > AUTO_RECOVERY_WINDOW_S:
            self.recoveries.popleft()
        return len(self.recoveries) < AUTO_RECOVERIES

    def recover(self, why: str) -> None:
        """Rebuilds the session (libraries reopened by hexrpc) and counts it; raises the hexrpc
        error if that fails."""
        _log.warning("HEXRPC: recovering the session: %s", why)
        self.session.recover()
        self.recoveries.append(time.monotonic())
        self.recovery_count += 1

    def ensure_healthy(self) -> None:
        """Recovers a session that is already known to need it (a failure elsewhere), before
        opening a library (not per launch: see :meth:`recovered_unsent`)."""
        if not self.session.healthy and self._budget_left():
            self.recover("the session needed recovery before a launch")

    def recovered_unsent(self, err: BaseException) -> bool:
        """True when ``err`` says the call was refused before it was sent because the session
        already needed recovery (a restart noticed elsewhere, e.g. by the listener), and the
        session has now been recovered: the caller sends the call again, once. The launch path
        thus asks nothing of the session until a call fails."""
        if not getattr(err, "unsent", False) or not self._budget_left():
            return False
        try:
            self.recover("the session needed recovery before a launch")
        except hexrpc.Error:
            return False
        return True

    def failed(self, kernel: str, err: BaseException) -> DSPRestartError:
        """The error to raise for ``kernel`` whose call failed with ``err`` (``NeedsRecovery``),
        after recovering the session when the budget allows."""
        reason = restart_reason(self.session, err)
        if not self._budget_left():
            return DSPRestartError(
                kernel,
                f"{reason}; {AUTO_RECOVERIES} recoveries in {AUTO_RECOVERY_WINDOW_S:.0f} s, no more automatic ones: "
                'call Device["HEXRPC"].recover() to go on',
                recovered=False,
            )
        try:
            self.recover(f"{kernel}: {reason}")
        except hexrpc.Error as e:
            return DSPRestartError(kernel, f"{reason}; recovery failed: {e}", recovered=False)
        return DSPRestartError(kernel, reason, recovered=True)
