"""Held-out evaluation of a ``model_fn`` model file in EVAL mode, as TF1's Estimator
evaluates: :func:`make_eval_graph_evaluator`.

``model_fn`` is called with ``mode=EVAL`` on a graph of its own (so dropout is off and
``tf.metrics`` build their local variables there, never in the training graph). Each
evaluation copies the training session's current variable values into that graph's
session (``Session.read_variables`` -> ``write_variables``: no checkpoint is read), resets
the metrics' local variables, runs ``loss`` and every ``eval_metric_ops`` update op over
the held-out rows in batches of :data:`~.hooks.EVAL_BATCH`, then reads the metrics'
value tensors.

Thread-safety: the evaluator runs in the training loop's thread (a hook's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..graph import Graph, GraphKeys
from ..model_fn_file import DataSignature
from ..model_spec import ModeKeys, ModelFileError
from ..ops.random_ops import set_random_seed
from ..session import Session
from ..variables import local_variables_initializer
from .hooks import EVAL_BATCH, Evaluation, classes_output

__all__ = ["make_eval_graph_evaluator"]


def make_eval_graph_evaluator(build_net: Callable[..., Any], device: str, data: DataSignature,
                              test: Mapping[str, np.ndarray], train_graph: Graph, seed: int,
                              learning_rate: float | None, model_path: str
                              ) -> Callable[[Any], Evaluation]:
    """``evaluate(train_session)`` -> :class:`~.hooks.Evaluation` over ``test`` (name ->
    array ``[rows, ...]``) with ``model_fn`` in EVAL mode (see the module docstring):
    the row-weighted mean of ``loss``, the ``eval_metric_ops`` values as ``metrics``, and
    ``accuracy`` = ``metrics["accuracy"]`` if the model has that metric, else that of its
    ``classes`` output for a classifier (as :func:`~.hooks.make_evaluator`).

    Args:
        build_net: the file's :class:`~ckptsync.model_fn_file.ModelFnNet`.
        train_graph: the training graph; the EVAL graph's global variables must be among
            its (their values are copied from the training session).

    Raises:
        ModelFileError: ``model_fn`` fails in EVAL mode, or creates global variables in
            EVAL mode that TRAIN does not (they could never get trained values).
    """
    graph = Graph()
    with graph.as_default():
        set_random_seed(seed)
        spec = build_net(graph, device, ModeKeys.EVAL, learning_rate, data=data)
        local_init = local_variables_initializer()
    metric_ops = dict(spec.extra["estimator_spec"].eval_metric_ops or {})
    values = {k: v[0] for k, v in metric_ops.items()}
    updates = [v[1] for v in metric_ops.values()]
    names = [v.op.name for v in graph.get_collection(GraphKeys.GLOBAL_VARIABLES)]
    trained = {v.op.name for v in train_graph.get_collection(GraphKeys.GLOBAL_VARIABLES)}
    extra = [n for n in names if n not in trained]
    if extra:
        raise ModelFileError(
            f"model_fn in {model_path} creates variables in EVAL mode that it does not "
            f"create in TRAIN mode: {extra[:5]}; expected the same variables in every mode "
            "(tf.metrics' are local variables).")
    classes = None if "accuracy" in metric_ops else classes_output(spec)
    feeds = {**spec.inputs, **(spec.labels or {})}
    rows = len(next(iter(test.values()))) if test and all(k in test for k in feeds) else 0
    label = next(iter(spec.labels)) if spec.labels else None
    graph.finalize()
    sess = Session(graph=graph)

    def evaluate(train_session: Any) -> Evaluation:
        if not rows:
            return Evaluation(None, None)
        sess.write_variables(train_session.read_variables(names))
        sess.run(local_init)
        loss_sum, correct = 0.0, 0
        fetches: list[Any] = [spec.loss, updates] + ([classes] if classes is not None else [])
        for i in range(0, rows, EVAL_BATCH):
            chunk = {feeds[k]: test[k][i:i + EVAL_BATCH] for k in feeds}
            n = len(next(iter(chunk.values())))
            out = sess.run(fetches, chunk)
            loss_sum += float(out[0]) * n
            if classes is not None and label is not None:
                y = test[label][i:i + EVAL_BATCH]
                correct += int(np.sum(np.asarray(out[2]).reshape(-1) == y.reshape(-1)))
        metrics = {k: _plain(v) for k, v in sess.run(values).items()} if values else {}
        acc = metrics.get("accuracy")
        if not isinstance(acc, float):
            acc = correct / rows if classes is not None else None
        return Evaluation(loss_sum / rows, acc, metrics)

    return evaluate


def _plain(value: Any) -> Any:
    """A metric's value as a float (a non-scalar one as a nested list)."""
    arr = np.asarray(value)
    return float(arr.reshape(-1)[0]) if arr.size == 1 else arr.tolist()
