"""An iterator's state (lists, dicts, numbers, strings and numpy arrays, as
:meth:`._runtime.Node.state` gives it) as one ``uint8`` vector for a checkpoint, and
back: an ``.npz`` image of a JSON outline and the arrays, read without pickle; and the
fingerprint of a pipeline that a saved state carries, so it restores only into the
pipeline it was saved from."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

__all__ = ["pack_state", "unpack_state", "pipeline_fingerprint"]


def pipeline_fingerprint(dataset: Any) -> str:
    """The structure of ``dataset``'s pipeline: the chain of its transformation kinds and
    its element spec, e.g. ``"Range -> Map -> Batch, elements (int64[?], int64[?])"``.

    As TF1's iterator checkpoints (whose keys are the chain of kinds: TF refuses a state
    of another chain), a state restores only into an equal fingerprint. Runtime values
    (a range's bounds, a batch size fed or constant) are not part of it, as in TF, which
    restores a ``range(100)`` position into ``range(5)``.
    """
    def chain(d: Any) -> str:
        name = type(d).__name__.lstrip("_")
        if name == "Source":
            name = "FromTensors" if getattr(d, "_kind", "") == "tensors" else "FromTensorSlices"
        inner = [chain(c) for c in d._inputs]
        if not inner:
            return name
        if len(inner) == 1:
            return f"{inner[0]} -> {name}"
        return f"{name}({', '.join(inner)})"

    def spec(x: Any) -> str:
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k!r}: {spec(v)}" for k, v in sorted(x.items())) + "}"
        if isinstance(x, (list, tuple)):
            return "(" + ", ".join(spec(v) for v in x) + ")"
        dims = getattr(x.shape, "dims", None)
        shape = "<unknown>" if dims is None else ", ".join(
            "?" if d is None else str(d) for d in (getattr(d, "value", d) for d in dims))
        return f"{x.dtype.name}[{shape}]"

    return f"{chain(dataset)}, elements {spec(dataset._structure)}"

def pack_state(state: Any) -> np.ndarray:
    """``state`` (lists, dicts, numbers, strings and numpy arrays) as one ``uint8``
    vector: an ``.npz`` image holding a JSON outline and the arrays."""
    arrays: list[np.ndarray] = []

    def walk(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            if x.dtype == object:  # tf.string values: bytes objects, stored as 'S'
                arrays.append(np.array([bytes(b) for b in x.reshape(-1)], "S").reshape(
                    x.shape))
                return {"__bytes__": len(arrays) - 1}
            arrays.append(x)
            return {"__array__": len(arrays) - 1}
        if isinstance(x, np.generic):
            return walk(np.asarray(x))
        if isinstance(x, dict):
            return {str(k): walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x

    outline = json.dumps(walk(state)).encode()
    buf = io.BytesIO()
    named: dict[str, Any] = {f"a{i}": a for i, a in enumerate(arrays)}
    np.savez(buf, outline=np.frombuffer(outline, np.uint8), **named)
    return np.frombuffer(buf.getvalue(), np.uint8).copy()


def unpack_state(blob: np.ndarray) -> Any:
    """The state :func:`pack_state` packed. Raises ValueError on a damaged image."""
    with np.load(io.BytesIO(np.asarray(blob, np.uint8).tobytes()), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    outline = json.loads(arrays.pop("outline").tobytes().decode())

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            if set(x) == {"__array__"}:
                return arrays[f"a{x['__array__']}"]
            if set(x) == {"__bytes__"}:
                a = arrays[f"a{x['__bytes__']}"]
                out = np.empty(a.shape, object)
                out.reshape(-1)[:] = [bytes(b) for b in a.reshape(-1)]
                return out
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(outline)
