"""Random tf.data pipelines (range, skip, take, repeat, filter, batch) against a plain
Python reference, and a saved position restored at a random point giving the rest."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptsync as tf

PIPELINES = st.fixed_dictionaries({
    "n": st.integers(0, 12), "skip": st.integers(-1, 5), "take": st.integers(-1, 15),
    "repeat": st.integers(0, 3), "mod": st.integers(1, 3), "batch": st.integers(1, 5),
    "drop": st.booleans(), "cut": st.integers(0, 20),
})


def _reference(p):
    xs = list(range(p["n"]))
    xs = [] if p["skip"] < 0 else xs[p["skip"]:]
    xs = xs if p["take"] < 0 else xs[:p["take"]]
    xs = [x for x in xs * p["repeat"] if x % p["mod"] == 0]
    b = p["batch"]
    out = [xs[i:i + b] for i in range(0, len(xs), b)]
    return [o for o in out if len(o) == b] if p["drop"] else out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PIPELINES)
def test_random_pipeline_matches_python_and_resumes_from_a_saved_position(p):
    with tf.Graph().as_default():
        ds = (tf.data.Dataset.range(p["n"]).skip(p["skip"]).take(p["take"]).repeat(p["repeat"])
              .filter(lambda x: tf.equal(x % p["mod"], 0)).batch(p["batch"], p["drop"]))
        it = tf.data.make_one_shot_iterator(ds)
        nxt = it.get_next()
        saveable = tf.data.experimental.make_saveable_from_iterator(it)
        want = _reference(p)
        cut = min(p["cut"], len(want))
        with tf.Session() as sess:
            got = [sess.run(nxt).tolist() for _ in range(cut)]
            state = saveable.save_value(sess)
            rest = []
            try:
                while True:
                    rest.append(sess.run(nxt).tolist())
            except tf.errors.OutOfRangeError:
                pass
            assert got + rest == want
        with tf.Session() as sess:  # a new session: the position comes from the state
            saveable.restore_value(sess, state)
            again = []
            try:
                while True:
                    again.append(sess.run(nxt).tolist())
            except tf.errors.OutOfRangeError:
                pass
            assert again == rest
