"""ManagerOptions / HttpOptions: frozen, self-validating, and built from the keyword
arguments of ModelManager, HotReloadingModel and create_app."""

from __future__ import annotations

import dataclasses

import pytest

from ckptsync.errors import CkptsyncTypeError, CkptsyncValueError
from ckptsync.serving import (
    HotReloadingModel,
    HttpOptions,
    ManagerOptions,
    ModelManager,
    create_app,
)

from .conftest import MLPServable


def test_defaults_are_the_documented_ones():
    o = ManagerOptions()
    assert (o.poll, o.rescan_interval_s, o.retry_initial_s, o.retry_max_s) == (False, 1.0, 1.0, 60.0)
    assert (o.max_load_attempts, o.load_timeout_s, o.unload_wait_s) == (5, 300.0, 30.0)
    assert o.read_in_subprocess and o.watch_in_subprocess and o.gate is None
    h = HttpOptions()
    assert (h.max_request_bytes, h.max_batch_size, h.inline_max_body_bytes) == (
        64 * 2**20, 4096, 256 * 2**10)
    assert h.pool_switch_interval_s == 0.005  # CPython's default
    assert h.admin_token is None


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ManagerOptions().poll = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        HttpOptions().max_batch_size = 1  # type: ignore[misc]


def test_a_conflict_names_both_fields():
    with pytest.raises(CkptsyncValueError,
                       match=r"retry_initial_s <= retry_max_s.*retry_initial_s=5.*retry_max_s=1"):
        ManagerOptions(retry_initial_s=5, retry_max_s=1)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("rescan_interval_s", 0, r"rescan_interval_s must be > 0, got 0"),
    ("retry_initial_s", -1.0, r"retry_initial_s must be > 0"),
    ("retry_max_s", float("inf"), r"retry_max_s must be > 0, got inf"),
    ("max_load_attempts", 0, r"max_load_attempts must be >= 1, got 0"),
    ("max_status_versions", -1, r"max_status_versions must be >= 0"),
    ("load_timeout_s", 0.0, r"load_timeout_s must be > 0 or None"),
    ("unload_wait_s", -0.5, r"unload_wait_s must be >= 0"),
    ("close_timeout_s", float("nan"), r"close_timeout_s must be >= 0"),
])
def test_manager_ranges(field, value, message):
    with pytest.raises(ValueError, match=message):
        ManagerOptions(**{field: value})


@pytest.mark.parametrize(("field", "value", "message"), [
    ("poll", 1, r"poll must be a bool, got int 1"),
    ("max_load_attempts", 2.5, r"max_load_attempts must be an int, got float"),
    ("max_load_attempts", True, r"max_load_attempts must be an int"),
    ("rescan_interval_s", "1", r"rescan_interval_s must be a number, got str"),
    ("load_timeout_s", "x", r"load_timeout_s must be a number or None"),
    ("gate", 3, r"gate must be a callable"),
])
def test_manager_types(field, value, message):
    with pytest.raises(CkptsyncTypeError, match=message):
        ManagerOptions(**{field: value})
    assert issubclass(CkptsyncTypeError, TypeError)


def test_none_is_allowed_where_documented():
    assert ManagerOptions(load_timeout_s=None).load_timeout_s is None
    assert ManagerOptions(max_status_versions=0, unload_wait_s=0).unload_wait_s == 0


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"max_request_bytes": 0}, CkptsyncValueError, r"max_request_bytes must be > 0, got 0"),
    ({"max_batch_size": -3}, CkptsyncValueError, r"max_batch_size must be > 0"),
    ({"inline_max_body_bytes": -1}, CkptsyncValueError, r"inline_max_body_bytes must be >= 0"),
    ({"pool_switch_interval_s": 0}, CkptsyncValueError,
     r"pool_switch_interval_s must be > 0 or None, got 0"),
    ({"admin_token": "  "}, CkptsyncValueError, r"admin_token must not be empty"),
    ({"admin_token": b"t"}, CkptsyncTypeError, r"admin_token must be a str"),
    ({"max_batch_size": 1.5}, CkptsyncTypeError, r"max_batch_size must be an int"),
])
def test_http_options_validate(kwargs, error, message):
    with pytest.raises(error, match=message):
        HttpOptions(**kwargs)


def test_http_options_repr_hides_the_token():
    assert "s3cret" not in repr(HttpOptions(admin_token="s3cret"))
    assert "admin_token=***" in repr(HttpOptions(admin_token="s3cret"))


def test_replace_validates_again():
    o = ManagerOptions(retry_max_s=2.0)
    assert o.replace(retry_initial_s=2.0).retry_initial_s == 2.0
    with pytest.raises(ValueError, match="retry_initial_s"):
        o.replace(retry_initial_s=3.0)


def test_manager_keywords_build_the_options(tmp_path):
    mlp = MLPServable()
    m = ModelManager(mlp, tmp_path, poll=True, max_load_attempts=2, watch_in_subprocess=False)
    assert m.options == ManagerOptions(poll=True, max_load_attempts=2, watch_in_subprocess=False)
    base = ManagerOptions(poll=True, retry_max_s=9.0, watch_in_subprocess=False)
    m = ModelManager(mlp, tmp_path, options=base, max_load_attempts=3)
    assert m.options == base.replace(max_load_attempts=3)
    assert ModelManager(mlp, tmp_path, options=base).options is base
    with pytest.raises(TypeError, match=r"ModelManager\(\) got unexpected keyword argument\(s\) "
                                        r"polling; its options \(ManagerOptions\) are"):
        ModelManager(mlp, tmp_path, polling=True)
    with pytest.raises(TypeError, match=r"options=\.\.\.\) must be a ManagerOptions"):
        ModelManager(mlp, tmp_path, options=HttpOptions())  # type: ignore[arg-type]


def test_hot_reloading_model_takes_options(tmp_path):
    base = ManagerOptions(retry_max_s=7.0, read_in_subprocess=False, watch_in_subprocess=False)
    with HotReloadingModel(MLPServable(), tmp_path, options=base, poll=True) as model:
        assert model.manager.options == base.replace(poll=True)
    with HotReloadingModel(MLPServable(), tmp_path, None, True, "latest", 0.5,
                           watch_in_subprocess=False, read_in_subprocess=False) as model:
        assert (model.manager.options.poll, model.manager.options.rescan_interval_s) == (True, 0.5)
    with pytest.raises(ValueError, match="max_load_attempts"):  # before anything is built
        HotReloadingModel(MLPServable(), tmp_path, max_load_attempts=0)


def test_create_app_keywords_build_the_options(tmp_path):
    manager = ModelManager(MLPServable(), tmp_path, watch_in_subprocess=False)
    app = create_app(manager, "mlp", 1000, 10, admin_token="t")
    assert app.state.options == HttpOptions(max_request_bytes=1000, max_batch_size=10,
                                            admin_token="t")
    base = HttpOptions(max_batch_size=5)
    assert create_app(manager, "mlp", options=base).state.options is base
    assert create_app(manager, "mlp", options=base, max_request_bytes=9).state.options == (
        base.replace(max_request_bytes=9))
    with pytest.raises(ValueError, match="max_batch_size must be > 0"):
        create_app(manager, "mlp", max_batch_size=0)
