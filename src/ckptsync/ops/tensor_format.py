"""Arrays as TF's C++ ``Tensor::SummarizeValue`` writes them: the text of ``tf.Print``
and failed ``tf.Assert`` messages (:func:`summarize_v1`) and of ``tf.print`` /
``tf.strings.format`` (:func:`summarize_v2`).

Elements as TF's ``strings::StrCat``: floats in the shortest of ``%.6g`` / ``%.9g``
(float64: ``%.15g`` / ``%.17g``) that reads back exactly, float16 through float32, bools
as ``1``/``0``, strings with C escapes (bytes >= 0x80 kept as they are; ``tf.print``
quotes them).

Example:
    >>> import numpy as np
    >>> summarize_v1(np.arange(6).reshape(2, 3), 2)
    '[0 1...]...'
    >>> summarize_v2(np.arange(6).reshape(2, 3), 3)
    '[[0 1 2]\\n [3 4 5]]'
"""

from __future__ import annotations

import numpy as np

__all__ = ["format_element", "summarize_v1", "summarize_v2"]

_ESCAPES = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x27: "\\'", 0x5C: "\\\\"}


def _escape(b: bytes) -> str:
    out = bytearray()
    for c in b:
        if c in _ESCAPES:
            out += _ESCAPES[c].encode()
        elif c < 0x20 or c == 0x7F:
            out += f"\\x{c:02x}".encode()
        else:
            out.append(c)
    # Bytes >= 0x80 stay as they are (UTF-8 text reads as itself; others as \xNN).
    return out.decode("utf-8", errors="backslashreplace")


def _float(v: float, short: int, long: int, np_type: type) -> str:
    if np.isnan(v):
        return "-nan" if np.signbit(v) else "nan"
    s = f"%.{short}g" % v
    if np_type(float(s)) != np_type(v):
        s = f"%.{long}g" % v
    return s


def format_element(v: object, quote: bool = False) -> str:
    """One element as TF's ``PrintOneElement`` (``quote``: strings in double quotes)."""
    if isinstance(v, (bytes, np.bytes_)):
        s = _escape(bytes(v))
        return f'"{s}"' if quote else s
    if isinstance(v, str):
        return format_element(v.encode(), quote)
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (np.float16, np.float32)):
        return _float(float(v), 6, 9, np.float32)
    if isinstance(v, (float, np.floating)):
        return _float(float(v), 15, 17, np.float64)
    if isinstance(v, (np.complexfloating, complex)):
        c = complex(v)  # type: ignore[arg-type]
        return f"({format_element(np.float64(c.real))},{format_element(np.float64(c.imag))})"
    return str(int(v))  # type: ignore[call-overload]


def _flat(a: np.ndarray) -> list[object]:
    return list(a.reshape(-1))


def summarize_v1(value: object, max_entries: int = 3) -> str:
    """TF's ``SummarizeValue(max_entries)``: the first ``max_entries`` elements (all when
    negative) in nested brackets, ``...`` where some are left out (``tf.Print``)."""
    a = np.asarray(value)
    flat = _flat(a)
    limit = len(flat) if max_entries < 0 else min(max_entries, len(flat))
    if a.ndim == 0:
        text = " ".join(format_element(x) for x in flat[:limit])
        return text + ("..." if len(flat) > limit else "")
    out: list[str] = []
    index = [0]

    def dim(d: int) -> None:
        if index[0] >= limit:
            return
        count = a.shape[d]
        if d == a.ndim - 1:
            for i in range(count):
                if index[0] >= limit:
                    if d != 0:
                        out.append("...")
                    return
                if i > 0:
                    out.append(" ")
                out.append(format_element(flat[index[0]]))
                index[0] += 1
            return
        for _ in range(count):
            opened = index[0] < limit
            if opened:
                out.append("[")
            dim(d + 1)
            if index[0] < limit or opened:
                out.append("]")

    dim(0)
    return "".join(out) + ("..." if len(flat) > limit else "")


def summarize_v2(value: object, summarize: int = 3) -> str:
    """TF's ``SummarizeValue(summarize, print_v2=true)``: numpy-like nested brackets with
    the first and last ``summarize`` entries of each dimension (all when negative) and
    ``...`` between them; strings quoted (``tf.print``)."""
    a = np.asarray(value)
    flat = _flat(a)
    ends = len(flat) if summarize < 0 else min(summarize, len(flat))
    if a.ndim == 0:
        return " ".join(format_element(x, quote=True) for x in flat[:max(ends, 1)])
    out: list[str] = []
    nd = a.ndim

    def spacing(d: int) -> None:
        if d == nd - 1:
            out.append(" ")
            return
        out.append("\n" * (nd - d - 1) + " " * (d + 1))

    def dim(d: int, start: int) -> None:
        if d == nd:
            out.append(format_element(flat[start], quote=True))
            return
        out.append("[")
        count = a.shape[d]
        per = int(np.prod(a.shape[d + 1:], dtype=np.int64))
        for i in range(min(ends, count)):
            if i > 0:
                spacing(d)
            dim(d + 1, start + per * i)
        if count > 2 * ends:
            spacing(d)
            out.append("...")
        for i in range(max(ends, count - ends), count):
            spacing(d)
            dim(d + 1, start + per * i)
        out.append("]")

    dim(0, 0)
    return "".join(out)
