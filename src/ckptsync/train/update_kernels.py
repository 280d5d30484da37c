"""The fused variable-update kernels of the adaptive optimizers, dense and sparse, as TF1's
``training_ops`` (``ApplyRMSProp``/``SparseApplyRMSProp``, ``ApplyAdagrad``, ...).

Each rule is one numpy function ``rule(state, grad, hyper, attrs) -> new state`` written
beside TF's formula, where ``state`` is ``[var, *slots]`` (arrays of one shape) and
``hyper`` the scalar inputs in TF's order. :func:`_register_rule` registers it twice: the
dense op applies it to whole arrays; the sparse op (``SparseApply*``, inputs ``grad,
indices`` where the dense one has ``grad``) gathers the rows ``indices`` of every state
array, applies the same rule to them and scatters them back, so rows not looked up are
left exactly as they are (TF1's ``_apply_sparse``). Indices arrive unique (the optimizer
sums duplicates first).

Dense kernels never write into the arrays they read (a fetch or a snapshot may hold
them): they build new ones. Sparse kernels update the rows in place when nobody else holds
the arrays (``ops.scatter_ops.writable_value``, as the scatter ops), so a step costs the
rows looked up, not the table, and report only those rows as changed, of the variable and
of every slot (``RunContext.write_rows``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..graph import Operation, Tensor, get_default_graph
from ..ops.registry import register
from ..ops.scatter_ops import writable_value
from ..variables import Variable

__all__ = ["apply_op"]

Rule = Callable[[list[np.ndarray], np.ndarray, list[np.ndarray], dict[str, Any]],
                list[np.ndarray]]


def apply_op(op_type: str, refs: Sequence[Variable], inputs: Sequence[Tensor],
             **attrs: Any) -> Tensor:
    """Adds the update op ``op_type`` on ``refs`` (``[var, *slots]``, written by the op)
    with the value ``inputs`` in TF's order; returns its output (the new ``var``)."""
    var = refs[0]
    return get_default_graph().create_op(
        op_type, [r.value() for r in refs] + list(inputs), [var.dtype.base_dtype],
        [var.shape], attrs=attrs).outputs[0]


def _register_rule(op_type: str, n_refs: int, grad_at: int, rule: Rule) -> None:
    """Registers ``op_type`` (dense) and ``"Sparse" + op_type`` for ``rule``. ``grad_at``
    is the position of ``grad`` among the non-ref inputs (``indices`` follows it in the
    sparse op); the other non-ref inputs are the scalar hyperparameters, in order."""

    def run(ctx: Any, op: Operation, args: tuple[Any, ...], sparse: bool) -> np.ndarray:
        names = [t.op.name for t in op.inputs[:n_refs]]
        state = [ctx.read(n) for n in names]
        dtype = state[0].dtype
        rest = list(args[n_refs:])
        grad = np.asarray(rest.pop(grad_at), dtype=dtype)
        indices = rest.pop(grad_at) if sparse else None
        hyper = [np.asarray(h, dtype=dtype) for h in rest]
        if indices is None:
            new = [np.asarray(a, dtype=dtype) for a in rule(state, grad, hyper, op.attrs)]
        else:
            idx = _rows(op, np.asarray(indices), state[0].shape[0] if state[0].ndim else 0)
            rows = rule([s[idx] for s in state], grad, hyper, op.attrs)
            del state  # held here, the arrays could not be updated in place
            new = []
            for n, r in zip(names, rows):
                full = writable_value(ctx, n)[0]  # in place unless someone holds it
                full[idx] = r
                new.append(full)
            for n, a in zip(names, new):
                ctx.write_rows(n, a, idx)  # only the rows idx of var and slots changed
            return new[0]
        for n, a in zip(names, new):
            ctx.write(n, a)
        return new[0]

    refs = tuple(range(n_refs))

    @register(op_type, kind="stateful", ref_inputs=refs, output_ref=0)
    def _dense(ctx: Any, op: Operation, *args: Any) -> np.ndarray:
        return run(ctx, op, args, False)

    @register("Sparse" + op_type, kind="stateful", ref_inputs=refs, output_ref=0)
    def _sparse(ctx: Any, op: Operation, *args: Any) -> np.ndarray:
        return run(ctx, op, args, True)


def _rows(op: Operation, indices: np.ndarray, n_rows: int) -> np.ndarray:
    """``indices`` as row numbers, checked against the variable's first dimension."""
    idx = indices.astype(np.intp, copy=False).reshape(-1)
    bad = (idx < 0) | (idx >= n_rows)
    if bad.any():
        at = int(np.argmax(bad))
        raise InvalidArgumentError(
            None, op, f"{op.type} op '{op.name}': index {int(idx[at])} at offset {at} in "
            f"indices is out of range [0, {n_rows}).")
    return idx


# --------------------------------------------------------------------- rules
def _momentum(state: list[np.ndarray], g: np.ndarray, h: list[np.ndarray],
              attrs: dict[str, Any]) -> list[np.ndarray]:
    # accum = momentum * accum + grad
    # var -= lr * accum  |  var -= lr * grad + lr * momentum * accum   (use_nesterov)
    var, accum = state
    lr, mu = h
    accum = accum * mu + g
    step = g * lr + accum * mu * lr if attrs["use_nesterov"] else accum * lr
    return [var - step, accum]


def _rmsprop(state: list[np.ndarray], g: np.ndarray, h: list[np.ndarray],
             attrs: dict[str, Any]) -> list[np.ndarray]:
    # ms += (grad^2 - ms) * (1 - rho)
    # mom = mom * momentum + lr * grad / sqrt(ms + epsilon);  var -= mom
    var, ms, mom = state
    lr, rho, mu, eps = h
    ms = ms + (g * g - ms) * (1 - rho)
    mom = mom * mu + g * lr / np.sqrt(ms + eps)
    return [var - mom, ms, mom]


def _centered_rmsprop(state: list[np.ndarray], g: np.ndarray, h: list[np.ndarray],
                      attrs: dict[str, Any]) -> list[np.ndarray]:
    # ms += (grad^2 - ms) * (1 - rho);  mg += (grad - mg) * (1 - rho)
    # mom = mom * momentum + lr * grad / sqrt(ms - mg^2 + epsilon);  var -= mom
    var, mg, ms, mom = state
    lr, rho, mu, eps = h
    ms = ms + (g * g - ms) * (1 - rho)
    mg = mg + (g - mg) * (1 - rho)
    mom = mom * mu + g * lr / np.sqrt(ms - mg * mg + eps)
    return [var - mom, mg, ms, mom]


def _adagrad(state: list[np.ndarray], g: np.ndarray, h: list[np.ndarray],
             attrs: dict[str, Any]) -> list[np.ndarray]:
    # accum += grad^2;  var -= lr * grad / sqrt(accum)
    var, accum = state
    (lr,) = h
    accum = accum + g * g
    return [var - g * lr / np.sqrt(accum), accum]


def _adadelta(state: list[np.ndarray], g: np.ndarray, h: list[np.ndarray],
              attrs: dict[str, Any]) -> list[np.ndarray]:
    # accum = rho * accum + (1 - rho) * grad^2
    # update = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * grad
    # var -= lr * update;  accum_update = rho * accum_update + (1 - rho) * update^2
    var, accum, accum_update = state
    lr, rho, eps = h
    accum = accum * rho + g * g * (1 - rho)
    update = np.sqrt(accum_update + eps) / np.sqrt(accum + eps) * g
    accum_update = accum_update * rho + update * update * (1 - rho)
    return [var - update * lr, accum, accum_update]


def _ftrl_common(var: np.ndarray, accum: np.ndarray, linear: np.ndarray, g: np.ndarray,
                 g_linear: np.ndarray, lr: np.ndarray, l1: np.ndarray, l2: np.ndarray,
                 lr_power: np.ndarray) -> list[np.ndarray]:
    # new_accum = accum + grad^2
    # linear += grad' - (new_accum^-p - accum^-p) / lr * var      (sqrt where p = -0.5)
    # quadratic = new_accum^-p / lr + 2 * l2
    # var = |linear| > l1 ? (sign(linear) * l1 - linear) / quadratic : 0
    new_accum = accum + g * g
    if float(lr_power) == -0.5:
        new_pow, old_pow = np.sqrt(new_accum), np.sqrt(accum)
    else:
        new_pow, old_pow = np.power(new_accum, -lr_power), np.power(accum, -lr_power)
    linear = linear + g_linear - (new_pow - old_pow) / lr * var
    quadratic = new_pow / lr + 2 * l2
    new_var = np.where(np.abs(linear) > l1, (np.sign(linear) * l1 - linear) / quadratic,
                       np.zeros_like(var))
    return [new_var, new_accum, linear]


def _ftrl(state: list[np.ndarray], g: np.ndarray, h: list[np.ndarray],
          attrs: dict[str, Any]) -> list[np.ndarray]:
    var, accum, linear = state
    lr, l1, l2, lr_power = h
    return _ftrl_common(var, accum, linear, g, g, lr, l1, l2, lr_power)


def _ftrl_v2(state: list[np.ndarray], g: np.ndarray, h: list[np.ndarray],
             attrs: dict[str, Any]) -> list[np.ndarray]:
    # as Ftrl, but linear takes grad + 2 * l2_shrinkage * var (accum still takes grad^2)
    var, accum, linear = state
    lr, l1, l2, l2_shrinkage, lr_power = h
    return _ftrl_common(var, accum, linear, g, g + 2 * l2_shrinkage * var, lr, l1, l2,
                        lr_power)


# ApplyMomentum (dense) has its own kernel in optimizer.py; only its sparse twin is here.
_register_rule("ApplyRMSProp", 3, 4, _rmsprop)          # var ms mom | lr rho momentum eps grad
_register_rule("ApplyCenteredRMSProp", 4, 4, _centered_rmsprop)  # var mg ms mom | ...
_register_rule("ApplyAdagrad", 2, 1, _adagrad)          # var accum | lr grad
_register_rule("ApplyAdadelta", 3, 3, _adadelta)        # var accum accum_update | lr rho eps grad
_register_rule("ApplyFtrl", 3, 0, _ftrl)                # var accum linear | grad lr l1 l2 p
_register_rule("ApplyFtrlV2", 3, 0, _ftrl_v2)           # ... | grad lr l1 l2 l2_shrinkage p


@register("SparseApplyMomentum", kind="stateful", ref_inputs=(0, 1), output_ref=0)
def _sparse_momentum(ctx: Any, op: Operation, *args: Any) -> np.ndarray:
    # var accum | lr grad indices momentum  (TF's order): as the rule, on the rows only
    vn, an = op.inputs[0].op.name, op.inputs[1].op.name
    var, accum = ctx.read(vn), ctx.read(an)
    lr, grad, indices, mu = (np.asarray(a) for a in args[2:])
    idx = _rows(op, indices, var.shape[0] if var.ndim else 0)
    new_v, new_a = _momentum([var[idx], accum[idx]], grad.astype(var.dtype),
                             [lr.astype(var.dtype), mu.astype(var.dtype)], op.attrs)
    del var, accum  # held here, the arrays could not be updated in place
    var, accum = writable_value(ctx, vn)[0], writable_value(ctx, an)[0]
    var[idx], accum[idx] = new_v, new_a
    ctx.write_rows(an, accum, idx)
    ctx.write_rows(vn, var, idx)
    return var
