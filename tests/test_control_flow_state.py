"""Control flow with state: a gradient through tf.while_loop or tf.cond uses
the values its forward pass computed (the mask a dropout drew, the value an
assign returned) and never runs a body's stateful ops again; tensors inside
a body can be neither fetched nor fed (TF 1.15's ValueErrors)."""

import numpy as np
import pytest
from gradient_check import check_gradients, floats, grad_case

import towerflow as tf
from towerflow.ops.slice_ops import write_step_row

SIZE = 1000     # a dropout mask of this many draws is never all ones by chance


def loop_once(fn, x):
    """``fn(x)`` as the body of a one-iteration tf.while_loop."""
    return tf.while_loop(lambda i, y: i < 1, lambda i, y: (i + 1, fn(y)), [0, x])[1]


def cond_taken(fn, x):
    return tf.cond(tf.placeholder_with_default(True, []), lambda: fn(x), lambda: x)


@pytest.mark.parametrize("wrap", [loop_once, cond_taken], ids=["while_loop", "cond"])
def test_dropout_in_a_body_gets_the_gradient_of_the_mask_it_drew(wrap, op_device):
    """d sum(dropout(x)) / dx is 1 / keep_prob where the forward pass kept an
    element and 0 where it dropped one: the same mask, not a second draw."""
    with tf.device(op_device):
        x = tf.constant(np.ones(SIZE, np.float32))
        y = wrap(lambda v: tf.nn.dropout(v, keep_prob=0.5, seed=1), x)
        grad, = tf.gradients(tf.reduce_sum(y), [x])
    with tf.Session() as sess:
        for _ in range(2):
            kept, slope = sess.run([y, grad])
            assert 0 < np.count_nonzero(kept) < SIZE
            np.testing.assert_array_equal(slope, np.where(kept != 0, 2.0, 0.0))


def counting_body(counter):
    """y <- y * c where c = counter += 1: the body's stateful op feeds its math."""
    def body(i, y):
        count = tf.assign_add(counter, 1.0)
        return i + 1, y * count
    return body


def test_a_loop_gradient_neither_runs_an_assign_again_nor_sees_its_later_value(op_device):
    """Three iterations multiply x by 1, 2, 3: y = 6x, dy/dx = 6, and the
    counter ends at 3 in a run that also computes the gradient."""
    with tf.device(op_device):
        counter = tf.Variable(np.float32(0.0))
        x = tf.constant(np.float32(5.0))
        _, y = tf.while_loop(lambda i, y: i < 3, counting_body(counter), [0, x])
        grad, = tf.gradients(y, [x])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run([y, grad]) == [30.0, 6.0]
        assert sess.run(counter) == 3.0


def test_a_cond_gradient_does_not_run_the_branchs_assign_again(op_device):
    with tf.device(op_device):
        counter = tf.Variable(np.float32(1.0))
        x = tf.constant(np.float32(5.0))
        y = tf.cond(tf.constant(True), lambda: x * tf.assign_add(counter, 1.0), lambda: x)
        grad, = tf.gradients(y, [x])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run([y, grad]) == [10.0, 2.0]
        assert sess.run(counter) == 2.0


def inside_loop():
    """(a tensor made inside a loop body, the loop's result)."""
    inside = []

    def body(v):
        inside.append(v * 2.0)
        return inside[0] + 1.0
    result = tf.while_loop(lambda v: v < 30.0, body, [tf.constant(1.0)])
    return inside[0], result


def test_fetching_a_tensor_inside_a_body_raises_tfs_error():
    inside, _ = inside_loop()
    with tf.Session() as sess, pytest.raises(
            ValueError, match=f"Operation '{inside.op.name}' has been marked as not "
            "fetchable.*inside the body of a tf.while_loop or tf.cond"):
        sess.run(inside)


def test_feeding_a_tensor_inside_a_body_raises_tfs_error():
    """TF 1.15 refuses the feed; it was silently ignored (the loop ran as if
    nothing were fed)."""
    inside, result = inside_loop()
    with tf.Session() as sess, pytest.raises(
            ValueError, match=f"Tensor {inside.name} may not be fed.*inside the body"):
        sess.run(result, {inside: 5.0})


def test_a_loops_output_can_be_fed():
    _, result = inside_loop()
    doubled = result * 2.0
    with tf.Session() as sess:
        assert sess.run(result) == 31.0
        assert sess.run(doubled, {result: 7.0}) == 14.0


def test_write_step_row_never_writes_the_initial_rows(op_device):
    """dynamic_rnn's in-place row writes copy the initial rows at row 0: a
    constant initial value (folded once, reused by every run) stays intact."""
    with tf.device(op_device):
        count = tf.placeholder(tf.int32, [])
        rows = tf.while_loop(lambda t, rows: t < count, lambda t, rows: (
            t + 1, write_step_row(rows, t, tf.fill([2], tf.cast(t, tf.float32) + 5.0))),
            [0, tf.ones([3, 2])])[1]
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(rows, {count: 3}), [[5, 5], [6, 6], [7, 7]])
        np.testing.assert_array_equal(sess.run(rows, {count: 1}), [[5, 5], [1, 1], [1, 1]])
        np.testing.assert_array_equal(sess.run(rows, {count: 0}), np.ones((3, 2)))


def test_a_second_derivative_through_a_cond_raises_a_type_error():
    """Not supported (TF 1.15 has it): a clear error, not a failure deep in a
    kernel at run time."""
    x = tf.constant(2.0)
    grad, = tf.gradients(tf.cond(tf.constant(True), lambda: x * x * x, lambda: x), [x])
    with pytest.raises(TypeError, match="Second-order gradient for tf.cond is not supported"):
        tf.gradients(grad, [x])


def test_concurrent_runs_of_one_loop_and_its_gradient_do_not_mix(op_device):
    """TF allows Session.run from several threads: each run of a loop (and of
    its backward loop) has its own iterations."""
    import threading
    with tf.device(op_device):
        count = tf.placeholder(tf.int32, [])
        x = tf.placeholder(tf.float32, [3])
        _, y = tf.while_loop(lambda i, y: i < count, lambda i, y: (i + 1, tf.sin(y) * 2.0),
                             [0, x])
        grad, = tf.gradients(tf.reduce_sum(y), [x])
    mismatches = []
    with tf.Session() as sess:
        def feed(k):
            return {count: k, x: np.full(3, k / 4, np.float32)}
        expected = {k: sess.run([y, grad], feed(k)) for k in (1, 2, 3, 4)}

        def work(k):
            try:
                for _ in range(50):
                    got = sess.run([y, grad], feed(k))
                    if not all(np.array_equal(a, b) for a, b in zip(got, expected[k])):
                        mismatches.append(k)
            except Exception as err:  # noqa: BLE001  (a thread's error fails the test)
                mismatches.append(f"{k}: {err!r}")
        threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2, 3, 4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not mismatches


def test_full_trace_of_a_plan_with_a_loop_and_its_gradient():
    """RunOptions FULL_TRACE over a While and its WhileGrad: right values, and
    step stats naming both."""
    x = tf.constant(np.ones(3, np.float32))
    _, y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2.0), [0, x])
    grad, = tf.gradients(tf.reduce_sum(y), [x])
    metadata = tf.RunMetadata()
    with tf.Session() as sess:
        values = sess.run([y, grad], options=tf.RunOptions(
            trace_level=tf.RunOptions.FULL_TRACE), run_metadata=metadata)
    np.testing.assert_array_equal(values, [[8.0] * 3] * 2)
    traced = {node.node_name for device in metadata.step_stats.dev_stats
              for node in device.node_stats}
    backward, = [op for op in tf.get_default_graph().get_operations() if op.type == "WhileGrad"]
    assert {y.op.name, backward.name} <= traced     # the loops run as one step each


# Bodies whose kernels return views of the loop variable (Reshape, Transpose,
# ExpandDims/Squeeze, StridedSlice) or forward it (Identity): the saved
# iterations are references, which no later iteration may change.
VIEW_CASES = [
    grad_case("while_reshape_transpose", lambda x: tf.while_loop(
        lambda i, y: i < 3, lambda i, y: (i + 1, tf.transpose(tf.reshape(y, [3, 2])) * 1.5
                                          + tf.sin(y)), [0, x])[1], floats(2, 3)),
    grad_case("while_identity_slices", lambda x, w: tf.while_loop(
        lambda i, y: i < 3, lambda i, y: (i + 1, tf.squeeze(tf.expand_dims(
            tf.identity(y), 0), 0)[::-1] * w + y[:1]), [0, x])[1], floats(4), floats(4)),
]


@pytest.mark.parametrize("case", VIEW_CASES, ids=lambda c: c.name)
def test_loops_over_views_of_their_variables_match_finite_differences(case, op_device, rng):
    check_gradients(case, rng, op_device)
