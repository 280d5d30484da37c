"""Golden cases, area ``data``: ``tf.data`` pipelines read through iterators, element by
element (``runs``), with TF1's static shapes and dtypes, the names of ``get_next``, and
``OutOfRangeError`` one element past the end. See :mod:`cases` for the case format.
(Shuffle orders are not TF's bit for bit, so no case here shuffles.)"""

from __future__ import annotations

import numpy as np

from .cases import case, rand


def _seq(tf, ds, runs, one_shot=True, **extra):
    it = tf.data.make_one_shot_iterator(ds) if one_shot else \
        tf.data.make_initializable_iterator(ds)
    nxt = it.get_next()
    fetch = nxt if isinstance(nxt, dict) else (
        {f"c{i}": t for i, t in enumerate(nxt)} if isinstance(nxt, tuple) else {"e": nxt})
    spec = {"feeds": {}, "fetch": fetch, "runs": runs, **extra}
    if not one_shot:
        spec["before"] = [(it.initializer, 1)]
    return spec


@case
def data_range_map_filter_batch(tf):
    ds = (tf.data.Dataset.range(20).map(lambda x: x * 3)
          .filter(lambda x: tf.equal(tf.floormod(x, 2), 1)).batch(4))
    spec = _seq(tf, ds, 3)
    spec["names"] = [spec["fetch"]["e"].name]
    return spec


@case
def data_range_map_filter_batch_past_the_end(tf):
    ds = (tf.data.Dataset.range(20).map(lambda x: x * 3)
          .filter(lambda x: tf.equal(tf.floormod(x, 2), 1)).batch(4))
    return _seq(tf, ds, 4)


@case
def data_range_negative_step(tf):
    return _seq(tf, tf.data.Dataset.range(10, 0, -3), 4)


@case
def data_zip_repeat_take(tf):
    a = tf.data.Dataset.range(3)
    b = tf.data.Dataset.from_tensor_slices(rand(1, 4, 2))
    return _seq(tf, tf.data.Dataset.zip((a, b)).repeat(2).take(5), 5)


@case
def data_dict_slices_batch(tf):
    ds = tf.data.Dataset.from_tensor_slices(
        {"x": rand(2, 5, 3), "y": np.arange(5, dtype=np.int64)}).batch(2)
    return _seq(tf, ds, 3)


@case
def data_dict_slices_batch_drop_remainder(tf):
    ds = tf.data.Dataset.from_tensor_slices(
        {"x": rand(2, 5, 3), "y": np.arange(5, dtype=np.int64)}).batch(2, drop_remainder=True)
    return _seq(tf, ds, 2)


@case
def data_drop_remainder_past_the_end(tf):
    ds = tf.data.Dataset.from_tensor_slices(rand(3, 5, 3)).batch(2, drop_remainder=True)
    return _seq(tf, ds, 3)


@case
def data_skip_take_concatenate(tf):
    a = tf.data.Dataset.range(10).skip(7)
    b = tf.data.Dataset.range(100, 200).take(2)
    return _seq(tf, a.concatenate(b), 5)


@case
def data_map_tuple_to_dict(tf):
    ds = tf.data.Dataset.from_tensor_slices((rand(4, 3, 2), rand(5, 3, 2)))
    return _seq(tf, ds.map(lambda a, b: {"s": a + b, "p": a * b}), 3)


@case
def data_map_dict_to_tuple_with_capture(tf):
    c = tf.constant([1.0, -2.0])
    ds = tf.data.Dataset.from_tensor_slices({"x": rand(6, 3, 2), "y": np.arange(3)})
    return _seq(tf, ds.map(lambda d: (d["x"] * c, d["y"] + 1)).batch(2), 2)


@case
def data_from_tensors_repeat_batch(tf):
    ds = tf.data.Dataset.from_tensors(rand(7, 2, 2)).repeat(3).batch(2)
    return _seq(tf, ds, 2)


@case
def data_repeat_then_batch_across_epochs(tf):
    return _seq(tf, tf.data.Dataset.range(5).repeat(2).batch(3), 4)


@case
def data_initializable_fed_placeholder(tf):
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    ds = tf.data.Dataset.from_tensor_slices(x).map(lambda r: tf.reduce_sum(r)).batch(2)
    spec = _seq(tf, ds, 2, one_shot=False)
    spec["feeds"] = {x: rand(8, 4, 3)}
    return spec


@case
def data_padded_batch(tf):
    ds = tf.data.Dataset.range(1, 6).map(
        lambda n: tf.fill(tf.reshape(tf.cast(n, tf.int32), [1]), n))
    return _seq(tf, ds.padded_batch(2, padded_shapes=[None]), 3)


@case
def data_list_slices_are_one_tensor(tf):
    return _seq(tf, tf.data.Dataset.from_tensor_slices([[1, 2], [3, 4], [5, 6]]), 3)


@case
def data_filter_must_return_bool(tf):
    return _seq(tf, tf.data.Dataset.range(3).filter(lambda x: x), 1)


@case
def data_slices_first_dims_differ(tf):
    return _seq(tf, tf.data.Dataset.from_tensor_slices((rand(9, 3), rand(9, 4))), 1)


@case
def data_take_skip_negative(tf):
    return _seq(tf, tf.data.Dataset.range(4).take(-1).skip(0).repeat(1), 4)


@case
def data_flat_map_with_inner_map(tf):
    ds = tf.data.Dataset.range(1, 4).flat_map(
        lambda n: tf.data.Dataset.range(n).map(lambda x: x * 10 + n))
    return _seq(tf, ds.batch(4), 2)


@case
def data_unbatch(tf):
    ds = tf.data.Dataset.from_tensor_slices(rand(10, 2, 3, 2)).unbatch()
    return _seq(tf, ds, 6)


@case
def data_from_generator(tf):
    def gen():
        for i in range(3):
            yield np.arange(i, dtype=np.float32), i

    ds = tf.data.Dataset.from_generator(gen, (tf.float32, tf.int64),
                                        (tf.TensorShape([None]), tf.TensorShape([])))
    return _seq(tf, ds.padded_batch(2, padded_shapes=([None], [])), 2)


@case
def data_interleave_cycle_and_block(tf):
    ds = tf.data.Dataset.range(1, 5).interleave(
        lambda n: tf.data.Dataset.from_tensors(n).repeat(n), cycle_length=2, block_length=2)
    return _seq(tf, ds.batch(4), 3)
