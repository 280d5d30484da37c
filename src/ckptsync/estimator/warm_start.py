"""``WarmStartSettings`` and the warm start itself, as TF's
``tf.estimator.WarmStartSettings`` and ``tf.compat.v1.train.warm_start`` (trainable
variables by name; no vocabularies)."""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import CkptsyncValueError
from ..train import init_from_checkpoint
from ..variables import trainable_variables

__all__ = ["WarmStartSettings", "warm_start"]


class WarmStartSettings:
    """Where a first ``train`` takes its starting values from, as TF's
    ``tf.estimator.WarmStartSettings``: the trainable variables whose names match
    ``vars_to_warm_start`` (a regex, or a list of names) are read, under the same name,
    from ``ckpt_to_initialize_from`` (a checkpoint prefix or directory)."""

    def __init__(self, ckpt_to_initialize_from: str, vars_to_warm_start: Any = ".*",
                 var_name_to_vocab_info: Any = None, var_name_to_prev_var_name: Any = None):
        if var_name_to_vocab_info:
            raise CkptsyncValueError("WarmStartSettings: var_name_to_vocab_info is not supported.")
        self.ckpt_to_initialize_from = os.fspath(ckpt_to_initialize_from)
        self.vars_to_warm_start = vars_to_warm_start
        self.var_name_to_prev_var_name = dict(var_name_to_prev_var_name or {})


def warm_start(settings: WarmStartSettings) -> None:
    """As TF's ``tf.compat.v1.train.warm_start`` for trainable variables."""
    pattern = settings.vars_to_warm_start
    names = [v.op.name for v in trainable_variables()]
    if isinstance(pattern, str):
        chosen = [n for n in names if re.match(pattern, n)]
    else:
        chosen = [n for n in names if n in set(pattern or ())]
    init_from_checkpoint(settings.ckpt_to_initialize_from, {
        settings.var_name_to_prev_var_name.get(n, n): n for n in chosen})
