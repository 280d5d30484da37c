"""What a compiled ``Session`` run is made of: the :class:`Plan`, its :data:`Step` type,
and the :class:`RunContext` a step is called with.

A plan runs over a flat list of *value slots*, one per tensor of the run: a step reads
its inputs' slots and writes its outputs' slots. :mod:`.planner` builds plans;
:mod:`.steps`, :mod:`.fused_matmul` and :mod:`.inplace_inputs` build their steps.

Thread-safety: a :class:`Plan` is immutable once built and shared by concurrent runs;
each run has its own value list and its own :class:`RunContext`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..blocked_array import BlockedArray
from ..errors import FailedPreconditionError, InvalidArgumentError, OpError
from ..ops.registry import get_op_def
from ..tensor import Operation, Tensor

__all__ = ["Plan", "RunContext", "Step", "needed_ops", "readers_of"]


class RunContext:
    """What stateful kernels see during one run: variable reads and writes, RNGs, and
    ``scratch``, per-run state of the ops that have inputs computed in place (their
    buffers).

    A read sees the run's own writes so far (``writes``), as TF1's ref variables (a
    kernel updating a variable after another one in the same run builds on its update);
    the writes land in the session together when the run ends, so that other runs see
    all of them or none. A kernel says what it changed: :meth:`write` (the whole value)
    or :meth:`write_rows` (rows of dim 0 only), which the session's change trackers
    record (:mod:`.changes`).

    Args:
        variables: the session's values, variable op name -> array (read, never written).
        rng: the session's random generator for an op.
        params: variable op name -> array, read instead of ``variables`` (this run only).
        resources: the session's state of stateful ops other than variables (a
            ``tf.data`` iterator's position), op name -> object; changed in place, at
            once (not when the run ends).
    """

    __slots__ = ("_variables", "_rng", "_params", "writes", "row_writes", "in_place",
                 "scratch", "resources")

    def __init__(self, variables: Mapping[str, np.ndarray],
                 rng: Callable[[Operation], np.random.Generator],
                 params: Mapping[str, np.ndarray] | None,
                 resources: dict[str, Any] | None = None):
        self._variables = variables
        self._rng = rng
        self._params = params
        self.writes: dict[str, np.ndarray] = {}  # this run's; land in the session at its end
        # name -> the row indices of each write_rows of it, for the names of ``writes``
        # that only write_rows wrote (a later write() of the name drops it: whole).
        # None until the first write_rows (a run that writes no rows makes no dict).
        self.row_writes: dict[str, list[np.ndarray]] | None = None
        # names whose session array a kernel updated in place (``writable_value``): they
        # changed even if the run then fails. None until the first.
        self.in_place: set[str] | None = None
        self.scratch: dict[Any, Any] = {}
        self.resources: dict[str, Any] = {} if resources is None else resources

    def read(self, name: str) -> np.ndarray:
        """Variable ``name``'s value as of now: this run's last write of it, else its
        value in ``params``, else in the session. A ``params`` value that is a
        :class:`~ckptsync.blocked_array.BlockedArray` is returned as a plain ndarray (a
        copy; the gathers read it with :meth:`read_rows_source` instead).

        Raises:
            FailedPreconditionError: the variable has no value (not initialized).
        """
        if self.writes:
            w = self.writes.get(name)
            if w is not None:
                return w
        if self._params is not None:
            v = self._params.get(name)
            if v is not None:
                return v if type(v) is not BlockedArray else v.to_ndarray()
        v = self._variables.get(name)
        if v is None:
            raise FailedPreconditionError(
                None, None, f"Attempting to use uninitialized value {name}")
        return v

    def read_rows_source(self, name: str) -> np.ndarray | BlockedArray:
        """As :meth:`read`, but a row-blocked ``params`` value is returned as it is: for
        kernels that read only rows of dim 0 (``ResourceGather``) or the shape."""
        if self._params is not None and not self.writes:
            v = self._params.get(name)
            if type(v) is BlockedArray:
                return v
        return self.read(name)

    def write(self, name: str, value: np.ndarray) -> None:
        """Sets variable ``name``: read so by the rest of this run, and in the session
        when the run ends; the whole variable changed (see :meth:`write_rows`)."""
        self.writes[name] = value
        if self.row_writes:
            self.row_writes.pop(name, None)

    def write_rows(self, name: str, value: np.ndarray, rows: np.ndarray) -> None:
        """:meth:`write`, saying that only rows ``rows`` (integer indices of dim 0, any
        shape, order or repetition) of ``value`` differ from the variable's value before
        (a superset is fine). For the row-update kernels (scatter ops, ``SparseApply*``).
        A :meth:`write` of ``name`` earlier or later in the run makes the change whole.

        ``rows`` is kept by reference until the run ends: do not change it.
        """
        writes, row_writes = self.writes, self.row_writes
        if row_writes is None:
            row_writes = self.row_writes = {}
        if (name in writes and name not in row_writes) or value.ndim == 0:
            writes[name] = value  # a whole change stays whole
            return
        writes[name] = value
        parts = row_writes.get(name)
        if parts is None:
            row_writes[name] = [rows]
        else:
            parts.append(rows)

    def note_in_place(self, name: str) -> None:
        """Says that variable ``name``'s array in the session is being updated in place
        (it changes even if the run fails; see ``ops.scatter_ops.writable_value``)."""
        if self.in_place is None:
            self.in_place = {name}
        else:
            self.in_place.add(name)

    def rng(self, op: Operation) -> np.random.Generator:
        """The random generator of ``op`` in this session (seeded by its attrs)."""
        return self._rng(op)

    def compile(self, elements: list[Any], fed: list[Any],
                var_args: Mapping[int, str] | None = None) -> Plan:
        """The plan of a sub-graph (a cond branch, a loop body) that computes ``elements``
        from the tensors of ``fed``, of which those in ``var_args`` (by id, -> variable op
        name) stand for variables; the caller caches it (see :meth:`execute`)."""
        from .planner import compile_plan  # the planner builds on this module

        return compile_plan(elements, fed, var_args)

    def execute(self, plan: Plan, feeds: list[Any]) -> list[Any]:
        """Runs a sub-graph's ``plan`` inside this run (same variables, writes and RNGs)
        with ``feeds`` in its feed slots; returns its fetched values.

        Raises:
            InvalidArgumentError: a kernel failed (names the op inside the sub-graph).
        """
        values = plan.template.copy()
        for s, value in zip(plan.feed_slots, feeds):
            values[s] = value
        i = 0
        try:
            for i, step in enumerate(plan.steps):  # noqa: B007
                step(values, self)
        except OpError:
            raise
        except (ValueError, TypeError, IndexError, ArithmeticError, MemoryError) as e:
            op = plan.ops[i]
            raise InvalidArgumentError(
                None, op, f"{op.type} op '{op.name}' failed: {e}") from e
        return [None if s is None else values[s] for s in plan.fetch_slots]


# A step takes the run's value slots and its run context.
Step = Callable[[list[Any], RunContext], None]


class Plan:
    """A compiled run: kernel calls in order over a flat list of value slots.

    Attributes:
        steps: the calls, in order.
        ops: per step, the op it runs (named in a failing step's error).
        feed_slots: per fed tensor, its slot.
        fetch_slots: per fetched element, its slot (None for an operation).
        template: the initial value list: the constants' values already in their slots,
            so a run starts from ``template.copy()`` and never calls a kernel for one.
        copied_fetches: the positions in ``fetch_slots`` whose values may share memory
            that outlives the run (a variable's, a constant's, a feed's): a session
            returns copies of those.
    """

    __slots__ = ("steps", "ops", "feed_slots", "fetch_slots", "template", "copied_fetches")

    def __init__(self, steps: list[Step], ops: list[Operation], feed_slots: list[int],
                 fetch_slots: list[int | None], template: list[Any],
                 copied_fetches: tuple[int, ...] = ()):
        self.steps = steps
        self.ops = ops
        self.feed_slots = feed_slots
        self.fetch_slots = fetch_slots
        self.template = template
        self.copied_fetches = copied_fetches


def needed_ops(elements: list[Tensor | Operation], fed_ids: set[int]) -> list[Operation]:
    """The ops a run fetching ``elements`` executes (fed tensors, by id, cut the walk),
    in creation order (a topological order: an op's inputs and control inputs exist
    before it)."""
    needed: dict[int, Operation] = {}
    stack: list[Operation] = []
    for el in elements:
        if isinstance(el, Tensor):
            if id(el) not in fed_ids:
                stack.append(el.op)
        else:
            stack.append(el)
    while stack:
        op = stack.pop()
        if id(op) in needed:
            continue
        needed[id(op)] = op
        refs = get_op_def(op.type).ref_inputs
        for i, t in enumerate(op.inputs):
            if i not in refs and id(t) not in fed_ids:
                stack.append(t.op)
        stack.extend(op.control_inputs)
    return sorted(needed.values(), key=lambda o: o._id)


def readers_of(ordered: list[Operation]) -> dict[int, list[Operation]]:
    """id(tensor) -> the ops of ``ordered`` that read it as a value (ref inputs, which
    only name a variable, are not reads)."""
    readers: dict[int, list[Operation]] = {}
    for op in ordered:
        refs = get_op_def(op.type).ref_inputs
        for i, t in enumerate(op.inputs):
            if i not in refs:
                readers.setdefault(id(t), []).append(op)
    return readers
