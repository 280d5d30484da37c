"""Optimizers with slot variables, as TF1's ``tf.train.Optimizer`` family.

Slots are global, non-trainable variables named ``<var op name>/<optimizer name>`` (Adam:
``w/Adam`` for m and ``w/Adam_1`` for v; Momentum: ``w/Momentum``), and Adam keeps the
non-slot variables ``beta1_power`` and ``beta2_power``, exactly as TF1, so checkpoints carry
the full optimizer state. Each variable update is one fused kernel beside its formula.

Gradient reducers (the seam data parallelism plugs into): whoever builds a graph may say
"gradients computed on this graph are reduced by this function" with
:func:`reducing_gradients`; inside that block every ``Optimizer.compute_gradients`` (and
so every ``minimize``) whose loss lives on that graph returns
``reducer(compute, args, kwargs)`` instead of ``compute(*args, **kwargs)``. ``train`` knows
nothing about what a reducer does; ``ckptsync.app`` passes
:func:`ckptsync.distributed.optimizer.average_gradients` under ``mpiexec``.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..gradients import gradients
from ..graph import Graph, GraphKeys, Operation, Tensor, get_default_graph
from ..indexed_slices import IndexedSlices
from ..initializers import zeros_initializer
from ..ops.array_ops import convert_to_tensor
from ..ops.math_ops import cast, multiply
from ..ops.registry import register
from ..ops.scatter_ops import scatter_sub, sum_duplicate_indices
from ..ops.state_ops import assign, assign_add, group
from ..variable_scope import get_variable, get_variable_scope, get_variable_store, variable_scope
from ..variables import Variable, trainable_variables
from .update_kernels import apply_op

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer",
           "GradsAndVars", "GradientReducer", "reducing_gradients", "gradient_reducer"]

GradsAndVars = list[tuple[Any, Variable]]
#: ``reducer(compute, args, kwargs) -> [(gradient or None, variable)]``: ``compute`` is the
#: unreduced base ``compute_gradients`` (TF's signature, without ``self``), ``args`` and
#: ``kwargs`` what it is to be called with. A reducer calls ``compute`` (it may change its
#: arguments first, e.g. scale ``grad_loss``) and returns the reduced pairs.
GradientReducer = Callable[[Callable[..., GradsAndVars], tuple[Any, ...], dict[str, Any]],
                           GradsAndVars]


# --------------------------------------------------------------------- gradient reducers
_reducers_lock = threading.Lock()
_reducers: list[tuple[Graph, GradientReducer]] = []  # innermost block last


@contextlib.contextmanager
def reducing_gradients(graph: Graph, reducer: GradientReducer) -> Iterator[None]:
    """In the block, gradients computed on ``graph`` are reduced by ``reducer``.

    Every ``Optimizer.compute_gradients`` (so every ``minimize``) whose loss is a tensor of
    ``graph`` returns ``reducer(compute, args, kwargs)``, where ``compute`` is the base
    method's unreduced computation (see :data:`GradientReducer`). An optimizer that
    overrides ``compute_gradients`` without calling the base one is not reduced; a
    wrapper that calls it is (a reducer that should act once per gradient must itself
    tell nested calls apart, as ``average_gradients`` does). No effect on other graphs.
    Blocks nest; the innermost one for a graph wins.

    Args:
        graph: the graph being built.
        reducer: the function gradients on it go through.

    Thread-safety: blocks may be entered from several threads, for the same or different
    graphs; a ``compute_gradients`` sees the blocks open when it starts.

    Example:
        >>> import ckptsync as cs
        >>> g = cs.Graph()
        >>> with reducing_gradients(g, lambda compute, args, kwargs: compute(*args, **kwargs)):
        ...     gradient_reducer(g) is not None
        True
    """
    entry = (graph, reducer)
    with _reducers_lock:
        _reducers.append(entry)
    try:
        yield
    finally:
        with _reducers_lock:
            # Remove this very entry (by identity), wherever other threads left theirs.
            for i in range(len(_reducers) - 1, -1, -1):
                if _reducers[i] is entry:
                    del _reducers[i]
                    break


def gradient_reducer(graph: Graph | None) -> GradientReducer | None:
    """The reducer of the innermost open :func:`reducing_gradients` block for ``graph``,
    or None. Thread-safe."""
    if graph is None:
        return None
    with _reducers_lock:
        for g, reducer in reversed(_reducers):
            if g is graph:
                return reducer
    return None


# --------------------------------------------------------------------- fused kernels
def _scalar(x: np.ndarray, dtype: Any) -> Any:
    return np.asarray(x, dtype=dtype)


@register("ApplyGradientDescent", kind="stateful", ref_inputs=(0,), output_ref=0)
def _apply_gd(ctx: Any, op: Operation, _v: None, lr: np.ndarray, grad: np.ndarray) -> np.ndarray:
    # var -= lr * grad
    name = op.inputs[0].op.name
    var = ctx.read(name)
    new = var - _scalar(lr, var.dtype) * grad
    ctx.write(name, new)
    return new


@register("ApplyMomentum", kind="stateful", ref_inputs=(0, 1), output_ref=0)
def _apply_momentum(ctx: Any, op: Operation, _v: None, _a: None, lr: np.ndarray,
                    grad: np.ndarray, momentum: np.ndarray) -> np.ndarray:
    # accum = momentum * accum + grad
    # var -= lr * accum                          (use_nesterov=False)
    # var -= lr * (grad + momentum * accum)      (use_nesterov=True)
    vname, aname = op.inputs[0].op.name, op.inputs[1].op.name
    var, accum = ctx.read(vname), ctx.read(aname)
    lr_, mu = _scalar(lr, var.dtype), _scalar(momentum, var.dtype)
    accum = mu * accum + grad
    new = var - lr_ * (grad + mu * accum) if op.attrs["use_nesterov"] else var - lr_ * accum
    ctx.write(aname, accum)
    ctx.write(vname, new)
    return new


@register("ApplyAdam", kind="stateful", ref_inputs=(0, 1, 2), output_ref=0)
def _apply_adam(ctx: Any, op: Operation, _v: None, _m: None, _s: None, b1p: np.ndarray,
                b2p: np.ndarray, lr: np.ndarray, b1: np.ndarray, b2: np.ndarray,
                eps: np.ndarray, grad: np.ndarray) -> np.ndarray:
    # lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
    # m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
    # var -= lr_t * m / (sqrt(v) + epsilon)
    vn, mn, sn = op.attrs["vars"]
    var, m, v = ctx.read(vn), ctx.read(mn), ctx.read(sn)
    # Python floats are "weak" scalars for numpy: float32 arrays stay float32.
    b1_, b2_ = float(b1), float(b2)
    lr_t = float(lr) * math.sqrt(1.0 - float(b2p)) / (1.0 - float(b1p))
    # New arrays (the old ones may be held by a fetch or a snapshot), updated in place;
    # np.array keeps a rank-0 variable an array (``m * b1`` would be a numpy scalar).
    m = np.array(m, copy=True)
    m *= b1_
    m += (1.0 - b1_) * grad
    v = np.array(v, copy=True)
    v *= b2_
    v += (1.0 - b2_) * np.square(grad)
    step = np.array(np.sqrt(v), copy=True)
    step += float(eps)
    np.divide(m, step, out=step)
    step *= lr_t
    new = var - step
    ctx.write(mn, m)
    ctx.write(sn, v)
    ctx.write(vn, new)
    return new


# --------------------------------------------------------------------- base class
class Optimizer:
    """Base class, as ``tf.train.Optimizer``: ``compute_gradients``, ``apply_gradients``,
    ``minimize``; ``get_slot(var, name)``, ``get_slot_names()``, ``variables()``.

    Raises:
        ValueError: no variables to optimize, or no gradient for any of them.
    """

    GATE_NONE, GATE_OP, GATE_GRAPH = 0, 1, 2  # gate_gradients values, as TF1's

    def __init__(self, use_locking: bool, name: str):
        if not name:
            raise CkptsyncValueError("Must specify the optimizer name")
        self._name = name
        self._slots: dict[str, dict[str, Variable]] = {}
        self._non_slot: dict[str, Variable] = {}

    def get_name(self) -> str:
        return self._name

    def compute_gradients(self, loss: Any, var_list: Any = None, gate_gradients: int = 1,
                          aggregation_method: Any = None, colocate_gradients_with_ops: bool = False,
                          grad_loss: Any = None) -> GradsAndVars:
        """``[(gradient or None, variable)]`` for ``var_list`` (default: trainable), reduced
        by the graph's gradient reducer inside :func:`reducing_gradients`.

        Raises:
            TypeError: ``loss`` is a callable, or ``var_list`` holds a non-Variable.
            ValueError: no variables to optimize.
        """
        args = (loss, var_list, gate_gradients, aggregation_method,
                colocate_gradients_with_ops, grad_loss)
        reducer = gradient_reducer(getattr(loss, "graph", None))
        if reducer is not None:
            return reducer(_compute_gradients, args, {})
        gv = _compute_gradients(*args)
        reducer = gradient_reducer(gv[0][1].graph) if gv else None
        if reducer is not None:  # a loss that was not yet a tensor of the graph
            return reducer(lambda *_a, **_k: gv, (), {})
        return gv

    def apply_gradients(self, grads_and_vars: Any, global_step: Any = None,
                        name: str | None = None) -> Operation:
        """Applies gradients; increments ``global_step`` after the updates if given.

        Raises:
            ValueError: no gradient for any variable (names the variables).
        """
        gv = [(g, v) for g, v in grads_and_vars]
        if not gv:
            raise CkptsyncValueError("No variables provided.")
        with_grad = [(g, v) for g, v in gv if g is not None]
        if not with_grad:
            raise CkptsyncValueError(
                "No gradients provided for any variable, check your graph for ops that do not "
                f"support gradients, between variables {[v.name for _, v in gv]} and loss.")
        graph = get_default_graph()
        with graph.control_dependencies(None):  # TF1's init_scope (the name scope stays)
            self._create_slots([v for _, v in with_grad])
            self._prepare()
        with graph.name_scope(name or self._name) as scope:
            updates = []
            for g, v in with_grad:
                with graph.name_scope("update_" + v.op.name):
                    if isinstance(g, IndexedSlices):
                        updates.append(self._apply_sparse_duplicate_indices(g, v))
                    else:
                        updates.append(self._apply_dense(convert_to_tensor(g), v))
            # As TF1: the op returned is named as the scope ("GradientDescent"): the
            # updates' group, or, with a global step, its increment after them (the
            # group is then "<scope>/update").
            if global_step is None:
                return self._finish(updates, scope)
            finish = self._finish(updates, "update")
            with graph.control_dependencies([finish]):
                inc = assign_add(global_step, np.asarray(1, global_step.dtype.np), name=scope)
            return inc.op

    def minimize(self, loss: Any, global_step: Any = None, var_list: Any = None,
                 gate_gradients: int = 1, aggregation_method: Any = None,
                 colocate_gradients_with_ops: bool = False, name: str | None = None,
                 grad_loss: Any = None) -> Operation:
        """``compute_gradients`` then ``apply_gradients``, as TF1."""
        gv = self.compute_gradients(loss, var_list=var_list, grad_loss=grad_loss)
        return self.apply_gradients(gv, global_step=global_step, name=name)

    # ---------------------------------------------------------------- slots
    def _zeros_slot(self, var: Variable, slot_name: str, op_name: str) -> Variable:
        named = self._slots.setdefault(slot_name, {})
        if var.op.name in named:
            return named[var.op.name]
        return self._slot_with_initializer(var, slot_name, op_name, zeros_initializer())

    def _slot_with_initializer(self, var: Variable, slot_name: str, op_name: str,
                               initializer: Any) -> Variable:
        """The slot ``slot_name`` of ``var``, created as ``<var>/<op_name>`` in the current
        variable scope (``foo/w/Adam`` under ``variable_scope("foo")``; made unique
        with ``_1``, ``_2``... as TF1's ``slot_creator``: Adam's m and v are ``w/Adam`` and
        ``w/Adam_1``, a second Adam's ``w/Adam_2`` and ``w/Adam_3``)."""
        named = self._slots.setdefault(slot_name, {})
        if var.op.name in named:
            return named[var.op.name]
        graph = get_default_graph()
        scope = get_variable_scope().name
        with graph.name_scope(None):  # made unique as a name scope, as TF1's slot_creator
            full = graph.unique_name(f"{scope + '/' if scope else ''}{var.op.name}/{op_name}",
                                     mark_as_used=False)  # the variable marks it
        with _root_scope():
            slot = get_variable(full, shape=var.shape.as_list(), dtype=var.dtype.base_dtype,
                                initializer=initializer, trainable=False)
        named[var.op.name] = slot
        return slot

    def _non_slot_variable(self, name: str, initial: float, dtype: _dtypes.DType) -> Variable:
        """A variable of this optimizer instance named ``name`` in the current name scope
        (a second instance's is ``name_1``, as TF1's ``_create_non_slot_variable``)."""
        if name not in self._non_slot:
            graph = get_default_graph()
            with graph.control_dependencies(None):
                self._non_slot[name] = Variable(
                    lambda: np.asarray(initial, dtype=dtype.np), name=name, trainable=False)
        return self._non_slot[name]

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        return self._slots.get(name, {}).get(var.op.name)

    def get_slot_names(self) -> list[str]:
        return sorted(self._slots)

    def variables(self) -> list[Variable]:
        out = list(self._non_slot.values())
        for named in self._slots.values():
            out.extend(named.values())
        return out

    # ---------------------------------------------------------------- subclass API
    def _create_slots(self, var_list: list[Variable]) -> None:
        pass

    def _prepare(self) -> None:
        pass

    def _apply_dense(self, grad: Tensor, var: Variable) -> Tensor:
        raise NotImplementedError

    def _apply_sparse_duplicate_indices(self, grad: IndexedSlices, var: Variable) -> Any:
        """Applies an ``IndexedSlices`` gradient whose indices may repeat, as TF1: sums the
        rows of repeated indices, then :meth:`_apply_sparse` (unique indices)."""
        return self._apply_sparse(sum_duplicate_indices(grad), var)

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Any:
        """Applies an ``IndexedSlices`` gradient with unique indices. This default
        converts it to a dense ``[*var.shape]`` gradient and calls :meth:`_apply_dense`;
        optimizers that can update only the rows given override it (as TF1's)."""
        return self._apply_dense(convert_to_tensor(grad), var)

    def _finish(self, update_ops: list[Any], name_scope: str) -> Operation:
        return group(*update_ops, name=name_scope)


def _compute_gradients(loss: Any, var_list: Any = None, gate_gradients: int = 1,
                       aggregation_method: Any = None,
                       colocate_gradients_with_ops: bool = False,
                       grad_loss: Any = None) -> GradsAndVars:
    """The base ``compute_gradients``, unreduced (what a reducer's ``compute`` is)."""
    if callable(loss) and not isinstance(loss, Tensor):
        raise CkptsyncTypeError("compute_gradients: loss must be a Tensor in graph mode.")
    loss_t = convert_to_tensor(loss)
    if var_list is None:
        var_list = trainable_variables() + loss_t.graph.get_collection(
            "trainable_resource_variables")
    var_list = list(var_list)
    if not var_list:
        raise CkptsyncValueError("No variables to optimize.")
    for v in var_list:
        if not isinstance(v, Variable):
            raise CkptsyncTypeError(f"Argument is not a cs.Variable: {v!r}")
    grads = gradients(loss_t, var_list, grad_ys=grad_loss)
    return list(zip(grads, var_list))


def _root_scope() -> Any:
    root = get_variable_store(get_default_graph()).root_scope
    return variable_scope(root, auxiliary_name_scope=False)


Hyper = Any  # a Python number, or a float Tensor/Variable/placeholder (fed per step),
#             or a zero-argument callable returning one (as TF1's optimizers accept)


def _is_dynamic(value: Any) -> bool:
    return isinstance(value, (Tensor, Variable)) or callable(value)


def _hyper(name: str, value: Any, low: float = 0.0, high: float | None = None,
           low_open: bool = False) -> Hyper:
    """Validates a hyperparameter: a finite real number in range (names it if not); a
    tensor, variable or callable passes as it is (its value is known only at run time)."""
    if _is_dynamic(value):
        return value
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise CkptsyncTypeError(f"{name} must be a number or a tensor, got {value!r}.") from None
    ok = math.isfinite(v) and (v > low if low_open else v >= low) and (high is None or v < high)
    if not ok:
        rng = f"{'(' if low_open else '['}{low}, {high if high is not None else 'inf'})"
        raise CkptsyncValueError(f"{name} must be in {rng}, got {value!r}.")
    return v


def _const(x: Hyper, dtype: _dtypes.DType, name: str) -> Tensor:
    """``x`` as a scalar tensor of the variable's ``dtype``: a number becomes a constant
    named ``name``; a tensor is cast (as TF1's ``math_ops.cast(lr_t, var.dtype)``)."""
    if callable(x) and not isinstance(x, (Tensor, Variable)):
        x = x()
    if isinstance(x, (Tensor, Variable)):
        t = x.value() if isinstance(x, Variable) else x
        return t if t.dtype.base_dtype == dtype.base_dtype else cast(t, dtype.base_dtype)
    return convert_to_tensor(x, dtype=dtype.base_dtype, name=name)


class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * grad``, as ``tf.train.GradientDescentOptimizer``."""

    def __init__(self, learning_rate: float, use_locking: bool = False,
                 name: str = "GradientDescent"):
        super().__init__(use_locking, name)
        self._lr = _hyper("learning_rate", learning_rate)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Tensor:
        lr = _const(self._lr, var.dtype, "learning_rate")
        return grad.graph.create_op("ApplyGradientDescent", [var.value(), lr, grad],
                                    [var.dtype], [var.shape]).outputs[0]

    def _apply_sparse_duplicate_indices(self, grad: IndexedSlices, var: Variable) -> Any:
        # As TF1's: no summing first, scatter_sub adds repeated rows up itself.
        return self._apply_sparse(grad, var)

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Any:
        """``var[indices] -= lr * values`` (``ScatterSub``): only the rows given are read
        and written, O(rows x dim), as TF1's."""
        lr = _const(self._lr, var.dtype, "learning_rate")
        return scatter_sub(var, grad.indices, multiply(grad.values, lr))


class MomentumOptimizer(Optimizer):
    """Momentum (optionally Nesterov), as ``tf.train.MomentumOptimizer``; slot ``Momentum``."""

    def __init__(self, learning_rate: Hyper, momentum: Hyper, use_locking: bool = False,
                 name: str = "Momentum", use_nesterov: bool = False):
        super().__init__(use_locking, name)
        self._lr = _hyper("learning_rate", learning_rate)
        self._momentum = _hyper("momentum", momentum)
        self._nesterov = bool(use_nesterov)

    def _create_slots(self, var_list: list[Variable]) -> None:
        for v in var_list:
            self._zeros_slot(v, "momentum", self._name)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Tensor:
        accum = self.get_slot(var, "momentum")
        assert accum is not None
        return grad.graph.create_op(
            "ApplyMomentum", [var.value(), accum.value(),
                              _const(self._lr, var.dtype, "learning_rate"), grad,
                              _const(self._momentum, var.dtype, "momentum")],
            [var.dtype], [var.shape], attrs={"use_nesterov": self._nesterov}).outputs[0]

    def _apply_sparse(self, grad: Any, var: Variable) -> Tensor:
        """Only the rows ``grad.indices`` (an ``IndexedSlices``) of ``var`` and its slot
        move (TF1's ``SparseApplyMomentum``)."""
        accum = self.get_slot(var, "momentum")
        assert accum is not None
        return apply_op("SparseApplyMomentum", [var, accum], [
            _const(self._lr, var.dtype, "learning_rate"), grad.values, grad.indices,
            _const(self._momentum, var.dtype, "momentum")], use_nesterov=self._nesterov)


class AdamOptimizer(Optimizer):
    """Adam with TF1's update rule, as ``tf.train.AdamOptimizer``.

    Slots ``m`` (``<var>/Adam``) and ``v`` (``<var>/Adam_1``); non-slot variables
    ``beta1_power`` and ``beta2_power`` (initialized to beta1, beta2 and multiplied by them
    after each step).
    """

    def __init__(self, learning_rate: Hyper = 0.001, beta1: Hyper = 0.9, beta2: Hyper = 0.999,
                 epsilon: Hyper = 1e-8, use_locking: bool = False, name: str = "Adam"):
        super().__init__(use_locking, name)
        self._lr = _hyper("learning_rate", learning_rate)
        self._beta1 = _hyper("beta1", beta1, 0.0, 1.0)
        self._beta2 = _hyper("beta2", beta2, 0.0, 1.0)
        self._epsilon = _hyper("epsilon", epsilon)

    def _create_slots(self, var_list: list[Variable]) -> None:
        dt = var_list[0].dtype
        self._non_slot_variable("beta1_power", self._beta1, dt)
        self._non_slot_variable("beta2_power", self._beta2, dt)
        for v in var_list:
            self._zeros_slot(v, "m", self._name)
            self._zeros_slot(v, "v", self._name)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Tensor:
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        assert m is not None and v is not None
        dt = var.dtype
        b1p, b2p = self._non_slot["beta1_power"], self._non_slot["beta2_power"]
        return grad.graph.create_op(
            "ApplyAdam",
            [var.value(), m.value(), v.value(), b1p.value(), b2p.value(),
             _const(self._lr, dt, "learning_rate"), _const(self._beta1, dt, "beta1"),
             _const(self._beta2, dt, "beta2"), _const(self._epsilon, dt, "epsilon"), grad],
            [dt], [var.shape],
            attrs={"vars": (var.op.name, m.op.name, v.op.name)}).outputs[0]

    def _finish(self, update_ops: list[Any], name_scope: str) -> Operation:
        graph = get_default_graph()
        b1p, b2p = self._non_slot["beta1_power"], self._non_slot["beta2_power"]
        with graph.control_dependencies(update_ops):
            u1 = assign(b1p, b1p.value() * _const(self._beta1, b1p.dtype, "beta1"))
            u2 = assign(b2p, b2p.value() * _const(self._beta2, b2p.dtype, "beta2"))
        return group(*update_ops, u1, u2, name=name_scope)


_ = GraphKeys
