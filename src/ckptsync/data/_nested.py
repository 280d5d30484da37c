"""Nodes (see :mod:`._runtime`) of pipelines with datasets inside: ``flat_map`` and
``interleave`` (a dataset per input element), ``unbatch``, and ``from_generator``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._runtime import Element, End, Node

__all__ = ["Generator", "Unbatch", "FlatMap", "Interleave"]


class Generator(Node):
    """A Python generator's elements; its position is a count (a restore calls the
    generator again and skips as many)."""

    def __init__(self, make: Callable[[], Any], convert: Callable[[Any], Element]):
        self.make, self.convert = make, convert
        self.it = make()
        self.n = 0

    def next(self, rc: Any) -> Element:
        try:
            value = next(self.it)
        except StopIteration:
            raise End from None
        self.n += 1
        return self.convert(value)

    def state(self) -> Any:
        return self.n

    def restore(self, st: Any) -> None:
        self.it, self.n = self.make(), 0
        for _ in range(int(st)):
            try:
                next(self.it)
            except StopIteration:
                break
            self.n += 1


class Unbatch(Node):
    def __init__(self, child: Node):
        self.child = child
        self.rows: Element | None = None
        self.i = 0

    def next(self, rc: Any) -> Element:
        while self.rows is None or self.i >= len(self.rows[0]):
            self.rows, self.i = self.child.next(rc), 0
            if len({len(r) for r in self.rows}) > 1:
                raise ValueError("Input element must have the same batch size in each "
                                 "component.")
        self.i += 1
        return [np.array(r[self.i - 1]) for r in self.rows]

    def state(self) -> Any:
        return [self.child.state(), self.rows, self.i]

    def restore(self, st: Any) -> None:
        self.child.restore(st[0])
        self.rows = None if st[1] is None else list(st[1])
        self.i = int(st[2])


class FlatMap(Node):
    """The elements of a dataset made per input element (``make(rc, element)``)."""

    def __init__(self, child: Node, make: Callable[[Any, Element], Node]):
        self.child, self.make = child, make
        self.element: Element | None = None
        self.cur: Node | None = None

    def next(self, rc: Any) -> Element:
        while True:
            if self.cur is None:
                self.element = self.child.next(rc)
                self.cur = self.make(rc, self.element)
            try:
                return self.cur.next(rc)
            except End:
                self.cur = None

    def state(self) -> Any:
        return [self.child.state(), self.element,
                None if self.cur is None else self.cur.state()]

    def restore(self, st: Any) -> None:
        self.child.restore(st[0])
        self.element = None if st[1] is None else list(st[1])
        self.cur = None
        if st[2] is not None and self.element is not None:
            element = self.element
            self.cur = _Deferred(lambda rc: self.make(rc, element), st[2])


class _Deferred(Node):
    """An inner node restored before a run context was at hand: made (``make(rc)``) and
    moved to its saved state on its first use."""

    def __init__(self, make: Callable[[Any], Node], st: Any):
        self.make, self.st = make, st
        self.node: Node | None = None

    def next(self, rc: Any) -> Element:
        if self.node is None:
            self.node = self.make(rc)
            self.node.restore(self.st)
        return self.node.next(rc)

    def state(self) -> Any:
        return self.st if self.node is None else self.node.state()


class Interleave(Node):
    """TF's interleave: ``cycle`` inner datasets open at once, ``block`` elements from
    each in turn; a finished one is replaced by the next input element's."""

    def __init__(self, child: Node, make: Callable[[Any, Element], Node], cycle: int,
                 block: int):
        self.child, self.make, self.cycle, self.block = child, make, cycle, block
        self.slots: list[tuple[Element, Node] | None] = [None] * cycle
        self.index = self.count = 0
        self.exhausted = False

    def _advance(self) -> None:
        self.index, self.count = (self.index + 1) % self.cycle, 0

    def next(self, rc: Any) -> Element:
        while True:
            slot = self.slots[self.index]
            if slot is not None:
                try:
                    out = slot[1].next(rc)
                except End:
                    self.slots[self.index] = None
                    self._advance()
                    continue
                self.count += 1
                if self.count >= self.block:
                    self._advance()
                return out
            if not self.exhausted:
                try:
                    e = self.child.next(rc)
                except End:
                    self.exhausted = True
                    continue
                self.slots[self.index] = (e, self.make(rc, e))
                continue
            if all(s is None for s in self.slots):
                raise End
            self._advance()

    def state(self) -> Any:
        return {"child": self.child.state(), "index": self.index, "count": self.count,
                "exhausted": self.exhausted,
                "slots": [None if s is None else [s[0], s[1].state()] for s in self.slots]}

    def restore(self, st: Any) -> None:
        self.child.restore(st["child"])
        self.index, self.count = int(st["index"]), int(st["count"])
        self.exhausted = bool(st["exhausted"])
        self.slots = []
        for s in st["slots"]:
            if s is None:
                self.slots.append(None)
                continue
            e = list(s[0])
            self.slots.append((e, _Deferred(self._maker(e), s[1])))

    def _maker(self, e: Element) -> Callable[[Any], Node]:
        return lambda rc: self.make(rc, e)
