"""Golden layout: pins the on-disk format described in docs/checkpoint-format.md."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from ckptsync.checkpoint import write_checkpoint

ARRAYS = {
    "dense0/w": np.arange(6, dtype=np.float32).reshape(2, 3),
    "dense0/b": np.array([1, 2, 3], np.float32),
    "dense0/w/Adam": np.zeros((2, 3), np.float32),
    "global_step": np.int64(1200),
    "mask": np.array([True, False]),
}

GOLDEN_INDEX = (
    '{"format_version":1,"variables":['
    '{"dtype":"float32","name":"dense0/b","nbytes":12,"shape":[3],"xxh3_64":"7977fbb9ac817d62"},'
    '{"dtype":"float32","name":"dense0/w","nbytes":24,"shape":[2,3],"xxh3_64":"dcd21c42ccaa9d2a"},'
    '{"dtype":"float32","name":"dense0/w/Adam","nbytes":24,"shape":[2,3],"xxh3_64":"743df94ee4c78a2a"},'
    '{"dtype":"int64","name":"global_step","nbytes":8,"shape":[],"xxh3_64":"d48c2ea3e9e535cf"},'
    '{"dtype":"bool","name":"mask","nbytes":2,"shape":[2],"xxh3_64":"ab94ac0ace7276c0"}]}'
)

GOLDEN_H5LS = """\
/                        Group
/_ckptsync               Group
/_ckptsync/index         Dataset {489}
/dense0                  Group
/dense0/b                Dataset {3}
/dense0/w                Group
/dense0/w/:value         Dataset {2, 3}
/dense0/w/Adam           Dataset {2, 3}
/global_step             Dataset {SCALAR}
/mask                    Dataset {2}
"""


@pytest.fixture
def golden_file(tmp_path: Path) -> Path:
    prefix = write_checkpoint(tmp_path / "model.ckpt-1200", ARRAYS, 1200, {"model": "mlp"})
    return Path(prefix + ".h5")


def _describe(f: h5py.File) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def visit(name: str, obj: Any) -> None:
        attrs = {k: (obj.attrs.get_id(k).dtype.str, obj.attrs[k]) for k in obj.attrs}
        if isinstance(obj, h5py.Dataset):
            plist = obj.id.get_create_plist()
            assert plist.get_layout() == h5py.h5d.CONTIGUOUS and plist.get_nfilters() == 0
            out[name] = ("dataset", obj.dtype.str, obj.shape, attrs)
        else:
            out[name] = ("group", attrs)

    f.visititems(visit)
    return out


def test_golden_layout_with_plain_h5py(golden_file: Path) -> None:
    with h5py.File(golden_file, "r") as f:
        root = {k: (f.attrs.get_id(k).dtype.str, f.attrs[k]) for k in f.attrs}
        layout = _describe(f)
        index = f["_ckptsync/index"][()].tobytes().decode("utf-8")
        values = {k: f[p][()] for k, p in [("w", "dense0/w/:value"), ("mask", "mask")]}
    assert sorted(root) == [
        "ckptsync_format_version",
        "created_unix_s",
        "global_step",
        "metadata_json",
        "writer",
    ]
    assert root["ckptsync_format_version"] == ("<i8", 1)
    assert root["global_step"] == ("<i8", 1200)
    assert root["created_unix_s"][0] == "<f8"
    # null-padded to 64 bytes; numpy's S dtype drops the padding
    assert root["metadata_json"] == ("|S64", b'{"model": "mlp"}')
    assert root["writer"][1].startswith(b"ckptsync ")
    h = "|S16"
    assert layout == {
        "_ckptsync": ("group", {}),
        "_ckptsync/index": (
            "dataset",
            "|u1",
            (489,),
            {"xxh3_64": (h, layout["_ckptsync/index"][3]["xxh3_64"][1])},
        ),
        "dense0": ("group", {}),
        "dense0/b": ("dataset", "<f4", (3,), {"xxh3_64": (h, b"7977fbb9ac817d62")}),
        "dense0/w": ("group", {}),
        "dense0/w/:value": ("dataset", "<f4", (2, 3), {"xxh3_64": (h, b"dcd21c42ccaa9d2a")}),
        "dense0/w/Adam": ("dataset", "<f4", (2, 3), {"xxh3_64": (h, b"743df94ee4c78a2a")}),
        "global_step": ("dataset", "<i8", (), {"xxh3_64": (h, b"d48c2ea3e9e535cf")}),
        "mask": ("dataset", "|b1", (2,), {"xxh3_64": (h, b"ab94ac0ace7276c0")}),
    }
    assert index == GOLDEN_INDEX
    assert json.loads(index)["variables"][1]["name"] == "dense0/w"
    np.testing.assert_array_equal(values["w"], ARRAYS["dense0/w"])
    np.testing.assert_array_equal(values["mask"], ARRAYS["mask"])


def test_file_starts_with_hdf5_superblock_v2(golden_file: Path) -> None:
    head = golden_file.read_bytes()[:9]
    assert head == b"\x89HDF\r\n\x1a\n\x02"  # signature + superblock v2 (libver v108)


def test_h5ls_lists_the_golden_tree(golden_file: Path) -> None:
    h5ls = shutil.which("h5ls")
    if h5ls is None:
        pytest.skip("h5ls (hdf5-tools) is not installed")
    out = subprocess.run([h5ls, "-r", str(golden_file)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == GOLDEN_H5LS
