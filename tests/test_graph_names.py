"""Graph-level names TF1 programs use, as TF 1.15: GraphDef protos
(Graph.as_graph_def, tf.train.write_graph, tf.import_graph_def),
tf.graph_util's freezing, custom gradients (tf.custom_gradient,
tf.RegisterGradient, gradient_override_map, tf.no_gradient), tf.py_function
and tf.lookup tables. Each result is checked against NumPy."""

import numpy as np
import pytest
from google.protobuf import text_format

import towerflow as tf

# -- GraphDef, write_graph, freezing and importing -------------------------------------


def _numpy_conv_same(images, kernel):
    """A stride-1 SAME 2-D convolution in float64 (NHWC, HWIO)."""
    height, width = kernel.shape[:2]
    top, left = (height - 1) // 2, (width - 1) // 2
    padded = np.pad(images, [(0, 0), (top, height - 1 - top), (left, width - 1 - left),
                             (0, 0)])
    out = np.zeros(images.shape[:3] + (kernel.shape[3],))
    for row in range(height):
        for col in range(width):
            window = padded[:, row:row + images.shape[1], col:col + images.shape[2], :]
            out += window @ kernel[row, col]
    return out


def _numpy_max_pool_2x2(images):
    batch, height, width, depth = images.shape
    return images.reshape(batch, height // 2, 2, width // 2, 2, depth).max(axis=(2, 4))


def _softmax(logits):
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _small_cnn():
    """A trained-looking CNN: conv, relu, pool, reshape, dense, softmax, argmax."""
    tf.reset_default_graph()
    tf.set_random_seed(7)
    images = tf.placeholder(tf.float32, [None, 6, 6, 2], name="images")
    conv = tf.layers.conv2d(images, 3, 3, padding="same", activation=tf.nn.relu,
                            name="conv")
    flat = tf.reshape(tf.layers.max_pooling2d(conv, 2, 2), [-1, 27])
    weights = tf.Variable(tf.random_normal([27, 4]), name="weights")
    bias = tf.Variable(tf.random_normal([4]), name="bias")
    probs = tf.nn.softmax(tf.nn.bias_add(tf.matmul(flat, weights), bias), name="probs")
    tf.argmax(probs, 1, name="label")
    return images, [v for v in tf.global_variables()]


def _numpy_cnn(batch, values):
    kernel, conv_bias, weights, bias = [value.astype(np.float64) for value in values]
    conv = np.maximum(_numpy_conv_same(batch.astype(np.float64), kernel) + conv_bias, 0)
    logits = _numpy_max_pool_2x2(conv).reshape(len(batch), -1) @ weights + bias
    return _softmax(logits)


def test_as_graph_def_lists_nodes_inputs_and_attributes():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    w = tf.Variable(np.ones((3, 2), np.float32), name="w")
    with tf.control_dependencies([w.initializer]):
        tf.matmul(x, w, transpose_b=False, name="y")
    graph_def = tf.get_default_graph().as_graph_def()
    assert isinstance(graph_def, tf.GraphDef)
    nodes = {node.name: node for node in graph_def.node}
    assert isinstance(nodes["y"], tf.NodeDef)
    assert nodes["y"].op == "MatMul"
    assert list(nodes["y"].input) == ["x", "w/read", "^w/Assign"]
    assert nodes["w/Assign"].input[0] == "w"       # TF's ref input
    assert nodes["x"].attr["shape"].shape.dim[0].size == -1
    assert nodes["x"].attr["dtype"].type == 1             # DT_FLOAT
    assert isinstance(nodes["y"].attr["transpose_a"], tf.AttrValue)
    assert "_output_shapes" not in nodes["y"].attr
    shapes = tf.get_default_graph().as_graph_def(add_shapes=True).node[0].attr
    assert [dim.size for dim in shapes["_output_shapes"].list.shape[0].dim] == [-1, 3]


def test_write_graph_as_text_and_binary(tmp_path):
    tf.reset_default_graph()
    tf.add(tf.constant(1.0, name="a"), tf.constant(2.0, name="b"), name="total")
    text_path = tf.train.write_graph(tf.get_default_graph(), str(tmp_path / "out"),
                                     "graph.pbtxt")
    assert text_path == str(tmp_path / "out" / "graph.pbtxt")
    with open(text_path) as text:
        from_text = text_format.Parse(text.read(), tf.GraphDef())
    binary_path = tf.train.write_graph(from_text, str(tmp_path), "graph.pb", as_text=False)
    with open(binary_path, "rb") as binary:
        from_binary = tf.GraphDef.FromString(binary.read())
    assert [(node.name, node.op) for node in from_binary.node] == \
        [("a", "Const"), ("b", "Const"), ("total", "Add")]
    tf.reset_default_graph()
    total, = tf.import_graph_def(from_binary, return_elements=["total:0"], name="")
    with tf.Session() as sess:
        assert sess.run(total) == 3.0


def test_a_frozen_cnn_imports_and_matches_numpy():
    _, variables = _small_cnn()
    batch = np.random.RandomState(0).randn(5, 6, 6, 2).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        values = sess.run(variables)
        frozen = tf.graph_util.convert_variables_to_constants(
            sess, sess.graph.as_graph_def(), ["probs", "label"])
    ops = {node.op for node in frozen.node}
    assert "VariableV2" not in ops and "Assign" not in ops and "RandomStandardNormal" \
        not in ops
    assert {"Const", "Conv2D", "MaxPool", "MatMul", "Softmax", "ArgMax"} <= ops
    expected = _numpy_cnn(batch, values)
    tf.reset_default_graph()
    new_images = tf.placeholder(tf.float32, [None, 6, 6, 2])
    probs, label = tf.import_graph_def(frozen, input_map={"images": new_images},
                                       return_elements=["probs:0", "label:0"])
    assert probs.name == "import/probs:0"
    with tf.Session() as sess:
        got_probs, got_label = sess.run([probs, label], {new_images: batch})
    np.testing.assert_allclose(got_probs, expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(got_label, expected.argmax(axis=1))


def test_freezing_keeps_listed_variables_only():
    _small_cnn()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        graph_def = sess.graph.as_graph_def()
        frozen = tf.graph_util.convert_variables_to_constants(
            sess, graph_def, ["probs"], variable_names_whitelist=["weights"])
        weights_value = sess.run("weights:0")
    nodes = {node.name: node for node in frozen.node}
    assert nodes["weights"].op == "Const" and nodes["bias"].op == "VariableV2"
    stored = nodes["weights"].attr["value"].tensor
    assert [dim.size for dim in stored.tensor_shape.dim] == [27, 4]
    np.testing.assert_array_equal(
        np.frombuffer(stored.tensor_content, np.float32).reshape(27, 4), weights_value)


def test_extract_sub_graph_keeps_what_the_nodes_need():
    tf.reset_default_graph()
    a = tf.constant(1.0, name="a")
    b = tf.constant(2.0, name="b")
    three = tf.constant(3.0)
    tf.multiply(a, three, name="needs_a")
    tf.negative(b, name="needs_b")
    graph_def = tf.get_default_graph().as_graph_def()
    sub = tf.graph_util.extract_sub_graph(graph_def, ["needs_a"])
    assert [node.name for node in sub.node] == ["a", "Const", "needs_a"]
    with pytest.raises(AssertionError, match="missing is not in graph"):
        tf.graph_util.extract_sub_graph(graph_def, ["missing"])
    with pytest.raises(TypeError, match="dest_nodes must be a list"):
        tf.graph_util.extract_sub_graph(graph_def, "needs_a")
    with pytest.raises(TypeError, match="graph_def must be a graph_pb2.GraphDef proto"):
        tf.graph_util.extract_sub_graph(tf.get_default_graph(), ["needs_a"])


def test_import_graph_def_errors_are_tf_s():
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [2], name="x")
    tf.square(x, name="y")
    graph_def = tf.get_default_graph().as_graph_def()
    with pytest.raises(ValueError, match=r"Attempted to map inputs that were not found in "
                                         r"graph_def: \[z:0\]"):
        tf.import_graph_def(graph_def, input_map={"z:0": tf.constant([1.0, 2.0])})
    with pytest.raises(ValueError, match="Requested return tensor 'y:3' not found"):
        tf.import_graph_def(graph_def, return_elements=["y:3"])
    with pytest.raises(ValueError, match="Requested return node 'w' not found"):
        tf.import_graph_def(graph_def, return_elements=["w"])
    with pytest.raises(TypeError, match="graph_def must be a GraphDef proto"):
        tf.import_graph_def(tf.get_default_graph())
    unknown = tf.GraphDef()
    unknown.node.add(name="n", op="NoSuchOpType")
    with pytest.raises(tf.errors.NotFoundError, match="Op type not registered "
                                                      "'NoSuchOpType'"):
        tf.import_graph_def(unknown)


def test_an_op_whose_attributes_do_not_round_trip_is_named():
    tf.reset_default_graph()
    tf.py_func(lambda value: value, [tf.constant(1.0)], tf.float32, name="python")
    with pytest.raises(ValueError, match=r"Cannot import node 'python' \(op: PyFunc\).*"
                                         "'func'"):
        tf.import_graph_def(tf.get_default_graph().as_graph_def())


def test_imports_get_unique_scopes():
    tf.reset_default_graph()
    tf.constant([1.0, 2.0], name="c")
    graph_def = tf.get_default_graph().as_graph_def()
    first, = tf.import_graph_def(graph_def, return_elements=["c"])
    second, = tf.import_graph_def(graph_def, return_elements=["c:0"])
    assert first.name == "import/c" and second.name == "import_1/c:0"
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(second), [1.0, 2.0])


# -- custom gradients ---------------------------------------------------------------


def _run(*fetches, feed_dict=None):
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        return sess.run(list(fetches), feed_dict)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")   # exp(100) in float32
def test_custom_gradient_gives_a_stable_softplus_gradient():
    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)

        def grad(dy):
            return dy * (1 - 1 / (1 + e))
        return tf.log(1 + e), grad

    tf.reset_default_graph()
    values = np.array([-3.0, 0.0, 2.5, 100.0], np.float32)
    x = tf.constant(values)
    grad, = tf.gradients(tf.reduce_sum(3.0 * log1pexp(x)), [x])
    got, = _run(grad)
    expected = 3.0 / (1.0 + np.exp(-values.astype(np.float64)))
    np.testing.assert_allclose(got, expected, rtol=1e-6)     # no NaN at 100
    assert np.isfinite(got).all()


def test_custom_gradient_of_two_inputs_and_a_nested_result():
    @tf.custom_gradient
    def scaled_pair(a, b):
        def grad(d_sum, d_prod):
            return 2.0 * d_sum, -d_prod     # deliberately not the true gradient
        return (a + b, a * b), grad

    tf.reset_default_graph()
    a, b = tf.constant([1.0, 2.0]), tf.constant([3.0, -1.0])
    total, product = scaled_pair(a, b)
    loss = tf.reduce_sum(total) + tf.reduce_sum(5.0 * product)
    grad_a, grad_b = tf.gradients(loss, [a, b])
    values = _run(total, product, grad_a, grad_b)
    np.testing.assert_allclose(values[0], [4.0, 1.0])
    np.testing.assert_allclose(values[1], [3.0, -2.0])
    np.testing.assert_allclose(values[2], [2.0, 2.0])
    np.testing.assert_allclose(values[3], [-5.0, -5.0])


def test_custom_gradient_with_a_variable_returns_its_gradient_too():
    tf.reset_default_graph()
    w_value = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    x_value = np.array([[2.0, 1.0]], np.float32)

    @tf.custom_gradient
    def dense(x):
        w = tf.get_variable("w", initializer=w_value)

        def grad(dy, variables=None):
            (var,) = variables
            return tf.matmul(dy, var, transpose_b=True), [10.0 * tf.matmul(x, dy,
                                                                         transpose_a=True)]
        return tf.matmul(x, w), grad

    x = tf.constant(x_value)
    y = dense(x)
    w = tf.global_variables()[0]
    grad_x, grad_w = tf.gradients(tf.reduce_sum(y), [x, w])
    got_y, got_x, got_w = _run(y, grad_x, grad_w)
    ones = np.ones((1, 2))
    np.testing.assert_allclose(got_y, x_value @ w_value, rtol=1e-6)
    np.testing.assert_allclose(got_x, ones @ w_value.T, rtol=1e-6)
    np.testing.assert_allclose(got_w, 10.0 * x_value.T @ ones, rtol=1e-6)


def test_custom_gradient_errors_are_tf_s():
    tf.reset_default_graph()
    w = tf.Variable(2.0)

    @tf.custom_gradient
    def no_variables_arg(x):
        return x * w, lambda dy: dy

    with pytest.raises(TypeError, match="grad_fn must accept a keyword argument "
                                        "'variables'"):
        no_variables_arg(tf.constant(1.0))

    @tf.custom_gradient
    def wrong_count(x):
        return x * w, lambda dy, variables=None: (dy, [])

    y = wrong_count(tf.constant(1.0))
    with pytest.raises(ValueError, match="Must return gradient for each variable"):
        tf.gradients(y, [w])
    with pytest.raises(ValueError, match="supports keywords arguments only when eager"):
        wrong_count(x=tf.constant(1.0))


def test_a_guided_relu_override():
    @tf.RegisterGradient("GuidedReluForTest")
    def _guided_relu_grad(op, grad):
        passes = tf.cast(grad > 0.0, grad.dtype) * tf.cast(op.outputs[0] > 0.0, grad.dtype)
        return grad * passes

    tf.reset_default_graph()
    values = np.array([-1.0, 2.0, 3.0, -4.0, 5.0], np.float32)
    upstream = np.array([1.0, -1.0, 2.0, 3.0, 0.5], np.float32)
    x = tf.constant(values)
    with tf.get_default_graph().gradient_override_map({"Relu": "GuidedReluForTest"}):
        guided = tf.nn.relu(x)
    plain = tf.nn.relu(x)
    guided_grad, = tf.gradients(guided, [x], grad_ys=[tf.constant(upstream)])
    plain_grad, = tf.gradients(plain, [x], grad_ys=[tf.constant(upstream)])
    got_guided, got_plain = _run(guided_grad, plain_grad)
    np.testing.assert_allclose(got_guided, upstream * (upstream > 0) * (values > 0))
    np.testing.assert_allclose(got_plain, upstream * (values > 0))


def test_a_straight_through_estimator_through_identity():
    tf.reset_default_graph()
    values = np.array([-0.7, 0.2, 1.6], np.float32)
    x = tf.constant(values)
    with tf.get_default_graph().gradient_override_map({"Sign": "Identity",
                                                       "Round": "Identity"}):
        binary, rounded = tf.sign(x), tf.round(x)
    weights = np.array([2.0, -3.0, 0.5], np.float32)
    loss = tf.reduce_sum(binary * weights) + tf.reduce_sum(rounded * rounded)
    grad, = tf.gradients(loss, [x])
    got, = _run(grad)
    np.testing.assert_allclose(got, weights + 2.0 * np.round(values))


def test_register_gradient_and_no_gradient_errors():
    with pytest.raises(KeyError, match="Registering two gradient with name 'Relu'"):
        tf.RegisterGradient("Relu")(lambda op, grad: grad)
    tf.RegisterGradient("OnceOnlyForTest")(lambda op, grad: grad)
    with pytest.raises(KeyError, match="Registering two gradient with name "
                                       "'OnceOnlyForTest'"):
        tf.RegisterGradient("OnceOnlyForTest")(lambda op, grad: grad)
    with pytest.raises(TypeError, match="op_type must be a string"):
        tf.no_gradient(3)
    with pytest.raises(TypeError, match="op_type_map must be a dictionary mapping "
                                        "strings to strings"), \
            tf.get_default_graph().gradient_override_map({"Relu": 1}):
        pass
    tf.reset_default_graph()
    x = tf.constant(2.0)
    with tf.get_default_graph().gradient_override_map({"Square": "NoSuchGradient"}):
        y = tf.square(x)
    with pytest.raises(LookupError, match=r"No gradient defined for operation 'Square' "
                                          r"\(op type: Square\)"):
        tf.gradients(y, [x])


def test_no_gradient_stops_the_ops_it_names():
    tf.NotDifferentiable("StopsForTest")
    tf.reset_default_graph()
    x = tf.constant(3.0)
    with tf.get_default_graph().gradient_override_map({"Square": "StopsForTest"}):
        stopped = tf.square(x)
    assert tf.gradients(stopped, [x]) == [None]
    assert tf.gradients(2.0 * stopped + tf.square(x), [x])[0] is not None
    assert tf.no_gradient is not None and tf.NotDifferentiable is tf.no_gradient


# -- py_function ----------------------------------------------------------------------


def test_py_function_gives_values_with_numpy():
    seen = []

    def count_tokens(line, scale):
        seen.append((type(line.numpy()), line.numpy(), scale.numpy()))
        return len(line.numpy().split()) * int(scale.numpy())

    tf.reset_default_graph()
    line = tf.placeholder(tf.string, [])
    count = tf.py_function(count_tokens, [line, tf.constant(3)], tf.int32)
    got, = _run(count, feed_dict={line: b"the quick brown fox"})
    assert got == 12 and got.dtype == np.int32
    assert seen == [(bytes, b"the quick brown fox", 3)]


def test_py_function_with_a_list_of_outputs_converts_them():
    def stats(values):
        array = values.numpy().astype(np.float64)
        return array.mean(), [int(array.argmax())]

    tf.reset_default_graph()
    data = np.array([1.5, -2.0, 7.25, 0.0], np.float32)
    mean, index = tf.py_function(stats, [tf.constant(data)], [tf.float32, tf.int64])
    got_mean, got_index = _run(mean, index)
    assert got_mean.dtype == np.float32 and got_index.dtype == np.int64
    np.testing.assert_allclose(got_mean, data.astype(np.float64).mean(), rtol=1e-7)
    np.testing.assert_array_equal(got_index, [2])
    assert tf.gradients(mean, [tf.get_default_graph().get_tensor_by_name("Const:0")]) == \
        [None]


def test_py_function_errors_are_tf_s():
    def fails(x):
        raise ValueError("no good")

    tf.reset_default_graph()
    x = tf.constant(1.0)
    with pytest.raises(tf.errors.InvalidArgumentError, match="ValueError: no good"):
        _run(tf.py_function(fails, [x], tf.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="returns 2 values, but "
                                                             "expects to see 1 values"):
        _run(tf.py_function(lambda value: (value, value), [x], [tf.float32]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Expected int32, got 2.5"):
        _run(tf.py_function(lambda value: 2.5, [x], tf.int32))


# -- tf.lookup tables -------------------------------------------------------------------


def _words_table(default=-1):
    words = ["the", "cat", "sat", "on", "mat"]
    initializer = tf.lookup.KeyValueTensorInitializer(
        words, np.arange(len(words), dtype=np.int64) * 10)
    return words, tf.lookup.StaticHashTable(initializer, default_value=default)


def test_a_static_hash_table_maps_strings_to_ids():
    tf.reset_default_graph()
    words, table = _words_table()
    text = np.array([[b"the", b"dog"], [b"mat", b"cat"]], dtype=object)
    sentence = tf.placeholder(tf.string, [None, 2])
    ids = table.lookup(sentence)
    assert ids.dtype == tf.int64 and ids.shape.as_list() == [None, 2]
    with tf.Session() as sess:
        sess.run(tf.tables_initializer())
        got, size = sess.run([ids, table.size()], {sentence: text})
    index = {word.encode(): 10 * position for position, word in enumerate(words)}
    expected = np.vectorize(lambda word: index.get(word, -1), otypes=[np.int64])(text)
    np.testing.assert_array_equal(got, expected)
    assert size == len(words)


def test_an_int_keyed_table_with_float_values():
    tf.reset_default_graph()
    keys = np.array([3, 14, 15, 92], np.int64)
    values = np.array([0.5, -1.25, 2.0, 8.0], np.float32)
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values),
                                      default_value=np.nan)
    queries = np.array([92, 3, 7, 14], np.int64)
    with tf.Session() as sess:
        sess.run(table.initializer)
        got = sess.run(table.lookup(tf.constant(queries)))
    lookup = dict(zip(keys.tolist(), values.tolist()))
    np.testing.assert_array_equal(got, [lookup.get(key, np.nan) for key in queries])
    with pytest.raises(TypeError, match="Signature mismatch. Keys must be dtype int64, got "
                                        "int32"):
        table.lookup(tf.constant([1, 2], tf.int32))


def test_table_errors_before_and_after_initialization():
    tf.reset_default_graph()
    _, table = _words_table()
    ids = table.lookup(tf.constant(["cat"]))
    with tf.Session() as sess:
        with pytest.raises(tf.errors.FailedPreconditionError, match="Table not initialized"):
            sess.run(ids)
        sess.run(tf.tables_initializer())
        sess.run(tf.tables_initializer())       # the same data again: fine, as in TF
        assert sess.run(ids).tolist() == [10]
    with tf.Session() as sess, pytest.raises(tf.errors.FailedPreconditionError,
                                             match="Table not initialized"):
        sess.run(ids)                            # each Session holds its own tables
    tf.reset_default_graph()
    clash = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(["a", "a"], [1, 2]), default_value=0)
    with tf.Session() as sess, pytest.raises(
            tf.errors.FailedPreconditionError,
            match="HashTable has different value for same key. Key a has 1 and trying to "
                  "add value 2"):
        sess.run(clash.initializer)


def test_a_text_file_vocabulary(tmp_path):
    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("apple\t7\nbanana\t3\ncherry\t11\n")
    tf.reset_default_graph()
    by_line = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
        str(vocabulary), tf.string, 0, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER),
        default_value=-1)
    by_column = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
        str(vocabulary), tf.string, 0, tf.int64, 1), default_value=0)
    words = tf.constant(["cherry", "kiwi", "apple"])
    with tf.Session() as sess:
        sess.run(tf.tables_initializer())
        lines, counts = sess.run([by_line.lookup(words), by_column.lookup(words)])
    np.testing.assert_array_equal(lines, [2, -1, 0])
    np.testing.assert_array_equal(counts, [11, 0, 7])
    with pytest.raises(ValueError, match="Signature mismatch. Values must be dtype int64, "
                                         "got int32"):
        tf.lookup.TextFileInitializer(str(vocabulary), tf.string, 0, tf.int32,
                                      tf.lookup.TextFileIndex.LINE_NUMBER)
    with pytest.raises(ValueError, match="Invalid vocab_size 0"):
        tf.lookup.TextFileInitializer(str(vocabulary), tf.string, 0, tf.int64, 1,
                                      vocab_size=0)
    too_wide = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
        str(vocabulary), tf.string, 0, tf.int64, 2), default_value=0)
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match="Invalid number of columns"):
        sess.run(too_wide.initializer)


def test_tables_initializer_without_tables_is_a_no_op():
    tf.reset_default_graph()
    init = tf.tables_initializer()
    assert init.type == "NoOp" and init.name == "init_all_tables"
    with tf.Session() as sess:
        assert sess.run(init) is None


def test_a_monitored_session_initializes_tables():
    tf.reset_default_graph()
    words, table = _words_table()
    ids = table.lookup(tf.constant(["mat", "zebra"]))
    with tf.train.MonitoredSession() as sess:
        got = sess.run(ids)
    np.testing.assert_array_equal(got, [10 * words.index("mat"), -1])
