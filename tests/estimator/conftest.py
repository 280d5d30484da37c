"""The Estimator writes event files through ``tf.summary.FileWriterCache`` (one writer
per directory and process, as TF): each test closes them before the leak check."""

from __future__ import annotations

import pytest

import ckptsync as cs


@pytest.fixture(autouse=True)
def _close_cached_writers():
    yield
    cs.summary.FileWriterCache.clear()
