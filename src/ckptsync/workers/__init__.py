"""Helper processes: one ``WorkerProcess`` and one shared-array layout, and the checkpoint
workers built on them (see docs/architecture.md)."""
