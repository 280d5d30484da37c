"""A TF1 name ckptsync does not implement raises an AttributeError that names the TF1 API
and says it is not implemented (not Python's bare "no attribute"), and each is listed in
docs/graph-language.md's "Not implemented"."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import ckptsync.compat.v1 as tf
from ckptsync.not_implemented import NOT_IMPLEMENTED

DOC = (Path(__file__).parents[2] / "docs" / "graph-language.md").read_text()


@pytest.mark.parametrize("dotted", sorted(NOT_IMPLEMENTED))
def test_each_listed_name_says_it_is_not_implemented(dotted: str) -> None:
    module_name, _, name = dotted.rpartition(".")
    module = importlib.import_module(module_name)
    with pytest.raises(AttributeError) as e:
        getattr(module, name)
    tf_name = "tf." + dotted.partition(".")[2]
    assert f"TF1's {tf_name} is not implemented in ckptsync" in str(e.value)
    assert not hasattr(module, name)  # (hasattr still answers False)
    table = DOC.split("## Not implemented")[1].split("\n## ")[0]
    assert re.search(rf"`[^`]*\b{name}\b[^`]*`", table), (
        f"{tf_name} is missing from docs/graph-language.md's table")


def test_a_name_tf1_never_had_gets_pythons_own_message() -> None:
    with pytest.raises(AttributeError, match=r"^module 'ckptsync.nn' has no attribute 'relux'$"):
        tf.nn.relux  # noqa: B018
    with pytest.raises(AttributeError, match=r"^module 'ckptsync' has no attribute 'Sesion'$"):
        tf.Sesion  # noqa: B018


def test_a_tf1_program_reaching_one_fails_at_that_line_with_the_hint() -> None:
    with pytest.raises(AttributeError, match=r"tf.feature_column is not implemented.*"
                                             r"embedding_lookup"):
        tf.feature_column.numeric_column("x")
