"""HotReloadingModel: the in-process API (an RL actor following a learner's checkpoints)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ckptsync.errors import DeadlineExceededError, InvalidArgumentError, UnavailableError
from ckptsync.model_spec import load_build_net
from ckptsync.serving import HotReloadingModel

from .conftest import MLPServable, mlp_params, publish


def reference(step, x):
    return MLPServable(two_outputs=True).run(mlp_params(step), {"x": x})


def test_model_file_follows_checkpoints(tmp_path, model_file):
    ckpts = tmp_path / "ckpts"
    x = np.ones((2, 4), np.float32)
    with HotReloadingModel(str(model_file), ckpts, device="cpu:0", rescan_interval_s=0.05) as model:
        assert model.version is None
        with pytest.raises(UnavailableError):
            model.predict({"x": x})
        publish(ckpts, 10)
        assert model.wait_for_version(10, timeout_s=10) == 10
        outputs, version = model.predict({"x": x})
        assert version == 10
        np.testing.assert_allclose(outputs["logits"], reference(10, x)["logits"], rtol=1e-5)
        publish(ckpts, 20)
        assert model.wait_for_version(15, timeout_s=10) == 20
        assert model.predict({"x": x.tolist()})[1] == 20
        assert model.status()[0]["version"] == "20"
        with pytest.raises(InvalidArgumentError, match="input 'x' must have shape"):
            model.predict({"x": np.ones((2, 5))})
        with pytest.raises(DeadlineExceededError):
            model.wait_for_version(30, timeout_s=0.05)


def test_build_net_callable_and_servable(tmp_path, model_file):
    publish(tmp_path, 3)
    x = np.zeros((1, 4), np.float32)
    with HotReloadingModel(load_build_net(model_file), tmp_path) as model:
        model.wait_for_version(3, timeout_s=10)
        np.testing.assert_allclose(
            model.predict({"x": x})[0]["logits"], reference(3, x)["logits"], rtol=1e-5
        )
    with HotReloadingModel(MLPServable(), tmp_path, policy=3) as model:
        assert model.wait_for_version(3, timeout_s=10) == 3
    with pytest.raises(TypeError, match="model must be"):
        HotReloadingModel(42, tmp_path)  # type: ignore[arg-type]


def test_predictions_never_mix_versions_under_reload(tmp_path, model_file):
    """Many threads predict while checkpoints land; each answer matches its version exactly."""
    publish(tmp_path, 1)
    x = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
    want = {s: reference(s, x)["logits"] for s in range(1, 21)}
    bad, seen, stop = [], set(), threading.Event()
    with HotReloadingModel(str(model_file), tmp_path, rescan_interval_s=0.05) as model:
        model.wait_for_version(1, timeout_s=10)

        def actor():
            while not stop.is_set():
                outputs, version = model.predict({"x": x})
                seen.add(version)
                if not np.allclose(outputs["logits"], want[version], rtol=1e-5):
                    bad.append(version)

        threads = [threading.Thread(target=actor) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            for step in range(2, 21):
                publish(tmp_path, step)
                model.wait_for_version(step, timeout_s=10)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
    assert not bad
    assert len(seen) > 5


def test_gate_pin_unpin_in_process(tmp_path):
    for step in (1, 2):
        publish(tmp_path, step)
    gate = lambda candidate: candidate.version != 3  # noqa: E731
    with HotReloadingModel(MLPServable(), tmp_path, rescan_interval_s=0.05, gate=gate,
                           max_load_attempts=1) as model:
        assert model.wait_for_version(2, timeout_s=10) == 2
        assert model.pin(1) == 1 and model.version == 1
        model.unpin()
        publish(tmp_path, 3)
        publish(tmp_path, 4)
        assert model.wait_for_version(4, timeout_s=10) == 4
