"""``cs.train``: optimizers, the global step, ``Saver``, checkpoint helpers, hooks and
monitored sessions, as TF1's ``tf.train``."""

from typing import TYPE_CHECKING, Any

from ..checkpoint import (  # noqa: F401
    CheckpointReader,
    NewCheckpointReader,  # noqa: F401
    checkpoint_exists,
    checkpoints_iterator,
    generate_checkpoint_state_proto,
    get_checkpoint_mtimes,
    get_checkpoint_state,
    latest_checkpoint,
    list_variables,
    load_checkpoint,
    load_variable,
    remove_checkpoint,
    update_checkpoint_state,
)
from ..not_implemented import missing as _missing
from ..summary.summary_iterator import summary_iterator  # noqa: F401
from . import basic_session_run_hooks, session_run_hook  # noqa: F401
from .adaptive_optimizers import (  # noqa: F401
    AdadeltaOptimizer,
    AdagradOptimizer,
    FtrlOptimizer,
    RMSPropOptimizer,
)
from .basic_hooks import (  # noqa: F401
    CheckpointSaverHook,
    CheckpointSaverListener,
    FinalOpsHook,
    LoggingTensorHook,
    NanLossDuringTrainingError,
    NanTensorHook,
    SecondOrStepTimer,
    StepCounterHook,
    StopAtStepHook,
)
from .broadcast import broadcast_global_variables  # noqa: F401
from .checkpoint_utils import init_from_checkpoint  # noqa: F401
from .feed_hooks import FeedFnHook, GlobalStepWaiterHook  # noqa: F401
from .learning_rate_decay import (  # noqa: F401
    cosine_decay,
    cosine_decay_restarts,
    exponential_decay,
    inverse_time_decay,
    linear_cosine_decay,
    natural_exp_decay,
    piecewise_constant,
    polynomial_decay,
)
from .monitored_session import (  # noqa: F401
    ChiefSessionCreator,
    MonitoredSession,
    MonitoredTrainingSession,
    Scaffold,
    SingularMonitoredSession,
    WorkerSessionCreator,
)
from .moving_averages import ExponentialMovingAverage  # noqa: F401
from .optimizer import (  # noqa: F401
    AdamOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    Optimizer,
)
from .saver import Saver  # noqa: F401
from .session_run_hook import (  # noqa: F401
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from .summary_hooks import SummarySaverHook  # noqa: F401
from .training_util import (  # noqa: F401
    create_global_step,
    get_global_step,
    get_or_create_global_step,
    global_step,
)

if not TYPE_CHECKING:  # (for type checkers the module has only the names above)
    def __getattr__(name: str) -> Any:
        """A TF1 name not implemented here: an AttributeError that says so."""
        raise _missing(__name__, name)
