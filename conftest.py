"""Doctests of ``src/ckptsync`` run in the suite (``--doctest-modules``).

Each runs in a fresh temporary directory laid out as a user's would be after some
training: ``model.py`` (the digits MLP of ``examples/digits_mlp.py``: input ``x``
float32 ``[batch, 64]``, outputs ``classes`` and ``probabilities``) and ``ckpts/``
holding one checkpoint, ``ckpts/model.ckpt-1200``, named by its state file. The
namespace has ``np`` and ``x`` (a float32 ``[2, 64]`` batch) ready.
"""

from __future__ import annotations

import pathlib
import shutil

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parent
MODEL = REPO / "examples" / "digits_mlp.py"


@pytest.fixture(scope="session")
def _trained_directory(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    import ckptsync as cs

    root = tmp_path_factory.mktemp("doctest-layout")
    shutil.copy(MODEL, root / "model.py")
    (root / "ckpts").mkdir()
    graph = cs.Graph()
    spec = cs.model_spec.load_build_net(str(root / "model.py"))(graph, "/cpu:0",
                                                                cs.ModeKeys.TRAIN)
    with graph.as_default():
        step = cs.train.get_global_step()
        set_step = step.assign(1200)
        saver = cs.train.Saver()
        init = cs.global_variables_initializer()
    assert spec.train_op is not None
    with cs.Session(graph=graph) as sess:
        sess.run(init)
        sess.run(set_step)
        saver.save(sess, str(root / "ckpts" / "model.ckpt"), global_step=step)
    return root


@pytest.fixture(autouse=True)
def _doctest_in_a_trained_directory(request: pytest.FixtureRequest,
                                    tmp_path: pathlib.Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if not isinstance(request.node, pytest.DoctestItem):
        return
    import ckptsync as cs

    cs.reset_default_graph()  # each example starts on an empty default graph, as a script
    layout = request.getfixturevalue("_trained_directory")
    shutil.copytree(layout, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    namespace = request.getfixturevalue("doctest_namespace")
    namespace["np"] = np
    namespace["x"] = np.random.default_rng(0).random((2, 64), dtype=np.float32)
