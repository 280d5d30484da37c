"""The gate: a user function that accepts or rejects a loaded version before it is served.

The manager calls ``gate(candidate)`` on its load thread after a checkpoint has been read
and verified and before the swap. A :class:`Candidate` can run the model on the new
parameters (``candidate.predict``) and on the ones being served
(``candidate.previous.predict``), so a gate can hold out data and refuse a version whose
accuracy dropped. The gate returns ``True`` (serve it), ``False`` (refuse it) or
``(accepted, reason)``; an exception refuses too (any ``BaseException``, ``SystemExit``
included). A refused version never replaces the one
being served; its status says ``FAILED_PRECONDITION`` with the reason.

The gate guards automatic updates (the ``latest`` policy); a version pinned by an operator
is served without it.

Example (``gate.py``, used as ``infer serve --gate gate.py:accuracy_gate``)::

    import numpy as np
    X, Y = np.load("heldout.npz").values()

    def accuracy_gate(candidate):
        acc = (candidate.predict({"x": X})["classes"] == Y).mean()
        if candidate.previous is None:
            return True
        old = (candidate.previous.predict({"x": X})["classes"] == Y).mean()
        return acc >= old - 0.01, f"held-out accuracy {acc:.3f}, serving {old:.3f}"
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..model_spec import load_python_file
from .loader import Snapshot
from .servable import Servable, validate_inputs

__all__ = ["Candidate", "Gate", "load_gate", "run_gate"]


class Candidate:
    """A version as a gate sees it: the model on one parameter snapshot.

    Attributes:
        version: the checkpoint's global step.
        prefix: the checkpoint prefix (``ckpts/model.ckpt-1200``).
        params: checkpoint key -> read-only array.
        previous: the version being served, as a Candidate, or None before the first load.

    Thread-safety: immutable; :meth:`predict` may be called from any thread.
    """

    def __init__(self, servable: Servable, snapshot: Snapshot, previous: Snapshot | None = None):
        self._servable, self._snapshot = servable, snapshot
        self.version, self.prefix, self.params = snapshot.version, snapshot.prefix, snapshot.params
        self.previous = None if previous is None else Candidate(servable, previous)

    def predict(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Runs the serving signature on these parameters.

        Args:
            inputs: input key -> array-like, e.g. ``{"x": float32 [batch, 64]}``.

        Returns:
            Output key -> array.

        Raises:
            InvalidArgumentError: inputs that do not fit the signature.
        """
        arrays = validate_inputs(self._servable.signature, inputs)
        return self._servable.run(self._snapshot.params, arrays)

    def __repr__(self) -> str:
        return f"Candidate(version={self.version}, prefix={self.prefix!r})"


Gate = Callable[[Candidate], Any]


def run_gate(gate: Gate, candidate: Candidate) -> tuple[bool, str]:
    """Calls ``gate`` and normalizes its answer to ``(accepted, reason)``.

    Never raises for a gate's own failure: an exception (any ``BaseException``, so also
    ``SystemExit`` and ``KeyboardInterrupt`` raised by the gate's code: on the load thread
    they would otherwise end the thread and nothing would load again) or an answer that is
    not a bool or a ``(bool, str)`` pair is a rejection whose reason says so.
    """
    name = getattr(gate, "__name__", repr(gate))
    try:
        answer = gate(candidate)
    except BaseException as e:  # a gate's sys.exit() refuses the version, too
        detail = str(e)
        return False, f"the gate {name} raised {type(e).__name__}" + (
            f": {detail}" if detail else "")
    reason = ""
    if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], str):
        answer, reason = answer
    if isinstance(answer, (bool, np.bool_)):
        if answer:
            return True, reason
        return False, f"rejected by the gate function {name}" + (f": {reason}" if reason else "")
    return False, (
        f"the gate {name} must return a bool or (bool, str), got {type(answer).__name__}; "
        "refusing the version"
    )


def load_gate(spec: str) -> Gate:
    """Imports ``FILE:FUNC`` (``gates.py:accuracy_gate``) and returns the function.

    The file is the operator's own code, imported like a model file; nothing read from a
    checkpoint is ever executed.

    Raises:
        ValueError: ``spec`` is not ``FILE:FUNC``, the file is missing or fails to import,
            or it defines no callable ``FUNC``. The message names the file and function.
    """
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func.isidentifier():
        raise ValueError(f"a gate must be given as FILE:FUNC (e.g. gates.py:accuracy), got {spec!r}")
    module = load_python_file(path, "gate file", ValueError)
    fn = getattr(module, func, None)
    if not callable(fn):
        raise ValueError(f"gate file {path} defines no function {func}(candidate)")
    return fn  # type: ignore[no-any-return]
