"""Summary ops, as TF1's ``tf.summary.scalar/histogram/image/text/merge/merge_all``.

Each op yields one serialized ``Summary`` protocol buffer (a ``tf.string`` scalar), is
added to ``GraphKeys.SUMMARIES`` (or ``collections=``), and is named and tagged as TF1
names them: ``tf.summary.scalar("acc", x)`` inside ``name_scope("foo")`` is the op
``foo/acc`` with tag ``foo/acc``; with ``family="fam"`` the op is ``foo/fam/acc`` and the
tag ``fam/foo/fam/acc``. The messages are ``tensorboard.compat.proto``'s, built by the
kernels when the ops run (the ``tensorboard`` package is needed then, not at build time).
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError, InvalidArgumentError
from ..graph import GraphKeys, add_to_collection, get_collection, name_scope
from ..ops.array_ops import convert_to_tensor
from ..ops.registry import register, single
from ..tensor import Tensor
from . import _tb
from .histogram import histogram_fields

__all__ = ["scalar", "histogram", "image", "text", "merge", "merge_all"]

_INVALID_TAG_CHARS = re.compile(r"[^-/\w\.]")


def _clean_tag(name: str | None) -> str | None:
    """As TF1's ``summary_op_util.clean_tag``: illegal characters become ``_``."""
    if name is None:
        return None
    new = _INVALID_TAG_CHARS.sub("_", name).lstrip("/")
    return new


@contextlib.contextmanager
def _summary_scope(name: str, family: str | None, values: Any) -> Iterator[tuple[str, str]]:
    """Yields ``(tag, scope)`` as TF1's ``summary_op_util.summary_scope``."""
    name, family = _clean_tag(name) or "", _clean_tag(family)
    base = name if family is None else f"{family}/{name}"
    with name_scope(base, values=values) as scope:
        tag = scope.rstrip("/") if family is None else f"{family}/{scope.rstrip('/')}"
        yield tag, scope


def _collect(t: Tensor, collections: Sequence[str] | None) -> Tensor:
    for key in ([GraphKeys.SUMMARIES] if collections is None else collections):
        add_to_collection(key, t)
    return t


def _serialize(values: list[Any]) -> np.ndarray:
    summary = _tb.proto("summary_pb2.Summary")(value=values)
    return np.array(summary.SerializeToString(), dtype=object)


def _value(**kw: Any) -> Any:
    return _tb.proto("summary_pb2.Summary").Value(**kw)


# --------------------------------------------------------------------- scalar
@register("ScalarSummary", not_differentiable=True)
def _scalar_kernel(values: np.ndarray, *, tag: str) -> np.ndarray:
    if np.shape(values) != ():
        raise InvalidArgumentError(None, None, f"tags and values not the same shape: [] != "
                                   f"{list(np.shape(values))} (tag '{tag}')")
    return _serialize([_value(tag=tag, simple_value=float(values))])


def _real(t: Tensor, what: str) -> None:
    if t.dtype.np.kind not in "iuf":
        raise CkptsyncTypeError(f"{what}: expected a real number tensor, got {t.dtype.name}.")


def scalar(name: str, tensor: Any, collections: Sequence[str] | None = None,
           family: str | None = None) -> Tensor:
    """A ``Summary`` with one scalar value, as TF1's ``tf.summary.scalar``.

    Args:
        name: the op's name and the tag's last part.
        tensor: a real-valued scalar ``[]`` (int or float).
        collections: graph collections to add it to (default ``[GraphKeys.SUMMARIES]``).
        family: a tag prefix that groups it in TensorBoard.

    Returns: a ``tf.string`` scalar tensor (op type ``ScalarSummary``).

    Raises:
        TypeError: ``tensor`` is not real-valued. InvalidArgumentError (at run time):
        ``tensor`` is not a scalar, as TF1.
    """
    t = convert_to_tensor(tensor)
    _real(t, f"tf.summary.scalar {name!r}")
    with _summary_scope(name, family, [t]) as (tag, scope):
        out = single("ScalarSummary", [t], _dtypes.string, (), name=scope, attrs={"tag": tag})
    return _collect(out, collections)


# ------------------------------------------------------------------ histogram
@register("HistogramSummary", not_differentiable=True)
def _histogram_kernel(values: np.ndarray, *, tag: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if np.isnan(v).any():
        raise InvalidArgumentError(None, None, f"Nan in summary histogram for: {tag}")
    if np.isinf(v).any():
        raise InvalidArgumentError(None, None, f"Infinity in summary histogram for: {tag}")
    histo = _tb.proto("summary_pb2.HistogramProto")(**histogram_fields(v))
    return _serialize([_value(tag=tag, histo=histo)])


def histogram(name: str, values: Any, collections: Sequence[str] | None = None,
              family: str | None = None) -> Tensor:
    """A ``Summary`` with a histogram of ``values`` (any shape), as TF1's
    ``tf.summary.histogram``: TF's default buckets (see :mod:`.histogram`).

    Raises:
        TypeError: ``values`` is not real-valued. InvalidArgumentError (at run time): a
        NaN or infinite value, as TF1 (``Nan in summary histogram for: <tag>``).
    """
    t = convert_to_tensor(values)
    _real(t, f"tf.summary.histogram {name!r}")
    with _summary_scope(name, family, [t]) as (tag, scope):
        out = single("HistogramSummary", [t], _dtypes.string, (), name=scope,
                     attrs={"tag": tag})
    return _collect(out, collections)


# ---------------------------------------------------------------------- image
_BAD_COLOR = np.array([255, 0, 0, 255], dtype=np.uint8)


def _to_uint8(img: np.ndarray) -> np.ndarray:
    """One ``[h, w, c]`` image as uint8, as TF's ImageSummary ``NormalizeFloatImage``:
    all non-negative: scaled so the largest is 255; else scaled by the largest magnitude
    around 128; pixels with a non-finite channel are red."""
    if img.dtype == np.uint8:
        return img
    x = img.astype(np.float32)
    finite = np.asarray(np.isfinite(x).all(axis=-1))
    good = x[finite]
    lo = np.float32(good.min()) if good.size else np.float32(np.inf)
    hi = np.float32(good.max()) if good.size else np.float32(-np.inf)
    if lo < 0:
        m = max(abs(lo), abs(hi))
        scale, offset = (np.float32(0) if m < 1e-6 else np.float32(127.0) / m), np.float32(128)
    else:
        scale = np.float32(0) if hi < 1e-6 else np.float32(255.0) / hi
        offset = np.float32(0)
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.where(finite[..., None], x * scale + offset, 0).astype(np.uint8)
    out[~finite] = _BAD_COLOR[: x.shape[-1]]
    return out


def _png(img: np.ndarray) -> bytes:
    from PIL import Image  # pillow comes with the tensorboard extra

    arr = img[..., 0] if img.shape[-1] == 1 else img
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(arr)).save(buf, format="PNG")
    return buf.getvalue()


@register("ImageSummary", not_differentiable=True)
def _image_kernel(tensor: np.ndarray, *, tag: str, max_images: int) -> np.ndarray:
    if tensor.ndim != 4 or tensor.shape[-1] not in (1, 3, 4):
        raise InvalidArgumentError(None, None, "Tensor must be 4-D with last dim 1, 3, or 4, "
                                   f"not {list(tensor.shape)} (tag '{tag}')")
    image_cls = _tb.proto("summary_pb2.Summary").Image
    values = []
    for i in range(min(max_images, tensor.shape[0])):
        img = _to_uint8(tensor[i])
        t = f"{tag}/image/{i}" if max_images > 1 else f"{tag}/image"
        values.append(_value(tag=t, image=image_cls(
            height=img.shape[0], width=img.shape[1], colorspace=img.shape[2],
            encoded_image_string=_png(img))))
    return _serialize(values)


def image(name: str, tensor: Any, max_outputs: int = 3,
          collections: Sequence[str] | None = None, family: str | None = None) -> Tensor:
    """A ``Summary`` with up to ``max_outputs`` PNG images, as TF1's ``tf.summary.image``.

    Args:
        tensor: ``[batch, height, width, channels]``, channels 1, 3 or 4; ``uint8`` as
            is, or float (scaled into 0..255 as TF1 does).
        max_outputs: images to keep; tags are ``<tag>/image/<i>`` (``<tag>/image`` when 1).

    Raises:
        ValueError: a known shape that is not 4-D with 1, 3 or 4 channels.
        TypeError: a dtype other than uint8, float16/32/64.
    """
    t = convert_to_tensor(tensor)
    if t.dtype.name not in ("uint8", "float16", "float32", "float64"):
        raise CkptsyncTypeError(f"tf.summary.image {name!r}: expected uint8 or float images, "
                                f"got {t.dtype.name}.")
    dims = t.shape.as_list() if t.shape.ndims is not None else None
    if dims is not None and (len(dims) != 4 or dims[-1] not in (None, 1, 3, 4)):
        raise CkptsyncValueError(f"tf.summary.image {name!r}: expected a tensor "
                                 f"[batch, height, width, 1|3|4], got shape {dims}.")
    if int(max_outputs) < 1:
        raise CkptsyncValueError(f"tf.summary.image {name!r}: max_outputs must be >= 1.")
    with _summary_scope(name, family, [t]) as (tag, scope):
        out = single("ImageSummary", [t], _dtypes.string, (), name=scope,
                     attrs={"tag": tag, "max_images": int(max_outputs)})
    return _collect(out, collections)


# ----------------------------------------------------------------------- text
@register("TensorSummaryV2", not_differentiable=True)
def _text_kernel(tensor: np.ndarray, *, tag: str) -> np.ndarray:
    arr = np.asarray(tensor, dtype=object)
    flat = [x.encode() if isinstance(x, str) else bytes(x) for x in arr.reshape(-1).tolist()]
    data = np.array(flat, dtype=object).reshape(arr.shape)
    proto = _tb.tensor_util().make_tensor_proto(data)
    meta = _tb.proto("summary_pb2.SummaryMetadata")
    metadata = meta(plugin_data=meta.PluginData(plugin_name="text"))
    return _serialize([_value(tag=tag, tensor=proto, metadata=metadata)])


def text(name: str, tensor: Any, collections: Sequence[str] | None = None) -> Tensor:
    """A ``Summary`` with a string tensor for TensorBoard's text plugin, as TF1's
    ``tf.summary.text`` (op type ``TensorSummaryV2``; any shape).

    Raises:
        ValueError: ``tensor`` is not a ``tf.string`` tensor, as TF1.
    """
    t = convert_to_tensor(tensor)
    if t.dtype != _dtypes.string:
        raise CkptsyncValueError(
            f"Expected tensor {t.name} to have dtype string, got {t.dtype.name}")
    with _summary_scope(name, None, [t]) as (tag, scope):
        out = single("TensorSummaryV2", [t], _dtypes.string, (), name=scope,
                     attrs={"tag": tag})
    return _collect(out, collections)


# ---------------------------------------------------------------------- merge
@register("MergeSummary", not_differentiable=True)
def _merge_kernel(*inputs: np.ndarray) -> np.ndarray:
    summary_cls = _tb.proto("summary_pb2.Summary")
    merged = summary_cls()
    seen: set[str] = set()
    for arr in inputs:
        for raw in np.asarray(arr, dtype=object).reshape(-1).tolist():
            try:
                s = summary_cls.FromString(raw)
            except Exception:  # noqa: BLE001 - protobuf's DecodeError
                raise InvalidArgumentError(None, None, "Could not parse one of the summary "
                                           "inputs") from None
            for v in s.value:
                if v.tag in seen:
                    raise InvalidArgumentError(
                        None, None, f"Duplicate tag {v.tag} found in summary inputs ")
                seen.add(v.tag)
                merged.value.add().CopyFrom(v)
    return np.array(merged.SerializeToString(), dtype=object)


def merge(inputs: Sequence[Any], collections: Sequence[str] | None = None,
          name: str | None = None) -> Tensor:
    """One ``Summary`` with the values of ``inputs`` (serialized ``Summary`` string
    tensors), as TF1's ``tf.summary.merge`` (op ``Merge/MergeSummary``). ``collections``
    defaults to none here, as TF1.

    Raises:
        TypeError: an input is not a ``tf.string`` tensor. InvalidArgumentError (at run
        time): two values share a tag, as TF1.
    """
    ts = [convert_to_tensor(x) for x in inputs]
    for t in ts:
        if t.dtype != _dtypes.string:
            raise CkptsyncTypeError(f"tf.summary.merge: input {t.name} is {t.dtype.name}, "
                                    "expected a string tensor of serialized summaries.")
    with name_scope(name, "Merge", ts):
        out = single("MergeSummary", ts, _dtypes.string, (), name=name or "MergeSummary")
    for key in collections or ():
        add_to_collection(key, out)
    return out


def merge_all(key: str = GraphKeys.SUMMARIES, scope: str | None = None,
              name: str | None = None) -> Tensor | None:
    """``merge`` of the collection ``key`` (``None`` when it is empty), as TF1's
    ``tf.summary.merge_all``."""
    ops = get_collection(key, scope)
    return merge(ops, name=name) if ops else None
