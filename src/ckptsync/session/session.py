"""``Session``: runs a graph with numpy, as TF1's ``tf.Session``.

Variable values live in the session, not in the graph: two sessions on one graph hold
different values. Within one ``run``, as TF1's ref variables, a read of a variable sees
every assignment of it ordered before the read (:mod:`.ordering`); the run's assignments
land in the session together when it ends, so that other runs (and ``read_variables``)
see all of them or none.

The execution plan for a given (fetches, fed tensors) is computed once by
:func:`.planner.compile_plan` and cached; a run then only executes a flat list of kernel
calls (:mod:`.plan`).

``run(..., params=snapshot)`` reads variables from ``params`` (a mapping of variable op
names to arrays) instead of the session's store, for that run only. This is how a server
evaluates an immutable parameter snapshot while another thread swaps in the next one.

Which variables (and rows) runs change is recorded by the trackers of
:meth:`Session.track_changes` (:mod:`.changes`; the incremental ``Saver``'s source).

Thread-safety: ``run`` may be called from many threads at once; assignments from
concurrent runs land whole, one run after another.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import (
    CkptsyncRuntimeError,
    CkptsyncTypeError,
    CkptsyncValueError,
    FailedPreconditionError,
    InvalidArgumentError,
    OpError,
)
from ..graph import Graph, Operation, Tensor, default_session, get_default_graph
from ..variables import Variable
from .changes import Changes, ChangeTracker, Trackers
from .config import apply_config
from .fetches import FetchMapper
from .plan import Plan, RunContext
from .planner import compile_plan

__all__ = ["Session", "InteractiveSession", "ArrayCallable"]

# ``run(feed_values, params) -> [value per fetch]`` (see ``Session.make_array_callable``).
ArrayCallable = Callable[[list[Any], "Mapping[str, np.ndarray] | None"], list[Any]]

class Session:
    """Runs ops and evaluates tensors of one graph, as ``tf.Session``.

    Args:
        target: accepted for TF1 compatibility (in-process only).
        graph: default: the default graph.
        config: a :class:`~.config.ConfigProto`; its ``intra_op_parallelism_threads``
            caps numpy's BLAS threads for the process (``0``/``None``: one thread, only
            ever lowering; see :mod:`.config`).

    Raises:
        TypeError: ``config`` is not a ``ConfigProto``.

    Example:
        >>> import ckptsync as cs
        >>> g = cs.Graph()
        >>> with g.as_default():
        ...     x = cs.placeholder(cs.float32, [None, 2])
        ...     y = cs.reduce_sum(x * 2.0)
        >>> with cs.Session(graph=g) as sess:
        ...     float(sess.run(y, {x: [[1.0, 2.0]]}))
        6.0
    """

    def __init__(self, target: str = "", graph: Graph | None = None, config: Any = None):
        apply_config(config)
        self.graph = graph if graph is not None else get_default_graph()
        self._vars: dict[str, np.ndarray] = {}
        self._rngs: dict[str, np.random.Generator] = {}
        self._resources: dict[str, Any] = {}  # e.g. tf.data iterators (RunContext.resources)
        self._plans: dict[Any, Plan] = {}
        self._mappers: dict[int, FetchMapper] = {}
        self._lock = threading.Lock()
        self._trackers = Trackers()  # the ChangeTrackers, weakly (changed under _lock)
        self._closed = False
        self._default_ctx: Any = None

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Frees the variable values. Further runs raise ``RuntimeError``."""
        self._closed = True
        self._vars = {}
        self._trackers = Trackers()
        self._resources = {}
        self._plans = {}

    def __enter__(self) -> Session:
        self._default_ctx = self.as_default()
        self._default_ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._default_ctx is not None:
            self._default_ctx.__exit__(*exc)
            self._default_ctx = None
        self.close()

    @contextlib.contextmanager
    def as_default(self) -> Iterator[Session]:
        """Makes this the default session (and its graph the default graph) in the block."""
        with default_session(self), self.graph.as_default():
            yield self

    # ---------------------------------------------------------------- variables
    def has_variable(self, name: str) -> bool:
        """Whether variable op ``name`` (e.g. ``"dense0/w"``) has a value in this session.

        Thread-safety: may be called from any thread.
        """
        return name in self._vars

    def read_variables(self, names: list[str]) -> dict[str, np.ndarray]:
        """The current values of variables by op name, ``{"dense0/w": array}``, as a run
        starting now would read them. The arrays are the session's own (shared, never
        mutated by the session: a later write replaces them): do not write into them.

        The read path of ``Saver.save`` and of the MPI broadcast (no graph op is run).

        Raises:
            FailedPreconditionError: a variable has no value (names the first).

        Thread-safety: may be called while other threads run; each value is the one
        before or after a concurrent run's writes.
        """
        missing = [n for n in names if n not in self._vars]
        if missing:
            raise FailedPreconditionError(
                None, None, f"Attempting to use uninitialized value {missing[0]}")
        return {n: self._vars[n] for n in names}

    def write_variables(self, values: Mapping[str, Any], copy: bool = True) -> None:
        """Sets variables by op name, as a restore does (no graph op is run): each value
        (anything ``np.array`` takes) is copied and converted to the variable's dtype.

        The write path of ``Saver.restore`` and ``Variable.load``. With ``copy=False`` an
        array that already has the variable's dtype and is C-contiguous and writeable is
        adopted as the variable's value (the caller hands it over and keeps no use of it,
        as ``Saver.restore`` does with the arrays it has just read).

        Raises:
            KeyError: a name is no operation of the graph.
            ValueError, TypeError: a value does not convert to the variable's dtype.

        Thread-safety: the values land together, between two runs' writes.
        """
        new = {}
        for name, value in values.items():
            op = self.graph.get_operation_by_name(name)
            dtype = op.outputs[0].dtype.np
            if copy:
                arr = np.array(value, dtype=dtype, copy=True)
            elif (type(value) is np.ndarray and value.dtype == dtype
                  and value.flags.c_contiguous and value.flags.writeable):
                arr = value  # as np.require would return it, without its per-call cost
            else:
                arr = np.require(value, dtype=dtype, requirements=["C", "W"])
            new[name] = arr
        with self._lock:
            self._vars.update(new)
            if self._trackers.refs:
                self._trackers.record(list(new), {})

    def restore_buffers(self, names: list[str]) -> dict[str, np.ndarray]:
        """The arrays of variables ``names`` (op names) that a restore may overwrite in
        place, by op name: those held by nobody but the session (no fetch a caller
        kept, no snapshot, no run using them: counted by the array's references), that
        own their memory, C-contiguous and writeable. Variables left out (held, views,
        no value) must get new arrays.

        The write-in-place half of ``Saver.restore``: it reads a verified checkpoint
        straight into these arrays (no fresh memory to fault in), then hands them back
        with :meth:`write_variables` (``copy=False``).

        Thread-safety: safe to call while other threads run, but a run that starts
        while a restore writes into these arrays may read them partly written (as
        TF1's restore ops assign each variable in place); restore with no run in flight.
        """
        out: dict[str, np.ndarray] = {}
        with self._lock:
            for name in names:
                arr = self._vars.get(name)
                # The dict's reference, this local and getrefcount's argument: 3.
                if (type(arr) is np.ndarray and sys.getrefcount(arr) <= 3
                        and arr.flags.owndata and arr.flags.c_contiguous
                        and arr.flags.writeable):
                    out[name] = arr
        return out

    # ---------------------------------------------------------------- changes
    def track_changes(self) -> ChangeTracker:
        """A new :class:`~.changes.ChangeTracker` that records, from now on, which
        variables every run changes as it lands (as a whole, or which rows of dim 0, for
        the row-update kernels: scatter ops, ``SparseApply*``, the SGD sparse path) and
        :meth:`write_variables`'s whole changes (restore, ``Variable.load``); an
        initializer is a run (a whole change). Take its changes with
        :meth:`read_variables_and_changes`. A ckptsync extension (the incremental
        ``Saver``'s source): nothing is compared or copied, O(rows written) per run.

        The session references the tracker weakly: drop it to stop tracking.

        Thread-safety: may be called while other threads run; a run landing after the
        call is recorded.
        """
        with self._lock:
            return self._trackers.add(self)

    def read_variables_and_changes(self, names: list[str], tracker: ChangeTracker
                                   ) -> tuple[dict[str, np.ndarray], Changes]:
        """``(values, changes)``: the current values of variables ``names`` (op names,
        as :meth:`read_variables`: the session's own arrays, do not write into them) and
        what changed of each since ``tracker``'s last take, taken together between two
        runs' landings; the tracker forgets the changes of ``names`` (only those).

        ``changes[name]`` is ``None`` (changed as a whole) or the changed rows of dim 0
        (sorted unique int64 ``[k]``; a superset of the rows whose bytes differ); a name
        not in ``changes`` did not change. A save that fails after this gives the changes
        back with :meth:`ChangeTracker.put_back`.

        Raises:
            FailedPreconditionError: a variable has no value (names the first).
            ValueError: ``tracker`` is not one of this session's.

        Thread-safety: may be called while other threads run. A run in flight that
        updates rows in place (see ``ops.scatter_ops``) may already show in ``values``
        before its rows are recorded (then they are in the next take): take between
        runs, as the ``Saver`` does, for values and changes of one moment.
        """
        if not isinstance(tracker, ChangeTracker) or not tracker.owned_by(self):
            raise CkptsyncValueError(
                f"read_variables_and_changes: {tracker!r} is not a ChangeTracker of this "
                "session (make one with Session.track_changes()).")
        with self._lock:
            values = self.read_variables(names)
            changes = tracker.take(names)
        return values, changes

    def _rng(self, op: Operation) -> np.random.Generator:
        g = self._rngs.get(op.name)
        if g is None:
            s1, s2 = op.attrs.get("seed"), op.attrs.get("seed2")
            seq = None if s1 is None else [int(s1), int(s2 or 0)]
            g = self._rngs.setdefault(op.name, np.random.default_rng(seq))
        return g

    # ---------------------------------------------------------------- run
    def run(self, fetches: Any, feed_dict: Mapping[Any, Any] | None = None, options: Any = None,
            run_metadata: Any = None, params: Mapping[str, np.ndarray] | None = None) -> Any:
        """Evaluates ``fetches`` (any nesting of lists, tuples, dicts, namedtuples of
        tensors, ops, variables or names) and returns values in the same structure.

        Args:
            feed_dict: tensor (or name) -> value; values are converted to the tensor's dtype.
            params: variable op name -> array, read instead of the session's values for
                this run only.

        Raises:
            RuntimeError: the session is closed.
            ValueError: a fed value's shape or dtype does not fit the tensor (names it and
                both shapes), as TF1's client.
            TypeError: a feed key is not a tensor of this graph, as TF1.
            InvalidArgumentError: a needed placeholder was not fed; a kernel failed.
            FailedPreconditionError: a variable was read before it was initialized.
        """
        if type(fetches) is Variable and not feed_dict and params is None and (
                fetches.graph is self.graph and not self._closed):
            # One variable's value (a hook's global step): what the plan would return.
            value = self._vars.get(fetches.op.name)
            if value is not None:  # a copy, as TF1 (writing into it changes no variable)
                return value[()] if value.ndim == 0 else np.array(value)
        if self._closed:
            raise CkptsyncRuntimeError("Attempted to use a closed Session.")
        mapper = self._mapper_for(fetches)
        feeds: list[tuple[Tensor, np.ndarray]] = []
        if feed_dict:
            for key, value in feed_dict.items():
                t = self._feed_tensor(key)
                feeds.append((t, _convert_feed(t, value)))
        plan = self._plan_for(mapper, [t for t, _ in feeds])
        values = plan.template.copy()
        for s, (_, arr) in zip(plan.feed_slots, feeds):
            values[s] = arr
        return mapper.build(self._execute(plan, values, params))

    def _plan_for(self, mapper: FetchMapper, fed: list[Tensor]) -> Plan:
        key = (mapper.key, tuple(id(t) for t in fed))
        plan = self._plans.get(key)
        if plan is None:
            plan = compile_plan(mapper.elements, fed)
            self._plans[key] = plan
        return plan

    def make_callable(self, fetches: Any, feed_list: Any = None,
                      accept_options: bool = False) -> Callable[..., Any]:
        """Returns a function that runs ``fetches`` with the tensors of ``feed_list`` fed
        by position, as TF1's ``Session.make_callable``: the fetch structure, the feeds
        and the plan are resolved once, so a call skips ``run``'s lookups.

        The function takes one value per ``feed_list`` entry (converted and checked as
        ``run`` does), and ``params=`` as ``run`` (a ckptsync extension); with
        ``accept_options`` also ``options=`` and ``run_metadata=`` (ignored, as by
        ``run``). It returns what ``run(fetches, ...)`` would.

        Raises:
            TypeError, ValueError, KeyError: as ``run`` for a bad fetch or feed key (now);
                the function raises as ``run`` does (a wrong number of values:
                CkptsyncTypeError).

        Thread-safety: the function may be called from several threads at once.
        """
        if self._closed:
            raise CkptsyncRuntimeError("Attempted to use a closed Session.")
        mapper = self._mapper_for(fetches)
        tensors = [self._feed_tensor(k) for k in (feed_list or [])]
        plan = self._plan_for(mapper, tensors)
        run = self._plan_runner(plan)

        def call(*feed_values: Any, params: Mapping[str, np.ndarray] | None = None,
                 **options: Any) -> Any:
            if options and (not accept_options or set(options) - {"options", "run_metadata"}):
                raise CkptsyncTypeError(f"unexpected arguments {sorted(options)}")
            if len(feed_values) != len(tensors):
                raise CkptsyncTypeError(
                    f"this callable feeds {len(tensors)} tensors; got {len(feed_values)} values")
            if self._closed:
                raise CkptsyncRuntimeError("Attempted to use a closed Session.")
            feeds = [_convert_feed(t, value) for t, value in zip(tensors, feed_values)]
            return mapper.build(run(feeds, params))

        return call

    def make_array_callable(self, fetch_list: list[Tensor], feed_list: list[Tensor]
                            ) -> ArrayCallable:
        """``make_callable`` for callers that feed arrays already of the fed tensors'
        dtypes and shapes (the serving path checks them first): returns
        ``run(feed_values, params) -> [value per fetch]``, a list in ``fetch_list`` order,
        with no conversion and no check of the feeds (a wrong dtype or shape gives numpy's
        result or an ``InvalidArgumentError`` from a kernel).

        Raises:
            KeyError, ValueError: a fetch or feed is not of this graph (now);
                ``RuntimeError`` (from ``run``): the session is closed.

        Thread-safety: the function may be called from several threads at once.
        """
        fetches = list(fetch_list)
        run = self._plan_runner(self._plan_for(self._mapper_for(fetches), list(feed_list)))
        run.fetches = fetches  # type: ignore[attr-defined]  # keeps the mapper's key alive
        return run

    def _plan_runner(self, plan: Plan) -> ArrayCallable:
        """``run(feed_values, params)``: ``plan`` with the values (converted already) in
        its feed slots; the fetched values in ``plan.fetch_slots`` order."""
        feed_slots = plan.feed_slots

        def run(feed_values: list[Any], params: Mapping[str, np.ndarray] | None) -> list[Any]:
            if self._closed:
                raise CkptsyncRuntimeError("Attempted to use a closed Session.")
            values = plan.template.copy()
            for s, value in zip(feed_slots, feed_values):
                values[s] = value
            return self._execute(plan, values, params)

        return run

    def _execute(self, plan: Plan, values: list[Any],
                 params: Mapping[str, np.ndarray] | None) -> list[Any]:
        """Runs ``plan`` on ``values`` (its template with the feeds in); returns the
        fetched values in ``plan.fetch_slots`` order."""
        ctx = RunContext(self._vars, self._rng, params, self._resources)
        i = 0
        try:
            try:
                with np.errstate(all="ignore"):
                    for i, step in enumerate(plan.steps):  # noqa: B007
                        step(values, ctx)
            except OpError:
                raise
            except (ValueError, TypeError, IndexError, ArithmeticError, MemoryError) as e:
                op = plan.ops[i]
                raise InvalidArgumentError(
                    None, op, f"{op.type} op '{op.name}' failed: {e}") from e
        except BaseException:
            if ctx.in_place and self._trackers.refs:  # changed, though the run failed
                self._trackers.land(ctx, None, self._lock)
            raise
        if ctx.writes:
            if self._trackers.refs:
                self._trackers.land(ctx, self._vars, self._lock)
            else:
                with self._lock:
                    self._vars.update(ctx.writes)
        out = [None if s is None else values[s] for s in plan.fetch_slots]
        for k in plan.copied_fetches:  # the caller's own arrays, as TF1's
            if type(out[k]) is np.ndarray:
                out[k] = np.array(out[k])
        return out

    def _mapper_for(self, fetches: Any) -> FetchMapper:
        """The fetch mapper, reused when the same object with the same leaves comes back
        (a serving signature's output dict, a fixed list of gradients)."""
        cached = self._mappers.get(id(fetches))
        if cached is not None and cached.matches(fetches):
            return cached
        mapper = FetchMapper(self.graph, fetches)
        if mapper.cacheable:
            if len(self._mappers) > 256:
                self._mappers.clear()
            self._mappers[id(fetches)] = mapper
        return mapper

    def _feed_tensor(self, key: Any) -> Tensor:
        try:
            el = self.graph.as_graph_element(key, allow_tensor=True, allow_operation=False)
        except (TypeError, ValueError, KeyError) as e:
            msg = e.args[0] if e.args else str(e)
            raise CkptsyncTypeError(f"Cannot interpret feed_dict key as Tensor: {msg}") from None
        assert isinstance(el, Tensor)
        return el

    # ---------------------------------------------------------------- misc
    def list_devices(self) -> list[str]:
        return ["/device:CPU:0"]

    @property
    def sess_str(self) -> str:
        return ""


class InteractiveSession(Session):
    """A session that installs itself as the default session until closed."""

    def __init__(self, target: str = "", graph: Graph | None = None, config: Any = None):
        super().__init__(target, graph, config)
        self._ctx: Any = self.as_default()
        self._ctx.__enter__()

    def close(self) -> None:
        if getattr(self, "_ctx", None) is not None:
            self._ctx.__exit__(None, None, None)
            self._ctx = None
        super().close()


def _convert_feed(t: Tensor, value: Any) -> np.ndarray:
    want = t.dtype.np
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise CkptsyncValueError(f"Cannot feed value for Tensor '{t.name}': {e}") from None
    if arr.dtype != want:
        if arr.dtype.kind not in "biufc" or not (
                np.can_cast(arr.dtype, want, "same_kind")
                or (arr.dtype.kind in "iub" and want.kind in "iu")):
            raise CkptsyncValueError(
                f"Cannot feed value of dtype {arr.dtype} for Tensor '{t.name}', which has "
                f"dtype {t.dtype.name}.")
        arr = arr.astype(want)
    dims = t.shape.dims
    if dims is not None and (len(dims) != arr.ndim or any(
            d is not None and d != n for d, n in zip(dims, arr.shape))):
        shape = "(" + ", ".join(str(d) for d in arr.shape) + ("," if arr.ndim == 1 else "") + ")"
        raise CkptsyncValueError(
            f"Cannot feed value of shape {shape} for Tensor '{t.name}', which has "
            f"shape '{t.shape}'")
    return arr
