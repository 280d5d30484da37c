"""The ``trainer run`` application, above ``train`` and ``distributed`` (see
docs/architecture.md)."""
