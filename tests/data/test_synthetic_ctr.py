"""``--data synthetic-ctr``: seeded synthetic click logs with a learnable signal, and the
rank-based ROC AUC they are judged by."""

from __future__ import annotations

import numpy as np
import pytest

from ckptsync.data import DataError, load_dataset, load_synthetic_ctr, roc_auc
from ckptsync.datasets import CTR_BUCKETS
from ckptsync.errors import CkptsyncValueError

SMALL = {"rows": 60_000}


def test_shapes_dtypes_ranges_and_held_out_split():
    ds = load_synthetic_ctr(**SMALL)
    assert ds.name == "synthetic-ctr" and ds.num_train == 48_000 and ds.num_test == 12_000
    assert ds.feature_names == ("user_id", "item_id") and ds.label_names == ("click",)
    for split in (ds.train, ds.test):
        for k in ("user_id", "item_id"):
            assert split[k].dtype == np.int64
            assert 0 <= split[k].min() and split[k].max() < CTR_BUCKETS
        assert split["click"].dtype == np.int64
        assert set(np.unique(split["click"])) == {0, 1}
    assert 0.2 < ds.train["click"].mean() < 0.4
    # Users and items share one hashed id space, salted apart: they meet only where
    # independent hashing collides (user k and item k are not the same bucket).
    users, items = np.unique(ds.train["user_id"]), np.unique(ds.train["item_id"])
    assert len(np.intersect1d(users, items)) < 2 * len(users) * len(items) / CTR_BUCKETS


def test_the_same_seed_gives_the_same_arrays_and_another_seed_others():
    a, b = load_synthetic_ctr(seed=3, **SMALL), load_synthetic_ctr(seed=3, **SMALL)
    c = load_synthetic_ctr(seed=4, **SMALL)
    for k in a.train:
        np.testing.assert_array_equal(a.train[k], b.train[k])
        np.testing.assert_array_equal(a.test[k], b.test[k])
    assert not np.array_equal(a.train["user_id"], c.train["user_id"])


def test_popularity_is_skewed_so_ten_batches_touch_few_rows():
    ds = load_synthetic_ctr(**SMALL)
    rows = np.concatenate([ds.train["user_id"][:2560], ds.train["item_id"][:2560]])
    assert len(np.unique(rows)) < 0.003 * CTR_BUCKETS


def _fit_logistic(train, epochs=60, lr=2.0):
    """Logistic regression on one-hot user and item ids (full-batch gradient descent, each
    id's step scaled by 1 / (its count + 30): rarely seen ids stay near 0)."""
    users, u_idx = np.unique(train["user_id"], return_inverse=True)
    items, i_idx = np.unique(train["item_id"], return_inverse=True)
    y = train["click"].astype(np.float64)
    wu, wi, b = np.zeros(len(users)), np.zeros(len(items)), 0.0
    cu = np.bincount(u_idx, minlength=len(users)) + 30.0
    ci = np.bincount(i_idx, minlength=len(items)) + 30.0
    for _ in range(epochs):
        p = 1.0 / (1.0 + np.exp(-(wu[u_idx] + wi[i_idx] + b)))
        g = p - y
        wu -= lr * np.bincount(u_idx, g, len(users)) / cu
        wi -= lr * np.bincount(i_idx, g, len(items)) / ci
        b -= lr * g.mean()

    def score(split):
        su = np.searchsorted(users, split["user_id"]).clip(0, len(users) - 1)
        si = np.searchsorted(items, split["item_id"]).clip(0, len(items) - 1)
        known_u = users[su] == split["user_id"]
        known_i = items[si] == split["item_id"]
        return np.where(known_u, wu[su], 0.0) + np.where(known_i, wi[si], 0.0) + b

    return score


def test_a_logistic_model_on_the_ids_learns_the_clicks():
    ds = load_synthetic_ctr(rows=200_000)
    score = _fit_logistic(ds.train)
    assert roc_auc(ds.test["click"], score(ds.test)) > 0.6
    shuffled = np.random.default_rng(0).permutation(ds.test["click"])
    assert abs(roc_auc(shuffled, score(ds.test)) - 0.5) < 0.03


def test_load_dataset_names_the_label_after_the_model_and_parses_options():
    ds = load_dataset("synthetic-ctr:rows=1000,seed=2", ("item_id", "user_id"), ("y",))
    assert set(ds.train) == {"user_id", "item_id", "y"} and ds.num_train == 800
    np.testing.assert_array_equal(ds.train["y"], load_synthetic_ctr(rows=1000, seed=2)
                                  .train["click"])


@pytest.mark.parametrize("spec, inputs, match", [
    ("synthetic-ctr", ("x",), r"provides features \['user_id', 'item_id'\].*inputs \['x'\]"),
    ("synthetic-ctr:rows=abc", ("user_id", "item_id"), "rows must be an integer, got 'abc'"),
    ("synthetic-ctr:size=5", ("user_id", "item_id"), "KEY one of .*got 'size=5'"),
    ("synthetic-ctr:rows=5", ("user_id", "item_id"), "rows must be an integer >= 10, got 5"),
])
def test_bad_specs_and_models_are_refused_naming_what_was_expected(spec, inputs, match):
    with pytest.raises(DataError, match=match):
        load_dataset(spec, inputs, ("click",))


def test_roc_auc_matches_the_rank_definition_with_ties():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    s = rng.integers(0, 7, 500).astype(np.float32)  # many ties
    pos, neg = s[y == 1], s[y == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert roc_auc(y, s) == pytest.approx(pairs, abs=1e-12)
    assert roc_auc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0
    assert roc_auc([1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4]) == 0.0
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    assert roc_auc(y, s) == pytest.approx(sklearn_metrics.roc_auc_score(y, s), abs=1e-12)


@pytest.mark.parametrize("labels, scores, match", [
    ([0, 0], [0.1, 0.2], "needs both classes"),
    ([0, 2], [0.1, 0.2], "labels must be 0 or 1"),
    ([0, 1], [0.1], "2 labels but 1 scores"),
    ([0, 1], [0.1, float("nan")], "NaN"),
])
def test_roc_auc_refuses_what_has_no_auc(labels, scores, match):
    with pytest.raises(CkptsyncValueError, match=match):
        roc_auc(labels, scores)
