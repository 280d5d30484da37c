"""The README's library example runs as printed, and the README's and docs' links resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARKER = "<!-- tests/test_readme.py runs the next block in an empty directory -->"


def readme_example() -> str:
    """The ```python block right after MARKER in README.md."""
    text = README.read_text(encoding="utf-8")
    assert text.count(MARKER) == 1, "README.md must mark exactly one block for this test"
    after = text[text.index(MARKER) + len(MARKER):].lstrip("\n")
    assert after.startswith("```python\n"), "the marker must be followed by a python block"
    body = after[len("```python\n"):]
    return body[: body.index("\n```")] + "\n"


@pytest.mark.timeout(120)
def test_the_readme_library_example_trains_saves_and_reads_back(tmp_path):
    code = readme_example()
    assert len(code.splitlines()) <= 25, "the README's example should stay short"
    (tmp_path / "example.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPTSYNC_")}
    r = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=100)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "ckpts/model.ckpt-1 1 (64, 10)"
    assert sorted(p.name for p in (tmp_path / "ckpts").iterdir()) == [
        "checkpoint", "model.ckpt-1.h5"]


def _markdown_files() -> list[Path]:
    docs = sorted((REPO / "docs").glob("*.md"))
    return [README, REPO / "CHANGELOG.md", *docs]


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: p.name)
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor on the same page
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page.name} links to missing files: {missing}"
