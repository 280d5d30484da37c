"""The plan's MatMul -> BiasAdd [-> Relu] fusion (Grappler's remapper): where it applies,
where it must not, and that results and gradients are bit-identical."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ckptsync as cs
from ckptsync.errors import InvalidArgumentError
from ckptsync.session.fetches import FetchMapper
from ckptsync.session.planner import compile_plan


def _net(relu: bool = True) -> tuple[cs.Graph, Any, dict[str, Any]]:
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 5], name="x")
        w = cs.get_variable("w", [5, 4])
        b = cs.get_variable("b", [4], initializer=cs.random_normal_initializer())
        mm = cs.matmul(x, w)
        ba = cs.nn.bias_add(mm, b)
        y = cs.nn.relu(ba) if relu else ba
        out = cs.reduce_sum(y * y, name="out")
    return g, x, {"mm": mm, "ba": ba, "y": y, "out": out, "w": w, "b": b}


def _types(sess: cs.Session, fetches: Any, x: Any) -> list[str]:
    plan = compile_plan(FetchMapper(sess.graph, fetches).elements, [x])
    return [op.type for op in plan.ops]


@pytest.mark.parametrize("relu", [True, False])
def test_chain_runs_as_one_step_with_bit_identical_results(relu: bool) -> None:
    g, x, t = _net(relu)
    xs = np.random.default_rng(1).normal(size=(7, 5)).astype(np.float32)
    with cs.Session(graph=g) as sess:
        sess.run(cs.global_variables_initializer())
        types = _types(sess, t["out"], x)
        assert "BiasAdd" not in types and "Relu" not in types and types.count("MatMul") == 1
        fused = sess.run(t["out"], {x: xs})
        # Fetching the MatMul output keeps it (and the chain) unfused.
        assert "BiasAdd" in _types(sess, [t["out"], t["mm"]], x)
        unfused, mm = sess.run([t["out"], t["mm"]], {x: xs})
        w, b = sess.run([t["w"], t["b"]])
    assert fused.tobytes() == unfused.tobytes()
    expect = xs @ w + b
    if relu:
        expect = np.maximum(expect, 0)
    assert np.array_equal(mm, xs @ w)
    np.testing.assert_allclose(fused, (expect * expect).sum(), rtol=1e-6)


def test_fetching_or_feeding_the_bias_add_output_stops_at_the_matmul_and_bias_add() -> None:
    g, x, t = _net()
    xs = np.ones((2, 5), np.float32)
    with cs.Session(graph=g) as sess:
        sess.run(cs.global_variables_initializer())
        # BiasAdd fetched: MatMul+BiasAdd fuse, the Relu runs on its own.
        assert _types(sess, [t["out"], t["ba"]], x).count("Relu") == 1
        out, ba = sess.run([t["out"], t["ba"]], {x: xs})
        assert np.array_equal(ba, xs @ sess.run(t["w"]) + sess.run(t["b"]))
        # BiasAdd fed: only the Relu and what follows run.
        fed = np.full((2, 4), -1.0, np.float32)
        assert sess.run(t["out"], {t["ba"]: fed}) == 0.0
        assert sess.run(t["y"], {x: xs}).min() >= 0.0


def test_a_second_reader_of_the_matmul_output_keeps_it_unfused() -> None:
    g, x, t = _net()
    with g.as_default():
        both = t["out"] + cs.reduce_sum(t["mm"])
    with cs.Session(graph=g) as sess:
        sess.run(cs.global_variables_initializer())
        assert "BiasAdd" in _types(sess, both, x)
        assert np.isfinite(sess.run(both, {x: np.ones((3, 5), np.float32)}))


def test_training_with_the_fused_forward_matches_numpy_gradients() -> None:
    g, x, t = _net()
    with g.as_default():
        gw, gb = cs.gradients(t["out"], [t["w"], t["b"]])
    xs = np.random.default_rng(2).normal(size=(6, 5)).astype(np.float32)
    with cs.Session(graph=g) as sess:
        sess.run(cs.global_variables_initializer())
        assert "Relu" not in _types(sess, [gw, gb], x)  # fused in the gradient plan too
        dw, db = sess.run([gw, gb], {x: xs})
        w, b = sess.run([t["w"], t["b"]])
    y = np.maximum(xs @ w + b, 0)
    g_ba = 2 * y * (y > 0)
    np.testing.assert_allclose(dw, xs.T @ g_ba, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, g_ba.sum(axis=0), rtol=1e-5, atol=1e-6)


def test_an_error_in_the_fused_step_names_the_matmul() -> None:
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, None], name="x")
        w = cs.placeholder(cs.float32, [None, None], name="w")
        b = cs.placeholder(cs.float32, [None], name="b")
        y = cs.nn.relu(cs.nn.bias_add(cs.matmul(x, w, name="mm"), b))
    with cs.Session(graph=g) as sess, pytest.raises(InvalidArgumentError, match="MatMul op 'mm'"):
        sess.run(y, {x: np.ones((2, 3), np.float32), w: np.ones((3, 4), np.float32),
                     b: np.ones(5, np.float32)})


def test_a_bias_computed_after_the_matmul_is_ready_when_the_fused_step_runs() -> None:
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 3], name="x")
        w = cs.get_variable("w", [3, 4])
        mm = cs.matmul(x, w)
        b = cs.get_variable("b", [4], initializer=cs.random_normal_initializer())
        y = cs.nn.relu(cs.nn.bias_add(mm, cs.identity(b) * 2.0))  # bias ops after mm
    xs = np.random.default_rng(3).normal(size=(2, 3)).astype(np.float32)
    with cs.Session(graph=g) as sess:
        sess.run(cs.global_variables_initializer())
        assert "BiasAdd" not in _types(sess, y, x)
        out = sess.run(y, {x: xs})
        wv, bv = sess.run([w, b])
    assert np.array_equal(out, np.maximum(xs @ wv + bv * 2.0, 0))


def test_a_fed_bias_of_another_rank_broadcasts_as_unfused() -> None:
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 3], name="x")
        w = cs.placeholder(cs.float32, [3, 4], name="w")
        b = cs.placeholder(cs.float32, name="b")  # unknown rank
        y = cs.nn.bias_add(cs.matmul(x, w), b)
    feeds = {x: np.ones((2, 3), np.float32), w: np.ones((3, 4), np.float32),
             b: np.arange(24, dtype=np.float32).reshape(3, 2, 4)}
    with cs.Session(graph=g) as sess:
        assert sess.run(y, feeds).shape == (3, 2, 4)
