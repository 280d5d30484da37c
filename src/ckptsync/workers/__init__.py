"""Helper processes: one ``WorkerProcess`` and one shared-array layout, and the checkpoint
workers built on them (see docs/architecture.md).

```
workers/
  process.py        WorkerProcess: spawn (own session), socket, stop, finalizer, restart
  frames.py         the frame protocol over that socket; errors sent back by name
  shared_arrays.py  ArrayLayout + SharedBuffer: named arrays in one memfd, mapped once
  placement.py      CKPTSYNC_WRITER_CPUS: the CPUs the async writer is pinned to
  async_writer.py   AsyncCheckpointWriter (owner side) ... _writer_child.py (the process)
  read_process.py   CheckpointReadProcess (owner side and the process)
  change_jobs.py    the process's jobs on a checkpoint's changes (read; apply into shared
                    arenas of a served table)
```

Used by ``train.Saver`` (the async writer) and ``serving`` (the read process, and the
source process built on :class:`WorkerProcess`).
"""

from .async_writer import AsyncCheckpointWriter, StateUpdate
from .process import WorkerProcess
from .read_process import CheckpointReadProcess

__all__ = ["AsyncCheckpointWriter", "CheckpointReadProcess", "StateUpdate", "WorkerProcess"]
