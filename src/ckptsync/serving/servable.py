"""What is served: a signature, the variables a checkpoint must provide, and a forward pass.

TF Serving calls the thing a manager loads and serves a *servable*; its interface is the
``SignatureDef`` (named input and output tensors). Here a :class:`Servable` is stateless
with respect to parameters: ``run(params, inputs)`` receives the parameter snapshot for
that one call, so one servable answers requests on many snapshots from many threads at once
and a hot reload is a swap of the ``params`` mapping, never a mutation of the servable.

Example:
    >>> servable = GraphServable.from_model_file("model.py")  # examples/digits_mlp.py
    >>> servable.signature.inputs["x"].shape
    (None, 64)
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..graph import Graph, GraphKeys
from ..model_spec import ModeKeys, load_build_net
from ..session import Session
from ..session.plan import needed_ops

__all__ = [
    "TensorSpec",
    "Signature",
    "Servable",
    "GraphServable",
    "validate_inputs",
    "tf_dtype_name",
]

# TF's DataType enum names, as TF Serving's metadata API prints them.
_TF_DTYPE_NAMES = {
    "float16": "DT_HALF",
    "float32": "DT_FLOAT",
    "float64": "DT_DOUBLE",
    "int8": "DT_INT8",
    "int16": "DT_INT16",
    "int32": "DT_INT32",
    "int64": "DT_INT64",
    "uint8": "DT_UINT8",
    "uint16": "DT_UINT16",
    "uint32": "DT_UINT32",
    "uint64": "DT_UINT64",
    "bool": "DT_BOOL",
    "complex64": "DT_COMPLEX64",
    "complex128": "DT_COMPLEX128",
}


def tf_dtype_name(dtype: np.dtype) -> str:
    """TF's enum name for a numpy dtype, e.g. ``float32 -> "DT_FLOAT"``."""
    return _TF_DTYPE_NAMES.get(np.dtype(dtype).name, "DT_INVALID")


@dataclass(frozen=True)
class TensorSpec:
    """Name, dtype and shape of one tensor; ``None`` marks a dimension of any size.

    Attributes:
        name: the key (signature name, or checkpoint key such as ``"dense0/w"``).
        dtype: numpy dtype, e.g. ``np.dtype("float32")``.
        shape: one entry per dimension; ``None`` is unknown (usually the batch, dim 0).
    """

    name: str
    dtype: np.dtype
    shape: tuple[int | None, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(None if d is None else int(d) for d in self.shape))

    def is_compatible_with(self, shape: tuple[int, ...]) -> bool:
        """True when a concrete ``shape`` fits this spec (same rank, known dims equal)."""
        return len(shape) == len(self.shape) and all(
            want is None or want == got for want, got in zip(self.shape, shape, strict=False)
        )

    def shape_str(self) -> str:
        """The shape as TF prints it, e.g. ``[?, 64]``."""
        return "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"

    def to_json(self, tensor_name: str | None = None) -> dict[str, Any]:
        """TF Serving's ``TensorInfo`` JSON: ``dtype``, ``tensor_shape``, ``name``."""
        return {
            "dtype": tf_dtype_name(self.dtype),
            "tensor_shape": {
                "dim": [{"size": str(-1 if d is None else d), "name": ""} for d in self.shape],
                "unknown_rank": False,
            },
            "name": tensor_name if tensor_name is not None else self.name,
        }


@dataclass(frozen=True)
class Signature:
    """A ``SignatureDef``: named inputs and outputs (TF Serving's ``serving_default``).

    Attributes:
        inputs: input key -> spec; the key is what requests use.
        outputs: output key -> spec.
        tensor_names: optional key -> graph tensor name (``"x:0"``) for the metadata API.
    """

    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    tensor_names: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """TF Serving's ``SignatureDef`` JSON (``inputs``, ``outputs``, ``method_name``)."""
        return {
            "inputs": {k: s.to_json(self.tensor_names.get(k)) for k, s in self.inputs.items()},
            "outputs": {k: s.to_json(self.tensor_names.get(k)) for k, s in self.outputs.items()},
            "method_name": "tensorflow/serving/predict",
        }


DEFAULT_SIGNATURE = "serving_default"


class Servable(abc.ABC):
    """A model that answers ``run(params, inputs)`` for any compatible parameter snapshot.

    Thread-safety: implementations must allow concurrent ``run`` calls from many threads,
    each with its own (read-only) ``params``.
    """

    @property
    @abc.abstractmethod
    def signature(self) -> Signature:
        """The serving signature (inputs -> outputs)."""

    @property
    @abc.abstractmethod
    def variable_specs(self) -> Mapping[str, TensorSpec]:
        """Checkpoint key -> spec of every variable a checkpoint must provide."""

    @property
    def row_gathered_variables(self) -> frozenset[str]:
        """Checkpoint keys of the variables that ``run`` reads only by gathering rows of
        dim 0 (an embedding table): their ``params`` value may be a
        :class:`~ckptsync.blocked_array.BlockedArray` (the copy-on-write swap stores such a
        table in blocks); every other value must be an ndarray. Default: none."""
        return frozenset()

    @property
    def signatures(self) -> Mapping[str, Signature]:
        """Signature name -> signature, ``"serving_default"`` (:attr:`signature`) first;
        every one has the default's inputs (TF Serving's signature_def map)."""
        return {DEFAULT_SIGNATURE: self.signature}

    def run_signature(self, name: str, params: Mapping[str, np.ndarray],
                      inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """:meth:`run` for the signature ``name`` (one of :attr:`signatures`).

        Raises:
            KeyError: no signature of that name.
        """
        if name != DEFAULT_SIGNATURE:
            raise KeyError(name)
        return self.run(params, inputs)

    @abc.abstractmethod
    def run(
        self, params: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Runs the forward pass.

        Args:
            params: checkpoint key -> array, exactly ``variable_specs`` (read-only arrays).
            inputs: input key -> array, validated by :func:`validate_inputs`.

        Returns:
            Output key -> array, each ``[batch, ...]`` for batch-major signatures.
        """


def validate_inputs(signature: Signature, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Checks names, dtypes and shapes of request inputs against a signature.

    Args:
        signature: the servable's signature.
        inputs: input key -> array-like. Values are converted to the spec's dtype when that
            loses nothing (ints for a float input; integral floats for an int input).

    Returns:
        Input key -> C-contiguous array of the spec's dtype and a compatible shape.

    Raises:
        InvalidArgumentError: a missing or unknown input, a value that is not numeric, a
            lossy dtype conversion, a shape that does not fit, or inputs whose batch sizes
            (dim 0, when unknown in the spec) differ. The message names the input.
    """
    if not isinstance(inputs, Mapping):
        names = ", ".join(f"{k!r}: ..." for k in sorted(signature.inputs))
        raise InvalidArgumentError(
            None, None, f"inputs must be a mapping of input name to array ({{{names}}}), "
            f"got {type(inputs).__name__}")
    missing = [k for k in signature.inputs if k not in inputs]
    unknown = [k for k in inputs if k not in signature.inputs]
    if missing or unknown:
        raise InvalidArgumentError(
            None,
            None,
            f"inputs must be exactly {sorted(signature.inputs)}; missing {missing}, "
            f"unexpected {unknown}",
        )
    out: dict[str, np.ndarray] = {}
    batch: tuple[str, int] | None = None
    for key, spec in signature.inputs.items():
        arr = _convert(key, spec, inputs[key])
        if not spec.is_compatible_with(arr.shape):
            raise InvalidArgumentError(
                None,
                None,
                f"input '{key}' must have shape {spec.shape_str()}, got {list(arr.shape)}",
            )
        if spec.shape and spec.shape[0] is None:
            if batch is not None and batch[1] != arr.shape[0]:
                raise InvalidArgumentError(
                    None,
                    None,
                    f"input '{key}' has batch size {arr.shape[0]} but input '{batch[0]}' "
                    f"has {batch[1]}; all inputs must share dimension 0",
                )
            batch = (key, arr.shape[0])
        out[key] = arr
    return out


def cast_if_finite(arr: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """``arr`` (numbers) as a C-contiguous array of the floating ``dtype`` if every value
    is finite and within its range, else None. Two passes: the cast, then one sum, which
    is finite only if every value is."""
    with np.errstate(over="ignore", invalid="ignore"):
        cast = arr.astype(dtype, order="C")
        return cast if np.isfinite(np.add.reduce(cast, axis=None)) else None


def _convert(key: str, spec: TensorSpec, value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except ValueError as e:  # ragged nested lists
        raise InvalidArgumentError(
            None, None, f"input '{key}' is ragged (lists of unequal length): {e}"
        ) from None
    if arr.dtype == spec.dtype:  # (gRPC's tensor_content, v2's binary tensors)
        if arr.dtype.kind in "fc" and arr.size:
            with np.errstate(over="ignore", invalid="ignore"):  # one pass; exact if inf
                total = np.add.reduce(arr, axis=None)
            if not np.isfinite(total) and not np.all(np.isfinite(arr)):
                raise InvalidArgumentError(None, None, f"input '{key}' contains NaN or "
                                           "Infinity; expected finite numbers")
        return np.ascontiguousarray(arr)
    kind, want = arr.dtype.kind, spec.dtype.kind
    if want == "f" and kind in "iuf" and arr.size:
        cast = cast_if_finite(arr, spec.dtype)  # the common case; else the checks below
        if cast is not None:
            return cast
    ok = (
        (want in "fc" and kind in "iuf")
        or (want == "c" and kind == "c")
        or (want in "iu" and kind in "biu")
        or (want == "b" and kind == "b")
    )
    if want in "iu" and kind == "f" and arr.size and np.all(np.isfinite(arr)):
        ok = bool(np.all(arr == np.round(arr)))
    if not ok:
        given = {
            "U": "strings",
            "S": "strings",
            "O": "non-numeric values (objects, nulls or numbers too large)",
        }.get(kind, f"{arr.dtype.name} values")
        raise InvalidArgumentError(
            None, None, f"input '{key}' must be {spec.dtype.name}, got {given}"
        )
    if kind in "iuf" and want in "iu" and arr.size:  # integral floats too: 3e9 for int32
        info = np.iinfo(spec.dtype)
        if kind == "f":  # 2**bits (2**(bits-1) signed) is exact as a float; info.max
            too_big = arr.max() >= 2.0 ** (info.bits - (want == "i"))  # may round up to it
        else:
            too_big = arr.max() > info.max
        if arr.min() < info.min or too_big:
            raise InvalidArgumentError(
                None, None, f"input '{key}' has values outside the range of {spec.dtype.name}"
            )
    if kind in "fc" and arr.size and not np.all(np.isfinite(arr)):
        raise InvalidArgumentError(
            None, None, f"input '{key}' contains NaN or Infinity; expected finite numbers"
        )
    if want == "f" and kind in "iuf" and arr.size:
        big = np.finfo(spec.dtype).max
        with np.errstate(invalid="ignore"):
            finite = np.abs(arr[np.isfinite(arr)]) if kind == "f" else np.abs(arr)
        if finite.size and finite.max() > big:
            raise InvalidArgumentError(
                None, None, f"input '{key}' has values outside the range of {spec.dtype.name} "
                f"(|x| <= {big:.4g})"
            )
    return np.ascontiguousarray(arr.astype(spec.dtype))


class GraphServable(Servable):
    """A servable over a ckptsync graph built by a model file's ``build_net`` in PREDICT mode.

    The graph is built once; its ``GLOBAL_VARIABLES`` are what checkpoints must provide
    (keys are the variables' op names, e.g. ``dense0/w``), and ``ModelSpec.inputs`` ->
    ``ModelSpec.outputs`` is the signature. Each :meth:`run` runs the signature's plan
    once, as ``Session.run(outputs, feed_dict, params=...)`` would, storing nothing in
    the session; its inputs must come from :func:`validate_inputs` (they are fed as they
    are, not converted again).

    Thread-safety: :meth:`run` may be called concurrently from any number of threads.

    Args:
        build_net: ``build_net(graph, device, mode) -> ModelSpec``.
        device: TF device name, e.g. ``"cpu:0"`` or ``"/cpu:0"``.

    Raises:
        ValueError: ``build_net`` did not return a ModelSpec with inputs and outputs.
    """

    def __init__(self, build_net: Callable[..., Any], device: str = "cpu:0"):
        self.device = device
        self._graph = Graph()
        with self._graph.as_default():
            spec = build_net(self._graph, device, ModeKeys.PREDICT)
        if spec is None or not getattr(spec, "inputs", None) or not getattr(spec, "outputs", None):
            raise ValueError(
                "build_net(graph, device, mode) must return a ModelSpec with non-empty "
                f"inputs and outputs, got {spec!r}"
            )
        self._inputs = dict(spec.inputs)
        self._outputs = dict(spec.outputs)
        self._signature = Signature(
            inputs={k: _tensor_spec(k, t) for k, t in self._inputs.items()},
            outputs={k: _tensor_spec(k, t) for k, t in self._outputs.items()},
            tensor_names={k: t.name for k, t in {**self._inputs, **self._outputs}.items()},
        )
        variables = self._graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
        self._variable_specs = {
            v.op.name: TensorSpec(
                v.op.name, np.dtype(v.dtype.as_numpy_dtype), tuple(v.get_shape().as_list())
            )
            for v in variables
        }
        fetched = [*self._outputs.values()] + [
            t for outs in (getattr(spec, "extra", None) or {}).get(
                "signature_outputs", {}).values() for t in outs.values()]
        self._row_gathered = _row_gathered(variables, fetched, list(self._inputs.values()))
        if hasattr(self._graph, "finalize"):
            self._graph.finalize()
        self._session = Session(graph=self._graph)
        # One callable per signature: inputs by position, the plan resolved once.
        self._input_keys = list(self._inputs)
        self._output_keys = list(self._outputs)
        self._call = self._session.make_array_callable(
            [self._outputs[k] for k in self._output_keys],
            [self._inputs[k] for k in self._input_keys])
        # A model_fn's other export_outputs (ModelSpec.extra["signature_outputs"]).
        self._others: dict[str, tuple[Signature, list[str], Any]] = {}
        for name, outs in (getattr(spec, "extra", None) or {}).get(
                "signature_outputs", {}).items():
            if name == DEFAULT_SIGNATURE or not outs:
                continue
            sig = Signature(inputs=self._signature.inputs,
                            outputs={k: _tensor_spec(k, t) for k, t in outs.items()},
                            tensor_names={**{k: t.name for k, t in self._inputs.items()},
                                          **{k: t.name for k, t in outs.items()}})
            self._others[name] = (sig, list(outs), self._session.make_array_callable(
                list(outs.values()), [self._inputs[k] for k in self._input_keys]))

    @classmethod
    def from_model_file(cls, path: str | os.PathLike[str], device: str = "cpu:0") -> GraphServable:
        """Loads ``build_net`` from a model file and builds the PREDICT graph.

        Raises:
            ModelFileError: (from ``ckptsync.model_spec.load_build_net``) a missing or broken
            file (with a message naming it).
        """
        return cls(load_build_net(os.fspath(path)), device)

    @property
    def signature(self) -> Signature:
        return self._signature

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return {DEFAULT_SIGNATURE: self._signature,
                **{name: sig for name, (sig, _, _) in self._others.items()}}

    def run_signature(self, name: str, params: Mapping[str, np.ndarray],
                      inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if name == DEFAULT_SIGNATURE:
            return self.run(params, inputs)
        _, keys, call = self._others[name]
        return dict(zip(keys, map(np.asarray, call([inputs[k] for k in self._input_keys],
                                                    params))))

    @property
    def variable_specs(self) -> Mapping[str, TensorSpec]:
        return self._variable_specs

    @property
    def row_gathered_variables(self) -> frozenset[str]:
        return self._row_gathered

    def run(
        self, params: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        # params is the snapshot's read-only mapping (no copy); inputs were checked by
        # validate_inputs (dtype and shape), so they go in as they are.
        result = self._call([inputs[k] for k in self._input_keys], params)
        return dict(zip(self._output_keys, map(np.asarray, result)))

    def close(self) -> None:
        """Closes the session."""
        self._session.close()


def _tensor_spec(key: str, tensor: Any) -> TensorSpec:
    dims = tensor.get_shape().as_list()
    return TensorSpec(key, np.dtype(tensor.dtype.as_numpy_dtype), tuple(dims or ()))


def _row_gathered(variables: list[Any], fetched: list[Any], fed: list[Any]) -> frozenset[str]:
    """The variables a run computing ``fetched`` from ``fed`` reads only through
    ``ResourceGather`` along axis 0 (or only the shape of): never as a value."""
    ops = needed_ops(fetched, {id(t) for t in fed})
    ids = {id(op) for op in ops}
    names = {v.op.name for v in variables if id(v.op) not in ids}  # not read as a value
    gathered: set[str] = set()
    for op in ops:
        for i, t in enumerate(op.inputs):
            name = t.op.name
            if name not in names or t.op.type != "VariableV2":
                continue
            if op.type == "ResourceGather" and i == 0 and op.attrs.get("axis") == 0 \
                    and op.attrs.get("batch_dims") == 0:
                gathered.add(name)
            elif op.type != "VariableShape":
                names.discard(name)
    return frozenset(names & gathered)
