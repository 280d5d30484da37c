"""Exponential moving averages of variables, as TF1's ``tf.train.ExponentialMovingAverage``.

``apply(var_list)`` creates one non-trainable average per variable, named as TF1 names it
(``w/ExponentialMovingAverage`` for ``w``, in the current variable scope, made unique like
a slot), starting at the variable's initial value, and returns the op that moves every
average one step::

    average -= (1 - decay) * (average - value)
    decay = min(decay, (1 + num_updates) / (10 + num_updates))      (with num_updates)

The averaged variables join ``GraphKeys.MOVING_AVERAGE_VARIABLES``.
``variables_to_restore()`` maps checkpoint keys to variables so that a ``Saver`` built
with it loads each variable's *average* into the variable itself: a server built from the
same model code then evaluates with the averaged weights.

Example:
    >>> import ckptsync as cs
    >>> g = cs.Graph()
    >>> with g.as_default():
    ...     w = cs.get_variable("w", initializer=cs.constant([1.0, 2.0]))
    ...     ema = cs.train.ExponentialMovingAverage(0.9)
    ...     update = ema.apply([w])
    ...     ema.average(w).op.name
    'w/ExponentialMovingAverage'

The average of a variable is one fused op (``AssignMovingAverage``, ckptsync's, in place of
TF's ``Sub``/``Mul``/``AssignSub``) that averages the variable's value as of that point of
the run: its value written earlier in the same run, if any (so the TF1 idiom ``with
control_dependencies([train_op]): ema.apply(...)`` averages the freshly trained weights, as
TensorFlow does), else its value before the run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError
from ..graph import GraphKeys, Operation, Tensor, get_default_graph
from ..initializers import zeros_initializer
from ..ops.array_ops import convert_to_tensor
from ..ops.math_ops import cast, divide, minimum, multiply, subtract
from ..ops.registry import register
from ..ops.state_ops import assign_sub, group
from ..variable_scope import get_variable, get_variable_scope
from ..variables import (
    Variable,
    global_variables,
    moving_average_variables,
    trainable_variables,
)
from .optimizer import _root_scope

__all__ = ["ExponentialMovingAverage"]

MOVING_AVERAGE_VARIABLES = GraphKeys.MOVING_AVERAGE_VARIABLES
_FLOATS = (_dtypes.float16, _dtypes.float32, _dtypes.float64)


@register("AssignMovingAverage", kind="stateful", ref_inputs=(0, 1), read_refs=(1,),
          output_ref=0)
def _assign_moving_average_kernel(ctx: Any, op: Operation, _avg: None, _var: None,
                                  one_minus_decay: np.ndarray) -> np.ndarray:
    # average -= (average - variable) * (1 - decay), the variable as written so far this run
    an, vn = op.inputs[0].op.name, op.inputs[1].op.name
    avg, value = ctx.read(an), ctx.read(vn)
    new = np.asarray(avg - (avg - value) * np.asarray(one_minus_decay, avg.dtype), avg.dtype)
    ctx.write(an, new)
    return new


class ExponentialMovingAverage:
    """Keeps moving averages of variables, as ``tf.train.ExponentialMovingAverage``.

    Args:
        decay: a float (typically 0.999...) or a scalar float tensor.
        num_updates: optional integer tensor (the global step): the decay used is then
            ``min(decay, (1 + num_updates) / (10 + num_updates))``, so early averages move
            faster.
        zero_debias: accepted as TF1 (it applies only to averages of plain tensors).
        name: the apply op's name and the averages' suffix.

    Thread-safety: as graph building (not thread-safe).
    """

    def __init__(self, decay: Any, num_updates: Any = None, zero_debias: bool = False,
                 name: str = "ExponentialMovingAverage"):
        self._decay = decay
        self._num_updates = num_updates
        self._zero_debias = bool(zero_debias)
        self._name = name
        self._averages: dict[int, tuple[Any, Variable]] = {}  # id(var) -> (var, average)

    @property
    def name(self) -> str:
        return self._name

    def apply(self, var_list: Any = None) -> Operation:
        """Creates the averages of ``var_list`` (default: the trainable variables; a
        variable that already has one keeps it) and returns the op updating them all.

        Args:
            var_list: variables or float tensors (an average of a tensor starts at 0).

        Raises:
            TypeError: an element that is not half, float or double (TF1's message).
            NotImplementedError: ``zero_debias`` averages of tensors.
        """
        if var_list is None:
            var_list = trainable_variables()
        var_list = list(var_list)
        for var in var_list:
            if var.dtype.base_dtype not in _FLOATS:
                raise CkptsyncTypeError(
                    f"The variables must be half, float, or double: {var.name}")
        graph = get_default_graph()
        for var in var_list:
            if id(var) in self._averages:
                continue
            with graph.control_dependencies(None):
                if isinstance(var, Variable):
                    avg = self._create_average(var, var.initialized_value())
                    graph.add_to_collection(MOVING_AVERAGE_VARIABLES, var)
                else:
                    if self._zero_debias:
                        raise NotImplementedError(
                            "ExponentialMovingAverage(zero_debias=True) of a tensor is not "
                            "supported; average a variable instead.")
                    avg = self._create_average(var, None)
            self._averages[id(var)] = (var, avg)
        with graph.name_scope(self._name) as scope:
            decay = convert_to_tensor(self._decay, name="decay")
            if self._num_updates is not None:
                n = cast(self._num_updates, _dtypes.float32, name="num_updates")
                decay = minimum(decay, divide(1.0 + n, 10.0 + n))
            updates = [self._assign_moving_average(self._averages[id(v)][1], v, decay)
                       for v in var_list]
            return group(*updates, name=scope)

    def _create_average(self, var: Any, initial: Tensor | None) -> Variable:
        graph = get_default_graph()
        vscope = get_variable_scope().name
        with graph.name_scope(None):
            full = graph.unique_name(
                f"{vscope + '/' if vscope else ''}{var.op.name}/{self._name}", mark_as_used=False)
        with _root_scope():
            if initial is not None:  # starts where the variable starts
                return get_variable(full, initializer=initial, trainable=False)
            return get_variable(full, shape=var.shape.as_list(), dtype=var.dtype.base_dtype,
                                initializer=zeros_initializer(), trainable=False)

    @staticmethod
    def _assign_moving_average(avg: Variable, value: Any, decay: Tensor) -> Tensor:
        # average -= (average - value) * (1 - decay), as TF1's assign_moving_average
        graph = get_default_graph()
        with graph.name_scope("AssignMovingAvg") as scope:
            one_minus = subtract(convert_to_tensor(1.0, dtype=decay.dtype), decay, name="decay")
            if one_minus.dtype != avg.dtype.base_dtype:
                one_minus = cast(one_minus, avg.dtype.base_dtype)
            if isinstance(value, Variable):
                return graph.create_op(
                    "AssignMovingAverage", [avg.value(), value.value(), one_minus],
                    [avg.dtype.base_dtype], [avg.shape], name=scope).outputs[0]
            delta = multiply(subtract(avg.value(), value), one_minus)
            return assign_sub(avg, delta, name=scope)

    def average(self, var: Any) -> Variable | None:
        """The average variable of ``var``, or None if ``apply`` has not averaged it."""
        entry = self._averages.get(id(var))
        return None if entry is None else entry[1]

    def average_name(self, var: Any) -> str:
        """The checkpoint key of ``var``'s average: its op name if created, else
        ``"<var op name>/<name>"`` (what ``apply`` would name it at the top level)."""
        avg = self.average(var)
        return avg.op.name if avg is not None else f"{var.op.name}/{self._name}"

    def variables_to_restore(self, moving_avg_variables: Any = None) -> dict[str, Variable]:
        """``{checkpoint key: variable}`` for a ``Saver`` that restores averages into the
        variables, as TF1's: each of ``moving_avg_variables`` (default: the trainable and
        the ``MOVING_AVERAGE_VARIABLES`` variables) under :meth:`average_name`, and every
        other global variable under its own name.

        Example:
            ``cs.train.Saver(ema.variables_to_restore()).restore(sess, path)`` loads
            ``w/ExponentialMovingAverage`` into ``w``.
        """
        if moving_avg_variables is None:
            moving_avg_variables = trainable_variables() + moving_average_variables()
        unique: dict[int, Any] = {}
        for v in moving_avg_variables:
            unique.setdefault(id(v), v)
        name_map: dict[str, Variable] = {}
        for v in unique.values():
            name_map[self.average_name(v)] = v
        averaged = {v.name for v in unique.values()}
        for v in global_variables():
            if v.name not in averaged and v.op.name not in name_map:
                name_map[v.op.name] = v
        return name_map
