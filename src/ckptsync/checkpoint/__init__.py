"""The checkpoint format layer: named numpy arrays ⇄ one HDF5 file per checkpoint.

Knows nothing of graphs: any code with a dict of arrays can write and read checkpoints.
Imports only ``ckptsync.errors``, numpy, h5py, xxhash and the standard library.

```
ckpts/
  checkpoint                          state file, TF1 text format, relative paths
  model.ckpt-1200.h5                  one immutable HDF5 file per checkpoint
  model.ckpt-1100.h5
  .model.ckpt-1300.h5.tmp-<pid>-<n>   being written; never read; swept on start
```

Who calls what: ``train.Saver`` calls :func:`write_checkpoint`, then
:func:`update_checkpoint_state`, then deletes what :class:`CheckpointRetention` returns
(:func:`remove_checkpoint`). Serving calls :func:`latest_checkpoint` /
:func:`get_checkpoint_state` and :func:`read_checkpoint` or :class:`CheckpointReader`.
The layout is specified in docs/checkpoint-format.md. TF's own V2 checkpoints
(``<prefix>.index`` + ``<prefix>.data-00000-of-00001``) are read by the same entry points
and written by :func:`write_tf_checkpoint` (tf_bundle.py).

Example:
    >>> import numpy as np
    >>> from ckptsync import checkpoint as ckpt
    >>> import os
    >>> os.makedirs("arrays", exist_ok=True)
    >>> prefix = ckpt.write_checkpoint("arrays/model.ckpt-5",
    ...     {"dense0/w": np.ones((2, 3), np.float32)}, global_step=5)
    >>> ckpt.update_checkpoint_state("arrays", prefix)
    >>> ckpt.latest_checkpoint("arrays")
    'arrays/model.ckpt-5'
    >>> ckpt.read_checkpoint(ckpt.latest_checkpoint("arrays"))["dense0/w"].shape
    (2, 3)
"""

from ._atomic import op_error_from_os_error, sweep_temp_files
from ._format import data_path
from .changes import CheckpointChanges, VariableChange, checkpoint_chain, read_changes
from .digests import (
    block_digests,
    block_rows,
    hash_blocks,
    update_block_digests,
    variable_digest,
)
from .incremental import write_incremental_checkpoint
from .management import (
    NewCheckpointReader,
    checkpoint_exists,
    checkpoints_iterator,
    get_checkpoint_mtimes,
    latest_checkpoint,
    list_variables,
    load_checkpoint,
    load_variable,
    remove_checkpoint,
    wait_for_new_checkpoint,
)
from .reader import CheckpointReader, read_checkpoint
from .retention import CheckpointRetention
from .state import (
    CheckpointState,
    generate_checkpoint_state_proto,
    get_checkpoint_state,
    update_checkpoint_state,
)
from .tf_bundle import TFBundleReader, is_tf_checkpoint, write_tf_checkpoint
from .writer import write_checkpoint

__all__ = [
    "data_path",
    "block_rows",
    "block_digests",
    "hash_blocks",
    "update_block_digests",
    "variable_digest",
    "op_error_from_os_error",
    "write_checkpoint",
    "write_incremental_checkpoint",
    "checkpoint_chain",
    "read_changes",
    "CheckpointChanges",
    "VariableChange",
    "read_checkpoint",
    "CheckpointReader",
    "NewCheckpointReader",
    "CheckpointState",
    "generate_checkpoint_state_proto",
    "update_checkpoint_state",
    "get_checkpoint_state",
    "latest_checkpoint",
    "checkpoint_exists",
    "get_checkpoint_mtimes",
    "remove_checkpoint",
    "list_variables",
    "load_variable",
    "load_checkpoint",
    "checkpoints_iterator",
    "wait_for_new_checkpoint",
    "sweep_temp_files",
    "CheckpointRetention",
    "TFBundleReader",
    "is_tf_checkpoint",
    "write_tf_checkpoint",
]
