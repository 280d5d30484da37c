"""train.Saver: TF1 semantics (var_list, retention, naming, restore errors) and async save."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ckptsync as cs
from ckptsync import checkpoint as ckpt
from ckptsync.errors import InvalidArgumentError, NotFoundError


def _model() -> tuple[cs.Graph, dict[str, Any]]:
    g = cs.Graph()
    with g.as_default():
        w = cs.get_variable("dense0/w", [2, 3], initializer=cs.ones_initializer())
        b = cs.get_variable("dense0/b", [3], initializer=cs.zeros_initializer())
        gs = cs.train.get_or_create_global_step()
        init = cs.global_variables_initializer()
    return g, {"w": w, "b": b, "gs": gs, "init": init}


@pytest.fixture
def model() -> Any:
    g, v = _model()
    with g.as_default(), cs.Session(graph=g) as sess:
        sess.run(v["init"])
        yield sess, v


def _set(sess: Any, var: Any, value: Any) -> None:
    sess.write_variables({var.op.name: value})


def _get(sess: Any, var: Any) -> np.ndarray:
    return sess.read_variables([var.op.name])[var.op.name]


def test_save_returns_prefix_and_restore_round_trips(model: Any, tmp_path: Path) -> None:
    sess, v = model
    saver = cs.train.Saver()
    _set(sess, v["w"], np.full((2, 3), 7.0))
    prefix = saver.save(sess, str(tmp_path / "model.ckpt"), global_step=12)
    assert prefix == str(tmp_path / "model.ckpt-12")
    assert ckpt.latest_checkpoint(str(tmp_path)) == prefix
    assert ckpt.CheckpointReader(prefix).global_step == 12
    _set(sess, v["w"], np.zeros((2, 3)))
    saver.restore(sess, prefix)
    np.testing.assert_array_equal(_get(sess, v["w"]), np.full((2, 3), 7.0))


def test_dict_var_list_renames_keys(model: Any, tmp_path: Path) -> None:
    sess, v = model
    _set(sess, v["w"], np.arange(6.0).reshape(2, 3))
    prefix = cs.train.Saver({"renamed/kernel": v["w"]}).save(sess, str(tmp_path / "m"))
    assert prefix is not None
    assert [k for k, _ in ckpt.list_variables(prefix)] == ["renamed/kernel"]
    _set(sess, v["w"], np.zeros((2, 3)))
    cs.train.Saver({"renamed/kernel": v["w"]}).restore(sess, prefix)
    np.testing.assert_array_equal(_get(sess, v["w"]), np.arange(6.0).reshape(2, 3))
    with pytest.raises(NotFoundError, match=r"Key dense0/w not found in checkpoint") as e:
        cs.train.Saver([v["w"]]).restore(sess, prefix)
    assert "Restoring from checkpoint failed" in str(e.value)


def test_var_list_errors(model: Any) -> None:
    _, v = model
    with pytest.raises(TypeError, match="Variables to save should be passed in a dict or a list"):
        cs.train.Saver(v["w"])
    with pytest.raises(ValueError, match="At least two variables have the same name: dense0/w"):
        cs.train.Saver([v["w"], v["w"]])
    with pytest.raises(ValueError, match="The same saveable will be restored with two names"):
        cs.train.Saver({"a": v["w"], "b": v["w"]})
    with pytest.raises(ValueError, match="No variables to save"):
        cs.train.Saver([])


def test_allow_empty_saves_nothing(model: Any, tmp_path: Path) -> None:
    sess, _ = model
    saver = cs.train.Saver([], allow_empty=True)
    assert saver.save(sess, str(tmp_path / "m")) is None
    saver.restore(sess, str(tmp_path / "nothing"))  # no-op
    assert os.listdir(tmp_path) == []


def test_pad_step_number_and_save_path_errors(model: Any, tmp_path: Path) -> None:
    sess, v = model
    saver = cs.train.Saver(pad_step_number=True)
    assert saver.save(sess, str(tmp_path / "m"), global_step=v["gs"]) == str(tmp_path / "m-00000000")
    # A missing parent directory is refused with TF1's message (TF 2.21's tf.compat.v1
    # Saver says the same), nothing written; so is a file in its place.
    with pytest.raises(ValueError, match=r"^Parent directory of .*missing/deeper/m doesn't "
                                         r"exist, can't save\.$"):
        saver.save(sess, str(tmp_path / "missing" / "deeper" / "m"))
    assert not (tmp_path / "missing").exists()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match="Parent directory of .* is not a directory"):
        saver.save(sess, str(tmp_path / "afile" / "m"))
    with pytest.raises(ValueError, match="collides with"):
        saver.save(sess, str(tmp_path / "checkpoint"))
    with pytest.raises(ValueError, match="must not contain path components"):
        saver.save(sess, str(tmp_path / "m"), latest_filename="a/b")


def test_restore_errors_use_tf_types_and_fragments(model: Any, tmp_path: Path) -> None:
    sess, v = model
    with pytest.raises(ValueError, match="not a valid checkpoint"):
        cs.train.Saver().restore(sess, str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="Can't load save_path when it is None"):
        cs.train.Saver().restore(sess, None)
    prefix = ckpt.write_checkpoint(
        tmp_path / "m", {"dense0/w": np.ones((3, 2), np.float32),
                         "dense0/b": np.ones(3, np.float64), "global_step": np.int64(0)})
    with pytest.raises(InvalidArgumentError,
                       match=r"lhs shape= \[2, 3\] rhs shape= \[3, 2\] for variable dense0/w"):
        cs.train.Saver([v["w"]]).restore(sess, prefix)
    with pytest.raises(InvalidArgumentError, match=r"tensor_name = dense0/b; expected dtype float32"):
        cs.train.Saver([v["b"]]).restore(sess, prefix)
    cs.train.Saver([v["w"]], reshape=True).restore(sess, prefix)  # equal element count
    np.testing.assert_array_equal(_get(sess, v["w"]), np.ones((2, 3)))


def test_max_to_keep_and_last_checkpoints(model: Any, tmp_path: Path) -> None:
    sess, _ = model
    saver = cs.train.Saver(max_to_keep=2)
    paths = [saver.save(sess, str(tmp_path / "m"), global_step=i) for i in range(4)]
    assert saver.last_checkpoints == paths[2:]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "m-2.h5", "m-3.h5"]
    state = ckpt.get_checkpoint_state(str(tmp_path))
    assert state is not None and state.all_model_checkpoint_paths == paths[2:]
    keep_all = cs.train.Saver(max_to_keep=None)
    keep_all.save(sess, str(tmp_path / "k"), global_step=1)
    assert keep_all.last_checkpoints == []


def test_never_deletes_files_it_did_not_record(model: Any, tmp_path: Path) -> None:
    sess, _ = model
    old = cs.train.Saver(max_to_keep=5)
    earlier = [old.save(sess, str(tmp_path / "m"), global_step=i) for i in range(3)]
    fresh = cs.train.Saver(max_to_keep=1)
    for i in range(10, 13):
        fresh.save(sess, str(tmp_path / "m"), global_step=i)
    assert all(ckpt.checkpoint_exists(p) for p in earlier)  # not recorded by `fresh`
    assert fresh.last_checkpoints == [str(tmp_path / "m-12")]
    assert not ckpt.checkpoint_exists(str(tmp_path / "m-10"))


def test_recover_last_checkpoints_adopts_existing_files(model: Any, tmp_path: Path) -> None:
    sess, _ = model
    first = cs.train.Saver(max_to_keep=2)
    for i in range(2):
        first.save(sess, str(tmp_path / "m"), global_step=i)
    state = ckpt.get_checkpoint_state(str(tmp_path))
    assert state is not None
    second = cs.train.Saver(max_to_keep=2)
    second.recover_last_checkpoints(state.all_model_checkpoint_paths + [str(tmp_path / "gone")])
    assert second.last_checkpoints == state.all_model_checkpoint_paths
    second.save(sess, str(tmp_path / "m"), global_step=2)
    assert not ckpt.checkpoint_exists(str(tmp_path / "m-0"))


def test_state_entry_outside_the_directory_is_refused(model: Any, tmp_path: Path) -> None:
    sess, _ = model
    (tmp_path / "d").mkdir()
    cs.train.Saver().save(sess, str(tmp_path / "outside"))
    (tmp_path / "d" / "checkpoint").write_text('model_checkpoint_path: "../outside"\n')
    with pytest.raises(ValueError, match="resolves outside the checkpoint directory"):
        ckpt.latest_checkpoint(str(tmp_path / "d"))


def test_first_save_sweeps_dead_writers_temp_files(model: Any, tmp_path: Path) -> None:
    sess, _ = model
    dead = tmp_path / ".m-1.h5.tmp-999999999-0"
    dead.write_bytes(b"partial")
    cs.train.Saver().save(sess, str(tmp_path / "m"), global_step=1)
    assert not dead.exists()


# -- async save ---------------------------------------------------------------------
def test_async_save_copies_values_then_writes_in_the_background(model: Any, tmp_path: Path) -> None:
    sess, v = model
    with cs.train.Saver(max_to_keep=2, async_save=True) as saver:
        prefixes = []
        for i in range(4):
            _set(sess, v["w"], np.full((2, 3), float(i)))
            prefixes.append(saver.save(sess, str(tmp_path / "m"), global_step=i))
            _set(sess, v["w"], np.full((2, 3), -1.0))  # training moves on
        assert saver.last_checkpoints == prefixes[2:]
        saver.wait_until_finished()
        assert ckpt.latest_checkpoint(str(tmp_path)) == prefixes[-1]
        for i, p in enumerate(prefixes[2:], start=2):
            np.testing.assert_array_equal(ckpt.load_variable(p, "dense0/w"), np.full((2, 3), i))
        assert sorted(os.listdir(tmp_path)) == ["checkpoint", "m-2.h5", "m-3.h5"]
        pid = saver._writer.pid  # type: ignore[union-attr]
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the worker was reaped


def test_async_one_save_in_flight_and_restore_waits(model: Any, tmp_path: Path) -> None:
    sess, v = model
    saver = cs.train.Saver(async_save=True)
    try:
        _set(sess, v["w"], np.full((2, 3), 3.0))
        p = saver.save(sess, str(tmp_path / "m"), global_step=1)
        _set(sess, v["w"], np.zeros((2, 3)))
        saver.restore(sess, p)  # waits for the save in flight
        np.testing.assert_array_equal(_get(sess, v["w"]), np.full((2, 3), 3.0))
    finally:
        saver.close()
    saver.close()  # idempotent


def test_checkpoint_saver_hook_with_async_saver(tmp_path: Path) -> None:
    g, v = _model()
    with g.as_default():
        inc = cs.assign_add(v["gs"], 1)
        saver = cs.train.Saver(max_to_keep=3, async_save=True)
        hook = cs.train.CheckpointSaverHook(str(tmp_path), save_steps=2, saver=saver)
        with saver, cs.train.MonitoredSession(hooks=[hook]) as mon:
            for _ in range(5):
                mon.run(inc)
        assert ckpt.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-5")
        assert ckpt.load_variable(str(tmp_path), "global_step") == 5


@pytest.mark.parametrize("async_save", [False, True], ids=["sync", "async"])
def test_require_finite_refuses_nan_and_keeps_the_last_good_state(
        model: Any, tmp_path: Path, async_save: bool) -> None:
    sess, v = model
    with cs.train.Saver(max_to_keep=2, async_save=async_save, require_finite=True) as saver:
        good = saver.save(sess, str(tmp_path / "m"), global_step=1)
        saver.wait_until_finished()
        _set(sess, v["b"], np.array([0.0, np.nan, 0.0], np.float32))
        with pytest.raises(InvalidArgumentError, match="dense0/b holds NaN or Inf.*m-2"):
            # async: the writer process refuses it; the refusal comes with the wait
            saver.save(sess, str(tmp_path / "m"), global_step=2)
            saver.wait_until_finished()
        saver.wait_until_finished()
        assert saver.last_checkpoints == [good]
        assert ckpt.latest_checkpoint(str(tmp_path)) == good
        assert sorted(os.listdir(tmp_path)) == ["checkpoint", "m-1.h5"]
        _set(sess, v["b"], np.zeros(3, np.float32))  # fixed: saving works again
        assert saver.save(sess, str(tmp_path / "m"), global_step=3) == str(tmp_path / "m-3")
    assert ckpt.latest_checkpoint(str(tmp_path)) == str(tmp_path / "m-3")


def test_async_queued_saves_roll_back_from_the_failed_one(
        model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptsync.errors import DataLossError
    from tests.workers.test_async_writer import _slow_worker

    sess, v = model
    _slow_worker(monkeypatch, fail_prefix_part="m-3")
    with cs.train.Saver(max_to_keep=10, async_save=True) as saver:
        saver.save(sess, str(tmp_path / "m"), global_step=1)
        saver.wait_until_finished()
        for step in (2, 3, 4):  # 3 fails in the writer; 4 is queued behind it
            saver.save(sess, str(tmp_path / "m"), global_step=step)
        assert saver.last_checkpoints == [str(tmp_path / f"m-{i}") for i in (1, 2, 3, 4)]
        with pytest.raises(DataLossError, match="m-3: EIO"):
            saver.wait_until_finished()
        assert saver.last_checkpoints == [str(tmp_path / "m-1"), str(tmp_path / "m-2")]
        assert ckpt.latest_checkpoint(str(tmp_path)) == str(tmp_path / "m-2")
        saver.save(sess, str(tmp_path / "m"), global_step=5)
    assert ckpt.latest_checkpoint(str(tmp_path)) == str(tmp_path / "m-5")
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "m-1.h5", "m-2.h5", "m-5.h5"]


def test_close_with_a_queued_failure_keeps_the_saves_confirmed_before_it(
        model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptsync.errors import DataLossError
    from tests.workers.test_async_writer import _slow_worker

    sess, _ = model
    _slow_worker(monkeypatch, fail_prefix_part="m-3")
    saver = cs.train.Saver(max_to_keep=10, async_save=True)
    for step in (1, 2, 3, 4):
        saver.save(sess, str(tmp_path / "m"), global_step=step)
    with pytest.raises(DataLossError, match="m-3: EIO"):
        saver.close()
    assert saver.last_checkpoints == [str(tmp_path / "m-1"), str(tmp_path / "m-2")]
    assert ckpt.latest_checkpoint(str(tmp_path)) == str(tmp_path / "m-2")


def test_async_relative_prefixes_follow_the_working_directory(
        model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sess, _ = model
    for d in ("a/ckpts", "b/ckpts"):
        (tmp_path / d).mkdir(parents=True)
    with cs.train.Saver(max_to_keep=2, async_save=True) as saver:
        monkeypatch.chdir(tmp_path / "a")
        saver.save(sess, "ckpts/m", global_step=1)
        monkeypatch.chdir(tmp_path / "b")
        saver.save(sess, "ckpts/m", global_step=2)
        saver.wait_until_finished()
    assert sorted(os.listdir(tmp_path / "a/ckpts")) == ["checkpoint", "m-1.h5"]
    assert sorted(os.listdir(tmp_path / "b/ckpts")) == ["checkpoint", "m-2.h5"]


def test_one_saver_into_two_directories_keeps_each_state_file_to_its_own(
        model: Any, tmp_path: Path) -> None:
    # TF1 saves into both and counts max_to_keep across them; each state file here lists
    # only its own directory's checkpoints (readers refuse paths outside a directory).
    sess, v = model
    saver = cs.train.Saver(max_to_keep=2)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    pa = saver.save(sess, str(a / "model.ckpt"), global_step=1)
    pb = saver.save(sess, str(b / "model.ckpt"), global_step=2)
    assert cs.train.latest_checkpoint(str(a)) == pa and cs.train.latest_checkpoint(str(b)) == pb
    assert cs.train.get_checkpoint_state(str(b)).all_model_checkpoint_paths == [pb]
    assert saver.last_checkpoints == [pa, pb]
    pb3 = saver.save(sess, str(b / "model.ckpt"), global_step=3)
    assert saver.last_checkpoints == [pb, pb3]  # a's was the oldest of the three
    assert not any(p.name.startswith("model.ckpt-1") for p in a.iterdir())
    assert cs.train.get_checkpoint_state(str(b)).all_model_checkpoint_paths == [pb, pb3]
