"""The model-file contract: ``build_net(graph, device, mode) -> ModelSpec``.

A model file is a Python file defining ``build_net`` (or TF1's ``model_fn``:
:mod:`ckptsync.model_fn_file` turns one into a ``build_net``). The trainer calls it with
``mode=ModeKeys.TRAIN`` and needs ``loss`` and ``train_op``; the server calls it with
``mode=ModeKeys.PREDICT`` on its own graph and serves the signature ``inputs -> outputs``.
Both must create the same variables (same names, shapes, dtypes), so checkpoints from the
one restore into the other. Mirrors ``tf.estimator.EstimatorSpec`` / TF Serving signatures.

Example (``examples/digits_mlp.py``)::

    def build_net(graph, device, mode):
        with graph.as_default(), graph.device(device):
            x = cs.placeholder(cs.float32, [None, 64], name="x")
            ...
            return cs.ModelSpec(inputs={"x": x}, outputs={"classes": classes, ...},
                                labels={"y": y}, loss=loss, train_op=train_op)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import CkptsyncTypeError, CkptsyncValueError
from .graph import Operation, Tensor

__all__ = ["ModeKeys", "ModelSpec", "load_build_net", "load_python_file", "ModelFileError",
           "BUILD_NET_SIGNATURE", "directory_on_path"]

#: How messages name the model-file contract.
BUILD_NET_SIGNATURE = "build_net(graph, device, mode) -> ModelSpec"
#: ... and the other one (ckptsync.model_fn_file).
MODEL_FN_SIGNATURE = "model_fn(features, labels, mode, params) -> tf.estimator.EstimatorSpec"

log = logging.getLogger("ckptsync.model_spec")


class ModeKeys:
    """Why ``build_net`` is called, as ``tf.estimator.ModeKeys``."""

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"


@dataclass(frozen=True)
class ModelSpec:
    """What ``build_net`` returns.

    Attributes:
        inputs: name -> placeholder, e.g. ``{"x": <[None, 64] float32>}``; the serving
            signature's inputs and the trainer's feature feeds.
        outputs: name -> tensor served for each input row, e.g. ``{"classes": [None] int64,
            "probabilities": [None, 10] float32}``.
        labels: name -> label placeholder (TRAIN/EVAL), e.g. ``{"y": [None] int64}``.
        loss: scalar float tensor (TRAIN/EVAL).
        train_op: op or tensor that runs one training step (TRAIN).
    """

    inputs: Mapping[str, Tensor]
    outputs: Mapping[str, Tensor]
    labels: Mapping[str, Tensor] | None = None
    loss: Tensor | None = None
    train_op: Operation | Tensor | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for field_name in ("inputs", "outputs"):
            m = getattr(self, field_name)
            if not isinstance(m, Mapping) or not m:
                raise CkptsyncTypeError(
                    f"ModelSpec.{field_name} must be a non-empty dict of name -> Tensor, got {m!r}.")
            for k, v in m.items():
                if not isinstance(v, Tensor):
                    raise CkptsyncTypeError(
                        f"ModelSpec.{field_name}[{k!r}] must be a Tensor, got {type(v).__name__}.")
        if self.labels is not None and not isinstance(self.labels, Mapping):
            raise CkptsyncTypeError(f"ModelSpec.labels must be a dict, got {self.labels!r}.")

    def require_training(self) -> None:
        """Raises ``ValueError`` unless ``loss``, ``train_op`` and ``labels`` are set."""
        missing = [n for n in ("loss", "train_op", "labels") if getattr(self, n) is None]
        if missing:
            raise ModelFileError(
                f"build_net in TRAIN mode must return a ModelSpec with {', '.join(missing)} set.")


class ModelFileError(CkptsyncValueError):
    """A model file that is missing, fails to import, or lacks ``build_net``."""


@contextlib.contextmanager
def directory_on_path(path: str | os.PathLike[str]) -> Iterator[None]:
    """Puts the directory of the file ``path`` first on ``sys.path`` for the block (as
    ``python FILE`` does), so the file can ``import`` its siblings; removes that entry
    afterwards (unless it was there already).

    The siblings imported meanwhile (a ``helpers.py`` or ``helpers/`` package beside the
    file) belong to that directory: they leave ``sys.modules`` at the block's end and
    come back for the next block of the same directory, so two model files in two
    directories each get their own ``helpers`` (a server of several models), and the
    module objects a file bound stay the ones it imported. Other modules imported
    meanwhile (numpy, the standard library) stay imported.

    Thread-safety: ``sys.path`` and ``sys.modules`` are process-wide; a block running in
    another thread sees the entry and the siblings too.
    """
    directory = os.path.dirname(os.path.abspath(os.fspath(path)))
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    own = _SIBLINGS.setdefault(directory, {})
    outermost = directory not in _ACTIVE
    hidden: dict[str, Any] = {}
    if outermost:  # a block inside one of the same directory changes nothing
        _ACTIVE.add(directory)
        names = _sibling_names() | _shadowed(directory) | set(own)
        hidden = {name: sys.modules.pop(name) for name in names
                  if name in sys.modules and sys.modules[name] is not own.get(name)}
        sys.modules.update(own)
    before = set(sys.modules)
    try:
        yield
    finally:
        if outermost:
            _ACTIVE.discard(directory)
            for name in set(sys.modules) - before:
                if _is_sibling(name, sys.modules[name], directory):
                    own[name] = sys.modules[name]
            for name in own:
                sys.modules.pop(name, None)
            sys.modules.update(hidden)
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(directory)


# directory -> {module name: module}: the siblings each user file's directory imported;
# the directories whose block is running.
_SIBLINGS: dict[str, dict[str, Any]] = {}
_ACTIVE: set[str] = set()


def _sibling_names() -> set[str]:
    return {name for modules in _SIBLINGS.values() for name in modules}


def _shadowed(directory: str) -> set[str]:
    """Names of modules imported from elsewhere (not an installed library nor the
    standard library) that a file of ``directory`` would be, were it imported first:
    ``python FILE`` would import the sibling, so the block does too."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return set()
    names = {e[:-3] for e in entries if e.endswith(".py")} | {
        e for e in entries if os.path.isfile(os.path.join(directory, e, "__init__.py"))}
    libraries = tuple({os.path.abspath(p) + os.sep for p in (sys.prefix, sys.base_prefix)})
    out = set()
    for name in names & set(sys.modules):
        file = getattr(sys.modules[name], "__file__", None)
        if file and not os.path.abspath(file).startswith(libraries) \
                and not _is_sibling(name, sys.modules[name], directory):
            out.add(name)
    return out


def _is_sibling(name: str, module: Any, directory: str) -> bool:
    """Whether ``module`` was found in ``directory`` itself (``<dir>/<top>.py`` or the
    package ``<dir>/<top>/``), not in a library below it (a ``.venv`` inside it)."""
    file = getattr(module, "__file__", None)
    if not file:
        return False
    top = os.path.join(directory, name.split(".")[0])
    file = os.path.abspath(file)
    return file == top + ".py" or file.startswith(top + os.sep)


def load_python_file(path: str | os.PathLike[str], what: str,
                     error: type[Exception] = CkptsyncValueError) -> Any:
    """Imports a user's Python file (a model file, a gate) as a fresh module, with its
    directory on ``sys.path`` meanwhile (:func:`directory_on_path`: ``import helpers``
    finds ``helpers.py`` next to it).

    Args:
        path: the ``.py`` file.
        what: how messages name it, e.g. ``"Model file"``.
        error: the exception type raised.

    Raises:
        error: the file is missing, not Python, or raises while it is imported.
    """
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise error(f"{what} not found: {p}")
    # Named after the file and its path: two model.py files of two models are two modules.
    stem = os.path.splitext(os.path.basename(p))[0].replace("-", "_")
    digest = hashlib.sha1(os.path.abspath(p).encode("utf-8", "surrogateescape")).hexdigest()
    name = f"ckptsync_user_{stem}_{digest[:8]}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise error(f"{what} {p} is not a Python file (expected a .py file).")
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules[name] = module
        with directory_on_path(p), _own_argv(p):
            spec.loader.exec_module(module)
        _parse_file_flags(p)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a user's file may raise anything
        sys.modules.pop(name, None)
        raise error(f"{what} {p} failed to import: {type(e).__name__}: {e}") from e
    return module


@contextlib.contextmanager
def _own_argv(path: str) -> Iterator[None]:
    """``sys.argv`` is ``[path]`` meanwhile: the host's command line (``trainer run
    --model ...``) is not the file's, so a ``tf.app.flags.FLAGS.x`` read at import (which
    parses ``sys.argv`` as TF's) sees no flags it does not know."""
    saved = sys.argv
    sys.argv = [path]
    try:
        yield
    finally:
        sys.argv = saved


def _parse_file_flags(path: str) -> None:
    """A file that defines ``tf.app.flags`` is run without its ``tf.app.run``: its flags
    are parsed now from ``[path]`` (they keep their defaults), so a read later (in
    ``model_fn``) does not parse the host's command line and fail on its flags."""
    flags = sys.modules.get("ckptsync.flags")
    if flags is not None and not flags.FLAGS.is_parsed():
        flags.FLAGS([path])


def load_build_net(path: str | os.PathLike[str]) -> Callable[..., ModelSpec]:
    """Imports a model file and returns its ``build_net``, checked to accept
    ``(graph, device, mode)``; for a file that defines ``model_fn(features, labels, mode,
    params)`` and no ``build_net``, the ``build_net`` over it
    (:class:`ckptsync.model_fn_file.ModelFnNet`). A file defining both is run through
    ``build_net``.

    The function returned runs ``build_net`` with the file's directory on ``sys.path``
    (an ``import`` inside ``build_net`` finds the file's siblings too); its signature is
    ``build_net``'s (``inspect.signature`` sees through it).

    Args:
        path: a ``.py`` file defining ``build_net(graph, device, mode)`` or ``model_fn``.

    Raises:
        ModelFileError: the file is missing, not Python, raises on import, defines no
            callable ``build_net`` nor ``model_fn``, a ``model_fn`` TF's Estimator could
            not call (:func:`ckptsync.model_fn_file.model_fn_net`), or a ``build_net`` that cannot be called as ``build_net(graph,
            device, mode)`` (the one-line message names the expected signature and the
            file's).
    """
    p = os.fspath(path)
    module = load_python_file(p, "Model file", ModelFileError)
    fn = getattr(module, "build_net", None)
    if fn is None and hasattr(module, "model_fn"):
        # Deferred: model_fn_file builds ModelSpecs, so it imports this module (a cycle).
        from .model_fn_file import model_fn_net

        log.debug("Model file %s: model_fn(features, labels, mode, params) (the Estimator "
                  "contract).", p)
        return model_fn_net(module, p)
    if not callable(fn):
        raise ModelFileError(f"Model file {p} defines no {BUILD_NET_SIGNATURE} function "
                             f"(nor {MODEL_FN_SIGNATURE}).")
    if hasattr(module, "model_fn"):
        log.info("Model file %s defines build_net and model_fn: build_net is used.", p)
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable: no signature to check
        signature = None
    if signature is not None:
        try:
            signature.bind(None, None, None)
        except TypeError as e:
            raise ModelFileError(
                f"build_net in {p} has the signature build_net{signature}, which cannot be "
                f"called as {BUILD_NET_SIGNATURE} ({e}).") from None

    @functools.wraps(fn)
    def build_net(*args: Any, **kwargs: Any) -> ModelSpec:
        with directory_on_path(p):
            return fn(*args, **kwargs)  # type: ignore[no-any-return]

    return build_net
