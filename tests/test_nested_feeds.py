"""Nested structures in Session.run, as TF 1.15: a feed_dict key may be a
(nested) tuple of tensors fed a value of the same structure (a char-RNN
sampler feeds its LSTM state back step by step), and fetches may be any
nesting of lists, tuples, namedtuples, dicts and OrderedDicts."""

import collections

import numpy as np
import pytest

import towerflow as tf

VOCAB, UNITS, STEPS, BATCH = 7, 5, 6, 2


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_lstm_step(x, c, h, kernel, bias):
    """TF's LSTMCell in float64: gates i, j, f, o; forget_bias 1."""
    gates = np.concatenate([x, h], axis=1) @ kernel + bias
    i, j, f, o = np.split(gates, 4, axis=1)
    c = c * _sigmoid(f + 1.0) + _sigmoid(i) * np.tanh(j)
    return c, np.tanh(c) * _sigmoid(o)


def _char_rnn(layers):
    """The classic char-RNN graph: one step at a time, the state a feedable
    ``zero_state`` (an LSTMStateTuple, or a tuple of them)."""
    tf.reset_default_graph()
    tf.set_random_seed(3)
    cells = [tf.nn.rnn_cell.LSTMCell(UNITS) for _ in range(layers)]
    cell = cells[0] if layers == 1 else tf.nn.rnn_cell.MultiRNNCell(cells)
    chars = tf.placeholder(tf.int32, [BATCH, None], name="chars")
    embedding = tf.get_variable("embedding", [VOCAB, 3])
    inputs = tf.gather(embedding, chars)
    initial_state = cell.zero_state(BATCH, tf.float32)
    with tf.variable_scope("rnn"):
        outputs, final_state = tf.nn.dynamic_rnn(cell, inputs, initial_state=initial_state)
    return chars, embedding, initial_state, outputs, final_state


@pytest.mark.parametrize("layers", [1, 2])
def test_a_sampler_feeding_its_state_back_matches_one_pass(layers):
    chars, _, initial_state, outputs, final_state = _char_rnn(layers)
    text = np.random.RandomState(0).randint(0, VOCAB, size=(BATCH, STEPS))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        whole_outputs, whole_state = sess.run([outputs, final_state], {chars: text})
        state = sess.run(initial_state)
        stepped = []
        for step in range(STEPS):
            out, state = sess.run([outputs, final_state],
                                  {chars: text[:, step:step + 1], initial_state: state})
            stepped.append(out[:, 0])
    np.testing.assert_allclose(np.stack(stepped, axis=1), whole_outputs, rtol=1e-5, atol=1e-6)
    if layers == 1:
        assert type(state).__name__ == "LSTMStateTuple"
        np.testing.assert_allclose(state.h, whole_state.h, rtol=1e-5, atol=1e-6)
    else:
        assert isinstance(state, tuple) and len(state) == 2
        np.testing.assert_allclose(state[1].c, whole_state[1].c, rtol=1e-5, atol=1e-6)


def test_a_fed_state_tuple_matches_a_float64_lstm():
    chars, embedding, initial_state, _, final_state = _char_rnn(1)
    kernel, bias = tf.trainable_variables()[1:3]
    rng = np.random.RandomState(1)
    text = rng.randint(0, VOCAB, size=(BATCH, 1))
    c0, h0 = rng.randn(BATCH, UNITS), rng.randn(BATCH, UNITS)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        fed = tf.nn.rnn_cell.LSTMStateTuple(c0.astype(np.float32), h0.astype(np.float32))
        state = sess.run(final_state, {chars: text, initial_state: fed})
        table, kernel_value, bias_value = sess.run([embedding, kernel, bias])
    c1, h1 = _numpy_lstm_step(table[text[:, 0]].astype(np.float64), c0, h0,
                              kernel_value.astype(np.float64), bias_value.astype(np.float64))
    np.testing.assert_allclose(state.c, c1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.h, h1, rtol=1e-5, atol=1e-6)


def test_a_tuple_key_pairs_leaves_as_tf_s_nest_flattens_them():
    tf.reset_default_graph()
    a, b = tf.placeholder(tf.float32, []), tf.placeholder(tf.float32, [2])
    with tf.Session() as sess:
        # a list is a structure too, an array a leaf (TF's nest.flatten)
        total = sess.run(a + b, {(a, (b,)): [1.5, (np.array([2.0, 3.0]),)]})
        with pytest.raises(ValueError, match="Key had 2 elements, but value had 3"):
            sess.run(a + b, {(a, (b,)): [1.5, ([2.0, 3.0],)]})
    np.testing.assert_allclose(total, [3.5, 4.5])


def test_a_mismatched_structure_is_tf_s_value_error():
    tf.reset_default_graph()
    a, b = tf.placeholder(tf.float32, []), tf.placeholder(tf.float32, [])
    with tf.Session() as sess:
        with pytest.raises(ValueError, match="Could not flatten dictionary. Key had 2 "
                                             "elements, but value had 1 elements"):
            sess.run(a + b, {(a, b): (1.0,)})
        with pytest.raises(ValueError, match="Could not flatten dictionary: key .* is "
                                             "not unique"):
            sess.run(a + b, {(a, b): (1.0, 2.0), a: 3.0})
        with pytest.raises(TypeError, match="input must be a dictionary"):
            sess.run(a, [(a, 1.0)])


Pair = collections.namedtuple("Pair", ["left", "right"])


def test_nested_fetches_keep_their_structure_and_types():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [3])
    value = np.array([1.0, -2.0, 4.0], np.float32)
    fetches = {"pair": Pair(x * 2.0, [tf.reduce_sum(x), (tf.abs(x),)]),
               "ordered": collections.OrderedDict([("z", x - 1.0), ("a", tf.square(x))])}
    with tf.Session() as sess:
        result = sess.run(fetches, {x: value})
    assert type(result["pair"]) is Pair and isinstance(result["pair"].right[1], tuple)
    assert type(result["ordered"]) is collections.OrderedDict
    assert list(result["ordered"]) == ["z", "a"]
    np.testing.assert_allclose(result["pair"].left, value * 2)
    np.testing.assert_allclose(result["pair"].right[0], value.sum())
    np.testing.assert_allclose(result["pair"].right[1][0], np.abs(value))
    np.testing.assert_allclose(result["ordered"]["z"], value - 1)
    np.testing.assert_allclose(result["ordered"]["a"], value ** 2)


def test_a_fetch_of_the_wrong_type_names_it():
    tf.reset_default_graph()
    x = tf.constant(1.0)
    with tf.Session() as sess, \
            pytest.raises(TypeError, match="Fetch argument 3.5 has invalid type"):
        sess.run({"x": [x, 3.5]})
