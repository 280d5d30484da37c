"""In-process hot reloading: a model that follows a training run's checkpoints.

For code that wants the parameters in its own process rather than over HTTP — e.g. an RL
actor pulling weights from a learner that saves checkpoints into a shared directory.

Example:
    >>> import ckptsync as cs
    >>> with cs.serving.HotReloadingModel("model.py", "ckpts") as model:
    ...     _ = model.wait_for_version(1200, timeout_s=30)
    ...     outputs, version = model.predict({"x": x})  # x: float32 [batch, 64]
    >>> version, outputs["classes"].shape
    (1200, (2,))
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .manager import ModelManager
from .options import ManagerOptions, apply_overrides
from .policy import VersionPolicy
from .servable import GraphServable, Servable, validate_inputs

__all__ = ["HotReloadingModel"]


class HotReloadingModel:
    """A model whose parameters follow the newest checkpoint in ``checkpoint_dir``.

    Args:
        model: a model-file path (defining ``build_net``), a ``build_net(graph, device,
            mode)`` callable, or a ready :class:`~ckptsync.serving.Servable`.
        checkpoint_dir: the directory the trainer saves into (may not exist yet).
        device: TF device name the PREDICT graph is built on, e.g. ``"cpu:0"``.
        poll: watch by polling (NFS, no inotify); None: as ``options`` says (False).
        policy: ``"latest"`` or a pinned version.
        rescan_interval_s: backstop rescan period, seconds; None: as ``options`` (1.0).
        allow_nonfinite: accept checkpoints holding NaN/Inf; None: as ``options`` (False).
        options: the manager's :class:`~.options.ManagerOptions` (None: the defaults).
        **manager_kwargs: further :class:`~.options.ManagerOptions` fields, applied over
            ``options`` (``gate``, ``max_load_attempts``, ``load_timeout_s``,
            ``free_before_load``, retry delays, ...).

    Raises:
        TypeError: ``model`` is none of the three kinds, or an unknown option.
        ValueError: an option out of range.

    Thread-safety: ``predict`` may be called from many threads at once; each call runs on
    one snapshot. Loading happens on a background thread, started here; call
    :meth:`close` (or use ``with``) to stop it.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | Callable[..., Any] | Servable,
        checkpoint_dir: str | os.PathLike[str],
        device: str = "cpu:0",
        poll: bool | None = None,
        policy: str | int | VersionPolicy = "latest",
        rescan_interval_s: float | None = None,
        allow_nonfinite: bool | None = None,
        *,
        options: ManagerOptions | None = None,
        **manager_kwargs: Any,
    ):
        given = {"poll": poll, "rescan_interval_s": rescan_interval_s,
                 "allow_nonfinite": allow_nonfinite}
        manager_kwargs.update({k: v for k, v in given.items() if v is not None})
        # Validated before the servable is built, so a bad option leaks no session.
        options = apply_overrides(ManagerOptions, options, manager_kwargs, "HotReloadingModel")
        self._owns_servable = not isinstance(model, Servable)
        if isinstance(model, Servable):
            self.servable = model
        elif isinstance(model, (str, os.PathLike)):
            self.servable = GraphServable.from_model_file(model, device)
        elif callable(model):
            self.servable = GraphServable(model, device)
        else:
            raise TypeError(
                f"model must be a model-file path, a build_net callable or a Servable, "
                f"got {type(model).__name__}"
            )
        self.manager = ModelManager(
            self.servable, checkpoint_dir, policy, options=options
        ).start()

    def predict(self, inputs: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        """Runs the signature on the version being served.

        Args:
            inputs: input key -> array-like, shapes as the signature says (``[batch, ...]``).

        Returns:
            (output key -> array, the version that computed them).

        Raises:
            InvalidArgumentError: inputs do not match the signature.
            UnavailableError: no checkpoint has been loaded yet.
        """
        arrays = validate_inputs(self.servable.signature, inputs)
        snap = self.manager.acquire()
        return self.servable.run(snap.params, arrays), snap.version

    @property
    def version(self) -> int | None:
        """The version being served, or None before the first load."""
        return self.manager.version

    def wait_for_version(self, step: int, timeout_s: float) -> int:
        """Blocks until a version >= ``step`` is served; returns that version.

        Raises:
            DeadlineExceededError: not within ``timeout_s`` seconds.
        """
        return self.manager.wait_for_version(step, timeout_s).version

    def pin(self, version: int, timeout_s: float = 10.0) -> int:
        """Serves ``version`` only (a rollback) once it has loaded; see ``ModelManager.pin``."""
        return self.manager.pin(version, timeout_s).version

    def unpin(self) -> None:
        """Follows the latest checkpoint again."""
        self.manager.unpin()

    def status(self) -> list[dict[str, Any]]:
        """TF Serving's ``model_version_status`` list (see ``ModelManager.status``)."""
        return self.manager.status()

    def close(self) -> None:
        """Stops watching and loading (and closes a servable built here). Idempotent."""
        self.manager.close()
        close = getattr(self.servable, "close", None)
        if self._owns_servable and callable(close):
            close()

    def __enter__(self) -> HotReloadingModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
