"""The ``tensorboard`` package, imported on first use: it is the optional extra
``ckptsync[tensorboard]`` (``scripts/setup`` installs it), so ``import ckptsync`` and
graph building never need it; running a summary op or opening a ``FileWriter`` does."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

__all__ = ["proto", "event_file_writer", "tensor_util"]

_HINT = ("ckptsync's summaries need the tensorboard package: pip install 'ckptsync[tensorboard]' "
         "(or pip install tensorboard)")


def _load(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{_HINT}; importing {module} failed: {e}") from e


def proto(name: str) -> Any:
    """A message class of ``tensorboard.compat.proto``: ``proto("summary_pb2.Summary")``."""
    mod, _, cls = name.partition(".")
    return getattr(_load(f"tensorboard.compat.proto.{mod}"), cls)


def event_file_writer() -> Any:
    """``tensorboard.summary.writer.event_file_writer.EventFileWriter``."""
    return _load("tensorboard.summary.writer.event_file_writer").EventFileWriter


def tensor_util() -> ModuleType:
    """``tensorboard.util.tensor_util`` (``make_tensor_proto``)."""
    return _load("tensorboard.util.tensor_util")
