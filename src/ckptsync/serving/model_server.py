"""Many models in one server: TF Serving's ``ServerCore`` over a ``model_config_list``.

A :class:`ModelServer` holds one :class:`~.served_model.ServedModel` per configured model,
each with, per version it serves (one for ``latest``, one per ``specific`` version), its
own servable (graph), :class:`~.manager.ModelManager` (source, loader, version policy),
REST app (:func:`.http.create_app`), gRPC servicer and batch scheduler, exactly as a
one-model server has them; the dispatchers (:mod:`.server_app` for HTTP,
:class:`.grpc_api.ModelServerGrpc`) route each request by the model's name. So every
model keeps the hot-swap guarantees of the one-model path, and a model that is slow to
load, broken or reloading never holds up another (a slow forward does: small requests'
forwards run on the event loop, as in a one-model server).

:meth:`ModelServer.reload` applies a new config as TF Serving's ``ReloadConfig`` does,
all or nothing: new models are built and started first; if any fails, nothing changes.
Then kept models take their new versions and labels in place (a model is rebuilt only
when its ``base_path`` or ``model_file`` changes; a new version gets a manager of its own
or a re-pinned one, see :mod:`.served_model`), and removed or replaced models and unused
versions are closed after the switch (requests already in them finish on their snapshot).

Version labels follow TF Serving's rule: a label moves only to an AVAILABLE version. A
label set to a version that is not served yet stays where it was (unset, for a new label)
and moves the moment that version is served; :meth:`ModelServer.reload` returns such
labels as warnings. (TF Serving refuses the whole reload instead; a checkpoint stream
makes "not yet" the usual case, so ckptsync waits.)

Thread-safety: :meth:`ModelServer.reload` and :meth:`ModelServer.close` serialize on one
lock; :meth:`ModelServer.model` and ``ServedModel.resolve_label`` may be called from
any thread at any time (the model table is replaced whole, never changed in place).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from .batching import BatchingOptions
from .manager import ManagerOptions
from .model_config import ModelConfigEntry, read_model_config_file
from .options import HttpOptions
from .served_model import LabelWait, ServedModel, SlotPlan, VersionSlot

__all__ = ["ModelBuildError", "ModelServer", "ServedModel", "ServerOptions"]

logger = logging.getLogger("ckptsync.serving.model_server")


@dataclass(frozen=True)
class ServerOptions:
    """What every model of a :class:`ModelServer` shares (the server's flags).

    Attributes:
        device: the device of every model's graph (``cpu:0``).
        manager: each model's :class:`~.manager.ManagerOptions`.
        http: the REST and gRPC caps and the admin token (:class:`~.options.HttpOptions`).
        batching: request batching per model (None: off).
        grpc: build each model's gRPC servicer.
        summary_dir: TensorBoard summaries of each model under ``<summary_dir>/<name>``
            (None: none).
        replace_wait_s: how long a reload waits for a replaced model (a new
            ``base_path`` or ``model_file``) to serve before it gives up, seconds.
        build_warn_s: a model file still importing or building after this many seconds
            is logged as a warning (config reloads wait for it).
    """

    device: str = "cpu:0"
    manager: ManagerOptions = field(default_factory=ManagerOptions)
    http: HttpOptions = field(default_factory=HttpOptions)
    batching: BatchingOptions | None = None
    grpc: bool = True
    summary_dir: str | None = None
    replace_wait_s: float = 30.0
    build_warn_s: float = 30.0


class ModelBuildError(RuntimeError):
    """A configured model cannot be built or started; ``cause`` is why (a
    ``ModelFileError`` for a broken model file), ``name`` the model."""

    def __init__(self, name: str, model_file: str, cause: BaseException):
        super().__init__(f'model "{name}": cannot build the model from {model_file}: {cause}')
        self.name, self.cause = name, cause


class ModelServer:
    """The models of a server, by name, and their config reloads.

    Args:
        options: what every model shares.
        build_servable: ``(model_file, device) -> servable`` (default
            ``GraphServable.from_model_file``; it raises ``ModelFileError`` for a broken file).

    Thread-safety: see the module docstring.
    """

    def __init__(self, options: ServerOptions | None = None,
                 build_servable: Callable[[str, str], Any] | None = None):
        self.options = options or ServerOptions()
        if build_servable is None:
            from .servable import GraphServable  # the session runtime: only when building

            build_servable = GraphServable.from_model_file
        self._build = build_servable
        self._models: dict[str, ServedModel] = {}
        self._reload_lock = threading.Lock()  # one reload at a time
        self._table_lock = threading.Lock()  # the table, the counters, the close
        self._closing = threading.Event()
        self._watcher: threading.Thread | None = None
        #: Config applications by result (a file that does not parse is a failure).
        self.reloads = {"success": 0, "failure": 0}
        self.last_reload_error: str | None = None
        # (name, model_file, monotonic start) of the model a reload is building, or None.
        self.building: tuple[str, str, float] | None = None

    @property
    def models(self) -> Mapping[str, ServedModel]:
        """The served models by name (a snapshot: later reloads do not change it)."""
        return self._models

    def model(self, name: str) -> ServedModel | None:
        """The model named ``name``, or None."""
        return self._models.get(name)

    def reload(self, entries: list[ModelConfigEntry], wait_s: float | None = None
               ) -> list[str]:
        """Serves exactly ``entries`` (TF Serving's ``ReloadConfig``), all or nothing.

        A model whose ``base_path`` or ``model_file`` changed is rebuilt and swapped in
        only once it serves a version (within ``options.replace_wait_s``), so its
        requests never see it unloaded.

        Returns:
            Warnings: labels waiting for their version to be AVAILABLE, pins to versions
            not on disk.

        Raises:
            ModelBuildError: a new model's graph cannot be built (whatever the model file
                raised, ``SystemExit`` included), or its manager cannot start (nothing
                changed).
            UnavailableError: a replaced model's new version did not load in time
                (nothing changed); or, with ``wait_s``, another reload still runs after
                that many seconds (it names the model it is building, and since when).
            FailedPreconditionError: the server is closed or closing.
        """
        if not self._reload_lock.acquire(timeout=-1 if wait_s is None else wait_s):
            building = self.building
            doing = "" if building is None else (
                f': building model "{building[0]}" from {building[1]} for '
                f"{time.monotonic() - building[2]:.0f} s (its import or build_net has not "
                "returned)")
            raise errors.UnavailableError(None, None, "another model config reload is in "
                                          f"progress{doing}; try again when it ends")
        try:
            self._check_open()
            try:
                warnings = self._apply(entries)
            except BaseException as e:
                self._count_failure(str(e))
                raise
            with self._table_lock:
                self.reloads["success"] += 1
                self.last_reload_error = None
            return warnings
        finally:
            self._reload_lock.release()

    def _check_open(self) -> None:
        if self._closing.is_set():
            raise errors.FailedPreconditionError(None, None, "the model server is closed")

    def _count_failure(self, message: str) -> None:
        with self._table_lock:
            self.reloads["failure"] += 1
            self.last_reload_error = message

    def _apply(self, entries: list[ModelConfigEntry]) -> list[str]:
        current = self._models
        built: dict[str, ServedModel] = {}
        plans: dict[str, SlotPlan] = {}  # how kept models take their new entries
        try:
            for entry in entries:
                old = current.get(entry.name)
                self._check_open()  # a SIGTERM stops a long reload between models
                self.building = (entry.name, entry.model_file, time.monotonic())
                slow = threading.Timer(self.options.build_warn_s, _warn_slow, (entry,
                                       self.options.build_warn_s))
                slow.daemon = True
                slow.start()
                try:
                    with _building(entry):
                        if old is None or not old.entry.same_graph(entry):
                            built[entry.name] = ServedModel(entry, self.options, self._build,
                                                            self._check_open).start()
                        else:
                            plans[entry.name] = old.build_slots(entry, self._build,
                                                                self._check_open)
                finally:
                    slow.cancel()
                    self.building = None
            for name, model in built.items():
                if name in current:  # a replacement: only once it serves
                    self._wait_served(model)
            with self._table_lock:
                self._check_open()
                warnings, unused = self._install(entries, current, built, plans)
        except BaseException:
            for model in built.values():
                model.close()
            for plan in plans.values():
                plan.close_built()
            raise
        plans.clear()  # they name the slots to close: none may outlive the closing
        removed = [name for name, old in current.items() if self._models.get(name) is not old]
        for name in removed:
            logger.info('model "%s" %s', name, "replaced (its base_path or model_file "
                        "changed)" if name in self._models else "removed from the config: "
                        "unloaded")
            current[name].close()
        freed = bool(removed or unused)
        while unused:
            name, slot = unused.pop()
            logger.info('model "%s": unloaded %s (no longer in its model_version_policy)',
                        name, "latest" if slot.policy is None else f"version {slot.policy}")
            slot.close()
            del slot
        del current  # the last reference to the old table
        if freed:  # an app and its manager refer to each other: free them now
            gc.collect()
        for name in built:
            logger.info('model "%s" added: serving %s from %s', name,
                        self._models[name].entry.model_file, self._models[name].entry.base_path)
        # (a label's version may have become AVAILABLE meanwhile: its move is logged)
        warnings = [w for w in warnings if not isinstance(w, LabelWait) or w.still_waits()]
        for w in warnings:
            logger.warning("%s", w)
        return warnings

    def _install(self, entries: list[ModelConfigEntry], current: dict[str, ServedModel],
                 built: dict[str, ServedModel], plans: dict[str, SlotPlan]
                 ) -> tuple[list[str], list[tuple[str, VersionSlot]]]:
        """Makes the new table the served one; returns its warnings and the kept models'
        slots no longer used (to close)."""
        warnings: list[str] = []
        unused: list[tuple[str, VersionSlot]] = []
        table: dict[str, ServedModel] = {}
        for entry in entries:
            model = built.get(entry.name)
            if model is None:  # kept: its versions and labels change in place
                model = current[entry.name]
                more, spare = model.apply(plans[entry.name])
                warnings += more
                unused += [(entry.name, slot) for slot in spare]
            else:
                warnings += model.set_labels(entry.version_labels)
            table[entry.name] = model
        self._models = table  # one assignment: a reader sees the old table or the new
        return warnings, unused

    def _wait_served(self, model: ServedModel) -> None:
        deadline = time.monotonic() + self.options.replace_wait_s
        while not model.served_versions():
            self._check_open()
            if time.monotonic() > deadline:
                raise errors.UnavailableError(
                    None, None, f'model "{model.name}": its new base_path or model_file '
                    f"served no version within {self.options.replace_wait_s:g} s "
                    f"({model.manager.not_ready_reason()}); the old one keeps serving")
            try:
                model.slots[0].manager.wait_for_version(0, timeout_s=0.1)
            except errors.DeadlineExceededError:
                pass

    def watch_config_file(self, path: str, poll_wait_s: float) -> None:
        """Reloads the config from ``path`` whenever it changes (checked every
        ``poll_wait_s`` seconds, as TF Serving's ``--model_config_file_poll_wait_seconds``),
        in a daemon thread until :meth:`close`. A file that fails to read or parse, or a
        reload that fails (whatever the model file raised), is logged and leaves the
        models as they were; the watching goes on."""
        def signature() -> tuple[int, int, int] | None:
            try:
                st = os.stat(path)
            except OSError:
                return None
            return st.st_mtime_ns, st.st_size, st.st_ino

        def loop() -> None:
            seen = signature()
            while not self._closing.wait(poll_wait_s):
                now = signature()
                if now == seen:
                    continue
                seen = now
                try:
                    try:
                        entries = read_model_config_file(path)
                    except errors.InvalidArgumentError as e:
                        self._count_failure(e.message)
                        raise
                    warnings = self.reload(entries)
                except errors.FailedPreconditionError:
                    if self._closing.is_set():
                        return
                    logger.error("the model config file %s was not applied", path)
                except BaseException as e:  # noqa: BLE001 - a model file may raise anything
                    logger.error("the model config file %s was not applied; the models "
                                 "stay as they were: %s", path, e)
                else:
                    logger.info("applied the model config file %s: serving %s (%d warnings)",
                                path, ", ".join(self._models), len(warnings))

        self._watcher = threading.Thread(target=loop, name="ckptsync-model-config",
                                         daemon=True)
        self._watcher.start()

    def close(self) -> None:
        """Stops the config watcher and closes every model; idempotent. Bounded: a reload
        in progress (even one stuck in a model file's import) is not waited for; it
        closes what it built when it ends."""
        self._closing.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=1.0)
        with self._table_lock:
            models, self._models = self._models, {}
        for model in models.values():
            model.close()


def _warn_slow(entry: ModelConfigEntry, after_s: float) -> None:
    logger.warning('model "%s": its model file %s is still importing or building after '
                   "%.0f s (an import or build_net that does not return?); model config "
                   "reloads wait for it (SIGTERM still stops the server)", entry.name,
                   entry.model_file, after_s)


@contextlib.contextmanager
def _building(entry: ModelConfigEntry) -> Iterator[None]:
    """What building ``entry``'s graphs or starting its managers raises, as a
    :class:`ModelBuildError` (a model file may raise anything, ``SystemExit`` too); a
    closing server's ``FailedPreconditionError`` as it is."""
    try:
        yield
    except errors.FailedPreconditionError:
        raise
    except BaseException as e:  # noqa: BLE001 - a model file may raise anything
        raise ModelBuildError(entry.name, entry.model_file, e) from e
