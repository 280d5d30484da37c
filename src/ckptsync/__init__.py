"""ckptsync: keep a serving copy of a model in sync with a model that is still training.

The programming model is TensorFlow 1's graph mode (``import ckptsync as cs`` where you
would ``import tensorflow.compat.v1 as tf``), on numpy, with HDF5 checkpoints.

Example:
    >>> import ckptsync as cs
    >>> g = cs.Graph()
    >>> with g.as_default():
    ...     w = cs.get_variable("w", [2], initializer=cs.ones_initializer())
    ...     y = cs.reduce_sum(w * 3.0)
    ...     init = cs.global_variables_initializer()
    >>> with cs.Session(graph=g) as sess:
    ...     sess.run(init)
    ...     float(sess.run(y))
    6.0
"""

import importlib as _importlib

from . import (  # noqa: F401
    contrib,
    debugging,
    dtypes,
    errors,
    gfile,
    io,
    layers,
    linalg,
    logging,
    losses,  # noqa: F401
    math,
    metrics,  # noqa: F401
    nn,
    random,
)
from .device import DeviceSpec  # noqa: F401
from .dtypes import (  # noqa: F401
    DType,
    as_dtype,
    bool,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    string,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .errors import OpError  # noqa: F401 - tf.OpError, as TF1's
from .gradients import gradients  # noqa: F401
from .graph import (  # noqa: F401
    Graph,
    GraphKeys,
    Operation,
    Tensor,
    add_to_collection,
    add_to_collections,
    control_dependencies,
    device,
    get_collection,
    get_collection_ref,
    get_default_graph,
    name_scope,
    reset_default_graph,
)
from .indexed_slices import IndexedSlices, IndexedSlicesValue  # noqa: F401
from .initializers import (  # noqa: F401
    constant_initializer,
    glorot_normal_initializer,
    glorot_uniform_initializer,
    ones_initializer,
    orthogonal_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    truncated_normal_initializer,
    variance_scaling_initializer,
    zeros_initializer,
)
from .logging import get_logger  # noqa: F401
from .model_spec import ModeKeys, ModelSpec  # noqa: F401
from .not_implemented import missing as _missing  # noqa: E402
from .ops.array_ops import (  # noqa: F401
    concat,
    constant,
    convert_to_tensor,
    expand_dims,
    fill,
    identity,
    ones,
    ones_like,
    placeholder,
    reshape,
    shape,
    squeeze,
    stop_gradient,
    transpose,
    zeros,
    zeros_like,
)
from .ops.check_ops import *  # noqa: F401,F403
from .ops.clip_ops import *  # noqa: F401,F403
from .ops.control_flow_ops import *  # noqa: F401,F403
from .ops.conv_ops import *  # noqa: F401,F403
from .ops.elementwise_ops import *  # noqa: F401,F403
from .ops.embedding_ops import *  # noqa: F401,F403
from .ops.index_ops import *  # noqa: F401,F403
from .ops.linalg_ops import *  # noqa: F401,F403
from .ops.logging_ops import *  # noqa: F401,F403
from .ops.manip_ops import *  # noqa: F401,F403
from .ops.math_ops import (  # noqa: F401
    abs,
    add,
    add_n,
    argmax,
    cast,
    divide,
    equal,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    matmul,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    pow,
    reduce_max,
    reduce_mean,
    reduce_sum,
    round,
    sign,
    sqrt,
    square,
    subtract,
)
from .ops.nn_dropout import *  # noqa: F401,F403
from .ops.nn_impl import *  # noqa: F401,F403
from .ops.nn_losses import *  # noqa: F401,F403
from .ops.nn_norm import *  # noqa: F401,F403
from .ops.nn_ops import sigmoid, tanh  # noqa: F401
from .ops.nn_topk import *  # noqa: F401,F403
from .ops.random_ops import (  # noqa: F401
    get_seed,
    random_normal,
    random_shuffle,
    random_uniform,
    set_random_seed,
    truncated_normal,
)
from .ops.reduction_ops import *  # noqa: F401,F403
from .ops.scatter_ops import *  # noqa: F401,F403
from .ops.script_ops import *  # noqa: F401,F403
from .ops.segment_ops import *  # noqa: F401,F403
from .ops.selection_ops import *  # noqa: F401,F403
from .ops.slicing_ops import *  # noqa: F401,F403
from .ops.sort_ops import *  # noqa: F401,F403
from .ops.state_ops import assign, assign_add, assign_sub, group, no_op  # noqa: F401
from .session import (  # noqa: F401
    ConfigProto,
    GPUOptions,
    GraphOptions,
    InteractiveSession,
    OptimizerOptions,
    RunMetadata,
    RunOptions,
    Session,
    get_default_session,
)
from .tensor_shape import Dimension, TensorShape, dimension_value  # noqa: F401
from .v2_compat import *  # noqa: F401,F403
from .variable_scope import (  # noqa: F401
    AUTO_REUSE,
    VariableScope,
    get_local_variable,
    get_variable,
    get_variable_scope,
    variable_scope,
)
from .variables import (  # noqa: F401
    Variable,
    all_variables,
    global_variables,
    global_variables_initializer,
    initialize_all_variables,
    initialize_local_variables,
    initialize_variables,
    local_variables,
    local_variables_initializer,
    model_variables,
    moving_average_variables,
    report_uninitialized_variables,
    trainable_variables,
    variables_initializer,
)

# ckptsync's own version (what pip installed), not a TensorFlow version: see
# docs/graph-language.md ("tf.__version__").
__version__ = "0.1.0"


def __getattr__(name: str):  # lazy subpackages that sit above the runtime
    if name in ("train", "estimator", "checkpoint", "serving", "distributed", "data",
                "summary", "app", "flags", "compat"):
        return _importlib.import_module(f".{name}", __name__)
    if name in ("Summary", "Event", "SessionLog", "SummaryMetadata", "HistogramProto"):
        return getattr(_importlib.import_module(".summary", __name__), name)
    raise _missing(__name__, name)
