"""pyproject.toml lists every package under src/ (setuptools installs only the packages it
lists: a package missing there works in the editable install and vanishes from a wheel)."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_package_under_src_is_in_pyproject():
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^packages = \[(.*?)\]", text, re.S | re.M)
    assert block, "no packages list in pyproject.toml"
    listed = set(re.findall(r'"([\w.]+)"', block.group(1)))
    src = ROOT / "src"
    found = {".".join(p.parent.relative_to(src).parts) for p in src.rglob("__init__.py")
             if "__pycache__" not in p.parts}
    assert "ckptsync.data" in found and sorted(found - listed) == []
