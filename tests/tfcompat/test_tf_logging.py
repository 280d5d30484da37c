"""``tf.logging`` over Python's logging: TF's logger name and levels, TF's handler when
nothing is configured, verbosity that also shows ckptsync's own (hook) logs, and the
call-site counters of ``log_every_n`` / ``log_first_n``."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

import ckptsync as tf


@pytest.fixture(autouse=True)
def _restore_levels():
    levels = {n: logging.getLogger(n).level for n in ("tensorflow", "ckptsync")}
    yield
    for n, lv in levels.items():
        logging.getLogger(n).setLevel(lv)


def test_levels_are_pythons_and_messages_go_to_the_tensorflow_logger(caplog):
    assert (tf.logging.DEBUG, tf.logging.INFO, tf.logging.WARN, tf.logging.ERROR,
            tf.logging.FATAL) == (10, 20, 30, 40, 50)
    tf.logging.set_verbosity(tf.logging.INFO)
    assert tf.logging.get_verbosity() == logging.INFO
    with caplog.at_level(logging.DEBUG, logger="tensorflow"):
        tf.logging.set_verbosity(tf.logging.INFO)
        tf.logging.debug("hidden")
        tf.logging.info("step %d", 3)
        tf.logging.warn("w")
        tf.logging.warning("w2")
        tf.logging.error("e")
        tf.logging.fatal("f")
        tf.logging.vlog(tf.logging.ERROR, "v %s", "x")
        tf.logging.log(tf.logging.WARN, "l")
    got = [(r.name, r.levelname, r.getMessage(), r.funcName) for r in caplog.records]
    fn = "test_levels_are_pythons_and_messages_go_to_the_tensorflow_logger"
    assert got == [("tensorflow", "INFO", "step 3", fn), ("tensorflow", "WARNING", "w", fn),
                   ("tensorflow", "WARNING", "w2", fn), ("tensorflow", "ERROR", "e", fn),
                   ("tensorflow", "CRITICAL", "f", fn), ("tensorflow", "ERROR", "v x", fn),
                   ("tensorflow", "WARNING", "l", fn)]


def test_set_verbosity_applies_to_ckptsyncs_loggers_too(caplog):
    with caplog.at_level(logging.NOTSET):
        tf.logging.set_verbosity(tf.logging.ERROR)
        logging.getLogger("ckptsync.train").warning("hidden")
        tf.logging.set_verbosity(tf.logging.INFO)
        logging.getLogger("ckptsync.train").info("loss = 1.0")
    assert [r.getMessage() for r in caplog.records] == ["loss = 1.0"]


def test_log_every_n_and_first_n_count_per_call_site(caplog):
    with caplog.at_level(logging.INFO, logger="tensorflow"):
        tf.logging.set_verbosity(tf.logging.INFO)
        for i in range(7):
            tf.logging.log_every_n(tf.logging.INFO, "every %d", 3, i)
            tf.logging.log_first_n(tf.logging.INFO, "first %d", 2, i)
        tf.logging.log_first_n(tf.logging.INFO, "another site %d", 2, 9)
        tf.logging.log_if(tf.logging.INFO, "if %s", False, "no")
    assert [r.getMessage() for r in caplog.records] == [
        "every 0", "first 0", "first 1", "every 3", "every 6", "another site 9"]


@pytest.mark.timeout(60)
def test_an_unconfigured_program_gets_tfs_handler_on_stderr():
    program = textwrap.dedent('''
        import logging
        import ckptsync as tf
        tf.logging.info("not shown: the default level is WARN")
        tf.logging.warning("careful %d", 1)
        tf.logging.set_verbosity(tf.logging.INFO)
        tf.logging.info("now shown")
        logging.getLogger("ckptsync.train").info("loss = 0.5, step = 1")
    ''')
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == ["WARNING:tensorflow:careful 1", "INFO:tensorflow:now shown",
                                     "INFO:ckptsync.train:loss = 0.5, step = 1"]
    assert r.stdout == ""


@pytest.mark.timeout(60)
def test_a_configured_root_logger_is_left_alone():
    program = textwrap.dedent('''
        import logging, sys
        logging.basicConfig(stream=sys.stdout, format="%(name)s|%(message)s", level=logging.INFO)
        import ckptsync as tf
        tf.logging.info("once")
    ''')
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert (r.stdout, r.stderr) == ("tensorflow|once\n", "")


@pytest.mark.timeout(120)
def test_the_hooks_of_a_monitored_training_session_log_at_info_as_tf1(tmp_path):
    """TF1's CheckpointSaverHook ("Saving checkpoints for N into ..."), StepCounterHook
    ("global_step/sec: X") and LoggingTensorHook ("loss = ..., step = ...") log at INFO:
    ``set_verbosity(INFO)`` shows them."""
    program = textwrap.dedent(f'''
        import ckptsync as tf
        tf.logging.set_verbosity(tf.logging.INFO)
        x = tf.get_variable("x", initializer=3.0)
        loss = tf.square(x)
        gs = tf.train.get_or_create_global_step()
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        hook = tf.train.LoggingTensorHook({{"loss": loss, "step": gs}}, every_n_iter=2)
        with tf.train.MonitoredTrainingSession(checkpoint_dir={str(tmp_path)!r},
                                               save_checkpoint_steps=2, hooks=[hook],
                                               log_step_count_steps=2) as sess:
            for _ in range(4):
                sess.run(train)
    ''')
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                       timeout=90, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert f"INFO:ckptsync.train:Saving checkpoints for 0 into {tmp_path}/model.ckpt." in lines
    assert f"INFO:ckptsync.train:Saving checkpoints for 4 into {tmp_path}/model.ckpt." in lines
    assert any(line.startswith("INFO:ckptsync.train:global_step/sec: ") for line in lines), lines
    assert any(line.startswith("INFO:ckptsync.train:loss = 9.0, step = 0") for line in lines), lines
