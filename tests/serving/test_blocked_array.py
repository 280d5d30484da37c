"""BlockedArray: gathers equal an ndarray's, versions share untouched blocks, the pool
reuses the blocks of dropped versions; the graph's gathers read it, other consumers get
a plain array; GraphServable says which variables only gathers read."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ckptsync as cs
from ckptsync.blocked_array import BlockedArray
from ckptsync.errors import CkptsyncValueError, InvalidArgumentError
from ckptsync.model_spec import ModelSpec
from ckptsync.serving import GraphServable

ROWS, DIM, B = 103, 4, 8  # 13 blocks, the last one 7 rows


def _table(seed: int = 0, rows: int = ROWS) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, DIM)).astype(np.float32)


def test_gather_equals_an_ndarray_gather_including_the_short_last_block():
    table = _table()
    blocked = BlockedArray.adopt(table.copy(), block_rows=B)
    assert blocked.shape == (ROWS, DIM) and blocked.dtype == np.float32
    assert blocked.slots.size == 13
    ids = np.array([[0, 7, 8], [96, 101, 102]], np.int64)
    np.testing.assert_array_equal(blocked.gather(ids), table[ids])
    np.testing.assert_array_equal(blocked.gather(np.array([], np.int32)), table[[]])
    np.testing.assert_array_equal(blocked.to_ndarray(), table)
    np.testing.assert_array_equal(np.asarray(blocked), table)
    assert blocked.block_view(12).shape == (7, DIM)


@pytest.mark.parametrize("bad", [-1, ROWS, 10**9])
def test_gather_refuses_negative_and_out_of_range_ids(bad):
    blocked = BlockedArray.adopt(_table(), block_rows=B)
    with pytest.raises(IndexError, match=rf"indices\[1\] = {bad} is not in \[0, {ROWS}\)"):
        blocked.gather(np.array([0, bad]))
    with pytest.raises(TypeError, match="integers"):
        blocked.gather(np.array([0.5]))


def test_with_rows_copies_only_the_touched_blocks_and_shares_the_rest():
    table = _table()
    v1 = BlockedArray.adopt(table.copy(), block_rows=B)
    rows = np.array([3, 5, 100], np.int64)  # blocks 0 and 12 (the short one)
    values = np.full((3, DIM), 7.0, np.float32)
    v2, blocks = v1.with_rows(rows, values)
    expected = table.copy()
    expected[rows] = values
    np.testing.assert_array_equal(v2.to_ndarray(), expected)
    np.testing.assert_array_equal(v1.to_ndarray(), table)  # the old version is untouched
    assert blocks.tolist() == [0, 12]
    short = v2.block_bytes([12])[0]  # the short last block: 7 rows
    assert bytes(short) == expected[96:].tobytes()
    for j in range(13):
        shared = np.shares_memory(v1.block_view(j), v2.block_view(j))
        assert shared == (j not in (0, 12)), j
    assert (v1.slots != v2.slots).tolist() == [j in (0, 12) for j in range(13)]


def test_with_rows_refuses_rows_out_of_range_and_wrong_values():
    v1 = BlockedArray.adopt(_table(), block_rows=B)
    with pytest.raises(CkptsyncValueError, match=r"rows must lie in \[0, 103\)"):
        v1.with_rows([ROWS], np.zeros((1, DIM), np.float32))
    with pytest.raises(CkptsyncValueError, match=r"values have shape \[1, 3\]"):
        v1.with_rows([1], np.zeros((1, 3), np.float32))


def test_blocks_of_dropped_versions_are_reused_so_500_versions_do_not_grow_the_pool():
    rng = np.random.default_rng(1)
    table = _table(rows=4096)
    current = BlockedArray.adopt(table.copy(), block_rows=B)
    pool = current.pool
    expected = table.copy()
    held = None  # one older version held, as a request still running on it
    sizes = []
    for step in range(500):
        rows = np.unique(rng.integers(0, 4096, 40))
        values = rng.standard_normal((rows.size, DIM)).astype(np.float32)
        expected[rows] = values
        held, current = current, current.with_rows(rows, values)[0]
        sizes.append(pool.capacity_blocks)
        if step % 97 == 0:
            np.testing.assert_array_equal(current.to_ndarray(), expected)
    np.testing.assert_array_equal(current.to_ndarray(), expected)
    del held
    gc.collect()
    assert pool.live_versions == 1
    assert sizes[-1] == sizes[10], "the pool grew after its first swaps"
    # Three versions at most alive at once (held, current, new): ~2 x 40 blocks more.
    assert pool.capacity_blocks <= pool.n_blocks + 3 * 40


def test_a_read_only_array_of_read_only_memory_is_copied_once():
    table = _table()
    table.setflags(write=False)
    blocked = BlockedArray.adopt(table, block_rows=B)
    assert not np.shares_memory(blocked.block_view(0), table)
    writable = _table()
    ro_view = writable.view()
    ro_view.setflags(write=False)  # read-only view of writable memory: adopted in place
    assert np.shares_memory(BlockedArray.adopt(ro_view, block_rows=B).block_view(0), writable)


def _build(graph, device, mode):
    emb = cs.get_variable("emb", [ROWS, DIM], initializer=cs.zeros_initializer())
    dense = cs.get_variable("dense", [ROWS, DIM], initializer=cs.zeros_initializer())
    w = cs.get_variable("w", [DIM, 2], initializer=cs.zeros_initializer())
    ids = cs.placeholder(cs.int64, [None], name="ids")
    looked_up = cs.nn.embedding_lookup(emb, ids)
    other = cs.reduce_sum(dense, axis=0)  # read as a value: stays a plain array
    return ModelSpec(inputs={"ids": ids},
                     outputs={"y": cs.matmul(looked_up + other, w),
                              "g": cs.gather(emb, ids)})


def test_graph_servable_names_the_variables_only_gathers_read():
    servable = GraphServable(_build)
    assert servable.row_gathered_variables == frozenset({"emb"})


def test_the_graph_reads_a_blocked_table_by_gathers_and_a_plain_copy_elsewhere():
    servable = GraphServable(_build)
    emb, dense = _table(1), _table(2)
    w = np.random.default_rng(3).standard_normal((DIM, 2)).astype(np.float32)
    ids = np.array([0, 102, 50, 50], np.int64)
    plain = servable.run({"emb": emb, "dense": dense, "w": w}, {"ids": ids})
    # A table given blocked to a consumer that reads its value is materialized: correct.
    blocked = servable.run({"emb": BlockedArray.adopt(emb.copy(), block_rows=B),
                            "dense": BlockedArray.adopt(dense.copy(), block_rows=B), "w": w},
                           {"ids": ids})
    for key in ("y", "g"):
        np.testing.assert_array_equal(blocked[key], plain[key])
    np.testing.assert_array_equal(blocked["g"], emb[ids])
    with pytest.raises(InvalidArgumentError, match=r"indices\[0\] = -1 is not in \[0, 103\)"):
        servable.run({"emb": BlockedArray.adopt(emb, block_rows=B), "dense": dense, "w": w},
                     {"ids": np.array([-1], np.int64)})


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 120), block_rows=st.integers(1, 9), width=st.integers(1, 3),
       seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 10))
def test_every_live_version_reads_as_its_ndarray_over_arenas_and_short_blocks(
        rows, block_rows, width, seed, steps):
    """Random row updates of random tables (short last blocks, blocks spread over several
    arenas as versions are dropped and their blocks reused): each version still alive
    reads, gathers and hashes (``block_bytes``) exactly as the ndarray it stands for."""
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((rows, width)).astype(np.float32)
    version = BlockedArray.adopt(ref.copy(), block_rows)
    alive = [(version, ref)]
    for _ in range(steps):
        changed = rng.choice(rows, int(rng.integers(0, rows + 1)), replace=False)
        values = rng.standard_normal((changed.size, width)).astype(np.float32)
        ref = ref.copy()
        ref[changed] = values
        version, _ = version.with_rows(changed, values)
        alive.append((version, ref))
        if len(alive) > 2 and rng.random() < 0.6:  # drop an older one: its blocks free up
            del alive[int(rng.integers(0, len(alive) - 1))]
        for v, expected in alive:
            assert np.array_equal(v.to_ndarray(), expected)
            ids = rng.integers(0, rows, 7)
            assert np.array_equal(v.gather(ids), expected[ids])
            blocks = v.block_bytes(np.arange(-(-rows // block_rows)))
            assert b"".join(bytes(m) for m in blocks) == expected.tobytes()
