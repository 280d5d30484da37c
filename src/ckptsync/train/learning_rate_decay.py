"""Learning-rate schedules of the global step, as TF1's ``tf.train.exponential_decay`` and
friends: each builds a scalar float tensor (named as TF names it: ``ExponentialDecay``,
``PolynomialDecay``, ...) that an optimizer takes as its ``learning_rate``; it moves as the
global step moves.

The formulas are TF's own (``keras`` legacy ``LearningRateSchedule`` code that
``tf.compat.v1.train`` calls), computed in the learning rate's dtype (float32 for a Python
number) with the step cast to it.

Example:
    >>> import ckptsync as cs
    >>> g = cs.Graph()
    >>> with g.as_default():
    ...     step = cs.train.get_or_create_global_step()
    ...     lr = cs.train.exponential_decay(0.1, step, 10, 0.5, staircase=True)
    ...     init = cs.global_variables_initializer()
    >>> with cs.Session(graph=g) as sess:
    ...     sess.run(init)
    ...     round(float(sess.run(lr)), 6)
    0.1
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import Tensor, get_default_graph
from ..ops.array_ops import convert_to_tensor
from ..ops.elementwise_ops import ceil, cos, floor
from ..ops.math_ops import (
    add,
    cast,
    divide,
    exp,
    greater,
    log,
    maximum,
    minimum,
    multiply,
    negative,
    pow,
    subtract,
)

__all__ = ["exponential_decay", "piecewise_constant", "polynomial_decay", "cosine_decay",
           "cosine_decay_restarts", "linear_cosine_decay", "inverse_time_decay",
           "natural_exp_decay"]


def _step(global_step: Any, dtype: _dtypes.DType, fn: str) -> Tensor:
    if global_step is None:
        raise CkptsyncValueError(f"global_step is required for {fn}.")
    return cast(global_step, dtype)


def _lr(learning_rate: Any) -> Tensor:
    return convert_to_tensor(learning_rate, name="learning_rate")


def _step_ratio(global_step: Any, decay_steps: Any, dt: _dtypes.DType, staircase: bool,
                fn: str) -> Tensor:
    """``global_step / decay_steps`` in ``dt``, floored with ``staircase``."""
    p = divide(_step(global_step, dt, fn), cast(decay_steps, dt))
    return floor(p) if staircase else p


def _floor_at_alpha(cosine: Tensor, alpha: Any, one: Tensor, dt: _dtypes.DType) -> Tensor:
    """``(1 - alpha) * cosine + alpha``: the cosine decays' schedule, kept above ``alpha``."""
    a = cast(alpha, dt)
    return add(multiply(subtract(one, a), cosine), a)


def exponential_decay(learning_rate: Any, global_step: Any, decay_steps: Any,
                      decay_rate: Any, staircase: bool = False,
                      name: str | None = None) -> Tensor:
    """``learning_rate * decay_rate ^ (global_step / decay_steps)`` (the exponent floored
    with ``staircase``), as ``tf.train.exponential_decay``.

    Args:
        learning_rate: a float or scalar float tensor. global_step: an integer scalar
            tensor or variable (not None). decay_steps, decay_rate: numbers or tensors.

    Returns:
        A scalar tensor of ``learning_rate``'s dtype named ``ExponentialDecay``.

    Raises:
        ValueError: ``global_step`` is None.
    """
    graph = get_default_graph()
    with graph.name_scope(name or "ExponentialDecay") as scope:
        lr = _lr(learning_rate)
        dt = lr.dtype
        p = _step_ratio(global_step, decay_steps, dt, staircase, "exponential_decay")
        return multiply(lr, pow(cast(decay_rate, dt), p), name=scope)


def natural_exp_decay(learning_rate: Any, global_step: Any, decay_steps: Any,
                      decay_rate: Any, staircase: bool = False,
                      name: str | None = None) -> Tensor:
    """``learning_rate * exp(-decay_rate * global_step / decay_steps)``, as
    ``tf.train.natural_exp_decay`` (computed as TF2 does: ``exponential_decay`` with the
    rate ``exp(-decay_rate)``; the op is named ``ExponentialDecay``). Raises as
    :func:`exponential_decay`."""
    rate = exp(negative(convert_to_tensor(decay_rate, dtype=_lr_dtype(learning_rate))))
    return exponential_decay(learning_rate, global_step, decay_steps, rate,
                             staircase=staircase, name=name)


def _lr_dtype(learning_rate: Any) -> _dtypes.DType:
    if isinstance(learning_rate, Tensor):
        return learning_rate.dtype.base_dtype
    return _dtypes.float32


def inverse_time_decay(learning_rate: Any, global_step: Any, decay_steps: Any,
                       decay_rate: Any, staircase: bool = False,
                       name: str | None = None) -> Tensor:
    """``learning_rate / (1 + decay_rate * global_step / decay_steps)`` (the quotient
    floored with ``staircase``), as ``tf.train.inverse_time_decay``; named
    ``InverseTimeDecay``. Raises as :func:`exponential_decay`."""
    graph = get_default_graph()
    with graph.name_scope(name or "InverseTimeDecay") as scope:
        lr = _lr(learning_rate)
        dt = lr.dtype
        p = _step_ratio(global_step, decay_steps, dt, staircase, "inverse_time_decay")
        denom = add(convert_to_tensor(1.0, dtype=dt), multiply(cast(decay_rate, dt), p))
        return divide(lr, denom, name=scope)


def polynomial_decay(learning_rate: Any, global_step: Any, decay_steps: Any,
                     end_learning_rate: Any = 0.0001, power: Any = 1.0, cycle: bool = False,
                     name: str | None = None) -> Tensor:
    """``(lr - end) * (1 - step / decay_steps) ^ power + end``, as
    ``tf.train.polynomial_decay``: the step stops at ``decay_steps``, or with ``cycle``
    ``decay_steps`` grows to the next multiple of itself past the step (``ceil(step /
    decay_steps)``, at least 1). Named ``PolynomialDecay``. Raises as
    :func:`exponential_decay`."""
    graph = get_default_graph()
    with graph.name_scope(name or "PolynomialDecay") as scope:
        lr = _lr(learning_rate)
        dt = lr.dtype
        end = cast(end_learning_rate, dt)
        pw = cast(power, dt)
        step = _step(global_step, dt, "polynomial_decay")
        steps = cast(decay_steps, dt)
        if cycle:
            # TF: 1 where the step is 0, else ceil(step / decay_steps).
            one = convert_to_tensor(1.0, dtype=dt)
            multiplier = maximum(ceil(divide(step, steps)), one)
            steps = multiply(steps, multiplier)
        else:
            step = minimum(step, steps)
        p = divide(step, steps)
        one_minus = subtract(convert_to_tensor(1.0, dtype=dt), p)
        return add(multiply(subtract(lr, end), pow(one_minus, pw)), end, name=scope)


def cosine_decay(learning_rate: Any, global_step: Any, decay_steps: Any, alpha: Any = 0.0,
                 name: str | None = None) -> Tensor:
    """``lr * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps)) +
    alpha)``, as ``tf.train.cosine_decay`` (SGDR without restarts).

    Raises:
        ValueError: ``global_step`` is None.
    """
    graph = get_default_graph()
    with graph.name_scope(name or "CosineDecay") as scope:
        lr = _lr(learning_rate)
        dt = lr.dtype
        steps = cast(decay_steps, dt)
        step = minimum(_step(global_step, dt, "cosine_decay"), steps)
        fraction = divide(step, steps)
        pi = convert_to_tensor(math.pi, dtype=dt)
        one = convert_to_tensor(1.0, dtype=dt)
        cosine = multiply(convert_to_tensor(0.5, dtype=dt),
                          add(one, cos(multiply(pi, fraction))))
        return multiply(lr, _floor_at_alpha(cosine, alpha, one, dt), name=scope)


def cosine_decay_restarts(learning_rate: Any, global_step: Any, first_decay_steps: Any,
                          t_mul: float = 2.0, m_mul: float = 1.0, alpha: float = 0.0,
                          name: str | None = None) -> Tensor:
    """Cosine decay with warm restarts (SGDR), as ``tf.train.cosine_decay_restarts``: the
    ``i``-th period lasts ``first_decay_steps * t_mul^i`` steps and starts from
    ``learning_rate * m_mul^i``; named ``SGDRDecay``.

    Raises:
        ValueError: ``global_step`` is None.
    """
    graph = get_default_graph()
    with graph.name_scope(name or "SGDRDecay") as scope:
        lr = _lr(learning_rate)
        dt = lr.dtype
        fraction = divide(_step(global_step, dt, "cosine_decay_restarts"),
                          cast(first_decay_steps, dt))
        one = convert_to_tensor(1.0, dtype=dt)
        if float(t_mul) == 1.0:
            i_restart = floor(fraction)
            fraction = subtract(fraction, i_restart)
        else:  # geometric periods (TF decides this with a cond on t_mul == 1)
            t = convert_to_tensor(float(t_mul), dtype=dt)
            i_restart = floor(divide(log(subtract(one, multiply(fraction, subtract(one, t)))),
                                     log(t)))
            sum_r = divide(subtract(one, pow(t, i_restart)), subtract(one, t))
            fraction = divide(subtract(fraction, sum_r), pow(t, i_restart))
        m_fac = pow(convert_to_tensor(float(m_mul), dtype=dt), i_restart)
        pi = convert_to_tensor(math.pi, dtype=dt)
        cosine = multiply(multiply(convert_to_tensor(0.5, dtype=dt), m_fac),
                          add(one, cos(multiply(pi, fraction))))
        return multiply(lr, _floor_at_alpha(cosine, alpha, one, dt), name=scope)


def linear_cosine_decay(learning_rate: Any, global_step: Any, decay_steps: Any,
                        num_periods: float = 0.5, alpha: float = 0.0, beta: float = 0.001,
                        name: str | None = None) -> Tensor:
    """``lr * ((alpha + linear) * cosine + beta)`` with ``linear = (decay_steps - step) /
    decay_steps`` and ``cosine = 0.5 * (1 + cos(pi * 2 * num_periods * step /
    decay_steps))``, the step stopping at ``decay_steps``, as
    ``tf.train.linear_cosine_decay``; named ``LinearCosineDecay``.

    Raises:
        ValueError: ``global_step`` is None.
    """
    graph = get_default_graph()
    with graph.name_scope(name or "LinearCosineDecay") as scope:
        lr = _lr(learning_rate)
        dt = lr.dtype
        steps = cast(decay_steps, dt)
        step = minimum(_step(global_step, dt, "linear_cosine_decay"), steps)
        linear = divide(subtract(steps, step), steps)
        fraction = multiply(convert_to_tensor(2.0 * float(num_periods), dtype=dt),
                            divide(step, steps))
        pi = convert_to_tensor(math.pi, dtype=dt)
        one = convert_to_tensor(1.0, dtype=dt)
        cosine = multiply(convert_to_tensor(0.5, dtype=dt), add(one, cos(multiply(pi, fraction))))
        decayed = add(multiply(add(cast(alpha, dt), linear), cosine), cast(beta, dt))
        return multiply(lr, decayed, name=scope)


def piecewise_constant(x: Any, boundaries: Sequence[Any], values: Sequence[Any],
                       name: str | None = None) -> Tensor:
    """``values[0]`` while ``x <= boundaries[0]``, ``values[i]`` while ``boundaries[i-1] <
    x <= boundaries[i]``, ``values[-1]`` past the last boundary, as
    ``tf.train.piecewise_constant`` (computed exactly as a sum of 0/1 masks).

    Args:
        x: a scalar tensor (the global step), any real dtype.
        boundaries: increasing numbers of ``x``'s kind, ``len(values) - 1`` of them.
        values: numbers of one dtype (the result's).

    Raises:
        ValueError: ``len(values) != len(boundaries) + 1``, or ``values`` of mixed dtypes.
    """
    if len(values) != len(boundaries) + 1:
        raise CkptsyncValueError(
            "The length of boundaries should be 1 less than the length of values")
    graph = get_default_graph()
    with graph.name_scope(name or "PiecewiseConstant") as scope:
        x_t = convert_to_tensor(x)
        vals = [convert_to_tensor(v) for v in values]
        dt = vals[0].dtype
        if any(v.dtype != dt for v in vals):
            raise CkptsyncValueError(
                f"piecewise_constant: values must have elements all with the same dtype "
                f"({sorted({v.dtype.name for v in vals})}).")
        bounds = [cast(convert_to_tensor(b), x_t.dtype) for b in boundaries]
        above = [cast(greater(x_t, b), dt) for b in bounds]  # 1 past boundary i
        one = convert_to_tensor(1, dtype=dt)
        if not bounds:
            return multiply(vals[0], one, name=scope)
        masks = [subtract(one, above[0])]
        masks += [multiply(above[i - 1], subtract(one, above[i])) for i in range(1, len(bounds))]
        masks.append(above[-1])
        terms = [multiply(v, m) for v, m in zip(vals, masks)]
        out = terms[0]
        for t in terms[1:-1]:
            out = add(out, t)
        return add(out, terms[-1], name=scope)
