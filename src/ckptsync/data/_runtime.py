"""What a ``tf.data`` iterator runs: one node per dataset of the pipeline, each pulling
elements (flat lists of numpy arrays) from its inputs, and each able to say where it is
(:meth:`Node.state`) and to go back there (:meth:`Node.restore`), so that an iterator's
position is saved in a checkpoint (:mod:`._state`).

A node is made for one pass (one epoch) over its dataset; ``repeat`` makes a new one per
epoch and tells it the epoch (``epoch``, a tuple: one index per enclosing ``repeat``), so
that ``shuffle`` draws another order each epoch, deterministically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["End", "Node"]

Element = list[np.ndarray]


class End(Exception):
    """A node has no more elements (the iterator raises ``OutOfRangeError``)."""


class Node:
    """One pass over a dataset."""

    def next(self, rc: Any) -> Element:  # pragma: no cover - interface
        raise NotImplementedError

    def state(self) -> Any:
        return None

    def restore(self, st: Any) -> None:
        pass


class Slices(Node):
    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.n = len(arrays[0]) if arrays else 0
        self.i = 0

    def next(self, rc: Any) -> Element:
        if self.i >= self.n:
            raise End
        i = self.i
        self.i += 1
        return [np.array(a[i]) for a in self.arrays]

    def state(self) -> Any:
        return self.i

    def restore(self, st: Any) -> None:
        self.i = int(st)


class Tensors(Node):
    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.done = False

    def next(self, rc: Any) -> Element:
        if self.done:
            raise End
        self.done = True
        return [np.array(a) for a in self.arrays]

    def state(self) -> Any:
        return self.done

    def restore(self, st: Any) -> None:
        self.done = bool(st)


class Range(Node):
    def __init__(self, start: int, stop: int, step: int, dtype: np.dtype):
        self.cur, self.stop, self.step, self.dtype = start, stop, step, dtype

    def next(self, rc: Any) -> Element:
        if (self.step > 0 and self.cur >= self.stop) or (self.step < 0 and self.cur <= self.stop):
            raise End
        v = self.cur
        self.cur += self.step
        return [np.array(v, self.dtype)]

    def state(self) -> Any:
        return self.cur

    def restore(self, st: Any) -> None:
        self.cur = int(st)


class Zip(Node):
    def __init__(self, children: list[Node]):
        self.children = children

    def next(self, rc: Any) -> Element:
        out: Element = []
        for c in self.children:
            out.extend(c.next(rc))
        return out

    def state(self) -> Any:
        return [c.state() for c in self.children]

    def restore(self, st: Any) -> None:
        for c, s in zip(self.children, st):
            c.restore(s)


class Concat(Node):
    def __init__(self, makers: list[Callable[[], Node]]):
        self.makers = makers
        self.which = 0
        self.cur = makers[0]()

    def next(self, rc: Any) -> Element:
        while True:
            try:
                return self.cur.next(rc)
            except End:
                if self.which + 1 >= len(self.makers):
                    raise
                self.which += 1
                self.cur = self.makers[self.which]()

    def state(self) -> Any:
        return [self.which, self.cur.state()]

    def restore(self, st: Any) -> None:
        self.which = int(st[0])
        self.cur = self.makers[self.which]()
        self.cur.restore(st[1])


class Repeat(Node):
    """``count`` passes (-1: forever) over the input, a new node per pass; an input that
    yields nothing in a pass ends the repeat (as TF, rather than looping forever)."""

    def __init__(self, make: Callable[[int], Node], count: int):
        self.make, self.count = make, count
        self.epoch = 0
        self.seen = False
        self.child: Node | None = make(0) if count != 0 else None

    def next(self, rc: Any) -> Element:
        while self.child is not None:
            try:
                out = self.child.next(rc)
                self.seen = True
                return out
            except End:
                self.epoch += 1
                if not self.seen or (0 <= self.count <= self.epoch):
                    self.child = None
                    break
                self.seen = False
                self.child = self.make(self.epoch)
        raise End

    def state(self) -> Any:
        return [self.epoch, self.seen, None if self.child is None else self.child.state()]

    def restore(self, st: Any) -> None:
        self.epoch, self.seen = int(st[0]), bool(st[1])
        if st[2] is None:
            self.child = None
        else:
            self.child = self.make(self.epoch)
            self.child.restore(st[2])


class Shuffle(Node):
    """TF's shuffle buffer: fill ``buffer_size`` elements, then hand out a uniformly
    chosen one and put the input's next element in its place."""

    def __init__(self, child: Node, buffer_size: int, seed: list[int]):
        self.child, self.size = child, buffer_size
        self.rng = np.random.default_rng(seed)
        self.buffer: list[Element] = []
        self.exhausted = False

    def next(self, rc: Any) -> Element:
        while not self.exhausted and len(self.buffer) < self.size:
            try:
                self.buffer.append(self.child.next(rc))
            except End:
                self.exhausted = True
        if not self.buffer:
            raise End
        j = int(self.rng.integers(len(self.buffer)))
        out = self.buffer[j]
        if not self.exhausted:
            try:
                self.buffer[j] = self.child.next(rc)
                return out
            except End:
                self.exhausted = True
        self.buffer[j] = self.buffer[-1]
        self.buffer.pop()
        return out

    def state(self) -> Any:
        return {"child": self.child.state(), "rng": self.rng.bit_generator.state,
                "buffer": self.buffer, "exhausted": self.exhausted}

    def restore(self, st: Any) -> None:
        self.child.restore(st["child"])
        self.rng.bit_generator.state = st["rng"]
        self.buffer = [list(e) for e in st["buffer"]]
        self.exhausted = bool(st["exhausted"])


class Batch(Node):
    """Stacks ``size`` elements (fewer at the end unless ``drop``); with ``pad`` (per
    component: (shape with -1 for "longest", padding value)) pads them first."""

    def __init__(self, child: Node, size: int, drop: bool, op_name: str,
                 pad: list[tuple[list[int], np.ndarray]] | None = None):
        self.child, self.size, self.drop, self.op_name, self.pad = child, size, drop, op_name, pad

    def next(self, rc: Any) -> Element:
        items: list[Element] = []
        try:
            while len(items) < self.size:
                items.append(self.child.next(rc))
        except End:
            if not items or self.drop:
                raise
        out = []
        for c in range(len(items[0])):
            parts = [it[c] for it in items]
            if self.pad is not None:
                parts = _pad(parts, *self.pad[c])
            first = parts[0].shape
            for k, p in enumerate(parts):
                if p.shape != first:
                    raise ValueError(
                        f"Cannot batch tensors with different shapes in component {c}. First "
                        f"element had shape {list(first)} and element {k} had shape "
                        f"{list(p.shape)}.")
            out.append(np.stack(parts))
        return out

    def state(self) -> Any:
        return self.child.state()

    def restore(self, st: Any) -> None:
        self.child.restore(st)


def _pad(parts: list[np.ndarray], shape: list[int], value: np.ndarray) -> list[np.ndarray]:
    longest = [max(p.shape[d] for p in parts) for d in range(parts[0].ndim)]
    target = [longest[d] if s < 0 else s for d, s in enumerate(shape)] if shape else longest
    out = []
    for p in parts:
        if any(n > t for n, t in zip(p.shape, target)):
            raise ValueError(f"Attempted to pad to a smaller size than the input element: "
                             f"{list(p.shape)} into {target}.")
        q = np.full(target, value, dtype=p.dtype)
        q[tuple(slice(0, n) for n in p.shape)] = p
        out.append(q)
    return out


class Map(Node):
    def __init__(self, child: Node, fn: Callable[[Any, Element], Element]):
        self.child, self.fn = child, fn

    def next(self, rc: Any) -> Element:
        return self.fn(rc, self.child.next(rc))

    def state(self) -> Any:
        return self.child.state()

    def restore(self, st: Any) -> None:
        self.child.restore(st)


class Filter(Node):
    def __init__(self, child: Node, pred: Callable[[Any, Element], bool]):
        self.child, self.pred = child, pred

    def next(self, rc: Any) -> Element:
        while True:
            e = self.child.next(rc)
            if self.pred(rc, e):
                return e

    def state(self) -> Any:
        return self.child.state()

    def restore(self, st: Any) -> None:
        self.child.restore(st)


class Take(Node):
    def __init__(self, child: Node, n: int):
        self.child, self.n, self.taken = child, n, 0

    def next(self, rc: Any) -> Element:
        if 0 <= self.n <= self.taken:
            raise End
        e = self.child.next(rc)
        self.taken += 1
        return e

    def state(self) -> Any:
        return [self.taken, self.child.state()]

    def restore(self, st: Any) -> None:
        self.taken = int(st[0])
        self.child.restore(st[1])


class Skip(Node):
    def __init__(self, child: Node, n: int):
        self.child, self.n, self.skipped = child, n, 0

    def next(self, rc: Any) -> Element:
        while self.n < 0 or self.skipped < self.n:
            self.child.next(rc)
            self.skipped += 1
        return self.child.next(rc)

    def state(self) -> Any:
        return [self.skipped, self.child.state()]

    def restore(self, st: Any) -> None:
        self.skipped = int(st[0])
        self.child.restore(st[1])


class Cache(Node):
    """The first pass records its input's elements in ``store`` (shared by the passes of
    one iterator); once a pass is complete, later passes replay them."""

    def __init__(self, child: Callable[[], Node], store: dict[str, Any]):
        self.store, self.make = store, child
        self.child = None if store.get("done") else child()
        self.i = 0

    def next(self, rc: Any) -> Element:
        if self.child is None:
            els = self.store["elements"]
            if self.i >= len(els):
                raise End
            self.i += 1
            return [np.array(a) for a in els[self.i - 1]]
        try:
            e = self.child.next(rc)
        except End:
            self.store["done"] = True
            raise
        self.store.setdefault("elements", []).append(e)
        return e

    def state(self) -> Any:
        if self.child is None:
            return {"i": self.i, "elements": self.store["elements"]}
        return {"child": self.child.state(), "elements": self.store.get("elements", [])}

    def restore(self, st: Any) -> None:
        self.store["elements"] = [list(e) for e in st["elements"]]
        if "child" in st:
            self.store["done"] = False
            self.child = self.make()
            self.child.restore(st["child"])
        else:
            self.store["done"] = True
            self.child = None
            self.i = int(st["i"])
