"""``ckptsync``: the umbrella command (``demo``; more subcommands join it)."""

from __future__ import annotations

import click

from ._common import CONTEXT_SETTINGS, OneLineErrorGroup
from .convert_cmd import convert
from .demo import demo
from .inspect_cmd import inspect


@click.group(name="ckptsync", cls=OneLineErrorGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="ckptsync")
def main() -> None:
    """ckptsync: keep a serving copy of a model in sync with a model that is training."""


main.add_command(demo)
main.add_command(inspect)
main.add_command(convert)

if __name__ == "__main__":
    main(prog_name="ckptsync")
