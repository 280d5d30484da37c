"""Saver.restore reads into the variables' own arrays, verified first: bit-exact values,
held values never change, and a damaged or mismatched checkpoint changes no variable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import ckptsync as cs
from ckptsync import checkpoint as ckpt
from ckptsync.checkpoint._format import PACK_DATASET
from ckptsync.errors import DataLossError, InvalidArgumentError

# Three 3 MiB variables (9 MiB: past the small-layout fast path, several 1 MiB chunks
# each) and two small ones; odd sizes so that no read ends on a chunk boundary.
BIG = {"a/w": (786_433,), "b/w": (1024, 769), "c/w": (786_431,)}
SMALL = {"s/w": (8, 4), "s/b": (5,)}


def _graph(shapes: dict[str, tuple[int, ...]], dtype: Any = cs.float32
           ) -> tuple[cs.Graph, list[Any], Any]:
    g = cs.Graph()
    with g.as_default():
        vs = [cs.get_variable(k, list(s), dtype=dtype, initializer=cs.zeros_initializer())
              for k, s in shapes.items()]
        init = cs.global_variables_initializer()
    return g, vs, init


def _session(shapes: dict[str, tuple[int, ...]], seed: int) -> tuple[Any, list[Any], Any]:
    g, vs, init = _graph(shapes)
    sess = cs.Session(graph=g)
    sess.run(init)
    rng = np.random.default_rng(seed)
    sess.write_variables({v.op.name: rng.standard_normal(s).astype(np.float32)
                          for v, s in zip(vs, shapes.values())})
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=None)
    return sess, vs, saver


def _values(sess: Any, vs: list[Any]) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in sess.read_variables([v.op.name for v in vs]).items()}


def _flip_last_byte_of(path: str, key: str) -> None:
    with h5py.File(path, "r") as f:
        ds = f[key]
        at = ds.id.get_offset() + ds.id.get_storage_size() - 1
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([byte ^ 0x01]))


@pytest.mark.parametrize("shapes", [BIG, SMALL], ids=["big", "small"])
def test_restore_reads_into_the_variables_own_arrays_bit_exact(
        tmp_path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    sess, vs, saver = _session(shapes, seed=1)
    saved = _values(sess, vs)
    prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
    sess.write_variables({v.op.name: np.full(s, 7.0, np.float32)
                          for v, s in zip(vs, shapes.values())}, copy=False)
    before = {k: id(a) for k, a in sess.read_variables([v.op.name for v in vs]).items()}
    for _ in range(2):  # the second read of a small layout takes the fast path
        saver.restore(sess, prefix)
        now = sess.read_variables([v.op.name for v in vs])
        assert {k: id(a) for k, a in now.items()} == before  # no new arrays
        for k, want in saved.items():
            assert now[k].tobytes() == want.tobytes()
        del now  # held, they would get new arrays next time


def test_a_value_someone_holds_is_never_changed_by_a_restore(tmp_path: Path) -> None:
    sess, vs, saver = _session(BIG, seed=2)
    prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
    sess.write_variables({vs[0].op.name: np.full(BIG["a/w"], 3.0, np.float32)})
    held = sess.run(vs[0])  # the session's own array, kept by the caller
    saver.restore(sess, prefix)
    assert np.all(held == 3.0)
    restored = sess.run(vs[0])
    assert restored is not held
    assert restored.tobytes() == ckpt.read_checkpoint(prefix)["a/w"].tobytes()


@pytest.mark.parametrize("shapes,key", [(BIG, "c/w"), (BIG, "a/w"), (SMALL, "s/w")],
                         ids=["big-last", "big-first", "small"])
def test_a_damaged_checkpoint_changes_no_variable(
        tmp_path: Path, shapes: dict[str, tuple[int, ...]], key: str) -> None:
    sess, vs, saver = _session(shapes, seed=3)
    good = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
    saver.restore(sess, good)  # learns the layout: a small file then takes the fast path
    sess.write_variables({v.op.name: np.full(s, -1.0, np.float32)
                          for v, s in zip(vs, shapes.values())}, copy=False)
    bad = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=2)
    _flip_last_byte_of(bad + ".h5", key)
    current = _values(sess, vs)
    with pytest.raises(DataLossError, match=rf"variable '{key}': checksum mismatch"):
        saver.restore(sess, bad)
    after = sess.read_variables([v.op.name for v in vs])
    for k, want in current.items():
        assert after[k].tobytes() == want.tobytes()
    saver.restore(sess, good)  # a good file still restores
    assert (sess.read_variables([vs[0].op.name])[vs[0].op.name]
            == ckpt.read_checkpoint(good)[vs[0].op.name]).all()


def test_a_dtype_mismatch_is_found_before_any_variable_changes(tmp_path: Path) -> None:
    prefix = ckpt.write_checkpoint(str(tmp_path / "model.ckpt-1"), {
        "s/w": np.ones((8, 4), np.float32), "s/b": np.ones(5, np.float64)})
    sess, vs, saver = _session(SMALL, seed=4)
    current = _values(sess, vs)
    with pytest.raises(InvalidArgumentError, match="tensor_name = s/b; expected dtype float32"):
        saver.restore(sess, prefix)
    after = sess.read_variables([v.op.name for v in vs])
    assert all(after[k].tobytes() == want.tobytes() for k, want in current.items())


def test_reshape_restores_in_place_into_the_variables_shape(tmp_path: Path) -> None:
    prefix = ckpt.write_checkpoint(str(tmp_path / "model.ckpt-1"), {
        "b/w": np.arange(1024 * 769, dtype=np.float32).reshape(769, 1024)})
    g, vs, init = _graph({"b/w": BIG["b/w"]})
    sess = cs.Session(graph=g)
    sess.run(init)
    with g.as_default():
        saver = cs.train.Saver(reshape=True)
    before = id(sess.read_variables(["b/w"])["b/w"])
    saver.restore(sess, prefix)
    got = sess.read_variables(["b/w"])["b/w"]
    assert got.shape == (1024, 769) and id(got) == before
    assert got.tobytes() == np.arange(1024 * 769, dtype=np.float32).tobytes()


def test_a_tf_checkpoint_restores_in_place_and_a_damaged_one_changes_nothing(
        tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    values = {k: rng.standard_normal(s).astype(np.float32) for k, s in SMALL.items()}
    prefix = ckpt.write_tf_checkpoint(str(tmp_path / "tf.ckpt-1"), values)
    sess, vs, saver = _session(SMALL, seed=6)
    saver.restore(sess, prefix)
    got = sess.read_variables(list(SMALL))
    assert all(got[k].tobytes() == v.tobytes() for k, v in values.items())
    data = Path(prefix + ".data-00000-of-00001")
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0x01
    data.write_bytes(bytes(raw))
    sess.write_variables({k: np.zeros(s, np.float32) for k, s in SMALL.items()})
    with pytest.raises(DataLossError):
        saver.restore(sess, prefix)
    after = sess.read_variables(list(SMALL))
    assert all(not after[k].any() for k in SMALL)


def test_a_damaged_packed_variable_changes_no_variable(tmp_path: Path) -> None:
    # More than 1,024 variables: the small ones are packed (format 2), the big one not.
    shapes = {f"p{i:04d}/w": (3,) for i in range(1100)}
    shapes["c/w"] = BIG["c/w"]
    sess, vs, saver = _session(shapes, seed=7)
    prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=1)
    with h5py.File(prefix + ".h5", "r") as f:
        assert PACK_DATASET in f
    _flip_last_byte_of(prefix + ".h5", PACK_DATASET)
    sess.write_variables({v.op.name: np.full(s, 2.0, np.float32)
                          for v, s in zip(vs, shapes.values())}, copy=False)
    with pytest.raises(DataLossError):
        saver.restore(sess, prefix)
    after = sess.read_variables([v.op.name for v in vs])
    assert all((a == 2.0).all() for a in after.values())
