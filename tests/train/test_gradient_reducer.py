"""The gradient-reducer seam of ``train.optimizer``: ``reducing_gradients(graph, reducer)``
routes every ``compute_gradients`` (and ``minimize``) on that graph through the reducer,
and nothing else."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ckptsync as cs
from ckptsync.train.optimizer import Optimizer, gradient_reducer, reducing_gradients


def _loss(g: cs.Graph):
    with g.as_default():
        w = cs.get_variable("w", initializer=np.ones(3, np.float32))
        return cs.reduce_sum(cs.square(w)), w


class _Recorder:
    """A reducer that doubles every gradient and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, compute, args, kwargs):
        self.calls += 1
        gv = compute(*args, **kwargs)
        return [(None if gr is None else gr * 2.0, v) for gr, v in gv]


def _grad_value(g: cs.Graph, gv) -> np.ndarray:
    with g.as_default():
        init = cs.global_variables_initializer()
    with cs.Session(graph=g) as sess:
        sess.run(init)
        return sess.run(gv[0][0])


def test_compute_gradients_and_minimize_on_the_graph_go_through_the_reducer_once():
    g = cs.Graph()
    loss, _ = _loss(g)
    reducer = _Recorder()
    with reducing_gradients(g, reducer), g.as_default():
        gv = cs.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
        cs.train.AdamOptimizer(0.1).minimize(loss)
    assert reducer.calls == 2
    np.testing.assert_array_equal(_grad_value(g, gv), [4.0, 4.0, 4.0])  # 2 * d(w^2)/dw
    with g.as_default():
        plain = cs.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
    assert reducer.calls == 2, "no reducer after the block"
    np.testing.assert_array_equal(_grad_value(g, plain), [2.0, 2.0, 2.0])


def test_other_graphs_are_not_reduced_and_the_innermost_block_wins():
    g, other = cs.Graph(), cs.Graph()
    loss, _ = _loss(g)
    other_loss, _ = _loss(other)
    outer, inner = _Recorder(), _Recorder()
    with reducing_gradients(g, outer):
        with other.as_default():
            cs.train.GradientDescentOptimizer(0.1).compute_gradients(other_loss)
        assert outer.calls == 0 and gradient_reducer(other) is None
        with reducing_gradients(g, inner):
            assert gradient_reducer(g) is inner
            with g.as_default():
                cs.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
        assert (outer.calls, inner.calls) == (0, 1)
        assert gradient_reducer(g) is outer
    assert gradient_reducer(g) is None


def test_an_override_that_calls_the_base_is_reduced_one_that_bypasses_it_is_not():
    class Calls(cs.train.GradientDescentOptimizer):
        def compute_gradients(self, loss, *args, **kwargs):
            return super().compute_gradients(loss, *args, **kwargs)

    class Bypasses(cs.train.GradientDescentOptimizer):
        def compute_gradients(self, loss, var_list=None, **kwargs):
            return list(zip(cs.gradients(loss, var_list), var_list))

    g = cs.Graph()
    loss, w = _loss(g)
    reducer = _Recorder()
    with reducing_gradients(g, reducer), g.as_default():
        Calls(0.1).compute_gradients(loss)
        Bypasses(0.1).compute_gradients(loss, var_list=[w])
    assert reducer.calls == 1


def test_a_reducer_may_change_the_arguments_it_computes_with():
    def scale_seed(compute, args, kwargs):
        return compute(*args[:5], cs.constant(np.float32(0.5)), **kwargs)

    g = cs.Graph()
    loss, _ = _loss(g)
    with reducing_gradients(g, scale_seed), g.as_default():
        gv = cs.train.GradientDescentOptimizer(0.1).compute_gradients(loss)
    np.testing.assert_array_equal(_grad_value(g, gv), [1.0, 1.0, 1.0])


def test_blocks_for_different_graphs_in_different_threads_do_not_mix():
    graphs = [cs.Graph() for _ in range(4)]
    reducers = [_Recorder() for _ in graphs]
    losses = [_loss(g)[0] for g in graphs]
    barrier = threading.Barrier(len(graphs))
    errors: list[BaseException] = []

    def build(i: int) -> None:
        try:
            with reducing_gradients(graphs[i], reducers[i]):
                barrier.wait(timeout=10)  # every block is open at once
                with graphs[i].as_default():
                    cs.train.GradientDescentOptimizer(0.1).compute_gradients(losses[i])
                barrier.wait(timeout=10)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build, args=(i,)) for i in range(len(graphs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert [r.calls for r in reducers] == [1] * len(graphs)
    assert all(gradient_reducer(g) is None for g in graphs)


def test_the_base_method_still_raises_as_before_inside_a_block():
    g = cs.Graph()
    with reducing_gradients(g, _Recorder()), g.as_default():
        loss = cs.constant(np.float32(1.0))
        with pytest.raises(ValueError, match="No variables to optimize"):
            Optimizer.compute_gradients(cs.train.GradientDescentOptimizer(0.1), loss)
