"""Saver with a layout of more than 1,024 variables (format 2, the small variables packed;
issue #16 item 8): save, restore into a graph, async save, and TF's module functions."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import ckptsync as cs
from ckptsync.checkpoint import CheckpointReader


def _graph(n: int) -> tuple[cs.Graph, cs.train.Saver, dict[str, np.ndarray]]:
    graph = cs.Graph()
    values: dict[str, np.ndarray] = {}
    with graph.as_default():
        for i in range(n):
            dtype = (np.float32, np.int64, np.float64)[i % 3]
            values[f"layer{i // 100:03d}/v{i % 100:02d}"] = np.asarray(dtype(i))
        values["big/w"] = np.arange(40_000, dtype=np.float32).reshape(200, 200)
        values["big/w/Momentum"] = np.full((200, 200), 0.5, np.float32)
        for name, value in values.items():
            cs.get_variable(name, shape=value.shape, dtype=cs.as_dtype(value.dtype),
                            initializer=cs.zeros_initializer())
        cs.train.get_or_create_global_step()
        saver = cs.train.Saver(max_to_keep=2)
    return graph, saver, values


def _check(sess: cs.Session, values: dict[str, np.ndarray]) -> None:
    got = sess.read_variables(list(values))
    for name, value in values.items():
        assert got[name].dtype == value.dtype and got[name].tobytes() == value.tobytes(), name


def test_save_and_restore_3000_variables_into_a_fresh_session(tmp_path: Path) -> None:
    graph, saver, values = _graph(3000)
    sess = cs.Session(graph=graph)
    sess.write_variables({**values, "global_step": np.int64(7)})
    prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=7)
    assert prefix is not None
    with CheckpointReader(prefix) as r:
        assert r.format_version == 2 and r.global_step == 7
        assert len(r.get_variable_to_shape_map()) == len(values) + 1
    fresh = cs.Session(graph=graph)
    saver.restore(fresh, cs.train.latest_checkpoint(str(tmp_path)))
    _check(fresh, values)
    # Again (the Saver's per-variable facts are made once), after changing a value.
    sess.write_variables({"layer010/v05": np.float32(-1)})  # i = 1005: float32
    saver.restore(fresh, saver.save(sess, str(tmp_path / "model.ckpt"), global_step=8))
    _check(fresh, {**values, "layer010/v05": np.asarray(np.float32(-1))})
    assert dict(cs.train.list_variables(str(tmp_path)))["layer029/v99"] == []
    assert float(cs.train.load_variable(str(tmp_path), "layer010/v05")) == -1.0


def test_async_save_of_a_packed_layout(tmp_path: Path) -> None:
    graph, _, values = _graph(2000)
    with graph.as_default():
        saver = cs.train.Saver(async_save=True)
    sess = cs.Session(graph=graph)
    sess.write_variables({**values, "global_step": np.int64(3)})
    with saver:
        for step in (3, 4):
            saver.save(sess, str(tmp_path / "model.ckpt"), global_step=step)
        saver.wait_until_finished()
    fresh = cs.Session(graph=graph)
    saver.restore(fresh, str(tmp_path / "model.ckpt-4"))
    _check(fresh, values)
