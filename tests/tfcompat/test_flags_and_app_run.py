"""``tf.app.flags`` / ``tf.flags`` and ``tf.app.run`` as a TF1 program uses them: a real
program in its own process, a real command line (absl's flags, as TF1's)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("absl", reason="tf.app.flags needs the optional absl-py (ckptsync[flags])")

PROGRAM = textwrap.dedent('''
    import json
    import ckptsync as tf

    flags = tf.app.flags
    flags.DEFINE_string("data_dir", "/tmp/data", "Where the data is.")
    flags.DEFINE_integer("batch_size", 32, "Examples per step.")
    flags.DEFINE_float("learning_rate", 0.1, "Step size.")
    flags.DEFINE_boolean("fast", False, "Fewer steps.")
    flags.DEFINE_list("layers", "1,2", "Layer widths.")
    flags.DEFINE_enum("mode", "train", ["train", "eval"], "What to do.")
    tf.flags.DEFINE_bool("shuffle", True, "tf.flags is tf.app.flags.")
    flags.DEFINE_string(flag_name="old", default_value="o", docstring="TF's old keywords.")
    FLAGS = flags.FLAGS

    def main(argv):
        print(json.dumps({"data_dir": FLAGS.data_dir, "batch_size": FLAGS.batch_size,
                          "learning_rate": FLAGS.learning_rate, "fast": FLAGS.fast,
                          "layers": FLAGS.layers, "mode": FLAGS.mode,
                          "shuffle": FLAGS.shuffle, "old": FLAGS.old, "argv": argv[1:],
                          "same": tf.flags.FLAGS is tf.app.flags.FLAGS}))
        return 3

    if __name__ == "__main__":
        tf.app.run()
''')


def _run(tmp_path, *args: str, program: str = PROGRAM) -> subprocess.CompletedProcess[str]:
    (tmp_path / "prog.py").write_text(program)
    return subprocess.run([sys.executable, "prog.py", *args], cwd=tmp_path, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=60)


@pytest.mark.timeout(120)
def test_app_run_parses_the_command_line_and_exits_with_mains_result(tmp_path):
    r = _run(tmp_path, "--data_dir=/d", "--batch_size", "8", "--learning_rate=0.5", "--fast",
             "--layers=3,4,5", "--mode=eval", "--noshuffle", "--old=n", "--unknown=1", "rest")
    assert r.returncode == 3, r.stderr
    assert json.loads(r.stdout) == {
        "data_dir": "/d", "batch_size": 8, "learning_rate": 0.5, "fast": True,
        "layers": ["3", "4", "5"], "mode": "eval", "shuffle": False, "old": "n",
        "argv": ["--unknown=1", "rest"], "same": True}


@pytest.mark.timeout(120)
def test_defaults_without_arguments(tmp_path):
    r = _run(tmp_path)
    assert r.returncode == 3, r.stderr
    got = json.loads(r.stdout)
    assert (got["data_dir"], got["batch_size"], got["fast"], got["layers"], got["argv"]) == (
        "/tmp/data", 32, False, ["1", "2"], [])


@pytest.mark.timeout(120)
def test_a_bad_value_and_help_exit_as_absl(tmp_path):
    bad = _run(tmp_path, "--batch_size=many")
    assert bad.returncode == 1 and "batch_size" in bad.stderr and bad.stdout == ""
    enum = _run(tmp_path, "--mode=predict")
    assert enum.returncode == 1 and "mode" in enum.stderr
    shown = _run(tmp_path, "--help")
    # absl's --help prints the usage and exits 1 (as under TF1's tf.app.run).
    assert shown.returncode == 1 and "Examples per step." in shown.stdout


@pytest.mark.timeout(120)
def test_flags_read_before_any_parse_parse_sys_argv_as_tf(tmp_path):
    program = textwrap.dedent('''
        import ckptsync as tf
        tf.flags.DEFINE_integer("steps", 1, "Steps.")
        print(tf.flags.FLAGS.steps)  # no tf.app.run: TF's FLAGS parses sys.argv here
    ''')
    r = _run(tmp_path, "--steps=12", program=program)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "12"


@pytest.mark.timeout(120)
def test_app_run_takes_main_and_argv(tmp_path):
    program = textwrap.dedent('''
        import ckptsync as tf
        tf.app.flags.DEFINE_string("name", "x", "A name.")

        def go(argv):
            print(tf.app.flags.FLAGS.name, argv)

        tf.app.run(main=go, argv=["prog", "--name=given", "extra"])
    ''')
    r = _run(tmp_path, "--name=ignored", program=program)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "given ['prog', 'extra']"
