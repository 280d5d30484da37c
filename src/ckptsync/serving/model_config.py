"""TF Serving's ``--model_config_file``: the models one server serves.

The file is a ``ModelServerConfig`` in protobuf text format, as TF Serving's, with one
field more, ``model_file`` (ckptsync builds the graph from a model file, where TF
Serving reads a SavedModel)::

    model_config_list {
      config {
        name: "digits"                       # the {name} in URLs and model_spec.name
        base_path: "/ckpts/digits"           # the checkpoint directory (may not exist yet)
        model_file: "/models/digits_cnn.py"  # build_net(graph, device, mode) or model_fn
        model_platform: "tensorflow"         # optional; "" or "tensorflow"
        model_version_policy { specific { versions: 1200 } }  # default: latest
        version_labels { key: "stable" value: 1200 }
      }
      config { name: "ctr" base_path: "/ckpts/ctr" model_file: "/models/ctr.py" }
    }

Relative paths are relative to the server's working directory, as TF Serving's. The
versions served: ``latest {}`` (``num_versions: 1``, the default: the newest checkpoint,
following the stream), or ``specific { versions: 1200 versions: 1300 }`` (each named
version at once, as TF Serving's: a stable and a canary). ``all`` and ``num_versions`` > 1
are refused with an error that says so (a checkpoint stream makes "every version" or "the
newest N" a moving set of loads; name the versions instead).

Example:
    >>> entries = parse_model_server_config(
    ...     'model_config_list { config { name: "digits" base_path: "ckpts" '
    ...     'model_file: "model.py" model_version_policy { specific { versions: 1200 } } } }',
    ...     "models.config")
    >>> entries[0].name, os.path.basename(entries[0].base_path), entries[0].versions
    ('digits', 'ckpts', (1200,))
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import text_format

from .. import errors
from ..errors import InvalidArgumentError
from . import tfs_protos as pb

__all__ = ["ModelConfigEntry", "parse_model_server_config", "read_model_config_file",
           "entries_from_proto"]

# A name goes into URL paths (/v1/models/{name}:predict) and Prometheus labels.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")  # fullmatch: no "\n" after
_LABEL = re.compile(r"[A-Za-z0-9_\-]{1,64}")


@dataclass(frozen=True)
class ModelConfigEntry:
    """One model of a ``model_config_list``, checked.

    Attributes:
        name: the model's name (``[A-Za-z0-9][A-Za-z0-9_.-]*``, at most 128 characters).
        base_path: its checkpoint directory, absolute.
        model_file: the model file whose graph it serves, absolute.
        versions: the versions ``specific`` names, ascending, without repeats; ``()`` for
            ``latest`` (the newest).
        version_labels: label -> version (TF Serving's ``version_labels``).
    """

    name: str
    base_path: str
    model_file: str
    versions: tuple[int, ...] = ()
    version_labels: Mapping[str, int] = field(default_factory=dict)

    def same_graph(self, other: ModelConfigEntry) -> bool:
        """Whether ``other`` serves the same graph from the same directory (only its
        policy or labels may differ, which a running model can take without a rebuild)."""
        return (self.base_path, self.model_file) == (other.base_path, other.model_file)

    def policies(self) -> tuple[int | None, ...]:
        """The version policy of each of its managers: ``(None,)`` (latest) or the
        versions, one manager pinned to each."""
        return self.versions or (None,)


def parse_model_server_config(text: str, source: str) -> list[ModelConfigEntry]:
    """Parses a ``ModelServerConfig`` in protobuf text format.

    Args:
        text: the file's text.
        source: what to name in errors (the file's path).

    Returns:
        The models, in the file's order.

    Raises:
        InvalidArgumentError: the text does not parse (line and column named), or a model
            breaks a rule above (the model and the field named).
    """
    config = pb.ModelServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise InvalidArgumentError(
            None, None, f"{source} is not a ModelServerConfig in text format: {e}") from None
    return entries_from_proto(config, source)


def read_model_config_file(path: str) -> list[ModelConfigEntry]:
    """Reads and parses the model config file at ``path`` (a regular file, UTF-8).

    Raises:
        InvalidArgumentError: the file cannot be read or is not a valid config.
    """
    try:
        if not os.path.isfile(path):
            raise OSError(f"{path} is not a regular file")
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(None, None, f"cannot read the model config file {path}: "
                                   f"{getattr(e, 'strerror', None) or e}") from None
    return parse_model_server_config(text, path)


def entries_from_proto(config: Any, source: str) -> list[ModelConfigEntry]:
    """The checked models of a ``ModelServerConfig`` message (from a file or a gRPC
    ``ReloadConfigRequest``).

    Raises:
        InvalidArgumentError: as :func:`parse_model_server_config`.
    """
    def bad(message: str) -> errors.OpError:
        return InvalidArgumentError(None, None, f"{source}: {message}")

    which = config.WhichOneof("config")
    if which != "model_config_list":
        raise bad("needs a model_config_list (custom_model_config is not supported)"
                  if which else "names no model: it needs model_config_list { config {...} }")
    entries: list[ModelConfigEntry] = []
    seen: set[str] = set()
    for i, model in enumerate(config.model_config_list.config):
        entries.append(_entry(model, f"config {i + 1}", bad))
        if entries[-1].name in seen:
            raise bad(f'model "{entries[-1].name}" is listed more than once')
        seen.add(entries[-1].name)
    if not entries:
        raise bad("model_config_list names no model")
    return entries


def _entry(model: Any, where: str, bad: Any) -> ModelConfigEntry:
    name = model.name
    if not _NAME.fullmatch(name):
        raise bad(f"{where}: name {name!r} must be 1-128 of letters, digits, '_', '.', '-' "
                  "(starting with a letter or digit)")
    where = f'model "{name}"'
    if model.model_platform not in ("", "tensorflow"):
        raise bad(f'{where}: model_platform "{model.model_platform}" is not served here '
                  '(only "tensorflow", or none)')
    if model.model_type not in (0, 1):
        raise bad(f"{where}: model_type must be TENSORFLOW (or unset)")
    for field_name in ("base_path", "model_file"):
        if any(c in getattr(model, field_name) for c in "\x00\n\r"):
            raise bad(f"{where}: {field_name} {getattr(model, field_name)!r} holds a NUL byte "
                      "or a line break")
    if not model.base_path:
        raise bad(f"{where}: base_path (its checkpoint directory) is missing")
    base_path = os.path.abspath(model.base_path)
    if os.path.lexists(base_path) and not os.path.isdir(base_path):  # (a symlink loop too)
        raise bad(f"{where}: base_path {model.base_path} exists and is not a directory")
    if not model.model_file:
        raise bad(f"{where}: model_file is missing (ckptsync's field of ModelConfig: the "
                  "model file defining build_net(graph, device, mode) or model_fn)")
    model_file = os.path.abspath(model.model_file)
    if not os.path.isfile(model_file):
        raise bad(f"{where}: model_file {model.model_file} is not a file")
    versions = _versions(model.model_version_policy, where, bad)
    labels = _labels(model.version_labels, where, bad)
    for label, version in labels.items():
        if versions and version not in versions:  # it could never be AVAILABLE
            raise bad(f'{where}: version label "{label}" names version {version}, which its '
                      "model_version_policy does not serve (specific versions: "
                      f"{', '.join(map(str, versions))}); a label moves only to an "
                      "AVAILABLE version")
    return ModelConfigEntry(name, base_path, model_file, versions, labels)


def _versions(policy: Any, where: str, bad: Any) -> tuple[int, ...]:
    which = policy.WhichOneof("policy_choice")
    if which is None or which == "latest":
        if which == "latest" and policy.latest.num_versions > 1:
            raise bad(f"{where}: latest {{ num_versions: {policy.latest.num_versions} }} is "
                      "not supported: latest serves the newest version (num_versions: 1); "
                      "name the versions to serve at once with specific { versions: ... }")
        return ()
    if which == "all":
        raise bad(f"{where}: model_version_policy all is not supported: serve latest, or "
                  "name the versions with specific { versions: ... }")
    versions = list(policy.specific.versions)
    if not versions:
        raise bad(f"{where}: specific names no version (give versions: N, one per version)")
    for v in versions:
        if v < 0:
            raise bad(f"{where}: specific version {v} must be >= 0 (a global step)")
    if len(set(versions)) != len(versions):
        raise bad(f"{where}: specific names a version more than once: {versions}")
    return tuple(sorted(int(v) for v in versions))


def _labels(labels: Any, where: str, bad: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for label, version in sorted(labels.items()):
        if not _LABEL.fullmatch(label):
            raise bad(f"{where}: version label {label!r} must be 1-64 of letters, digits, "
                      "'_', '-'")
        if version < 0:
            raise bad(f'{where}: version label "{label}" names version {version}; versions '
                      "are global steps >= 0")
        out[label] = int(version)
    return out
