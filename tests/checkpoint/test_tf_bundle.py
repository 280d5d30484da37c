"""TF's own checkpoint format (V2 tensor bundles): read TF's files, write files TF reads.

TensorFlow is the oracle, never a dependency: the fixtures under ``tf_fixtures/`` were
made with it (``tf_fixtures/make_fixtures.py``, run in the goldens venv) and are read
here without it.

- ``tf_fixtures/tf_mixed/``: written by TF1's ``tf.compat.v1.train.Saver`` (16 variables:
  every numeric dtype TF variables take, scalars, an empty ``[0, 3]`` tensor, an 8 KiB
  variable, names with slashes, a slot beside its variable, ``global_step`` = 7), with
  ``tf_values.npz``: each tensor as TF's own ``NewCheckpointReader`` returned it.
- ``tf_fixtures/tf_partitioned/``: a ``[300, 2]`` variable TF saved in 3 parts
  (``fixed_size_partitioner``; parts under TF's binary slice keys) beside a plain one,
  with ``tf_values.npz`` as TF read them back (whole).
- ``tf_fixtures/ours/model.ckpt-3.*``: written by ckptsync (``python
  tests/checkpoint/test_tf_bundle.py`` reruns :func:`make_ours`: a ckptsync ``Saver``
  saves an HDF5 checkpoint, ``ckptsync convert`` turns it into TF's format). When the
  fixture was made, ``make_fixtures.py read-ours`` had TF read it: ``tf.train.list_variables``,
  ``NewCheckpointReader`` dtypes and a ``tf.train.Saver.restore`` into fresh variables
  succeeded, and what TF read is ``tf_fixtures/ours/tf_read.json``; the tests compare
  that golden with the values ckptsync wrote, and check that ckptsync still writes the
  very same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import ckptsync as cs
from ckptsync import checkpoint as ckpt
from ckptsync.checkpoint import _sstable
from ckptsync.checkpoint._tf_protos import BundleEntryProto, BundleHeaderProto
from ckptsync.checkpoint._tf_slices import decode_slice_key
from ckptsync.checkpoint.tf_bundle import TFBundleReader, data_file_path
from ckptsync.cli.main import main
from ckptsync.errors import DataLossError, NotFoundError, UnimplementedError

FIXTURES = Path(__file__).parent / "tf_fixtures"
TF_MIXED = FIXTURES / "tf_mixed"
TF_PREFIX = TF_MIXED / "model.ckpt-7"
OURS = FIXTURES / "ours"


def ours_values() -> dict[str, np.ndarray]:
    """The variables of the ckptsync-written fixture."""
    return {
        "dense/kernel": (np.arange(12, dtype=np.float32).reshape(3, 4) - 5) / 8,
        "dense/bias": np.array([0.1, 0.2, -0.3, 0.4], np.float32),
        "dense/kernel/Adam": np.full((3, 4), 0.125, np.float32),
        "global_step": np.array(3, np.int64),
        "stats/count": np.array([3, -1], np.int32),
        "stats/mean": np.array(2.5, np.float64),
        "mask": np.array([[True, False], [False, True]]),
        "tiny": np.array([-5, 6], np.int8),
        "pixels": np.array([0, 200, 255], np.uint8),
        "half": np.array([1.5, -0.25], np.float16),
        "z": np.array([2 - 1j], np.complex64),
        "nothing": np.zeros((0,), np.float32),
    }


def make_ours(out_dir: Path) -> str:
    """A ckptsync Saver saves ``ours_values`` (HDF5); ``ckptsync convert`` makes TF files."""
    h5_dir = out_dir / "h5"
    h5_dir.mkdir(parents=True, exist_ok=True)
    g = cs.Graph()
    with g.as_default():
        vs = [cs.Variable(v, name=k) for k, v in ours_values().items()]
        saver = cs.train.Saver(vs)
        with cs.Session() as sess:
            sess.run(cs.global_variables_initializer())
            h5_prefix = saver.save(sess, str(h5_dir / "model.ckpt"), global_step=3)
    dst = str(out_dir / "model.ckpt-3")
    result = CliRunner().invoke(main, ["convert", h5_prefix, dst], prog_name="ckptsync")
    assert result.exit_code == 0, result.output
    shutil.rmtree(h5_dir)
    return dst


def _tf_values() -> dict[str, np.ndarray]:
    with np.load(TF_MIXED / "tf_values.npz") as f:
        return {k: f[k] for k in f.files}


# -- reading TF's files ---------------------------------------------------------------
def test_reader_reads_what_tf_wrote() -> None:
    expected = _tf_values()
    with ckpt.NewCheckpointReader(str(TF_PREFIX)) as reader:
        assert isinstance(reader, TFBundleReader)
        assert reader.get_variable_to_shape_map() == {k: list(v.shape)
                                                      for k, v in expected.items()}
        assert reader.get_variable_to_dtype_map() == {k: v.dtype for k, v in expected.items()}
        assert reader.global_step == 7
        for name, want in expected.items():
            got = reader.get_tensor(name)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        with pytest.raises(NotFoundError, match="Key nope not found in checkpoint"):
            reader.get_tensor("nope")


def test_management_functions_read_tf_checkpoints() -> None:
    expected = _tf_values()
    assert ckpt.checkpoint_exists(str(TF_PREFIX))
    assert ckpt.latest_checkpoint(str(TF_MIXED)) == str(TF_PREFIX)
    assert ckpt.list_variables(str(TF_MIXED)) == sorted(
        (k, list(v.shape)) for k, v in expected.items())
    np.testing.assert_array_equal(ckpt.load_variable(str(TF_MIXED), "big/embedding:0"),
                                  expected["big/embedding"])
    got = ckpt.read_checkpoint(str(TF_PREFIX), names=["cplx", "empty"])
    assert got["empty"].shape == (0, 3)
    np.testing.assert_array_equal(got["cplx"], expected["cplx"])
    assert ckpt.get_checkpoint_mtimes([str(TF_PREFIX)]) == [
        os.stat(str(TF_PREFIX) + ".index").st_mtime]


def test_saver_restore_and_init_from_checkpoint_read_tf_checkpoint() -> None:
    expected = _tf_values()
    g = cs.Graph()
    with g.as_default():
        kernel = cs.Variable(np.zeros((2, 3), np.float32), name="dense/kernel")
        step = cs.Variable(np.int64(0), name="global_step")
        slot = cs.Variable(np.zeros((1, 2)), name="scope/var/Adam")
        saver = cs.train.Saver([kernel, step, slot])
        warm = cs.Variable(np.zeros(3, np.float32), name="model/bias")
        cs.train.init_from_checkpoint(str(TF_MIXED), {"dense/bias": warm})
        with cs.Session() as sess:
            sess.run(cs.global_variables_initializer())
            np.testing.assert_array_equal(sess.run(warm), expected["dense/bias"])
            saver.restore(sess, str(TF_PREFIX))
            k, s, a = sess.run([kernel, step, slot])
    np.testing.assert_array_equal(k, expected["dense/kernel"])
    assert s == 7
    np.testing.assert_array_equal(a, expected["scope/var/Adam"])


def test_inspect_cli_lists_a_tf_checkpoint() -> None:
    result = CliRunner().invoke(main, ["inspect", str(TF_MIXED), "--tensor", "counts"],
                                prog_name="ckptsync")
    assert result.exit_code == 0, result.output
    assert "global_step: 7" in result.stdout and "format version 2" in result.stdout
    assert any(line.split() == ["big/embedding", "float32", "[64,", "32]"]
               for line in result.stdout.splitlines())
    assert "verified: 16 variables" in result.stdout
    assert "tensor_name: counts  dtype: int32  shape: [4]" in result.stdout
    assert "2147483647" in result.stdout and "-2147483648" in result.stdout


def test_partitioned_variable_is_read_whole_from_its_parts(tmp_path: Path) -> None:
    prefix = FIXTURES / "tf_partitioned" / "model.ckpt-1"
    with np.load(prefix.parent / "tf_values.npz") as f:
        expected = {k: f[k] for k in f.files}
    assert ckpt.list_variables(str(prefix)) == [("emb", [300, 2]), ("plain", [2])]
    got = ckpt.read_checkpoint(str(prefix))
    for name, want in expected.items():
        np.testing.assert_array_equal(got[name], want)
    # A part that fails its crc32c is named with its variable.
    for f in prefix.parent.iterdir():
        shutil.copy(f, tmp_path / f.name)
    _damage(tmp_path / "model.ckpt-1.data-00000-of-00001", 1000)
    with pytest.raises(DataLossError, match="'emb': crc32c checksum mismatch"):
        ckpt.load_variable(str(tmp_path / "model.ckpt-1"), "emb")


def test_slice_keys_decode_as_tf_encodes_them() -> None:
    assert decode_slice_key(b"\x00emb\x00\x01\x01\x02\xc0d\xc0d\x80\x82") == (
        "emb", ((100, 100), (0, 2)))
    assert decode_slice_key(b"\x00a\x00\xffb\x00\x01\x01\x01\x80\x7f") == (
        "a\x00b", ((0, -1),))  # an escaped NUL; length -1: the whole dim
    for bad in (b"\x00emb", b"\x00emb\x00\x01\x01\x02\x80", b"\x01x\x00\x01\x00"):
        with pytest.raises(ValueError):
            decode_slice_key(bad)


# -- converting -----------------------------------------------------------------------
def test_convert_tf_to_h5_and_back_gives_tf_s_bytes(tmp_path: Path) -> None:
    runner = CliRunner()
    h5 = tmp_path / "served" / "model.ckpt-7"
    result = runner.invoke(main, ["convert", str(TF_MIXED), str(h5), "--update-state"],
                           prog_name="ckptsync")
    assert result.exit_code == 0, result.output
    assert ckpt.latest_checkpoint(str(h5.parent)) == str(h5)
    with ckpt.CheckpointReader(str(h5)) as reader:
        assert not isinstance(reader, TFBundleReader) and reader.global_step == 7
        for name, want in _tf_values().items():
            np.testing.assert_array_equal(reader.get_tensor(name), want)
    back = tmp_path / "tf" / "model.ckpt-7"
    result = runner.invoke(main, ["convert", str(h5), str(back)], prog_name="ckptsync")
    assert result.exit_code == 0, result.output
    for suffix in (".index", ".data-00000-of-00001"):  # byte for byte what TF wrote
        assert Path(str(back) + suffix).read_bytes() == Path(str(TF_PREFIX) + suffix).read_bytes()


@pytest.mark.parametrize("to", ["h5", "tf"])
def test_convert_refuses_an_existing_dst_unless_overwrite(tmp_path: Path, to: str) -> None:
    runner = CliRunner()
    dst = tmp_path / "out" / "model.ckpt-7"
    args = ["convert", str(TF_MIXED), str(dst), "--to", to]
    assert runner.invoke(main, args, prog_name="ckptsync").exit_code == 0
    files = [Path(f"{dst}.h5")] if to == "h5" else \
        [Path(f"{dst}.index"), Path(f"{dst}.data-00000-of-00001")]
    for f in files:
        f.write_bytes(b"precious")
    result = runner.invoke(main, args, prog_name="ckptsync")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and str(files[0]) in result.stderr
    assert "already exists" in result.stderr and "--overwrite" in result.stderr
    assert all(f.read_bytes() == b"precious" for f in files)  # untouched
    result = runner.invoke(main, [*args, "--overwrite"], prog_name="ckptsync")
    assert result.exit_code == 0, result.output
    with ckpt.CheckpointReader(str(dst)) as reader:
        for name, want in _tf_values().items():
            np.testing.assert_array_equal(reader.get_tensor(name, verify=True), want)
    assert sorted(p.name for p in dst.parent.iterdir()) == sorted(f.name for f in files)


def test_ours_converted_is_what_tf_restored(tmp_path: Path) -> None:
    """The committed ckptsync-written TF checkpoint is still what ckptsync writes, and
    what TF read from it (tf_read.json, made by TF) is what ckptsync saved."""
    prefix = make_ours(tmp_path)
    for suffix in (".index", ".data-00000-of-00001"):
        assert Path(prefix + suffix).read_bytes() == (OURS / f"model.ckpt-3{suffix}").read_bytes()
    golden = json.loads((OURS / "tf_read.json").read_text())
    values = ours_values()
    assert golden["list_variables"] == sorted([k, list(v.shape)] for k, v in values.items())
    assert golden["dtypes"] == {k: v.dtype.name for k, v in values.items()}
    for name, want in values.items():
        got = golden["restored"][name]
        if want.dtype.kind == "c":
            got = np.array(got[0]) + 1j * np.array(got[1])
        np.testing.assert_array_equal(np.asarray(got, want.dtype).reshape(want.shape), want)


def test_written_structure_checks_out(tmp_path: Path) -> None:
    """The structure TF's reader expects: header first, sorted keys, contiguous data,
    masked crc32c of each tensor's bytes."""
    arrays = {"b": np.arange(5, dtype=np.int64), "a/x": np.float32(1.5), "e": np.zeros((2, 0))}
    prefix = ckpt.write_tf_checkpoint(tmp_path / "m", arrays, global_step=9)
    items = _sstable.read_table(Path(prefix + ".index").read_bytes())
    assert [k for k, _ in items] == [b"", b"a/x", b"b", b"e", b"global_step"]
    header = BundleHeaderProto.FromString(items[0][1])
    assert (header.num_shards, header.endianness, header.version.producer) == (1, 0, 1)
    data = Path(data_file_path(prefix)).read_bytes()
    offset = 0
    for _key, value in items[1:]:
        entry = BundleEntryProto.FromString(value)
        assert entry.offset == offset
        chunk = data[offset:offset + entry.size]
        assert _sstable.unmask_crc(entry.crc32c) == _sstable.crc32c(chunk)
        offset += entry.size
    assert offset == len(data)
    assert ckpt.read_checkpoint(prefix)["global_step"] == 9


def test_many_variables_span_blocks(tmp_path: Path) -> None:
    arrays = {f"layer_{i:05d}/" + "w" * 40: np.full(2, i, np.int32) for i in range(6000)}
    prefix = ckpt.write_tf_checkpoint(tmp_path / "m", arrays)
    index = Path(prefix + ".index").read_bytes()
    assert len(index) > _sstable.BLOCK_SIZE  # two data blocks at least
    got = ckpt.read_checkpoint(prefix)
    assert len(got) == 6000 and got["layer_05999/" + "w" * 40].tolist() == [5999, 5999]


def test_crc_masking_round_trips() -> None:
    for crc in (0, 1, 0xFFFFFFFF, 0x12345678, _sstable.crc32c(b"123456789")):
        assert _sstable.unmask_crc(_sstable.mask_crc(crc)) == crc
    assert _sstable.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


# -- damaged files --------------------------------------------------------------------
def _copy(tmp_path: Path, src: Path = TF_PREFIX) -> Path:
    for f in src.parent.iterdir():
        shutil.copy(f, tmp_path / f.name)
    return tmp_path / src.name


def _damage(path: Path, at: int, flip: int = 0xFF) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= flip
    path.write_bytes(bytes(raw))


def _index(prefix: Path) -> Path:
    return Path(str(prefix) + ".index")


def _data(prefix: Path) -> Path:
    return Path(str(prefix) + ".data-00000-of-00001")


def test_missing_checkpoint_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="Failed to find any matching files"):
        TFBundleReader(tmp_path / "nothing")
    with pytest.raises(NotFoundError):
        ckpt.NewCheckpointReader(str(tmp_path / "nothing"))


@pytest.mark.parametrize("cut", [0, 10, 47, 100, -1, -48])
def test_truncated_index_is_data_loss(tmp_path: Path, cut: int) -> None:
    prefix = _copy(tmp_path)
    raw = _index(prefix).read_bytes()
    _index(prefix).write_bytes(raw[:cut] if cut >= 0 else raw[:len(raw) + cut])
    with pytest.raises(DataLossError, match=f"{_index(prefix)} is corrupt"):
        ckpt.NewCheckpointReader(str(prefix))


@pytest.mark.parametrize("src", [TF_PREFIX, FIXTURES / "tf_partitioned" / "model.ckpt-1"])
def test_every_flipped_index_byte_is_data_loss(tmp_path: Path, src: Path) -> None:
    prefix = _copy(tmp_path, src)
    good = _index(prefix).read_bytes()
    for at in range(len(good)):
        raw = bytearray(good)
        raw[at] ^= 0x55
        _index(prefix).write_bytes(bytes(raw))
        with pytest.raises((DataLossError, UnimplementedError), match=src.name):
            with ckpt.NewCheckpointReader(str(prefix)) as reader:
                for name in reader.get_variable_to_shape_map():
                    reader.get_tensor(name)


def test_flipped_data_byte_fails_the_crc(tmp_path: Path) -> None:
    prefix = _copy(tmp_path)
    _damage(_data(prefix), 5000)  # inside big/embedding
    with ckpt.NewCheckpointReader(str(prefix)) as reader:
        reader.get_tensor("dense/kernel")
        with pytest.raises(DataLossError, match="'big/embedding': crc32c checksum mismatch"):
            reader.get_tensor("big/embedding")
    with pytest.raises(DataLossError, match=str(_data(prefix))):
        ckpt.read_checkpoint(str(prefix))


def test_truncated_or_missing_data_file_is_data_loss(tmp_path: Path) -> None:
    prefix = _copy(tmp_path)
    raw = _data(prefix).read_bytes()
    _data(prefix).write_bytes(raw[:-10])
    with pytest.raises(DataLossError, match="ends before the tensor's bytes"):
        ckpt.read_checkpoint(str(prefix))
    _data(prefix).unlink()
    with pytest.raises(DataLossError, match="does not exist"):
        ckpt.read_checkpoint(str(prefix))


def test_cli_reports_damage_in_one_line(tmp_path: Path) -> None:
    prefix = _copy(tmp_path)
    _index(prefix).write_bytes(_index(prefix).read_bytes()[:-3])
    for args in (["inspect", str(prefix)], ["convert", str(prefix), str(tmp_path / "o")]):
        result = CliRunner().invoke(main, args, prog_name="ckptsync")
        assert result.exit_code == 1
        assert result.stderr.count("\n") == 1 and "is corrupt" in result.stderr
        assert "Traceback" not in result.output


def test_string_tensors_are_refused_clearly(tmp_path: Path) -> None:
    header = BundleHeaderProto(num_shards=1)
    header.version.producer = 1
    entry = BundleEntryProto(dtype=7, size=3)
    entry.shape.SetInParent()
    table = _sstable.build_table([(b"", header.SerializeToString()),
                                  (b"name", entry.SerializeToString())])
    (tmp_path / "s.index").write_bytes(table)
    (tmp_path / "s.data-00000-of-00001").write_bytes(b"abc")
    with ckpt.NewCheckpointReader(str(tmp_path / "s")) as reader:
        assert reader.get_variable_to_shape_map() == {"name": []}
        with pytest.raises(UnimplementedError, match="'name' is a string tensor"):
            reader.get_tensor("name")


def _one_entry_bundle(tmp_path: Path, name: str, dtype: int) -> Path:
    header = BundleHeaderProto(num_shards=1)
    header.version.producer = 1
    entry = BundleEntryProto(dtype=dtype, size=2)
    entry.shape.dim.add(size=1)
    table = _sstable.build_table([(b"", header.SerializeToString()),
                                  (name.encode(), entry.SerializeToString())])
    (tmp_path / "b.index").write_bytes(table)
    (tmp_path / "b.data-00000-of-00001").write_bytes(b"\0\0")
    return tmp_path / "b"


def test_a_valid_but_unsupported_dtype_is_unimplemented_not_corrupt(tmp_path: Path) -> None:
    prefix = _one_entry_bundle(tmp_path, "bf16", 14)  # DT_BFLOAT16, as TF writes it
    with pytest.raises(UnimplementedError,
                       match=f"unsupported dtype bfloat16 for tensor 'bf16' in .*{prefix.name}"
                       ) as info:
        ckpt.NewCheckpointReader(str(prefix))
    assert "corrupt" not in str(info.value)
    result = CliRunner().invoke(main, ["inspect", str(prefix)], prog_name="ckptsync")
    assert result.exit_code == 1 and "unsupported dtype bfloat16" in result.stderr
    assert "corrupt" not in result.stderr and "Traceback" not in result.output
    # an enum value TF has no type for is damage: still DataLossError
    with pytest.raises(DataLossError, match="is corrupt: tensor 'bf16': invalid dtype 99"):
        ckpt.NewCheckpointReader(str(_one_entry_bundle(tmp_path, "bf16", 99)))


if __name__ == "__main__":  # regenerate tf_fixtures/ours (then run make_fixtures.py read-ours)
    OURS.mkdir(exist_ok=True)
    print(make_ours(OURS), file=sys.stderr)
