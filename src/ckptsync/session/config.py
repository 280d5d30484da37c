"""``ConfigProto`` and friends: a session's configuration, as TF1's protocol buffers
(``tf.ConfigProto``, ``tf.GPUOptions``, ``tf.GraphOptions``, ``tf.RunOptions``,
``tf.RunMetadata``), as plain attribute objects.

What is honoured: ``intra_op_parallelism_threads`` caps the BLAS threads numpy's matmuls
use (through ``threadpoolctl``; BLAS pools are per process, so the cap is the process's,
set when a session with that config is created). ``0``, TF's "let the system pick", is
one thread (a cap that only ever lowers the count): OpenBLAS's own default of one thread
per core spins and competes, and on a busy 2-core machine it made a digits-MLP step 27x
and a 784-1024-1024-10 step 2.5x slower than one thread
(``benchmarks/bench_blas_threads.py``; see docs/performance.md). Big matmuls on a
dedicated machine gain from more: ask for them with ``intra_op_parallelism_threads``.
A process already limited (its environment, the CLI's ``--intra-op-threads``) keeps its
choice. The rest (``inter_op_parallelism_threads`` — ops run one at a time —,
device placement, GPU options) is accepted and kept, as a CPU-only TF build does.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..errors import CkptsyncTypeError, CkptsyncValueError

__all__ = ["ConfigProto", "GPUOptions", "GraphOptions", "OptimizerOptions", "RunOptions",
           "RunMetadata", "apply_config"]

DEFAULT_BLAS_THREADS_CAP = 1


class _Message:
    """A protocol-buffer-like record: known fields as attributes with defaults, an
    unknown field is a ``ValueError`` naming it (as a proto constructor)."""

    _FIELDS: dict[str, Any] = {}

    def __init__(self, **fields: Any):
        for name, default in self._FIELDS.items():
            value = default() if callable(default) else default
            setattr(self, name, fields.pop(name, value))
        if fields:
            raise CkptsyncValueError(
                f"{type(self).__name__} has no field {sorted(fields)[0]!r}; known fields: "
                f"{', '.join(sorted(self._FIELDS))}.")

    def __repr__(self) -> str:
        set_fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._FIELDS
                               if getattr(self, k) != _default_of(self._FIELDS[k]))
        return f"{type(self).__name__}({set_fields})"


def _default_of(default: Any) -> Any:
    return default() if callable(default) else default


class GPUOptions(_Message):
    """As ``tf.GPUOptions`` (accepted; there is no GPU here)."""

    _FIELDS = {"allow_growth": False, "per_process_gpu_memory_fraction": 0.0,
               "visible_device_list": "", "force_gpu_compatible": False}


class OptimizerOptions(_Message):
    """As ``tf.OptimizerOptions`` (accepted)."""

    _FIELDS = {"do_common_subexpression_elimination": False, "do_constant_folding": False,
               "do_function_inlining": False, "opt_level": 0, "global_jit_level": 0}


class GraphOptions(_Message):
    """As ``tf.GraphOptions`` (accepted)."""

    _FIELDS = {"optimizer_options": OptimizerOptions, "build_cost_model": 0,
               "infer_shapes": False, "place_pruned_graph": False,
               "enable_bfloat16_sendrecv": False}


class ConfigProto(_Message):
    """A session's configuration, as ``tf.ConfigProto``.

    Fields (TF1's names and defaults): ``intra_op_parallelism_threads`` (int >= 0: the
    BLAS threads, see the module docstring), ``inter_op_parallelism_threads`` (accepted:
    ops run one at a time), ``allow_soft_placement``, ``log_device_placement``,
    ``device_count`` (dict), ``gpu_options`` (:class:`GPUOptions`), ``graph_options``,
    ``operation_timeout_in_ms``, ``use_per_session_threads``, ``device_filters``.

    Raises:
        ValueError: an unknown field (named), or a negative thread count.
    """

    _FIELDS = {"intra_op_parallelism_threads": 0, "inter_op_parallelism_threads": 0,
               "allow_soft_placement": False, "log_device_placement": False,
               "device_count": dict, "gpu_options": GPUOptions, "graph_options": GraphOptions,
               "operation_timeout_in_ms": 0, "use_per_session_threads": False,
               "device_filters": list, "isolate_session_state": False}

    def __init__(self, **fields: Any):
        super().__init__(**fields)
        for name in ("intra_op_parallelism_threads", "inter_op_parallelism_threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise CkptsyncValueError(f"ConfigProto.{name} must be an int >= 0, got {value!r}.")


class RunOptions(_Message):
    """As ``tf.RunOptions`` (accepted by ``Session.run``; nothing is traced)."""

    NO_TRACE, SOFTWARE_TRACE, HARDWARE_TRACE, FULL_TRACE = 0, 1, 2, 3
    _FIELDS = {"trace_level": 0, "timeout_in_ms": 0, "output_partition_graphs": False,
               "report_tensor_allocations_upon_oom": False}


class RunMetadata(_Message):
    """As ``tf.RunMetadata`` (left empty by ``Session.run``)."""

    _FIELDS = {"step_stats": None, "cost_graph": None, "partition_graphs": list}


_lock = threading.Lock()
_default_applied = False


def apply_config(config: Any) -> None:
    """Applies ``config``'s BLAS thread cap to this process (see the module docstring).

    An explicit ``intra_op_parallelism_threads = n`` sets the BLAS pools to ``n`` threads.
    ``None`` or ``0`` applies the default cap once per process, and only ever lowers the
    count: a process already limited (by the environment, the CLI's
    ``--intra-op-threads``, or the program itself) keeps its setting. Thread-safe.

    Raises:
        TypeError: ``config`` is not a ``ConfigProto`` (or ``None``).
    """
    global _default_applied
    if config is not None and not isinstance(config, ConfigProto):
        raise CkptsyncTypeError(
            f"Session config must be a ConfigProto, got {type(config).__name__}.")
    n = int(getattr(config, "intra_op_parallelism_threads", 0))
    if n == 0 and _default_applied:
        return
    from threadpoolctl import threadpool_info, threadpool_limits  # only a session needs it

    with _lock:
        if n == 0:
            if _default_applied:
                return
            _default_applied = True
            cap = min(DEFAULT_BLAS_THREADS_CAP, os.cpu_count() or 1)
            current = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
            if not current or max(current) <= cap:
                return
            n = cap
        _default_applied = True  # an explicit count is the process's choice from now on
        threadpool_limits(n, user_api="blas")
