"""Version policies: which checkpoint the manager serves (TF Serving's
``ServableVersionPolicy``: ``latest`` or ``specific``).

Example:
    >>> VersionPolicy.parse("latest"), VersionPolicy.parse(1200)
    (VersionPolicy(pinned=None), VersionPolicy(pinned=1200))
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..checkpoint.state import read_checkpoint_state
from .source import AspiredVersion, AspiredVersions

__all__ = ["VersionPolicy"]


@dataclass(frozen=True)
class VersionPolicy:
    """Which version to serve: the latest (default) or one pinned version (rollback).

    Args:
        pinned: the pinned version (global step), or None for the latest.
    """

    pinned: int | None = None

    def __post_init__(self) -> None:
        if self.pinned is not None and (isinstance(self.pinned, bool) or self.pinned < 0):
            raise ValueError(f"a pinned version must be an int >= 0, got {self.pinned!r}")

    @classmethod
    def parse(cls, policy: str | int | VersionPolicy) -> VersionPolicy:
        """``"latest"`` -> latest; an int (or its string) -> pinned to that version."""
        if isinstance(policy, VersionPolicy):
            return policy
        if policy == "latest":
            return cls(None)
        try:
            return cls(int(policy))
        except (TypeError, ValueError):
            raise ValueError(
                f"policy must be 'latest' or a version number, got {policy!r}"
            ) from None

    def keeps(self, version: int, chosen_under: VersionPolicy) -> bool:
        """Whether a load of ``version``, chosen under ``chosen_under``, is still what this
        policy asks for (a policy change meanwhile makes the manager pick again): the same
        pin, or latest both times."""
        return self.pinned == version if self.pinned is not None else chosen_under.pinned is None

    def is_choice(self, candidate: AspiredVersion, checkpoint_dir: str) -> bool:
        """Whether ``candidate``, first of :meth:`candidates`, is what this policy asks
        for rather than a stand-in: pinned, always; latest, when the state file names it
        (the source offers the newest existing checkpoint when the named one's file is
        missing). Reads the state file (a regular file only, never blocking); True when
        it cannot tell."""
        if self.pinned is not None:
            return True
        try:
            state = read_checkpoint_state(checkpoint_dir)
        except Exception:  # unreadable now: the source reports it
            return True
        return state is None or state.model_checkpoint_path == candidate.prefix

    def candidates(self, listing: AspiredVersions, checkpoint_dir: str) -> list[AspiredVersion]:
        """Versions to serve, most wanted first.

        Latest: the state file's latest, then the other listed ones newest first (used only
        while nothing newer loads). Pinned: that version, from the state file or, failing
        that, a finished ``*-<version>.h5`` in the directory (TF1 keeps
        ``keep_checkpoint_every_n_hours`` checkpoints on disk but not in the state file).
        """
        if self.pinned is None:
            rest = [a for a in reversed(listing.available) if a != listing.latest]
            return ([listing.latest] if listing.latest else []) + rest
        for a in listing.available:
            if a.version == self.pinned:
                return [a]
        suffix = f"-{self.pinned}.h5"
        try:
            names = sorted(os.listdir(checkpoint_dir))
        except OSError:
            return []
        for name in names:
            if name.endswith(suffix) and not name.startswith("."):
                return [AspiredVersion(self.pinned, os.path.join(checkpoint_dir, name[:-3]))]
        return []
