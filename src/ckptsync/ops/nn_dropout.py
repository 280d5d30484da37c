"""``dropout``, as TF1's ``tf.nn.dropout`` (``keep_prob`` or ``rate``).

Built as TF builds it under the ``dropout`` name scope: ``x`` scaled by ``1 / (1 - rate)``,
a ``random_uniform`` of the noise shape, kept where it is ``>= rate``. Seeds follow
``random_ops``: the same graph and op seeds give the same masks in every run of a
program, though not the masks TF's Philox generator draws.
"""

from __future__ import annotations

import numbers
from typing import Any

from .. import dtypes as _dtypes
from ..errors import CkptsyncValueError
from ..graph import Tensor, name_scope
from ..tensor_shape import TensorShape
from .array_ops import constant, convert_to_tensor, shape
from .const_fold import has_tensor
from .math_ops import cast, divide, greater_equal, multiply, subtract
from .random_ops import random_uniform
from .selection_ops import where_v2

__all__: list[str] = []
NN_EXPORTS: tuple[str, ...] = ("dropout",)


def _is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor) or hasattr(v, "_as_graph_element")


def _noise_shape(x: Tensor, noise_shape: Any) -> Any:
    """As TF's ``_get_noise_shape``: unknown dims of ``noise_shape`` taken from ``x``."""
    if noise_shape is None:
        return shape(x)
    if _is_tensor(noise_shape):
        return convert_to_tensor(noise_shape)
    if isinstance(noise_shape, (list, tuple)) and has_tensor(noise_shape):
        return noise_shape  # packed by random_uniform, as TF
    ns = TensorShape(noise_shape)
    xd = x.shape.dims
    if xd is not None and ns.dims is not None and len(xd) == len(ns.dims):
        ns = TensorShape([d if n is None and d is not None else n for d, n in zip(xd, ns.dims)])
    if ns.dims is not None and xd is not None:
        # The mask broadcasts against x: each noise dim is 1 or x's dim.
        for n, d in zip(reversed(ns.dims), reversed(xd)):
            if n is not None and d is not None and n not in (1, d):
                raise CkptsyncValueError(f"dropout: noise_shape {ns} does not broadcast to the "
                                         f"shape of x {x.shape}.")
    return ns


def dropout(x: Any, keep_prob: Any = None, noise_shape: Any = None, seed: int | None = None,
            name: str | None = None, rate: Any = None) -> Tensor:
    """Zeroes entries of ``x`` with probability ``rate`` and scales the kept ones by
    ``1 / (1 - rate)``, as TF1's ``tf.nn.dropout``.

    Give ``rate`` or ``keep_prob`` (``rate = 1 - keep_prob``), not both; either may be a
    scalar tensor (a placeholder fed 1.0 at evaluation keeps everything). A Python
    ``rate`` of 0 (``keep_prob`` 1) returns ``x`` itself. ``noise_shape`` (a list, with
    ``None`` for ``x``'s dims, or a 1-D int tensor) draws one decision per broadcast slice
    (``[batch, 1]`` drops whole rows). ``seed`` as ``random_ops``: the masks repeat across
    runs of a program with the same graph and op seeds, but are not bit-identical to TF's
    Philox draws. Output: ``x``'s shape and dtype; gradient ``mask / (1 - rate)``.

    Raises:
        ValueError: both or neither of ``rate``/``keep_prob``; a Python ``rate`` outside
            ``[0, 1)``; a non-float ``x``; a non-scalar rate tensor; a noise shape that does
            not broadcast.
    """
    if keep_prob is not None and rate is not None:
        raise CkptsyncValueError("Cannot specify both 'keep_prob' and 'rate'.")
    if keep_prob is not None:
        try:
            rate = 1.0 - keep_prob
        except TypeError:
            raise CkptsyncValueError(f"`keep_prob` must be a floating point number or Tensor. "
                                     f"Received: keep_prob={keep_prob}") from None
    if rate is None:
        raise CkptsyncValueError(f"`rate` must be provided. Received: rate={rate}")
    with name_scope(name, "dropout", [x]):
        is_number = isinstance(rate, numbers.Real) and not isinstance(rate, bool)
        if is_number and not 0 <= rate < 1:
            raise CkptsyncValueError(f"`rate` must be a scalar tensor or a float in the range "
                                     f"[0, 1). Received: rate={rate}")
        t = convert_to_tensor(x, name="x")
        if not t.dtype.is_floating:
            raise CkptsyncValueError(f"`x.dtype` must be a floating point tensor as `x` will be "
                                     f"scaled. Received: x_dtype={t.dtype.name}")
        if is_number and rate == 0:
            return t
        if is_number:
            ret = multiply(t, constant(1.0 / (1.0 - rate), dtype=t.dtype), name="Mul")
            r: Any = float(rate)
        elif _is_tensor(rate):
            r = convert_to_tensor(rate)
            if r.shape.ndims is not None and r.shape.ndims != 0:
                raise CkptsyncValueError(f"dropout: rate must be a scalar tensor, got shape "
                                         f"{r.shape}.")
            if r.dtype != t.dtype:
                if not r.dtype.is_floating:
                    raise CkptsyncValueError(f"dropout: rate must be floating, got "
                                             f"{r.dtype.name}.")
                r = cast(r, t.dtype, name="rate")
            ret = divide(t, subtract(constant(1, dtype=t.dtype), r), name="RealDiv")
        else:
            raise CkptsyncValueError(f"`rate` must be a scalar or scalar tensor. Received: "
                                     f"rate={rate}")
        ns = _noise_shape(t, noise_shape)
        with name_scope("random_uniform"):
            random = random_uniform(ns, dtype=t.dtype, seed=seed, name="RandomUniform")
        keep = greater_equal(random, r)
        out = where_v2(keep, ret, constant(0, dtype=t.dtype))
        out.set_shape(t.shape)  # as TF (the mask only broadcasts)
        return out


_ = _dtypes
