"""The line budget of STYLE.md: no ``src/`` module over 500 lines (split it by concept)."""

from __future__ import annotations

import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "ckptsync"
BUDGET_LINES = 500

MODULES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_module_is_within_the_line_budget(path: pathlib.Path):
    lines = len(path.read_text().splitlines())
    assert lines <= BUDGET_LINES, (
        f"{path.relative_to(SRC.parent.parent)} has {lines} lines, over the budget of "
        f"{BUDGET_LINES}: split it by concept (docs/architecture.md)"
    )


def test_the_budget_sees_the_package():
    assert len(MODULES) > 20, f"found only {len(MODULES)} modules under {SRC}"
