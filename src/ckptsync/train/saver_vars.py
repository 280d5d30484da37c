"""Which variables a ``Saver`` saves and under which keys, and the session checks it
makes before a save (TF1's ``saveable_object_util`` behaviour).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import CkptsyncTypeError, CkptsyncValueError
from ..graph import GraphKeys, Tensor, get_default_graph
from ..variables import Variable
from .training_util import get_global_step

__all__ = ["is_saveable", "build_var_map", "check_session_graph", "get_default_graph_step"]


def is_saveable(v: Any) -> bool:
    """A saveable object other than a variable (a ``tf.data`` iterator's position): it
    has ``name``, ``save_value(sess)`` and ``restore_value(sess, array)``."""
    if type(v) is Variable:  # the common case, without two failed attribute lookups
        return False
    return hasattr(v, "save_value") and hasattr(v, "restore_value")


def _key_of(v: Any) -> str:
    if is_saveable(v):
        return str(v.name)
    if isinstance(v, Variable):
        return v.op.name
    if isinstance(v, Tensor) and v.op.type == "VariableV2":
        return v.op.name
    raise CkptsyncTypeError(f"Variables to save should be passed in a dict or a list, got an "
                            f"element {v!r}.")


def build_var_map(var_list: Any) -> dict[str, Any]:
    """Checkpoint key -> variable for a Saver's ``var_list`` (None: the graph's global
    variables and saveable objects), as TF1's Saver names them.

    Raises:
        TypeError: ``var_list`` is not a list or dict, or holds a non-variable.
        ValueError: two names for one variable, or one name for two.
    """
    if var_list is None:
        var_list = get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES) + \
            get_default_graph().get_collection("saveable_objects")
    if isinstance(var_list, Mapping):
        out: dict[str, Any] = {}
        seen: dict[int, str] = {}
        for k, v in var_list.items():
            _key_of(v)
            if id(v) in seen:
                raise CkptsyncValueError(
                    f"The same saveable will be restored with two names: {seen[id(v)]} and {k}")
            seen[id(v)] = k
            out[str(k)] = v
        return out
    if not isinstance(var_list, (list, tuple, set)):
        raise CkptsyncTypeError("Variables to save should be passed in a dict or a list: "
                                f"{var_list!r}")
    out = {}
    for v in var_list:
        k = _key_of(v)
        if k in out:
            raise CkptsyncValueError(f"At least two variables have the same name: {k}")
        out[k] = v
    return out


def get_default_graph_step(sess: Any, var_map: dict[str, Any]) -> int | None:
    """The graph's global step value in ``sess`` if it exists and is initialized."""
    gs = get_global_step(sess.graph)
    if gs is None or not sess.has_variable(gs.op.name):
        return None
    return int(sess.read_variables([gs.op.name])[gs.op.name])


def check_session_graph(sess: Any, var_map: dict[str, Any]) -> None:
    """Raises ``ValueError`` when ``sess`` runs another graph than the saved variables'."""
    graph = getattr(sess, "graph", None)
    for v in var_map.values():
        if graph is not None and v.graph is not graph:
            raise CkptsyncValueError(
                f"The session runs another graph than the one holding variable {v.op.name}; "
                "create the Saver and the Session on the same graph.")
        break
