"""TF1's ``tf.data.Dataset`` (``tf.compat.v1.data.Dataset``): sources and transformations.

A dataset is a Python object describing a pipeline; nothing runs until an iterator
(:mod:`.iterator_ops`) is initialized in a session. The tensors a pipeline reads (the
arrays of ``from_tensor_slices``, a fed placeholder, the captures of a ``map`` function)
are inputs of the iterator's initializer and are evaluated when it runs, as TF1.
``map`` and ``filter`` functions are traced into the graph once (as TF), over
placeholders of the element's dtypes and static shapes, and run per element.

Element order is TF's for ``range``, ``from_tensor_slices``, ``from_tensors``, ``zip``,
``concatenate``, ``batch``, ``padded_batch``, ``repeat``, ``take``, ``skip``, ``map``,
``filter``, ``cache`` and ``prefetch``. ``shuffle`` uses TF's buffer algorithm with
numpy's generator: with a seed (op or graph seed, TF's rules) the order is the same in
every run and process, and another one each epoch (``reshuffle_each_iteration``), but it
is not TF's order bit for bit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import Tensor
from ..ops.array_ops import convert_to_tensor
from ..ops.func_graph import flatten, merge_shapes, pack_as
from ..ops.random_ops import get_seed
from ..tensor_shape import TensorShape
from . import _runtime as rt

__all__ = ["Dataset", "TensorSpec", "Env"]


class TensorSpec:
    """The dtype and static shape of one component of a dataset's element."""

    def __init__(self, shape: Any, dtype: Any, name: str | None = None):
        self.shape = TensorShape(shape)
        self.dtype = _dtypes.as_dtype(dtype)
        self.name = name

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorSpec) or self.dtype != other.dtype:
            return False
        return self.shape.dims == other.shape.dims

    def __hash__(self) -> int:
        return hash(self.dtype.name)

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype=tf.{self.dtype.name}, name={self.name})"


class Env:
    """One initialization of an iterator: the values of the pipeline's tensors and the
    state its passes share (``cache`` stores, unseeded shuffles' entropy)."""

    def __init__(self, values: dict[int, np.ndarray]):
        self.values = values
        self.shared: dict[Any, Any] = {}

    def value(self, x: Any) -> Any:
        return self.values[id(x)] if isinstance(x, Tensor) else x

    def scalar(self, x: Any) -> int:
        return int(np.asarray(self.value(x)))


def _leaf(x: Any, name: str) -> Tensor:
    return x if isinstance(x, Tensor) else convert_to_tensor(x, name=name)


def _structure_of(value: Any, name: str) -> Any:
    """Tuples and dicts stay structures; anything else (a list too) is one tensor."""
    if isinstance(value, dict):
        return {k: _structure_of(value[k], name) for k in value}
    if isinstance(value, tuple):
        return type(value)(*[_structure_of(v, name) for v in value]) if hasattr(
            value, "_fields") else tuple(_structure_of(v, name) for v in value)
    return _leaf(value, name)


def _scalar_arg(x: Any, name: str) -> Any:
    """An int, or an int64 scalar tensor (read when the iterator is initialized)."""
    if isinstance(x, Tensor):
        if not x.dtype.is_integer:
            raise CkptsyncTypeError(f"`{name}` must be an integer tensor, got {x.dtype.name}.")
        return x
    if x is None:
        return -1
    return int(x)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "", name) or "fn"


class Structured:
    """The element structure's views, as TF1's ``Dataset`` and ``Iterator`` both have them
    (a subclass sets ``_structure``, the nest of :class:`TensorSpec` of an element)."""

    _structure: Any

    @property
    def element_spec(self) -> Any:
        """The nest of :class:`TensorSpec` of an element."""
        return self._structure

    @property
    def output_types(self) -> Any:
        return pack_as(self._structure, [s.dtype for s in flatten(self._structure)])

    @property
    def output_shapes(self) -> Any:
        return pack_as(self._structure, [s.shape for s in flatten(self._structure)])

    @property
    def output_classes(self) -> Any:
        return pack_as(self._structure, [Tensor for _ in flatten(self._structure)])


class Dataset(Structured):
    """A pipeline of elements, each a (nested) structure of tensors, as
    ``tf.compat.v1.data.Dataset``. Build one with the static constructors and chain
    transformations; read it through ``make_one_shot_iterator`` /
    ``make_initializable_iterator``."""

    def __init__(self, structure: Any, inputs: list[Dataset], tensors: list[Any]):
        self._structure = structure  # nest of TensorSpec
        self._inputs = inputs
        self._tensors = [t for t in tensors if isinstance(t, Tensor)]

    # ------------------------------------------------------------ structure

    def _flat_specs(self) -> list[TensorSpec]:
        return flatten(self._structure)

    def _all_tensors(self) -> list[Tensor]:
        """Every tensor the pipeline reads, each once, in a fixed order."""
        out: list[Tensor] = []
        seen: set[int] = set()

        def walk(d: Dataset) -> None:
            for t in d._tensors:
                if id(t) not in seen:
                    seen.add(id(t))
                    out.append(t)
            for c in d._inputs:
                walk(c)

        walk(self)
        return out

    def _node(self, env: Env, epoch: tuple[int, ...]) -> rt.Node:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------ sources
    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """One element per row (first dimension) of ``tensors``: an array, a tensor, or
        a tuple/dict of them (all with the same first dimension).

        Raises:
            ValueError: a component is a scalar, or the first dimensions differ.
        """
        structure = _structure_of(tensors, "component")
        flat = flatten(structure)
        if not flat:
            raise CkptsyncValueError("from_tensor_slices: no tensors given.")
        n = None
        for t in flat:
            if t.shape.dims is not None and len(t.shape.dims) == 0:
                raise CkptsyncValueError(
                    f"Unbatching a tensor is only supported for rank >= 1, got a scalar "
                    f"{t.name}.")
            d0 = None if t.shape.dims is None else t.shape.dims[0]
            if d0 is not None and n is not None and d0 != n:
                raise CkptsyncValueError(f"Dimensions {n} and {d0} are not compatible")
            n = n if d0 is None else d0
        specs = [TensorSpec(TensorShape(None) if t.shape.dims is None
                            else TensorShape(t.shape.dims[1:]), t.dtype) for t in flat]
        return _k._Source(pack_as(structure, specs), flat, "slices")

    @staticmethod
    def from_tensors(tensors: Any) -> Dataset:
        """A single element: ``tensors`` (an array, a tensor, or a tuple/dict of them)."""
        structure = _structure_of(tensors, "component")
        flat = flatten(structure)
        specs = [TensorSpec(t.shape, t.dtype) for t in flat]
        return _k._Source(pack_as(structure, specs), flat, "tensors")

    @staticmethod
    def range(*args: Any, output_type: Any = _dtypes.int64) -> Dataset:
        """``range([start,] stop[, step])`` as Python's, elements int64 scalars."""
        if not 1 <= len(args) <= 3:
            raise CkptsyncValueError(f"range takes 1 to 3 arguments, got {len(args)}.")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (
            (args[0], args[1], 1) if len(args) == 2 else args)
        vals = [_scalar_arg(a, "range") for a in (start, stop, step)]
        if not isinstance(vals[2], Tensor) and vals[2] == 0:
            raise CkptsyncValueError("range: step must not be zero.")
        return _k._Range(TensorSpec([], output_type), vals)

    @staticmethod
    def zip(datasets: Any) -> Dataset:
        """Elements of ``datasets`` (a tuple or dict of datasets) side by side, as long
        as the shortest."""
        flat = flatten(datasets)
        if not flat or not all(isinstance(d, Dataset) for d in flat):
            raise CkptsyncTypeError("zip: expected a (nested) structure of datasets.")
        return _k._Zip(pack_as(datasets, [d._structure for d in flat]), flat)

    @staticmethod
    def from_generator(generator: Callable[..., Any], output_types: Any, output_shapes: Any = None,
                       args: Any = None) -> Dataset:
        """The elements ``generator(*args)`` yields (called anew for each pass), each
        converted to ``output_types`` (a nest of dtypes) and checked against
        ``output_shapes``. A saved position is restored by calling the generator again and
        skipping as many elements (the generator must be deterministic for that).

        Raises:
            TypeError: ``generator`` is not callable.
            InvalidArgumentError (when run): an element does not fit the types or shapes.
        """
        if not callable(generator):
            raise CkptsyncTypeError("`generator` must be callable.")
        types = flatten(output_types)
        shapes = [TensorShape(None)] * len(types) if output_shapes is None else [
            TensorShape(x) for x in _k._parallel_leaves(output_types, output_shapes)]
        structure = pack_as(output_types, [TensorSpec(sh, t) for t, sh in zip(types, shapes)])
        arg_tensors = [_leaf(a, "arg") for a in (args or ())]
        return _k._Generator(structure, generator, arg_tensors)

    # ------------------------------------------------------------ transformations
    def concatenate(self, dataset: Dataset) -> Dataset:
        """This dataset's elements, then ``dataset``'s (same structure and dtypes)."""
        a, b = self._flat_specs(), dataset._flat_specs()
        try:
            same = flatten(pack_as(self._structure, [0] * len(a))) == flatten(
                pack_as(dataset._structure, [0] * len(b))) and len(a) == len(b)
        except (StopIteration, ValueError):
            same = False
        if not same or any(x.dtype != y.dtype for x, y in zip(a, b)):
            raise CkptsyncTypeError(
                f"Incompatible dataset elements: {self._structure} vs. {dataset._structure}")
        specs = [TensorSpec(merge_shapes(x.shape, y.shape), x.dtype) for x, y in zip(a, b)]
        return _k._Concat(pack_as(self._structure, specs), [self, dataset])

    def shuffle(self, buffer_size: Any, seed: int | None = None,
                reshuffle_each_iteration: bool = True) -> Dataset:
        """Elements in a random order from a buffer of ``buffer_size`` (TF's algorithm;
        the order for a seed is deterministic but not TF's own, see the module)."""
        graph_seed, op_seed = get_seed(seed)
        return _k._Shuffle(self, _scalar_arg(buffer_size, "buffer_size"), graph_seed, op_seed,
                        bool(reshuffle_each_iteration))

    def batch(self, batch_size: Any, drop_remainder: bool = False) -> Dataset:
        """Stacks ``batch_size`` consecutive elements; the last batch is smaller unless
        ``drop_remainder``. Static shapes ``[None, ...]`` (``[batch_size, ...]`` with
        ``drop_remainder`` and an int size)."""
        return _k._Batch(self, _scalar_arg(batch_size, "batch_size"), bool(drop_remainder), None,
                      None)

    def padded_batch(self, batch_size: Any, padded_shapes: Any = None, padding_values: Any = None,
                     drop_remainder: bool = False) -> Dataset:
        """``batch`` with each component padded to ``padded_shapes`` (None or -1 dims: the
        longest in the batch; default: every dim the longest) with ``padding_values``
        (default 0)."""
        specs = self._flat_specs()
        if padded_shapes is None:
            shapes = [[-1] * len(s.shape.dims or []) for s in specs]
            static = [s.shape for s in specs]
        else:
            flat_shapes = _k._parallel_leaves(self._structure, padded_shapes)
            shapes = [[-1 if d is None or d == -1 else int(d) for d in TensorShape(s).as_list()]
                      for s in flat_shapes]
            static = [TensorShape([None if d < 0 else d for d in s]) for s in shapes]
        pv = _k._parallel_leaves(self._structure, padding_values) if padding_values is not None \
            else [0] * len(specs)
        pad = [(s, np.asarray(v, sp.dtype.np)) for s, v, sp in zip(shapes, pv, specs)]
        return _k._Batch(self, _scalar_arg(batch_size, "batch_size"), bool(drop_remainder), pad,
                      static)

    def repeat(self, count: Any = None) -> Dataset:
        """The elements ``count`` times (None or -1: forever)."""
        return _k._Repeat(self, _scalar_arg(count, "count"))

    def take(self, count: Any) -> Dataset:
        """The first ``count`` elements (-1: all)."""
        return _k._Count(self, _scalar_arg(count, "count"), rt.Take)

    def skip(self, count: Any) -> Dataset:
        """All but the first ``count`` elements (-1: none)."""
        return _k._Count(self, _scalar_arg(count, "count"), rt.Skip)

    def map(self, map_func: Callable[..., Any], num_parallel_calls: Any = None,
            deterministic: Any = None) -> Dataset:
        """``map_func`` (called with the components of a tuple element as arguments, else
        with the element) traced once into the graph, applied to every element.
        ``num_parallel_calls`` is accepted and ignored (elements are mapped in order)."""
        sub, structure, captures = _k._trace(map_func, self._structure, "Dataset_map")
        return _k._Map(structure, self, sub, captures)

    def filter(self, predicate: Callable[..., Any]) -> Dataset:
        """The elements for which ``predicate`` (traced as ``map``'s function) is True.

        Raises:
            ValueError: ``predicate`` does not return a scalar ``bool`` tensor.
        """
        sub, structure, captures = _k._trace(predicate, self._structure, "Dataset_filter")
        flat = flatten(structure)
        if len(flat) != 1 or flat[0].dtype != _dtypes.bool or (
                flat[0].shape.dims is not None and len(flat[0].shape.dims) != 0):
            raise CkptsyncValueError(
                f"Invalid `predicate`. `predicate` must return a `tf.bool` scalar tensor, but "
                f"its return type is {structure}.")
        return _k._Filter(self, sub, captures)

    def flat_map(self, map_func: Callable[..., Any]) -> Dataset:
        """The elements of the datasets ``map_func`` (traced as ``map``'s function, once)
        returns for each element, one after the other."""
        return _k._flat_map(self, map_func)

    def interleave(self, map_func: Callable[..., Any], cycle_length: Any = None,
                   block_length: Any = 1, num_parallel_calls: Any = None,
                   deterministic: Any = None) -> Dataset:
        """TF's interleave: ``cycle_length`` of the datasets ``map_func`` returns open at
        once, ``block_length`` elements from each in turn (TF's order). The default
        ``cycle_length`` (TF: AUTOTUNE, the number of CPU cores) is 1 here."""
        cycle = 1 if cycle_length is None or (not isinstance(cycle_length, Tensor)
                                              and int(cycle_length) == -1) else cycle_length
        return _k._flat_map(self, map_func, _scalar_arg(cycle, "cycle_length"),
                            _scalar_arg(block_length, "block_length"))

    def unbatch(self) -> Dataset:
        """Each element's rows (first dimension) as elements."""
        specs = self._flat_specs()
        for s in specs:
            if s.shape.dims is not None and not s.shape.dims:
                raise CkptsyncValueError("Cannot unbatch an input with scalar components.")
        return _k._Unbatch(self, pack_as(self._structure, [TensorSpec(
            TensorShape(None) if s.shape.dims is None else TensorShape(s.shape.dims[1:]),
            s.dtype) for s in specs]))

    def prefetch(self, buffer_size: Any) -> Dataset:
        """The same elements (ckptsync computes elements when asked: nothing to prefetch)."""
        return _k._Same(self)

    def cache(self, filename: str = "") -> Dataset:
        """The same elements; the first pass is kept in memory and replayed by later
        passes (``filename`` is accepted; nothing is written to disk)."""
        return _k._Cache(self)

    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        return transformation_func(self)

    def with_options(self, options: Any) -> Dataset:
        return self

    def make_one_shot_iterator(self) -> Any:
        """As ``tf.data.make_one_shot_iterator(self)``."""
        from .iterator_ops import make_one_shot_iterator  # builds on this module

        return make_one_shot_iterator(self)

    def make_initializable_iterator(self, shared_name: str | None = None) -> Any:
        """As ``tf.data.make_initializable_iterator(self)``."""
        from .iterator_ops import make_initializable_iterator  # builds on this module

        return make_initializable_iterator(self, shared_name)


from . import _kinds as _k  # noqa: E402 - its datasets subclass Dataset
