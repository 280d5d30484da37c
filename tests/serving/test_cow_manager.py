"""The manager following a directory of incremental checkpoints: a delta on the served
version is applied copy-on-write (through the reader process), anything else is a full
load composing the chain; the served values always equal a full read of that version."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from ckptsync import checkpoint as ckpt
from ckptsync.serving import ModelManager
from tests.helpers import pid_gone

from .conftest import wait_until
from .test_cow import DIM, F32, VOCAB, TableServable, _params


class Trainer:
    """Writes model.ckpt-<step> as an incremental Saver would: a full one first, then
    deltas (or full ones with a parent) naming the one before."""

    def __init__(self, directory: str, seed: int = 1) -> None:
        self.directory = directory
        self.params = _params(seed)
        self.rng = np.random.default_rng(seed + 100)
        self.last: str | None = None
        self.prefixes: list[str] = []

    def save(self, step: int, n_rows: int = 5, full: bool = False, touch_w: bool = False,
             publish: bool = True) -> str:
        rows = np.unique(self.rng.integers(0, VOCAB, n_rows)).astype(np.int64)
        self.params["emb"][rows] = self.rng.standard_normal((rows.size, DIM)).astype(F32)
        changes: dict[str, np.ndarray | None] = {"emb": rows}
        if touch_w:
            self.params["w"] = self.params["w"] + 1.0
            changes["w"] = None
        digests = {k: ckpt.variable_digest(ckpt.block_digests(v)) for k, v in self.params.items()}
        prefix = os.path.join(self.directory, f"model.ckpt-{step}")
        ckpt.write_incremental_checkpoint(prefix, self.params, changes, self.last, digests,
                                          full=full or self.last is None, global_step=step)
        self.last = prefix
        self.prefixes.append(prefix)
        if publish:
            self.publish()
        return prefix

    def publish(self) -> None:
        assert self.last is not None
        ckpt.update_checkpoint_state(self.directory, self.last, self.prefixes)


def _manager(servable, directory, **kwargs) -> ModelManager:
    kwargs.setdefault("rescan_interval_s", 0.05)
    kwargs.setdefault("retry_initial_s", 0.05)
    kwargs.setdefault("retry_max_s", 0.2)
    return ModelManager(servable, directory, **kwargs)


def _assert_serves(manager: ModelManager, prefix: str) -> None:
    """The served snapshot's values equal a full (composed) read of ``prefix``."""
    want = ckpt.read_checkpoint(prefix, verify=True)
    snap = manager.current
    assert snap is not None and snap.prefix == prefix
    for name, value in want.items():
        np.testing.assert_array_equal(np.asarray(snap.params[name]), value, err_msg=name)
    ids = np.array([0, 17, VOCAB - 1], np.int64)
    got = manager.servable.run(snap.params, {"ids": ids})["y"]
    np.testing.assert_array_equal(got, want["emb"][ids] @ want["w"])


@pytest.mark.parametrize("read_in_subprocess", [True, False])
def test_deltas_on_the_served_version_are_applied_copy_on_write(tmp_path, read_in_subprocess):
    trainer = Trainer(str(tmp_path))
    trainer.save(1)
    with _manager(TableServable(), tmp_path, read_in_subprocess=read_in_subprocess) as manager:
        first = manager.wait_for_version(1, timeout_s=30)
        assert first.load_kind == "full"
        # Only its table is kept: a held snapshot would hold up the next load.
        emb1, bytes1 = first.params["emb"], first.bytes_read
        del first
        wait_until(lambda: manager._cow._served is not None)  # digests done after the swap
        for step, full, touch_w in [(2, False, False), (3, False, True), (4, True, False),
                                    (5, False, False)]:
            prefix = trainer.save(step, full=full, touch_w=touch_w)
            snap = manager.wait_for_version(step, timeout_s=30)
            assert snap.load_kind == "copy_on_write", step
            assert snap.bytes_read < bytes1 / 10
            _assert_serves(manager, prefix)
        emb5 = manager.current.params["emb"]
        assert emb5.pool is emb1.pool  # the same blocks, shared where untouched
        shared = sum(np.shares_memory(emb1.block_view(j), emb5.block_view(j))
                     for j in range(emb1.slots.size))
        assert shared >= emb1.slots.size - 4 * 5
        loader = manager.health()["loader"]["served"]
        assert loader["load_kind"] == "copy_on_write" and loader["version"] == 5
        stats = manager.stats
        assert stats.copy_on_write_loads == 4 and stats.reloads_succeeded == 5


def test_a_server_that_starts_late_composes_the_chain_then_follows_copy_on_write(tmp_path):
    trainer = Trainer(str(tmp_path))
    for step in (1, 2, 3):
        trainer.save(step)
    with _manager(TableServable(), tmp_path) as manager:
        snap = manager.wait_for_version(3, timeout_s=30)
        assert snap.load_kind == "full"
        _assert_serves(manager, trainer.last)
        wait_until(lambda: manager._cow._served is not None)
        trainer.save(4)
        assert manager.wait_for_version(4, timeout_s=30).load_kind == "copy_on_write"
        _assert_serves(manager, trainer.last)


def test_a_server_behind_applies_the_versions_between_and_else_loads_in_full(tmp_path):
    trainer = Trainer(str(tmp_path))
    trainer.save(1)
    with _manager(TableServable(), tmp_path) as manager:
        manager.wait_for_version(1, timeout_s=30)
        wait_until(lambda: manager._cow._served is not None)
        trainer.save(2, publish=False)  # the server never sees versions 2 and 3
        trainer.save(3, publish=False, full=True)  # (a full checkpoint with a parent)
        trainer.save(4)
        snap = manager.wait_for_version(4, timeout_s=30)
        assert snap.load_kind == "copy_on_write"  # 2, 3 and 4 applied in turn
        _assert_serves(manager, trainer.last)
        # A checkpoint without a parent breaks the chain: what follows loads in full.
        trainer.last = None
        trainer.save(5, publish=False)
        trainer.save(6)
        snap = manager.wait_for_version(6, timeout_s=30)
        assert snap.load_kind == "full"
        _assert_serves(manager, trainer.last)


def test_a_digest_mismatch_refuses_the_copy_and_loads_in_full(tmp_path):
    trainer = Trainer(str(tmp_path))
    trainer.save(1)
    with _manager(TableServable(), tmp_path) as manager:
        table = manager.wait_for_version(1, timeout_s=30).params["emb"]
        wait_until(lambda: manager._cow._served is not None)
        # A bit flip in the served copy of every block: any block a delta touches carries
        # it into the new version, whose digest then disagrees with the file's.
        arena = table.pool.arenas[0]
        arena[:: table.block_rows, 0] += 1.0
        trainer.save(2)
        snap = manager.wait_for_version(2, timeout_s=30)
        assert snap.load_kind == "full"
        _assert_serves(manager, trainer.last)


def test_a_request_holding_a_version_sees_it_whole_while_later_ones_are_applied(tmp_path):
    trainer = Trainer(str(tmp_path))
    trainer.save(1)
    # unload_wait_s=0: the next load does not wait for the held request to end.
    with _manager(TableServable(), tmp_path, unload_wait_s=0.0) as manager:
        held = manager.acquire(manager.wait_for_version(1, timeout_s=30).version)
        want = ckpt.read_checkpoint(trainer.last, verify=True)
        ids = np.arange(VOCAB, dtype=np.int64)
        for step in range(2, 12):
            trainer.save(step, n_rows=50)
            assert manager.wait_for_version(step, timeout_s=30).load_kind == "copy_on_write"
            # The request on version 1 still reads version 1, every row of it.
            got = manager.servable.run(held.params, {"ids": ids})["y"]
            np.testing.assert_array_equal(got, want["emb"] @ want["w"])
        _assert_serves(manager, trainer.last)


def test_a_stuck_read_of_changes_freezes_nothing_and_the_version_loads_in_full(tmp_path):
    trainer = Trainer(str(tmp_path))
    trainer.save(1)
    with _manager(TableServable(), tmp_path, load_timeout_s=1.0) as manager:
        manager.wait_for_version(1, timeout_s=30)
        wait_until(lambda: manager._cow._served is not None)
        reader = manager._reader
        assert reader is not None and reader.pid is not None
        stopped = reader.pid
        os.kill(stopped, signal.SIGSTOP)  # the changes are read there: that read hangs
        trainer.save(2)
        ids = np.array([1, 2, 3], np.int64)
        snap = manager.acquire()  # requests keep being answered meanwhile
        assert manager.servable.run(snap.params, {"ids": ids})["y"].shape == (3, 2)
        del snap
        snap = manager.wait_for_version(2, timeout_s=30)
        assert snap.load_kind == "full" and reader.worker.hangs == 1
        assert pid_gone(stopped)
        _assert_serves(manager, trainer.last)
