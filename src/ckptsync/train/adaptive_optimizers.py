"""RMSProp, Adagrad, Adadelta and FTRL, as TF1's ``tf.train.*Optimizer``.

Slots are named as TF1 names them, so a checkpoint lines up name for name (for a variable
``w``; a second optimizer of the same name gets ``w/RMSProp_3``... as TF1's
``slot_creator``, which makes every slot name unique like a name scope):

============  ========================================================================
RMSProp       ``w/RMSProp`` (rms, starts at 1), [``w/RMSProp_1`` (mg) if centered],
              then ``w/RMSProp_1`` or ``_2`` (momentum)
Adagrad       ``w/Adagrad`` (accumulator, starts at ``initial_accumulator_value``)
Adadelta      ``w/Adadelta`` (accum), ``w/Adadelta_1`` (accum_update)
Ftrl          ``w/Ftrl`` (accum, starts at ``initial_accumulator_value``), ``w/Ftrl_1``
              (linear)
============  ========================================================================

Every hyperparameter may be a Python number or a scalar float tensor (a placeholder fed per
step, a decayed learning rate). A sparse gradient (``IndexedSlices``, from ``gather`` or
``embedding_lookup``) updates only the rows it names, slots included (TF1's
``SparseApply*`` ops); the kernels are in :mod:`ckptsync.train.update_kernels`.
"""

from __future__ import annotations

from typing import Any

from ..errors import CkptsyncValueError
from ..graph import Tensor
from ..indexed_slices import IndexedSlices
from ..initializers import constant_initializer, ones_initializer
from ..variables import Variable
from . import update_kernels as _kernels
from .optimizer import Hyper, Optimizer, _const, _hyper

__all__ = ["RMSPropOptimizer", "AdagradOptimizer", "AdadeltaOptimizer", "FtrlOptimizer"]


class _SlotOptimizer(Optimizer):
    """An optimizer whose update is one ``Apply*`` op over ``[var, *slots]`` with scalar
    hyperparameters; subclasses give the op type, the slots and the inputs' order."""

    _slot_order: tuple[str, ...] = ()

    def _op_type(self) -> str:
        raise NotImplementedError

    def _inputs(self, var: Variable, grad: Tensor, indices: Tensor | None) -> list[Tensor]:
        raise NotImplementedError

    def _refs(self, var: Variable) -> list[Variable]:
        slots = [self.get_slot(var, s) for s in self._slot_order]
        assert all(s is not None for s in slots)
        return [var] + [s for s in slots if s is not None]

    def _apply_dense(self, grad: Tensor, var: Variable) -> Tensor:
        return _kernels.apply_op(self._op_type(), self._refs(var),
                                 self._inputs(var, grad, None))

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Tensor:
        """Updates only the rows ``grad.indices`` of ``var`` and its slots (TF1's
        ``SparseApply*``); the indices are unique (the base class sums duplicates)."""
        return _kernels.apply_op("Sparse" + self._op_type(), self._refs(var),
                                 self._inputs(var, grad.values, grad.indices))

    def _c(self, value: Hyper, var: Variable, name: str) -> Tensor:
        return _const(value, var.dtype, name)


def _grad_at(inputs: list[Tensor], at: int, grad: Tensor,
             indices: Tensor | None) -> list[Tensor]:
    extra = [grad] if indices is None else [grad, indices]
    return inputs[:at] + extra + inputs[at:]


class RMSPropOptimizer(_SlotOptimizer):
    """RMSProp, as ``tf.train.RMSPropOptimizer`` (TF1's rule, with ``ms`` starting at 1)::

        ms = decay * ms + (1 - decay) * grad^2            (mg likewise with grad, centered)
        mom = momentum * mom + lr * grad / sqrt(ms [- mg^2] + epsilon)
        var -= mom

    Args:
        learning_rate: a number or a scalar float tensor.
        decay: the discount of the mean square (rho). momentum, epsilon: as above.
        centered: normalise by the estimated variance (slot ``mg``; op
            ``ApplyCenteredRMSProp``) instead of the second moment (``ApplyRMSProp``).

    Raises:
        ValueError, TypeError: a hyperparameter that is not a non-negative number or tensor.

    Example:
        >>> import ckptsync as cs
        >>> opt = cs.train.RMSPropOptimizer(0.01, decay=0.9, momentum=0.9, centered=True)
    """

    def __init__(self, learning_rate: Hyper, decay: Hyper = 0.9, momentum: Hyper = 0.0,
                 epsilon: Hyper = 1e-10, use_locking: bool = False, centered: bool = False,
                 name: str = "RMSProp"):
        super().__init__(use_locking, name)
        self._lr = _hyper("learning_rate", learning_rate)
        self._decay = _hyper("decay", decay)
        self._momentum = _hyper("momentum", momentum)
        self._epsilon = _hyper("epsilon", epsilon)
        self._centered = bool(centered)
        self._slot_order = ("mg", "rms", "momentum") if centered else ("rms", "momentum")

    def _create_slots(self, var_list: list[Variable]) -> None:
        for v in var_list:
            self._slot_with_initializer(v, "rms", self._name, ones_initializer())
            if self._centered:
                self._zeros_slot(v, "mg", self._name)
            self._zeros_slot(v, "momentum", self._name)

    def _op_type(self) -> str:
        return "ApplyCenteredRMSProp" if self._centered else "ApplyRMSProp"

    def _inputs(self, var: Variable, grad: Tensor, indices: Tensor | None) -> list[Tensor]:
        hyper = [self._c(self._lr, var, "learning_rate"), self._c(self._decay, var, "decay"),
                 self._c(self._momentum, var, "momentum"),
                 self._c(self._epsilon, var, "epsilon")]
        return _grad_at(hyper, 4, grad, indices)


class AdagradOptimizer(_SlotOptimizer):
    """Adagrad, as ``tf.train.AdagradOptimizer``::

        accum += grad^2;  var -= lr * grad / sqrt(accum)

    Args:
        learning_rate: a number or a scalar float tensor.
        initial_accumulator_value: where ``accum`` (slot ``w/Adagrad``) starts; > 0.

    Raises:
        ValueError: "initial_accumulator_value must be positive" (TF1's message).

    Example:
        >>> import ckptsync as cs
        >>> opt = cs.train.AdagradOptimizer(0.1, initial_accumulator_value=0.1)
    """

    _slot_order = ("accumulator",)

    def __init__(self, learning_rate: Hyper, initial_accumulator_value: float = 0.1,
                 use_locking: bool = False, name: str = "Adagrad"):
        if initial_accumulator_value <= 0.0:
            raise CkptsyncValueError(
                f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._lr = _hyper("learning_rate", learning_rate)
        self._initial = float(initial_accumulator_value)

    def _create_slots(self, var_list: list[Variable]) -> None:
        for v in var_list:
            self._slot_with_initializer(v, "accumulator", self._name,
                                        constant_initializer(self._initial))

    def _op_type(self) -> str:
        return "ApplyAdagrad"

    def _inputs(self, var: Variable, grad: Tensor, indices: Tensor | None) -> list[Tensor]:
        return _grad_at([self._c(self._lr, var, "learning_rate")], 1, grad, indices)


class AdadeltaOptimizer(_SlotOptimizer):
    """Adadelta, as ``tf.train.AdadeltaOptimizer``::

        accum = rho * accum + (1 - rho) * grad^2
        update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad
        accum_update = rho * accum_update + (1 - rho) * update^2;  var -= lr * update

    Args:
        learning_rate: a number or a scalar float tensor (TF1's default 0.001).
        rho: the decay rate. epsilon: the conditioning constant.

    Example:
        >>> import ckptsync as cs
        >>> opt = cs.train.AdadeltaOptimizer(1.0, rho=0.95)
    """

    _slot_order = ("accum", "accum_update")

    def __init__(self, learning_rate: Hyper = 0.001, rho: Hyper = 0.95,
                 epsilon: Hyper = 1e-8, use_locking: bool = False, name: str = "Adadelta"):
        super().__init__(use_locking, name)
        self._lr = _hyper("learning_rate", learning_rate)
        self._rho = _hyper("rho", rho)
        self._epsilon = _hyper("epsilon", epsilon)

    def _create_slots(self, var_list: list[Variable]) -> None:
        for v in var_list:
            self._zeros_slot(v, "accum", self._name)
            self._zeros_slot(v, "accum_update", self._name)

    def _op_type(self) -> str:
        return "ApplyAdadelta"

    def _inputs(self, var: Variable, grad: Tensor, indices: Tensor | None) -> list[Tensor]:
        hyper = [self._c(self._lr, var, "lr"), self._c(self._rho, var, "rho"),
                 self._c(self._epsilon, var, "epsilon")]
        return _grad_at(hyper, 3, grad, indices)


class FtrlOptimizer(_SlotOptimizer):
    """FTRL-Proximal, as ``tf.train.FtrlOptimizer`` (ops ``ApplyFtrl``, or ``ApplyFtrlV2``
    when ``l2_shrinkage_regularization_strength`` > 0)::

        new_accum = accum + grad^2
        linear += grad' - (new_accum^-p - accum^-p) / lr * var     (grad' = grad
                                                + 2 * l2_shrinkage * var with shrinkage)
        var = |linear| > l1 ? (sign(linear) * l1 - linear) / (new_accum^-p / lr + 2 * l2) : 0

    Args:
        learning_rate: a number or a scalar float tensor.
        learning_rate_power: ``p``, <= 0 (-0.5: the square root).
        initial_accumulator_value: where ``accum`` starts, >= 0.
        l1_regularization_strength, l2_regularization_strength,
        l2_shrinkage_regularization_strength: >= 0.
        accum_name, linear_name: the slots' names instead of ``Ftrl`` (made unique).
        beta: adds ``beta / (2 * lr)`` to the l2 strength (TF1's ``beta``); default 0.

    Raises:
        ValueError: a negative strength or accumulator value, or ``learning_rate_power`` > 0
            (TF1's messages).

    Example:
        >>> import ckptsync as cs
        >>> opt = cs.train.FtrlOptimizer(0.1, l1_regularization_strength=0.01)
    """

    _slot_order = ("accum", "linear")

    def __init__(self, learning_rate: Hyper, learning_rate_power: float = -0.5,
                 initial_accumulator_value: float = 0.1,
                 l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, use_locking: bool = False,
                 name: str = "Ftrl", accum_name: str | None = None,
                 linear_name: str | None = None,
                 l2_shrinkage_regularization_strength: float = 0.0,
                 beta: float | None = None):
        super().__init__(use_locking, name)
        checks = [("initial_accumulator_value", initial_accumulator_value,
                   "needs to be positive or zero"),
                  ("l1_regularization_strength", l1_regularization_strength,
                   "needs to be positive or zero"),
                  ("l2_regularization_strength", l2_regularization_strength,
                   "needs to be positive or zero"),
                  ("l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength,
                   "needs to be positive or zero")]
        for what, value, need in checks:
            if not isinstance(value, (Tensor, Variable)) and float(value) < 0.0:
                raise CkptsyncValueError(f"{what} {value} {need}")
        if learning_rate_power > 0.0:
            raise CkptsyncValueError(
                f"learning_rate_power {learning_rate_power} needs to be negative or zero")
        self._lr = _hyper("learning_rate", learning_rate)
        self._lr_power = float(learning_rate_power)
        self._initial = float(initial_accumulator_value)
        self._l1 = l1_regularization_strength
        self._l2 = l2_regularization_strength
        self._beta = 0.0 if beta is None else float(beta)
        self._l2_shrinkage = l2_shrinkage_regularization_strength
        self._accum_name = accum_name or name
        self._linear_name = linear_name or name

    def _create_slots(self, var_list: list[Variable]) -> None:
        for v in var_list:
            self._slot_with_initializer(v, "accum", self._accum_name,
                                        constant_initializer(self._initial))
            self._zeros_slot(v, "linear", self._linear_name)

    def _shrinking(self) -> bool:
        return isinstance(self._l2_shrinkage, (Tensor, Variable)) or self._l2_shrinkage > 0.0

    def _op_type(self) -> str:
        return "ApplyFtrlV2" if self._shrinking() else "ApplyFtrl"

    def _inputs(self, var: Variable, grad: Tensor, indices: Tensor | None) -> list[Tensor]:
        lr = self._c(self._lr, var, "learning_rate")
        l2: Any = self._l2
        if self._beta:
            l2 = self._c(l2, var, "l2_regularization_strength") + self._beta / (2.0 * lr)
        hyper = [lr, self._c(self._l1, var, "l1_regularization_strength"),
                 self._c(l2, var, "l2_regularization_strength")]
        if self._shrinking():
            hyper.append(self._c(self._l2_shrinkage, var, "l2_shrinkage_regularization_strength"))
        hyper.append(self._c(self._lr_power, var, "learning_rate_power"))
        return _grad_at(hyper, 0, grad, indices)
