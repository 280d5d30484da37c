"""Runs one case of :mod:`cases` with a TF1-like module and records what it produced:
the same code runs under TensorFlow (``generate.py``) and under ckptsync (the test).

Only numpy and the standard library may be imported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _shape(t: Any) -> list[int | None] | None:
    shape = t.get_shape()
    try:
        return [None if d is None else int(d) for d in shape.as_list()]
    except ValueError:  # unknown rank
        return None


def _dtype(t: Any) -> str:
    return str(t.dtype.base_dtype.name)


def run_case(tf: Any, build: Any) -> dict[str, Any]:
    """``{"error": class names}`` if building or running raises, else ``{"fetch":
    {label: {"value", "dtype", "shape"}}, "grads": [array], "names": [...]}``.

    Op names are compared only where a case lists them (``names``): the name of an
    internal op TF happens to return (a Reshape inside a loss) is no contract."""
    graph = tf.Graph()
    with graph.as_default():
        try:
            spec = build(tf)
            fetch = spec["fetch"]
            grads_of = spec.get("grads")
            grad_ys = grad_tensors = None
            if grads_of is not None:
                label, xs = grads_of
                y = fetch[label]
                grad_ys = tf.placeholder(y.dtype.base_dtype, y.get_shape(), name="grad_ys")
                grad_tensors = tf.gradients(y, xs, grad_ys=grad_ys)
                # An IndexedSlices gradient (gather, embedding_lookup) is compared dense:
                # TF's sess.run would give an IndexedSlicesValue.
                grad_tensors = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices)
                                else g for g in grad_tensors]
            init = tf.global_variables_initializer() if spec.get("init") else None
        except Exception as e:  # noqa: BLE001 - the class is the record
            return {"error": _error_names(e)}
        record: dict[str, Any] = {
            "fetch": {k: {"dtype": _dtype(t), "shape": _shape(t)} for k, t in fetch.items()},
            "names": list(spec.get("names", [])),
        }
        with tf.Session(graph=graph) as sess:
            try:
                if init is not None:
                    sess.run(init)
                feeds = dict(spec["feeds"])
                for target, times in spec.get("before", []):
                    for _ in range(times):
                        sess.run(target, feed_dict=feeds)
                runs = spec.get("runs")
                if runs is not None:  # a sequence (iterator elements): one record per run
                    static = record["fetch"]
                    record["fetch"] = {}
                    for i in range(runs):
                        for k, v in sess.run(dict(fetch), feed_dict=feeds).items():
                            record["fetch"][f"{k}@{i}"] = {**static[k], "value": np.asarray(v)}
                    values = {}
                else:
                    values = sess.run(dict(fetch), feed_dict=feeds)
                for k, v in values.items():
                    record["fetch"][k]["value"] = np.asarray(v)
                if grad_tensors is not None:
                    y_value = np.asarray(values[grads_of[0]])
                    upstream = np.random.RandomState(1234).uniform(
                        -1, 1, y_value.shape).astype(y_value.dtype)
                    got = sess.run([g for g in grad_tensors if g is not None],
                                   feed_dict={**feeds, grad_ys: upstream})
                    it = iter(got)
                    record["grads"] = [None if g is None else np.asarray(next(it))
                                       for g in grad_tensors]
            except Exception as e:  # noqa: BLE001
                return {"error": _error_names(e)}
    return record


def _error_names(e: BaseException) -> list[str]:
    return [c.__name__ for c in type(e).__mro__ if c.__name__ not in ("object", "BaseException")]
