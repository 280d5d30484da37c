"""SessionRunHook, MonitoredSession and the basic hooks, as TF1 (TF1_SEMANTICS.md §3–4)."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import ckptsync as cs
from ckptsync import errors
from ckptsync.train import (
    CheckpointSaverHook,
    CheckpointSaverListener,
    FinalOpsHook,
    LoggingTensorHook,
    MonitoredSession,
    MonitoredTrainingSession,
    NanLossDuringTrainingError,
    NanTensorHook,
    SecondOrStepTimer,
    SessionRunArgs,
    SessionRunHook,
    StepCounterHook,
    StopAtStepHook,
)


def _graph():
    g = cs.Graph()
    with g.as_default():
        step = cs.train.get_or_create_global_step()
        x = cs.placeholder(cs.float32, [], name="x")
        v = cs.get_variable("v", initializer=np.float32(0.0))
        train = cs.group(cs.assign_add(v, x), cs.assign_add(step, np.int64(1)))
    return g, step, x, v, train


class Recorder(SessionRunHook):
    def __init__(self, name, log, fetches=None, feed=None):
        self.name, self.log, self.fetches, self.feed = name, log, fetches, feed
        self.results = []

    def begin(self):
        self.log.append((self.name, "begin", cs.get_default_graph().finalized))

    def after_create_session(self, session, coord):
        self.log.append((self.name, "after_create_session", session.graph.finalized))

    def before_run(self, run_context):
        self.log.append((self.name, "before_run"))
        if self.fetches is None and self.feed is None:
            return None
        return SessionRunArgs(self.fetches, self.feed)

    def after_run(self, run_context, run_values):
        self.log.append((self.name, "after_run"))
        self.results.append(run_values.results)

    def end(self, session):
        self.log.append((self.name, "end"))


def test_hook_call_order_and_results_mirror_fetches():
    g, step, x, v, train = _graph()
    log = []
    a = Recorder("a", log, fetches={"s": step, "pair": [v, step]})
    b = Recorder("b", log)
    with g.as_default():
        with MonitoredSession(hooks=[a, b]) as sess:
            assert sess.run(train, {x: 1.0}) is None
    assert log == [("a", "begin", False), ("b", "begin", False),
                   ("a", "after_create_session", True), ("b", "after_create_session", True),
                   ("a", "before_run"), ("b", "before_run"), ("a", "after_run"),
                   ("b", "after_run"), ("a", "end"), ("b", "end")]
    res = a.results[0]
    assert set(res) == {"s", "pair"} and int(res["s"]) == 0 and isinstance(res["pair"], list)
    assert b.results == [None]
    assert g.finalized, "the graph stays finalized after the session closes, as TF1's"


def test_feed_conflicts_and_user_feed_not_mutated():
    g, step, x, v, train = _graph()
    with g.as_default():
        with MonitoredSession(hooks=[Recorder("a", [], feed={x: 2.0})]) as sess:
            user_feed = {x: 1.0}
            with pytest.raises(RuntimeError, match="by a SessionRunHook and user"):
                sess.run(train, user_feed)
            assert user_feed == {x: 1.0}
    with g.as_default():
        hooks = [Recorder("a", [], feed={x: 2.0}), Recorder("b", [], feed={x: 3.0})]
        with MonitoredSession(hooks=hooks) as sess:
            with pytest.raises(RuntimeError, match="Same tensor is fed by two hooks"):
                sess.run(train)
    with g.as_default():
        final = FinalOpsHook(v)
        with MonitoredSession(hooks=[Recorder("a", [], feed={x: 2.0}), final]) as sess:
            sess.run(train)
    assert float(final.final_ops_values) == 2.0


def test_stop_request_and_run_after_stop():
    g, step, x, v, train = _graph()
    with g.as_default():
        with MonitoredSession(hooks=[StopAtStepHook(last_step=3)]) as sess:
            n = 0
            while not sess.should_stop():
                sess.run(train, {x: 1.0})
                n += 1
            assert n == 3
            with pytest.raises(RuntimeError, match="Run called even after should_stop requested."):
                sess.run(train, {x: 1.0})


def test_stop_at_step_num_steps_counts_from_creation(tmp_path):
    g, step, x, v, train = _graph()
    with pytest.raises(ValueError, match="One of num_steps or last_step"):
        StopAtStepHook(num_steps=1, last_step=2)
    with g.as_default():
        saver = cs.train.Saver()
        with MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_checkpoint_steps=100,
                                      hooks=[StopAtStepHook(last_step=4)]) as sess:
            while not sess.should_stop():
                sess.run(train, {x: 1.0})
    del saver
    with g.as_default():
        with MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_checkpoint_steps=100,
                                      hooks=[StopAtStepHook(num_steps=2)]) as sess:
            steps = 0
            while not sess.should_stop():
                sess.run(train, {x: 1.0})
                steps += 1
    assert steps == 2
    assert cs.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-6")


def test_exception_skips_end_and_out_of_range_is_clean():
    g, step, x, v, train = _graph()
    log = []
    with g.as_default():
        with pytest.raises(ValueError, match="boom"):
            with MonitoredSession(hooks=[Recorder("a", log)]):
                raise ValueError("boom")
    assert ("a", "end") not in log
    log.clear()
    with g.as_default():
        with MonitoredSession(hooks=[Recorder("a", log)]) as sess:
            raise errors.OutOfRangeError(None, None, "end of input")
    assert ("a", "end") in log and sess.should_stop()


class _Listener(CheckpointSaverListener):
    def __init__(self, stop_at=None):
        self.events, self.stop_at = [], stop_at

    def begin(self):
        self.events.append("begin")

    def before_save(self, session, step):
        self.events.append(("before", step))

    def after_save(self, session, step):
        self.events.append(("after", step))
        return self.stop_at is not None and step >= self.stop_at

    def end(self, session, step):
        self.events.append(("end", step))


def test_checkpoint_saver_hook_saves_at_creation_on_timer_and_at_end(tmp_path):
    g, step, x, v, train = _graph()
    lst = _Listener()
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=0)
        hook = CheckpointSaverHook(str(tmp_path), save_steps=3, saver=saver, listeners=[lst])
        with MonitoredSession(hooks=[hook, StopAtStepHook(last_step=7)]) as sess:
            while not sess.should_stop():
                sess.run(train, {x: 1.0})
    saved = sorted(int(p.stem.rsplit("-", 1)[1]) for p in tmp_path.glob("*.h5"))
    assert saved == [0, 3, 6, 7]
    assert lst.events[0] == "begin" and lst.events[-1] == ("end", 7)
    assert ("after", 3) in lst.events


def test_listener_after_save_true_stops_training(tmp_path):
    g, step, x, v, train = _graph()
    with g.as_default():
        saver = cs.train.Saver()
        hook = CheckpointSaverHook(str(tmp_path), save_steps=2, saver=saver,
                                   listeners=[_Listener(stop_at=4)])
        with MonitoredSession(hooks=[hook]) as sess:
            n = 0
            while not sess.should_stop() and n < 100:
                sess.run(train, {x: 1.0})
                n += 1
    assert n == 4


def test_checkpoint_saver_hook_needs_global_step_and_one_of_saver_scaffold(tmp_path):
    g = cs.Graph()
    with g.as_default():
        cs.get_variable("v", [1])
        hook = CheckpointSaverHook(str(tmp_path), save_steps=1)
        with pytest.raises(RuntimeError, match="Global step should be created"):
            hook.begin()
    with pytest.raises(ValueError, match="both saver and scaffold"):
        CheckpointSaverHook(str(tmp_path), save_steps=1, saver=object(),
                            scaffold=cs.train.Scaffold())


def test_second_or_step_timer():
    with pytest.raises(ValueError):
        SecondOrStepTimer(every_secs=1, every_steps=1)
    t = SecondOrStepTimer(every_steps=3)
    assert t.should_trigger_for_step(0)
    assert t.update_last_triggered_step(0) == (None, None)
    assert not t.should_trigger_for_step(0)
    assert not t.should_trigger_for_step(2)
    assert t.should_trigger_for_step(3)
    elapsed, steps = t.update_last_triggered_step(3)
    assert steps == 3 and elapsed >= 0


def test_logging_tensor_hook(caplog):
    g, step, x, v, train = _graph()
    with pytest.raises(ValueError, match="invalid every_n_iter"):
        LoggingTensorHook({"v": v}, every_n_iter=0)
    caplog.set_level(logging.INFO, logger="ckptsync.train")
    with g.as_default():
        hook = LoggingTensorHook({"v": v, "step": step}, every_n_iter=2, at_end=True)
        with MonitoredSession(hooks=[hook]) as sess:
            for _ in range(5):
                sess.run(train, {x: 1.0})
    lines = [r.getMessage() for r in caplog.records if "step = " in r.getMessage()]
    assert lines[0].startswith("step = 0, v = 0.0")
    assert len(lines) == 4  # iterations 0, 2, 4, and at_end
    assert "sec)" in lines[1]


def test_nan_tensor_hook():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [])
        loss = cs.log(x)
        with MonitoredSession(hooks=[NanTensorHook(loss)]) as sess:
            sess.run(loss, {x: 1.0})
            with pytest.raises(NanLossDuringTrainingError, match="NaN loss during training."):
                sess.run(loss, {x: -1.0})
    with g.as_default():
        with MonitoredSession(hooks=[NanTensorHook(loss, fail_on_nan_loss=False)]) as sess:
            sess.run(loss, {x: -1.0})
            assert sess.should_stop()


def test_step_counter_and_final_ops_hooks():
    g, step, x, v, train = _graph()
    with g.as_default():
        counter = StepCounterHook(every_n_steps=2)
        final = FinalOpsHook({"v": v})
        with MonitoredSession(hooks=[counter, final]) as sess:
            for _ in range(6):
                sess.run(train, {x: 1.0})
    assert counter.steps_per_sec is not None and counter.steps_per_sec > 0
    assert float(final.final_ops_values["v"]) == 6.0


def test_step_counter_hook_warns_when_global_step_does_not_increase(caplog, monkeypatch):
    # As TF1's StepCounterHook: a run that leaves the step where it was is warned of, the
    # first 5 times in the process; a step that moves is not.
    from ckptsync.train import basic_hooks
    monkeypatch.setattr(basic_hooks, "_not_increased_warnings", 0)
    g, step, x, v, train = _graph()
    with g.as_default():
        with caplog.at_level(logging.WARNING, logger="ckptsync"):
            with MonitoredSession(hooks=[StepCounterHook(every_n_steps=100)]) as sess:
                for _ in range(3):
                    sess.run(train, {x: 1.0})
        assert "has not been increased" not in caplog.text
        with caplog.at_level(logging.WARNING, logger="ckptsync"):
            with MonitoredSession(hooks=[StepCounterHook(every_n_steps=100)]) as sess:
                for _ in range(8):
                    sess.run(v)
    warned = [r.getMessage() for r in caplog.records if "has not been increased" in r.getMessage()]
    assert len(warned) == 5
    assert warned[0] == (
        "It seems that global step (tf.train.get_global_step) has not been increased. "
        "Current value (could be stable): 0 vs previous value: 0. You could increase the "
        "global step by passing tf.train.get_global_step() to Optimizer.apply_gradients or "
        "Optimizer.minimize.")


def test_monitored_training_session_restores_before_after_create_session(tmp_path):
    g, step, x, v, train = _graph()
    with g.as_default():
        with MonitoredTrainingSession(checkpoint_dir=str(tmp_path),
                                      save_checkpoint_steps=2) as sess:
            for _ in range(4):
                sess.run(train, {x: 1.0})
    seen = []

    class See(SessionRunHook):
        def after_create_session(self, session, coord):
            seen.append((int(session.run(step)), float(session.run(v))))

    with g.as_default():
        with MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_checkpoint_steps=2,
                                      hooks=[See()]):
            pass
    assert seen == [(4, 4.0)]
    with g.as_default(), pytest.raises(ValueError):
        MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_checkpoint_steps=1,
                                 save_checkpoint_secs=1)


def test_recovery_from_aborted_recreates_session_from_latest_checkpoint(tmp_path):
    g, step, x, v, train = _graph()
    created = []

    class Flaky(SessionRunHook):
        def __init__(self):
            self.raised = False

        def after_create_session(self, session, coord):
            created.append(int(session.run(step)))

        def before_run(self, run_context):
            if not self.raised and int(run_context.session.run(step)) == 3:
                self.raised = True
                raise errors.AbortedError(None, None, "worker preempted")

    with g.as_default():
        with MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_checkpoint_steps=2,
                                      hooks=[Flaky()]) as sess:
            for _ in range(5):
                sess.run(train, {x: 1.0})
    # Created at 0; the run at step 3 aborts, the session is re-created from the step-2
    # checkpoint and the run retried: 5 runs end at step 4, not 5.
    assert created == [0, 2]
    assert cs.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-4")
    assert os.path.exists(str(tmp_path / "model.ckpt-2.h5"))


def test_init_that_leaves_variables_uninitialized_is_reported():
    g, step, x, v, train = _graph()
    with g.as_default():
        scaffold = cs.train.Scaffold(init_op=cs.no_op())
        with pytest.raises(RuntimeError, match="Init operations did not make model ready"):
            MonitoredSession(cs.train.ChiefSessionCreator(scaffold=scaffold))


class _OnDiskListener(CheckpointSaverListener):
    """Records, at each after_save, whether that checkpoint is on disk: its data file
    and the state file naming it (or a later one)."""

    def __init__(self, directory):
        self.directory, self.calls = str(directory), []

    def after_save(self, session, global_step_value):
        prefix = os.path.join(self.directory, f"model.ckpt-{global_step_value}")
        latest = cs.train.latest_checkpoint(self.directory)
        self.calls.append((global_step_value, os.path.exists(prefix + ".h5"),
                           latest is not None and int(latest.rsplit("-", 1)[1])
                           >= global_step_value))


def test_async_after_save_is_called_once_the_checkpoint_is_on_disk(tmp_path, monkeypatch):
    """The writer process is held at a gate (a FIFO) before writing checkpoint 2: the
    saves from 2 on are queued, not reported, until the gate opens."""
    import sys
    import textwrap
    import threading

    from ckptsync.workers import async_writer

    gate = tmp_path / "gate"
    os.mkfifo(gate)
    code = textwrap.dedent(f"""
        from ckptsync.workers import _writer_child as child
        real = child._run_job
        def run(job, arrays):
            if job["prefix"].endswith("model.ckpt-2"):
                with open({str(gate)!r}) as f:
                    f.read()
            return real(job, arrays)
        child._run_job = run
        child.worker_main()""")
    monkeypatch.setattr(async_writer, "WORKER_COMMAND", [sys.executable, "-c", code])
    g, step, x, v, train = _graph()
    lst = _OnDiskListener(tmp_path)
    opened = False
    with g.as_default():
        saver = cs.train.Saver(max_to_keep=0, async_save=True)
        hook = CheckpointSaverHook(str(tmp_path), save_steps=1, saver=saver, listeners=[lst])
        try:
            with MonitoredSession(hooks=[hook]) as sess:
                for _ in range(5):
                    sess.run(train, {x: 1.0})
                assert [c[0] for c in lst.calls] in ([], [0], [0, 1])
                assert hook.queued_paths[-4:] == [str(tmp_path / f"model.ckpt-{s}")
                                                  for s in (2, 3, 4, 5)]
                assert hook.last_saved_step in (None, 0, 1) and hook.saves <= 2
                opener = threading.Thread(target=lambda: open(gate, "w").close(), daemon=True)
                opener.start()
                opener.join(60)
                assert not opener.is_alive(), "the writer never reached the gate"
                opened = True
        finally:
            if not opened:
                os.close(os.open(gate, os.O_RDWR | os.O_NONBLOCK))
            saver.close()
    assert lst.calls == [(s, True, True) for s in range(6)]
    assert hook.saves == 6 and hook.last_saved_step == 5 and hook.queued_paths == []


def test_checkpoint_saver_hook_creates_its_directory_as_tf1(tmp_path):
    # TF1's hook opens a summary writer on checkpoint_dir in begin(), which creates it; a
    # user's MonitoredTrainingSession(hooks=[CheckpointSaverHook("ckpts", ...)]) relies on it.
    ckpt_dir = tmp_path / "not" / "yet"
    step = cs.train.get_or_create_global_step()
    inc = step.assign_add(1)
    hook = cs.train.CheckpointSaverHook(str(ckpt_dir), save_steps=1)
    with cs.train.MonitoredSession(hooks=[hook]) as sess:
        sess.run(inc)
    assert cs.train.latest_checkpoint(str(ckpt_dir)) == str(ckpt_dir / "model.ckpt-1")


def test_checkpoint_saver_hook_names_a_directory_it_cannot_create(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cs.train.get_or_create_global_step()
    hook = cs.train.CheckpointSaverHook(str(blocker / "ckpts"), save_steps=1)
    with pytest.raises(RuntimeError, match="CheckpointSaverHook cannot create its checkpoint_dir"):
        hook.begin()
