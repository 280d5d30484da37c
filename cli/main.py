"""``ckptsync``: the umbrella command: ``demo``, ``inspect``, ``convert``, and ``trainer`` and
``infer`` (the ``trainer`` and ``infer`` commands, also as ``ckptsync trainer run`` and
``ckptsync infer serve``)."""

from __future__ import annotations

import click

from ._common import CONTEXT_SETTINGS, OneLineErrorGroup
from .convert_cmd import convert
from .demo import demo
from .infer import main as infer
from .inspect_cmd import inspect
from .trainer import main as trainer


@click.group(name="ckptsync", cls=OneLineErrorGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="ckptsync")
def main() -> None:
    """ckptsync: keep a serving copy of a model in sync with a model that is training."""


main.add_command(demo)
main.add_command(inspect)
main.add_command(convert)
main.add_command(trainer, "trainer")
main.add_command(infer, "infer")

if __name__ == "__main__":
    main(prog_name="ckptsync")
