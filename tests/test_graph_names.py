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
