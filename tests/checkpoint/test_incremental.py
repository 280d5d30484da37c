"""Incremental checkpoints (format version 3): deltas and full checkpoints with a parent,
written by write_incremental_checkpoint and composed by every reader, on real files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from ckptsync import checkpoint as ckpt
from ckptsync.checkpoint import (
    CheckpointReader,
    NewCheckpointReader,
    _format,
    _pack,
    block_digests,
    checkpoint_chain,
    list_variables,
    load_variable,
    read_changes,
    read_checkpoint,
    variable_digest,
    write_checkpoint,
    write_incremental_checkpoint,
)
from ckptsync.checkpoint.reader import read_checkpoint_into
from ckptsync.errors import CkptsyncValueError, DataLossError, NotFoundError
from ckptsync.workers.read_process import CheckpointReadProcess


def _digests(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    return {k: variable_digest(block_digests(v)) for k, v in arrays.items()}


def _model(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "emb": rng.standard_normal((3000, 8)).astype(np.float32),
        "emb/Adagrad": np.full((3000, 8), 0.1, np.float32),
        "dense/w": rng.standard_normal((16, 4)),
        "dense/b": np.zeros(4, np.float16),
        "mask": rng.random((500, 3)) < 0.5,
        "phase": (rng.standard_normal((300, 2)) + 1j).astype(np.complex64),
        "empty": np.zeros((0, 5), np.int32),
        "global_step": np.int64(0),
    }


def _step(rng: np.random.Generator, arrays: dict[str, np.ndarray], step: int
          ) -> dict[str, np.ndarray | None]:
    """One training step's changes, applied to ``arrays`` (new arrays, as a session's
    commit): sparse rows of the tables, the dense variables whole."""
    rows = rng.integers(0, 3000, size=int(rng.integers(0, 40)))
    for k in ("emb", "emb/Adagrad"):
        arrays[k] = arrays[k].copy()
        arrays[k][rows] += np.float32(0.5)
    arrays["dense/w"] = arrays["dense/w"] * 0.9
    mask_rows = rng.integers(0, 500, size=3)
    arrays["mask"] = arrays["mask"].copy()
    arrays["mask"][mask_rows] = ~arrays["mask"][mask_rows]
    arrays["global_step"] = np.int64(step)
    changes: dict[str, np.ndarray | None] = {
        "emb": rows, "emb/Adagrad": np.concatenate([rows, rows]),  # duplicates allowed
        "dense/w": None, "mask": mask_rows, "global_step": None}
    if step % 4 == 0:
        arrays["phase"] = arrays["phase"] * 1j
        changes["phase"] = None
    return changes


def _assert_bit_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        v = np.asarray(v)
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        assert got[k].tobytes() == v.tobytes(), k


@pytest.fixture()
def trained(tmp_path: Path) -> tuple[Path, list[str], list[dict[str, np.ndarray]]]:
    """Ten steps saved incrementally (a full checkpoint with a parent every 4th), and the
    arrays of each step."""
    rng = np.random.default_rng(7)
    arrays = _model(rng)
    prefixes = [write_incremental_checkpoint(str(tmp_path / "m-0"), arrays, None, None,
                                             None, True, global_step=0)]
    states = [dict(arrays)]
    for step in range(1, 11):
        changes = _step(rng, arrays, step)
        if step == 6:  # a new variable, and a table that changes shape
            arrays["new/v"] = np.arange(6.0)
            arrays["dense/b"] = np.zeros(5, np.float16)
        prefixes.append(write_incremental_checkpoint(
            str(tmp_path / f"m-{step}"), arrays, changes, prefixes[-1], _digests(arrays),
            full=step % 4 == 0, global_step=step, metadata={"step": step}))
        states.append(dict(arrays))
    return tmp_path, prefixes, states


def test_composed_values_are_bit_identical_to_full_writes(trained) -> None:
    tmp_path, prefixes, states = trained
    for step, (prefix, arrays) in enumerate(zip(prefixes, states)):
        full = write_checkpoint(str(tmp_path / f"full-{step}"), arrays)
        _assert_bit_equal(read_checkpoint(prefix), read_checkpoint(full))
        with CheckpointReader(prefix) as r:
            assert r.global_step == step
            assert r.get_variable_to_shape_map() == {k: list(np.shape(v))
                                                     for k, v in arrays.items()}
            assert r.get_variable_to_dtype_map() == {k: np.asarray(v).dtype
                                                     for k, v in arrays.items()}
            assert r.get_tensor("emb").tobytes() == arrays["emb"].tobytes()
            assert r.is_delta == (step % 4 != 0)
            assert r.format_version == (1 if step % 4 == 0 else 3)
        assert load_variable(prefix, "global_step:0") == step
        assert list_variables(prefix) == sorted((k, list(np.shape(v)))
                                                for k, v in arrays.items())
        with NewCheckpointReader(prefix) as r:
            assert r.get_tensor("mask").tobytes() == arrays["mask"].tobytes()


def test_the_chain_runs_from_the_nearest_full_checkpoint(trained) -> None:
    _, p, _ = trained
    assert checkpoint_chain(p[0]) == [p[0]]
    assert checkpoint_chain(p[3]) == p[0:4]
    assert checkpoint_chain(p[4]) == [p[4]]  # full with a parent: composes alone
    assert checkpoint_chain(p[7]) == p[4:8]
    assert checkpoint_chain(p[10]) == [p[8], p[9], p[10]]
    assert checkpoint_chain(p[10] + ".h5") == [p[8], p[9], p[10]]


def test_read_checkpoint_into_composes_and_verify_first_leaves_outs_alone(trained) -> None:
    _, p, states = trained
    names = ["emb", "dense/w", "global_step"]

    def allocate(specs):
        return [np.full(shape, 7, dtype) for _, dtype, shape in specs]

    got = read_checkpoint_into(p[3], names, allocate, verify=True, verify_first=True)
    _assert_bit_equal(got, {n: states[3][n] for n in names})
    # A damaged delta in the chain: nothing is written into the arrays handed over.
    _flip_stored_byte(p[2], "emb")
    outs: list[np.ndarray] = []

    def keep(specs):
        outs[:] = allocate(specs)
        return outs

    with pytest.raises(DataLossError, match="emb"):
        read_checkpoint_into(p[3], names, keep, verify=True, verify_first=True)
    assert all((o == 7).all() for o in outs)


def test_read_changes_of_a_delta(trained) -> None:
    _, p, states = trained
    c = read_changes(p[5])
    assert (c.parent, c.is_full, c.global_step) == (p[4], False, 5)
    with CheckpointReader(p[4]) as r:
        assert c.parent_index_xxh3 == r.index_xxh3
    with CheckpointReader(p[5]) as r:
        assert c.index_xxh3 == r.index_xxh3
    assert read_changes(p[6]).parent_index_xxh3 == c.index_xxh3
    assert c["dense/b"].kind == "same" and c["dense/b"].values is None
    assert c["dense/w"].kind == "full"
    assert c["dense/w"].values.tobytes() == states[5]["dense/w"].tobytes()
    e = c["emb"]
    assert e.kind == "rows" and e.rows.dtype == np.int64
    assert np.all(np.diff(e.rows) > 0)
    assert e.values.shape == (len(e.rows), 8)
    assert e.values.tobytes() == states[5]["emb"][e.rows].tobytes()
    # Applying the changes to the parent's values gives this checkpoint's.
    base = read_checkpoint(p[4])
    for name, ch in c.items():
        value = base[name].copy()
        if ch.kind == "rows":
            value[ch.rows] = ch.values
        elif ch.kind == "full":
            value = ch.values
        assert value.tobytes() == np.asarray(states[5][name]).tobytes(), name
        assert variable_digest(block_digests(value)) == ch.digest
    only = read_changes(p[5], names=["emb"])
    assert list(only) == ["emb"]
    with pytest.raises(NotFoundError, match="nope"):
        read_changes(p[5], names=["nope"])


def test_read_changes_of_a_full_checkpoint_with_a_parent_reads_only_the_rows(trained) -> None:
    _, p, states = trained
    c = read_changes(p[8])
    assert (c.parent, c.is_full) == (p[7], True)
    e = c["emb"]
    assert e.kind == "rows" and e.values.tobytes() == states[8]["emb"][e.rows].tobytes()
    assert c["phase"].kind == "full"
    assert c["phase"].values.tobytes() == states[8]["phase"].tobytes()
    assert c["dense/b"].kind == "same"
    base = read_checkpoint(p[7])
    value = base["emb"].copy()
    value[e.rows] = e.values
    assert variable_digest(block_digests(value)) == e.digest
    plain = read_changes(p[0])
    assert (plain.parent, plain.is_full) == (None, True)
    assert {ch.kind for ch in plain.values()} == {"full"}
    assert plain["emb"].digest is None


def test_rows_or_full_whichever_is_smaller(tmp_path: Path) -> None:
    table = np.zeros((1000, 4), np.float32)  # 16-byte rows: a row costs 24 with its index
    arrays = {"few": table, "many": table.copy(), "none": table.copy(), "unlisted": table,
              "scalar": np.float32(1)}
    base = write_checkpoint(str(tmp_path / "b"), arrays)
    changed = {k: np.asarray(v).copy() for k, v in arrays.items()}
    changed["few"][:10] = 1
    changed["many"][:700] = 1
    changed["scalar"] = np.float32(2)
    changes = {"few": np.arange(10), "many": np.arange(700), "none": np.array([], np.int64),
               "scalar": np.array([0])}
    d = write_incremental_checkpoint(str(tmp_path / "d"), changed, changes, base,
                                     _digests(changed), full=False)
    c = read_changes(d)
    kinds = {k: v.kind for k, v in c.items()}
    assert kinds == {"few": "rows", "many": "full", "none": "same", "unlisted": "same",
                     "scalar": "full"}
    assert os.path.getsize(d + ".h5") < os.path.getsize(base + ".h5") * 0.6
    _assert_bit_equal(read_checkpoint(d), changed)


def test_a_packed_layout_composes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pack, "PACK_MIN_VARIABLES", 4)
    rng = np.random.default_rng(3)
    arrays = {f"v/{i:02d}": rng.standard_normal((50, 3)) for i in range(12)}
    arrays["big"] = rng.standard_normal((20000, 4))  # over 64 KiB: its own dataset
    base = write_checkpoint(str(tmp_path / "b"), arrays)
    with CheckpointReader(base) as r:
        assert r.format_version == 2
    for i in range(6):
        arrays[f"v/{i:02d}"] = arrays[f"v/{i:02d}"].copy()
        arrays[f"v/{i:02d}"][[1, 7]] = i
    arrays["big"] = arrays["big"].copy()
    arrays["big"][[5, 19999]] = -1
    changes = {f"v/{i:02d}": np.array([1, 7]) for i in range(6)} | {"big": np.array([5, 19999])}
    d = write_incremental_checkpoint(str(tmp_path / "d"), arrays, changes, base,
                                     _digests(arrays), full=False)
    _assert_bit_equal(read_checkpoint(d), arrays)
    f = write_incremental_checkpoint(str(tmp_path / "f"), arrays, changes, base,
                                     _digests(arrays), full=True)
    c = read_changes(f)
    assert c["big"].values.tobytes() == arrays["big"][[5, 19999]].tobytes()
    assert c["v/03"].values.tobytes() == arrays["v/03"][[1, 7]].tobytes()


# ---------------------------------------------------------------- damage and refusals
def _flip_stored_byte(prefix: str, key: str) -> None:
    with h5py.File(prefix + ".h5", "r") as f:
        obj = f[key]
        if isinstance(obj, h5py.Group):  # a key that is also a scope: <key>/:value
            obj = obj[":value"]
        off = obj.id.get_offset()
    with open(prefix + ".h5", "r+b") as fh:
        fh.seek(off)
        b = fh.read(1)
        fh.seek(off)
        fh.write(bytes([b[0] ^ 0x40]))


def test_a_damaged_delta_or_base_is_detected(trained) -> None:
    _, p, _ = trained
    _flip_stored_byte(p[6], "emb")  # a delta's stored rows
    with pytest.raises(DataLossError, match=r"m-6.h5 is corrupt: variable 'emb': checksum"):
        read_checkpoint(p[7])
    _flip_stored_byte(p[0], "emb/Adagrad")  # the full base
    with pytest.raises(DataLossError, match=r"m-0.h5 is corrupt: variable 'emb/Adagrad'"):
        read_checkpoint(p[3], names=["emb/Adagrad"])
    # dense/w changed whole in p[3] itself: it reads without the damaged base's bytes.
    assert read_checkpoint(p[3], names=["dense/w"])


def test_a_wrong_recorded_digest_refuses_the_composed_value(tmp_path: Path) -> None:
    arrays = {"t": np.arange(40.0).reshape(10, 4)}
    base = write_checkpoint(str(tmp_path / "b"), arrays)
    new = {"t": arrays["t"].copy()}
    new["t"][3] = 0
    wrong = _digests(arrays)  # the digests of the values before the change
    d = write_incremental_checkpoint(str(tmp_path / "d"), new, {"t": np.array([3])}, base,
                                     wrong, full=False)
    with pytest.raises(DataLossError, match="block digest"):
        read_checkpoint(d)
    assert read_checkpoint(d, verify=False)["t"].tobytes() == new["t"].tobytes()


def test_damaged_rows_are_detected(trained) -> None:
    _, p, _ = trained
    with h5py.File(p[2] + ".h5", "r") as f:
        off = f["_ckptsync/rows"].id.get_offset()
    with open(p[2] + ".h5", "r+b") as fh:
        fh.seek(off + 3)
        fh.write(b"\x7f")
    with pytest.raises(DataLossError, match="m-2.h5 is corrupt"):
        read_checkpoint(p[2])
    with pytest.raises(DataLossError, match="m-2.h5 is corrupt"):
        read_changes(p[2])


def test_a_delta_whose_base_was_deleted(trained) -> None:
    _, p, _ = trained
    os.unlink(p[1] + ".h5")
    message = (rf"{p[3]}.h5 is an incremental checkpoint composed from base {p[1]} \(the "
               rf"base of {p[2]}.h5\), which is missing")
    for read in (read_checkpoint, checkpoint_chain, lambda q: load_variable(q, "emb")):
        with pytest.raises(DataLossError, match=message):
            read(p[3])
    assert read_checkpoint(p[4])  # a full checkpoint with a parent reads alone


def test_a_replaced_base_is_detected(trained) -> None:
    tmp_path, p, states = trained
    os.unlink(p[2] + ".h5")
    write_checkpoint(p[2], states[2])  # the same values, but another file
    with pytest.raises(DataLossError, match=rf"base {p[2]}, but {p[2]}.h5 was replaced"):
        read_checkpoint(p[3])


def _rewrite_index(path: str, edit) -> None:
    with h5py.File(path, "r+") as f:
        doc = json.loads(f["_ckptsync/index"][()].tobytes())
        edit(doc)
        raw = np.frombuffer(json.dumps(doc, separators=(",", ":")).encode(), np.uint8)
        del f["_ckptsync/index"]
        ds = f.create_dataset("_ckptsync/index", data=raw)
        ds.attrs["xxh3_64"] = np.bytes_(_format.hash_array(raw).encode())
        if "base" in doc:
            f.attrs["base"] = np.bytes_(doc["base"].encode())


def test_a_chain_that_loops_or_leaves_the_directory_is_refused(trained, tmp_path) -> None:
    _, p, _ = trained
    _rewrite_index(p[3] + ".h5", lambda d: d.__setitem__("base", "m-3"))
    with pytest.raises(DataLossError, match="the chain loops"):
        read_checkpoint(p[3])
    other = tmp_path / "elsewhere"
    other.mkdir()
    shutil.move(p[5] + ".h5", other / "m-5.h5")
    os.symlink(other / "m-5.h5", p[5] + ".h5")
    with pytest.raises(DataLossError, match="lies outside the directory"):
        read_checkpoint(p[6])


def test_an_index_that_lies_about_its_changes_is_refused(trained) -> None:
    _, p, _ = trained

    def shrink(d):
        i = d["variables"]["name"].index("emb")
        d["variables"]["rows"][i] += 1

    _rewrite_index(p[1] + ".h5", shrink)
    with pytest.raises(DataLossError, match="index is malformed"):
        CheckpointReader(p[1])


def test_an_older_reader_refuses_a_delta_clearly(trained, monkeypatch) -> None:
    _, p, _ = trained
    monkeypatch.setattr(_format, "FORMAT_VERSIONS", (1, 2))  # a reader of versions 1-2
    with pytest.raises(DataLossError, match=r"format version 3 \(an incremental checkpoint\) "
                       r"is not supported \(expected one of 1, 2\); upgrade ckptsync"):
        read_checkpoint(p[1])
    # A full checkpoint with a parent is format 1: that reader reads it alone.
    with CheckpointReader(p[4]) as r:
        assert r.format_version == 1 and r.predecessor == p[3]
    with h5py.File(p[4] + ".h5", "r") as f:  # and it is plain HDF5
        assert f.attrs["parent"] == b"m-3"
        assert f["emb/:value"].shape == (3000, 8)  # ("emb/Adagrad" beside it)


def test_writer_refuses_bad_arguments(tmp_path: Path) -> None:
    arrays = {"t": np.zeros((4, 2))}
    base = write_checkpoint(str(tmp_path / "b"), arrays)
    digests = _digests(arrays)
    with pytest.raises(CkptsyncValueError, match="needs a parent"):
        write_incremental_checkpoint(str(tmp_path / "d"), arrays, {}, None, digests, False)
    (tmp_path / "sub").mkdir()
    with pytest.raises(CkptsyncValueError, match="not in the directory"):
        write_incremental_checkpoint(str(tmp_path / "sub" / "d"), arrays, {}, base, digests,
                                     False)
    with pytest.raises(CkptsyncValueError, match="digests lacks"):
        write_incremental_checkpoint(str(tmp_path / "d"), arrays, {}, base, {}, False)
    with pytest.raises(CkptsyncValueError, match=r"within \[0, 4\)"):
        write_incremental_checkpoint(str(tmp_path / "d"), arrays, {"t": np.array([4])}, base,
                                     digests, False)
    with pytest.raises(NotFoundError):
        write_incremental_checkpoint(str(tmp_path / "d"), arrays, {}, str(tmp_path / "gone"),
                                     digests, False)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temp files left
    assert not (tmp_path / "d.h5").exists()


def test_the_read_process_loads_a_delta(trained) -> None:
    _, p, states = trained
    with CheckpointReadProcess(timeout_s=60.0) as reader:
        got = reader.read(p[7], ["emb", "dense/b", "new/v"])
    _assert_bit_equal(dict(got), {k: states[7][k] for k in ["emb", "dense/b", "new/v"]})


def test_only_after_reads_the_changes_only_when_the_named_parent_is_the_one(trained) -> None:
    """A following server's one read: the changes when the checkpoint's recorded parent is
    the one it serves (file name and index hash), else only the links, in process and
    through the read process alike."""
    _, p, states = trained
    with CheckpointReader(p[4]) as r:
        parent = (os.path.basename(p[4]) + ".h5", r.index_xxh3)
    with CheckpointReadProcess(timeout_s=60.0) as reader:
        for read in (lambda *a, **k: (read_changes(*a, **k), None),
                     reader.read_changes):
            c, _ = read(p[5], ["emb"], only_after=parent)
            assert list(c.variables) == ["emb"]
            assert c["emb"].values.tobytes() == states[5]["emb"][c["emb"].rows].tobytes()
            for other in [(os.path.basename(p[3]), parent[1]), (parent[0], "0" * 16)]:
                links, _ = read(p[5], ["emb"], only_after=other)
                assert (links.parent, links.parent_index_xxh3) == (p[4], parent[1])
                assert not links.variables  # nothing read but the links
            full, _ = read(p[0], ["emb"], only_after=parent)  # names no parent
            assert full.parent is None and not full.variables


def test_a_delta_through_the_public_module(trained) -> None:
    _, p, _ = trained
    assert ckpt.checkpoint_chain is checkpoint_chain
    assert isinstance(read_changes(p[1]), ckpt.CheckpointChanges)
