"""``GraphKeys``: the standard collection names, as TF1's ``tf.GraphKeys``."""

from __future__ import annotations

__all__ = ["GraphKeys"]


class GraphKeys:
    """Standard collection names, as ``tf.GraphKeys`` (the same strings)."""

    GLOBAL_VARIABLES = "variables"
    VARIABLES = "variables"  # TF1's deprecated alias
    LOCAL_VARIABLES = "local_variables"
    METRIC_VARIABLES = "metric_variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    MODEL_VARIABLES = "model_variables"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
    CONCATENATED_VARIABLES = "concatenated_variables"
    TRAINABLE_RESOURCE_VARIABLES = "trainable_resource_variables"
    GLOBAL_STEP = "global_step"
    EVAL_STEP = "eval_step"
    SAVERS = "savers"
    SAVEABLE_OBJECTS = "saveable_objects"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    WEIGHTS = "weights"
    BIASES = "biases"
    ACTIVATIONS = "activations"
    INIT_OP = "init_op"
    LOCAL_INIT_OP = "local_init_op"
    READY_OP = "ready_op"
    READY_FOR_LOCAL_INIT_OP = "ready_for_local_init_op"
    TRAIN_OP = "train_op"
    SUMMARIES = "summaries"
    SUMMARY_OP = "summary_op"
    QUEUE_RUNNERS = "queue_runners"
    TABLE_INITIALIZERS = "table_initializer"
    ASSET_FILEPATHS = "asset_filepaths"
    RESOURCES = "resources"
    LOCAL_RESOURCES = "local_resources"
    COND_CONTEXT = "cond_context"
    WHILE_CONTEXT = "while_context"
