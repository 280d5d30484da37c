"""Doctests of ``src/ckptsync`` run in the suite (``--doctest-modules``); each runs in a
fresh temporary directory, so an example may write ``ckpts/`` as a user's would."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _doctest_in_tmp_dir(request: pytest.FixtureRequest, tmp_path, monkeypatch) -> None:
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.chdir(tmp_path)
