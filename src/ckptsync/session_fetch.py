"""Flattening ``Session.run`` fetches and rebuilding results in the same structure.

Supports any nesting of lists, tuples, namedtuples and dicts (any Mapping) whose leaves are
tensors, operations, variables or their names, as TF1's ``_FetchMapper``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import CkptsyncTypeError
from .graph import Graph, Operation, Tensor

__all__ = ["FetchMapper"]


class FetchMapper:
    """Flattens ``fetches`` into graph elements; ``build`` restores the structure."""

    __slots__ = ("elements", "key", "_rebuild")

    def __init__(self, graph: Graph, fetches: Any):
        self.elements: list[Tensor | Operation] = []
        self._rebuild = self._flatten(graph, fetches)
        self.key = tuple(id(e) for e in self.elements)

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
        return values[spec]
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
