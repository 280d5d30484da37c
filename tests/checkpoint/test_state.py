"""The `checkpoint` state file: TF text format, relative paths, refusal of escapes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from ckptsync.checkpoint import (
    CheckpointState,
    generate_checkpoint_state_proto,
    get_checkpoint_state,
    latest_checkpoint,
    update_checkpoint_state,
    write_checkpoint,
)
from ckptsync.checkpoint.state import checkpoint_state_to_text, parse_checkpoint_state
from ckptsync.errors import CkptsyncRuntimeError, CkptsyncValueError

GOLDEN = (
    b'model_checkpoint_path: "model.ckpt-1000"\n'
    b'all_model_checkpoint_paths: "model.ckpt-800"\n'
    b'all_model_checkpoint_paths: "model.ckpt-1000"\n'
    b"all_model_checkpoint_timestamps: 1700000000.5\n"
    b"all_model_checkpoint_timestamps: 1700000100.25\n"
    b"last_preserved_timestamp: 1699999990.0\n"
)


def test_exact_bytes_and_round_trip(tmp_path: Path) -> None:
    update_checkpoint_state(
        str(tmp_path),
        str(tmp_path / "model.ckpt-1000"),
        [str(tmp_path / "model.ckpt-800"), str(tmp_path / "model.ckpt-1000")],
        all_model_checkpoint_timestamps=[1700000000.5, 1700000100.25],
        last_preserved_timestamp=1699999990.0,
    )
    assert (tmp_path / "checkpoint").read_bytes() == GOLDEN
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]  # no temp file left
    state = get_checkpoint_state(str(tmp_path))
    assert state == CheckpointState(
        os.path.join(str(tmp_path), "model.ckpt-1000"),
        [
            os.path.join(str(tmp_path), "model.ckpt-800"),
            os.path.join(str(tmp_path), "model.ckpt-1000"),
        ],
        [1700000000.5, 1700000100.25],
        1699999990.0,
    )


def test_minimal_state_without_timestamps(tmp_path: Path) -> None:
    update_checkpoint_state(str(tmp_path), str(tmp_path / "m-1"), latest_filename="latest")
    assert (tmp_path / "latest").read_bytes() == (
        b'model_checkpoint_path: "m-1"\nall_model_checkpoint_paths: "m-1"\n'
    )
    assert get_checkpoint_state(str(tmp_path)) is None
    assert get_checkpoint_state(str(tmp_path), "latest").all_model_checkpoint_paths == [
        os.path.join(str(tmp_path), "m-1")
    ]


def test_generate_appends_model_path_and_makes_paths_relative(tmp_path: Path) -> None:
    d = str(tmp_path)
    state = generate_checkpoint_state_proto(d, f"{d}/m-2", [f"{d}/m-1"])
    assert state.model_checkpoint_path == "m-2"
    assert state.all_model_checkpoint_paths == ["m-1", "m-2"]
    state = generate_checkpoint_state_proto(d, f"{d}/m-2", [f"{d}/m-1", f"{d}/m-2"])
    assert state.all_model_checkpoint_paths == ["m-1", "m-2"]
    assert (
        generate_checkpoint_state_proto(d, "/elsewhere/m-1").model_checkpoint_path
        == "/elsewhere/m-1"
    )
    with pytest.raises(CkptsyncValueError, match="timestamps, if provided, must match"):
        generate_checkpoint_state_proto(d, f"{d}/m-2", [f"{d}/m-1"], [1.0])


def test_relative_save_dir_rewrites_cwd_relative_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpts").mkdir()
    update_checkpoint_state("ckpts", "ckpts/model.ckpt-3")
    assert (tmp_path / "ckpts" / "checkpoint").read_text().splitlines()[0] == (
        'model_checkpoint_path: "model.ckpt-3"'
    )
    assert get_checkpoint_state("ckpts").model_checkpoint_path == "ckpts/model.ckpt-3"


def test_absolute_paths_kept_when_not_saving_relative(tmp_path: Path) -> None:
    update_checkpoint_state(str(tmp_path), str(tmp_path / "m-1"), save_relative_paths=False)
    text = (tmp_path / "checkpoint").read_text()
    assert f'model_checkpoint_path: "{tmp_path}/m-1"' in text
    assert get_checkpoint_state(str(tmp_path)).model_checkpoint_path == f"{tmp_path}/m-1"


@pytest.mark.parametrize(
    "entry", ["../evil", "../../etc/passwd", "sub/../../x", "/etc/passwd", ".."]
)
def test_entries_outside_the_directory_are_refused(tmp_path: Path, entry: str) -> None:
    d = tmp_path / "ckpts"
    d.mkdir()
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{entry}"\n')
    with pytest.raises(
        CkptsyncValueError, match=rf"names '{entry}', which resolves outside .*ckpts"
    ):
        get_checkpoint_state(str(d))
    (d / "checkpoint").write_text(
        f'model_checkpoint_path: "ok"\nall_model_checkpoint_paths: "{entry}"\n'
    )
    with pytest.raises(CkptsyncValueError, match="resolves outside"):
        latest_checkpoint(str(d))


def test_symlink_escape_is_refused_and_absolute_inside_is_fine(tmp_path: Path) -> None:
    d = tmp_path / "ckpts"
    d.mkdir()
    (d / "link").symlink_to(tmp_path)
    (d / "checkpoint").write_text('model_checkpoint_path: "link/secret"\n')
    with pytest.raises(CkptsyncValueError, match="resolves outside"):
        get_checkpoint_state(str(d))
    (d / "checkpoint").write_text(f'model_checkpoint_path: "{d}/m-1"\n')
    assert get_checkpoint_state(str(d)).model_checkpoint_path == f"{d}/m-1"


def test_writer_refuses_paths_outside_and_the_state_file_itself(tmp_path: Path) -> None:
    with pytest.raises(CkptsyncValueError, match="outside the checkpoint directory"):
        update_checkpoint_state(str(tmp_path), "/elsewhere/m-1")
    with pytest.raises(CkptsyncRuntimeError, match="conflicts with path used for checkpoint state"):
        update_checkpoint_state(str(tmp_path), str(tmp_path / "checkpoint"))
    with pytest.raises(CkptsyncValueError, match="plain file name"):
        update_checkpoint_state(str(tmp_path), str(tmp_path / "m"), latest_filename="../x")
    assert list(tmp_path.iterdir()) == []


def test_absent_empty_and_unparsable_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert get_checkpoint_state(str(tmp_path)) is None
    assert get_checkpoint_state(str(tmp_path / "missing")) is None
    (tmp_path / "checkpoint").write_text("")
    with pytest.raises(
        CkptsyncValueError, match=f"Invalid checkpoint state loaded from {tmp_path}"
    ):
        get_checkpoint_state(str(tmp_path))
    for garbage in ['model_checkpoint_path: "unterminated\n', "bogus_field: 1\n", "\xff\xfe", "x"]:
        (tmp_path / "checkpoint").write_text(garbage, errors="surrogateescape")
        with caplog.at_level(logging.WARNING, logger="ckptsync.checkpoint.state"):
            assert get_checkpoint_state(str(tmp_path)) is None
        assert "Unparsable checkpoint state" in caplog.text
    (tmp_path / ".checkpoint.tmp-1-0").write_text('model_checkpoint_path: "m"\n')
    assert get_checkpoint_state(str(tmp_path)) is None


def test_parser_accepts_tf_text_format_variants() -> None:
    text = (
        "# written by TF\n"
        "model_checkpoint_path: 'a\\'b' \"-c\\303\\251\"\n"
        'all_model_checkpoint_paths: "x\\ty";\n'
        "all_model_checkpoint_timestamps: 1e3, all_model_checkpoint_timestamps: inf\n"
        "last_preserved_timestamp: -2.5f\n"
        'model_checkpoint_path: "last wins"\n'
    )
    state = parse_checkpoint_state(text)
    assert state.model_checkpoint_path == "last wins"
    assert state.all_model_checkpoint_paths == ["x\ty"]
    assert state.all_model_checkpoint_timestamps == [1000.0, float("inf")]
    assert state.last_preserved_timestamp == -2.5
    assert (
        parse_checkpoint_state(
            "model_checkpoint_path: 'a\\'b' \"-c\\303\\251\""
        ).model_checkpoint_path
        == "a'b-cé"
    )


def test_escaping_round_trips_odd_names() -> None:
    name = "we\"ird\\ na'me\n-é"
    state = CheckpointState(name, [name], [1.0], None)
    text = checkpoint_state_to_text(state)
    assert text.startswith('model_checkpoint_path: "we\\"ird\\\\ na\\\'me\\n-\\303\\251"\n')
    assert parse_checkpoint_state(text) == state


def test_latest_checkpoint_needs_the_data_file(tmp_path: Path) -> None:
    d = str(tmp_path)
    assert latest_checkpoint(d) is None
    prefix = write_checkpoint(f"{d}/model.ckpt-1", {"a": np.ones(1)})
    update_checkpoint_state(d, prefix)
    assert latest_checkpoint(d) == prefix
    update_checkpoint_state(d, f"{d}/model.ckpt-2", [prefix, f"{d}/model.ckpt-2"])
    assert latest_checkpoint(d) is None  # state names a checkpoint whose .h5 is missing


def test_str_of_a_state_is_the_text_format_as_tf1s_proto() -> None:
    # What TF 2.21's tf.compat.v1.train.get_checkpoint_state(d) printed for a Saver's
    # directory (max_to_keep=2, three saves).
    state = CheckpointState("/tmp/tfo/model.ckpt-2",
                            ["/tmp/tfo/model.ckpt-1", "/tmp/tfo/model.ckpt-2"])
    assert str(state) == ('model_checkpoint_path: "/tmp/tfo/model.ckpt-2"\n'
                          'all_model_checkpoint_paths: "/tmp/tfo/model.ckpt-1"\n'
                          'all_model_checkpoint_paths: "/tmp/tfo/model.ckpt-2"\n')
