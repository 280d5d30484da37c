"""One model of a many-model server: its versions, each on a manager of its own, and its
version labels.

A model whose ``model_version_policy`` is ``latest`` has one :class:`VersionSlot`, a
manager following the newest checkpoint. One with ``specific { versions: 1200 versions:
1300 }`` has a slot per version, each a manager pinned to it, with its own graph, REST
app, gRPC servicer and batch scheduler, so each version keeps every hot-swap guarantee of
a one-model server and a batch never mixes two versions. Requests go to a slot by version
(TF Serving's rules): a request naming a version goes to the slot serving it; one naming a
label, to the slot serving the label's version; one naming neither, to the newest version
served. Status (``GET /v1/models/{m}``, ``GetModelStatus``, the v2 model metadata) lists
every version of every slot.

A config reload that changes the versions keeps the slots of versions still named, re-pins
slots of versions no longer named to new ones in place (one manager loads the new version
while the old one keeps serving, as a one-version change always did) and builds slots only
for versions beyond those; slots left over are closed after the switch.

Version labels follow TF Serving's rule: a label moves only to an AVAILABLE version (one a
slot serves). A label set to a version not served yet stays where it was (unset, for a
new label) and moves the moment that version is served.

Thread-safety: :meth:`ServedModel.slot_for`, :meth:`ServedModel.resolve_label` and the
status calls may run on any thread at any time (the slots are replaced whole, never
changed in place); :meth:`ServedModel.apply` is called by one reload at a time.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import errors
from .manager import ModelManager
from .model_config import ModelConfigEntry

if TYPE_CHECKING:
    from .model_server import ServerOptions

__all__ = ["LabelWait", "ServedModel", "SlotPlan", "VersionSlot"]

logger = logging.getLogger("ckptsync.serving.model_server")

# When one version has several records (two slots saw it), the most served state wins.
_STATE_RANK = {"AVAILABLE": 0, "LOADING": 1, "UNLOADING": 2, "START": 3, "END": 4}
_ENDED_KEPT = 64


class LabelWait(str):
    """The warning that a version label waits for its version to be AVAILABLE (a str);
    :meth:`still_waits` says whether it still does (a reload logs it only then)."""

    model: ServedModel
    label: str

    def __new__(cls, text: str, model: ServedModel, label: str) -> LabelWait:
        self = super().__new__(cls, text)
        self.model, self.label = model, label
        return self

    def still_waits(self) -> bool:
        return self.model._move(self.label) is not None


class VersionSlot:
    """One manager of a model and what serves it: REST app, gRPC servicer, summaries.

    Attributes:
        policy: the manager's version policy as configured: None (latest) or the version
            it is pinned to.
        manager: its :class:`~.manager.ModelManager` (started by :meth:`start`).
        app: its REST app (:func:`.http.create_app`).
        grpc: its :class:`~.grpc_api.TfServingGrpc`, or None without gRPC.
    """

    def __init__(self, entry: ModelConfigEntry, policy: int | None, options: ServerOptions,
                 build_servable: Callable[[str, str], Any], summary_dir: str | None):
        from .http import create_app  # starlette: here so the module imports light

        self.policy = policy
        servable = build_servable(entry.model_file, options.device)
        self.manager = ModelManager(servable, entry.base_path,
                                    "latest" if policy is None else policy,
                                    options=options.manager)
        self.manager.pinned_by_config = policy is not None
        self.app = create_app(self.manager, entry.name, options=options.http,
                              batching=options.batching)
        self.grpc: Any = None
        if options.grpc:
            from .grpc_api import TfServingGrpc  # grpcio: only with gRPC on

            self.grpc = TfServingGrpc(self.manager, entry.name, options.http,
                                      self.app.state.registry, self.app.state.batcher)
        self._summary_dir = summary_dir
        self._summaries: Any = None

    def start(self) -> VersionSlot:
        """Starts the manager (and the summaries). Raises OSError for an unwritable
        summary directory."""
        self.manager.start()
        if self._summary_dir is not None:
            from .summaries import ServingSummaries  # the tensorboard package: only here

            self._summaries = ServingSummaries(self.manager, self._summary_dir,
                                               self.app.state.registry).start()
        return self

    def close(self) -> None:
        """Stops the batcher, the summaries and the manager; idempotent."""
        batcher = self.app.state.batcher
        if batcher is not None:
            batcher.close()
        if self._summaries is not None:
            self._summaries.close()
            self._summaries = None
        self.manager.close()


@dataclass
class SlotPlan:
    """How a kept model takes a new config entry (see :meth:`ServedModel.build_slots`).

    Attributes:
        entry: the new entry.
        kept: policy -> the slot that keeps it.
        repin: (slot, its new policy) for slots moved to another version.
        new: the policies that need a new slot; ``built`` holds them once built.
        spare: the slots no longer used (closed after the switch).
    """

    entry: ModelConfigEntry
    kept: dict[int | None, VersionSlot] = field(default_factory=dict)
    repin: list[tuple[VersionSlot, int | None]] = field(default_factory=list)
    new: list[int | None] = field(default_factory=list)
    built: dict[int | None, VersionSlot] = field(default_factory=dict)
    spare: list[VersionSlot] = field(default_factory=list)

    def close_built(self) -> None:
        """Closes the slots built for it (the reload failed)."""
        for slot in self.built.values():
            slot.close()


class ServedModel:
    """One model of a :class:`~.model_server.ModelServer`: its slots and labels.

    Args:
        entry: the model's config.
        options: the server's options.
        build_servable: ``(model_file, device) -> servable``.
        check: runs before each version's graph is built (it raises to stop a reload
            the server is closing).

    Attributes:
        entry: its :class:`~.model_config.ModelConfigEntry` (the last one applied).
        slots: its :class:`VersionSlot` s, in ``entry.policies()`` order (a tuple,
            replaced whole by a reload).
    """

    def __init__(self, entry: ModelConfigEntry, options: ServerOptions,
                 build_servable: Callable[[str, str], Any],
                 check: Callable[[], None] = lambda: None):
        self.entry = entry
        self._options = options
        self._lock = threading.Lock()
        self._wanted: dict[str, int] = {}
        self._labels: dict[str, int] = {}
        self._closed = threading.Event()
        self._label_thread: threading.Thread | None = None
        # The last status of each version a closed slot served (END), as TF Serving
        # keeps an unloaded version in GetModelStatus; the newest _ENDED_KEPT.
        self._ended: dict[str, dict[str, Any]] = {}
        built: list[VersionSlot] = []
        try:
            for i, policy in enumerate(entry.policies()):
                check()
                built.append(self._slot(policy, i == 0, build_servable))
        except BaseException:
            for slot in built:
                slot.close()
            raise
        self.slots: tuple[VersionSlot, ...] = tuple(built)
        self.set_labels(entry.version_labels)

    def _slot(self, policy: int | None, first: bool,
              build_servable: Callable[[str, str], Any]) -> VersionSlot:
        """A new slot, its hooks set (not started). Summaries: the model's first slot
        writes ``<summary_dir>/<name>``, each further one ``.../<name>/version_<N>``."""
        summary_dir = self._options.summary_dir
        if summary_dir is not None:
            summary_dir = os.path.join(summary_dir, self.name)
            if not first:
                summary_dir = os.path.join(summary_dir, f"version_{policy}")
        slot = VersionSlot(self.entry, policy, self._options, build_servable, summary_dir)
        api = slot.app.state.api
        api.version_status, api.served_versions = self.version_status, self.served_versions
        if slot.grpc is not None:
            slot.grpc.resolve_label = self.resolve_label
            slot.grpc.version_status = self.version_status
        return slot

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def manager(self) -> ModelManager:
        """The manager of the newest version served (where a request naming no version
        goes), or of the first slot while none serves."""
        return self.default_slot().manager

    def start(self) -> ServedModel:
        """Starts every slot. Raises OSError for an unwritable summary directory (the
        model closed)."""
        try:
            for slot in self.slots:
                slot.start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Closes every slot; idempotent."""
        self._closed.set()
        if self._label_thread is not None and self._label_thread is not threading.current_thread():
            self._label_thread.join(timeout=10)
        for slot in self.slots:
            slot.close()

    # -- routing -------------------------------------------------------------------------
    def default_slot(self) -> VersionSlot:
        """The slot serving the newest version (TF Serving's "latest" of what is
        AVAILABLE), or the first slot while none serves."""
        slots = self.slots
        if len(slots) == 1:
            return slots[0]
        best, best_version = slots[0], -1
        for slot in slots:
            version = slot.manager.version
            if version is not None and version > best_version:
                best, best_version = slot, version
        return best

    def slot_for(self, version: int | None) -> VersionSlot:
        """The slot for a request naming ``version`` (None: the newest served): the slot
        serving it, else the slot pinned to it, else the default slot (for status routes;
        the dispatchers answer a predict for a version none serves with
        :meth:`not_served`)."""
        slots = self.slots
        if version is None or len(slots) == 1:
            return self.default_slot()
        for slot in slots:
            if slot.manager.version == version:
                return slot
        for slot in slots:
            if slot.policy == version:
                return slot
        return self.default_slot()

    def not_served(self, version: int) -> str | None:
        """For a model of several versions: why a request for ``version`` finds nothing
        (no slot serves it), naming the versions served; else None."""
        slots = self.slots
        if len(slots) == 1 or any(s.manager.version == version for s in slots):
            return None
        served = ", ".join(map(str, self.served_versions())) or "nothing"
        if any(s.policy == version for s in slots):
            return (f"version {version} is not loaded yet (its model_version_policy names "
                    f"it; serving versions {served})")
        return f"version {version} is not being served (serving versions {served})"

    def served_versions(self) -> list[int]:
        """The versions served now, newest first."""
        return sorted({v for v in (s.manager.version for s in self.slots) if v is not None},
                      reverse=True)

    def version_status(self, version: int | None = None) -> list[dict[str, Any]]:
        """TF Serving's ``model_version_status`` over every slot, newest first (one entry
        per version: the most served state of the slots that know it).

        Raises:
            NotFoundError: ``version`` was given and no slot has a record of it.
        """
        slots = self.slots
        if len(slots) == 1 and not self._ended:
            return slots[0].manager.status(version)
        best: dict[str, dict[str, Any]] = {}
        for entry in self._ended.values():  # versions of closed slots: END
            if version is None or entry["version"] == str(version):
                best[entry["version"]] = entry
        for slot in slots:
            try:
                listing = slot.manager.status(version)
            except errors.NotFoundError:
                continue
            for entry in listing:
                now = best.get(entry["version"])
                if now is None or _STATE_RANK.get(entry["state"], 9) < _STATE_RANK.get(
                        now["state"], 9):
                    best[entry["version"]] = entry
        if version is not None and not best:
            raise errors.NotFoundError(None, None, f"version {version} of the model is not "
                                                   "known")
        return sorted(best.values(), key=lambda e: -int(e["version"]))

    # -- reloads -------------------------------------------------------------------------
    def _assign(self, entry: ModelConfigEntry) -> SlotPlan:
        """How ``entry``'s policies map onto the slots, so that no version served now
        and still named stops being served: a slot whose policy is still named keeps it;
        a spare slot already serving a named version is pinned to it (no load); ``latest``
        takes the spare slot serving the newest version; other spare slots are re-pinned
        to the versions left (each serves its old version until the new one is loaded,
        as TF Serving's availability-preserving policy); versions beyond get new slots."""
        wanted = entry.policies()
        plan = SlotPlan(entry, kept={s.policy: s for s in self.slots if s.policy in wanted})
        spare = [s for s in self.slots if s.policy not in wanted]
        missing = [p for p in wanted if p not in plan.kept]

        def take(slot: VersionSlot, policy: int | None) -> None:
            plan.repin.append((slot, policy))
            spare.remove(slot)
            missing.remove(policy)

        for policy in list(missing):
            slot = next((s for s in spare if s.manager.version == policy), None)
            if policy is not None and slot is not None:
                take(slot, policy)
        if None in missing and spare:
            take(max(spare, key=lambda s: -1 if s.manager.version is None
                     else s.manager.version), None)
        for slot, policy in list(zip(spare, missing, strict=False)):
            take(slot, policy)
        plan.new, plan.spare = missing, spare
        return plan

    def build_slots(self, entry: ModelConfigEntry, build_servable: Callable[[str, str], Any],
                    check: Callable[[], None] = lambda: None) -> SlotPlan:
        """How this model takes ``entry`` (same graph): the plan, with the started slots
        of its versions that no slot can be pinned to, their graphs built by
        ``build_servable``. ``check()`` runs before each slot is built (it raises to stop
        a reload the server is closing). Raises what building or starting one raises
        (the ones built are closed)."""
        plan = self._assign(entry)
        try:
            for policy in plan.new:
                check()
                slot = self._slot(policy, False, build_servable)
                plan.built[policy] = slot
                slot.start()
        except BaseException:
            plan.close_built()
            raise
        return plan

    def apply(self, plan: SlotPlan) -> tuple[list[str], list[VersionSlot]]:
        """Takes the plan :meth:`build_slots` made.

        Returns:
            (warnings: pins to versions not on disk and labels waiting for their version,
            the slots no longer used: the caller closes them).
        """
        entry = plan.entry
        by_policy = {**plan.kept, **plan.built}
        warnings: list[str] = []
        for slot, policy in plan.repin:
            slot.manager.set_policy("latest" if policy is None else policy,
                                    f'the model config (model "{entry.name}")')
            slot.policy = policy
            by_policy[policy] = slot
        for policy in entry.policies():
            if policy is not None and policy not in plan.kept and not glob.glob(
                    os.path.join(glob.escape(entry.base_path), f"*-{policy}.h5")):
                warnings.append(f'model "{entry.name}": version {policy} is not in '
                                f"{entry.base_path}; it is served once it appears")
        for slot in plan.spare:
            self._end(slot)
        self.slots = tuple(by_policy[p] for p in entry.policies())
        self.entry = entry
        warnings += self.set_labels(entry.version_labels)
        return warnings, plan.spare

    def _end(self, slot: VersionSlot) -> None:
        """Keeps the versions ``slot`` knows as END (it is about to close)."""
        try:
            listing = slot.manager.status()
        except errors.OpError:  # its watchdog found it stuck: nothing to keep
            return
        for entry in listing:
            if entry["state"] != "END":
                entry = {**entry, "state": "END",
                         "status": {"error_code": "OK", "error_message": ""}}
            self._ended[entry["version"]] = entry
        for old in sorted(self._ended, key=int)[:-_ENDED_KEPT]:
            del self._ended[old]

    # -- labels --------------------------------------------------------------------------
    def set_labels(self, labels: Mapping[str, int]) -> list[str]:
        """Asks for ``labels`` (label -> version); returns a warning per label that waits
        for its version to be AVAILABLE. A label left out is removed."""
        with self._lock:
            self._wanted = dict(labels)
            self._labels = {k: v for k, v in self._labels.items() if k in self._wanted}
        warnings: list[str] = [w for w in (self._move(label) for label in labels) if w]
        if warnings:
            self._watch_labels()
        return warnings

    def _pending(self) -> list[int]:
        with self._lock:
            return [v for k, v in self._wanted.items() if self._labels.get(k) != v]

    def _watch_labels(self) -> None:
        """Moves waiting labels the moment their version is served (a thread that runs
        while any label waits: a version may be served only briefly)."""
        with self._lock:
            if self._label_thread is not None and self._label_thread.is_alive():
                return
            self._label_thread = threading.Thread(
                target=self._label_loop, name=f"ckptsync-labels-{self.name}", daemon=True)
            self._label_thread.start()

    def _label_loop(self) -> None:
        while not self._closed.is_set():
            pending = self._pending()
            if not pending:
                with self._lock:  # a set_labels racing this exit starts a new thread
                    self._label_thread = None
                return
            # Wakes at the swap that serves the lowest waiting version (on the slot pinned
            # to it, else the newest slot); the 0.25 s bound catches a rollback to an older
            # one, a swap on another slot and the close.
            slot = next((s for s in self.slots if s.policy in pending), self.default_slot())
            served = slot.manager.version
            step = min((v for v in pending if served is None or v > served), default=None)
            try:
                slot.manager.wait_for_version(step if step is not None else 2**63 - 1,
                                              timeout_s=0.25)
            except errors.DeadlineExceededError:
                pass
            for label in list(self._wanted):
                self._move(label)

    def _move(self, label: str) -> LabelWait | None:
        """Moves ``label`` to its wanted version if that is AVAILABLE; else a warning."""
        with self._lock:
            want = self._wanted.get(label)
            if want is None or self._labels.get(label) == want:
                return None
            if any(s.manager.version == want for s in self.slots):
                self._labels[label] = want
                logger.info('model "%s": version label "%s" -> version %d', self.name,
                            label, want)
                return None
            now = self._labels.get(label)
        return LabelWait(
            f'model "{self.name}": version label "{label}" stays '
            f'{"unset" if now is None else f"at version {now}"} until version {want} is '
            "AVAILABLE (a label moves only to an AVAILABLE version, as TF Serving's)", self, label)

    def resolve_label(self, label: str) -> int:
        """The version ``label`` names.

        Raises:
            InvalidArgumentError: the model has no such label (TF Serving's "Unrecognized
                servable version label").
            UnavailableError: the label's version has not been AVAILABLE yet.
        """
        self._move(label)
        with self._lock:
            version, want = self._labels.get(label), self._wanted.get(label)
        if want is None:
            known = ", ".join(sorted(self._wanted)) or "none"
            raise errors.InvalidArgumentError(
                None, None, f"Unrecognized servable version label: {label} (model "
                f'"{self.name}" has labels: {known})')
        if version is None:
            served = ", ".join(map(str, self.served_versions())) or "none"
            raise errors.UnavailableError(
                None, None, f'version label "{label}" of model "{self.name}" names version '
                f"{want}, which has not been AVAILABLE since the label was set (served: "
                f"{served})")
        return version

    def labels(self) -> dict[str, int]:
        """The labels in force (label -> version), after moving those now AVAILABLE."""
        for label in list(self._wanted):
            self._move(label)
        with self._lock:
            return dict(self._labels)

    def pending_labels(self) -> dict[str, int]:
        """The labels waiting for their version to be AVAILABLE (label -> that version)."""
        with self._lock:
            return {k: v for k, v in self._wanted.items() if self._labels.get(k) != v}
