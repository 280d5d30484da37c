"""Matrix products and norms: ``matmul`` (rank 2 and batched), ``tensordot``, ``einsum``,
``norm``, as TF1.

``matmul`` of two rank-2 tensors is a ``MatMul`` op; of higher (or unknown) rank a
``BatchMatMulV2`` op whose batch dimensions broadcast as numpy (``[2, 1, m, k] x [5, k, n]
-> [2, 5, m, n]``), both named ``MatMul`` as TF1's. ``einsum`` covers the forms models use
(matmul, batch matmul, transposes, contractions to a scalar ``'ij->'``, outer products,
``...``); a label repeated within one operand (a trace or diagonal) is refused with
``ValueError``. Gradients of batched products sum over broadcast batch dimensions.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor, get_default_graph
from ..tensor_shape import TensorShape, broadcast_static_shape
from .array_ops import convert_to_tensor, sum_to_shape_of, transpose
from .const_fold import constant_value
from .math_ops import _operands, abs, pow, sqrt
from .reduction_ops import norm_axis, reduce_max, reduce_sum
from .registry import register, single

__all__ = ["matmul", "tensordot", "einsum", "norm", "trace", "matrix_transpose",
           "matrix_diag_part"]
# Names also (or only) exported as ``cs.nn.<name>``.
NN_EXPORTS: tuple[str, ...] = ()


# --------------------------------------------------------------------- matmul
def _grad_matmul(op: Any, g: Tensor) -> list[Any]:
    a, b = op.inputs
    ta, tb = op.attrs["transpose_a"], op.attrs["transpose_b"]
    if not ta and not tb:
        return [matmul(g, b, transpose_b=True), matmul(a, g, transpose_a=True)]
    if not ta and tb:
        return [matmul(g, b), matmul(g, a, transpose_a=True)]
    if ta and not tb:
        return [matmul(b, g, transpose_b=True), matmul(a, g)]
    return [matmul(b, g, transpose_a=True, transpose_b=True),
            matmul(g, a, transpose_a=True, transpose_b=True)]


@register("MatMul", grad=_grad_matmul, accepts_out=True)
def _matmul_kernel(a: np.ndarray, b: np.ndarray, *, transpose_a: bool, transpose_b: bool,
                   out: np.ndarray | None = None) -> np.ndarray:
    x, y = a.T if transpose_a else a, b.T if transpose_b else b
    if out is not None and (out.shape != (x.shape[0], y.shape[-1]) or x.dtype != out.dtype
                            or y.dtype != out.dtype):
        out = None
    return np.matmul(x, y, out=out)


def _adj(x: np.ndarray, adj: bool) -> np.ndarray:
    if not adj:
        return x
    x = np.swapaxes(x, -1, -2)
    return np.conj(x) if x.dtype.kind == "c" else x


def _grad_batch_matmul(op: Any, g: Tensor) -> list[Any]:
    x, y = op.inputs
    ax, ay = op.attrs["adj_x"], op.attrs["adj_y"]
    if not ax and not ay:
        gx, gy = _bmm(g, y, False, True), _bmm(x, g, True, False)
    elif not ax:
        gx, gy = _bmm(g, y, False, False), _bmm(g, x, True, False)
    elif not ay:
        gx, gy = _bmm(y, g, False, True), _bmm(x, g, False, False)
    else:
        gx, gy = _bmm(y, g, True, True), _bmm(g, x, True, True)
    return [sum_to_shape_of(gx, x), sum_to_shape_of(gy, y)]


@register("BatchMatMulV2", grad=_grad_batch_matmul)
def _batch_matmul_kernel(x: np.ndarray, y: np.ndarray, *, adj_x: bool, adj_y: bool
                         ) -> np.ndarray:
    return np.matmul(_adj(x, adj_x), _adj(y, adj_y))


def _mat_dims(s: TensorShape, t: bool) -> tuple[Any, Any]:
    if s.dims is None:
        return None, None
    r, c = s.dims[-2], s.dims[-1]
    return (c, r) if t else (r, c)


def _bmm(x: Tensor, y: Tensor, adj_x: bool, adj_y: bool, name: str | None = None) -> Tensor:
    sx, sy = x.shape, y.shape
    m, k1 = _mat_dims(sx, adj_x)
    k2, n = _mat_dims(sy, adj_y)
    if k1 is not None and k2 is not None and k1 != k2:
        raise CkptsyncValueError(
            f"MatMul: dimensions must be equal, but are {k1} and {k2} for inputs with shapes "
            f"{sx} and {sy} (adjoint_a={adj_x}, adjoint_b={adj_y}).")
    shape: Any = None
    if sx.dims is not None and sy.dims is not None:
        batch = broadcast_static_shape(TensorShape(sx.dims[:-2]), TensorShape(sy.dims[:-2]))
        if batch is None:
            raise CkptsyncValueError(
                f"MatMul: batch dimensions of {sx} and {sy} do not broadcast.")
        shape = [*batch.dims, m, n]  # type: ignore[misc]
    return single("BatchMatMulV2", [x, y], x.dtype, shape, name=name,
                  attrs={"adj_x": adj_x, "adj_y": adj_y})


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False,
           adjoint_a: bool = False, adjoint_b: bool = False, a_is_sparse: bool = False,
           b_is_sparse: bool = False, name: str | None = None) -> Tensor:
    """Matrix product ``[..., m, k] x [..., k, n] -> [..., m, n]``, as TF1's ``tf.matmul``.

    Rank-2 inputs make a ``MatMul`` op; rank >= 3 (or unknown) a ``BatchMatMulV2`` whose
    batch dimensions broadcast. ``transpose_*`` transposes the last two dimensions,
    ``adjoint_*`` also conjugates (the same for real dtypes).

    Raises:
        ValueError: a rank below 2, inner dimensions differ, batch dimensions do not
            broadcast, or both ``transpose_a`` and ``adjoint_a`` (or ``_b``) are set.
        TypeError: the dtypes differ, or bool inputs.
    """
    if transpose_a and adjoint_a:
        raise CkptsyncValueError("Only one of transpose_a and adjoint_a can be True.")
    if transpose_b and adjoint_b:
        raise CkptsyncValueError("Only one of transpose_b and adjoint_b can be True.")
    x, y = _operands("MatMul", a, b)
    if x.dtype.is_bool:
        raise CkptsyncTypeError(f"MatMul: bool inputs are not supported ({x.name}).")
    sa, sb = x.shape, y.shape
    for s, t in ((sa, x), (sb, y)):
        if s.ndims is not None and s.ndims < 2:
            raise CkptsyncValueError(f"MatMul: shape must be rank 2 but is rank {s.ndims} for "
                                     f"'{t.name}' with shape {s}.")
    ta, tb = transpose_a or adjoint_a, transpose_b or adjoint_b
    if sa.ndims == 2 and sb.ndims == 2 and not (x.dtype.is_complex and (adjoint_a or adjoint_b)):
        m, k1 = _mat_dims(sa, ta)
        k2, n = _mat_dims(sb, tb)
        if k1 is not None and k2 is not None and k1 != k2:
            raise CkptsyncValueError(
                f"MatMul: dimensions must be equal, but are {k1} and {k2} for inputs with "
                f"shapes {sa} and {sb} (transpose_a={ta}, transpose_b={tb}).")
        return single("MatMul", [x, y], x.dtype, [m, n], name=name,
                      attrs={"transpose_a": ta, "transpose_b": tb})
    return _bmm(x, y, ta, tb, name=name or "MatMul")


# --------------------------------------------------------------------- einsum
_LABELS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _split_subs(subs: str) -> list[str]:
    """``'b...ij'`` -> ``['b', '...', 'i', 'j']``."""
    return re.findall(r"\.\.\.|[a-zA-Z]", subs)


def _parse(equation: str, n: int) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    if not re.fullmatch(r"[a-zA-Z.,]*(->[a-zA-Z.]*)?", eq):
        raise CkptsyncValueError(f"einsum: invalid equation {equation!r}.")
    lhs, _, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != n:
        raise CkptsyncValueError(f"einsum: equation {equation!r} names {len(ins)} operands, "
                                 f"got {n} inputs.")
    for s in ins:
        parts = _split_subs(s)
        if "".join(parts) != s or parts.count("...") > 1:
            raise CkptsyncValueError(f"einsum: invalid subscripts {s!r} in {equation!r}.")
        letters = [p for p in parts if p != "..."]
        if len(set(letters)) != len(letters):
            raise CkptsyncValueError(
                f"einsum: a label repeated within one operand ({s!r} in {equation!r}: a "
                f"trace or diagonal) is not supported.")
    if "->" not in eq:  # numpy's implicit output: the labels seen once, sorted
        letters = [c for c in lhs if c.isalpha()]
        out = ("..." if "..." in lhs else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1))
    for c in out.replace("...", ""):
        if c not in lhs:
            raise CkptsyncValueError(f"einsum: output label {c!r} of {equation!r} is in no "
                                     f"input.")
    if "..." in lhs and "..." not in out:
        raise CkptsyncValueError(f"einsum: '...' must appear in the output of {equation!r}.")
    return ins, out


def _einsum_shape(ins: list[str], out: str, shapes: list[TensorShape]) -> Any:
    dims: dict[str, Any] = {}
    ell = TensorShape([])
    for subs, s in zip(ins, shapes):
        parts = _split_subs(subs)
        if s.dims is None:
            return None
        nell = len(s.dims) - (len(parts) - ("..." in parts))
        if nell < 0 or (nell and "..." not in parts):
            raise CkptsyncValueError(f"einsum: subscripts {subs!r} do not fit the shape {s}.")
        i = 0
        for p in parts:
            if p == "...":
                e = broadcast_static_shape(ell, TensorShape(s.dims[i:i + nell]))
                if e is None:
                    raise CkptsyncValueError(f"einsum: '...' dimensions do not broadcast ({s}).")
                ell, i = e, i + nell
                continue
            d, prev = s.dims[i], dims.get(p)
            if prev is not None and d is not None and prev != d:
                raise CkptsyncValueError(
                    f"einsum: label {p!r} has dimension {prev} and {d} ({subs!r}, {s}).")
            dims[p] = d if prev is None else prev
            i += 1
    res: list[Any] = []
    for p in _split_subs(out):
        res.extend(ell.dims if p == "..." else [dims[p]])  # type: ignore[arg-type]
    return res


def _sum_ellipsis(r: np.ndarray, start: int, n_r: int, target: tuple[int, ...]) -> np.ndarray:
    """Sums ``r``'s ellipsis block (axes ``start..start+n_r``) down to ``target``."""
    extra = n_r - len(target)
    if extra > 0:
        r = r.sum(axis=tuple(range(start, start + extra)))
    axes = tuple(start + i for i, d in enumerate(target) if d == 1 and r.shape[start + i] != 1)
    return r.sum(axis=axes, keepdims=True) if axes else r


@register("EinsumGrad")
def _einsum_grad_kernel(g: np.ndarray, *xs: np.ndarray, equation: str, index: int
                        ) -> np.ndarray:
    ins, out = equation.split("->")
    subs = ins.split(",")
    mine, x = subs[index], xs[index]
    others = [s for i, s in enumerate(subs) if i != index]
    seen = set(out) | set("".join(others))
    parts = _split_subs(mine)
    kept = [p for p in parts if p == "..." or p in seen]
    ops = [g, *[v for i, v in enumerate(xs) if i != index]]
    extra = "..." in out and "..." not in parts  # x has no '...': sum over it
    r = np.einsum(f"{','.join([out, *others])}->{'...' if extra else ''}{''.join(kept)}", *ops)
    if extra:
        r = r.sum(axis=tuple(range(r.ndim - len(kept))))
    if np.iscomplexobj(r) and x.dtype.kind != "c":
        r = r.real
    # Back to x's layout: summed-out labels are broadcast, '...' summed to x's own.
    shape: list[int] = []
    i = 0
    n_ell_x = x.ndim - (len(parts) - ("..." in parts))
    for p in parts:
        if p == "...":
            n_r = r.ndim - (len(kept) - 1)
            r = _sum_ellipsis(r, i, n_r, x.shape[len(shape):len(shape) + n_ell_x])
            i += n_ell_x
            shape.extend(x.shape[len(shape):len(shape) + n_ell_x])
        elif p in seen:
            i += 1
            shape.append(x.shape[len(shape)])
        else:
            r = np.expand_dims(r, i)
            i += 1
            shape.append(x.shape[len(shape)])
    return np.ascontiguousarray(np.broadcast_to(r, x.shape)).astype(g.dtype, copy=False)


def _grad_einsum(op: Any, g: Tensor) -> list[Any]:
    return [single("EinsumGrad", [g, *op.inputs], x.dtype, x.shape,
                   attrs={"equation": op.attrs["equation"], "index": i})
            for i, x in enumerate(op.inputs)]


@register("Einsum", grad=_grad_einsum)
def _einsum_kernel(*xs: np.ndarray, equation: str, dot_axes: Any = None) -> np.ndarray:
    if dot_axes is not None:  # a plain contraction: BLAS through tensordot, no path search
        return np.tensordot(xs[0], xs[1], dot_axes)
    out = np.einsum(equation, *xs, optimize=len(xs) > 1)
    return np.asarray(out, dtype=xs[0].dtype)


def _dot_axes(ins: list[str], out: str) -> Any:
    """``(a_axes, b_axes)`` when ``a,b->out`` is ``np.tensordot(a, b, axes)`` (output = a's
    free labels then b's, in order; every other label contracted), else None."""
    if len(ins) != 2 or "..." in "".join(ins) + out:
        return None
    a, b = ins
    shared = [c for c in a if c in b]
    if any(c in out for c in shared):
        return None
    if out != "".join(c for c in a if c not in b) + "".join(c for c in b if c not in a):
        return None
    return ([a.index(c) for c in shared], [b.index(c) for c in shared])


def _einsum_op(ins: list[str], out: str, xs: list[Tensor], name: str) -> Tensor:
    for x in xs[1:]:
        if x.dtype != xs[0].dtype:
            raise CkptsyncTypeError(f"einsum: dtypes differ: {[t.dtype.name for t in xs]}.")
    if xs[0].dtype.is_bool:
        raise CkptsyncTypeError("einsum: bool inputs are not supported.")
    shape = _einsum_shape(ins, out, [x.shape for x in xs])
    attrs: dict[str, Any] = {"equation": f"{','.join(ins)}->{out}"}
    if xs[0].dtype.is_floating or xs[0].dtype.is_complex:
        attrs["dot_axes"] = _dot_axes(ins, out)
    return single("Einsum", xs, xs[0].dtype, shape, name=name, attrs=attrs)


def einsum(equation: str, *inputs: Any, **kwargs: Any) -> Tensor:
    """Einstein summation, as TF1's ``tf.einsum``: ``einsum('ij,jk->ik', a, b)`` is a
    matmul, ``'bij,bjk->bik'`` a batch matmul, ``'ij->ji'`` a transpose, ``'ij->'`` a sum,
    ``'i,j->ij'`` an outer product; ``...`` broadcasts. The op is named ``einsum/Einsum``.

    Raises:
        ValueError: a malformed equation, a label repeated within one operand, subscripts
            that do not fit an input's rank, or labels whose dimensions differ.
        TypeError: the dtypes differ, or an unexpected keyword argument.
    """
    name = kwargs.pop("name", None)
    if kwargs:
        raise CkptsyncTypeError(f"einsum: unexpected keyword arguments {sorted(kwargs)}.")
    xs = [convert_to_tensor(x) for x in inputs]
    if not xs:
        raise CkptsyncValueError("einsum: needs at least one input.")
    ins, out = _parse(equation, len(xs))
    with get_default_graph().name_scope(name or "einsum"):
        return _einsum_op(ins, out, xs, "Einsum")


def tensordot(a: Any, b: Any, axes: Any, name: str | None = None) -> Tensor:
    """Sums products over ``axes``, as ``tf.tensordot``: an int ``N`` contracts the last
    ``N`` axes of ``a`` with the first ``N`` of ``b``; ``[a_axes, b_axes]`` names them.
    The result has ``a``'s free axes, then ``b``'s. Needs inputs of known rank.

    Raises:
        ValueError: unknown ranks, bad ``axes``, or contracted dimensions that differ.
        TypeError: the dtypes differ.
    """
    x, y = _operands("Tensordot", a, b)
    ra, rb = x.shape.ndims, y.shape.ndims
    if ra is None or rb is None:
        raise CkptsyncValueError("tensordot: needs inputs of known rank.")
    if isinstance(axes, Tensor):
        axes = constant_value(axes)
        if axes is None:
            raise CkptsyncValueError("tensordot: 'axes' must be known while the graph is built.")
    if np.ndim(axes) == 0:
        n = int(axes)
        if not 0 <= n <= min(ra, rb):
            raise CkptsyncValueError(f"tensordot: axes={n} must be in [0, {min(ra, rb)}] for "
                                     f"shapes {x.shape} and {y.shape}.")
        ax_a, ax_b = list(range(ra - n, ra)), list(range(n))
    else:
        if len(axes) != 2:
            raise CkptsyncValueError(f"tensordot: axes must be an int or a pair, got {axes!r}.")
        ax_a = [int(i) for i in np.atleast_1d(axes[0])]
        ax_b = [int(i) for i in np.atleast_1d(axes[1])]
        if len(ax_a) != len(ax_b):
            raise CkptsyncValueError(f"tensordot: axes {axes!r} differ in length.")
        ax_a = [i % ra for i in ax_a] if ra else ax_a
        ax_b = [i % rb for i in ax_b] if rb else ax_b
    la = list(_LABELS[:ra])
    lb = list(_LABELS[ra:ra + rb])
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = "".join(c for i, c in enumerate(la) if i not in ax_a) + "".join(
        c for j, c in enumerate(lb) if j not in ax_b)
    return _einsum_op(["".join(la), "".join(lb)], out, [x, y], name or "Tensordot")


# --------------------------------------------------------------------- norm
def norm(tensor: Any, ord: Any = "euclidean", axis: Any = None,  # noqa: A002 - TF's name
         keepdims: Any = None, name: str | None = None, keep_dims: Any = None) -> Tensor:
    """Vector or matrix norm, as TF1's ``tf.norm``.

    ``axis`` None flattens the tensor (a vector norm of all elements), an int is a vector
    norm, a pair of ints a matrix norm. ``ord``: ``'euclidean'`` (``'fro'`` for matrices),
    1, ``np.inf`` or any ``p > 0`` for vectors; ``'euclidean'``/``'fro'``, 1 or ``np.inf``
    for matrices. The result is ``tensor``'s dtype.

    Raises:
        ValueError: an unsupported ``ord`` or ``axis``; both ``keepdims`` and ``keep_dims``.
        TypeError: a non-float tensor.
    """
    if keep_dims is not None:
        if keepdims is not None:
            raise CkptsyncValueError("norm: cannot specify both 'keepdims' and 'keep_dims'.")
        keepdims = keep_dims
    keepdims = bool(keepdims)
    x = convert_to_tensor(tensor)
    if not (x.dtype.is_floating or x.dtype.is_complex):
        raise CkptsyncTypeError(f"norm: expected a floating-point tensor, got {x.dtype.name}.")
    axes = norm_axis(axis, x.shape.ndims) if axis is not None else None
    is_matrix = axis is not None and np.ndim(axis) == 1 and len(axis) == 2
    if axis is not None and np.ndim(axis) == 1 and len(axis) not in (1, 2):
        raise CkptsyncValueError(f"norm: 'axis' must be None, an int or a pair, got {axis!r}.")
    if is_matrix and axes is not None and len(axes) != 2:
        raise CkptsyncValueError(f"norm: 'axis' must name two different axes, got {axis!r}.")
    supported = ("euclidean", "fro", 1, np.inf) if is_matrix else ("euclidean", 1, np.inf)
    if ord not in supported and (is_matrix or isinstance(ord, str) or not ord > 0):
        raise CkptsyncValueError(f"norm: 'ord' must be a supported {'matrix' if is_matrix else 'vector'} "
                                 f"norm, got {ord!r}.")
    if ord == "fro" and not is_matrix:
        raise CkptsyncValueError("norm: 'fro' is a matrix norm; 'axis' must be a pair.")
    with get_default_graph().name_scope(name or "norm"):
        if ord in ("euclidean", "fro"):
            sq = abs(x) * abs(x) if x.dtype.is_complex else x * x
            return sqrt(reduce_sum(sq, axes, keepdims))
        if is_matrix:
            a0, a1 = (axis[0], axis[1])
            r0, r1 = (a0 % x.shape.ndims, a1 % x.shape.ndims) if x.shape.ndims else (a0, a1)
            # ord=1: the max of the column sums (over axis[0]); inf: of the row sums.
            s_ax = r0 if ord == 1 else r1
            return reduce_max(reduce_sum(abs(x), s_ax, True), [r0, r1], keepdims)
        if ord == 1:
            return reduce_sum(abs(x), axes, keepdims)
        if ord == np.inf:
            return reduce_max(abs(x), axes, keepdims)
        p = float(ord)
        return pow(reduce_sum(pow(abs(x), p), axes, keepdims), 1.0 / p)


# --------------------------------------------------------------------- diagonals
def _grad_diag_part(op: Any, g: Tensor) -> list[Any]:
    x = op.inputs[0]
    return [single("MatrixDiagPartGrad", [g, x], g.dtype, x.shape)]


@register("MatrixDiagPart", grad=_grad_diag_part)
def _diag_part_kernel(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.diagonal(x, axis1=-2, axis2=-1))


@register("MatrixDiagPartGrad")
def _diag_part_grad_kernel(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape, g.dtype)
    n = min(x.shape[-2:])
    idx = np.arange(n)
    out[..., idx, idx] = g
    return out


def matrix_diag_part(input: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """The main diagonals ``[..., min(m, n)]`` of ``[..., m, n]``, as
    ``tf.matrix_diag_part``.

    Raises:
        ValueError: a rank below 2.
    """
    x = convert_to_tensor(input)
    dims = x.shape.dims
    if dims is not None and len(dims) < 2:
        raise CkptsyncValueError(f"matrix_diag_part: needs rank >= 2, got {x.shape}.")
    shape: Any = None
    if dims is not None:
        m, n = dims[-2], dims[-1]
        shape = [*dims[:-2], None if m is None or n is None else min(m, n)]
    return single("MatrixDiagPart", [x], x.dtype, shape, name=name)


def trace(x: Any, name: str | None = None) -> Tensor:
    """The sum of each matrix's main diagonal, ``[..., m, n] -> [...]``, as ``tf.trace``."""
    with get_default_graph().name_scope(name or "Trace") as exact:
        return reduce_sum(matrix_diag_part(x), -1, False, exact)


def matrix_transpose(a: Any, name: str = "matrix_transpose", conjugate: bool = False
                     ) -> Tensor:
    """Swaps the last two dimensions, as ``tf.matrix_transpose`` (needs a known rank).

    Raises:
        ValueError: an unknown rank or a rank below 2.
    """
    x = convert_to_tensor(a)
    nd = x.shape.ndims
    if nd is None or nd < 2:
        raise CkptsyncValueError(f"matrix_transpose: needs a known rank >= 2, got {x.shape}.")
    if conjugate and x.dtype.is_complex:
        raise CkptsyncTypeError("matrix_transpose: conjugate=True is not supported.")
    with get_default_graph().name_scope(name):
        return transpose(x, [*range(nd - 2), nd - 1, nd - 2])
