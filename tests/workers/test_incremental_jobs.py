"""IncrementalJob: an async incremental save copies into shared memory only what the
checkpoint stores, and its job document carries the changes exactly."""

from __future__ import annotations

import numpy as np

from ckptsync.workers.incremental_jobs import IncrementalJob, _changes


def _targets() -> list[np.ndarray]:
    return [np.zeros((6, 3), np.float32), np.zeros(4, np.int64), np.zeros((2, 2))]


def test_a_delta_copies_only_the_changed_rows_and_values() -> None:
    arrays = {"t": np.arange(18, dtype=np.float32).reshape(6, 3) + 1,
              "v": np.arange(4, dtype=np.int64) + 1, "same": np.ones((2, 2))}
    job = IncrementalJob("/d/m-1", False, {"t": np.array([1, 4]), "v": None},
                         {k: "0" * 16 for k in arrays})
    targets = _targets()
    job.copy_in(targets, arrays)
    t, v, same = targets
    assert (t[[1, 4]] == arrays["t"][[1, 4]]).all()
    assert (np.delete(t, [1, 4], axis=0) == 0).all()  # the other rows are not copied
    assert (v == arrays["v"]).all()
    assert (same == 0).all()  # unchanged: not copied


def test_a_full_checkpoint_copies_everything() -> None:
    arrays = {"t": np.ones((6, 3), np.float32), "v": np.ones(4, np.int64),
              "same": np.ones((2, 2))}
    job = IncrementalJob("/d/m-1", True, {"t": np.array([2])}, {})
    targets = _targets()
    job.copy_in(targets, arrays)
    assert all((t == 1).all() for t in targets)


def test_the_job_document_round_trips_the_changes() -> None:
    rows = np.array([0, 7, 2**40], np.int64)
    doc = IncrementalJob(None, True, {"a": rows, "b": None}, {"a": "1" * 16}).to_doc()
    changes = _changes(doc)
    assert set(changes) == {"a", "b"} and changes["b"] is None
    got = changes["a"]
    assert got is not None and got.dtype == np.int64 and got.tolist() == rows.tolist()
    assert doc["parent"] is None and doc["full"] is True and doc["digests"] == {"a": "1" * 16}
