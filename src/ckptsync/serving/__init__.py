"""Serving: follow a training run's checkpoints and answer TF-Serving-compatible requests.

TF Serving's nouns, one module each: :mod:`.source` (watch the directory, say which
versions exist) -> :mod:`.loader` (read + verify one checkpoint into an immutable
:class:`Snapshot`) -> :mod:`.manager` (version policy, load thread, atomic swap) ->
:mod:`.http` (the REST app ``infer serve`` runs); :mod:`.gate` is the optional user check
before a version is served; :mod:`.options` holds the frozen :class:`ManagerOptions` and
:class:`HttpOptions`. :class:`HotReloadingModel` is the in-process API.

Example:
    >>> import ckptsync as cs
    >>> with cs.serving.HotReloadingModel("model.py", "ckpts") as model:
    ...     _ = model.wait_for_version(1200, timeout_s=30)
    ...     outputs, version = model.predict({"x": x})  # x: float32 [2, 64]
    >>> version, outputs["probabilities"].shape
    (1200, (2, 10))
"""

from .gate import Candidate, Gate, load_gate
from .hot_reload import HotReloadingModel
from .http import create_app
from .loader import Snapshot, load_snapshot
from .manager import ManagerStats, ModelManager, VersionState
from .options import HttpOptions, ManagerOptions
from .policy import VersionPolicy
from .servable import GraphServable, Servable, Signature, TensorSpec, validate_inputs
from .source import AspiredVersion, AspiredVersions, CheckpointSource

__all__ = [
    "AspiredVersion",
    "AspiredVersions",
    "Candidate",
    "Gate",
    "CheckpointSource",
    "GraphServable",
    "HotReloadingModel",
    "HttpOptions",
    "ManagerOptions",
    "ManagerStats",
    "ModelManager",
    "Servable",
    "Signature",
    "Snapshot",
    "TensorSpec",
    "VersionPolicy",
    "VersionState",
    "create_app",
    "load_gate",
    "load_snapshot",
    "validate_inputs",
]
