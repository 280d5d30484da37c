"""Device names as TensorFlow writes them (``/cpu:0``, ``cpu:1``, ``/device:GPU:0``).

``canonical_device`` normalizes any accepted form to ``"/device:CPU:0"``. CPU devices run
numpy. A GPU device is accepted (graphs written for one still build and run) and, as TF1
with ``allow_soft_placement``, its ops run on the CPU's numpy kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import CkptsyncValueError

__all__ = ["DeviceSpec", "canonical_device", "KNOWN_DEVICE_TYPES"]

KNOWN_DEVICE_TYPES = ("CPU", "GPU")

_FULL = re.compile(
    r"^(?:/job:(?P<job>[^/]+))?(?:/replica:(?P<replica>\d+))?(?:/task:(?P<task>\d+))?"
    r"(?:/?(?:device:)?(?P<type>[A-Za-z]+):(?P<index>\d+|\*))?$"
)


@dataclass(frozen=True)
class DeviceSpec:
    """A parsed device name, as ``tf.DeviceSpec``."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    @classmethod
    def from_string(cls, spec: str) -> DeviceSpec:
        """Parses ``"/cpu:0"``, ``"cpu:1"``, ``"/device:GPU:0"``, ``"/job:w/task:1/cpu:0"``.

        Raises:
            ValueError: the string is malformed or names an unknown device type.
        """
        s = spec.strip()
        m = _FULL.match(s)
        if not s or m is None:
            raise CkptsyncValueError(
                f"Invalid device specification {spec!r}: expected a form such as '/cpu:0', "
                "'cpu:1' or '/device:GPU:0'."
            )
        dtype = m.group("type")
        if dtype is not None and dtype.upper() not in KNOWN_DEVICE_TYPES:
            raise CkptsyncValueError(
                f"Unknown device type {dtype!r} in {spec!r}; known types are "
                f"{', '.join(KNOWN_DEVICE_TYPES)}."
            )
        idx = m.group("index")
        return cls(
            job=m.group("job"),
            replica=int(m.group("replica")) if m.group("replica") else None,
            task=int(m.group("task")) if m.group("task") else None,
            device_type=dtype.upper() if dtype else None,
            device_index=None if idx in (None, "*") else int(idx),
        )

    def to_string(self) -> str:
        parts = []
        if self.job is not None:
            parts.append(f"/job:{self.job}")
        if self.replica is not None:
            parts.append(f"/replica:{self.replica}")
        if self.task is not None:
            parts.append(f"/task:{self.task}")
        if self.device_type is not None:
            idx = "*" if self.device_index is None else str(self.device_index)
            parts.append(f"/device:{self.device_type}:{idx}")
        return "".join(parts)


def canonical_device(spec: str) -> str:
    """Normalizes a device string, e.g. ``"cpu:1" -> "/device:CPU:1"``.

    Raises:
        ValueError: malformed or of an unknown device type.
    """
    return DeviceSpec.from_string(spec).to_string()
