"""The TF1 names ckptsync does not implement, and the error that says so.

A TF1 program that reaches one (``tf.feature_column``, ``tf.nn.dynamic_rnn``,
``tf.estimator.DNNClassifier``, ...) gets an ``AttributeError`` that names the TF1 API,
says it is not implemented, and what to use instead, rather than Python's bare "module
has no attribute". The packages' module ``__getattr__`` hooks call :func:`missing`; the
list is docs/graph-language.md's "Not implemented". Not part of the public API.
"""

from __future__ import annotations

__all__ = ["NOT_IMPLEMENTED", "missing"]

_RNN = "recurrent layers; write the recurrence with tf.while_loop, or use convolutions"
_CANNED = ("the canned Estimators; write a model_fn with tf.layers and pass it to "
           "tf.estimator.Estimator")
_EXPORTER = ("SavedModel exporters; infer serve serves the Saver checkpoints of "
             "model_dir with the model file's serving_input_receiver_fn")
_META = ("MetaGraphDef import and export; both sides build the graph from the model file "
         "(build_net or model_fn)")
_SAMPLED = "sampled losses; use tf.nn.sparse_softmax_cross_entropy_with_logits"
_SPARSE = "SparseTensor and sparse ops; feed dense ids and use tf.nn.embedding_lookup"

# "<module>.<name>" -> what it is and what to use instead.
NOT_IMPLEMENTED: dict[str, str] = {
    "ckptsync.feature_column": ("feature columns; feed dense inputs (numeric arrays, int "
                                "ids) and use tf.nn.embedding_lookup for categorical ids"),
    "ckptsync.saved_model": ("SavedModel; infer serve serves Saver checkpoints with the "
                             "model file's graph (docs/serving.md)"),
    "ckptsync.keras": "Keras; use tf.layers and tf.losses",
    "ckptsync.sparse": _SPARSE,
    "ckptsync.SparseTensor": _SPARSE,
    "ckptsync.sparse_placeholder": _SPARSE,
    "ckptsync.TensorArray": "TensorArray; use tf.while_loop with tensors as loop variables",
    "ckptsync.strings": "string tensors; map strings to int ids before feeding them",
    "ckptsync.string_to_hash_bucket_fast": "string tensors; hash ids before feeding them",
    "ckptsync.image": "image ops; preprocess images with numpy before feeding them",
    "ckptsync.lite": "TensorFlow Lite",
    "ckptsync.python_io": "TFRecord files; use tf.data.Dataset.from_tensor_slices",
    "ckptsync.distribute": ("distribution strategies; use trainer run under mpiexec "
                            "(docs/mpi.md)"),
    "ckptsync.nn.rnn_cell": _RNN,
    "ckptsync.nn.dynamic_rnn": _RNN,
    "ckptsync.nn.bidirectional_dynamic_rnn": _RNN,
    "ckptsync.nn.static_rnn": _RNN,
    "ckptsync.nn.raw_rnn": _RNN,
    "ckptsync.contrib.rnn": _RNN,
    "ckptsync.contrib.seq2seq": _RNN,
    "ckptsync.nn.sampled_softmax_loss": _SAMPLED,
    "ckptsync.nn.nce_loss": _SAMPLED,
    "ckptsync.nn.ctc_loss": "CTC losses",
    "ckptsync.nn.embedding_lookup_sparse": _SPARSE,
    "ckptsync.nn.safe_embedding_lookup_sparse": _SPARSE,
    "ckptsync.train.import_meta_graph": _META,
    "ckptsync.train.export_meta_graph": _META,
    "ckptsync.train.write_graph": _META,
    **{f"ckptsync.estimator.{n}": _CANNED for n in (
        "DNNClassifier", "DNNRegressor", "LinearClassifier", "LinearRegressor",
        "DNNLinearCombinedClassifier", "DNNLinearCombinedRegressor",
        "BoostedTreesClassifier", "BoostedTreesRegressor", "BaselineClassifier",
        "BaselineRegressor")},
    **{f"ckptsync.estimator.{n}": _EXPORTER for n in (
        "LatestExporter", "BestExporter", "FinalExporter")},
}


def missing(module: str, name: str) -> AttributeError:
    """The error for ``module.name``, which does not exist: it says which TF1 API that is
    and that it is not implemented, where :data:`NOT_IMPLEMENTED` lists it; otherwise
    Python's own message. ``module``: e.g. ``"ckptsync.nn"``."""
    what = NOT_IMPLEMENTED.get(f"{module}.{name}")
    if what is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    tf_name = "tf." + f"{module}.{name}".partition(".")[2]
    return AttributeError(
        f"module {module!r} has no attribute {name!r}: TF1's {tf_name} is not implemented "
        f"in ckptsync ({what}; see docs/graph-language.md, \"Not implemented\")")
