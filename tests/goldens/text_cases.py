"""Goldens that are text, not arrays: what ``tf.Print`` and ``tf.print`` write, the
messages of failing checks (``assert_*``, ``Assert``, ``check_numerics``, ``py_func``),
and ``tf.gfile``'s results and errors over a scripted sequence of file operations.

:func:`run_all` runs every scenario with a TF1-like module (``tensorflow.compat.v1`` in
``generate_text.py``, which writes ``text.json``; ckptsync in
``tests/runtime/test_text_goldens.py``) and returns ``{scenario: [[label, record], ...]}``.
Paths are recorded relative to a scratch directory (``<d>``), and of a runtime error
only its class and the line of its message that says what failed (TF's adds node and
traceback lines around it).

Only numpy and the standard library may be imported here.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

KEY_PHRASES = ("assertion failed:", "Tensor had", "-th value returned", "values, but expects",
               "Error: ")


@contextlib.contextmanager
def captured(fd: int) -> Iterator[list[str]]:
    """What is written to file descriptor ``fd`` (TF's C++) or its ``sys`` stream (Python)
    inside the block, as one string in the yielded list."""
    name = "stderr" if fd == 2 else "stdout"
    out: list[str] = []
    saved_stream = getattr(sys, name)
    saved_stream.flush()
    saved_fd = os.dup(fd)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        buf = io.StringIO()
        setattr(sys, name, buf)
        try:
            yield out
        finally:
            setattr(sys, name, saved_stream)
            os.dup2(saved_fd, fd)
            os.close(saved_fd)
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", "backslashreplace") + buf.getvalue())


def key_line(message: str) -> str:
    """The line of a runtime error's message that says what failed."""
    for line in message.splitlines():
        for phrase in KEY_PHRASES:
            if phrase in line:
                return line.strip()
    return message.strip().splitlines()[0] if message.strip() else ""


def _error(e: BaseException, runtime: bool) -> list[str]:
    names = [c.__name__ for c in type(e).__mro__]
    cls = next((n for n in names if n.endswith("Error") and not n.startswith("Ckptsync")),
               type(e).__name__)
    text = getattr(e, "message", None) or str(e)
    return [cls, key_line(text) if runtime else text]


# --------------------------------------------------------------------- printing
def printing(tf: Any, d: str) -> list[list[Any]]:
    rows: list[list[Any]] = []
    values = {
        "bool": np.array([True, False]),
        "float32": np.array([0.1, 1 / 3, 1e-7, 1e20, np.nan, -np.inf, -0.0, 1e5, 1234567.0],
                            np.float32),
        "float64": np.array([0.1, 1 / 3, 1e-7, 2.5], np.float64),
        "int8": np.array([1, -2], np.int8),
        "float16": np.array([0.1, 3.5], np.float16),
        "scalar_int64": np.int64(7),
        "int32_3d": np.arange(24).reshape(2, 3, 4).astype(np.int32),
        "empty": np.zeros((0, 3), np.float32),
        "int64_20": np.arange(20, dtype=np.int64),
        "strings": np.array([b"ab", b"c\td\"e"], dtype=object),
    }
    with tf.Graph().as_default(), tf.Session() as sess:
        for label, v in values.items():
            c = tf.constant(v)
            ops = [("Print", tf.Print(c, [c], message="P:")),
                   ("Print all", tf.Print(c, [c], summarize=-1, message="A:")),
                   ("print", tf.print("V:", c)),
                   ("print summarize 2", tf.print("V2:", c, summarize=2)),
                   ("print all", tf.print(c, summarize=-1))]
            for what, op in ops:
                with captured(2) as out:
                    sess.run(op)
                rows.append([f"{label} {what}", out[0]])
        x = tf.placeholder(tf.float32, [None, 3])
        p = tf.Print(x, [x, tf.shape(x), "s"], message="first_n: ", first_n=2)
        with captured(2) as out:
            for _ in range(4):
                sess.run(p, {x: np.ones((2, 3), np.float32)})
        rows.append(["Print first_n=2 over 4 runs", out[0]])
        structured = tf.print("struct", [tf.constant(1), "a", {"k": tf.constant([1.5, 2])}], 3,
                              sep="|", end="!\n")
        with captured(2) as out:
            sess.run(structured)
        rows.append(["print structures, sep, end", out[0]])
        with captured(2) as out:
            sess.run(tf.print(tf.constant("a scalar string")))
            sess.run(tf.print(tf.constant(["s1", "s2"])))
            sess.run(tf.print())
        rows.append(["print strings and nothing", out[0]])
        with captured(1) as out:
            sess.run(tf.print("to stdout", tf.constant([1, 2]), output_stream=sys.stdout))
        rows.append(["print to stdout", out[0]])
        path = os.path.join(d, "printed.txt")
        op = tf.print("to a file", tf.constant(2.5), output_stream="file://" + path)
        sess.run(op)
        sess.run(op)
        with open(path) as f:
            rows.append(["print to file:// twice", f.read()])
        y = tf.placeholder(tf.float32, [2])
        with tf.control_dependencies([tf.print("before y:", y)]):
            z = y * 2.0
        with captured(2) as out:
            sess.run(z, {y: np.array([1.0, 2.0], np.float32)})
        rows.append(["print under control_dependencies", out[0]])
    return rows


# --------------------------------------------------------------------- failing checks
def _checks(tf: Any) -> list[tuple[str, Callable[[], Any], Callable[[], dict[Any, Any]]]]:
    def ph(dtype: Any, shape: Any) -> Any:
        return tf.placeholder(dtype, shape, name="x")

    def run_check(build: Callable[[Any], Any], dtype: Any, shape: Any,
                  value: Any) -> tuple[Callable[[], Any], Callable[[], dict[Any, Any]]]:
        x = ph(dtype, shape)
        return (lambda: build(x)), (lambda: {x: value})

    f32, i32 = tf.float32, tf.int32
    a = np.array([1, 2, 3], np.float32)
    cases = [
        ("assert_equal message summarize", lambda x: tf.assert_equal(x, 2.0, message="m",
                                                                     summarize=2), f32, [3], a),
        ("assert_none_equal", lambda x: tf.assert_none_equal(x, 2.0), f32, [3], a),
        ("assert_less int", lambda x: tf.assert_less(x, 2), i32, [3], np.array([1, 2, 3],
                                                                               np.int32)),
        ("assert_less_equal", lambda x: tf.assert_less_equal(x, 1.5), f32, [None], a),
        ("assert_greater", lambda x: tf.assert_greater(x, 1.0), f32, [3], a),
        ("assert_greater_equal", lambda x: tf.assert_greater_equal(x, 9.0), f32, [3], a),
        ("assert_positive", lambda x: tf.assert_positive(x - 1.0), f32, [3], a),
        ("assert_negative", lambda x: tf.assert_negative(x), f32, [3], a),
        ("assert_non_negative message", lambda x: tf.assert_non_negative(x - 2.0,
                                                                         message="neg"),
         f32, [3], a),
        ("assert_non_positive", lambda x: tf.assert_non_positive(x), f32, [3], a),
        ("assert_rank dynamic", lambda x: tf.assert_rank(x, 2), f32, None, a),
        ("assert_rank_at_least dynamic", lambda x: tf.assert_rank_at_least(x, 2), f32, None, a),
        ("Assert", lambda x: tf.Assert(tf.reduce_all(x < 2.0), ["x:", x, tf.shape(x)]),
         f32, [3], a),
        ("Assert summarize -1", lambda x: tf.Assert(tf.reduce_all(x < 0.0), [x], summarize=-1),
         f32, [None], np.arange(10, dtype=np.float32)),
        ("check_numerics nan", lambda x: tf.check_numerics(x / 0.0 * 0.0, "found"), f32, [3],
         a),
        ("check_numerics inf", lambda x: tf.check_numerics(x / 0.0, "found"), f32, [3], a),
        ("check_numerics both", lambda x: tf.check_numerics(
            tf.concat([x / 0.0, x * 0.0 / 0.0], 0), "both"), f32, [3], a),
        ("py_func wrong dtype", lambda x: tf.py_func(lambda v: v.astype(np.float64), [x], f32),
         f32, [3], a),
        ("py_func wrong count", lambda x: tf.py_func(lambda v: [v, v], [x], [f32, f32, f32])[0],
         f32, [3], a),
        ("py_func raises", lambda x: tf.py_func(_raise_value_error, [x], f32), f32, [3], a),
    ]
    return [(label, *run_check(b, dt, s, v)) for label, b, dt, s, v in cases]


def _raise_value_error(v: Any) -> Any:
    raise ValueError("bad value here")


def failing_checks(tf: Any, d: str) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for label in [c[0] for c in _checks(tf)]:
        with tf.Graph().as_default(), tf.Session() as sess:
            build, feeds = next((b, f) for n, b, f in _checks(tf) if n == label)
            op = build()
            try:
                sess.run(op, feeds())
                rows.append([label, "passed"])
            except Exception as e:  # noqa: BLE001 - the record
                rows.append([label, _error(e, runtime=True)])
    static = [
        ("assert_greater static", lambda: tf.assert_greater(tf.constant([1, 2]), 3,
                                                            message="small")),
        ("assert_equal static", lambda: tf.assert_equal(tf.constant([1.5]), tf.constant([2.5]))),
        ("assert_rank static", lambda: tf.assert_rank(tf.placeholder(tf.float32, [None, 3],
                                                                     name="x"), 3, message="r")),
        ("assert_rank_at_least static", lambda: tf.assert_rank_at_least(
            tf.placeholder(tf.float32, [2], name="x"), 2)),
        ("assert_type", lambda: tf.assert_type(tf.placeholder(tf.float32, [2], name="x"),
                                               tf.int32, message="t")),
        ("assert_integer", lambda: tf.assert_integer(tf.placeholder(tf.float32, [2], name="x"))),
        ("assert_scalar", lambda: tf.assert_scalar(tf.placeholder(tf.float32, [2], name="x"))),
        ("sort direction", lambda: tf.sort(tf.constant([1.0]), direction="up")),
    ]
    for label, build in static:
        with tf.Graph().as_default():
            try:
                build()
                rows.append([label, "built"])
            except Exception as e:  # noqa: BLE001 - the record
                rows.append([label, _error(e, runtime=False)])
    return rows


# --------------------------------------------------------------------- gfile
GFILE_NAMES = ("Copy", "DeleteRecursively", "Exists", "FastGFile", "GFile", "Glob",
               "IsDirectory", "ListDirectory", "MakeDirs", "MkDir", "Open", "Remove", "Rename",
               "Stat", "Walk")
IO_GFILE_NAMES = ("GFile", "copy", "exists", "glob", "isdir", "join", "listdir", "makedirs",
                  "mkdir", "remove", "rename", "rmtree", "stat", "walk")


def gfile(tf: Any, d: str) -> list[list[Any]]:
    g = tf.gfile
    rows: list[list[Any]] = []

    def rel(x: Any) -> Any:
        if isinstance(x, str):
            return x.replace(d, "<d>")
        if isinstance(x, bytes):
            return "bytes:" + x.decode()
        if isinstance(x, (list, tuple)):
            return [rel(v) for v in x]
        return x

    def t(label: str, fn: Callable[[], Any]) -> None:
        try:
            rows.append([label, rel(fn())])
        except Exception as e:  # noqa: BLE001 - the record
            rows.append([label, rel(_error(e, runtime=False))])

    def j(*parts: str) -> str:
        return os.path.join(d, *parts)

    p, q, r = j("a.txt"), j("b.txt"), j("c.txt")

    def write() -> str:
        with g.GFile(p, "w") as f:
            f.write("line1\nline2\n")
            f.write(b"bytes3\n")
        with open(p) as f:
            return f.read()

    def seek() -> list[Any]:
        with g.GFile(j("s.txt"), "w") as f:
            f.write("abcdef")
        f = g.GFile(j("s.txt"))
        f.seek(2)
        out = [f.read(2), f.tell()]
        f.close()
        out.append(f.read())  # reopened, as TF's
        f.close()
        return out

    t("exists missing", lambda: g.Exists(p))
    t("GFile of a missing file", lambda: type(g.GFile(p)).__name__)
    t("read a missing file", lambda: g.GFile(p).read())
    t("write str and bytes", write)
    t("read", lambda: g.GFile(p).read())
    t("read rb", lambda: g.GFile(p, "rb").read())
    t("read 3", lambda: g.GFile(p).read(3))
    t("readline", lambda: g.GFile(p).readline())
    t("readlines", lambda: g.GFile(p).readlines())
    t("iterate", lambda: list(g.GFile(p)))
    t("iterate rb", lambda: list(g.GFile(p, "rb")))
    t("size", lambda: g.GFile(p).size())
    t("append", lambda: [g.GFile(p, "a").write("x\n"), g.GFile(p).read()][1])
    t("write in r mode", lambda: g.GFile(p, "r").write("z"))
    t("read in w mode", lambda: g.GFile(j("w.txt"), "w").read())
    t("bad mode", lambda: g.GFile(p, "q"))
    t("seek tell reopen", seek)
    t("MkDir", lambda: g.MkDir(j("sub")))
    t("MkDir again", lambda: g.MkDir(j("sub")))
    t("MkDir missing parent", lambda: g.MkDir(j("x", "y")))
    t("MakeDirs", lambda: g.MakeDirs(j("m", "n")))
    t("MakeDirs again", lambda: g.MakeDirs(j("m", "n")))
    t("MakeDirs over a file", lambda: g.MakeDirs(p))
    t("IsDirectory", lambda: [g.IsDirectory(d), g.IsDirectory(p), g.IsDirectory(p + "zz")])
    t("ListDirectory", lambda: sorted(g.ListDirectory(d)))
    t("ListDirectory missing", lambda: g.ListDirectory(j("nope")))
    t("ListDirectory of a file", lambda: g.ListDirectory(p))
    t("Glob", lambda: sorted(g.Glob(j("*"))))
    t("Glob nothing", lambda: g.Glob(j("*.zz")))
    t("Glob nested", lambda: sorted(g.Glob(j("*", "*"))))
    def content(path: str) -> str:
        with open(path) as f:
            return f.read()

    t("Copy", lambda: [g.Copy(p, q), content(q)][1])
    t("Copy onto a file", lambda: g.Copy(p, q))
    t("Copy overwrite", lambda: g.Copy(p, q, overwrite=True))
    t("Copy missing", lambda: g.Copy(p + "zz", q + "zz"))
    t("Copy onto a directory", lambda: g.Copy(p, j("sub")))
    t("Rename", lambda: [g.Rename(q, r), os.path.exists(q), os.path.exists(r)])
    t("Rename onto a file", lambda: g.Rename(p, r))
    t("Rename overwrite", lambda: g.Rename(r, p, overwrite=True))
    t("Rename missing", lambda: g.Rename(q, r))
    t("Rename a directory", lambda: [g.Rename(j("sub"), j("sub2")), sorted(os.listdir(d))])
    t("Remove", lambda: g.Remove(p))
    t("Remove missing", lambda: g.Remove(p))
    t("Remove a directory", lambda: g.Remove(j("sub2")))
    t("DeleteRecursively", lambda: [g.DeleteRecursively(j("m")), os.path.exists(j("m"))])
    t("DeleteRecursively missing", lambda: g.DeleteRecursively(j("m")))
    t("DeleteRecursively a file", lambda: [open(p, "w").close(), g.DeleteRecursively(p),
                                           os.path.exists(p)][1:])
    t("Stat a directory", lambda: [g.Stat(d).is_directory, type(g.Stat(d).mtime_nsec).__name__])
    t("Stat a file", lambda: [g.Stat(j("s.txt")).length, g.Stat(j("s.txt")).is_directory])
    t("Stat missing", lambda: g.Stat(p))
    os.makedirs(j("w1", "w2"))
    open(j("w1", "f"), "w").close()
    t("Walk", lambda: [[x, sorted(s), sorted(f)] for x, s, f in g.Walk(j("w1"))])
    t("Walk missing", lambda: list(g.Walk(j("nope"))))
    t("Open is GFile", lambda: g.Open is g.GFile)
    t("names missing", lambda: [n for n in GFILE_NAMES if not hasattr(g, n)])
    io = tf.io.gfile
    t("io.gfile names missing", lambda: [n for n in IO_GFILE_NAMES if not hasattr(io, n)])
    t("io.gfile.makedirs listdir exists", lambda: [io.makedirs(j("v2", "a")), io.listdir(j("v2")),
                                                   io.exists(j("v2", "a")), io.isdir(j("v2"))])
    t("io.gfile.listdir missing", lambda: io.listdir(j("v3")))
    t("io.gfile.rmtree missing", lambda: io.rmtree(j("v3")))
    t("io.gfile.join", lambda: io.join("a", "b", "c.txt"))
    return rows


SCENARIOS = {"printing": printing, "failing_checks": failing_checks, "gfile": gfile}


def run_all(tf: Any) -> dict[str, list[list[Any]]]:
    out = {}
    for name, fn in SCENARIOS.items():
        with tempfile.TemporaryDirectory() as d:
            out[name] = fn(tf, os.path.realpath(d))
    return out
