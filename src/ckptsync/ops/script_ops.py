"""Python functions as graph ops: TF1's ``tf.py_func`` and ``tf.numpy_function`` (op
types ``PyFunc`` and ``PyFuncStateless``).

The function is called in the session's run, with the inputs' values as numpy arrays
(string tensors as ``bytes`` objects), and returns one array (or Python value) per
``Tout`` dtype. As TF: the outputs' static shapes are unknown (``set_shape`` them when
known); the ops have no gradient (``tf.gradients`` gives None through them); an
exception raised by the function becomes the error class TF maps it to
(``ValueError``/``TypeError`` -> ``InvalidArgumentError``, ``StopIteration`` ->
``OutOfRangeError``, ``NotImplementedError`` -> ``UnimplementedError``,
``MemoryError`` -> ``ResourceExhaustedError``, others -> ``UnknownError``) with
``"<ExceptionName>: <message>"`` and the traceback in its message.

Thread-safety: the function is called from the thread that runs the session, one call
per run of the op, and may be called by concurrent runs at once.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import (
    CkptsyncTypeError,
    InvalidArgumentError,
    OpError,
    OutOfRangeError,
    ResourceExhaustedError,
    UnimplementedError,
    UnknownError,
)
from ..graph import Operation, Tensor
from .array_ops import convert_to_tensor
from .registry import make_op, register

__all__ = ["py_func", "numpy_function"]
NN_EXPORTS: tuple[str, ...] = ()

_TOKENS = itertools.count()  # TF's names of registered functions: pyfunc_0, pyfunc_1...
_ERRORS: list[tuple[type[BaseException], type[OpError]]] = [
    (StopIteration, OutOfRangeError), (NotImplementedError, UnimplementedError),
    (MemoryError, ResourceExhaustedError), (ValueError, InvalidArgumentError),
    (TypeError, InvalidArgumentError),
]


def _as_output(i: int, value: Any, dt: _dtypes.DType, op: Operation) -> np.ndarray:
    a = np.asarray(value)  # as TF: no conversion (a Python float is float64)
    if dt == _dtypes.string and a.dtype.kind in "USO":
        return np.vectorize(lambda s: s.encode() if isinstance(s, str) else s,
                            otypes=[object])(a) if a.size else a.astype(object)
    if a.dtype != dt.np:
        got = "string" if a.dtype.kind in "US" else (
            _dtypes.as_dtype(a.dtype).name if a.dtype.kind in "biufc" else str(a.dtype))
        raise InvalidArgumentError(None, op, f"{i}-th value returned by {op.attrs['token']} "
                                   f"is {_tf_name(got)}, but expects {_tf_name(dt.name)}")
    return a


def _tf_name(name: str) -> str:
    return {"float32": "float", "float64": "double", "float16": "half"}.get(name, name)


def _run(ctx: Any, op: Operation, *args: Any) -> Any:
    a = op.attrs
    func: Callable[..., Any] = a["func"]
    try:
        result = func(*args)
    except Exception as e:  # noqa: BLE001 - mapped to TF's error class
        cls = next((c for t, c in _ERRORS if isinstance(e, t)), UnknownError)
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        raise cls(None, op, f"{type(e).__name__}: {e}\n{tb}") from e
    touts: list[_dtypes.DType] = a["Tout"]
    if not touts:
        return ()
    values = list(result) if isinstance(result, (list, tuple)) else [result]  # as TF's
    if len(values) != len(touts):
        raise InvalidArgumentError(None, op, f"{a['token']} returns {len(values)} values, but "
                                   f"expects to see {len(touts)} values.")
    outs = tuple(_as_output(i, v, dt, op) for i, (v, dt) in enumerate(zip(values, touts)))
    return outs[0] if len(outs) == 1 else outs


register("PyFunc", kind="stateful", not_differentiable=True)(_run)
register("PyFuncStateless", kind="stateful", not_differentiable=True)(_run)


def py_func(func: Callable[..., Any], inp: Any, Tout: Any, stateful: bool = True,  # noqa: N803
            name: str | None = None) -> Any:
    """``func`` (numpy arrays in, numpy arrays out) as an op, as TF1's ``tf.py_func``.

    Args:
        func: called with one numpy array per ``inp`` tensor when the op runs.
        inp: a list of tensors (or values converted to tensors).
        Tout: a dtype (one output) or a list/tuple of dtypes (that many; ``[]``: none).
        stateful: False gives op ``PyFuncStateless`` (TF may then merge or skip calls;
            ckptsync calls it once per run either way).

    Returns:
        A tensor of unknown shape for a single ``Tout`` dtype, else a list of them (an
        empty ``Tout`` list returns the op).

    Raises:
        TypeError: ``func`` is not callable.
        InvalidArgumentError / OutOfRangeError / ...: at run time, an exception of
            ``func`` (see the module docstring), or a result of the wrong dtype or number.
    """
    if not callable(func):
        raise CkptsyncTypeError(f"py_func: func must be callable, got {func!r}.")
    listed = isinstance(Tout, (list, tuple))
    touts = [_dtypes.as_dtype(t) for t in (Tout if listed else [Tout])]
    xs: list[Tensor] = [convert_to_tensor(x) for x in (inp if isinstance(inp, (list, tuple))
                                                        else [inp])]
    op = make_op("PyFunc" if stateful else "PyFuncStateless", xs, touts, [None] * len(touts),
                 name=name or ("PyFunc" if stateful else "PyFuncStateless"),
                 attrs={"func": func, "Tout": touts, "token": f"pyfunc_{next(_TOKENS)}"})
    if not touts:
        return op
    return list(op.outputs) if listed else op.outputs[0]


def numpy_function(func: Callable[..., Any], inp: Any, Tout: Any, stateful: bool = True,  # noqa: N803
                   name: str | None = None) -> Any:
    """``func`` over numpy arrays as an op, as TF's ``tf.numpy_function`` (the same as
    :func:`py_func`)."""
    return py_func(func, inp, Tout, stateful=stateful, name=name)
