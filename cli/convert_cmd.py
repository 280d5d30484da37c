"""``ckptsync convert SRC DST``: TF's own checkpoint ⇄ ckptsync's HDF5 checkpoint.

A TF V2 checkpoint (``SRC.index`` + ``SRC.data-00000-of-00001``, as TF1's Saver writes)
becomes ``DST.h5``; a ckptsync checkpoint becomes ``DST.index`` + ``DST.data-00000-of-00001``,
which TF1's ``tf.train.Saver.restore`` reads. Every tensor is read verified (crc32c or
xxh3_64) and written under the same name, dtype and shape; the global step carries over.
With ``--update-state`` DST's directory's ``checkpoint`` state file then names DST, so
``infer serve`` (or ``tf.train.latest_checkpoint``) finds it.

An existing DST (``DST.h5``, or ``DST.index`` / ``DST.data-00000-of-00001``) is refused
unless ``--overwrite`` is given; then each file is replaced atomically (written to a temp
file, fsynced, renamed over the old one), as every checkpoint write here.

Exit codes: 0 ok; 1 missing, unreadable or corrupt SRC, an existing DST without
``--overwrite``, or a failed write; 2 usage.
"""

from __future__ import annotations

import os

import click

from ckptsync.checkpoint import (
    CheckpointReader,
    is_tf_checkpoint,
    update_checkpoint_state,
    write_checkpoint,
    write_tf_checkpoint,
)
from ckptsync.errors import CkptsyncError

from ._common import EXIT_USAGE, fail
from .inspect_cmd import _message, _resolve


@click.command("convert")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
@click.option("--to", "to", type=click.Choice(["h5", "tf"]), default=None,
              help="Output format (default: the other one: h5 for a TF SRC, tf for ours).")
@click.option("--update-state", is_flag=True,
              help="Name DST in its directory's 'checkpoint' state file.")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing DST (atomically); without it an existing DST fails.")
def convert(src: str, dst: str, to: str | None, update_state: bool, overwrite: bool) -> None:
    """Convert a checkpoint between TF's format and ckptsync's.

    SRC is a checkpoint prefix (or a directory: its latest checkpoint); DST a prefix.

    \b
    Example:
      ckptsync convert tf_run/model.ckpt-5000 ckpts/model.ckpt-5000 --update-state
      ckptsync convert ckpts/model.ckpt-1200 tf_export/model.ckpt-1200
    """
    for name, value in (("SRC", src), ("DST", dst)):
        if not value:
            fail(f"{name} must not be empty.", EXIT_USAGE)
    prefix = _resolve(src)
    source_tf = is_tf_checkpoint(prefix)
    target = to or ("h5" if source_tf else "tf")
    for suffix in (".h5", ".index"):
        if dst.endswith(suffix):
            dst = dst[:-len(suffix)]
    if os.path.abspath(dst) == os.path.abspath(prefix.removesuffix(".h5")) and \
            (target == "tf") == source_tf:
        fail(f"DST {dst} is SRC itself; give another prefix.", EXIT_USAGE)
    outputs = [dst + ".h5"] if target == "h5" else [dst + ".index", dst + ".data-00000-of-00001"]
    existing = [p for p in outputs if os.path.lexists(p)]
    if existing and not overwrite:
        fail(f"DST {', '.join(existing)} already exists; pass --overwrite to replace it.")
    try:
        with CheckpointReader(prefix) as reader:
            names = sorted(reader.get_variable_to_shape_map())
            arrays = {n: reader.get_tensor(n, verify=True) for n in names}
            step = reader.global_step
        os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
        if target == "h5":
            out = write_checkpoint(dst, arrays, global_step=step,
                                   metadata={"converted_from": os.path.abspath(prefix)})
            files = out + ".h5"
        else:
            out = write_tf_checkpoint(dst, arrays, global_step=step)
            files = f"{out}.index, {out}.data-00000-of-00001"
        if update_state:
            update_checkpoint_state(os.path.dirname(os.path.abspath(out)), os.path.abspath(out))
    except CkptsyncError as e:
        fail(_message(e))
    except OSError as e:  # the DST directory cannot be made
        fail(f"cannot write {dst}: {e.strerror or e}")
    kind = "TF V2 checkpoint" if source_tf else "ckptsync checkpoint"
    click.echo(f"converted {len(arrays)} variables ({sum(a.nbytes for a in arrays.values())} "
               f"bytes, global_step {step}) from {kind} {prefix} to {files}")
