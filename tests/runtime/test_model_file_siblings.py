"""A model file's siblings (``import helpers`` beside it) belong to its directory: two
model files in two directories each get their own, in one process (a server of several
models), and a file keeps the module objects it imported."""

from __future__ import annotations

import sys

from ckptsync.model_spec import directory_on_path, load_build_net

MODEL = '''
import sibhelp


def build_net(graph, device, mode):
    import sibhelp as again  # an import inside build_net finds the same sibling
    assert again is sibhelp
    return sibhelp.SCALE
'''


def write(directory, scale):
    directory.mkdir()
    (directory / "sibhelp.py").write_text(f"SCALE = {scale}\n")
    (directory / "model.py").write_text(MODEL)
    return directory / "model.py"


def test_two_model_files_each_import_their_own_sibling(tmp_path):
    one, two = write(tmp_path / "one", 1.0), write(tmp_path / "two", 100.0)
    build_one, build_two = load_build_net(one), load_build_net(two)
    assert build_one(None, None, None) == 1.0
    assert build_two(None, None, None) == 100.0
    assert build_one(None, None, None) == 1.0  # still its own, after the other's import
    # The siblings are out of sys.modules between blocks, and the two modules differ.
    assert "sibhelp" not in sys.modules
    assert build_one.__wrapped__.__globals__["sibhelp"].SCALE == 1.0
    assert build_two.__wrapped__.__globals__["sibhelp"].SCALE == 100.0


def test_a_sibling_wins_over_a_same_named_module_imported_from_elsewhere(tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "sibhelp.py").write_text("OTHER = True\n")
    sys.path.insert(0, str(other))
    try:
        import sibhelp  # noqa: F401  (as the test suite's own tests/helpers.py is)

        build = load_build_net(write(tmp_path / "one", 7.0))
        assert build(None, None, None) == 7.0  # its sibling, as `python model.py` has it
        assert sys.modules["sibhelp"].OTHER  # and the other one is back afterwards
    finally:
        sys.path.remove(str(other))
        sys.modules.pop("sibhelp", None)


def test_a_library_below_the_directory_stays_imported(tmp_path):
    # A model at a project's root above its .venv: modules imported from a library
    # directory below it are not the model's siblings and stay in sys.modules.
    lib = tmp_path / "venv" / "site"
    lib.mkdir(parents=True)
    (lib / "somelib_for_test.py").write_text("X = 1\n")
    (tmp_path / "model.py").write_text("def build_net(graph, device, mode):\n"
                                      "    import somelib_for_test\n"
                                      "    return somelib_for_test.X\n")
    sys.path.insert(0, str(lib))
    try:
        with directory_on_path(tmp_path / "model.py"):
            import somelib_for_test  # noqa: F401
        assert "somelib_for_test" in sys.modules
    finally:
        sys.path.remove(str(lib))
        sys.modules.pop("somelib_for_test", None)
