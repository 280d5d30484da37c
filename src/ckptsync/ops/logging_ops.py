"""Printing at run time: TF1's ``tf.Print`` (an identity that writes its data) and
``tf.print`` (an op that writes, run by fetching it or through a control dependency).

``tf.Print(x, [a, b], "msg: ")`` writes ``msg: [a][b]`` (each as TF's
``SummarizeValue``, :mod:`.tensor_format`) and a newline to ``sys.stderr`` each time it
runs (only the first ``first_n`` times in a session when given), and outputs ``x``; its
gradient goes to ``x`` alone. ``tf.print(*inputs)`` formats tensors numpy-style inside
Python structures (op ``StringFormat``) and writes the line (op ``PrintV2``, no output)
to stderr, stdout, ``tf.logging`` or a ``"file://<path>"`` (appended).
"""

from __future__ import annotations

import itertools
import os
import pprint
import random
import sys
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from .. import logging as _tf_logging
from ..errors import CkptsyncValueError
from ..graph import Operation, Tensor
from .array_ops import convert_to_tensor
from .registry import make_op, register
from .tensor_format import summarize_v1, summarize_v2

__all__ = ["Print", "print"]
NN_EXPORTS: tuple[str, ...] = ()


def _print_grad(op: Operation, g: Tensor | None) -> list[Any]:
    return [g] + [None] * (len(op.inputs) - 1)


@register("Print", kind="stateful", grad=_print_grad)
def _print_kernel(ctx: Any, op: Operation, x: Any, *data: Any) -> Any:
    a = op.attrs
    if a["first_n"] >= 0:
        counter = ctx.resources.setdefault(("Print", op.name), itertools.count())
        if next(counter) >= a["first_n"]:
            return x
    text = a["message"] + "".join(f"[{summarize_v1(d, a['summarize'])}]" for d in data)
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
    return x


def Print(input_: Any, data: Any, message: str | None = None, first_n: int | None = None,  # noqa: N802
          summarize: int | None = None, name: str | None = None) -> Tensor:
    """``input_`` unchanged, writing ``message`` and ``data`` to stderr when it runs, as
    TF1's ``tf.Print`` (op ``Print``).

    Args:
        input_: the tensor passed through (its dtype and shape).
        data: a list of tensors (any dtypes) written as ``[v0][v1]...``, each with its
            first ``summarize`` elements (3 by default; negative: all).
        message: a prefix, written as it is.
        first_n: write only the first ``first_n`` runs of this op in a session
            (None or negative: every run).

    Returns:
        A tensor equal to ``input_``; its gradient is ``input_``'s.
    """
    x = convert_to_tensor(input_)
    items = [convert_to_tensor(d) for d in (data if isinstance(data, (list, tuple)) else [data])]
    attrs = {"message": "" if message is None else str(message),
             "first_n": -1 if first_n is None else int(first_n),
             "summarize": 3 if summarize is None else int(summarize)}
    op = make_op("Print", [x, *items], [x.dtype], [x.shape], name=name or "Print", attrs=attrs)
    return op.outputs[0]


# --------------------------------------------------------------------- tf.print
@register("StringFormat", not_differentiable=True)
def _string_format_kernel(*values: Any, template: str, placeholder: str, summarize: int
                          ) -> Any:
    parts = template.split(placeholder)
    out = [parts[0]]
    for v, rest in zip(values, parts[1:]):
        out.append(summarize_v2(v, summarize))
        out.append(rest)
    return np.array("".join(out).encode(), dtype=object)


def _write(stream: str, text: str) -> None:
    if stream in ("stderr", "stdout"):
        f = sys.stderr if stream == "stderr" else sys.stdout
        f.write(text)
        f.flush()
    elif stream.startswith("log("):
        level = {"log(info)": _tf_logging.INFO, "log(warning)": _tf_logging.WARN,
                 "log(error)": _tf_logging.ERROR}[stream]
        _tf_logging.get_logger().log(level, "%s", text.rstrip("\n"))
    else:
        with open(stream[len("file://"):], "a", encoding="utf-8") as f:
            f.write(text)


@register("PrintV2", kind="stateful")
def _print_v2_kernel(ctx: Any, op: Operation, text: Any) -> None:
    value = np.asarray(text).reshape(-1)
    line = value[0] if value.size else b""
    line = line.decode("utf-8", "backslashreplace") if isinstance(line, bytes) else str(line)
    _write(op.attrs["output_stream"], line + op.attrs["end"])
    return None


def _stream_name(stream: Any) -> str:
    if isinstance(stream, str) and stream.startswith("file://"):
        return stream
    if stream is None or stream is sys.stderr or stream is sys.__stderr__:
        return "stderr"  # the sys.stderr of when the op runs
    if stream is sys.stdout or stream is sys.__stdout__:
        return "stdout"
    table = {_tf_logging.INFO: "log(info)", _tf_logging.WARN: "log(warning)",
             _tf_logging.ERROR: "log(error)"}
    funcs = {_tf_logging.info: "log(info)", _tf_logging.warning: "log(warning)",
             _tf_logging.error: "log(error)"}
    if isinstance(stream, int) and stream in table:
        return table[stream]
    for fn, stream_name in funcs.items():
        if stream is fn:
            return stream_name
    raise CkptsyncValueError(
        f"Unsupported output stream, logging level, or file.{stream}. Supported streams are "
        "sys.stdout, sys.stderr, tf.logging.info, tf.logging.warning, tf.logging.error. File "
        "needs to be in the form of 'file://<filepath>'.")


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, dict):
        return [y for k in sorted(x) for y in _flatten(x[k])]
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flatten(v)]
    return [x]


def _pack(x: Any, flat: list[Any]) -> Any:
    it = iter(flat)

    def go(s: Any) -> Any:
        if isinstance(s, dict):
            return {k: go(s[k]) for k in sorted(s)}
        if isinstance(s, (list, tuple)):
            vals = [go(v) for v in s]
            return type(s)(*vals) if hasattr(s, "_fields") else type(s)(vals)
        return next(it)

    return go(x)


def _is_tensor(x: Any) -> bool:
    return isinstance(x, Tensor) or hasattr(x, "_as_graph_element")


def print(*inputs: Any, output_stream: Any = None, summarize: int | None = 3,  # noqa: A001
          sep: str = " ", end: str = os.linesep, name: str | None = None) -> Operation:
    """An op that writes ``inputs`` when it runs, as TF's ``tf.print``.

    Tensors are written numpy-style with the first and last ``summarize`` entries of
    each dimension (negative: all); Python values as ``pprint`` writes them, and tensors
    inside lists, tuples and dicts in place; a string input as it is. In a graph the op
    runs only when fetched or through ``tf.control_dependencies([op])``.

    Args:
        output_stream: ``sys.stderr`` (default; None too), ``sys.stdout``, ``tf.logging.info`` /
            ``warning`` / ``error`` (or their levels), or ``"file://<path>"``.

    Returns:
        The ``PrintV2`` operation (no outputs).

    Raises:
        ValueError: an unsupported ``output_stream``.
    """
    stream = _stream_name(output_stream)
    first = convert_to_tensor(inputs[0]) if len(inputs) == 1 and _is_tensor(inputs[0]) else None
    if first is not None and first.dtype == _dtypes.string and first.shape.ndims == 0:
        text = first  # one scalar string tensor: written as it is
    else:
        text = _format(inputs, sep, summarize, None if name is None else name + "_format")
    return make_op("PrintV2", [text], [], [], name=name or "PrintV2",
                   attrs={"output_stream": stream, "end": end})


def _format(inputs: tuple[Any, ...], sep: str, summarize: int | None, name: str | None
            ) -> Tensor:
    free = [_pack(x, ["" if _is_tensor(v) else v for v in _flatten(x)]) for x in inputs]
    free_text = " ".join(pprint.pformat(x) for x in free)
    placeholder, rng = "{}", random.Random(5)
    while placeholder in free_text:
        placeholder += str(rng.randint(0, 9))
    tensors: list[Tensor] = []
    templates = []
    for x in inputs:
        marks = []
        for v in _flatten(x):
            if _is_tensor(v):
                tensors.append(convert_to_tensor(v))
                marks.append(placeholder)
            else:
                marks.append(v)
        templates.append(x if isinstance(x, str) else pprint.pformat(_pack(x, marks)))
    template = sep.join(templates).replace(f"'{placeholder}'", placeholder)
    op = make_op("StringFormat", tensors, [_dtypes.string], [[]], name=name or "StringFormat",
                 attrs={"template": template, "placeholder": placeholder,
                        "summarize": 3 if summarize is None else int(summarize)})
    return op.outputs[0]
