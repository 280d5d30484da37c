"""Random tensors: ``random_uniform``, ``random_normal``, ``truncated_normal``,
``random_shuffle``.

Seeds follow TF1's ``get_seed``: with a graph seed (``cs.set_random_seed``) and no op
seed, the op seed is the graph's op counter, so two processes that build the same graph
draw the same values; with neither, draws differ per session. Each op keeps its own
generator in the session and advances it on every run (a random op is stateful, as TF).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError, InvalidArgumentError
from ..graph import Operation, Tensor, get_default_graph
from ..tensor_shape import TensorShape
from .array_ops import convert_to_tensor
from .const_fold import constant_value_as_shape, has_tensor
from .registry import register, single

__all__ = ["random_uniform", "random_normal", "truncated_normal", "random_shuffle",
           "set_random_seed", "get_seed"]

DEFAULT_GRAPH_SEED = 87654321


def set_random_seed(seed: int | None) -> None:
    """Sets the default graph's seed, as ``tf.set_random_seed``."""
    get_default_graph().seed = None if seed is None else int(seed)


def get_seed(op_seed: int | None) -> tuple[int | None, int | None]:
    """``(graph_seed, op_seed)`` for a new random op, as TF1's ``random_seed.get_seed``."""
    g = get_default_graph()
    if g.seed is not None:
        return g.seed, (g._last_id if op_seed is None else int(op_seed))
    if op_seed is not None:
        return DEFAULT_GRAPH_SEED, int(op_seed)
    return None, None


def _shape(shape: Any) -> tuple[int, ...]:
    s = shape if isinstance(shape, TensorShape) else TensorShape(shape)
    if not s.is_fully_defined():
        raise CkptsyncValueError(f"Random op shape must be fully defined, got {s}.")
    return tuple(s.as_list())  # type: ignore[arg-type]


def _float_dtype(dtype: Any) -> _dtypes.DType:
    dt = _dtypes.as_dtype(dtype)
    if not dt.is_floating:
        raise CkptsyncValueError(f"Random op dtype must be floating, got {dt.name}.")
    return dt


def _run_shape(op: Operation, shape: Any) -> tuple[int, ...]:
    if shape is None:
        return op.attrs["shape"]
    dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(None, op, f"{op.type}: the shape must not be negative, got "
                                   f"{list(dims)}.")
    return dims


@register("RandomUniform", kind="stateful")
def _uniform_kernel(ctx: Any, op: Operation, shape: Any = None) -> np.ndarray:
    a = op.attrs
    u = ctx.rng(op).random(_run_shape(op, shape), dtype=np.float64)
    return (a["minval"] + u * (a["maxval"] - a["minval"])).astype(a["dtype"].np)


@register("RandomStandardNormal", kind="stateful")
def _normal_kernel(ctx: Any, op: Operation, shape: Any = None) -> np.ndarray:
    a = op.attrs
    z = ctx.rng(op).standard_normal(_run_shape(op, shape))
    return (a["mean"] + a["stddev"] * z).astype(a["dtype"].np)


@register("TruncatedNormal", kind="stateful")
def _truncated_kernel(ctx: Any, op: Operation, shape: Any = None) -> np.ndarray:
    a = op.attrs
    rng = ctx.rng(op)
    z = rng.standard_normal(_run_shape(op, shape))
    bad = np.abs(z) > 2.0
    while bad.any():
        z[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(z) > 2.0
    return (a["mean"] + a["stddev"] * z).astype(a["dtype"].np)


def _random(op_type: str, shape: Any, dtype: Any, seed: int | None, name: str | None,
            **attrs: Any) -> Tensor:
    dt = _dtypes.as_dtype(dtype) if op_type == "RandomUniformInt" else _float_dtype(dtype)
    if (isinstance(shape, Tensor) or hasattr(shape, "_as_graph_element")
            or isinstance(shape, (list, tuple)) and has_tensor(shape)):
        return _random_shaped(op_type, shape, dt, seed, name, attrs)
    shp = _shape(shape)
    s1, s2 = get_seed(seed)
    return single(op_type, [], dt, shp, name=name or op_type,
                  attrs={"shape": shp, "dtype": dt, "seed": s1, "seed2": s2, **attrs})


def _random_shaped(op_type: str, shape: Any, dt: _dtypes.DType, seed: int | None,
                   name: str | None, attrs: dict[str, Any]) -> Tensor:
    t = convert_to_tensor(shape)
    if not t.dtype.is_integer or (t.shape.ndims is not None and t.shape.ndims != 1):
        raise CkptsyncValueError(f"{op_type}: a shape tensor must be a 1-D int tensor, got "
                                 f"{t.dtype.name} {t.shape}.")
    s1, s2 = get_seed(seed)
    return single(op_type, [t], dt, constant_value_as_shape(t), name=name or op_type,
                  attrs={"shape": None, "dtype": dt, "seed": s1, "seed2": s2, **attrs})


@register("RandomUniformInt", kind="stateful", not_differentiable=True)
def _uniform_int_kernel(ctx: Any, op: Operation, shape: Any = None) -> np.ndarray:
    a = op.attrs
    if a["minval"] >= a["maxval"]:
        raise InvalidArgumentError(None, op, f"Need minval < maxval: {a['minval']} >= "
                                   f"{a['maxval']}")
    return ctx.rng(op).integers(a["minval"], a["maxval"], _run_shape(op, shape),
                                dtype=a["dtype"].np)


def random_uniform(shape: Any, minval: float = 0, maxval: float | None = None,
                   dtype: Any = _dtypes.float32, seed: int | None = None,
                   name: str | None = None) -> Tensor:
    """Uniform values in ``[minval, maxval)``, as ``tf.random_uniform``: ``shape`` of
    ``dtype`` float16/32/64 (``maxval`` defaults to 1) or int32/int64 (op
    ``RandomUniformInt``; ``maxval`` required, as TF's).

    Raises:
        ValueError: another dtype, or an integer one without ``maxval``.
        InvalidArgumentError: (at run) an integer range with ``minval >= maxval``.
    """
    dt = _dtypes.as_dtype(dtype)
    if dt.is_integer and dt in (_dtypes.int32, _dtypes.int64):
        if maxval is None:
            raise CkptsyncValueError(f"Must specify maxval for integer dtype {dt!r}")
        return _random("RandomUniformInt", shape, dt, seed, name, minval=int(minval),
                       maxval=int(maxval))
    return _random("RandomUniform", shape, dt, seed, name, minval=float(minval),
                   maxval=1.0 if maxval is None else float(maxval))


def random_normal(shape: Any, mean: float = 0.0, stddev: float = 1.0,
                  dtype: Any = _dtypes.float32, seed: int | None = None,
                  name: str | None = None) -> Tensor:
    """Normal values, as ``tf.random_normal``."""
    return _random("RandomStandardNormal", shape, dtype, seed, name, mean=float(mean),
                   stddev=float(stddev))


def truncated_normal(shape: Any, mean: float = 0.0, stddev: float = 1.0,
                     dtype: Any = _dtypes.float32, seed: int | None = None,
                     name: str | None = None) -> Tensor:
    """Normal values redrawn beyond two standard deviations, as ``tf.truncated_normal``."""
    return _random("TruncatedNormal", shape, dtype, seed, name, mean=float(mean),
                   stddev=float(stddev))


@register("RandomShuffle", kind="stateful", not_differentiable=True)
def _shuffle_kernel(ctx: Any, op: Operation, x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 0 or a.shape[0] <= 1:
        return a
    return a[ctx.rng(op).permutation(a.shape[0])]


def random_shuffle(value: Any, seed: int | None = None, name: str | None = None) -> Tensor:
    """``value`` with its first dimension in a random order, as ``tf.random_shuffle``
    (op ``RandomShuffle``; a new order on every run; seeds as the other random ops).
    ``[n, ...]`` of any dtype -> the same shape and dtype; no gradient."""
    t = convert_to_tensor(value)
    s1, s2 = get_seed(seed)
    return single("RandomShuffle", [t], t.dtype, t.shape, name=name or "RandomShuffle",
                  attrs={"seed": s1, "seed2": s2})
