"""TF Serving's model_config_list text format (``--model-config-file``) and the
:class:`ModelServer` that applies it: parsing, every rule's error, reloads all or nothing,
version labels that move only to an AVAILABLE version; a model serving several versions
at once (one manager per version) and reloads that keep, re-pin, add and unload them."""

from __future__ import annotations

import threading
import weakref

import pytest

from ckptsync import errors
from ckptsync.serving.model_config import (
    ModelConfigEntry,
    parse_model_server_config,
    read_model_config_file,
)
from ckptsync.serving.model_server import ModelBuildError, ModelServer, ServerOptions

from .conftest import MLPServable, publish, wait_until


def config(*models: str) -> str:
    return "model_config_list {\n" + "\n".join(f"  config {{ {m} }}" for m in models) + "\n}\n"


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a.py").write_text("def build_net(graph, device, mode): pass\n")
    (tmp_path / "b.py").write_text("def build_net(graph, device, mode): pass\n")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")  # a symlink loop
    return tmp_path


def test_a_tf_serving_config_with_model_file_parses_to_checked_entries(files, monkeypatch):
    monkeypatch.chdir(files)
    text = config(
        'name: "a" base_path: "ckpts/a" model_file: "a.py" model_platform: "tensorflow"',
        'name: "b" base_path: "/abs/b" model_file: "b.py" '
        'model_version_policy { specific { versions: 1200 versions: 7 } } '
        'version_labels { key: "stable" value: 1200 } version_labels { key: "canary" value: 7 }',
        'name: "c.v2-x" base_path: "c" model_file: "a.py" model_version_policy { latest { } }')
    a, b, c = parse_model_server_config(text, "models.config")
    # Relative paths are the working directory's, as TF Serving's.
    assert a == ModelConfigEntry("a", str(files / "ckpts" / "a"), str(files / "a.py"), (), {})
    assert (b.base_path, b.versions, dict(b.version_labels)) == (
        "/abs/b", (7, 1200), {"canary": 7, "stable": 1200})
    assert (c.name, c.versions, c.policies()) == ("c.v2-x", (), (None,))
    assert a.same_graph(ModelConfigEntry("a", a.base_path, a.model_file, (5,), {"x": 5}))
    assert not a.same_graph(c)


@pytest.mark.parametrize("body, message", [
    ("model_config_list { config { name: 'a' ", "is not a ModelServerConfig in text format"),
    ("model_config_list { config { name: 'a' bogus: 1 } }", 'has no field named "bogus"'),
    ("", "names no model"),
    ("model_config_list { }", "model_config_list names no model"),
    (config('name: "a b" base_path: "x" model_file: "a.py"'), "name 'a b' must be"),
    (config('name: "" base_path: "x" model_file: "a.py"'), "name '' must be"),
    (config('name: "c\\n" base_path: "x" model_file: "a.py"'), "name 'c\\n' must be"),
    (config('name: "a" base_path: "loop" model_file: "a.py"'), "base_path loop exists and "
     "is not a directory"),  # a symlink to itself: os.path.exists says False
    (config('name: "a" model_file: "a.py"'), 'model "a": base_path (its checkpoint directory) '
     "is missing"),
    (config('name: "a" base_path: "x"'), 'model "a": model_file is missing'),
    (config('name: "a" base_path: "x" model_file: "nope.py"'), "model_file nope.py is not a "
     "file"),
    (config('name: "a" base_path: "a.py" model_file: "a.py"'), "base_path a.py exists and is "
     "not a directory"),
    (config('name: "a" base_path: "x" model_file: "a.py" model_platform: "pytorch"'),
     'model_platform "pytorch" is not served here'),
    (config('name: "a" base_path: "x" model_file: "a.py"',
            'name: "a" base_path: "y" model_file: "b.py"'), 'model "a" is listed more than once'),
    (config('name: "a" base_path: "x" model_file: "a.py" '
            "model_version_policy { latest { num_versions: 2 } }"), "num_versions: 2 } is not "
     "supported"),
    (config('name: "a" base_path: "x" model_file: "a.py" model_version_policy { all { } }'),
     "model_version_policy all is not supported"),
    (config('name: "a" base_path: "x" model_file: "a.py" '
            "model_version_policy { specific { versions: 1 versions: 2 versions: 1 } }"),
     "specific names a version more than once: [1, 2, 1]"),
    (config('name: "a" base_path: "x" model_file: "a.py" '
            "model_version_policy { specific { } }"), "specific names no version"),
    (config('name: "a" base_path: "x" model_file: "a.py" '
            "model_version_policy { specific { versions: 4 versions: 6 } } "
            'version_labels { key: "canary" value: 5 }'), 'version label "canary" names '
     "version 5, which its model_version_policy does not serve (specific versions: 4, 6)"),
    (config('name: "a" base_path: "x" model_file: "a.py" '
            "model_version_policy { specific { versions: -1 } }"), "must be >= 0"),
    (config('name: "a" base_path: "x" model_file: "a.py" '
            'version_labels { key: "a/b" value: 1 }'), "version label 'a/b' must be"),
    (config('name: "a" base_path: "x" model_file: "a.py" '
            'version_labels { key: "x\\n" value: 1 }'), "version label 'x\\n' must be"),
    (config('name: "a" base_path: "x" model_file: "a.py" '
            'version_labels { key: "stable" value: -3 }'), "names version -3"),
    ("custom_model_config { }", "custom_model_config is not supported"),
    (config('name: "a" base_path: "x\\000y" model_file: "a.py"'), "base_path 'x\\x00y' "
     "holds a NUL byte"),
    (config('name: "a" base_path: "x\\ny" model_file: "a.py"'), "holds a NUL byte or a "
     "line break"),
])
def test_every_broken_config_is_one_error_naming_the_model_and_field(files, monkeypatch,
                                                                      body, message):
    monkeypatch.chdir(files)
    with pytest.raises(errors.InvalidArgumentError) as e:
        parse_model_server_config(body, "models.config")
    assert message in e.value.message
    assert e.value.message.startswith("models.config")


def test_reading_a_config_file_that_is_not_a_regular_file_says_so(tmp_path):
    with pytest.raises(errors.InvalidArgumentError, match="is not a regular file"):
        read_model_config_file(str(tmp_path))
    with pytest.raises(errors.InvalidArgumentError, match="cannot read the model config file"):
        read_model_config_file(str(tmp_path / "missing.config"))
    (tmp_path / "bad.config").write_bytes(b"\xff\xfe")
    with pytest.raises(errors.InvalidArgumentError, match="cannot read"):
        read_model_config_file(str(tmp_path / "bad.config"))


class Builds:
    """build_servable for the ModelServer: MLP servables, counted; a file named
    ``broken.py`` fails to build."""

    def __init__(self):
        self.built: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, model_file: str, device: str):
        if model_file.endswith("broken.py"):
            raise ValueError("build_net raised: broken on purpose")
        with self.lock:
            self.built.append(model_file)
        return MLPServable()


def entry(tmp_path, name, *, model_file="a.py", pinned=None, versions=(), labels=None):
    return ModelConfigEntry(name, str(tmp_path / f"ckpts-{name}"), str(tmp_path / model_file),
                            (pinned,) if pinned is not None else tuple(sorted(versions)),
                            labels or {})


@pytest.fixture
def server():
    builds = Builds()
    s = ModelServer(ServerOptions(grpc=False), builds)
    s.builds = builds
    yield s
    s.close()


def test_a_reload_keeps_unchanged_models_rebuilds_changed_ones_and_closes_removed(
        tmp_path, server):
    server.reload([entry(tmp_path, "a"), entry(tmp_path, "b")])
    a, b = server.model("a"), server.model("b")
    publish(tmp_path / "ckpts-a", 3)
    publish(tmp_path / "ckpts-b", 4)
    a.manager.wait_for_version(3, timeout_s=30)
    # a: only its policy changes (in place, no rebuild); b: a new model_file (rebuilt);
    # c: new; and a model left out is closed.
    server.reload([entry(tmp_path, "a", pinned=3), entry(tmp_path, "b", model_file="b.py"),
                   entry(tmp_path, "c")])
    assert server.model("a") is a and a.manager.policy.pinned == 3
    assert a.manager.version == 3  # kept serving throughout
    assert server.model("b") is not b and not b.manager.alive
    assert server.model("b").manager.version == 4  # swapped in once it served
    assert sorted(server.models) == ["a", "b", "c"]
    assert len(server.builds.built) == 4
    server.reload([entry(tmp_path, "c")])
    assert list(server.models) == ["c"] and not a.manager.alive
    assert server.reloads == {"success": 3, "failure": 0}


def test_a_reload_that_fails_to_build_a_model_changes_nothing(tmp_path, server):
    server.reload([entry(tmp_path, "a")])
    a = server.model("a")
    with pytest.raises(ModelBuildError, match='model "x": cannot build the model from .*'
                                              "broken.py: build_net raised") as e:
        server.reload([entry(tmp_path, "b"), entry(tmp_path, "x", model_file="broken.py")])
    assert isinstance(e.value.cause, ValueError)
    assert list(server.models) == ["a"] and server.model("a") is a and a.manager.alive
    assert server.reloads["failure"] == 1 and "broken" in server.last_reload_error
    # b was built before x failed: it was closed, not leaked (the autouse thread check).


def test_a_replacement_that_serves_nothing_in_time_leaves_the_old_one_serving(tmp_path):
    server = ModelServer(ServerOptions(grpc=False, replace_wait_s=0.5), Builds())
    try:
        server.reload([entry(tmp_path, "a")])
        publish(tmp_path / "ckpts-a", 3)
        a = server.model("a")
        a.manager.wait_for_version(3, timeout_s=30)
        moved = ModelConfigEntry("a", str(tmp_path / "empty"), str(tmp_path / "a.py"))
        with pytest.raises(errors.UnavailableError, match='model "a": its new base_path or '
                           "model_file served no version within 0.5 s"):
            server.reload([moved])
        assert server.model("a") is a and a.manager.version == 3 and a.manager.alive
    finally:
        server.close()


def test_a_label_moves_only_to_an_available_version(tmp_path, server):
    server.reload([entry(tmp_path, "a", labels={"stable": 3})])
    a = server.model("a")
    with pytest.raises(errors.UnavailableError, match="has not been AVAILABLE since the label was set"):
        a.resolve_label("stable")
    with pytest.raises(errors.InvalidArgumentError,
                       match="Unrecognized servable version label: canary"):
        a.resolve_label("canary")
    publish(tmp_path / "ckpts-a", 3)
    a.manager.wait_for_version(3, timeout_s=30)
    assert a.resolve_label("stable") == 3
    # canary -> 5 while 5 is not served: it waits (a warning), stable stays.
    warnings = server.reload([entry(tmp_path, "a", labels={"stable": 3, "canary": 5})])
    assert len(warnings) == 1 and 'label "canary" stays unset until version 5' in warnings[0]
    with pytest.raises(errors.UnavailableError):
        a.resolve_label("canary")
    # stable -> 5 while 5 is not served: it stays at 3.
    warnings = server.reload([entry(tmp_path, "a", labels={"stable": 5, "canary": 5})])
    assert any('"stable" stays at version 3' in w for w in warnings)
    assert a.resolve_label("stable") == 3
    publish(tmp_path / "ckpts-a", 5)
    a.manager.wait_for_version(5, timeout_s=30)
    # A wait warning made before 5 was served no longer holds: a reload that has not
    # logged it yet (it logs after unloading) leaves it out, as the label has moved.
    assert [w.still_waits() for w in warnings] == [False] * len(warnings)
    assert a.resolve_label("canary") == 5 and a.resolve_label("stable") == 5
    assert a.labels() == {"stable": 5, "canary": 5}
    # A label left out of the config is gone.
    server.reload([entry(tmp_path, "a", labels={"canary": 5})])
    with pytest.raises(errors.InvalidArgumentError):
        a.resolve_label("stable")


def test_a_label_set_by_a_reload_moves_while_its_version_is_served_without_a_request(
        tmp_path, server):
    server.reload([entry(tmp_path, "a")])
    a = server.model("a")
    publish(tmp_path / "ckpts-a", 1)
    a.manager.wait_for_version(1, timeout_s=30)
    assert server.reload([entry(tmp_path, "a", labels={"next": 5})])  # a warning: waits
    assert a.pending_labels() == {"next": 5}
    publish(tmp_path / "ckpts-a", 5)
    # Nothing asks for the label: it moves when 5 is served, by itself.
    wait_until(lambda: not a.pending_labels(), timeout_s=30)
    publish(tmp_path / "ckpts-a", 6)
    a.manager.wait_for_version(6, timeout_s=30)
    assert a.labels() == {"next": 5}  # stays where it moved, though 5 is gone now


def test_a_removed_models_snapshot_is_freed_at_once(tmp_path, server):
    server.reload([entry(tmp_path, "a"), entry(tmp_path, "b")])
    publish(tmp_path / "ckpts-a", 3)
    server.model("a").manager.wait_for_version(3, timeout_s=30)
    snapshot = weakref.ref(server.model("a").manager.current)
    server.reload([entry(tmp_path, "b")])
    assert snapshot() is None  # not left to a later garbage collection


def test_a_model_file_that_exits_fails_the_reload_and_nothing_else(tmp_path, server):
    server.reload([entry(tmp_path, "a")])

    def exits(model_file, device):
        raise SystemExit(4)

    server._build = exits
    with pytest.raises(ModelBuildError, match='model "c": .*: 4') as e:
        server.reload([entry(tmp_path, "a"), entry(tmp_path, "c")])
    assert isinstance(e.value.cause, SystemExit)
    assert list(server.models) == ["a"] and server.model("a").manager.alive


def test_a_closed_server_refuses_reloads(tmp_path, server):
    server.reload([entry(tmp_path, "a")])
    server.close()
    assert not server.models
    with pytest.raises(errors.FailedPreconditionError, match="closed"):
        server.reload([entry(tmp_path, "a")])


def serving(model) -> dict:
    """policy -> the version its slot serves."""
    return {slot.policy: slot.manager.version for slot in model.slots}


def wait_serving(model, wanted: dict) -> None:
    wait_until(lambda: serving(model) == wanted, timeout_s=30)


def test_specific_versions_are_each_served_and_routed_by_version_and_label(tmp_path, server):
    for step in (1, 2, 3):
        publish(tmp_path / "ckpts-a", step)
    server.reload([entry(tmp_path, "a", versions=(3, 1),
                         labels={"stable": 1, "canary": 3})])
    a = server.model("a")
    wait_serving(a, {1: 1, 3: 3})  # 2 is on disk and named by no policy: not served
    assert [s.policy for s in a.slots] == [1, 3]
    assert a.served_versions() == [3, 1]
    # A version goes to the slot serving it; none, to the newest; an unserved one, to the
    # newest (whose app answers "not found").
    assert a.slot_for(1).manager.version == 1 and a.slot_for(3).manager.version == 3
    assert a.slot_for(None).manager.version == 3 and a.manager.version == 3
    assert a.slot_for(2) is a.slot_for(None)
    assert a.resolve_label("stable") == 1 and a.resolve_label("canary") == 3
    # Status lists every version, newest first, as TF Serving's GetModelStatus.
    status = a.version_status()
    assert [(s["version"], s["state"]) for s in status if s["state"] == "AVAILABLE"] == [
        ("3", "AVAILABLE"), ("1", "AVAILABLE")]
    assert [s["version"] for s in a.version_status(1)] == ["1"]
    with pytest.raises(errors.NotFoundError):
        a.version_status(7)
    # Every slot's app and servicer answer with the model-wide view.
    for slot in a.slots:
        assert slot.app.state.api.served_versions() == [3, 1]
        assert slot.app.state.api.version_status is not slot.manager.status


def test_the_canary_flow_keeps_adds_and_unloads_versions_without_rebuilding_kept_ones(
        tmp_path, server):
    for step in (1, 2):
        publish(tmp_path / "ckpts-a", step)
    server.reload([entry(tmp_path, "a", versions=(1,), labels={"stable": 1})])
    a = server.model("a")
    wait_serving(a, {1: 1})
    stable = a.slots[0]
    # Add a canary: version 1's manager is kept as it is, version 2 gets one of its own.
    warnings = server.reload([entry(tmp_path, "a", versions=(1, 2),
                                    labels={"stable": 1, "canary": 2})])
    assert server.model("a") is a and a.slots[0] is stable and stable.manager.version == 1
    assert len(server.builds.built) == 2
    wait_serving(a, {1: 1, 2: 2})
    assert a.resolve_label("canary") == 2
    assert all("canary" in w for w in warnings)  # it waited for 2 to load, if at all
    canary = a.slots[1]
    snapshot, manager = weakref.ref(stable.manager.current), weakref.ref(stable.manager)
    del stable
    # Promote it: version 1's manager is unloaded and freed at once; 2's is kept.
    server.reload([entry(tmp_path, "a", versions=(2,), labels={"stable": 2})])
    assert a.slots == (canary,) and canary.manager.version == 2
    assert manager() is None and snapshot() is None  # not left to a later collection
    assert a.labels() == {"stable": 2}
    assert len(server.builds.built) == 2


def test_moving_between_latest_and_specific_versions_never_stops_serving_a_named_version(
        tmp_path, server):
    for step in (1, 4, 5):
        publish(tmp_path / "ckpts-a", step)
    server.reload([entry(tmp_path, "a")])
    a = server.model("a")
    wait_serving(a, {None: 5})
    first = a.slots[0]
    # The latest manager serves 5, which the new policy names: it takes 5 (no load, no
    # moment without 5); 1 gets a manager of its own.
    server.reload([entry(tmp_path, "a", versions=(1, 5))])
    assert a.slots[1] is first and first.policy == 5 and 5 in a.served_versions()
    wait_serving(a, {1: 1, 5: 5})
    one = a.slots[0]
    # Back to latest: the manager serving the newest version (5) takes it; 1's closes.
    server.reload([entry(tmp_path, "a")])
    assert a.slots == (first,) and first.policy is None and a.served_versions() == [5]
    assert not one.manager.alive
    # A version no longer named: its manager is re-pinned to the new one and serves the
    # old one until the new one is loaded (TF Serving's availability-preserving policy).
    server.reload([entry(tmp_path, "a", versions=(4,))])
    assert a.slots == (first,) and first.policy == 4
    wait_serving(a, {4: 4})
    warnings = server.reload([entry(tmp_path, "a", versions=(4, 9))])
    assert [w for w in warnings if "version 9 is not in" in w]
    publish(tmp_path / "ckpts-a", 9)
    wait_serving(a, {4: 4, 9: 9})
    assert a.served_versions() == [9, 4]


def test_a_close_stops_a_reload_between_versions(tmp_path, server):
    server.reload([entry(tmp_path, "a", versions=(1,))])
    builds = server.builds

    def build(model_file, device):  # the server closes while the 2nd new version builds
        if len(builds.built) == 2:
            server.close()
        return builds(model_file, device)

    server._build = build
    with pytest.raises(errors.FailedPreconditionError, match="closed"):
        server.reload([entry(tmp_path, "a", versions=tuple(range(1, 51)))])
    assert len(builds.built) == 3  # a's first version and 2 new ones: not 49
    # (the autouse check finds no thread of the built ones left running)


def test_a_new_version_that_fails_to_build_changes_nothing(tmp_path, server):
    publish(tmp_path / "ckpts-a", 1)
    server.reload([entry(tmp_path, "a", versions=(1,))])
    a = server.model("a")
    wait_serving(a, {1: 1})
    before = a.slots

    def broken(model_file, device):
        raise ValueError("build_net raised: broken on purpose")

    server._build = broken
    with pytest.raises(ModelBuildError, match='model "a": cannot build the model .*broken '
                                              "on purpose"):
        server.reload([entry(tmp_path, "a", versions=(1, 2), labels={"canary": 2})])
    assert a.slots is before and serving(a) == {1: 1} and a.slots[0].manager.alive
    assert a.entry.versions == (1,) and a.pending_labels() == {}


def test_each_further_version_writes_its_summaries_beside_the_models(tmp_path):
    server = ModelServer(ServerOptions(grpc=False, summary_dir=str(tmp_path / "tb")), Builds())
    try:
        server.reload([entry(tmp_path, "a", versions=(1, 2))])
        assert [s.policy for s in server.model("a").slots] == [1, 2]
    finally:
        server.close()  # writes and closes the event files
    first = list((tmp_path / "tb" / "a").glob("events.out.tfevents.*"))
    second = list((tmp_path / "tb" / "a" / "version_2").glob("events.out.tfevents.*"))
    assert len(first) == 1 and len(second) == 1


def test_a_specific_version_whose_file_retention_deleted_is_named_as_the_configs(
        tmp_path, server):
    """A version that model_version_policy specific names, its file deleted while it is
    served, is shown as the config's (not as an admin pin to undo)."""
    for step in (1, 3):
        publish(tmp_path / "ckpts-a", step)
    server.reload([entry(tmp_path, "a", versions=(1, 3))])
    a = server.model("a")
    wait_serving(a, {1: 1, 3: 3})
    (tmp_path / "ckpts-a" / "model.ckpt-1.h5").unlink()
    [status] = a.version_status(1)
    message = status["status"]["error_message"]
    assert status["state"] == "AVAILABLE" and message.startswith(
        "version 1 (named by model_version_policy specific) is served from memory but its "
        "file"), message
    assert "name a version that is on disk in the model config" in message
    assert "unpin" not in message


def test_a_model_file_stuck_in_its_import_is_reported_and_other_reloads_are_refused(
        tmp_path, caplog):
    """A model file whose import does not return holds the reload that builds it: that is
    logged (build_warn_s), and another reload waiting longer than its ``wait_s`` (gRPC's
    HandleReloadConfigRequest) is UNAVAILABLE naming the model being built, instead of
    waiting for ever; once the import returns, reloads go on."""
    from .conftest import MODEL_SOURCE

    flag = tmp_path / "go"
    (tmp_path / "stuck.py").write_text(
        "import pathlib, time\n"
        f"for _ in range(600):\n    if pathlib.Path({str(flag)!r}).exists():\n"
        "        break\n    time.sleep(0.05)\n" + MODEL_SOURCE)
    (tmp_path / "a.py").write_text(MODEL_SOURCE)
    server = ModelServer(ServerOptions(grpc=False, build_warn_s=0.2))
    stuck = ModelConfigEntry("s", str(tmp_path / "ckpts-s"), str(tmp_path / "stuck.py"))
    done = threading.Event()
    result: list = []

    def first() -> None:
        try:
            result.append(server.reload([stuck]))
        except BaseException as e:  # noqa: BLE001 - the test reads it
            result.append(e)
        done.set()

    t = threading.Thread(target=first, daemon=True)
    t.start()
    try:
        wait_until(lambda: server.building is not None, timeout_s=30)
        wait_until(lambda: "still importing or building" in caplog.text, timeout_s=30)
        with pytest.raises(errors.UnavailableError,
                           match='building model "s" from .*stuck.py .*has not returned'):
            server.reload([entry(tmp_path, "a")], wait_s=0.2)
        flag.touch()
        assert done.wait(60) and not isinstance(result[0], BaseException), result
        server.reload([entry(tmp_path, "a")], wait_s=30)
        assert set(server.models) == {"a"}
    finally:
        flag.touch()
        t.join(60)
        server.close()
