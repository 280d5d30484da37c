"""Training-step speed, single threaded: ckptsync against TF1 and hand-written numpy.

Row ``digits``: the digits MLP (64->128->128->10, batch 64, Adam): ckptsync's
``Session.run(train_op)`` against a hand-written numpy forward/backward/Adam step (the
limit) and, when importable, PyTorch CPU eager (a peer), alternating in one process on
the same data; the headline is ckptsync time / numpy.

Rows ``cnn`` (examples/digits_cnn.py's network), ``mlp`` (784->1024->1024->10, batch 256)
and ``embedding`` (see ``benchmarks/_train_models.py``), SGD: the same program run by
ckptsync, by TF1 (``tensorflow.compat.v1`` on CPU, one intra- and one inter-op thread, in
a worker process with ``.goldens-venv/bin/python``: TensorFlow is never a dependency; the
column is skipped with a note when that venv is missing) and by a hand-written numpy
step, alternating round by round; the headline is ckptsync time / TF1 (target <= 1.5x).

    python benchmarks/bench_train_step.py [--models digits,cnn,mlp] [--steps 300] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

import ckptsync as cs
from ckptsync.data import BatchIterator, load_digits

try:
    from benchmarks._common import alternate, fmt_row, summary, timed
    from benchmarks._train_models import NAMES, Model, model
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from _common import alternate, fmt_row, summary, timed  # type: ignore[no-redef]
    from _train_models import NAMES, Model, model  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
TF_PYTHON = HERE.parent / ".goldens-venv" / "bin" / "python"

SIZES = (64, 128, 128, 10)
BATCH = 64


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    lim = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-lim, lim, (fan_in, fan_out)).astype(np.float32)


def init_params(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    params = []
    for a, b in zip(SIZES[:-1], SIZES[1:]):
        params += [glorot(rng, a, b), np.zeros(b, np.float32)]
    return params


class NumpyMLP:
    """Hand-written forward, backward and TF1 Adam in float32."""

    def __init__(self, params: list[np.ndarray], lr: float = 1e-3):
        self.p = [q.copy() for q in params]
        self.m = [np.zeros_like(q) for q in params]
        self.v = [np.zeros_like(q) for q in params]
        self.lr, self.b1, self.b2, self.eps = np.float32(lr), np.float32(0.9), np.float32(0.999), np.float32(1e-8)
        self.b1p, self.b2p = np.float32(0.9), np.float32(0.999)

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        w0, b0, w1, b1, w2, b2 = self.p
        z0 = x @ w0 + b0
        h0 = np.maximum(z0, 0)
        z1 = h0 @ w1 + b1
        h1 = np.maximum(z1, 0)
        logits = h1 @ w2 + b2
        z = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=1, keepdims=True)
        n = len(y)
        loss = float(np.mean(np.log(s[:, 0]) - z[np.arange(n), y]))
        d = e / s
        d[np.arange(n), y] -= 1
        d /= np.float32(n)
        g = [None] * 6
        g[4], g[5] = h1.T @ d, d.sum(0)
        dh1 = (d @ w2.T) * (z1 > 0)
        g[2], g[3] = h0.T @ dh1, dh1.sum(0)
        dh0 = (dh1 @ w1.T) * (z0 > 0)
        g[0], g[1] = x.T @ dh0, dh0.sum(0)
        lr_t = self.lr * np.sqrt(1 - self.b2p) / (1 - self.b1p)
        for i in range(6):
            self.m[i] = self.b1 * self.m[i] + (1 - self.b1) * g[i]
            self.v[i] = self.b2 * self.v[i] + (1 - self.b2) * g[i] * g[i]
            self.p[i] = self.p[i] - lr_t * self.m[i] / (np.sqrt(self.v[i]) + self.eps)
        self.b1p *= self.b1
        self.b2p *= self.b2
        return loss


def build_ckptsync(params: list[np.ndarray]) -> tuple[cs.Session, object, object, object, object]:
    g = cs.Graph()
    with g.as_default():
        x = cs.placeholder(cs.float32, [None, 64], name="x")
        y = cs.placeholder(cs.int64, [None], name="y")
        h = x
        for i in range(3):
            with cs.variable_scope(f"dense{i}"):
                w = cs.get_variable("w", initializer=params[2 * i])
                b = cs.get_variable("b", initializer=params[2 * i + 1])
                h = cs.nn.bias_add(cs.matmul(h, w), b)
                if i < 2:
                    h = cs.nn.relu(h)
        loss = cs.reduce_mean(cs.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        step = cs.train.get_or_create_global_step()
        train = cs.train.AdamOptimizer(1e-3).minimize(loss, global_step=step)
        init = cs.global_variables_initializer()
    sess = cs.Session(graph=g)
    sess.run(init)
    return sess, train, loss, x, y


def build_torch(params: list[np.ndarray]):  # pragma: no cover - optional peer
    import torch

    torch.set_num_threads(1)
    ws = [torch.tensor(p.copy(), requires_grad=True) for p in params]
    opt = torch.optim.Adam(ws, lr=1e-3, eps=1e-8)

    def step(xb: np.ndarray, yb: np.ndarray) -> None:
        x, y = torch.from_numpy(xb), torch.from_numpy(yb)
        h = torch.relu(x @ ws[0] + ws[1])
        h = torch.relu(h @ ws[2] + ws[3])
        loss = torch.nn.functional.cross_entropy(h @ ws[4] + ws[5], y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def bench_digits(args: argparse.Namespace) -> None:
    data = load_digits().train
    it = BatchIterator(data, BATCH, seed=0)
    batches = [next(it) for _ in range(args.steps)]
    params = init_params()
    sess, train, loss, x, y = build_ckptsync(params)
    ref = NumpyMLP(params)

    # Same init, same batches: the two must agree before we time them.
    for b in batches[:20]:
        sess.run(train, {x: b["x"], y: b["y"]})
        ref.step(b["x"], b["y"])
    got = sess.run("dense2/w:0")
    np.testing.assert_allclose(got, ref.p[4], rtol=2e-3, atol=2e-5)

    def run_cs() -> float:
        def f() -> None:
            for b in batches:
                sess.run(train, {x: b["x"], y: b["y"]})
        return timed(f, 1) / len(batches)

    def run_np() -> float:
        def f() -> None:
            for b in batches:
                ref.step(b["x"], b["y"])
        return timed(f, 1) / len(batches)

    cases = {"ckptsync Session.run(train_op)": run_cs, "numpy hand-written step": run_np}
    try:
        tstep = build_torch(params)
        cases["pytorch eager (cpu)"] = lambda: timed(
            lambda: [tstep(b["x"], b["y"]) for b in batches], 1) / len(batches)
    except ImportError:
        pass
    samples = alternate(cases, args.repeats)
    print(f"digits MLP 64-128-128-10, batch {BATCH}, Adam; {args.steps} steps x "
          f"{args.repeats} repeats, BLAS threads {args.threads}")
    for k, v in samples.items():
        print(fmt_row(k, v, "us", 1e6))
    med = {k: summary(v)[0] for k, v in samples.items()}
    if "pytorch eager (cpu)" in med:
        print(f"ratio ckptsync / pytorch: {med['ckptsync Session.run(train_op)'] / med['pytorch eager (cpu)']:.2f}x")
    print(f"ratio ckptsync / numpy: "
          f"{med['ckptsync Session.run(train_op)'] / med['numpy hand-written step']:.2f}x "
          "(target <= 1.3x)")


class TFWorker:
    """TF1's step in a worker process (``_tf_worker.py``), timed on request."""

    def __init__(self, name: str, steps: int, warmup: int, vocab: int | None = None):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
               "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
               "TF_NUM_INTEROP_THREADS": "1"}
        cmd = [str(TF_PYTHON), str(HERE / "_tf_worker.py"), name, str(steps), str(warmup)]
        self.proc = subprocess.Popen(cmd + ([str(vocab)] if vocab else []), env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.loss = float(self._read()["loss"])

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the TF worker exited with code {self.proc.wait()}")
        return json.loads(line)

    def step_s(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return float(self._read()["step_s"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


def bench_side_by_side(m: Model, args: argparse.Namespace, vocab: int | None = None
                       ) -> dict[str, float]:
    """Medians (seconds per step) of ckptsync, numpy and, when available, TF1."""
    warmup = 20
    batches = m.batches(args.steps)
    g = cs.Graph()
    with g.as_default():
        train, loss, phs = m.build(cs, m.params())
        init = cs.global_variables_initializer()
    sess = cs.Session(graph=g)
    sess.run(init)
    feeds = [{phs[k]: v for k, v in b.items()} for b in batches]
    ref = m.params()
    for f, b in zip(feeds[:warmup], batches[:warmup]):
        sess.run(train, f)
        m.numpy_step(ref, b)
    # Same init, same batches: the loss after the warm-up must agree before we time.
    cs_loss = float(sess.run(loss, feeds[0]))
    np_loss = m.numpy_step([q.copy() for q in ref], batches[0])
    np.testing.assert_allclose(cs_loss, np_loss, rtol=2e-3, atol=1e-4)
    cases: dict[str, Any] = {
        "ckptsync Session.run(train_op)": lambda: timed(
            lambda: [sess.run(train, f) for f in feeds], 1) / len(feeds),
        "numpy hand-written step": lambda: timed(
            lambda: [m.numpy_step(ref, b) for b in batches], 1) / len(batches),
    }
    worker = None
    if TF_PYTHON.exists():
        worker = TFWorker(args.model_name, args.steps, warmup, vocab)
        np.testing.assert_allclose(worker.loss, cs_loss, rtol=2e-3, atol=1e-4)
        cases["tf1 Session.run(train_op)"] = worker.step_s
    try:
        samples = alternate(cases, args.repeats)
    finally:
        if worker is not None:
            worker.close()
    print(f"{m.name}; {args.steps} steps x {args.repeats} repeats, one thread")
    for k, v in samples.items():
        print(fmt_row(k, v, "us", 1e6))
    med = {k: summary(v)[0] for k, v in samples.items()}
    mine = med["ckptsync Session.run(train_op)"]
    print(f"ratio ckptsync / numpy: {mine / med['numpy hand-written step']:.2f}x")
    if worker is None:
        print(f"ratio ckptsync / tf1: (skipped: no TensorFlow at {TF_PYTHON})")
    else:
        print(f"ratio ckptsync / tf1: {mine / med['tf1 Session.run(train_op)']:.2f}x "
              "(target <= 1.5x)")
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="digits," + ",".join(NAMES),
                    help="comma-separated rows: digits," + ",".join(NAMES))
    ap.add_argument("--steps", type=int, default=300, help="steps per timed sample")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads")
    ap.add_argument("--vocabs", default="10000,100000,1000000",
                    help="embedding table sizes (rows), one row each: the step's cost must "
                         "not depend on them")
    args = ap.parse_args()
    threadpool_limits(args.threads)
    for name in args.models.split(","):
        args.model_name = name
        if name == "digits":
            bench_digits(args)
        elif name == "embedding":
            by_vocab = {v: bench_side_by_side(model(name, v), args, v)
                        for v in (int(s) for s in args.vocabs.split(","))}
            key = "ckptsync Session.run(train_op)"
            lo, hi = min(by_vocab), max(by_vocab)
            print(f"\nembedding step, vocab {hi:,} / vocab {lo:,}: ckptsync "
                  f"{by_vocab[hi][key] / by_vocab[lo][key]:.2f}x (target ~1x: independent "
                  "of the vocabulary size)")
        else:
            bench_side_by_side(model(name), args)
        print()


if __name__ == "__main__":
    main()
