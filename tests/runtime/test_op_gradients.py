"""Every op with a gradient, checked against central differences in float64."""

from __future__ import annotations

import importlib
import pathlib

import numpy as np
import pytest

import ckptsync as cs
from ckptsync.ops.registry import get_op_def, registered_types
from tests.gradcheck import check_case
from tests.runtime.test_nn_ops import _NOT_CENTRAL as NN_NOT_CENTRAL
from tests.runtime.test_nn_ops import GRAD_CASES as NN_GRAD_CASES

RNG = np.random.default_rng(42)


def _pos(shape):
    return RNG.uniform(0.5, 2.0, shape)


def _any(shape):
    return RNG.normal(size=shape)


def _apart(shape):
    # values at least 0.1 apart so max/min/relu/abs kinks are far from +-eps
    v = RNG.permutation(np.arange(np.prod(shape), dtype=np.float64)) * 0.37 - 1.3
    return v.reshape(shape) + 0.05


# name -> (builder(*placeholders) -> tensor, input generators)
CASES = {
    "add_broadcast": (lambda a, b: cs.add(a, b), [(_any, (3, 4)), (_any, (4,))]),
    "subtract_broadcast": (lambda a, b: cs.subtract(a, b), [(_any, (3, 1)), (_any, (1, 4))]),
    "multiply_broadcast": (lambda a, b: cs.multiply(a, b), [(_any, (2, 3)), (_any, (3,))]),
    "divide": (lambda a, b: cs.divide(a, b), [(_any, (2, 3)), (_pos, (2, 3))]),
    "maximum": (lambda a, b: cs.maximum(a, b), [(_apart, (2, 3)), (_any, (3,))]),
    "minimum": (lambda a, b: cs.minimum(a, b), [(_apart, (2, 3)), (_any, (1, 3))]),
    "pow": (lambda a, b: cs.pow(a, b), [(_pos, (2, 3)), (_pos, (2, 3))]),
    "negative": (lambda a: cs.negative(a), [(_any, (2, 3))]),
    "square": (lambda a: cs.square(a), [(_any, (2, 3))]),
    "sqrt": (lambda a: cs.sqrt(a), [(_pos, (2, 3))]),
    "exp": (lambda a: cs.exp(a), [(_any, (2, 3))]),
    "log": (lambda a: cs.log(a), [(_pos, (2, 3))]),
    "abs": (lambda a: cs.abs(a), [(_apart, (2, 3))]),
    "matmul": (lambda a, b: cs.matmul(a, b), [(_any, (2, 3)), (_any, (3, 4))]),
    "matmul_ta": (lambda a, b: cs.matmul(a, b, transpose_a=True), [(_any, (3, 2)), (_any, (3, 4))]),
    "matmul_tb": (lambda a, b: cs.matmul(a, b, transpose_b=True), [(_any, (2, 3)), (_any, (4, 3))]),
    "matmul_tab": (lambda a, b: cs.matmul(a, b, transpose_a=True, transpose_b=True),
                   [(_any, (3, 2)), (_any, (4, 3))]),
    "reduce_sum_all": (lambda a: cs.reduce_sum(a), [(_any, (2, 3))]),
    "reduce_sum_axis": (lambda a: cs.reduce_sum(a, axis=1, keepdims=True), [(_any, (2, 3, 2))]),
    "reduce_mean_axis": (lambda a: cs.reduce_mean(a, axis=[0, 2]), [(_any, (2, 3, 2))]),
    "reduce_max": (lambda a: cs.reduce_max(a, axis=-1), [(_apart, (3, 4))]),
    "cast": (lambda a: cs.cast(a, cs.float32), [(_any, (2, 3))]),
    "reshape": (lambda a: cs.reshape(a, [3, -1]), [(_any, (2, 3))]),
    "transpose": (lambda a: cs.transpose(a, [1, 0, 2]), [(_any, (2, 3, 2))]),
    "concat": (lambda a, b: cs.concat([a, b], axis=1), [(_any, (2, 3)), (_any, (2, 1))]),
    "fill": (lambda a: cs.fill([2, 3], a), [(_any, ())]),
    "identity": (lambda a: cs.identity(a), [(_any, (2, 3))]),
    "add_n": (lambda a, b: cs.add_n([a, b, a]), [(_any, (2, 3)), (_any, (2, 3))]),
    "expand_squeeze": (lambda a: cs.squeeze(cs.expand_dims(a, 1), [1]), [(_any, (2, 3))]),
    "relu": (lambda a: cs.nn.relu(a), [(_apart, (2, 3))]),
    "sigmoid": (lambda a: cs.nn.sigmoid(a), [(_any, (2, 3))]),
    "tanh": (lambda a: cs.nn.tanh(a), [(_any, (2, 3))]),
    "softmax": (lambda a: cs.nn.softmax(a), [(_any, (2, 4))]),
    "log_softmax": (lambda a: cs.nn.log_softmax(a), [(_any, (2, 4))]),
    "bias_add": (lambda a, b: cs.nn.bias_add(a, b), [(_any, (2, 3, 4)), (_any, (4,))]),
    "sparse_xent": (lambda a: cs.nn.sparse_softmax_cross_entropy_with_logits(
        labels=cs.constant(np.array([1, 0, 3], np.int32)), logits=a), [(_any, (3, 4))]),
    "softmax_xent": (lambda a, b: cs.nn.softmax_cross_entropy_with_logits_v2(
        labels=cs.nn.softmax(b), logits=a), [(_any, (3, 4)), (_any, (3, 4))]),
}
# conv (more configurations and second order: test_conv_ops.py)
CASES.update({
    "conv2d": (lambda a, b: cs.nn.conv2d(a, b, 2, "SAME"),
               [(_any, (2, 5, 5, 2)), (_any, (3, 3, 2, 2))]),
    "conv2d_transpose": (lambda a, b: cs.nn.conv2d_transpose(a, b, [2, 5, 5, 3], 2, "SAME"),
                         [(_any, (2, 3, 3, 2)), (_any, (3, 3, 3, 2))]),
    "max_pool": (lambda a: cs.nn.max_pool(a, 3, 2, "SAME"), [(_apart, (2, 5, 5, 2))]),
    "avg_pool": (lambda a: cs.nn.avg_pool(a, 3, 2, "SAME"), [(_any, (2, 5, 5, 2))]),
})
# nn (the table, dropout and property tests: test_nn_ops.py)
CASES.update({f"nn_{k}": v for k, v in NN_GRAD_CASES.items() if k not in NN_NOT_CENTRAL})


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_central_differences(name):
    build, gens = CASES[name]
    # float32 round trips (cast) need a larger step for central differences.
    eps = 1e-2 if name == "cast" else 1e-6
    tol = 1e-3 if name == "cast" else 1e-5
    check_case(build, gens, RNG, rtol=tol, atol=tol, eps=eps, cast=True, name=name)


def _all_cases():
    """This table plus each ``tests/runtime/test_*_ops.py``'s ``GRAD_CASES`` and
    ``NO_GRAD_CASES`` (same format) and its ``INTERNAL_GRAD_OPS`` (gradient-only op types
    it checks through their ops)."""
    cases, internal = dict(CASES), set()
    for path in sorted(pathlib.Path(__file__).parent.glob("test_*_ops.py")):
        mod = importlib.import_module(f"{__package__}.{path.stem}")
        cases.update(getattr(mod, "GRAD_CASES", {}))
        cases.update(getattr(mod, "NO_GRAD_CASES", {}))  # gradient defined as None
        internal |= set(getattr(mod, "INTERNAL_GRAD_OPS", ()))
    return cases, internal


def test_every_differentiable_op_type_is_checked():
    """Guards the tables: a newly registered differentiable op must get a case."""
    exercised = set()
    cases, more_internal = _all_cases()
    for name in cases:
        build, gens = cases[name]
        g = cs.Graph()
        with g.as_default():
            phs = [cs.placeholder(cs.float64, gen(shape).shape) for gen, shape in gens]
            build(*phs)
        exercised |= {op.type for op in g.get_operations()}
    internal = {"ReshapeLike", "ConcatGrad", "SumToShape", "MinMaxGrad", "ReduceGrad", "MaxGrad",
                "ReluGrad", "BiasAddGrad", "XentGrad", "Assign", "AssignAdd", "AssignSub",
                "ApplyGradientDescent", "ApplyMomentum", "ApplyAdam"}
    internal |= {"Conv2DBackpropFilter", "MaxPoolGrad", "AvgPoolGrad"}  # test_conv_ops.py
    # The core ops (ckptsync.ops); optimizer and MPI kernels are tested with their modules.
    defs = [get_op_def(t) for t in registered_types()]
    differentiable = {d.type for d in defs if d.gradient is not None
                      and getattr(d.kernel, "__module__", "").startswith("ckptsync.ops")}
    assert differentiable - internal - more_internal - exercised == set()


def test_integer_ops_have_no_gradient_and_stop_gradient_blocks():
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [3])
        y = cs.reduce_sum(cs.stop_gradient(x) * x + cs.cast(cs.argmax(x), cs.float32))
        (gx,) = cs.gradients(y, [x])
    out = cs.Session(graph=g).run(gx, {x: [1.0, 2.0, 3.0]})
    np.testing.assert_allclose(out, [1.0, 2.0, 3.0])
