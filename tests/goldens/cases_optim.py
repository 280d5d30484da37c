"""Golden cases, area ``optim``: several training steps of every ``tf.train`` optimizer
(variables and slots fetched afterwards, slot names compared), learning rates fed per step
or decayed with the global step, the decay schedules at several steps, and
``ExponentialMovingAverage``. See :mod:`cases` for the case format."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .cases import case, rand

STEPS = 5


def _model(tf: Any) -> tuple[Any, Any, Any, dict]:
    """A linear least-squares model: ``x [4, 3] @ w [3, 2] + b [2]`` against ``y [4, 2]``,
    plus a scalar variable ``s`` (rank-0 slots). Returns ``(loss, w, b_and_s, feeds)``."""
    x = tf.placeholder(tf.float32, [4, 3], name="x")
    y = tf.placeholder(tf.float32, [4, 2], name="y")
    w = tf.get_variable("w", initializer=rand(40, 3, 2, low=-1.0, high=1.0))
    b = tf.get_variable("b", initializer=rand(41, 2, low=-0.5, high=0.5))
    s = tf.get_variable("s", initializer=np.float32(0.7))
    pred = tf.matmul(x, w) + b
    loss = tf.reduce_mean(tf.square(pred - y)) + tf.square(s - 0.2)
    feeds = {x: rand(42, 4, 3), y: rand(43, 4, 2)}
    return loss, w, (b, s), feeds


def _train(tf: Any, make: Callable[[Any], Any], steps: int = STEPS,
           extra_feeds: Callable[[Any], dict] | None = None) -> dict:
    loss, w, (b, s), feeds = _model(tf)
    opt = make(tf)
    train = opt.minimize(loss)
    fetch = {"w": w, "b": b, "s": s, "loss": loss}
    names = []
    for var in (w, b, s):
        for slot in opt.get_slot_names():
            v = opt.get_slot(var, slot)
            if v is not None:
                fetch[f"{var.op.name}/{slot}"] = v
                names.append(f"{slot}:{v.op.name}")
    if extra_feeds is not None:
        feeds.update(extra_feeds(tf))
    return {"feeds": feeds, "fetch": fetch, "init": True, "before": [(train, steps)],
            "names": names}


@case
def optim_rmsprop(tf):
    return _train(tf, lambda tf: tf.train.RMSPropOptimizer(0.01))


@case
def optim_rmsprop_momentum_centered(tf):
    return _train(tf, lambda tf: tf.train.RMSPropOptimizer(
        0.01, decay=0.8, momentum=0.9, epsilon=1e-6, centered=True))


@case
def optim_rmsprop_momentum(tf):
    return _train(tf, lambda tf: tf.train.RMSPropOptimizer(0.02, momentum=0.5))


@case
def optim_adagrad(tf):
    return _train(tf, lambda tf: tf.train.AdagradOptimizer(0.1))


@case
def optim_adagrad_initial_accumulator(tf):
    return _train(tf, lambda tf: tf.train.AdagradOptimizer(0.3, initial_accumulator_value=2.0))


@case
def optim_adadelta(tf):
    return _train(tf, lambda tf: tf.train.AdadeltaOptimizer(1.0, rho=0.9, epsilon=1e-6))


@case
def optim_adadelta_defaults(tf):
    return _train(tf, lambda tf: tf.train.AdadeltaOptimizer())


@case
def optim_ftrl(tf):
    return _train(tf, lambda tf: tf.train.FtrlOptimizer(0.1))


@case
def optim_ftrl_l1_l2(tf):
    return _train(tf, lambda tf: tf.train.FtrlOptimizer(
        0.5, l1_regularization_strength=0.05, l2_regularization_strength=0.1,
        initial_accumulator_value=0.5))


@case
def optim_ftrl_power_shrinkage(tf):
    return _train(tf, lambda tf: tf.train.FtrlOptimizer(
        0.3, learning_rate_power=-0.3, l1_regularization_strength=0.01,
        l2_regularization_strength=0.02, l2_shrinkage_regularization_strength=0.1))


@case
def optim_ftrl_named_slots(tf):
    return _train(tf, lambda tf: tf.train.FtrlOptimizer(
        0.1, accum_name="acc", linear_name="lin", beta=0.5))


@case
def optim_adam(tf):
    return _train(tf, lambda tf: tf.train.AdamOptimizer(0.05, beta1=0.8, beta2=0.9))


@case
def optim_momentum(tf):
    return _train(tf, lambda tf: tf.train.MomentumOptimizer(0.05, 0.9))


@case
def optim_momentum_nesterov(tf):
    return _train(tf, lambda tf: tf.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True))


# ------------------------------------------------------------ learning rate as a tensor
def _named_case(name: str, build: Callable[[Any], dict]) -> None:
    build.__name__ = build.__qualname__ = name
    case(build)


def _fed_lr(make: Callable[[Any, Any], Any]) -> Callable[[Any], dict]:
    """Trains with the learning rate a placeholder fed each step."""
    def build(tf: Any) -> dict:
        holder: dict[str, Any] = {}

        def mk(tf: Any) -> Any:
            holder["lr"] = tf.placeholder(tf.float32, [], name="lr")
            return make(tf, holder["lr"])

        return _train(tf, mk, extra_feeds=lambda tf: {holder["lr"]: np.float32(0.03)})

    return build


for _name, _make in [
    ("optim_fed_lr_gradient_descent", lambda tf, lr: tf.train.GradientDescentOptimizer(lr)),
    ("optim_fed_lr_momentum", lambda tf, lr: tf.train.MomentumOptimizer(lr, 0.9)),
    ("optim_fed_lr_adam", lambda tf, lr: tf.train.AdamOptimizer(lr)),
    ("optim_fed_lr_rmsprop", lambda tf, lr: tf.train.RMSPropOptimizer(lr, momentum=0.3)),
    ("optim_fed_lr_adagrad", lambda tf, lr: tf.train.AdagradOptimizer(lr)),
    ("optim_fed_lr_adadelta", lambda tf, lr: tf.train.AdadeltaOptimizer(lr * 10.0)),
    ("optim_fed_lr_ftrl",
     lambda tf, lr: tf.train.FtrlOptimizer(lr, l1_regularization_strength=0.01)),
]:
    _named_case(_name, _fed_lr(_make))


@case
def optim_two_adams_one_graph(tf):
    """A second AdamOptimizer gets its own beta1_power_1/beta2_power_1 and slots
    w/Adam_2, w/Adam_3 (TF1's unique names)."""
    loss, w, (b, s), feeds = _model(tf)
    a1, a2 = tf.train.AdamOptimizer(0.05), tf.train.AdamOptimizer(0.01, beta1=0.5)
    t1 = a1.minimize(loss, var_list=[w, s])
    t2 = a2.minimize(loss, var_list=[w, b])
    fetch = {"w": w, "b": b, "s": s}
    names = []
    for i, opt in enumerate((a1, a2)):
        for v in opt.variables():
            names.append(v.op.name)
        fetch[f"m{i}"] = opt.get_slot(w, "m")
        fetch[f"v{i}"] = opt.get_slot(w, "v")
    names = sorted(names)
    for v in tf.global_variables():
        if "power" in v.op.name:
            fetch[v.op.name] = v
    return {"feeds": feeds, "fetch": fetch, "init": True, "before": [(t1, 3), (t2, 2)],
            "names": names}


@case
def optim_adam_scalar_variable(tf):
    s = tf.get_variable("s", initializer=np.float32(1.5))
    opt = tf.train.AdamOptimizer(0.1)
    train = opt.minimize(tf.square(s) * 3.0)
    return {"feeds": {}, "fetch": {"s": s, "m": opt.get_slot(s, "m"), "v": opt.get_slot(s, "v")},
            "init": True, "before": [(train, 4)]}


@case
def optim_global_step_in_scope(tf):
    with tf.variable_scope("model"):
        gs = tf.train.get_or_create_global_step()
    again = tf.train.get_or_create_global_step()
    return {"feeds": {}, "fetch": {"gs": gs, "again": again}, "init": True,
            "names": [gs.op.name, again.op.name, tf.train.get_global_step().op.name]}


# ------------------------------------------------------------ learning-rate schedules
DECAY_STEPS = (0, 1, 3, 7, 10, 16, 25)


def _decay_case(build: Callable[[Any, Any], Any], dtype: str = "int64") -> Callable[[Any], dict]:
    """The schedule at several global steps (each a constant of ``dtype``)."""
    def run(tf: Any) -> dict:
        fetch = {}
        for step in DECAY_STEPS:
            gs = tf.constant(step, dtype=getattr(tf, dtype), name=f"step{step}")
            fetch[f"at{step}"] = build(tf, gs)
        return {"feeds": {}, "fetch": fetch}

    return run


for _name, _build in [
    ("decay_exponential", lambda tf, gs: tf.train.exponential_decay(0.1, gs, 4, 0.5)),
    ("decay_exponential_staircase",
     lambda tf, gs: tf.train.exponential_decay(0.1, gs, 4, 0.5, staircase=True)),
    ("decay_natural_exp", lambda tf, gs: tf.train.natural_exp_decay(0.2, gs, 5, 0.3)),
    ("decay_natural_exp_staircase",
     lambda tf, gs: tf.train.natural_exp_decay(0.2, gs, 5, 0.3, staircase=True)),
    ("decay_inverse_time", lambda tf, gs: tf.train.inverse_time_decay(0.5, gs, 3, 0.7)),
    ("decay_inverse_time_staircase",
     lambda tf, gs: tf.train.inverse_time_decay(0.5, gs, 3, 0.7, staircase=True)),
    ("decay_polynomial", lambda tf, gs: tf.train.polynomial_decay(0.1, gs, 10)),
    ("decay_polynomial_power_end",
     lambda tf, gs: tf.train.polynomial_decay(0.1, gs, 8, end_learning_rate=0.01, power=2.0)),
    ("decay_polynomial_cycle",
     lambda tf, gs: tf.train.polynomial_decay(0.1, gs, 6, end_learning_rate=0.02, power=0.5,
                                              cycle=True)),
    ("decay_piecewise_constant",
     lambda tf, gs: tf.train.piecewise_constant(gs, [3, 10], [1.0, 0.5, 0.1])),
    ("decay_piecewise_constant_int32",
     lambda tf, gs: tf.train.piecewise_constant(tf.cast(gs, tf.int32), [1, 7, 16],
                                                [4, 3, 2, 1])),
    ("decay_exponential_float_step",
     lambda tf, gs: tf.train.exponential_decay(0.3, tf.cast(gs, tf.float32), 2.5, 0.9)),
]:
    _named_case(_name, _decay_case(_build))


@case
def decay_names(tf):
    gs = tf.train.get_or_create_global_step()
    ops = [tf.train.exponential_decay(0.1, gs, 4, 0.5),
           tf.train.polynomial_decay(0.1, gs, 10),
           tf.train.inverse_time_decay(0.1, gs, 10, 0.5),
           tf.train.exponential_decay(0.1, gs, 4, 0.5, name="mine")]
    return {"feeds": {}, "fetch": {}, "names": [t.op.name for t in ops]}


@case
def decay_requires_global_step(tf):
    tf.train.exponential_decay(0.1, None, 4, 0.5)
    return {"feeds": {}, "fetch": {}}


@case
def decay_piecewise_bad_lengths(tf):
    gs = tf.train.get_or_create_global_step()
    tf.train.piecewise_constant(gs, [3, 10], [1.0, 0.5])
    return {"feeds": {}, "fetch": {}}


@case
def optim_decayed_lr_with_global_step(tf):
    """Momentum on a staircase-decayed rate; apply_gradients increments the step."""
    loss, w, (b, s), feeds = _model(tf)
    gs = tf.train.get_or_create_global_step()
    lr = tf.train.exponential_decay(0.1, gs, 2, 0.5, staircase=True)
    train = tf.train.MomentumOptimizer(lr, 0.9).minimize(loss, global_step=gs)
    return {"feeds": feeds, "fetch": {"w": w, "b": b, "s": s, "gs": gs, "lr": lr},
            "init": True, "before": [(train, 5)]}


# ------------------------------------------------------------ moving averages
def _ema_case(decay: float, with_step: bool, steps: int = 4) -> Callable[[Any], dict]:
    """SGD steps, each followed (in its own run) by the averages' update."""
    def build(tf: Any) -> dict:
        loss, w, (b, s), feeds = _model(tf)
        gs = tf.train.get_or_create_global_step()
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = tf.train.ExponentialMovingAverage(decay, num_updates=gs if with_step else None)
        update = ema.apply([w, b, s])
        fetch = {"w": w, "b": b, "s": s}
        for v in (w, b, s):
            fetch[f"avg_{v.op.name}"] = ema.average(v)
        names = [update.name, ema.average_name(w), ema.average(b).op.name]
        names += sorted(ema.variables_to_restore())
        names += [v.op.name for v in tf.moving_average_variables()]
        return {"feeds": feeds, "fetch": fetch, "init": True,
                "before": [(train, 1), (update, 1)] * steps, "names": names}

    return build


_named_case("ema_decay", _ema_case(0.7, False))
_named_case("ema_num_updates", _ema_case(0.99, True))


@case
def ema_names_in_scopes(tf):
    w = tf.get_variable("w", initializer=np.float32([1.0, 2.0]))
    with tf.variable_scope("outer"), tf.name_scope("ns"):
        ema = tf.train.ExponentialMovingAverage(0.5)
        op = ema.apply([w])
        ema.apply([w])  # again: keeps the same average
    second = tf.train.ExponentialMovingAverage(0.5)
    op2 = second.apply([w])
    return {"feeds": {}, "fetch": {"avg": ema.average(w), "avg2": second.average(w)},
            "init": True, "before": [(op, 2)],
            "names": [op.name, ema.average(w).op.name, op2.name, second.average(w).op.name,
                      second.average_name(w)]}


@case
def ema_rejects_integer_variables(tf):
    i = tf.get_variable("i", [2], dtype=tf.int32)
    tf.train.ExponentialMovingAverage(0.9).apply([i])
    return {"feeds": {}, "fetch": {}}


@case
def optim_slots_in_variable_scope(tf):
    w = tf.get_variable("w", initializer=np.float32([1.0, -2.0]))
    with tf.variable_scope("opt"), tf.name_scope("ns"):
        opt = tf.train.AdamOptimizer(0.1)
        train = opt.minimize(tf.reduce_sum(tf.square(w)))
    return {"feeds": {}, "fetch": {"w": w, "m": opt.get_slot(w, "m")}, "init": True,
            "before": [(train, 2)], "names": sorted(v.op.name for v in opt.variables())}


for _name, _build in [
    ("decay_cosine", lambda tf, gs: tf.train.cosine_decay(0.1, gs, 10)),
    ("decay_cosine_alpha", lambda tf, gs: tf.train.cosine_decay(0.4, gs, 16, alpha=0.1)),
]:
    _named_case(_name, _decay_case(_build))


# ------------------------------------------------------------ sparse gradients
SPARSE_OPTIMIZERS: list[tuple[str, Callable[[Any], Any]]] = [
    ("gradient_descent", lambda tf: tf.train.GradientDescentOptimizer(0.2)),
    ("momentum", lambda tf: tf.train.MomentumOptimizer(0.1, 0.9)),
    ("momentum_nesterov", lambda tf: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True)),
    ("adam", lambda tf: tf.train.AdamOptimizer(0.1)),
    ("rmsprop", lambda tf: tf.train.RMSPropOptimizer(0.05, momentum=0.5)),
    ("rmsprop_centered", lambda tf: tf.train.RMSPropOptimizer(0.05, momentum=0.5,
                                                              centered=True)),
    ("adagrad", lambda tf: tf.train.AdagradOptimizer(0.3)),
    ("adadelta", lambda tf: tf.train.AdadeltaOptimizer(2.0)),
    ("ftrl", lambda tf: tf.train.FtrlOptimizer(0.3, l1_regularization_strength=0.01,
                                               l2_regularization_strength=0.01)),
    ("ftrl_shrinkage", lambda tf: tf.train.FtrlOptimizer(
        0.3, learning_rate_power=-0.7, l2_shrinkage_regularization_strength=0.05)),
]


def _slots_of(opt: Any, var: Any, fetch: dict, names: list) -> None:
    for slot in opt.get_slot_names():
        v = opt.get_slot(var, slot)
        fetch[f"slot_{slot}"] = v
        names.append(f"{slot}:{v.op.name}")


def _embedding_case(make: Callable[[Any], Any]) -> Callable[[Any], dict]:
    """An embedding looked up with repeated ids (a sparse gradient with duplicate
    indices): rows never looked up (2, 5) and their slots must not move."""
    def build(tf: Any) -> dict:
        emb = tf.get_variable("emb", initializer=rand(60, 6, 3, low=-1.0, high=1.0))
        ids = tf.placeholder(tf.int32, [None], name="ids")
        target = tf.placeholder(tf.float32, [None, 3], name="target")
        looked_up = tf.gather(emb, ids)
        loss = tf.reduce_sum(tf.square(looked_up - target))
        opt = make(tf)
        train = opt.minimize(loss)
        fetch, names = {"emb": emb}, []
        _slots_of(opt, emb, fetch, names)
        feeds = {ids: np.array([1, 4, 1, 0, 3], np.int32), target: rand(61, 5, 3)}
        return {"feeds": feeds, "fetch": fetch, "init": True, "before": [(train, 3)],
                "names": names}

    return build


def _indexed_slices_case(make: Callable[[Any], Any]) -> Callable[[Any], dict]:
    """``apply_gradients`` with an ``IndexedSlices`` built by hand (duplicate indices)."""
    def build(tf: Any) -> dict:
        var = tf.get_variable("v", initializer=rand(62, 5, 2, low=-1.0, high=1.0))
        grad = tf.IndexedSlices(tf.constant(rand(63, 4, 2)), tf.constant([3, 0, 3, 1]),
                                tf.constant([5, 2]))
        opt = make(tf)
        train = opt.apply_gradients([(grad, var)])
        fetch, names = {"v": var}, []
        _slots_of(opt, var, fetch, names)
        return {"feeds": {}, "fetch": fetch, "init": True, "before": [(train, 2)],
                "names": names}

    return build


for _name, _make in SPARSE_OPTIMIZERS:
    _named_case(f"sparse_embedding_{_name}", _embedding_case(_make))
    _named_case(f"sparse_indexed_slices_{_name}", _indexed_slices_case(_make))


@case
def sparse_embedding_fed_lr_adagrad(tf):
    lr = tf.placeholder(tf.float32, [], name="lr")
    spec = _embedding_case(lambda tf: tf.train.AdagradOptimizer(lr))(tf)
    spec["feeds"][lr] = np.float32(0.25)
    return spec


@case
def ema_after_train_op_in_one_run(tf):
    """TF1's idiom: the averages' update under control_dependencies([train_op]) averages
    the weights that step produced."""
    loss, w, (b, s), feeds = _model(tf)
    opt = tf.train.AdamOptimizer(0.05)
    train = opt.minimize(loss)
    ema = tf.train.ExponentialMovingAverage(0.6)
    with tf.control_dependencies([train]):
        train_and_average = ema.apply([w, b, s])
    fetch = {"w": w, "b": b, "s": s}
    for v in (w, b, s):
        fetch[f"avg_{v.op.name}"] = ema.average(v)
    return {"feeds": feeds, "fetch": fetch, "init": True, "before": [(train_and_average, 4)]}


for _name, _build in [
    ("decay_cosine_restarts", lambda tf, gs: tf.train.cosine_decay_restarts(0.1, gs, 3)),
    ("decay_cosine_restarts_constant_periods",
     lambda tf, gs: tf.train.cosine_decay_restarts(0.1, gs, 4, t_mul=1.0, m_mul=0.5,
                                                   alpha=0.1)),
    ("decay_cosine_restarts_mul",
     lambda tf, gs: tf.train.cosine_decay_restarts(0.2, gs, 2, t_mul=1.5, m_mul=0.8)),
    ("decay_linear_cosine", lambda tf, gs: tf.train.linear_cosine_decay(0.1, gs, 20)),
    ("decay_linear_cosine_periods",
     lambda tf, gs: tf.train.linear_cosine_decay(0.1, gs, 12, num_periods=2.0, alpha=0.1,
                                                 beta=0.01)),
]:
    _named_case(_name, _decay_case(_build))
