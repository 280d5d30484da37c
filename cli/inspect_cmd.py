"""``ckptsync inspect PREFIX_OR_DIR``: what a checkpoint holds, as TF1's inspect_checkpoint.

Prints the checkpoint's prefix, global step, creation time, writer and every variable's
name, dtype and shape (from the index, so even 10,000 variables list at once); with
``--tensor NAME`` or ``--all-tensors`` also values (read and verified). An incremental
checkpoint (format version 3) also shows its chain (each member's prefix, kind and
bytes) and, per variable, what it changed (``same``, ``rows(k)``, ``full``); its values
are the composed ones. A full checkpoint with a parent shows the parent and the changes.

Exit codes: 0 ok; 1 missing, unreadable or corrupt checkpoint, or unknown tensor; 2 usage.
"""

from __future__ import annotations

import datetime
import os
import stat

import click
import numpy as np

from ckptsync.checkpoint import (
    CheckpointReader,
    checkpoint_chain,
    data_path,
    get_checkpoint_state,
    is_tf_checkpoint,
    read_changes,
)
from ckptsync.errors import CkptsyncError, OpError

from ._common import EXIT_USAGE, fail


def _resolve(path: str) -> str:
    """A directory's newest checkpoint (its state file's), or one line saying why none."""
    if not os.path.isdir(path):
        return path
    try:
        state = get_checkpoint_state(path)
    except CkptsyncError as e:
        fail(str(e))
    if state is None or not state.model_checkpoint_path:
        fail(f"no checkpoint in directory {path}: it has no readable 'checkpoint' state file "
             "naming one.")
    latest = state.model_checkpoint_path
    if is_tf_checkpoint(latest):
        return latest
    data = data_path(latest)
    if not os.path.lexists(data):
        fail(f"no checkpoint in directory {path}: its state file names {latest}, but "
             f"{data} does not exist.")
    if not os.path.isfile(data):
        fail(f"no checkpoint in directory {path}: its state file names {latest}, but {data} "
             f"is a {_file_kind(data)}, not a regular file.")
    return latest


def _file_kind(path: str) -> str:
    mode = os.stat(path).st_mode if os.path.exists(path) else 0
    for test, kind in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return "dangling symlink" if os.path.islink(path) else "special file"


def _changes(prefix: str, reader: CheckpointReader) -> dict[str, str] | None:
    """Prints a delta's chain (or a full checkpoint's parent) and returns each variable's
    change (``same``, ``rows(k)``, ``full``); None for a checkpoint without a parent."""
    if getattr(reader, "predecessor", None) is None:
        return None
    if reader.is_delta:
        chain = checkpoint_chain(prefix)
        sizes = [os.path.getsize(data_path(m)) for m in chain]
        click.echo(f"chain: {len(chain)} checkpoints, {sum(sizes)} bytes (nearest full "
                   f"checkpoint first)")
        width = max(len(m) for m in chain)
        for i, (member, size) in enumerate(zip(chain, sizes)):
            click.echo(f"  {'full' if i == 0 else 'delta':<5}  {member:<{width}}  {size} bytes")
    else:
        click.echo(f"parent: {reader.predecessor} (a full checkpoint with a parent: it "
                   f"composes alone)")
    changes = read_changes(prefix, verify=False, values=False)
    return {n: f"rows({len(c.rows)})" if c.kind == "rows" and c.rows is not None else c.kind
            for n, c in changes.items()}


def _message(e: CkptsyncError) -> str:
    return e.message if isinstance(e, OpError) else str(e)


@click.command("inspect")
@click.argument("prefix_or_dir", metavar="PREFIX_OR_DIR")
@click.option("--tensor", "tensor", metavar="NAME", default=None,
              help="Also print this variable's values (e.g. dense0/w).")
@click.option("--all-tensors", is_flag=True, help="Also print every variable's values.")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Read every variable and check its checksum (exit 1 if one fails).")
def inspect(prefix_or_dir: str, tensor: str | None, all_tensors: bool, verify: bool) -> None:
    """List a checkpoint's variables, step and creation time.

    PREFIX_OR_DIR is a checkpoint prefix (ckpts/model.ckpt-1200, with or without .h5) or
    a checkpoint directory (its latest checkpoint). TF's own checkpoints (PREFIX.index +
    PREFIX.data-00000-of-00001) are read too.

    \b
    Example:
      ckptsync inspect ckpts
      ckptsync inspect ckpts/model.ckpt-1200 --tensor dense0/w
    """
    if tensor is not None and all_tensors:
        fail("--tensor and --all-tensors are mutually exclusive; pass one.", EXIT_USAGE)
    if not prefix_or_dir:
        fail("PREFIX_OR_DIR must not be empty.", EXIT_USAGE)
    if "\0" in prefix_or_dir:
        fail(f"PREFIX_OR_DIR {prefix_or_dir!r} holds a NUL byte; no path can.", EXIT_USAGE)
    prefix = _resolve(prefix_or_dir)
    try:
        with CheckpointReader(prefix) as reader:
            if tensor is not None and tensor.endswith(":0"):
                tensor = tensor[:-2]
            if tensor is not None and not reader.has_tensor(tensor):
                names = sorted(reader.get_variable_to_shape_map())
                shown = ", ".join(names[:10]) + (f", ... ({len(names)} in all)"
                                                 if len(names) > 10 else "")
                fail(f"Key {tensor} not found in checkpoint {reader.path}; it has: {shown}")
            shapes = reader.get_variable_to_shape_map()
            dtypes = reader.get_variable_to_dtype_map()
            created = datetime.datetime.fromtimestamp(reader.created_unix_s, datetime.timezone.utc)
            click.echo(f"checkpoint: {prefix}")
            click.echo(f"file: {reader.path} ({os.path.getsize(reader.path)} bytes)")
            step = "none" if reader.global_step is None else str(reader.global_step)
            click.echo(f"global_step: {step}")
            click.echo(f"created: {created.isoformat(timespec='seconds')} "
                       f"(unix {reader.created_unix_s:.3f})")
            click.echo(f"writer: {reader.writer}, format version {reader.format_version}")
            kinds = _changes(prefix, reader)
            click.echo(f"variables: {len(shapes)}, {reader.nbytes} bytes")
            width = max([len(n) for n in shapes] + [4])
            if kinds is None:
                click.echo(f"{'name':<{width}}  {'dtype':<10}  shape")
                for name in sorted(shapes):
                    click.echo(f"{name:<{width}}  {dtypes[name].name:<10}  {shapes[name]}")
            else:
                click.echo(f"{'name':<{width}}  {'dtype':<10}  {'change':<12}  shape")
                for name in sorted(shapes):
                    click.echo(f"{name:<{width}}  {dtypes[name].name:<10}  "
                               f"{kinds[name]:<12}  {shapes[name]}")
            if verify:
                for name in sorted(shapes):
                    reader.get_tensor(name, verify=True)
                click.echo(f"verified: {len(shapes)} variables, checksums ok")
            names = sorted(shapes) if all_tensors else [tensor] if tensor else []
            for name in names:
                value = reader.get_tensor(name)
                click.echo(f"\ntensor_name: {name}  dtype: {value.dtype.name}  "
                           f"shape: {list(value.shape)}")
                click.echo(np.array2string(value))
    except CkptsyncError as e:
        fail(_message(e))
