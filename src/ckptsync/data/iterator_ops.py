"""TF1's dataset iterators: ``make_one_shot_iterator``, ``make_initializable_iterator``,
``Iterator.from_structure``/``make_initializer``, ``get_next``, and the saveable that
puts an iterator's position into a ``Saver``'s checkpoints
(``tf.data.experimental.make_saveable_from_iterator``).

The ops are TF's: ``OneShotIterator`` / ``IteratorV2`` (the handle), ``MakeIterator``
(the initializer: it evaluates the pipeline's tensors and starts a pass),
``IteratorGetNext`` (one output per component, the element spec's dtypes and static
shapes; ``OutOfRangeError`` "End of sequence" at the end), ``SerializeIterator`` and
``DeserializeIterator``. An iterator's state lives in the session
(``RunContext.resources``), per iterator op: two sessions iterate independently.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _dtypes
from ..errors import (
    CkptsyncTypeError,
    CkptsyncValueError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
)
from ..graph import GraphKeys, Operation, Tensor
from ..ops.array_ops import placeholder
from ..ops.func_graph import BLOB, flatten, pack_as
from ..ops.registry import make_op, register, single
from . import _runtime as rt
from . import _state
from .dataset_ops import Dataset, Env, Structured, TensorSpec

__all__ = ["Iterator", "make_one_shot_iterator", "make_initializable_iterator",
           "make_saveable_from_iterator", "IteratorSaveable", "get_output_types",
           "get_output_shapes", "get_output_classes"]

_NOT_INITIALIZED = ("GetNext() failed because the iterator has not been initialized. Ensure "
                    "that you have run the initializer operation for this iterator before "
                    "getting the next element.")


def _start(ctx: Any, op: Operation, handle: str, dataset: Dataset, values: tuple) -> None:
    env = Env({id(t): v for t, v in zip(dataset._all_tensors(), values)})
    node = dataset._node(env, ())
    pipeline = _state.pipeline_fingerprint(dataset)
    pending = ctx.resources.pop(("pending", handle), None)
    if pending is not None:  # a restore that came before the first initialization
        _restore(op, node, pending, pipeline)
    ctx.resources[handle] = node
    ctx.resources[("pipeline", handle)] = pipeline


def _restore(op: Operation, node: rt.Node, blob: Any, pipeline: str) -> None:
    try:
        saved = _state.unpack_state(blob)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise InvalidArgumentError(None, op, f"The iterator state for {op.inputs[0].op.name} "
                                   f"is damaged: {e}") from e
    if isinstance(saved, dict) and "__pipeline__" in saved:  # older states have none
        if saved["__pipeline__"] != pipeline:  # TF1: NotFoundError (its state's keys)
            raise NotFoundError(
                None, op, f"The iterator state for {op.inputs[0].op.name} was saved from "
                f"the input pipeline {saved['__pipeline__']} and cannot be restored into "
                f"{pipeline}: restore it into the pipeline it was saved from.")
        saved = saved["state"]
    try:
        node.restore(saved)
    except (ValueError, KeyError, IndexError, TypeError, AssertionError) as e:
        raise InvalidArgumentError(
            None, op, f"The iterator state for {op.inputs[0].op.name} does not fit this "
            f"input pipeline (a checkpoint of another pipeline?): {e}") from e


@register("IteratorV2", kind="stateful")
def _iterator_kernel(ctx: Any, op: Operation) -> Any:
    return op.name


@register("OneShotIterator", kind="stateful")
def _one_shot_kernel(ctx: Any, op: Operation, *values: Any) -> Any:
    if op.name not in ctx.resources:
        _start(ctx, op, op.name, op.attrs["dataset"], values)
    return op.name


@register("MakeIterator", kind="stateful")
def _make_iterator_kernel(ctx: Any, op: Operation, handle: Any, *values: Any) -> None:
    _start(ctx, op, handle, op.attrs["dataset"], values)


@register("IteratorGetNext", kind="stateful")
def _get_next_kernel(ctx: Any, op: Operation, handle: Any) -> Any:
    node = ctx.resources.get(handle)
    if node is None:
        raise FailedPreconditionError(None, op, _NOT_INITIALIZED)
    try:
        out = node.next(ctx)
    except rt.End:
        raise OutOfRangeError(None, op, "End of sequence") from None
    out = [np.asarray(a, t.dtype.np) for a, t in zip(out, op.outputs)]
    return out[0] if len(out) == 1 else tuple(out)


@register("SerializeIterator", kind="stateful")
def _serialize_kernel(ctx: Any, op: Operation, handle: Any) -> np.ndarray:
    node = ctx.resources.get(handle)
    if node is None:
        raise FailedPreconditionError(None, op, _NOT_INITIALIZED)
    return _state.pack_state({"__pipeline__": ctx.resources[("pipeline", handle)],
                              "state": node.state()})


@register("DeserializeIterator", kind="stateful")
def _deserialize_kernel(ctx: Any, op: Operation, handle: Any, blob: Any) -> None:
    node = ctx.resources.get(handle)
    if node is None:  # kept until the initializer runs (see make_saveable_from_iterator)
        ctx.resources[("pending", handle)] = np.array(blob, np.uint8)
        return
    _restore(op, node, blob, ctx.resources[("pipeline", handle)])


class Iterator(Structured):
    """Reads a dataset's elements in a session, as ``tf.compat.v1.data.Iterator``.

    Attributes:
        initializer: the op that (re)starts the pass (None for a one-shot iterator).
    """

    def __init__(self, handle: Tensor, initializer: Operation | None, structure: Any):
        self._iterator_resource = handle
        self._initializer = initializer
        self._structure = structure

    @property
    def initializer(self) -> Operation:
        if self._initializer is None:
            raise CkptsyncValueError("The iterator does not have an initializer. This means "
                                     "it was likely created using `tf.data.Dataset.make_one_"
                                     "shot_iterator()`. For an initializable iterator, use "
                                     "`tf.data.Dataset.make_initializable_iterator()` instead.")
        return self._initializer


    def get_next(self, name: str | None = None) -> Any:
        """The next element: the nested structure of tensors (one ``IteratorGetNext`` op).

        Running it raises ``OutOfRangeError`` after the last element and
        ``FailedPreconditionError`` before the initializer has run."""
        specs = flatten(self._structure)
        op = make_op("IteratorGetNext", [self._iterator_resource], [s.dtype for s in specs],
                     [s.shape for s in specs], name=name or "IteratorGetNext")
        return pack_as(self._structure, list(op.outputs))

    def make_initializer(self, dataset: Dataset, name: str | None = None) -> Operation:
        """An op that starts a pass of this iterator over ``dataset`` (same structure and
        dtypes; a reinitializable iterator, ``Iterator.from_structure``).

        Raises:
            TypeError: ``dataset``'s element does not fit the iterator's."""
        mine, theirs = flatten(self._structure), flatten(dataset._structure)
        if len(mine) != len(theirs) or any(a.dtype != b.dtype for a, b in zip(mine, theirs)):
            raise CkptsyncTypeError(
                f"Expected output types {self.output_types} but got dataset with output "
                f"types {dataset.output_types}.")
        return make_op("MakeIterator", [self._iterator_resource, *dataset._all_tensors()], [],
                       [], name=name or "MakeIterator", attrs={"dataset": dataset})

    @staticmethod
    def from_structure(output_types: Any, output_shapes: Any = None, shared_name: str | None = None,
                       output_classes: Any = None) -> Iterator:
        """An iterator of elements of ``output_types`` (and ``output_shapes``) with no
        dataset yet: ``make_initializer(dataset)`` for each dataset it reads."""
        types = flatten(output_types)
        shapes = [None] * len(types) if output_shapes is None else _shape_leaves(
            output_types, output_shapes)
        structure = pack_as(output_types, [TensorSpec(s, t) for t, s in zip(types, shapes)])
        handle = single("IteratorV2", [], BLOB, [], name="Iterator")
        return Iterator(handle, None, structure)

    def string_handle(self, name: str | None = None) -> Tensor:
        raise CkptsyncValueError("Iterator.string_handle (feedable iterators) is not supported "
                                 "by ckptsync; use Iterator.from_structure + make_initializer.")


def _shape_leaves(types: Any, shapes: Any) -> list[Any]:
    if isinstance(types, dict):
        return [x for k in sorted(types) for x in _shape_leaves(types[k], shapes[k])]
    if isinstance(types, tuple):
        return [x for t, s in zip(types, shapes) for x in _shape_leaves(t, s)]
    return [shapes]


def _check_dataset(dataset: Any) -> Dataset:
    if not isinstance(dataset, Dataset):
        raise CkptsyncTypeError(f"Expected a tf.data.Dataset, got {type(dataset).__name__}.")
    return dataset


def make_one_shot_iterator(dataset: Dataset) -> Iterator:
    """An iterator that starts by itself on its first use (no initializer), as
    ``tf.compat.v1.data.make_one_shot_iterator``.

    Raises:
        ValueError: the pipeline reads a placeholder ("Cannot capture a placeholder ...
            by value", as TF: use an initializable iterator).
    """
    dataset = _check_dataset(dataset)
    tensors = dataset._all_tensors()
    for t in tensors:
        if t.op.type == "Placeholder":
            raise CkptsyncValueError(f"Cannot capture a placeholder (name:{t.op.name}, "
                                     f"type:Placeholder) by value.")
    op = make_op("OneShotIterator", tensors, [BLOB], [[]], name="OneShotIterator",
                 attrs={"dataset": dataset})
    return Iterator(op.outputs[0], None, dataset._structure)


def make_initializable_iterator(dataset: Dataset, shared_name: str | None = None) -> Iterator:
    """An iterator whose ``initializer`` (re)starts a pass over ``dataset``, reading its
    tensors (e.g. a fed placeholder) then, as ``tf.compat.v1.data.make_initializable_iterator``.
    """
    dataset = _check_dataset(dataset)
    handle = single("IteratorV2", [], BLOB, [], name="IteratorV2")
    it = Iterator(handle, None, dataset._structure)
    it._initializer = it.make_initializer(dataset)
    return it


class IteratorSaveable:
    """An iterator's position as one checkpoint entry, ``<iterator op>_STATE`` (a
    ``uint8`` vector), as TF1's ``_IteratorSaveable``: a ``Saver`` given it (or finding it
    in ``GraphKeys.SAVEABLE_OBJECTS``) saves the position with the variables and restores
    it, so the next ``get_next`` after a restore is the one after the save.

    Attributes:
        name: the checkpoint key.
        op: the iterator's handle tensor.
    """

    def __init__(self, iterator: Iterator, name: str | None = None):
        handle = iterator._iterator_resource
        self.op = handle
        self.graph = handle.graph
        self.name = name or f"{handle.op.name}_STATE"
        self._serialize = single("SerializeIterator", [handle], _dtypes.uint8, [None],
                                 name="SerializeIterator")
        self._state = placeholder(_dtypes.uint8, [None], name=f"{handle.op.name}_restore_state")
        self._restore = make_op("DeserializeIterator", [handle, self._state], [], [],
                                name="DeserializeIterator")

    def save_value(self, sess: Any) -> np.ndarray:
        """The position in ``sess`` as a ``uint8`` vector (ckptsync's Saver calls this)."""
        return np.asarray(sess.run(self._serialize), np.uint8)

    def restore_value(self, sess: Any, value: np.ndarray) -> None:
        """Moves the iterator in ``sess`` to a saved position. Before the iterator's first
        initialization, the position is applied when its initializer runs (ckptsync's
        choice, so a restarted trainer that initializes after restoring resumes).

        Raises:
            NotFoundError: the state was saved from another pipeline (its chain of
                transformation kinds or element spec differ: see
                :func:`._state.pipeline_fingerprint`), as TF1 refuses it; naming both.
            InvalidArgumentError: a damaged state.
        """
        sess.run(self._restore, {self._state: np.asarray(value, np.uint8)})


def make_saveable_from_iterator(iterator: Iterator, external_state_policy: Any = None
                                ) -> IteratorSaveable:
    """A saveable of ``iterator``'s position, as
    ``tf.data.experimental.make_saveable_from_iterator``; add it to
    ``GraphKeys.SAVEABLE_OBJECTS`` (or a Saver's ``var_list``)."""
    if not isinstance(iterator, Iterator):
        raise CkptsyncTypeError(f"Expected an Iterator, got {type(iterator).__name__}.")
    return IteratorSaveable(iterator)


def get_output_types(dataset_or_iterator: Any) -> Any:
    return dataset_or_iterator.output_types


def get_output_shapes(dataset_or_iterator: Any) -> Any:
    return dataset_or_iterator.output_shapes


def get_output_classes(dataset_or_iterator: Any) -> Any:
    return dataset_or_iterator.output_classes


SAVEABLE_OBJECTS = GraphKeys.SAVEABLE_OBJECTS
