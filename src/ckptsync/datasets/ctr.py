"""``--data synthetic-ctr``: seeded, synthetic click logs for the CTR example, and the
rank-based ROC AUC that binary models are judged by.

The data is **synthetic** (made up by a generator, no real users): each of
``num_users`` users and ``num_items`` items has a hidden factor vector (``factor_dim``
normal entries) and a hidden bias; an impression picks a user and an item by Zipf-like
popularity (weight ``1 / (rank + 10) ** 1.1``, so a few thousand rows of the table are
hot and most are rarely seen, as in real click logs: 10 batches of 256 touch about 2,650
distinct ids) and is clicked with probability ``sigmoid(2 * user . item + user_bias +
item_bias)`` (about 29 % of impressions; the hidden model's own AUC is about 0.88, the
biases alone give about 0.67).

Users and items are then *hashed* into one id space of ``buckets`` (1,000,000) rows, as
a recommendation model's hashed feature columns: ``user_id = splitmix64(2 * user) %
buckets``, ``item_id = splitmix64(2 * item + 1) % buckets`` (a few ids collide, as with
any hashing trick). Arrays: ``user_id``, ``item_id`` int64 ``[n]`` in ``[0, buckets)``,
``click`` int64 ``[n]`` in {0, 1}; the last 20 % of the rows are held out. Everything is a
function of ``seed`` alone and vectorized (500,000 rows in well under a second).
"""

from __future__ import annotations

import numpy as np

from ..errors import CkptsyncValueError
from .loaders import DataError, LabeledData

__all__ = ["CTR_FEATURES", "CTR_LABEL", "CTR_BUCKETS", "load_synthetic_ctr",
           "parse_synthetic_ctr", "roc_auc", "hash_ids"]

#: The feature arrays of ``synthetic-ctr`` (a model's inputs must be named so).
CTR_FEATURES = ("user_id", "item_id")
#: Its label array (renamed to a model's single label).
CTR_LABEL = "click"
#: The size of the hashed id space: rows of the example's embedding table.
CTR_BUCKETS = 1_000_000

_DEFAULTS = {"rows": 500_000, "seed": 0, "users": 100_000, "items": 10_000}
_ZIPF_EXPONENT = 1.1
_ZIPF_OFFSET = 10.0
_SCALE = 2.0
_HELD_OUT_FRACTION = 0.2


def hash_ids(ids: np.ndarray, salt: int, buckets: int = CTR_BUCKETS) -> np.ndarray:
    """``splitmix64(2 * ids + salt) % buckets`` as int64 (vectorized; ``ids`` non-negative
    integers, ``salt`` 0 for users and 1 for items)."""
    z = ids.astype(np.uint64) * np.uint64(2) + np.uint64(salt)
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(buckets)).astype(np.int64)


def _popularity(n: int) -> np.ndarray:
    w = 1.0 / (np.arange(n, dtype=np.float64) + _ZIPF_OFFSET) ** _ZIPF_EXPONENT
    return w / w.sum()


def load_synthetic_ctr(rows: int = _DEFAULTS["rows"], seed: int = _DEFAULTS["seed"],
                       users: int = _DEFAULTS["users"], items: int = _DEFAULTS["items"],
                       factor_dim: int = 8, buckets: int = CTR_BUCKETS) -> LabeledData:
    """Synthetic click logs (see the module docstring): ``rows`` impressions, the last 20 %
    held out; the same arrays for the same arguments.

    Returns:
        LabeledData ``synthetic-ctr`` with train/test ``user_id``, ``item_id`` int64
        ``[n]`` in ``[0, buckets)`` and ``click`` int64 ``[n]`` in {0, 1}.

    Raises:
        DataError: ``rows`` < 10, or ``users``/``items``/``factor_dim``/``buckets`` < 1.
    """
    for name, value, low in (("rows", rows, 10), ("users", users, 1), ("items", items, 1),
                             ("factor_dim", factor_dim, 1), ("buckets", buckets, 1)):
        if int(value) != value or value < low:
            raise DataError(f"synthetic-ctr: {name} must be an integer >= {low}, got {value!r}.")
    rng = np.random.default_rng(seed)
    user_f = rng.normal(0.0, factor_dim ** -0.25, (users, factor_dim))
    item_f = rng.normal(0.0, factor_dim ** -0.25, (items, factor_dim))
    user_bias = rng.normal(0.0, 0.7, users)
    item_bias = rng.normal(-1.5, 0.7, items)
    # Which user is popular is itself random (ranks are a permutation), so hot ids are
    # spread over the hashed space rather than being users 0, 1, 2, ...
    u = rng.permutation(users)[rng.choice(users, rows, p=_popularity(users))]
    i = rng.permutation(items)[rng.choice(items, rows, p=_popularity(items))]
    logit = (_SCALE * np.einsum("nk,nk->n", user_f[u], item_f[i]) + user_bias[u]
             + item_bias[i])
    click = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)
    arrays = {"user_id": hash_ids(u, 0, buckets), "item_id": hash_ids(i, 1, buckets),
              CTR_LABEL: click}
    n_test = max(1, int(round(rows * _HELD_OUT_FRACTION)))
    train = {k: v[: rows - n_test] for k, v in arrays.items()}
    test = {k: v[rows - n_test:] for k, v in arrays.items()}
    return LabeledData("synthetic-ctr", train, test, CTR_FEATURES, (CTR_LABEL,))


def parse_synthetic_ctr(spec: str) -> dict[str, int]:
    """The keyword arguments of ``load_synthetic_ctr`` from ``--data`` ``synthetic-ctr`` or
    ``synthetic-ctr:rows=N,seed=S,users=U,items=I`` (each optional).

    Raises:
        DataError: another key, or a value that is not an integer.
    """
    _, _, rest = spec.partition(":")
    out: dict[str, int] = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if key not in _DEFAULTS or not eq:
            raise DataError(f"--data {spec}: expected synthetic-ctr[:KEY=N,...] with KEY one "
                            f"of {sorted(_DEFAULTS)}, got {part!r}.")
        try:
            out[key] = int(value)
        except ValueError:
            raise DataError(f"--data {spec}: {key} must be an integer, got {value!r}.") from None
    return out


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """The area under the ROC curve of ``scores`` for binary ``labels`` (any shape, same
    size; labels 0/1 or bool, scores any real numbers), exactly as
    ``sklearn.metrics.roc_auc_score``: the probability that a random positive scores
    above a random negative, ties counting one half (Mann-Whitney U over average ranks).
    O(n log n).

    Raises:
        ValueError: sizes differ, a label is not 0 or 1, a score is NaN, or only one
            class is present (AUC is undefined).
    """
    y = np.asarray(labels).reshape(-1)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if y.size != s.size:
        raise CkptsyncValueError(f"roc_auc: {y.size} labels but {s.size} scores.")
    if y.size and not np.all((y == 0) | (y == 1)):
        raise CkptsyncValueError("roc_auc: labels must be 0 or 1.")
    if np.isnan(s).any():
        raise CkptsyncValueError("roc_auc: scores contain NaN.")
    pos = y.astype(bool)
    n_pos = int(pos.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise CkptsyncValueError(
            f"roc_auc: needs both classes, got {n_pos} positives and {n_neg} negatives.")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    # Average rank (1-based) of each run of tied scores.
    starts = np.flatnonzero(np.r_[True, sorted_s[1:] != sorted_s[:-1]])
    ends = np.r_[starts[1:], s.size]
    avg = (starts + ends + 1) / 2.0
    ranks = np.empty(s.size)
    ranks[order] = np.repeat(avg, ends - starts)
    u = ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))

