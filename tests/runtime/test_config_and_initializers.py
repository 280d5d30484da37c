"""``ConfigProto`` (the BLAS thread cap), the variance-scaling and orthogonal initializers
(ours and ``tf.contrib.layers``'), as TF1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ckptsync as cs


def _blas_threads_after(code: str) -> dict:
    """Runs ``code`` in a fresh interpreter (BLAS pools are per process) and returns what
    it printed as JSON."""
    prog = textwrap.dedent('''
        import json, os
        from threadpoolctl import threadpool_info
        import ckptsync as cs
        def blas():
            return max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
    ''') + textwrap.dedent(code)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120,
                       env={**env, "OPENBLAS_NUM_THREADS": "8"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_intra_op_threads_set_the_blas_pool_and_the_default_only_lowers_it():
    got = _blas_threads_after('''
        start = blas()
        cs.session.config.DEFAULT_BLAS_THREADS_CAP = 1    # this VM has only 2 cores
        cs.Session(graph=cs.Graph())                      # default: at most the cap
        default = blas()
        cs.Session(graph=cs.Graph(), config=cs.ConfigProto(intra_op_parallelism_threads=1))
        one = blas()
        cs.Session(graph=cs.Graph())                      # the explicit choice stays
        after = blas()
        cs.Session(graph=cs.Graph(), config=cs.ConfigProto(intra_op_parallelism_threads=3))
        print(json.dumps([start, default, one, after, blas()]))
    ''')
    start, default, one, after, three = got
    assert start >= 2, "OpenBLAS started with one thread: nothing to lower"
    assert default == 1
    assert (one, after, three) == (1, 1, 3)


def test_a_process_already_limited_keeps_its_thread_count():
    got = _blas_threads_after('''
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
        cs.session.config.DEFAULT_BLAS_THREADS_CAP = 2
        cs.Session(graph=cs.Graph())                      # never raised to the cap
        print(json.dumps(blas()))
    ''')
    assert got == 1


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="no field 'intra_op_threads'.*intra_op_parallelism"):
        cs.ConfigProto(intra_op_threads=2)
    with pytest.raises(ValueError, match="intra_op_parallelism_threads must be an int >= 0"):
        cs.ConfigProto(intra_op_parallelism_threads=-1)
    with pytest.raises(TypeError, match="must be a ConfigProto, got dict"):
        cs.Session(graph=cs.Graph(), config={"intra_op_parallelism_threads": 1})
    c = cs.ConfigProto(log_device_placement=True)
    c.gpu_options.allow_growth = True
    assert "log_device_placement=True" in repr(c) and c.inter_op_parallelism_threads == 0


def _sample(init, shape, seed=0):
    g = cs.Graph()
    with g.as_default():
        cs.set_random_seed(seed)
        v = cs.get_variable("w", shape, initializer=init)
        with cs.Session() as sess:
            sess.run(cs.global_variables_initializer())
            return sess.run(v)


@pytest.mark.parametrize("mode,n", [("fan_in", 400), ("fan_out", 300), ("fan_avg", 350)])
def test_variance_scaling_matches_tf1s_formulas(mode, n):
    shape = [400, 300]
    uni = _sample(cs.variance_scaling_initializer(2.0, mode, "uniform"), shape)
    limit = np.sqrt(3.0 * 2.0 / n)
    assert uni.max() <= limit and uni.min() >= -limit and uni.max() > 0.98 * limit
    normal = _sample(cs.variance_scaling_initializer(2.0, mode, "untruncated_normal"), shape)
    assert abs(normal.std() - np.sqrt(2.0 / n)) < 0.02 * np.sqrt(2.0 / n)
    trunc = _sample(cs.variance_scaling_initializer(2.0, mode), shape)
    # truncated at 2 stddev, rescaled so the variance is the target's
    assert abs(trunc.std() - np.sqrt(2.0 / n)) < 0.03 * np.sqrt(2.0 / n)
    assert np.abs(trunc).max() <= 2.0 * np.sqrt(2.0 / n) / 0.87962566103423978 + 1e-6


def test_he_and_lecun_are_variance_scaling():
    he = _sample(cs.initializers.he_uniform(), [500, 100])
    assert abs(he.max() - np.sqrt(6.0 / 500)) < 0.01 * np.sqrt(6.0 / 500)
    lecun = _sample(cs.initializers.lecun_normal(), [500, 100])
    assert abs(lecun.std() - np.sqrt(1.0 / 500)) < 0.03 * np.sqrt(1.0 / 500)


def test_contrib_xavier_and_variance_scaling_use_contribs_fans():
    x = _sample(cs.contrib.layers.xavier_initializer(), [3, 3, 16, 32])
    n = (3 * 3 * 16 + 3 * 3 * 32) / 2.0
    assert abs(x.max() - np.sqrt(3.0 / n)) < 0.01 * np.sqrt(3.0 / n) and x.min() >= -np.sqrt(3.0 / n)
    h = _sample(cs.contrib.layers.variance_scaling_initializer(), [600, 200])
    assert abs(h.std() - np.sqrt(1.3 * 2.0 / 600) * 0.87962566103423978) < 0.03 * h.std()
    with pytest.raises(ValueError, match="Unknown mode FAN_SIDE"):
        cs.contrib.layers.variance_scaling_initializer(mode="FAN_SIDE")
    with pytest.raises(TypeError, match="non-floating"):
        cs.contrib.layers.xavier_initializer(dtype=cs.int32)


def test_orthogonal_is_seeded_and_orthogonal_for_wide_and_tall_shapes():
    for shape in ([8, 5], [5, 8], [2, 2, 3, 6]):
        w = _sample(cs.orthogonal_initializer(gain=1.5, seed=7), shape).reshape(-1, shape[-1])
        gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
        np.testing.assert_allclose(gram, 2.25 * np.eye(min(w.shape)), atol=1e-5)
    a = _sample(cs.orthogonal_initializer(seed=7), [6, 4], seed=1)
    b = _sample(cs.orthogonal_initializer(seed=7), [6, 4], seed=1)
    np.testing.assert_array_equal(a, b)


def test_get_collection_ref_is_the_collection_and_get_collection_a_copy():
    g = cs.Graph()
    with g.as_default():
        ref = cs.get_collection_ref("mine")
        ref.append(1)
        copy = cs.get_collection("mine")
        copy.append(2)
        cs.add_to_collection("mine", 3)
        assert cs.get_collection("mine") == [1, 3] and ref == [1, 3]
