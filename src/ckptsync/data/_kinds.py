"""The kinds of dataset behind :class:`~.dataset_ops.Dataset`'s constructors and
transformations: each knows its element structure, the tensors it reads, and how to
start a pass (a :mod:`._runtime` node) from their values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import CkptsyncTypeError
from ..graph import Tensor, get_default_graph
from ..ops.func_graph import FuncContext, SubGraph, active, flatten, pack_as
from ..tensor_shape import TensorShape
from . import _nested as nested
from . import _runtime as rt
from .dataset_ops import Dataset, Env, TensorSpec, _safe, _structure_of


def _parallel_leaves(structure: Any, value: Any) -> list[Any]:
    """The parts of ``value`` (nested as ``structure``) at ``structure``'s leaves."""
    if isinstance(structure, dict):
        return [x for k in sorted(structure) for x in _parallel_leaves(structure[k], value[k])]
    if isinstance(structure, tuple):
        return [x for s, v in zip(structure, value) for x in _parallel_leaves(s, v)]
    return [value]


def _trace(fn: Callable[..., Any], structure: Any, what: str
           ) -> tuple[SubGraph, Any, list[Tensor]]:
    """``fn`` traced over ``_Arg``s of ``structure``: the sub-graph, the result's
    structure of :class:`TensorSpec`, and the outside tensors it captured."""
    if not callable(fn):
        raise CkptsyncTypeError(f"{what}: expected a function, got {fn!r}.")
    g = get_default_graph()
    ctx = FuncContext(g, arg_name="arg")
    with g.name_scope(f"{what}_{_safe(getattr(fn, '__name__', 'fn'))}"), active(ctx):
        specs = flatten(structure)
        args = [ctx.arg(s.dtype, s.shape) for s in specs]
        element = pack_as(structure, args)
        res = fn(*element) if type(element) is tuple else fn(element)
        if isinstance(res, list):
            res = tuple(res)
        res = _structure_of(res, "result")
        outs = [ctx.capture(t) for t in flatten(res)]
    out_structure = pack_as(res, [TensorSpec(t.shape, t.dtype) for t in outs])
    return SubGraph(ctx, args, outs), out_structure, [t for t, _ in ctx.captures]


def _runner(sub: SubGraph, captures: list[Tensor], env: Env
            ) -> Callable[[Any, rt.Element], rt.Element]:
    cap = [env.values[id(t)] for t in captures]  # read at initialization, as TF

    def run(rc: Any, element: rt.Element) -> rt.Element:
        outs, _ = sub.run(rc, [*element, *cap])
        return [np.asarray(o) for o in outs]

    return run


class _Source(Dataset):
    def __init__(self, structure: Any, flat: list[Tensor], kind: str):
        super().__init__(structure, [], flat)
        self._flat, self._kind = flat, kind

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        arrays = [np.asarray(env.values[id(t)]) for t in self._flat]
        if self._kind == "tensors":
            return rt.Tensors(arrays)
        n = {len(a) for a in arrays}
        if len(n) > 1:
            raise ValueError(f"TensorSliceDataset: all components must have the same size in "
                             f"the first dimension, got {sorted(n)}.")
        return rt.Slices(arrays)


class _Range(Dataset):
    def __init__(self, spec: TensorSpec, vals: list[Any]):
        super().__init__(spec, [], vals)
        self._vals = vals

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        start, stop, step = (env.scalar(v) for v in self._vals)
        if step == 0:
            raise ValueError("RangeDataset: step must not be zero.")
        return rt.Range(start, stop, step, self._structure.dtype.np)


class _Zip(Dataset):
    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        return rt.Zip([d._node(env, epoch) for d in self._inputs])

    def __init__(self, structure: Any, inputs: list[Dataset]):
        super().__init__(structure, inputs, [])


class _Concat(Dataset):
    def __init__(self, structure: Any, inputs: list[Dataset]):
        super().__init__(structure, inputs, [])

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        def maker(d: Dataset) -> Callable[[], rt.Node]:
            return lambda: d._node(env, epoch)

        return rt.Concat([maker(d) for d in self._inputs])


class _Shuffle(Dataset):
    def __init__(self, inp: Dataset, size: Any, graph_seed: int | None, op_seed: int | None,
                 reshuffle: bool):
        super().__init__(inp._structure, [inp], [size])
        self._size, self._seeds, self._reshuffle = size, (graph_seed, op_seed), reshuffle

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        size = env.scalar(self._size)
        if size <= 0:
            raise ValueError("ShuffleDataset: buffer_size must be greater than zero.")
        gs, os_ = self._seeds
        if gs is None and os_ is None:
            base = env.shared.setdefault(("entropy", id(self)),
                                         [int(np.random.SeedSequence().generate_state(1)[0])])
        else:
            base = [int(gs or 0), int(os_ or 0)]
        seed = [*base, *epoch] if self._reshuffle else base
        return rt.Shuffle(self._inputs[0]._node(env, epoch), size, seed)


class _Batch(Dataset):
    def __init__(self, inp: Dataset, size: Any, drop: bool, pad: Any, static: Any):
        n = size if drop and not isinstance(size, Tensor) else None
        shapes = static if static is not None else [s.shape for s in inp._flat_specs()]
        specs = [TensorShape(None) if s.dims is None else TensorShape([n, *s.dims])
                 for s in shapes]
        super().__init__(pack_as(inp._structure, [
            TensorSpec(sh, sp.dtype) for sh, sp in zip(specs, inp._flat_specs())]), [inp], [size])
        self._size, self._drop, self._pad = size, drop, pad

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        size = env.scalar(self._size)
        if size <= 0:
            raise ValueError("BatchDataset: batch_size must be greater than zero.")
        return rt.Batch(self._inputs[0]._node(env, epoch), size, self._drop, "BatchDataset",
                        self._pad)


class _Repeat(Dataset):
    def __init__(self, inp: Dataset, count: Any):
        super().__init__(inp._structure, [inp], [count])
        self._count = count

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        inp = self._inputs[0]
        return rt.Repeat(lambda e: inp._node(env, (*epoch, e)), env.scalar(self._count))


class _Count(Dataset):
    def __init__(self, inp: Dataset, count: Any, kind: type):
        super().__init__(inp._structure, [inp], [count])
        self._count, self._kind = count, kind

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        return self._kind(self._inputs[0]._node(env, epoch), env.scalar(self._count))


class _Map(Dataset):
    def __init__(self, structure: Any, inp: Dataset, sub: SubGraph, captures: list[Tensor]):
        super().__init__(structure, [inp], captures)
        self._sub, self._captures = sub, captures

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        return rt.Map(self._inputs[0]._node(env, epoch), _runner(self._sub, self._captures, env))


class _Filter(Dataset):
    def __init__(self, inp: Dataset, sub: SubGraph, captures: list[Tensor]):
        super().__init__(inp._structure, [inp], captures)
        self._sub, self._captures = sub, captures

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        run = _runner(self._sub, self._captures, env)
        return rt.Filter(self._inputs[0]._node(env, epoch), lambda rc, e: bool(run(rc, e)[0]))


class _Same(Dataset):
    def __init__(self, inp: Dataset):
        super().__init__(inp._structure, [inp], [])

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        return self._inputs[0]._node(env, epoch)


class _Cache(Dataset):
    def __init__(self, inp: Dataset):
        super().__init__(inp._structure, [inp], [])

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        store = env.shared.setdefault(("cache", id(self)), {})
        return rt.Cache(lambda: self._inputs[0]._node(env, epoch), store)


class _Generator(Dataset):
    def __init__(self, structure: Any, generator: Callable[..., Any], args: list[Tensor]):
        super().__init__(structure, [], args)
        self._gen, self._args = generator, args

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        args = [env.values[id(t)] for t in self._args]
        structure = self._structure

        def convert(value: Any) -> rt.Element:
            out = []
            for v, spec in zip(_parallel_leaves(structure, value), flatten(structure)):
                a = np.asarray(v, spec.dtype.np if spec.dtype.np is not object else None)
                if spec.dtype.np is object:
                    a = a.astype(object)
                if not spec.shape.is_compatible_with(TensorShape(a.shape)):
                    raise ValueError(f"`generator` yielded an element of shape {list(a.shape)} "
                                     f"where an element of shape {spec.shape} was expected.")
                out.append(a)
            return out

        return nested.Generator(lambda: iter(self._gen(*args)), convert)


class _Unbatch(Dataset):
    def __init__(self, inp: Dataset, structure: Any):
        super().__init__(structure, [inp], [])

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        return nested.Unbatch(self._inputs[0]._node(env, epoch))


class _FlatMap(Dataset):
    def __init__(self, inp: Dataset, inner: Dataset, sub: SubGraph, captures: list[Tensor],
                 cycle: Any = None, block: Any = 1):
        super().__init__(inner._structure, [inp], [*captures, cycle, block])
        self._inner, self._sub, self._captures = inner, sub, captures
        self._cycle, self._block = cycle, block

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:
        run = _runner(self._sub, self._captures, env)
        inner, tensors = self._inner, self._inner._all_tensors()

        def make(rc: Any, element: rt.Element) -> rt.Node:
            values = run(rc, element)
            return inner._node(Env({id(t): v for t, v in zip(tensors, values)}), epoch)

        if self._cycle is None:
            return nested.FlatMap(self._inputs[0]._node(env, epoch), make)
        cycle, block = env.scalar(self._cycle), env.scalar(self._block)
        if cycle <= 0 or block <= 0:
            raise ValueError("InterleaveDataset: cycle_length and block_length must be "
                             "positive.")
        return nested.Interleave(self._inputs[0]._node(env, epoch), make, cycle, block)


def _flat_map(ds: Dataset, fn: Callable[..., Any], cycle: Any = None, block: Any = 1
              ) -> Dataset:
    """``ds.flat_map(fn)`` (``interleave`` with a ``cycle``): ``fn`` traced once; the
    sub-graph computes the tensors the returned dataset reads, from the element."""
    holder: list[Dataset] = []

    def traced(*element: Any) -> Any:
        inner = fn(*element)
        if not isinstance(inner, Dataset):
            raise CkptsyncTypeError(f"`map_func` must return a `Dataset` object. Got "
                                    f"{type(inner).__name__}.")
        holder.append(inner)
        return tuple(inner._all_tensors())

    what = "Dataset_flat_map" if cycle is None else "Dataset_interleave"
    sub, _, captures = _trace(traced, ds._structure, what)
    return _FlatMap(ds, holder[0], sub, captures, cycle, block)
