"""Format 2: the small variables of a large layout packed into one dataset (issue #16
item 8). The plain layout (format 1, one dataset per variable: ``PACK_MIN_VARIABLES``
patched high) is the reference every packed read is compared with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import h5py
import numpy as np
import pytest

from ckptsync.checkpoint import (
    CheckpointReader,
    _format,
    _h5layout,
    _pack,
    _read_io,
    latest_checkpoint,
    read_checkpoint,
    sweep_temp_files,
    update_checkpoint_state,
    write_checkpoint,
)
from ckptsync.checkpoint.reader import read_checkpoint_into
from ckptsync.errors import DataLossError, NotFoundError
from ckptsync.train import NewCheckpointReader, list_variables, load_variable


def _mixed(n: int) -> dict[str, np.ndarray]:
    """n scalars of several dtypes, plus variables of every kind the format stores: a
    large one (not packed), one at the size limit, zero-size, bool, complex, and a key
    that is also another key's scope."""
    kinds = [np.float32, np.int64, np.float16, np.uint8, np.bool_, np.complex128]
    out = {f"s/v{i:06d}": np.asarray(kinds[i % len(kinds)](i % 7)) for i in range(n)}
    rng = np.random.default_rng(0)
    out.update({
        "dense0/w": rng.standard_normal((300, 100)).astype(np.float32),  # 120 kB: a dataset
        "dense0/w/Adam": rng.standard_normal((300, 100)).astype(np.float32),
        "dense0/b": rng.standard_normal(100).astype(np.float64),
        "dense0/b/Adam": np.arange(4, dtype=np.complex64),
        "edge/limit": np.ones(_pack.PACK_MAX_BYTES, np.uint8),  # packed: at the limit
        "edge/over": np.ones(_pack.PACK_MAX_BYTES + 1, np.uint8),  # a dataset
        "edge/empty": np.zeros((0, 3), np.int16),
        "edge/flags": np.array([True, False, True]),
        "global_step": np.asarray(np.int64(42)),
    })
    return out


def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        g = got[k]
        assert (g.dtype, g.shape) == (v.dtype, v.shape), k
        assert g.tobytes() == v.tobytes(), k


@pytest.fixture
def plain() -> mock._patch:
    """Patches every layout to be format 1 (the reference)."""
    return mock.patch.object(_pack, "PACK_MIN_VARIABLES", 10**9)


def test_100k_variables_round_trip_bit_exact_and_seen_by_every_reader(tmp_path: Path) -> None:
    arrays = _mixed(100_000)
    prefix = write_checkpoint(tmp_path / "model.ckpt-42", arrays, 42, {"epoch": 3})
    update_checkpoint_state(str(tmp_path), prefix)
    _same(read_checkpoint(prefix), arrays)
    with CheckpointReader(prefix) as r:
        assert r.format_version == 2 and r.global_step == 42 and r.metadata == {"epoch": 3}
        assert r.get_variable_to_shape_map() == {k: list(v.shape) for k, v in arrays.items()}
        assert r.get_variable_to_dtype_map() == {k: v.dtype for k, v in arrays.items()}
    # TF's module functions, by name, through the directory.
    listed = dict(list_variables(str(tmp_path)))
    assert len(listed) == len(arrays) and listed["s/v000005"] == []
    assert float(load_variable(str(tmp_path), "s/v000007")) == 0.0
    assert load_variable(str(tmp_path), "edge/flags").tolist() == [True, False, True]
    assert NewCheckpointReader(prefix).get_tensor("dense0/b/Adam").tolist() == [0, 1, 2, 3]
    picked = read_checkpoint(prefix, ["s/v000013", "dense0/w", "s/v000001"])
    assert list(picked) == ["s/v000013", "dense0/w", "s/v000001"]
    _same(picked, {k: arrays[k] for k in picked})


def test_a_packed_file_is_plain_hdf5_that_h5py_reads_by_its_index(tmp_path: Path) -> None:
    arrays = _mixed(3000)
    write_checkpoint(tmp_path / "m", arrays, 42)
    with h5py.File(tmp_path / "m.h5", "r") as f:
        assert f.attrs["ckptsync_format_version"] == 2
        columns = json.loads(f["_ckptsync/index"][()].tobytes())["variables"]
        pack = f["_ckptsync/pack"][()]
        assert f["_ckptsync/pack"].attrs["xxh3_64"].decode() == _format.hash_array(pack)
        # Large variables stay datasets at their keys ("dense0/w" is no scope now: its
        # Adam slot is a dataset too, so it is stored at "dense0/w/:value").
        np.testing.assert_array_equal(f["dense0/w/:value"][()], arrays["dense0/w"])
        np.testing.assert_array_equal(f["edge/over"][()], arrays["edge/over"])
        assert "s" not in f and "edge/limit" not in f
        got = {}
        for name, dtype, shape, nbytes, at in zip(columns["name"], columns["dtype"],
                                                  columns["shape"], columns["nbytes"],
                                                  columns["pack"]):
            if at is not None:
                got[name] = np.frombuffer(pack[at:at + nbytes].tobytes(),
                                          np.dtype(dtype).newbyteorder("<")).reshape(shape)
            else:
                path = name + "/:value" if name in ("dense0/w",) else name
                got[name] = f[path][()]
    _same({k: np.asarray(v, v.dtype.newbyteorder("=")) for k, v in got.items()}, arrays)


def test_packed_and_plain_files_read_the_same(tmp_path: Path, plain: mock._patch) -> None:
    arrays = _mixed(2000)
    write_checkpoint(tmp_path / "packed", arrays, 7, {"a": 1})
    with plain:
        write_checkpoint(tmp_path / "plain", arrays, 7, {"a": 1})
    with CheckpointReader(tmp_path / "packed") as p, CheckpointReader(tmp_path / "plain") as q:
        assert (p.format_version, q.format_version) == (2, 1)
        assert p.get_variable_to_shape_map() == q.get_variable_to_shape_map()
        assert p.get_variable_to_dtype_map() == q.get_variable_to_dtype_map()
        assert (p.global_step, p.metadata, p.nbytes) == (q.global_step, q.metadata, q.nbytes)
        for name in ("s/v000003", "dense0/w", "edge/empty"):
            assert p.get_tensor(name).tobytes() == q.get_tensor(name).tobytes()
    # Through HDF5 alone too (no preadv: the reader's fallback path).
    with mock.patch.object(_read_io, "_RAW_READS", False):
        _same(read_checkpoint(tmp_path / "packed"), read_checkpoint(tmp_path / "plain"))
    _same(read_checkpoint(tmp_path / "packed"), arrays)
    with plain:  # a format-2 file reads the same whatever this process would write
        _same(read_checkpoint(tmp_path / "packed"), arrays)


def test_layouts_up_to_the_threshold_stay_format_1(tmp_path: Path) -> None:
    arrays = {f"v{i:04d}": np.float32(i) for i in range(_pack.PACK_MIN_VARIABLES)}
    write_checkpoint(tmp_path / "a", arrays)
    arrays["one_more"] = np.float32(-1)
    write_checkpoint(tmp_path / "b", arrays)
    with CheckpointReader(tmp_path / "a") as a, CheckpointReader(tmp_path / "b") as b:
        assert (a.format_version, b.format_version) == (1, 2)


def test_a_packed_layout_costs_a_constant_number_of_hdf5_datasets(tmp_path: Path) -> None:
    """The cause of the 56 s / 36 s at 100,000 variables: one HDF5 dataset (~0.2 ms to
    create, as much to open) per variable. Packed, only the large ones are datasets."""
    arrays = _mixed(20_000)
    with mock.patch.object(_h5layout.H5Writer, "dataset", autospec=True,
                           side_effect=_h5layout.H5Writer.dataset) as create:
        write_checkpoint(tmp_path / "m", arrays)
    assert create.call_count == 5  # dense0/w, dense0/w/Adam, edge/over, pack, index
    with mock.patch.object(CheckpointReader, "_open_dataset", autospec=True,
                           side_effect=CheckpointReader._open_dataset) as opened:
        _same(read_checkpoint(tmp_path / "m"), arrays)
    assert opened.call_count == 5


def test_read_into_caller_arrays(tmp_path: Path) -> None:
    """The serving path: every variable read into views of one (shared) buffer."""
    arrays = _mixed(2000)
    write_checkpoint(tmp_path / "m", arrays)
    buffers: list[np.ndarray] = []

    def allocate(specs: list[tuple[str, np.dtype, tuple[int, ...]]]) -> list[np.ndarray]:
        sizes = [int(np.prod(s, dtype=np.int64)) * d.itemsize for _, d, s in specs]
        buf = np.empty(sum(sizes), np.uint8)
        buffers.append(buf)
        offs = np.cumsum([0, *sizes])
        return [buf[o:o + n].view(d).reshape(s)
                for (_, d, s), o, n in zip(specs, offs, sizes)]

    got = read_checkpoint_into(tmp_path / "m", None, allocate)
    _same(got, arrays)
    assert all(np.shares_memory(v, buffers[-1]) for v in got.values() if v.size)


# ---------------------------------------------------------------- damage
def _packed_file(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    arrays = _mixed(2000)
    write_checkpoint(tmp_path / "m", arrays, 1)
    return tmp_path / "m.h5", arrays


def test_a_flipped_byte_in_the_pack_names_the_variable(tmp_path: Path) -> None:
    path, arrays = _packed_file(tmp_path)
    with CheckpointReader(path) as r:
        entry = r._index["s/v000096"]  # float32 5.0
        at = r._pack_at + entry.pack
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(DataLossError, match=r"variable 's/v000096': checksum mismatch"):
        read_checkpoint(path)
    # The rest still reads; unverified reads return what is on disk.
    assert read_checkpoint(path, ["s/v000097"])["s/v000097"] == arrays["s/v000097"]
    assert read_checkpoint(path, ["s/v000096"], verify=False)["s/v000096"] != \
        arrays["s/v000096"]


def test_a_truncated_packed_file_is_refused(tmp_path: Path) -> None:
    path, _ = _packed_file(tmp_path)
    with CheckpointReader(path) as r:
        cut = r._pack_at + 10
    os.truncate(path, cut)
    with pytest.raises(DataLossError, match="corrupt"):
        read_checkpoint(path)


def _rewrite_index(path: Path, edit: object) -> None:
    """Applies ``edit`` to the index columns and re-hashes the index (a writer that
    means it, not a flipped bit)."""
    with h5py.File(path, "r+") as f:
        doc = json.loads(f["_ckptsync/index"][()].tobytes())
        edit(doc["variables"])  # type: ignore[operator]
        raw = np.frombuffer(json.dumps(doc, separators=(",", ":")).encode(), np.uint8)
        del f["_ckptsync/index"]
        ds = f.create_dataset("_ckptsync/index", data=raw)
        ds.attrs["xxh3_64"] = np.bytes_(_format.hash_array(raw).encode())


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["pack"].__setitem__(5, c["pack"][5] + 1), "back to back"),
    (lambda c: c["pack"].__setitem__(0, 1), "back to back"),
    (lambda c: c["name"].__setitem__(3, "s/v000000"), "lists a variable twice"),
    (lambda c: c["name"].__setitem__(3, "a/../b"), "not a valid key"),
    (lambda c: c["name"].__setitem__(3, "s/a\nb"), "not a valid key"),
    (lambda c: c["nbytes"].__setitem__(3, 5), "nbytes inconsistent"),
    (lambda c: c["dtype"].__setitem__(3, "object"), "unknown dtype"),
    (lambda c: c["shape"].__setitem__(3, [-1]), "bad shape"),
    (lambda c: c["xxh3_64"].__setitem__(3, "zz"), "bad xxh3_64"),
    (lambda c: c.pop("pack"), "columns"),
    (lambda c: c["dtype"].pop(), "one length"),
])
def test_an_index_that_lies_is_refused(tmp_path: Path, edit: object, message: str) -> None:
    path, _ = _packed_file(tmp_path)
    _rewrite_index(path, edit)
    with pytest.raises(DataLossError, match=message):
        CheckpointReader(path)


def test_a_pack_shorter_than_its_index_or_missing_is_refused(tmp_path: Path) -> None:
    path, _ = _packed_file(tmp_path)
    with h5py.File(path, "r+") as f:
        data = f["_ckptsync/pack"][()]
        del f["_ckptsync/pack"]
        f.create_dataset("_ckptsync/pack", data=data[:-1])
    with pytest.raises(DataLossError, match=r"variable '_ckptsync/pack': dataset shape"):
        CheckpointReader(path)
    with h5py.File(path, "r+") as f:
        del f["_ckptsync/pack"]
    with pytest.raises(DataLossError, match="lists packed variables but there is no"):
        CheckpointReader(path)


# ---------------------------------------------------------------- crash safety
_KILLED_WRITER = """
import os, sys, time, numpy as np
from ckptsync.checkpoint import _pack, update_checkpoint_state, write_checkpoint
d, ready = sys.argv[1], int(sys.argv[2])
real = _pack.write_packed
def half_then_wait(fd, at, packed, arrays):
    real(fd, at, packed[: len(packed) // 2], arrays)  # half the pack is on disk
    os.write(ready, b"x")
    time.sleep(3600)  # until the SIGKILL
_pack.write_packed = half_then_wait
arrays = {f"v{i:05d}": np.float32(i) for i in range(5000)}
write_checkpoint(os.path.join(d, "model.ckpt-2"), arrays, 2)
"""


def test_a_writer_killed_inside_the_pack_leaves_the_last_checkpoint(tmp_path: Path) -> None:
    arrays = {f"v{i:05d}": np.float32(-i) for i in range(5000)}
    update_checkpoint_state(str(tmp_path), write_checkpoint(tmp_path / "model.ckpt-1",
                                                            arrays, 1))
    ready_r, ready_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_KILLED_WRITER),
                             str(tmp_path), str(ready_w)], pass_fds=(ready_w,))
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"x"  # blocks until the child is inside the pack
    finally:
        os.close(ready_r)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    names = sorted(os.listdir(tmp_path))
    assert names[0].startswith(".model.ckpt-2.h5.tmp-") and names[1:] == [
        "checkpoint", "model.ckpt-1.h5"]
    latest = latest_checkpoint(str(tmp_path))
    assert latest == str(tmp_path / "model.ckpt-1")
    _same(read_checkpoint(latest), {k: np.asarray(v) for k, v in arrays.items()})
    assert sweep_temp_files(str(tmp_path)) == [str(tmp_path / names[0])]
    with pytest.raises(NotFoundError):
        read_checkpoint(tmp_path / "model.ckpt-2")


_LIMITED_WRITER = """
import resource, signal, sys, numpy as np
from ckptsync.checkpoint import read_checkpoint, write_checkpoint
from ckptsync.errors import ResourceExhaustedError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, 4 << 20))
arrays = {f"v{i:05d}": np.full(int(sys.argv[2]), i, np.float32) for i in range(2000)}
write_checkpoint(sys.argv[1] + "-1", {k: v[:1] for k, v in arrays.items()}, 1)
got = read_checkpoint(sys.argv[1] + "-1")
assert all(got[k].tolist() == v[:1].tolist() for k, v in arrays.items())
try:
    write_checkpoint(sys.argv[1] + "-2", arrays, 2)
except ResourceExhaustedError as e:
    print("OK", e)
"""


def test_packed_layout_under_a_file_size_limit(tmp_path: Path) -> None:
    """Under RLIMIT_FSIZE HDF5 writes the pack itself: a file that fits is written and
    reads back; one that does not fails cleanly and leaves no temp file."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_LIMITED_WRITER),
                          str(tmp_path / "m"), "1000"], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.startswith("OK") and "File too large" in out.stdout, out.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["m-1.h5"]
    with CheckpointReader(tmp_path / "m-1") as r:
        assert r.format_version == 2 and len(r.get_variable_to_shape_map()) == 2000


def test_verify_first_writes_nothing_when_a_packed_variable_is_damaged(tmp_path: Path) -> None:
    """As Saver.restore reads into the session's own arrays: a damaged packed variable
    raises before any destination (packed or dataset) changes."""
    path, arrays = _packed_file(tmp_path)
    with CheckpointReader(path) as r:
        at = r._pack_at + r._index["s/v001998"].pack  # the last packed scalar read
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))
    dests: list[np.ndarray] = []

    def allocate(specs: list[tuple[str, np.dtype, tuple[int, ...]]]) -> list[np.ndarray]:
        dests[:] = [np.full(s, 3, d) for _, d, s in specs]
        return dests

    with pytest.raises(DataLossError, match="s/v001998"):
        read_checkpoint_into(path, None, allocate, verify=True, verify_first=True)
    assert dests and all((d == np.full(d.shape, 3, d.dtype)).all() for d in dests)
    got = read_checkpoint_into(tmp_path / "m", sorted(set(arrays) - {"s/v001998"}),
                               allocate, verify=True, verify_first=True)
    _same(got, {k: v for k, v in arrays.items() if k != "s/v001998"})
