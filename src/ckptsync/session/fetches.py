"""Flattening ``Session.run`` fetches and rebuilding results in the same structure.

Supports any nesting of lists, tuples, namedtuples and dicts (any Mapping) whose leaves are
tensors, operations, variables or their names, as TF1's ``_FetchMapper``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import CkptsyncTypeError
from ..graph import Graph, Operation, Tensor

__all__ = ["FetchMapper"]


class FetchMapper:
    """Flattens ``fetches`` into graph elements; ``build`` restores the structure."""

    __slots__ = ("elements", "key", "_rebuild", "_source", "_source_keys")

    def __init__(self, graph: Graph, fetches: Any):
        self.elements: list[Tensor | Operation] = []
        self._rebuild = self._flatten(graph, fetches)
        self.key = tuple(id(e) for e in self.elements)
        # What `matches` compares against: a single element, or a flat list/tuple/dict of
        # Tensors and Operations (the shapes worth caching); else None.
        self._source: tuple[Any, ...] | None = None
        self._source_keys: list[Any] | None = None
        if isinstance(fetches, (Tensor, Operation)):
            self._source = (fetches,)
        elif type(fetches) in (list, tuple) and all(
                isinstance(f, (Tensor, Operation)) for f in fetches):
            self._source = tuple(fetches)
        elif type(fetches) is dict and all(
                isinstance(f, (Tensor, Operation)) for f in fetches.values()):
            self._source_keys = list(fetches)
            self._source = tuple(fetches.values())

    @property
    def cacheable(self) -> bool:
        return self._source is not None

    def matches(self, fetches: Any) -> bool:
        """True when ``fetches`` has exactly the leaves this mapper was built from."""
        src = self._source
        if src is None:
            return False
        if isinstance(fetches, (Tensor, Operation)):
            return len(src) == 1 and src[0] is fetches and self._source_keys is None
        if self._source_keys is not None:
            if type(fetches) is not dict or list(fetches) != self._source_keys:
                return False
            values: Any = fetches.values()
        else:
            if type(fetches) not in (list, tuple) or len(fetches) != len(src):
                return False
            values = fetches
        return all(a is b for a, b in zip(values, src))

    def _flatten(self, graph: Graph, f: Any) -> Any:
        if f is None:
            raise CkptsyncTypeError(f"Fetch argument None has invalid type {type(None)}")
        if isinstance(f, (Tensor, Operation, str)) or hasattr(f, "_as_graph_element"):
            try:
                el = graph.as_graph_element(f)
            except (TypeError, ValueError, KeyError) as e:
                msg = e.args[0] if e.args else str(e)
                raise type(e)(f"Fetch argument {f!r} cannot be interpreted as a Tensor. ({msg})"
                              ) from None
            idx = len(self.elements)
            self.elements.append(el)
            return idx
        if isinstance(f, Mapping):
            keys = list(f.keys())
            subs = [self._flatten(graph, f[k]) for k in keys]
            return ("dict", type(f), keys, subs)
        if isinstance(f, tuple) and hasattr(f, "_fields"):
            return ("namedtuple", type(f), None, [self._flatten(graph, x) for x in f])
        if isinstance(f, (list, tuple)):
            return ("seq", type(f), None, [self._flatten(graph, x) for x in f])
        raise CkptsyncTypeError(
            f"Fetch argument {f!r} has invalid type {type(f)}, must be a string or Tensor. "
            f"(Can not convert a {type(f).__name__} into a Tensor or Operation.)")

    def build(self, values: list[Any]) -> Any:
        return _build(self._rebuild, values)


def _build(spec: Any, values: list[Any]) -> Any:
    if isinstance(spec, int):
        v = values[spec]
        # A 0-d value comes back as a numpy scalar (np.float32(6.0)), as TF1's Session.run.
        return v[()] if type(v) is np.ndarray and v.ndim == 0 else v
    kind, typ, keys, subs = spec
    items = [_build(s, values) for s in subs]
    if kind == "dict":
        out = dict(zip(keys, items))
        try:
            return typ(out)
        except TypeError:
            return out
    if kind == "namedtuple":
        return typ(*items)
    return typ(items)
