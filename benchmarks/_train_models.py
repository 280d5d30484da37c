"""The models of ``bench_train_step.py``'s side-by-side rows, each written three ways.

``build(tf, params)`` builds the training graph with whatever module it is handed as
``tf`` (ckptsync here, ``tensorflow.compat.v1`` in the TF worker process, so both run the
very same program); ``Numpy*`` is the hand-written forward/backward/SGD step (the limit).
Only numpy may be imported at the top: the TF worker runs in a venv without ckptsync.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

LR = 0.05


def glorot(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[:-1]))
    lim = np.sqrt(6.0 / (fan_in + shape[-1]))
    return rng.uniform(-lim, lim, shape).astype(np.float32)


class Model:
    """One row: ``params``, ``batches`` (feeds by placeholder name) and ``build``."""

    name = ""
    batch = 0

    def params(self) -> list[np.ndarray]:
        raise NotImplementedError

    def batches(self, n: int) -> list[dict[str, np.ndarray]]:
        raise NotImplementedError

    def build(self, tf: Any, params: list[np.ndarray]) -> tuple[Any, Any, dict[str, Any]]:
        """``(train_op, loss, {name: placeholder})``."""
        raise NotImplementedError

    def numpy_step(self, p: list[np.ndarray], b: dict[str, np.ndarray]) -> float:
        raise NotImplementedError


def _xent_backward(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    n = len(y)
    rows = np.arange(n)
    loss = float(np.mean(np.log(s[:, 0]) - z[rows, y]))
    d = e / s
    d[rows, y] -= 1
    d /= np.float32(n)
    return loss, d


def _sgd(p: list[np.ndarray], g: list[np.ndarray]) -> None:
    for q, dq in zip(p, g):
        q -= np.float32(LR) * dq


def _loss(tf: Any, logits: Any, y: Any) -> Any:
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


# --------------------------------------------------------------------- MLP 784-1024-1024-10
class MLP(Model):
    name = "MLP 784-1024-1024-10, batch 256, SGD"
    batch = 256
    sizes = (784, 1024, 1024, 10)

    def params(self) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        out: list[np.ndarray] = []
        for a, b in zip(self.sizes[:-1], self.sizes[1:]):
            out += [glorot(rng, a, b), np.zeros(b, np.float32)]
        return out

    def batches(self, n: int) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng(1)
        return [{"x": rng.uniform(0, 1, (self.batch, 784)).astype(np.float32),
                 "y": rng.integers(0, 10, self.batch).astype(np.int64)} for _ in range(n)]

    def build(self, tf: Any, params: list[np.ndarray]) -> tuple[Any, Any, dict[str, Any]]:
        x = tf.placeholder(tf.float32, [None, 784], name="x")
        y = tf.placeholder(tf.int64, [None], name="y")
        h = x
        for i in range(3):
            w = tf.Variable(params[2 * i], name=f"w{i}")
            b = tf.Variable(params[2 * i + 1], name=f"b{i}")
            h = tf.nn.bias_add(tf.matmul(h, w), b)
            if i < 2:
                h = tf.nn.relu(h)
        loss = _loss(tf, h, y)
        return tf.train.GradientDescentOptimizer(LR).minimize(loss), loss, {"x": x, "y": y}

    def numpy_step(self, p: list[np.ndarray], b: dict[str, np.ndarray]) -> float:
        x, y = b["x"], b["y"]
        z0 = x @ p[0] + p[1]
        h0 = np.maximum(z0, 0)
        z1 = h0 @ p[2] + p[3]
        h1 = np.maximum(z1, 0)
        loss, d = _xent_backward(h1 @ p[4] + p[5], y)
        dh1 = (d @ p[4].T) * (z1 > 0)
        dh0 = (dh1 @ p[2].T) * (z0 > 0)
        _sgd(p, [x.T @ dh0, dh0.sum(0), h0.T @ dh1, dh1.sum(0), h1.T @ d, d.sum(0)])
        return loss


# --------------------------------------------------------------------- the digits CNN
def _im2col3(x: np.ndarray) -> np.ndarray:
    """3x3 SAME, stride 1: ``[N, H, W, C] -> [N*H*W, 9*C]``."""
    n, h, w, c = x.shape
    xp = np.zeros((n, h + 2, w + 2, c), x.dtype)
    xp[:, 1:-1, 1:-1] = x
    s = xp.strides
    return as_strided(xp, (n, h, w, 3, 3, c), (s[0], s[1], s[2], s[1], s[2], s[3])
                      ).reshape(n * h * w, 9 * c)


def _col2im3(dcols: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    n, h, w, c = shape
    d = dcols.reshape(n, h, w, 3, 3, c)
    dxp = np.zeros((n, h + 2, w + 2, c), dcols.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, i:i + h, j:j + w] += d[:, :, :, i, j]
    return dxp[:, 1:-1, 1:-1]


def _pool2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, h, w, c = x.shape
    v = x.reshape(n, h // 2, 2, w // 2, 2, c)
    out = v.max(axis=(2, 4))
    return out, v == out[:, :, None, :, None]


class CNN(Model):
    """``examples/digits_cnn.py`` without dropout: 8x8x1 -> conv3x3x16 -> pool -> conv3x3x32
    -> pool -> dense 64 -> 10, ReLU, SAME."""

    name = "digits CNN (examples/digits_cnn.py), batch 64, SGD"
    batch = 64

    def params(self) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        return [glorot(rng, 3, 3, 1, 16), np.zeros(16, np.float32),
                glorot(rng, 3, 3, 16, 32), np.zeros(32, np.float32),
                glorot(rng, 128, 64), np.zeros(64, np.float32),
                glorot(rng, 64, 10), np.zeros(10, np.float32)]

    def batches(self, n: int) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng(1)
        return [{"x": rng.uniform(0, 1, (self.batch, 64)).astype(np.float32),
                 "y": rng.integers(0, 10, self.batch).astype(np.int64)} for _ in range(n)]

    def build(self, tf: Any, params: list[np.ndarray]) -> tuple[Any, Any, dict[str, Any]]:
        x = tf.placeholder(tf.float32, [None, 64], name="x")
        y = tf.placeholder(tf.int64, [None], name="y")
        v = [tf.Variable(q, name=f"p{i}") for i, q in enumerate(params)]
        h = tf.reshape(x, [-1, 8, 8, 1])
        for i in range(2):
            h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(h, v[2 * i], [1, 1, 1, 1], "SAME"),
                                          v[2 * i + 1]))
            h = tf.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        h = tf.nn.relu(tf.nn.bias_add(tf.matmul(tf.reshape(h, [-1, 128]), v[4]), v[5]))
        loss = _loss(tf, tf.nn.bias_add(tf.matmul(h, v[6]), v[7]), y)
        return tf.train.GradientDescentOptimizer(LR).minimize(loss), loss, {"x": x, "y": y}

    def numpy_step(self, p: list[np.ndarray], b: dict[str, np.ndarray]) -> float:
        x0, y = b["x"].reshape(-1, 8, 8, 1), b["y"]
        n = len(y)
        c0 = _im2col3(x0)
        z0 = (c0 @ p[0].reshape(9, 16) + p[1]).reshape(n, 8, 8, 16)
        a0 = np.maximum(z0, 0)
        x1, m0 = _pool2(a0)
        c1 = _im2col3(x1)
        z1 = (c1 @ p[2].reshape(144, 32) + p[3]).reshape(n, 4, 4, 32)
        a1 = np.maximum(z1, 0)
        x2, m1 = _pool2(a1)
        f = x2.reshape(n, 128)
        z2 = f @ p[4] + p[5]
        h2 = np.maximum(z2, 0)
        loss, d = _xent_backward(h2 @ p[6] + p[7], y)
        dh2 = (d @ p[6].T) * (z2 > 0)
        dx2 = (dh2 @ p[4].T).reshape(n, 2, 1, 2, 1, 32)
        dz1 = ((dx2 * m1).reshape(n, 4, 4, 32) * (z1 > 0)).reshape(-1, 32)
        dx1 = _col2im3(dz1 @ p[2].reshape(144, 32).T, (n, 4, 4, 16)).reshape(n, 4, 1, 4, 1, 16)
        dz0 = ((dx1 * m0).reshape(n, 8, 8, 16) * (z0 > 0)).reshape(-1, 16)
        _sgd(p, [(c0.T @ dz0).reshape(3, 3, 1, 16), dz0.sum(0),
                 (c1.T @ dz1).reshape(3, 3, 16, 32), dz1.sum(0),
                 f.T @ dh2, dh2.sum(0), h2.T @ d, d.sum(0)])
        return loss


# --------------------------------------------------------------------- embedding
class Embedding(Model):
    """``ids [256]`` -> rows of a ``[vocab, 64]`` table -> dense 10, SGD. The table's
    gradient is an IndexedSlices of the 256 looked-up rows, applied in place (a scatter):
    the step's cost must not depend on ``vocab``."""

    batch = 256
    dim = 64

    def __init__(self, vocab: int = 100_000):
        self.vocab = vocab
        self.name = f"embedding {vocab:,} x {self.dim}, batch {self.batch}, SGD"

    def params(self) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        table = rng.standard_normal((self.vocab, self.dim), dtype=np.float32)
        table *= np.float32(0.05)
        return [table, glorot(rng, self.dim, 10), np.zeros(10, np.float32)]

    def batches(self, n: int) -> list[dict[str, np.ndarray]]:
        rng = np.random.default_rng(1)
        return [{"ids": rng.integers(0, self.vocab, self.batch).astype(np.int32),
                 "y": rng.integers(0, 10, self.batch).astype(np.int64)} for _ in range(n)]

    def build(self, tf: Any, params: list[np.ndarray]) -> tuple[Any, Any, dict[str, Any]]:
        ids = tf.placeholder(tf.int32, [None], name="ids")
        y = tf.placeholder(tf.int64, [None], name="y")
        table = tf.Variable(params[0], name="table")
        w, b = tf.Variable(params[1], name="w"), tf.Variable(params[2], name="b")
        logits = tf.nn.bias_add(tf.matmul(tf.nn.embedding_lookup(table, ids), w), b)
        loss = _loss(tf, logits, y)
        return tf.train.GradientDescentOptimizer(LR).minimize(loss), loss, {"ids": ids, "y": y}

    def numpy_step(self, p: list[np.ndarray], b: dict[str, np.ndarray]) -> float:
        ids, y = b["ids"], b["y"]
        emb = p[0][ids]
        loss, d = _xent_backward(emb @ p[1] + p[2], y)
        demb = d @ p[1].T
        _sgd(p[1:], [emb.T @ d, d.sum(0)])
        np.subtract.at(p[0], ids, np.float32(LR) * demb)
        return loss


NAMES = ("cnn", "mlp", "embedding")


def model(name: str, vocab: int | None = None) -> Model:
    """The row called ``name`` (one of :data:`NAMES`); ``vocab`` sizes the embedding table."""
    if name == "cnn":
        return CNN()
    if name == "mlp":
        return MLP()
    if name == "embedding":
        return Embedding(vocab or 100_000)
    raise ValueError(f"unknown model {name!r}; one of {', '.join(NAMES)}")
