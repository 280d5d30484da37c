"""Golden cases, area ``graph``: collections, variable naming, initializers' structure and
the session's configuration records. See :mod:`cases` for the case format."""

from __future__ import annotations

import numpy as np

from .cases import case


@case
def variable_then_get_variable_of_the_same_name_is_uniquified(tf):
    v = tf.Variable(1.0, name="v")
    w = tf.get_variable("v", [], initializer=tf.zeros_initializer())
    with tf.variable_scope("", reuse=True):
        again = tf.get_variable("v", [])
    c = tf.constant(1.0, name="a/w")
    with tf.name_scope("ns"):
        with tf.variable_scope("a"):
            x = tf.get_variable("w", [], initializer=tf.ones_initializer())
    return {"feeds": {}, "fetch": {"v": v + 0.0, "w": again + 0.0, "x": x + c}, "init": True,
            "names": [v.name, w.name, again.name, x.name,
                      *[u.name for u in tf.global_variables()]]}


@case
def collections_add_get_ref_and_scope_filter(tf):
    with tf.variable_scope("enc"):
        a = tf.get_variable("a", [2], initializer=tf.ones_initializer())
    with tf.variable_scope("dec"):
        b = tf.get_variable("b", [2], initializer=tf.ones_initializer())
    tf.add_to_collection(tf.GraphKeys.UPDATE_OPS, tf.identity(a, name="upd"))
    tf.add_to_collections(["mine", "yours", "mine"], b)
    ref = tf.get_collection_ref("extra")
    ref.append(a)
    keys = [tf.GraphKeys.UPDATE_OPS, tf.GraphKeys.REGULARIZATION_LOSSES,
            tf.GraphKeys.MOVING_AVERAGE_VARIABLES, tf.GraphKeys.LOCAL_VARIABLES,
            tf.GraphKeys.GLOBAL_VARIABLES, tf.GraphKeys.TRAINABLE_VARIABLES,
            tf.GraphKeys.METRIC_VARIABLES, tf.GraphKeys.TABLE_INITIALIZERS]
    names = [*keys,
             *[t.name for t in tf.get_collection(tf.GraphKeys.UPDATE_OPS)],
             *[t.name for t in tf.get_collection("mine")],
             *[t.name for t in tf.get_collection("yours")],
             *[t.name for t in tf.get_collection("extra")],
             *[t.name for t in tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="enc")],
             *[t.name for t in tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="d")],
             str(len(tf.get_collection("nothing"))),
             *[t.name for t in tf.all_variables()]]
    return {"feeds": {}, "fetch": {"sum": tf.add_n(tf.get_collection(tf.GraphKeys.UPDATE_OPS))},
            "init": True, "names": names}


@case
def orthogonal_initializer_gives_gain_squared_identity(tf):
    w = tf.get_variable("w", [6, 4], initializer=tf.orthogonal_initializer(gain=2.0, seed=3))
    u = tf.get_variable("u", [2, 3, 8], initializer=tf.orthogonal_initializer(seed=4))
    flat = tf.reshape(u, [6, 8])
    return {"feeds": {}, "init": True,
            "fetch": {"wtw": tf.matmul(w, w, transpose_a=True),
                      "uut": tf.matmul(flat, flat, transpose_b=True)}}


@case
def orthogonal_initializer_of_a_vector_raises(tf):
    tf.get_variable("w", [5], initializer=tf.orthogonal_initializer())
    return {"feeds": {}, "fetch": {}}


@case
def variance_scaling_bad_mode_raises(tf):
    tf.variance_scaling_initializer(mode="fan_sideways")
    return {"feeds": {}, "fetch": {}}


@case
def variance_scaling_bad_scale_raises(tf):
    tf.variance_scaling_initializer(scale=-1.0)
    return {"feeds": {}, "fetch": {}}


@case
def config_proto_unknown_field_raises(tf):
    tf.ConfigProto(intra_op_threads=2)
    return {"feeds": {}, "fetch": {}}


@case
def config_proto_fields_and_deprecated_initializers(tf):
    config = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2,
                            allow_soft_placement=True)
    config.gpu_options.allow_growth = True
    v = tf.Variable(np.arange(3, dtype=np.float32), name="v")
    loc = tf.Variable(2.0, name="loc", collections=[tf.GraphKeys.LOCAL_VARIABLES])
    init = tf.group(tf.initialize_all_variables(), tf.initialize_local_variables())
    out = v * loc
    names = [str(config.intra_op_parallelism_threads), str(config.inter_op_parallelism_threads),
             str(config.allow_soft_placement), str(config.gpu_options.allow_growth)]
    return {"feeds": {}, "fetch": {"out": out}, "names": names, "before": [(init, 1)]}
