"""Run-time checks, as TF1's ``check_ops`` and ``tf.Assert``: ``assert_equal``,
``assert_less``, ``assert_positive``, ``assert_rank``, ``assert_type``... and
``check_numerics``.

Each ``assert_*`` returns an op to run (fetch it, or make other ops wait on it with
``tf.control_dependencies([op])``); when it runs and the condition is False it raises
``InvalidArgumentError`` with TF's message, ``assertion failed: [<message>] [Condition
x < y did not hold element-wise:] [x (x:0) = ] [<first 3 values>] [y (y:0) = ] [...]``.
As TF, a check whose inputs are known at graph-build time is made then (a failing one
raises ``InvalidArgumentError`` at once, before any session), and rank and dtype checks
that the static shape answers return a ``NoOp`` or raise ``ValueError``/``TypeError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import Operation, Tensor, control_dependencies, name_scope
from .array_ops import convert_to_tensor, identity, shape
from .const_fold import constant_value
from .manip_ops import rank as _rank
from .math_ops import equal, greater, greater_equal, less, less_equal, not_equal
from .reduction_ops import reduce_all
from .registry import make_op, register
from .state_ops import no_op
from .tensor_format import summarize_v1

__all__ = ["Assert", "assert_equal", "assert_none_equal", "assert_less", "assert_less_equal",
           "assert_greater", "assert_greater_equal", "assert_positive", "assert_negative",
           "assert_non_negative", "assert_non_positive", "assert_rank", "assert_rank_at_least",
           "assert_type", "assert_integer", "assert_scalar", "check_numerics",
           "verify_tensor_all_finite"]
NN_EXPORTS: tuple[str, ...] = ()


# --------------------------------------------------------------------- Assert
@register("Assert", kind="stateful")
def _assert_kernel(ctx: Any, op: Operation, cond: Any, *data: Any) -> None:
    c = np.asarray(cond)
    if c.ndim != 0:
        raise InvalidArgumentError(None, op, f"In[0] should be a scalar: {list(c.shape)}")
    if not bool(c):
        n = op.attrs["summarize"]
        raise InvalidArgumentError(None, op, "assertion failed: " + " ".join(
            f"[{summarize_v1(d, n)}]" for d in data))
    return None


def Assert(condition: Any, data: Any, summarize: int | None = None,  # noqa: N802
           name: str | None = None) -> Operation:
    """An op that raises ``InvalidArgumentError`` when it runs with ``condition`` False,
    as TF1's ``tf.Assert`` (op ``Assert``).

    Args:
        condition: a scalar ``bool`` tensor.
        data: tensors (any dtypes) and strings written in the message, each as
            ``[first summarize values]`` (3 by default; negative: all).

    Raises:
        TypeError: ``condition`` is not bool.
        ValueError: ``condition`` is statically not a scalar.
    """
    with name_scope(name, "Assert"):
        c = convert_to_tensor(condition, name="Condition")
        if c.dtype != _dtypes.bool:
            raise CkptsyncTypeError(f"Assert: condition must be bool, got {c.dtype.name}.")
        if c.shape.ndims not in (None, 0):
            raise CkptsyncValueError(f"Shape must be rank 0 but is rank {c.shape.ndims} for "
                                     f"the condition of Assert, shape {c.shape}.")
        xs = [convert_to_tensor(d) for d in (data if isinstance(data, (list, tuple)) else [data])]
        return make_op("Assert", [c, *xs], [], [], name="Assert",
                       attrs={"summarize": 3 if summarize is None else int(summarize)})


def _static_text(x: Any) -> str:
    if not isinstance(x, Tensor):
        return str(x)
    v = constant_value(x)
    return str(x) if v is None else str(v)


def _assert_static(ok: bool, data: list[Any]) -> None:
    if not ok:
        raise InvalidArgumentError(None, None, "\n".join(_static_text(d) for d in data))


def _prefix(message: Any) -> str:
    return f"{message}.  " if message else ""


# --------------------------------------------------------------------- binary asserts
def _binary(sym: str, opname: str, op_func: Callable[..., Tensor],
            static_func: Callable[..., Any], x: Any, y: Any, data: Any, summarize: Any,
            message: Any, name: Any) -> Operation:
    with name_scope(name, opname):
        xt = convert_to_tensor(x, name="x")
        yt = convert_to_tensor(y, name="y")
        if data is None:
            data = [f"Condition x {sym} y did not hold element-wise:", f"x ({xt.name}) = ", xt,
                    f"y ({yt.name}) = ", yt]
        if message is not None:
            data = [message, *data]
        condition = reduce_all(op_func(xt, yt))
        xs, ys = constant_value(xt), constant_value(yt)
        if xs is not None and ys is not None:
            _assert_static(bool(np.all(static_func(xs, ys))), list(data))
        return Assert(condition, data, summarize=summarize)


def _binary_assert(sym: str, opname: str, op_func: Callable[..., Tensor],
                   static_func: Callable[..., Any]) -> Callable[..., Operation]:
    def check(x: Any, y: Any, data: Any = None, summarize: int | None = None,
              message: str | None = None, name: str | None = None) -> Operation:
        return _binary(sym, opname, op_func, static_func, x, y, data, summarize, message,
                       name)

    check.__name__ = check.__qualname__ = opname
    check.__doc__ = (f"An op checking ``x {sym} y`` for every (broadcast) element, as TF1's "
                     f"``tf.{opname}``; see the module docstring.")
    return check


assert_none_equal = _binary_assert("!=", "assert_none_equal", not_equal, np.not_equal)
assert_less = _binary_assert("<", "assert_less", less, np.less)
assert_less_equal = _binary_assert("<=", "assert_less_equal", less_equal, np.less_equal)
assert_greater = _binary_assert(">", "assert_greater", greater, np.greater)
assert_greater_equal = _binary_assert(">=", "assert_greater_equal", greater_equal,
                                      np.greater_equal)


def assert_equal(x: Any, y: Any, data: Any = None, summarize: int | None = None,
                 message: str | None = None, name: str | None = None) -> Operation:
    """An op checking ``x == y`` for every (broadcast) element, as TF1's
    ``tf.assert_equal`` (the same tensor twice: a ``NoOp``); see the module docstring."""
    with name_scope(name, "assert_equal"):  # as TF's: a scope of its own for this test
        if x is y:
            return no_op()
    return _binary("==", "assert_equal", equal, np.equal, x, y, data, summarize, message, name)


def _sign_assert(opname: str, cond_text: str, x: Any, data: Any, summarize: Any,
                 message: Any, name: Any, zero_first: bool, strict: bool) -> Operation:
    prefix = _prefix(message)
    with name_scope(name, opname):
        xt = convert_to_tensor(x, name="x")
        if data is None:
            data = [prefix, f"Condition x {cond_text} 0 did not hold element-wise:",
                    f"x ({xt.name}) = ", xt]
            if opname == "assert_non_positive":  # TF's list lacks a comma here
                data = [prefix, f"Condition x <= 0 did not hold element-wise:x ({xt.name}) = ",
                        xt]
        zero = convert_to_tensor(np.zeros((), xt.dtype.np), name="Const")
        check = assert_less if strict else assert_less_equal
        return check(zero, xt, data=data, summarize=summarize) if zero_first else check(
            xt, zero, data=data, summarize=summarize)


def assert_positive(x: Any, data: Any = None, summarize: int | None = None,
                    message: str | None = None, name: str | None = None) -> Operation:
    """An op checking ``x > 0`` everywhere, as TF1's ``tf.assert_positive``."""
    return _sign_assert("assert_positive", ">", x, data, summarize, message, name, True, True)


def assert_negative(x: Any, data: Any = None, summarize: int | None = None,
                    message: str | None = None, name: str | None = None) -> Operation:
    """An op checking ``x < 0`` everywhere, as TF1's ``tf.assert_negative``."""
    return _sign_assert("assert_negative", "<", x, data, summarize, message, name, False, True)


def assert_non_negative(x: Any, data: Any = None, summarize: int | None = None,
                        message: str | None = None, name: str | None = None) -> Operation:
    """An op checking ``x >= 0`` everywhere, as TF1's ``tf.assert_non_negative``."""
    return _sign_assert("assert_non_negative", ">=", x, data, summarize, message, name, True,
                        False)


def assert_non_positive(x: Any, data: Any = None, summarize: int | None = None,
                        message: str | None = None, name: str | None = None) -> Operation:
    """An op checking ``x <= 0`` everywhere, as TF1's ``tf.assert_non_positive``."""
    return _sign_assert("assert_non_positive", "<=", x, data, summarize, message, name, False,
                        False)


# --------------------------------------------------------------------- rank and type
def _rank_assert(opname: str, what: str, static_ok: Callable[[int, int], bool],
                 dynamic: Callable[..., Tensor], x: Any, rank: Any, data: Any, summarize: Any,
                 message: Any, name: Any) -> Operation:
    with name_scope(name, opname):
        xt = convert_to_tensor(x, name="x")
        rt = convert_to_tensor(rank, name="rank")
        prefix = _prefix(message)
        if rt.dtype != _dtypes.int32:
            raise CkptsyncTypeError(f"{rt.name} must be of type <dtype: 'int32'>; got "
                                    f"<dtype: '{rt.dtype.name}'>")
        if data is None:
            data = [prefix, f"Tensor {xt.name} must have {what}", rt, "Received shape: ",
                    shape(xt)]
        rs = constant_value(rt)
        if rs is not None:
            if np.ndim(rs) != 0:
                raise CkptsyncValueError("Rank must be a scalar.")
            if xt.shape.ndims is not None:
                if not static_ok(xt.shape.ndims, int(rs)):
                    raise CkptsyncValueError(
                        f"{prefix}Tensor {xt.name} must have {what} {int(rs)}.  Received rank "
                        f"{xt.shape.ndims}, shape {xt.shape}")
                return no_op(name="static_checks_determined_all_ok")
        condition = dynamic(_rank(xt), rt)
        if rs is None:
            check = assert_rank(rt, 0, data=["Rank must be a scalar. Received rank: ", rt])
            with control_dependencies([check]):
                condition = identity(condition)
        return Assert(condition, data, summarize=summarize)


def assert_rank(x: Any, rank: Any, data: Any = None, summarize: int | None = None,
                message: str | None = None, name: str | None = None) -> Operation:
    """Checks that ``x`` has rank ``rank`` (int32), as TF1's ``tf.assert_rank``: a
    ``NoOp`` when the static shape says so, ``ValueError`` when it says otherwise, else
    an op checking at run time.

    Raises:
        ValueError: the static rank differs; ``rank`` is not a scalar.
        TypeError: ``rank`` is not int32.
    """
    return _rank_assert("assert_rank", "rank", lambda a, r: a == r, equal, x, rank, data,
                        summarize, message, name)


def assert_rank_at_least(x: Any, rank: Any, data: Any = None, summarize: int | None = None,
                         message: str | None = None, name: str | None = None) -> Operation:
    """Checks that ``x`` has rank ``>= rank``, as TF1's ``tf.assert_rank_at_least``."""
    return _rank_assert("assert_rank_at_least", "rank at least", lambda a, r: a >= r,
                        greater_equal, x, rank, data, summarize, message, name)


def assert_type(tensor: Any, tf_type: Any, message: str | None = None,
                name: str | None = None) -> Operation:
    """A ``NoOp`` if ``tensor`` has dtype ``tf_type``, as TF1's ``tf.assert_type``.

    Raises:
        TypeError: it has another dtype (names the tensor and both dtypes).
    """
    dt = _dtypes.as_dtype(tf_type)
    with name_scope(name, "assert_type"):
        t = convert_to_tensor(tensor, name="tensor")
        if t.dtype != dt:
            raise CkptsyncTypeError(f"{_prefix(message)}{t.name} must be of type {dt!r}; got "
                                    f"{t.dtype!r}")
        return no_op("statically_determined_correct_type")


def assert_integer(x: Any, message: str | None = None, name: str | None = None) -> Operation:
    """A ``NoOp`` if ``x`` has an integer dtype, as TF1's ``tf.assert_integer``.

    Raises:
        TypeError: it does not.
    """
    with name_scope(name, "assert_integer"):
        t = convert_to_tensor(x, name="x")
        if not t.dtype.is_integer:
            raise CkptsyncTypeError(f'{_prefix(message)}Expected "x" to be integer type.  '
                                    f"Found: {t.name} of dtype {t.dtype}")
        return no_op("statically_determined_was_integer")


def assert_scalar(tensor: Any, name: str | None = None, message: str | None = None) -> Tensor:
    """``tensor`` itself if its static shape is a scalar, as TF1's ``tf.assert_scalar``.

    Raises:
        ValueError: it is not (or its rank is unknown).
    """
    with name_scope(name, "assert_scalar") as scope:
        t = convert_to_tensor(tensor, name=scope)
        if t.shape.ndims != 0:
            raise CkptsyncValueError(f"{_prefix(message)}Expected scalar shape for {t.name}, "
                                     f"saw shape: {t.shape}.")
        return t


# --------------------------------------------------------------------- check_numerics
def _check_numerics_grad(op: Operation, g: Tensor | None) -> list[Any]:
    if g is None:
        return [None]
    return [check_numerics(g, "Not a number (NaN) or infinity (Inf) values detected in "
                              "gradient. " + op.attrs["message"])]


@register("CheckNumerics", kind="stateful", grad=_check_numerics_grad)
def _check_numerics_kernel(ctx: Any, op: Operation, x: Any) -> Any:
    a = np.asarray(x)
    nan, inf = bool(np.isnan(a).any()), bool(np.isinf(a).any())
    if nan or inf:
        what = "Inf and NaN" if nan and inf else "NaN" if nan else "Inf"
        raise InvalidArgumentError(None, op, f"{op.attrs['message']} : Tensor had {what} "
                                   "values")
    return a


def check_numerics(tensor: Any, message: str, name: str | None = None) -> Tensor:
    """``tensor`` unchanged, raising ``InvalidArgumentError`` (``"<message> : Tensor had
    NaN values"``, or ``Inf``, or ``Inf and NaN``) at run time if it has any, as TF1's
    ``tf.check_numerics`` (op ``CheckNumerics``). Its gradient checks the gradient.

    Raises:
        TypeError: ``tensor`` is not floating.
    """
    t = convert_to_tensor(tensor)
    if not t.dtype.is_floating:
        raise CkptsyncTypeError(f"Value passed to parameter 'tensor' has DataType "
                                f"{t.dtype.name} not in list of allowed values: bfloat16, "
                                "float16, float32, float64")
    op = make_op("CheckNumerics", [t], [t.dtype], [t.shape], name=name or "CheckNumerics",
                 attrs={"message": str(message)})
    return op.outputs[0]


def verify_tensor_all_finite(t: Any, msg: str, name: str | None = None) -> Tensor:
    """``t`` after a ``check_numerics``, as TF1's ``tf.verify_tensor_all_finite``."""
    with name_scope(name, "VerifyFinite"):
        x = convert_to_tensor(t, name="x")
        with control_dependencies([check_numerics(x, message=msg).op]):
            return identity(x)

