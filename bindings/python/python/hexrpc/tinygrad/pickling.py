"""A ``TinyJit`` pickled on HEXRPC carries its kernel-table libraries (openpilot's flow: capture
and ``pickle.dump`` at build time, ``pickle.load`` in the service, where there is no compiler).

tinygrad pickles a jit as its captured kernels: each single kernel's compiled library travels
inside it, but a HEXRPC graph's kernel table is built when the graph is made, in the process that
runs it (``hexrpc build-lib --table``: clang-19 and ld.lld-19). So importing
:mod:`hexrpc.tinygrad` registers, with ``copyreg`` (the process's pickle dispatch table; nothing
in tinygrad's installation is changed), a reducer for ``TinyJit`` that adds the tables its HEXRPC
graphs use, by :func:`~hexrpc.tinygrad.kernels.table_key` (the SHA-256 of their sources). Loading
puts them where :func:`~hexrpc.tinygrad.kernels.build_batch_library` looks first, so the graphs
of the loaded jit are made with no compiler and run in as many FastRPC calls as in the process
that pickled it. A table that is neither carried nor buildable makes its graph launch the
kernels one by one, with a warning (``HEXRPCGraph.fallback`` says why).

A pickle made by another hexrpc carries tables with that hexrpc's entry: the library's build
record is checked when it is opened, as any library's is."""

from __future__ import annotations

import copyreg
from typing import Any

from . import kernels


def tables_of(jit: Any) -> dict[str, bytes]:
    """The kernel-table libraries the HEXRPC graphs of captured ``jit`` use, by key (and those a
    jit loaded from a pickle carried in, for graphs not made yet)."""
    from tinygrad.engine.realize import graph_cache
    from tinygrad.uop.ops import Ops

    from .graph import HEXRPCGraph

    out = dict(getattr(jit, "_hexrpc_tables", {}))
    captured = getattr(jit, "captured", None)
    if captured is None:
        return out
    for call in captured.linear.src:
        ast = call.src[0]
        if ast.op is Ops.CUSTOM_FUNCTION and ast.arg == "graph":
            graph = graph_cache.get(ast)
            if isinstance(graph, HEXRPCGraph):
                for seg in graph.segments:
                    if (lib := kernels._TABLE_LIBRARIES.get(seg.table_key)) is not None:
                        out[seg.table_key] = lib
    return out


def _restore_jit(tables: dict[str, bytes], cls: Any, args: tuple) -> Any:
    """Unpickling: the tables first, then the jit as tinygrad makes it."""
    for key, lib in tables.items():
        kernels._TABLE_LIBRARIES.setdefault(key, lib)
    jit = cls(*args)
    jit._hexrpc_tables = dict(tables)
    return jit


def _reduce_jit(jit: Any):
    cls, args = jit.__reduce__()[:2]
    tables = tables_of(jit)
    if not tables:
        return cls, args
    return _restore_jit, (tables, cls, args)


def register() -> None:
    """Registers the reducer for tinygrad's jit class (idempotent). In 0.14 ``TinyJit`` is a
    factory function and the class is ``_TinyJit``; the class is taken from what the factory
    makes, so a rename inside tinygrad does not silently skip the registration."""
    from tinygrad.engine.jit import TinyJit

    copyreg.pickle(type(TinyJit(lambda: None)), _reduce_jit)
