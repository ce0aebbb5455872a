"""ONNX models prepared for tinygrad's ``OnnxRunner`` and for onnxruntime, and run on either with
every node's value in reach: what :mod:`hexrpc.compare` and ``tools/onnx_suite.py`` share.

Needs the ``onnx`` package (``pip install hexrpc[onnx]``); onnxruntime only for
:class:`OrtRun`. Both are imported when first needed, with a message naming the extra.

What preparing a model changes (:func:`prepare`)
    * Dynamic input dimensions are pinned. Exporters write a dimension they do not fix as
      ``dim_value`` -1 (paddle2onnx: the classifier's batch) or as a ``dim_param`` name (``?``,
      ``p2o.DynamicDimension.0``). tinygrad's runner compares every input dimension with the model's
      (``OnnxRunner._parse_input``): a named one binds to the first value it sees, but -1 never
      equals a real size, so the run is refused. The caller's shape is written into the graph
      input's type (a fixed dimension that disagrees is an error, not overwritten).
    * Empty tensors get an explicit empty ``raw_data``. A TensorProto with zero elements (the
      detector's Resize ``roi``, a ``Constant`` of dims ``[0]``) carries no data field at all:
      protobuf does not write an empty repeated field. tinygrad's parser requires exactly one
      (``OnnxPBParser._parse_TensorProto``: ``assert len(present_fields) == 1``) and stops with
      an ``AssertionError`` while loading the model. ``raw_data`` is an optional field in
      ``onnx.proto`` (proto2), so setting it to ``b""`` makes it present and serialised with
      length 0, and tinygrad then reads an empty tensor (for Resize's ``roi``: ``[]``, which it
      ignores as onnxruntime does outside ``tf_crop_and_resize``). A tensor without data and with
      a non-zero element count is refused (it would be an external or broken tensor).

Both changes are made to a copy; the file is never written.

How node values are taken
    :class:`TinygradRun` wraps the runner's per-node op lookup (``OnnxRunner._select_op``, which
    the runner calls once per node of its graph, in order) so that right after a selected node's
    op has built its outputs they are realized on the device and copied to numpy; nodes of
    subgraphs (``If``, ``Loop``) belong to other runner instances and are not taken. Realizing a
    node's outputs makes them kernel boundaries: the kernels differ from those of an uncaptured
    run (which fuses across nodes). After the run the number of lookups must equal the graph's
    node count, or the run is refused as a tinygrad this module does not know.
    :class:`OrtRun` adds the selected nodes' outputs to the graph's outputs (untyped: onnxruntime
    infers them) and runs with graph optimizations off, so every node is computed as written.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "MAX_MODEL_BYTES",
    "ModelError",
    "NodeInfo",
    "OrtRun",
    "PreparedModel",
    "TinygradRun",
    "fill_empty_tensors",
    "pin_input_dims",
    "prepare",
    "random_inputs",
    "require",
    "check_shape",
    "check_seed",
    "cache_dirs",
    "check_cache_dirs",
    "CacheError",
    "UnsupportedModel",
    "MAX_DIM",
    "MAX_INPUT_ELEMENTS",
]

#: Largest model file read (bytes): a bound on what a mistaken path can make the tool load.
MAX_MODEL_BYTES = 2 << 30


#: Largest dimension of an input shape (an ONNX dimension is an int64; this bounds it well below).
MAX_DIM = (1 << 31) - 1
#: Most elements of one input: 2^31 (8 GiB of float32), beyond what a run here or on a device can
#: hold; a larger shape is refused before anything is allocated.
MAX_INPUT_ELEMENTS = 1 << 31


class ModelError(Exception):
    """A model, an input shape or a missing package makes the comparison impossible (the
    command's exit status 2)."""


class UnsupportedModel(ModelError):
    """tinygrad's ONNX runner cannot load the model or has no implementation of one of its ops
    (an unknown opset domain, an op it lacks): the model is not one the comparison can run (exit
    status 2), which is not a failure of the device under test."""


class CacheError(ModelError):
    """A directory the comparison's tools write their caches to cannot be written (an
    environment error, the command's exit status 2; :func:`cache_dirs` says which and how to
    move it)."""


def check_shape(name: str, shape) -> tuple[int, ...]:
    """``shape`` as a tuple of ints, or :class:`ModelError` naming ``name`` and the limit: every
    dimension an int from 1 to :data:`MAX_DIM`, at most :data:`MAX_INPUT_ELEMENTS` elements."""
    dims = tuple(shape)
    if not dims:
        raise ModelError(f"input {name}: an empty shape")
    for k, d in enumerate(dims):
        if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= MAX_DIM:
            raise ModelError(f"input {name}: dimension {k} is {d!r}; each must be an integer from 1 to {MAX_DIM}")
    n = 1
    for d in dims:
        n *= d
    if n > MAX_INPUT_ELEMENTS:
        raise ModelError(f"input {name}: {'x'.join(map(str, dims))} is {n} elements, more than {MAX_INPUT_ELEMENTS}")
    return dims


def check_seed(seed) -> int:
    """``seed`` if it is an int from 0 to 2^64 - 1 (numpy's generator takes no negative seed),
    else :class:`ModelError`."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
        raise ModelError(f"seed {seed!r}: must be an integer from 0 to {(1 << 64) - 1}")
    return seed


def cache_dirs() -> list[tuple[str, Path, str]]:
    """Where the comparison's tools write, as (what, directory, how to move it): tinygrad's
    kernel cache (``CACHEDB``, else ``$XDG_CACHE_HOME`` or ``~/.cache``, then ``tinygrad``; none
    when ``CACHELEVEL=0``) and the bench's build cache of its DSP shell (``HEXRPC_EXEC_CACHE``,
    else ``$XDG_CACHE_HOME`` or ``~/.cache``, then ``hexrpc/exec-build``). onnxruntime writes no
    cache of its own."""
    home = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path(os.path.expanduser("~")) / ".cache"
    out = []
    if os.environ.get("CACHELEVEL", "").strip() != "0":
        db = os.environ.get("CACHEDB")
        out.append(("tinygrad's cache", Path(db).absolute().parent if db else home / "tinygrad", "CACHEDB=FILE, XDG_CACHE_HOME=DIR or CACHELEVEL=0"))
    exec_cache = os.environ.get("HEXRPC_EXEC_CACHE")
    out.append(("the bench's build cache", Path(exec_cache) if exec_cache else home / "hexrpc" / "exec-build", "HEXRPC_EXEC_CACHE=DIR or XDG_CACHE_HOME=DIR"))
    return out


def check_cache_dirs() -> None:
    """Raises :class:`CacheError` for the first of :func:`cache_dirs` that cannot be created or
    written (a file is created in it and removed)."""
    for what, d, how in cache_dirs():
        try:
            d.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=d):
                pass
        except OSError as e:
            raise CacheError(f"environment: {what} directory {d} is not writable ({e.strerror or e}); set {how}") from None


def require(module: str, extra: str = "onnx"):
    """Imports ``module`` or raises :class:`ModelError` saying how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ModelError(
            f"{module} is not installed ({e}); install it with `pip install {module}` or `pip install 'hexrpc[{extra}]'`"
        ) from None


# -------------------------------------------------------------------------------------------------
# Preparing


@dataclass(frozen=True)
class NodeInfo:
    """One node of the main graph: its position, op type, name and outputs (``""``: an omitted
    optional output)."""

    index: int
    op: str
    name: str
    outputs: tuple[str, ...]


@dataclass
class PreparedModel:
    """A model ready for both runners: the edited proto, its bytes, the graph inputs (name ->
    (shape, numpy dtype)) in graph order, its nodes, and what preparing changed (for the report)."""

    proto: Any
    data: bytes
    inputs: dict[str, tuple[tuple[int, ...], np.dtype]]
    nodes: list[NodeInfo]
    pinned: dict[str, tuple[Any, ...]]
    filled: list[str]

    @property
    def outputs(self) -> list[str]:
        return [o.name for o in self.proto.graph.output]


def _tensor_protos(graph) -> Iterator[Any]:
    """Every TensorProto of ``graph`` and its subgraphs: initializers and tensor attributes."""
    onnx = require("onnx")
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            elif attr.type == onnx.AttributeProto.TENSORS:
                yield from attr.tensors
            elif attr.type == onnx.AttributeProto.GRAPH:
                yield from _tensor_protos(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _tensor_protos(g)


_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def fill_empty_tensors(model) -> list[str]:
    """Gives every zero-element TensorProto of ``model`` without a data field an explicit empty
    ``raw_data`` (see the module documentation); returns their names (``<unnamed>`` for an
    anonymous one). Raises :class:`ModelError` for a tensor with elements but no data."""
    filled = []
    for t in _tensor_protos(model.graph):
        if t.data_location == 1 or any(t.HasField(f) if f == "raw_data" else len(getattr(t, f)) for f in _DATA_FIELDS):
            continue
        if int(np.prod(t.dims, dtype=np.int64)) != 0:
            raise ModelError(f"tensor {t.name or '<unnamed>'} of dims {list(t.dims)} has no data")
        t.raw_data = b""
        filled.append(t.name or "<unnamed>")
    return filled


def _dim_text(d) -> Any:
    if d.HasField("dim_value"):
        return d.dim_value
    if d.HasField("dim_param"):
        return d.dim_param
    return None


def pin_input_dims(model, shapes: Mapping[str | None, tuple[int, ...]]) -> dict[str, tuple[Any, ...]]:
    """Writes the shapes of ``shapes`` (input name -> shape; the key ``None`` stands for the only
    input) into the graph inputs' types. Returns, per input whose type changed, the dimensions it
    had. Raises :class:`ModelError` for an unknown input, a rank or a fixed dimension that
    disagrees, or an input left with a dimension not fixed."""
    graph = model.graph
    init = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in init]
    names = [i.name for i in inputs]
    shapes = dict(shapes)
    if None in shapes:
        if len(inputs) != 1:
            raise ModelError(f"the model has {len(inputs)} inputs ({', '.join(names)}): give --input NAME=SHAPE for each")
        shapes[names[0]] = shapes.pop(None)
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        raise ModelError(f"no graph input named {', '.join(map(str, unknown))} (inputs: {', '.join(names)})")
    for name, shape in shapes.items():
        shapes[name] = check_shape(name, shape)
    pinned: dict[str, tuple[Any, ...]] = {}
    for vi in inputs:
        tt = vi.type.tensor_type
        dims = tt.shape.dim
        was = tuple(_dim_text(d) for d in dims)
        want = shapes.get(vi.name)
        if want is None:
            if any(not isinstance(d, int) or d <= 0 for d in was):
                raise ModelError(f"input {vi.name} has dimensions {list(was)} that are not fixed: give --input {vi.name}=SHAPE")
            continue
        if len(want) != len(was):
            raise ModelError(f"input {vi.name} has rank {len(was)} ({list(was)}), the shape given has {len(want)}")
        for k, (d, w) in enumerate(zip(was, want)):
            if isinstance(d, int) and d > 0 and d != w:
                raise ModelError(f"input {vi.name} dimension {k} is fixed at {d} in the model, not {w}")
        if was != tuple(want):
            for d, w in zip(dims, want):
                d.Clear()
                d.dim_value = w
            pinned[vi.name] = was
    return pinned


def prepare(path: str | os.PathLike, shapes: Mapping[str | None, tuple[int, ...]]) -> PreparedModel:
    """Loads the model at ``path`` (at most :data:`MAX_MODEL_BYTES`; external data beside it is
    not supported) and prepares it (see the module documentation)."""
    onnx = require("onnx")
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_MODEL_BYTES + 1)
    except OSError as e:
        raise ModelError(f"cannot read {p}: {e.strerror or e}") from None
    if len(raw) > MAX_MODEL_BYTES:
        raise ModelError(f"{p} is larger than {MAX_MODEL_BYTES} bytes")
    try:
        model = onnx.load_model_from_string(raw)
    except Exception as e:  # noqa: BLE001  (protobuf's DecodeError and friends)
        raise ModelError(f"{p} is not an ONNX model: {e}") from None
    if not model.graph.node:
        raise ModelError(f"{p}: the graph has no nodes (is it an ONNX model?)")
    if any(t.data_location == 1 for t in model.graph.initializer):
        raise ModelError(f"{p}: tensors with external data are not supported")
    pinned = pin_input_dims(model, shapes)
    filled = fill_empty_tensors(model)
    init = {t.name for t in model.graph.initializer}
    inputs = {}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        tt = vi.type.tensor_type
        try:
            dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except Exception:  # noqa: BLE001  (onnx raises KeyError or ValueError by version)
            raise ModelError(f"input {vi.name} has element type {tt.elem_type}, which has no numpy dtype") from None
        inputs[vi.name] = (check_shape(vi.name, tuple(d.dim_value for d in tt.shape.dim)), dt)
    nodes = [NodeInfo(i, n.op_type, n.name, tuple(n.output)) for i, n in enumerate(model.graph.node)]
    return PreparedModel(model, model.SerializeToString(), inputs, nodes, pinned, filled)


def random_inputs(inputs: Mapping[str, tuple[tuple[int, ...], np.dtype]], seed: int) -> dict[str, np.ndarray]:
    """One array per input, in the given order, from one generator seeded with ``seed``: floating
    inputs uniform in [-1, 1] (drawn in float64, then cast), integer inputs uniform in [0, 4),
    booleans fair coins."""
    rng = np.random.default_rng(check_seed(seed))
    out = {}
    for name, (shape, dt) in inputs.items():
        if dt.kind == "f":
            out[name] = rng.uniform(-1.0, 1.0, size=shape).astype(dt)
        elif dt.kind in "iu":
            out[name] = rng.integers(0, 4, size=shape).astype(dt)
        elif dt.kind == "b":
            out[name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            raise ModelError(f"input {name} of dtype {dt} cannot be drawn at random")
    return out


# -------------------------------------------------------------------------------------------------
# Running


def to_numpy(value: Any) -> Any:
    """A node value as numpy: an array, a list of arrays for a sequence, ``None`` for an absent
    optional value."""
    from tinygrad import Tensor

    if value is None:
        return None
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, (list, tuple)):
        return [to_numpy(v) for v in value]
    return np.asarray(value)


def to_device(value: Any, device: str) -> Any:
    """An input value on ``device``: arrays as tensors, sequences element by element, ``None``
    as it is."""
    from tinygrad import Tensor

    if value is None or isinstance(value, Tensor):
        return value
    if isinstance(value, (list, tuple)):
        return [to_device(v, device) for v in value]
    return Tensor(np.asarray(value), device=device)


def _is_device_error(e: BaseException) -> bool:
    """Whether ``e`` came from hexrpc (the device under test), not from tinygrad's parser."""
    import hexrpc

    if isinstance(e, hexrpc.Error):
        return True
    try:
        from hexrpc.tinygrad.session import DSPRestartError
    except ImportError:  # tinygrad's device module cannot load: not a device error either
        return False
    return isinstance(e, DSPRestartError)


class TinygradRun:
    """Runs a prepared model with tinygrad's ``OnnxRunner`` on ``device`` (tinygrad's default
    device while parsing and running, so initializers and the tensors ops create land there).
    The model is written to a temporary file, which tinygrad reads through its DISK device; the
    file lives as long as this object (the parser's tensors read it when first realized)."""

    def __init__(self, model: PreparedModel | bytes, device: str):
        from tinygrad.helpers import Context
        from tinygrad.nn.onnx import OnnxRunner

        self.device = device
        data = model.data if isinstance(model, PreparedModel) else model
        # Kept while the runner lives: the parser leaves tensors that read the file lazily.
        self._dir = tempfile.TemporaryDirectory(prefix="hexrpc-onnx-")
        path = Path(self._dir.name) / "model.onnx"
        path.write_bytes(data)
        with Context(DEV=device):
            try:
                self.runner = OnnxRunner(path)
            except Exception as e:  # noqa: BLE001  (the parser raises anything on a model it cannot read)
                if _is_device_error(e):
                    raise
                raise UnsupportedModel(f"tinygrad's ONNX runner cannot load the model: {type(e).__name__}: {e}") from None

    def inputs(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """``arrays`` as realized tensors on the device."""
        from tinygrad import Tensor

        return {k: Tensor(v, device=self.device).realize() for k, v in arrays.items()}

    def run(
        self,
        arrays: Mapping[str, np.ndarray],
        capture: Iterable[int] = (),
        around_node: Callable[[int], AbstractContextManager[Any]] | None = None,
        into: dict[int, list[Any]] | None = None,
    ) -> tuple[dict[str, Any], dict[int, list[Any]]]:
        """One run on ``arrays``: (graph outputs, the outputs of each node in ``capture`` by node
        index). ``around_node(i)``, when given, is entered while node ``i``'s op builds its
        outputs and, for a captured node, while they are realized and copied out: a seam for tests
        and instruments that need to know which node the device is working on. ``into``, when
        given, is the dict the node outputs are put in as each node completes, so a caller keeps
        the values of the nodes before one that raised. An op tinygrad's runner has no
        implementation of raises :class:`UnsupportedModel` naming the node."""
        from tinygrad import Tensor
        from tinygrad.helpers import Context

        runner = self.runner
        want = set(capture)
        taken: dict[int, list[np.ndarray | None]] = {} if into is None else into
        counter = itertools.count()
        lookup = type(runner)._select_op

        def select(op, opset):
            i = next(counter)
            try:
                fn = lookup(runner, op, opset)
            except Exception as e:  # noqa: BLE001  (NotImplementedError, or the registry's own errors)
                raise UnsupportedModel(f"node {i} ({op}, opset {opset}): tinygrad's ONNX runner has no implementation: {type(e).__name__}: {e}") from None

            def node(*args, **kwargs):
                with around_node(i) if around_node else contextlib.nullcontext():
                    ret = fn(*args, **kwargs)
                    if i in want:
                        outs = ret if isinstance(ret, tuple) else (ret,)
                        ts = [t for t in outs if isinstance(t, Tensor)]
                        if ts:
                            Tensor.realize(*ts)
                        taken[i] = [to_numpy(t) for t in outs]
                return ret

            return node

        runner._select_op = select
        try:
            with Context(DEV=self.device):
                outs = runner({k: to_device(v, self.device) for k, v in arrays.items()})
                result = {k: to_numpy(v) for k, v in outs.items()}
        finally:
            del runner._select_op
        looked_up = next(counter)
        if looked_up != len(runner.graph_nodes):
            raise RuntimeError(
                f"tinygrad's OnnxRunner looked up {looked_up} ops for {len(runner.graph_nodes)} nodes: "
                "this tinygrad runs nodes differently from 0.14 (node values cannot be matched to nodes)"
            )
        return result, taken


class OrtRun:
    """Runs a prepared model with onnxruntime (CPU, graph optimizations off), the outputs of the
    nodes it is asked for added to the graph's outputs."""

    def __init__(self, model: PreparedModel, capture: Iterable[int] = ()):
        onnx = require("onnx")
        ort = require("onnxruntime")
        proto = onnx.ModelProto()
        proto.CopyFrom(model.proto)
        have = {o.name for o in proto.graph.output}
        self.capture = sorted(set(capture))
        for i in self.capture:
            for name in model.nodes[i].outputs:
                if name and name not in have:
                    proto.graph.output.append(onnx.ValueInfoProto(name=name))
                    have.add(name)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001  (onnxruntime's errors have no common base)
            raise ModelError(f"onnxruntime refused the model: {e}") from None
        self.model = model

    def run(self, arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[int, list[np.ndarray | None]]]:
        """(graph outputs, captured nodes' outputs by node index), as :meth:`TinygradRun.run`."""
        names = [o.name for o in self.session.get_outputs()]
        try:
            values = dict(zip(names, self.session.run(names, dict(arrays))))
        except Exception as e:  # noqa: BLE001  (onnxruntime's errors have no common base)
            raise ModelError(f"onnxruntime could not run the model: {e}") from None
        outs = {k: values[k] for k in self.model.outputs}
        taken = {i: [values.get(n) if n else None for n in self.model.nodes[i].outputs] for i in self.capture}
        return outs, taken
