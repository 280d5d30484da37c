"""``ckptsync``: the umbrella command (``demo``; more subcommands join it)."""

from __future__ import annotations

import click

from .demo import demo


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ckptsync")
def main() -> None:
    """ckptsync: keep a serving copy of a model in sync with a model that is training."""


main.add_command(demo)

if __name__ == "__main__":
    main()
