"""ckptsync's Estimator against TF 2.15's, on one program (tests/goldens/
estimator_program.py) recorded under TF by estimator_generate.py."""

from __future__ import annotations

import json
import math
import pathlib
import sys

import pytest

import ckptsync as tf

GOLDENS = pathlib.Path(__file__).resolve().parents[1] / "goldens"
sys.path.insert(0, str(GOLDENS))
import estimator_program  # noqa: E402

TF = json.loads((GOLDENS / "estimator.json").read_text())


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    try:
        return estimator_program.run(tf, str(tmp_path_factory.mktemp("estimator")))
    finally:
        tf.summary.FileWriterCache.clear()


def close(a, b, rel=2e-5, abs_=1e-6):
    if isinstance(a, dict):
        return isinstance(b, dict) and sorted(a) == sorted(b) and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)
    return a == b


def ckpt_files(files):
    """TF's model_dir listing without what ckptsync does not write (graph.pbtxt)."""
    return [f for f in files if f != "graph.pbtxt"]


@pytest.mark.parametrize("phase", ["after_max_steps_7", "after_steps_4", "after_max_steps_5",
                                   "after_finite_and_tuple"])
def test_model_dir_after_each_train_call_is_tfs(ours, phase):
    want = dict(TF[phase], files=ckpt_files(TF[phase]["files"]))
    assert close(want, ours[phase]), (want, ours[phase])


def test_values_and_variable_names_are_tfs(ours):
    assert ours["variable_names"] == TF["variable_names"]
    assert close(TF["values_7"], ours["values_7"])
    assert ours["model_dir"] and ours["latest_before"] is None


@pytest.mark.parametrize("key", ["eval_untrained", "eval", "eval_two_steps", "eval_at_oldest"])
def test_evaluate_returns_tfs_dict(ours, key):
    assert close(TF[key], ours[key]), (TF[key], ours[key])


def test_files_after_evaluate(ours):
    assert ours["files_after_eval"] == ckpt_files(TF["files_after_eval"])


@pytest.mark.parametrize("key", ["predict", "predict_batches", "predict_keys"])
def test_predict_yields_tfs_outputs(ours, key):
    assert close(TF[key], ours[key])


def test_training_event_file_has_tfs_tags_and_steps(ours):
    want, got = TF["events_model_dir"]["scalars"], ours["events_model_dir"]["scalars"]
    assert sorted(want) == ["global_step/sec", "loss", "y_mean"]
    assert close(want, got), (want, got)


@pytest.mark.parametrize("key", ["events_eval", "events_eval_two"])
def test_eval_event_files_are_tfs(ours, key):
    assert close(TF[key], ours[key]), (TF[key], ours[key])


def test_train_and_evaluate_locally_is_tfs(ours):
    want = dict(TF["train_and_evaluate"])
    want["files"] = ckpt_files(want["files"])
    assert close(want, ours["train_and_evaluate"]), (want, ours["train_and_evaluate"])


def test_run_config_defaults_replace_and_errors_are_tfs(ours):
    assert close(TF["run_config"], ours["run_config"])


@pytest.mark.parametrize("name", sorted(TF["errors"]))
def test_errors_are_tfs(ours, name):
    want_type, want_message = TF["errors"][name]
    got_type, got_message = ours["errors"][name]
    assert got_type == want_type, (name, ours["errors"][name])
    assert want_message in got_message, (name, want_message, got_message)


def test_numpy_input_fn_batches_and_errors_are_tfs(ours):
    assert close(TF["numpy_input_fn"], ours["numpy_input_fn"]), (TF["numpy_input_fn"],
                                                                 ours["numpy_input_fn"])
