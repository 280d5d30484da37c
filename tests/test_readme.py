"""The README's library example and the docs' marked examples run as printed; the README's
and docs' relative links resolve."""

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
PAGES = [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


def marked_blocks(page: Path) -> list[str]:
    """The ```python blocks that follow MARKER on ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for after in text.split(MARKER)[1:]:
        after = after.lstrip("\n")
        assert after.startswith("```python\n"), f"{page.name}: the marker must precede a block"
        body = after[len("```python\n"):]
        blocks.append(body[: body.index("\n```")] + "\n")
    return blocks


def run_example(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    (cwd / "example.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPTSYNC_")}
    return subprocess.run([sys.executable, "example.py"], cwd=cwd, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=100)


@pytest.mark.timeout(120)
def test_the_readme_library_example_trains_saves_and_reads_back(tmp_path):
    (code,) = marked_blocks(README)
    assert len(code.splitlines()) <= 25, "the README's example should stay short"
    r = run_example(code, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "my_ckpts/model.ckpt-1 1 (64, 10)"
    assert sorted(p.name for p in (tmp_path / "my_ckpts").iterdir()) == [
        "checkpoint", "model.ckpt-1.h5"]


DOC_EXAMPLES = [(page, i, code) for page in PAGES if page != README
                for i, code in enumerate(marked_blocks(page))]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("page", "i", "code"), DOC_EXAMPLES,
                         ids=[f"{p.name}-{i}" for p, i, _ in DOC_EXAMPLES])
def test_a_marked_docs_example_runs_and_writes_a_checkpoint(tmp_path, page, i, code):
    r = run_example(code, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(tmp_path.glob("*/checkpoint")), f"{page.name} example {i} saved nothing"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings ("## In-process: `X`" -> in-process-x)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        linked = page.parent / path if path else page
        if not linked.exists() or (anchor and linked.suffix == ".md"
                                   and anchor not in anchors(linked)):
            missing.append(target)
    assert not missing, f"{page.name} links to missing files or headings: {missing}"
