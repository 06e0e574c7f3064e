"""Sparse updates as TensorFlow 1.15 has them: IndexedSlices gradients of
tf.gather / embedding_lookup, the optimizers' sparse updates (against float64
NumPy references of TF's kernels), scatter ops on variables, FTRL,
SparseTensor ops, candidate samplers and the sampled losses."""

import warnings

import numpy as np
import pytest
from conftest import split_cpu
from gradient_check import check_gradients, grad_case
from gradient_check import floats as floats64

import towerflow as tf

# -- IndexedSlices gradients ------------------------------------------------------------


def _table(rows=5, cols=3, seed=0):
    values = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return values, tf.Variable(values)


def test_gather_gradient_is_indexed_slices_of_the_gathered_rows():
    _, table = _table()
    weights = np.arange(12, dtype=np.float32).reshape(4, 3)
    ids = [3, 0, 3, 1]
    loss = tf.reduce_sum(tf.gather(table, ids) * weights)
    grad = tf.gradients(loss, table)[0]
    assert isinstance(grad, tf.IndexedSlices)
    assert grad.dtype == tf.float32 and grad.shape.as_list() == [5, 3]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        fetched = sess.run(grad)
        dense = sess.run(tf.convert_to_tensor(grad))
    assert isinstance(fetched, tf.IndexedSlicesValue)
    np.testing.assert_array_equal(fetched.values, weights)
    np.testing.assert_array_equal(fetched.indices, ids)
    np.testing.assert_array_equal(fetched.dense_shape, [5, 3])
    expected = np.zeros((5, 3), np.float32)
    np.add.at(expected, ids, weights)
    np.testing.assert_array_equal(dense, expected)


def test_embedding_lookup_gradient_is_indexed_slices_with_flattened_ids():
    _, table = _table()
    ids = np.array([[1, 2], [2, 4]])
    loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids) ** 2)
    grad = tf.gradients(loss, table)[0]
    assert isinstance(grad, tf.IndexedSlices)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        table_value, fetched = sess.run([table, grad])
    np.testing.assert_array_equal(fetched.indices, ids.reshape(-1))
    np.testing.assert_allclose(fetched.values, 2 * table_value[ids.reshape(-1)], rtol=1e-6)


def test_gradients_of_two_gathers_are_concatenated_as_tf_aggregates_them():
    _, table = _table()
    loss = tf.reduce_sum(tf.gather(table, [0, 2])) + 3.0 * tf.reduce_sum(tf.gather(table, [2]))
    grad = tf.gradients(loss, table)[0]
    assert isinstance(grad, tf.IndexedSlices)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        fetched = sess.run(grad)
    assert sorted(fetched.indices.tolist()) == [0, 2, 2]
    expected = np.zeros((5, 3))
    np.add.at(expected, fetched.indices, fetched.values)
    np.testing.assert_array_equal(expected[[0, 2]], [[1, 1, 1], [4, 4, 4]])


def test_gather_and_a_dense_use_sum_to_a_dense_gradient():
    _, table = _table()
    loss = tf.reduce_sum(tf.gather(table, [1])) + tf.reduce_sum(table * 2.0)
    grad = tf.gradients(loss, table)[0]
    assert isinstance(grad, tf.Tensor)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        expected = np.full((5, 3), 2.0)
        expected[1] += 1
        np.testing.assert_array_equal(sess.run(grad), expected)


def test_gradient_through_identity_stays_sparse_and_other_axes_are_dense():
    _, table = _table()
    through_identity = tf.gradients(tf.reduce_sum(tf.gather(tf.identity(table), [1])), table)
    along_axis_1 = tf.gradients(tf.reduce_sum(tf.gather(table, [1], axis=1)), table)
    assert isinstance(through_identity[0], tf.IndexedSlices)
    assert isinstance(along_axis_1[0], tf.Tensor)


def test_conversion_warns_only_for_an_unknown_dense_shape():
    known = tf.IndexedSlices(tf.ones([2, 3]), [0, 1], [4, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tf.convert_to_tensor(known)
    params = tf.placeholder(tf.float32, [None, 3])
    grad = tf.gradients(tf.reduce_sum(tf.gather(params, [0, 0])), params)[0]
    assert isinstance(grad, tf.IndexedSlices)
    with pytest.warns(UserWarning, match="Converting sparse IndexedSlices to a dense Tensor "
                                         "of unknown shape"):
        dense = tf.convert_to_tensor(grad)
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(dense, {params: np.zeros((3, 3))}),
                                      [[2, 2, 2], [0, 0, 0], [0, 0, 0]])


def test_indexed_slices_conversion_errors_are_tfs():
    slices = tf.IndexedSlices(tf.ones([1, 2]), [0])
    with pytest.raises(ValueError, match="without dense_shape"):
        tf.convert_to_tensor(slices)
    with pytest.raises(ValueError, match="requested dtype float64 for IndexedSlices with "
                                         "dtype float32"):
        tf.convert_to_tensor(tf.IndexedSlices(tf.ones([1, 2]), [0], [3, 2]), tf.float64)
    bad = tf.convert_to_tensor(tf.IndexedSlices(tf.ones([1, 2]), [5], [3, 2]))
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match=r"segment_ids\[0\] = 5 is out of range "
                                                   r"\[0, 3\)"):
        sess.run(bad)


def test_add_n_of_indexed_slices_is_their_dense_sum():
    first = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), [2], [3, 2])
    second = tf.IndexedSlices(tf.constant([[10.0, 20.0], [5.0, 5.0]]), [2, 0], [3, 2])
    total = tf.add_n([first, second])
    assert isinstance(total, tf.Tensor)
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(total), [[5, 5], [0, 0], [11, 22]])


def test_clipping_takes_indexed_slices_through_their_values():
    rows = np.array([[3.0, 4.0], [0.0, 12.0]], np.float32)
    slices = tf.IndexedSlices(tf.constant(rows), [1, 1], [4, 2])
    dense = tf.constant([[5.0, 0.0]])
    clipped, norm = tf.clip_by_global_norm([slices, None, dense], 6.5)
    by_norm = tf.clip_by_norm(slices, 2.6)
    assert isinstance(clipped[0], tf.IndexedSlices) and clipped[1] is None
    assert isinstance(by_norm, tf.IndexedSlices)
    # TF takes the norm of the values as they are: the repeated row 1 counts twice
    expected_norm = np.sqrt(np.sum(rows.astype(np.float64) ** 2) + 25.0)
    with tf.Session() as sess:
        norm_value, clipped_values, dense_value, by_norm_value = sess.run(
            [norm, clipped[0].values, clipped[2], by_norm.values])
        global_value = sess.run(tf.global_norm([slices, dense]))
    np.testing.assert_allclose(norm_value, expected_norm, rtol=1e-6)
    np.testing.assert_allclose(global_value, expected_norm, rtol=1e-6)
    np.testing.assert_allclose(clipped_values, rows * 6.5 / expected_norm, rtol=1e-6)
    np.testing.assert_allclose(dense_value, [[5.0 * 6.5 / expected_norm, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(by_norm_value, rows * 2.6 / 13.0, rtol=1e-6)


# -- optimizers: sparse updates against float64 NumPy references of TF's kernels --------

IDS = [[4, 1, 4], [0, 0, 2], [5, 1, 5]]     # per step; rows 3 and 6 never named
ROWS, COLS = 7, 3


def _deduplicated(ids, grad):
    unique = np.unique(ids)
    summed = np.zeros((unique.size, grad.shape[1]))
    for index, row in zip(ids, grad):
        summed[np.searchsorted(unique, index)] += row
    return unique, summed


def _reference_momentum(lr, momentum, nesterov=False):
    def update(state, unique, grad, step):
        var, accum = state["var"], state["accum"]
        accum[unique] = accum[unique] * momentum + grad
        if nesterov:
            var[unique] -= grad * lr + accum[unique] * momentum * lr
        else:
            var[unique] -= lr * accum[unique]
    return {"accum": 0.0}, update


def _reference_adagrad(lr, initial):
    def update(state, unique, grad, step):
        state["accum"][unique] += grad * grad
        state["var"][unique] -= lr * grad / np.sqrt(state["accum"][unique])
    return {"accum": initial}, update


def _reference_rms_prop(lr, decay, momentum, epsilon, centered):
    def update(state, unique, grad, step):
        ms, mom = state["ms"], state["mom"]
        ms[unique] = ms[unique] * decay + grad * grad * (1 - decay)
        denominator = ms[unique] + epsilon
        if centered:
            state["mg"][unique] = state["mg"][unique] * decay + grad * (1 - decay)
            denominator = denominator - state["mg"][unique] ** 2
        mom[unique] = mom[unique] * momentum + lr * grad / np.sqrt(denominator)
        state["var"][unique] -= mom[unique]
    return {"ms": 1.0, "mom": 0.0, "mg": 0.0}, update


def _reference_adadelta(lr, rho, epsilon):
    def update(state, unique, grad, step):
        accum, accum_update = state["accum"], state["accum_update"]
        accum[unique] = accum[unique] * rho + grad * grad * (1 - rho)
        delta = np.sqrt(accum_update[unique] + epsilon) / np.sqrt(accum[unique] + epsilon) * grad
        state["var"][unique] -= delta * lr
        accum_update[unique] = accum_update[unique] * rho + delta * delta * (1 - rho)
    return {"accum": 0.0, "accum_update": 0.0}, update


def _reference_adam(lr, beta1, beta2, epsilon):
    """TF 1.15's AdamOptimizer._apply_sparse: all of m, v and var change."""
    def update(state, unique, grad, step):
        m, v = state["m"], state["v"]
        alpha = lr * np.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
        m *= beta1
        m[unique] += grad * (1 - beta1)
        v *= beta2
        v[unique] += grad * grad * (1 - beta2)
        state["var"] -= alpha * m / (np.sqrt(v) + epsilon)
    return {"m": 0.0, "v": 0.0}, update


def ftrl_reference(var, accum, linear, grad, lr, l1, l2, shrinkage, power):
    """TF 1.15's ApplyFtrlV2 (ApplyFtrl when shrinkage is 0) in float64, in place."""
    shrunk = grad + 2 * shrinkage * var
    new_accum = accum + grad * grad
    linear += shrunk - (new_accum ** -power - accum ** -power) / lr * var
    quadratic = new_accum ** -power / lr + 2 * l2
    var[...] = np.where(np.abs(linear) > l1, (np.sign(linear) * l1 - linear) / quadratic, 0.0)
    accum[...] = new_accum


def _reference_ftrl(lr, initial, l1, l2, shrinkage, power):
    def update(state, unique, grad, step):
        rows = [state[key][unique] for key in ("var", "accum", "linear")]
        ftrl_reference(*rows, grad, lr, l1, l2, shrinkage, power)
        for key, row in zip(("var", "accum", "linear"), rows):
            state[key][unique] = row
    return {"accum": initial, "linear": 0.0}, update


SPARSE_OPTIMIZERS = {
    "momentum": (lambda: tf.train.MomentumOptimizer(0.1, 0.9), "SparseApplyMomentum",
                 lambda: _reference_momentum(0.1, 0.9)),
    "nesterov": (lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                 "SparseApplyMomentum", lambda: _reference_momentum(0.1, 0.9, True)),
    "adagrad": (lambda: tf.train.AdagradOptimizer(0.2, initial_accumulator_value=0.3),
                "SparseApplyAdagrad", lambda: _reference_adagrad(0.2, 0.3)),
    "rms_prop": (lambda: tf.train.RMSPropOptimizer(0.01, decay=0.8, momentum=0.5,
                                                   epsilon=1e-3),
                 "SparseApplyRMSProp", lambda: _reference_rms_prop(0.01, 0.8, 0.5, 1e-3, False)),
    "centered_rms_prop": (lambda: tf.train.RMSPropOptimizer(0.01, decay=0.8, momentum=0.5,
                                                            epsilon=1e-3, centered=True),
                          "SparseApplyCenteredRMSProp",
                          lambda: _reference_rms_prop(0.01, 0.8, 0.5, 1e-3, True)),
    "adadelta": (lambda: tf.train.AdadeltaOptimizer(1.0, rho=0.9, epsilon=1e-4),
                 "SparseApplyAdadelta", lambda: _reference_adadelta(1.0, 0.9, 1e-4)),
    "adam": (lambda: tf.train.AdamOptimizer(0.05, 0.8, 0.9, 1e-6), "SparseApplyAdam",
             lambda: _reference_adam(0.05, 0.8, 0.9, 1e-6)),
    "ftrl": (lambda: tf.train.FtrlOptimizer(0.3, initial_accumulator_value=0.2,
                                            l1_regularization_strength=0.05,
                                            l2_regularization_strength=0.1),
             "SparseApplyFtrl", lambda: _reference_ftrl(0.3, 0.2, 0.05, 0.1, 0.0, -0.5)),
    "ftrl_shrinkage_power": (
        lambda: tf.train.FtrlOptimizer(0.3, learning_rate_power=-0.7,
                                       initial_accumulator_value=0.5,
                                       l1_regularization_strength=0.01,
                                       l2_shrinkage_regularization_strength=0.2),
        "SparseApplyFtrl", lambda: _reference_ftrl(0.3, 0.5, 0.01, 0.0, 0.2, -0.7)),
}


def _run_sparse_steps(make_optimizer, grads):
    """Three steps of ``make_optimizer()`` on a table read only through gather,
    the gather's gradient being ``grads[step]``; returns (initial, final, op types)."""
    initial = np.random.default_rng(1).standard_normal((ROWS, COLS)).astype(np.float32)
    table = tf.Variable(initial)
    ids = tf.placeholder(tf.int32, [3])
    weights = tf.placeholder(tf.float32, [3, COLS])
    loss = tf.reduce_sum(tf.gather(table, ids) * weights)
    train = make_optimizer().minimize(loss)
    op_types = {op.type for op in tf.get_default_graph().get_operations()}
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step_ids, grad in zip(IDS, grads):
            sess.run(train, {ids: step_ids, weights: grad})
        return initial, sess.run(table), op_types


@pytest.mark.parametrize("name", sorted(SPARSE_OPTIMIZERS))
def test_sparse_update_matches_tfs_kernel_in_float64(name):
    make_optimizer, sparse_op, make_reference = SPARSE_OPTIMIZERS[name]
    grads = [np.random.default_rng(10 + step).standard_normal((3, COLS)).astype(np.float32)
             for step in range(3)]
    initial, final, op_types = _run_sparse_steps(make_optimizer, grads)
    assert sparse_op in op_types
    slots, update = make_reference()
    state = {"var": initial.astype(np.float64)}
    state.update({key: np.full((ROWS, COLS), value) for key, value in slots.items()})
    for step, (step_ids, grad) in enumerate(zip(IDS, grads), start=1):
        update(state, *_deduplicated(step_ids, grad.astype(np.float64)), step)
    np.testing.assert_allclose(final, state["var"], rtol=2e-5, atol=2e-6)
    # TF leaves the rows no index names as they are (Adam's too: m stays 0 there)
    np.testing.assert_array_equal(final[[3, 6]], initial[[3, 6]])


def test_sparse_adam_moves_rows_named_on_earlier_steps_only():
    """TF 1.15's sparse Adam decays m and v everywhere and moves every row with
    a nonzero m: row 4, named on step 1 only, moves on steps 2 and 3 too (a
    'lazy' Adam would leave it after step 1)."""
    grads = [np.ones((3, COLS), np.float32)] * 3
    initial, final, op_types = _run_sparse_steps(lambda: tf.train.AdamOptimizer(0.1), grads)
    assert "SparseApplyAdam" in op_types and "ApplyAdam" not in op_types
    _, first_step_only, _ = _run_sparse_steps(lambda: tf.train.AdamOptimizer(0.1), grads[:1])
    moved_once = initial[4] - first_step_only[4]
    np.testing.assert_allclose(moved_once, 0.1 * 2 / (2 + 1e-8 / np.sqrt(1e-3)), rtol=1e-5)
    assert np.all(initial[4] - final[4] > 1.5 * moved_once)


def test_gradient_descent_scatter_subtracts_each_repeated_row():
    grads = [np.random.default_rng(step).standard_normal((3, COLS)).astype(np.float32)
             for step in range(3)]
    initial, final, op_types = _run_sparse_steps(
        lambda: tf.train.GradientDescentOptimizer(0.5), grads)
    assert "ScatterSub" in op_types and "ApplyGradientDescent" not in op_types
    expected = initial.astype(np.float64)
    for step_ids, grad in zip(IDS, grads):
        for index, row in zip(step_ids, grad):
            expected[index] -= 0.5 * row
    np.testing.assert_allclose(final, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(final[[3, 6]], initial[[3, 6]])


def test_sparse_and_dense_gradient_descent_agree():
    """A repeated index subtracts each row in turn: the same as the dense sum."""
    grads = [np.ones((3, COLS), np.float32)] * 3
    _, sparse_final, sparse_ops = _run_sparse_steps(
        lambda: tf.train.GradientDescentOptimizer(0.5), grads)
    assert "ScatterSub" in sparse_ops
    tf.reset_default_graph()
    _, dense_final, op_types = _run_sparse_steps(
        lambda: tf.train.GradientDescentOptimizer(0.5, weight_decay=1e-9), grads)
    assert "ApplyGradientDescent" in op_types       # weight decay takes the dense path
    np.testing.assert_allclose(sparse_final, dense_final, rtol=1e-6)


def test_sparse_update_rejects_an_index_past_the_variable():
    table = tf.Variable(tf.zeros([3, 2]))
    grad = tf.IndexedSlices(tf.ones([2, 2]), tf.constant([1, 3]), [3, 2])
    train = tf.train.AdagradOptimizer(0.1).apply_gradients([(grad, table)])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="Index 3 at offset 1 in indices is out of range"):
            sess.run(train)


# -- FTRL --------------------------------------------------------------------------------

FTRL_SETTINGS = [
    {"learning_rate": 0.5},
    {"learning_rate": 0.2, "l1_regularization_strength": 1.5,
     "l2_regularization_strength": 0.1},
    {"learning_rate": 0.2, "learning_rate_power": -0.3, "initial_accumulator_value": 1.0,
     "l1_regularization_strength": 0.05, "l2_shrinkage_regularization_strength": 0.4},
    {"learning_rate": 0.1, "learning_rate_power": 0.0, "l2_regularization_strength": 0.5},
]


@pytest.mark.parametrize("settings", FTRL_SETTINGS, ids=str)
def test_dense_ftrl_matches_tfs_formula_in_float64(settings):
    rng = np.random.default_rng(3)
    initial = rng.standard_normal((4, 3)).astype(np.float32)
    grads = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(4)]
    var = tf.Variable(initial)
    grad = tf.placeholder(tf.float32, [4, 3])
    optimizer = tf.train.FtrlOptimizer(**settings)
    train = optimizer.apply_gradients([(grad, var)])
    assert [slot.op.name for slot in optimizer.variables()] == ["Variable/Ftrl",
                                                                "Variable/Ftrl_1"]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for value in grads:
            sess.run(train, {grad: value})
        final = sess.run(var)
    reference = {"var": initial.astype(np.float64),
                 "accum": np.full((4, 3), settings.get("initial_accumulator_value", 0.1)),
                 "linear": np.zeros((4, 3))}
    for value in grads:
        ftrl_reference(reference["var"], reference["accum"], reference["linear"],
                       value.astype(np.float64), settings["learning_rate"],
                       settings.get("l1_regularization_strength", 0.0),
                       settings.get("l2_regularization_strength", 0.0),
                       settings.get("l2_shrinkage_regularization_strength", 0.0),
                       settings.get("learning_rate_power", -0.5))
    np.testing.assert_allclose(final, reference["var"], rtol=2e-5, atol=1e-6)
    if settings.get("l1_regularization_strength", 0) > 0.1:
        assert (final == 0).any()       # L1 makes weights exactly zero


@pytest.mark.parametrize("kwargs, message", [
    ({"initial_accumulator_value": -1.0},
     "initial_accumulator_value -1.000000 needs to be positive or zero"),
    ({"learning_rate_power": 0.5}, "learning_rate_power 0.500000 needs to be negative or zero"),
    ({"l1_regularization_strength": -0.1}, "l1_regularization_strength -0.100000 needs"),
    ({"l2_shrinkage_regularization_strength": -2.0}, "l2_shrinkage_regularization_strength"),
])
def test_ftrl_rejects_bad_arguments_with_tfs_words(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tf.train.FtrlOptimizer(0.1, **kwargs)


# -- scatter ops on variables -------------------------------------------------------------

def _numpy_scatter(how, var, indices, updates):
    out = var.astype(np.float64)
    for index, row in zip(np.reshape(indices, -1), np.reshape(updates, (-1,) + var.shape[1:])):
        out[index] = how(out[index], row)
    return out


ROW_SCATTERS = {
    "scatter_update": lambda old, new: new, "scatter_add": np.add,
    "scatter_sub": np.subtract, "scatter_mul": np.multiply, "scatter_div": np.divide,
    "scatter_max": np.maximum, "scatter_min": np.minimum,
}


@pytest.mark.parametrize("name", sorted(ROW_SCATTERS))
def test_row_scatter_updates_the_variable_and_returns_it(name):
    rng = np.random.default_rng(4)
    initial = rng.uniform(1, 2, (5, 2)).astype(np.float32)
    indices = np.array([[3, 0], [3, 1]]) if name != "scatter_update" else np.array([[3, 0]])
    updates = rng.uniform(1, 2, indices.shape + (2,)).astype(np.float32)
    var = tf.Variable(initial)
    updated = getattr(tf, name)(var, indices, updates)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        returned = sess.run(updated)
        stored = sess.run(var)
    expected = _numpy_scatter(ROW_SCATTERS[name], initial, indices, updates)
    np.testing.assert_allclose(returned, expected, rtol=1e-6)
    np.testing.assert_array_equal(stored, returned)


def test_scatter_takes_a_scalar_update_and_int_variables():
    var = tf.Variable([[7, -7], [9, 4]])
    halved = tf.scatter_div(var, [0], 2)
    added = tf.scatter_add(tf.Variable([1.0, 2.0, 3.0]), [2, 2], 0.5)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(halved), [[3, -3], [9, 4]])  # C++ truncation
        np.testing.assert_array_equal(sess.run(added), [1.0, 2.0, 4.0])


def test_scatter_errors_are_tfs():
    var = tf.Variable(tf.zeros([4, 2]))
    with pytest.raises(ValueError, match=r"Must have updates.shape = indices.shape \+ "
                                         r"params.shape\[1:\] or updates.shape = \[\]"):
        tf.scatter_add(var, [0, 1], tf.ones([3, 2]))
    with pytest.raises(TypeError, match="updates a tf.Variable"):
        tf.scatter_update(tf.zeros([2]), [0], [1.0])
    out_of_range = tf.scatter_sub(var, [[1, 7]], tf.ones([1, 2, 2]))
    with tf.Session() as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="uninitialized"):
            sess.run(out_of_range)
        sess.run(tf.global_variables_initializer())
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"indices\[0,1\] = 7 is not in \[0, 4\)"):
            sess.run(out_of_range)
        np.testing.assert_array_equal(sess.run(var), np.zeros((4, 2)))


def test_scatter_nd_ops_match_numpy():
    initial = np.arange(12, dtype=np.float32).reshape(3, 4)
    indices = np.array([[0, 1], [2, 3], [0, 1]])
    updates = np.array([10.0, 20.0, 30.0], np.float32)
    results = {}
    for name in ("scatter_nd_update", "scatter_nd_add", "scatter_nd_sub"):
        var = tf.Variable(initial)
        results[name] = getattr(tf, name)(var, indices if name != "scatter_nd_update"
                                          else indices[:2], updates if name !=
                                          "scatter_nd_update" else updates[:2])
    rows = tf.scatter_nd_add(tf.Variable(initial), [[2]], [[1.0, 1.0, 1.0, 1.0]])
    bad = tf.scatter_nd_add(tf.Variable(initial), [[3, 0]], [1.0])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        values = sess.run(results)
        np.testing.assert_array_equal(sess.run(rows)[2], initial[2] + 1)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"indices\[0\] = \[3, 0\] does not index into shape \[3,4\]"):
            sess.run(bad)
    expected_update, expected_add = initial.copy(), initial.copy()
    expected_update[0, 1], expected_update[2, 3] = 10, 20
    expected_add[0, 1] += 40
    expected_add[2, 3] += 20
    np.testing.assert_array_equal(values["scatter_nd_update"], expected_update)
    np.testing.assert_array_equal(values["scatter_nd_add"], expected_add)
    np.testing.assert_array_equal(values["scatter_nd_sub"], 2 * initial - expected_add)


# -- SparseTensor -------------------------------------------------------------------------


def test_sparse_tensor_to_dense_fetch_and_feed():
    sparse = tf.SparseTensor(indices=[[0, 1], [2, 0]], values=[5.0, 7.0], dense_shape=[3, 2])
    assert sparse.indices.dtype == tf.int64 and sparse.shape.as_list() == [3, 2]
    dense = tf.sparse.to_dense(sparse, default_value=-1.0)
    placeholder = tf.sparse_placeholder(tf.float32, shape=[None, 2], name="sp")
    fed = tf.sparse_tensor_to_dense(placeholder)
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(dense), [[-1, 5], [-1, -1], [7, -1]])
        value = sess.run(sparse)
        assert isinstance(value, tf.SparseTensorValue)
        np.testing.assert_array_equal(value.indices, [[0, 1], [2, 0]])
        np.testing.assert_array_equal(value.dense_shape, [3, 2])
        feed = tf.SparseTensorValue([[1, 1], [3, 0]], np.array([2.0, 3.0], np.float32), [4, 2])
        np.testing.assert_array_equal(sess.run(fed, {placeholder: feed}),
                                      [[0, 0], [0, 2], [0, 0], [3, 0]])
        np.testing.assert_array_equal(sess.run(fed, {placeholder: ([[0, 0]], [1.0], [1, 2])}),
                                      [[1, 0]])
        with pytest.raises(TypeError, match="SparseTensorValue or an"):
            sess.run(fed, {placeholder: np.zeros(2)})
    fixed = tf.sparse_placeholder(tf.float32, shape=[2, 2])
    assert fixed.shape.as_list() == [2, 2]
    with tf.Session() as sess:      # its constant shape is fed too, as in TF
        np.testing.assert_array_equal(sess.run(tf.sparse.to_dense(fixed), {
            fixed: tf.SparseTensorValue([[1, 0]], [4.0], [2, 2])}), [[0, 0], [4, 0]])


@pytest.mark.parametrize("indices, message", [
    ([[2, 0], [0, 1]], r"indices\[1\] = \[0,1\] is out of order"),
    ([[0, 1], [0, 1]], r"indices\[1\] = \[0,1\] is repeated"),
    ([[0, 1], [3, 0]], r"indices\[1\] = \[3,0\] is out of bounds: need 0 <= index < \[3,2\]"),
])
def test_to_dense_validates_indices_as_tf(indices, message):
    dense = tf.sparse.to_dense(tf.SparseTensor(indices, [1.0, 2.0], [3, 2]))
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError, match=message):
        sess.run(dense)


def test_sparse_to_dense_takes_vector_indices_and_a_scalar_value():
    dense = tf.sparse_to_dense(tf.constant([4, 1], tf.int32), [6], 2.5, default_value=-1.0,
                               validate_indices=False)     # unsorted: TF refuses to check
    checked = tf.sparse_to_dense(tf.constant([4, 1], tf.int32), [6], 2.5)
    matrix = tf.sparse_to_dense([[0, 2], [1, 1]], tf.constant([2, 3]), [7, 8])
    assert dense.shape.as_list() == [6] and matrix.dtype == tf.int32
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(dense), [-1, 2.5, -1, -1, 2.5, -1])
        np.testing.assert_array_equal(sess.run(matrix), [[0, 0, 7], [0, 8, 0]])
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"indices\[1\] = \[1\] is out of order"):
            sess.run(checked)
    assert tf.sparse.matmul is tf.sparse_tensor_dense_matmul
    assert tf.sparse.placeholder is tf.sparse_placeholder


def test_reorder_sorts_entries_row_major():
    sparse = tf.SparseTensor([[2, 0], [0, 3], [0, 1]], [1.0, 2.0, 3.0], [3, 4])
    reordered = tf.sparse.reorder(sparse)
    with tf.Session() as sess:
        value = sess.run(reordered)
        dense = sess.run(tf.sparse.to_dense(reordered))
    np.testing.assert_array_equal(value.indices, [[0, 1], [0, 3], [2, 0]])
    np.testing.assert_array_equal(value.values, [3.0, 2.0, 1.0])
    assert dense[0, 1] == 3.0 and dense[2, 0] == 1.0


def test_sparse_construction_checks_ranks():
    with pytest.raises(ValueError, match="must have rank 2"):
        tf.SparseTensor([0, 1], [1.0, 2.0], [3])
    with pytest.raises(ValueError, match="not compatible"):
        tf.SparseTensor([[0], [1]], [1.0], [3])


@pytest.mark.parametrize("adjoint_a", [False, True])
@pytest.mark.parametrize("adjoint_b", [False, True])
def test_sparse_dense_matmul_matches_numpy(adjoint_a, adjoint_b):
    rng = np.random.default_rng(5)
    indices = np.array([[0, 2], [1, 0], [1, 0], [2, 1]])   # a repeated entry adds up
    values = rng.standard_normal(4).astype(np.float32)
    a = np.zeros((3, 3))
    np.add.at(a, tuple(indices.T), values)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    sparse = tf.SparseTensor(indices, values, [3, 3])
    product = tf.sparse.sparse_dense_matmul(sparse, b.T if adjoint_b else b,
                                            adjoint_a=adjoint_a, adjoint_b=adjoint_b)
    assert product.shape.as_list() == [3, 4]
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(product), (a.T if adjoint_a else a) @ b,
                                   rtol=1e-5, atol=1e-6)


def test_sparse_dense_matmul_rejects_mismatched_inner_dims():
    with pytest.raises(ValueError, match="inner dimension does not match: 3 vs. 2"):
        tf.sparse_tensor_dense_matmul(tf.SparseTensor([[0, 0]], [1.0], [2, 3]), tf.ones([2, 2]))


_SPARSE_INDICES = [[0, 1], [1, 0], [1, 2], [2, 2]]
GRAD_CASES = [
    grad_case("indexed_slices_to_dense", lambda x: tf.convert_to_tensor(
        tf.IndexedSlices(x, [2, 0, 2], [4, 3])), floats64(3, 3)),
    grad_case("sparse_to_dense", lambda values, default: tf.sparse_to_dense(
        _SPARSE_INDICES, [3, 3], values, default), floats64(4), floats64(), unknown=()),
    grad_case("sparse_tensor_dense_matmul", lambda values, b: tf.sparse_tensor_dense_matmul(
        tf.SparseTensor(_SPARSE_INDICES, values, [3, 3]), b), floats64(4), floats64(3, 2),
        unknown=()),
    grad_case("sparse_tensor_dense_matmul_adjoints", lambda values, b:
              tf.sparse_tensor_dense_matmul(tf.SparseTensor(_SPARSE_INDICES, values, [3, 3]),
                                            b, adjoint_a=True, adjoint_b=True),
              floats64(4), floats64(2, 3), unknown=()),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda case: case.name)
def test_sparse_gradients_match_finite_differences(case, rng):
    check_gradients(case, rng)


# -- candidate samplers -------------------------------------------------------------------


def _log_uniform_probability(classes, range_max):
    classes = np.asarray(classes, np.float64)
    return np.log((classes + 2) / (classes + 1)) / np.log(range_max + 1)


@pytest.mark.parametrize("sampler", ["log_uniform", "uniform"])
def test_sampler_is_seeded_in_range_and_counts_as_tf(sampler):
    draw = getattr(tf.nn, f"{sampler}_candidate_sampler")
    labels = tf.constant([[1], [7]], tf.int64)
    unique = draw(labels, 1, 20, True, 50, seed=7)
    repeated = draw(labels, 1, 30, False, 50, seed=7)
    runs = []
    for _ in range(2):      # each new Session draws the same classes again
        with tf.Session() as sess:
            runs.append(sess.run([unique, repeated]))
    (sampled, true_count, sampled_count), (again, again_true, again_sampled) = runs[0]
    np.testing.assert_array_equal(sampled, runs[1][0][0])
    assert sampled.dtype == np.int64 and len(set(sampled.tolist())) == 20
    assert sampled.min() >= 0 and sampled.max() < 50 and again.max() < 50
    probability = (_log_uniform_probability if sampler == "log_uniform"
                   else lambda classes, top: np.full(np.shape(classes), 1 / top))
    # not unique: p * num_sampled
    np.testing.assert_allclose(again_sampled, probability(again, 50) * 30, rtol=1e-6)
    np.testing.assert_allclose(again_true, probability([[1], [7]], 50) * 30, rtol=1e-6)
    # unique: 1 - (1 - p)^tries, one number of tries (>= 20) for every class
    tries = np.log1p(-sampled_count) / np.log1p(-probability(sampled, 50))
    assert tries.min() >= 20 - 1e-3 and np.ptp(tries) < 1e-3 * tries.max()
    np.testing.assert_allclose(true_count, -np.expm1(tries[0] * np.log1p(
        -probability([[1], [7]], 50))), rtol=1e-5)


def test_unique_sampler_past_its_range_is_tfs_error():
    sampled = tf.nn.uniform_candidate_sampler(tf.constant([[0]], tf.int64), 1, 5, True, 3)
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match="Sampler's range is too small."):
        sess.run(sampled)


def test_accidental_hits_name_the_rows_and_positions():
    hits = tf.nn.compute_accidental_hits(tf.constant([[1, 4], [2, 3]], tf.int64),
                                         tf.constant([4, 0, 3, 1], tf.int64), num_true=2)
    with tf.Session() as sess:
        rows, ids, weights = sess.run(hits)
    assert list(zip(rows.tolist(), ids.tolist())) == [(0, 3), (0, 0), (1, 2)]
    np.testing.assert_array_equal(weights, -np.finfo(np.float32).max)


# -- nce_loss and sampled_softmax_loss ----------------------------------------------------


def _sampled_logits_reference(weights, biases, labels, inputs, sampled, true_count,
                              sampled_count, remove_hits):
    num_true = labels.shape[1]
    weights, biases, inputs = (np.asarray(a, np.float64) for a in (weights, biases, inputs))
    true_logits = np.einsum("bd,btd->bt", inputs, weights[labels]) + biases[labels]
    sampled_logits = inputs @ weights[sampled].T + biases[sampled]
    if remove_hits:
        for row in range(labels.shape[0]):
            for position, value in enumerate(sampled):
                if value in labels[row]:
                    sampled_logits[row, position] += -np.finfo(np.float32).max
    logits = np.concatenate([true_logits - np.log(true_count),
                             sampled_logits - np.log(sampled_count)], 1)
    targets = np.concatenate([np.full(true_logits.shape, 1 / num_true),
                              np.zeros(sampled_logits.shape)], 1)
    return logits, targets


def _sampled_loss_setup(num_true, classes=12, dim=4, batch=3):
    rng = np.random.default_rng(6)
    weights = rng.standard_normal((classes, dim)).astype(np.float32)
    biases = rng.standard_normal(classes).astype(np.float32)
    inputs = rng.standard_normal((batch, dim)).astype(np.float32)
    labels = np.array([[0, 5], [3, 11], [5, 6]])[:, :num_true]
    return weights, biases, labels, inputs


@pytest.mark.parametrize("loss_name", ["nce_loss", "sampled_softmax_loss"])
@pytest.mark.parametrize("num_true", [1, 2])
@pytest.mark.parametrize("remove_hits", [False, True])
def test_sampled_losses_match_numpy_given_the_sampled_classes(loss_name, num_true,
                                                              remove_hits):
    weights, biases, labels, inputs = _sampled_loss_setup(num_true)
    # all 12 classes sampled: every true class is an accidental hit
    sampled_values = tf.nn.uniform_candidate_sampler(tf.constant(labels, tf.int64), num_true,
                                                     12 if remove_hits else 6, True, 12,
                                                     seed=2)
    loss = getattr(tf.nn, loss_name)(
        tf.constant(weights), tf.constant(biases), labels, tf.constant(inputs),
        num_sampled=12 if remove_hits else 6, num_classes=12, num_true=num_true,
        sampled_values=sampled_values, remove_accidental_hits=remove_hits)
    assert loss.shape.as_list() == [3]
    with tf.Session() as sess:
        value, (sampled, true_count, sampled_count) = sess.run([loss, sampled_values])
    logits, targets = _sampled_logits_reference(weights, biases, labels, inputs, sampled,
                                                true_count, sampled_count, remove_hits)
    if loss_name == "nce_loss":
        expected = np.sum(np.maximum(logits, 0) - logits * targets +
                          np.log1p(np.exp(-np.abs(logits))), 1)
    else:
        shifted = logits - logits.max(1, keepdims=True)
        log_softmax = shifted - np.log(np.sum(np.exp(shifted), 1, keepdims=True))
        expected = -np.sum(targets * log_softmax, 1)
    np.testing.assert_allclose(value, expected, rtol=2e-5, atol=2e-5)


def test_sampled_softmax_loss_is_deterministic_under_a_seed():
    weights, biases, labels, inputs = _sampled_loss_setup(1)
    values = []
    for _ in range(2):
        tf.reset_default_graph()
        loss = tf.nn.sampled_softmax_loss(weights, biases, labels, inputs, num_sampled=4,
                                          num_classes=12, seed=11)
        with tf.Session() as sess:
            values.append(sess.run(loss))
    np.testing.assert_array_equal(values[0], values[1])


def test_word2vec_skip_gram_loss_goes_down_with_sparse_updates():
    corpus = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "the", "dog", "sleeps", "the", "fox", "runs", "quick", "fox", "lazy", "dog"]
    vocabulary = sorted(set(corpus)) + ["never_seen"]
    word_id = {word: index for index, word in enumerate(vocabulary)}
    pairs = [(word_id[corpus[i]], word_id[corpus[j]]) for i in range(len(corpus))
             for j in (i - 1, i + 1) if 0 <= j < len(corpus)]
    centers = np.array([center for center, _ in pairs])
    contexts = np.array([[context] for _, context in pairs])
    tf.set_random_seed(1)
    embeddings = tf.Variable(tf.random_uniform([len(vocabulary), 8], -1.0, 1.0))
    nce_weights = tf.Variable(tf.truncated_normal([len(vocabulary), 8], stddev=0.3))
    nce_biases = tf.Variable(tf.zeros([len(vocabulary)]))
    loss = tf.reduce_mean(tf.nn.nce_loss(
        nce_weights, nce_biases, contexts, tf.nn.embedding_lookup(embeddings, centers),
        num_sampled=4, num_classes=len(vocabulary)))
    optimizer = tf.train.GradientDescentOptimizer(0.5)
    grads_and_vars = optimizer.compute_gradients(loss, [embeddings, nce_weights])
    assert all(isinstance(grad, tf.IndexedSlices) for grad, _ in grads_and_vars)
    train = optimizer.apply_gradients(grads_and_vars)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        initial = sess.run(embeddings)
        losses = [sess.run([train, loss])[1] for _ in range(200)]
        final = sess.run(embeddings)
    assert np.mean(losses[-20:]) < 0.6 * np.mean(losses[:20])
    # the center words' rows moved; the word never seen as a center did not
    np.testing.assert_array_equal(final[word_id["never_seen"]], initial[word_id["never_seen"]])
    assert not np.allclose(final[word_id["fox"]], initial[word_id["fox"]])


# -- towers: an IndexedSlices gradient is all-reduced (made dense first) ------------------


def _embedding_model(inputs):
    ids, targets = inputs
    table = tf.get_variable("table", initializer=np.random.default_rng(8).standard_normal(
        (10, 3)).astype(np.float32))
    return tf.reduce_mean(tf.square(tf.nn.embedding_lookup(table, ids) - targets))


@pytest.mark.parametrize("optimizer", [lambda: tf.train.AdagradOptimizer(0.3),
                                       lambda: tf.train.GradientDescentOptimizer(0.3)])
def test_data_parallel_trains_an_embedding_like_one_device(optimizer, no_gpu):
    split_cpu(2)
    rng = np.random.default_rng(9)
    batches = [(rng.integers(0, 8, 6), rng.standard_normal((6, 3)).astype(np.float32))
               for _ in range(5)]
    tables = []
    for towers in (0, 2):
        tf.reset_default_graph()
        ids = tf.placeholder(tf.int32, [None])
        targets = tf.placeholder(tf.float32, [None, 3])
        if towers:
            strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], all_reduce="cpu")
            step = strategy.minimize(_embedding_model, (ids, targets), optimizer())
            train, table = step.train_op, step.replicas[1][0]
        else:
            train = optimizer().minimize(_embedding_model((ids, targets)))
            table = tf.trainable_variables()[0]
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for batch_ids, batch_targets in batches:
                sess.run(train, {ids: batch_ids, targets: batch_targets})
            tables.append(sess.run(table))
    np.testing.assert_allclose(tables[1], tables[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(tables[1][8:], np.random.default_rng(8).standard_normal(
        (10, 3)).astype(np.float32)[8:])


def test_loss_scaling_takes_an_embedding_gradient_and_skips_an_inf_step():
    initial = np.random.default_rng(13).standard_normal((5, 2)).astype(np.float32)
    table = tf.Variable(initial)
    scale = tf.placeholder(tf.float32, [])
    loss = tf.reduce_sum(tf.nn.embedding_lookup(table, [1, 3, 1])) * scale
    optimizer = tf.mixed_precision.LossScaleOptimizer(tf.train.GradientDescentOptimizer(0.5),
                                                      dynamic=False, initial_scale=8.0)
    grads_and_vars = optimizer.compute_gradients(loss, [table])
    assert isinstance(grads_and_vars[0][0], tf.IndexedSlices)    # unscaled, still sparse
    train = optimizer.apply_gradients(grads_and_vars)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(train, {scale: np.inf})            # an inf gradient: the step is skipped
        np.testing.assert_array_equal(sess.run(table), initial)
        sess.run(train, {scale: 1.0})
        expected = initial.copy()
        expected[1] -= 1.0
        expected[3] -= 0.5
        np.testing.assert_allclose(sess.run(table), expected, rtol=1e-6)


# -- the same sparse steps on a GPU (real or simulated) -----------------------------------


def _sparse_scenario(device):
    """Values of a few sparse steps and ops, all built on ``device``."""
    tf.reset_default_graph()
    with tf.device(device):
        initial = np.random.default_rng(12).standard_normal((6, 2)).astype(np.float32)
        tables = [tf.Variable(initial) for _ in range(4)]
        ids = tf.constant([4, 1, 4])
        train = [optimizer.minimize(tf.reduce_sum(tf.gather(table, ids) ** 2))
                 for optimizer, table in zip(
                     [tf.train.GradientDescentOptimizer(0.1), tf.train.AdamOptimizer(0.1),
                      tf.train.AdagradOptimizer(0.1), tf.train.FtrlOptimizer(0.1)], tables)]
        scattered = tf.scatter_nd_add(tf.Variable(initial), [[5, 1], [0, 0]], [1.0, 2.0])
        maxed = tf.scatter_max(tf.Variable(initial), [2, 2], tf.ones([2, 2]))
        sparse = tf.SparseTensor([[0, 1], [2, 0]], [1.5, -2.0], [3, 6])
        product = tf.sparse_tensor_dense_matmul(sparse, tables[0].value())
        dense = tf.sparse.to_dense(sparse)
        grad = tf.convert_to_tensor(tf.gradients(tf.reduce_sum(tf.gather(tables[1], ids)),
                                                 tables[1])[0])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(3):
            sess.run(train)
        return sess.run(tables + [scattered, maxed, product, dense, grad])


def test_sparse_steps_on_a_gpu_match_the_cpu(gpu_backend):
    on_gpu = _sparse_scenario("/gpu:0")
    on_cpu = _sparse_scenario("/cpu:0")
    for gpu_value, cpu_value in zip(on_gpu, on_cpu):
        np.testing.assert_allclose(gpu_value, cpu_value, rtol=1e-5, atol=1e-6)
