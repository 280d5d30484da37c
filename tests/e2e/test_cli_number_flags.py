"""Number flags take plain numbers only: Python's ``int``/``float`` would read ``1_0`` as
10, Arabic-Indic digits as numbers, and ``nan``/``inf`` as timeouts; each is refused in
the flag's own words (exit 2), from the command line and from the environment."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ckptsync.cli.infer import main as infer_main
from ckptsync.cli.trainer import main as trainer_main


@pytest.mark.parametrize("flag,value,says", [
    ("--pin-version", "1_0", "is not a whole number"),
    ("--pin-version", "\u0663", "is not a whole number"),
    ("--port", "+80 0", "is not a whole number"),
    ("--load-timeout-s", "nan", "is not a finite number"),
    ("--idle-timeout-s", "inf", "is not a finite number"),
    ("--drain-timeout-s", "1e400", "is not a whole number"),
    ("--load-timeout-s", "1e400", "is not a finite number"),
    ("--load-timeout-s", "3_0", "is not a finite number"),
])
def test_infer_serve_refuses_numbers_python_would_misread(tmp_path, flag, value, says):
    args = ["serve", "--model", "m.py", "--checkpoint-dir", str(tmp_path), flag, value]
    r = CliRunner().invoke(infer_main, args, prog_name="infer")
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{flag}'" in r.output and says in r.output, r.output


def test_the_environment_is_checked_the_same_way(tmp_path):
    r = CliRunner().invoke(infer_main, ["serve", "--model", "m.py", "--checkpoint-dir",
                                        str(tmp_path)], prog_name="infer",
                           env={"CKPTSYNC_PIN_VERSION": "1_0"})
    assert r.exit_code == 2 and "'--pin-version'" in r.output and "whole number" in r.output


@pytest.mark.parametrize("flag,value", [("--steps", "2_000"), ("--learning-rate", "nan"),
                                        ("--save-every-secs", "inf")])
def test_trainer_run_refuses_them_too(tmp_path, flag, value):
    r = CliRunner().invoke(trainer_main, ["run", "--model", "m.py", "--checkpoint-dir",
                                          str(tmp_path), flag, value], prog_name="trainer")
    assert r.exit_code == 2 and f"'{flag}'" in r.output, r.output


def test_plain_numbers_still_work():
    from ckptsync.cli._common import Int, Real

    assert Int(min=0).convert(" 12 ", None, None) == 12
    assert Real(min=0).convert("1e-2", None, None) == 0.01
    assert Real(min=0).convert(".5", None, None) == 0.5


def test_ckptsync_runs_trainer_and_infer_as_subcommands_with_the_same_checks(tmp_path):
    """``ckptsync trainer run`` and ``ckptsync infer serve`` are the ``trainer`` and ``infer``
    commands: the same flags, checked the same way."""
    from ckptsync.cli.main import main as ckptsync_main

    r = CliRunner().invoke(ckptsync_main, ["infer", "serve", "--model", "m.py",
                                           "--checkpoint-dir", str(tmp_path), "--port", "+80 0"],
                           prog_name="ckptsync")
    assert r.exit_code == 2 and "Invalid value for '--port'" in r.output, r.output
    r = CliRunner().invoke(ckptsync_main, ["trainer", "run", "--model", "m.py",
                                           "--checkpoint-dir", str(tmp_path), "--steps", "2_000"],
                           prog_name="ckptsync")
    assert r.exit_code == 2 and "Invalid value for '--steps'" in r.output, r.output
