"""MetaGraphDefs as TF 1.15: Saver.save writing <prefix>.meta,
tf.train.export_meta_graph and tf.train.import_meta_graph, so that TF1's
restore idiom works in a fresh process:

    saver = tf.train.import_meta_graph('model.ckpt-5.meta')
    saver.restore(sess, 'model.ckpt-5')
    sess.run(tf.get_collection('train_op')[0], feed)       # trains on

The save and the import run in separate processes (no Python object shared).
A restored model's outputs are checked against the first process's and
against float64 NumPy forwards of the restored weights; training on after the
import against training straight through.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tensorboard.compat.proto.variable_pb2 import VariableDef

import towerflow as tf

pytest.importorskip("sklearn")

REPO = Path(__file__).resolve().parents[1]

# -- a digits classifier saved in one process, imported in another ----------------------

_DATA = """
import sys
import numpy as np
from sklearn.datasets import load_digits
import towerflow as tf

kind, out = sys.argv[1], sys.argv[2]
digits = load_digits()
images = (digits.data / 16.0).astype(np.float32)
labels = digits.target.astype(np.int64)
test_images = images[1500:]

def batch(step):
    start = (step * 64) % 960
    return images[start:start + 64], labels[start:start + 64]
"""

_TRAIN_AND_SAVE = _DATA + """
tf.set_random_seed(1)
x = tf.placeholder(tf.float32, [None, 64], name="x")
y = tf.placeholder(tf.int64, [None], name="labels")
training = tf.placeholder_with_default(False, [], name="training")
if kind == "mlp":
    hidden = tf.layers.dense(x, 32, tf.nn.relu, name="hidden")
    logits = tf.layers.dense(hidden, 10, name="logits")
    optimizer = tf.train.MomentumOptimizer(0.1, 0.9)
else:
    net = tf.layers.conv2d(tf.reshape(x, [-1, 8, 8, 1]), 4, 3, padding="same",
                           use_bias=False, name="conv")
    net = tf.layers.batch_normalization(net, training=training, name="bn")
    net = tf.layers.max_pooling2d(tf.nn.relu(net), 2, 2)
    logits = tf.layers.dense(tf.layers.flatten(net), 10, name="logits")
    optimizer = tf.train.AdamOptimizer(0.01)
loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
step = tf.train.get_or_create_global_step()
with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
    train_op = optimizer.minimize(loss, global_step=step)
tf.add_to_collection("train_op", train_op)
tf.add_to_collection("logits", logits)
saver = tf.train.Saver()
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for index in range(10):
        if index == 5:
            prefix = saver.save(sess, out + "/model.ckpt", global_step=step)
            saved_logits = sess.run(logits, {x: test_images})
        batch_x, batch_y = batch(index)
        sess.run(train_op, {x: batch_x, y: batch_y, training: True})
    straight = {var.op.name: sess.run(var) for var in tf.global_variables()}
np.savez(out + "/first.npz", prefix=prefix, logits=saved_logits,
         update_ops=[op.name for op in tf.get_collection(tf.GraphKeys.UPDATE_OPS)],
         **{"var:" + name: value for name, value in straight.items()})
"""

_IMPORT_AND_TRAIN_ON = _DATA + """
saver = tf.train.import_meta_graph(out + "/model.ckpt-5.meta")
graph = tf.get_default_graph()
x = graph.get_tensor_by_name("x:0")
logits = tf.get_collection("logits")[0]
train_op = tf.get_collection("train_op")[0]
with tf.Session() as sess:
    saver.restore(sess, out + "/model.ckpt-5")
    restored = {var.op.name: sess.run(var) for var in tf.global_variables()}
    restored_logits = sess.run(logits, {x: test_images})
    for index in range(5, 10):
        batch_x, batch_y = batch(index)
        sess.run(train_op, {x: batch_x, "labels:0": batch_y, "training:0": True})
    trained_on = {var.op.name: sess.run(var) for var in tf.global_variables()}
    trainable = sorted(var.op.name for var in tf.trainable_variables())
np.savez(out + "/second.npz", logits=restored_logits, trainable=trainable,
         update_ops=[op.name for op in tf.get_collection(tf.GraphKeys.UPDATE_OPS)],
         **{"restored:" + name: value for name, value in restored.items()},
         **{"var:" + name: value for name, value in trained_on.items()})
"""


def _run_script(tmp_path, name, source, kind):
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, str(script), kind, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


def _saved_then_imported(tmp_path, kind):
    _run_script(tmp_path, "train_and_save.py", _TRAIN_AND_SAVE, kind)
    assert sorted(path.name for path in tmp_path.glob("model.ckpt-5*")) == \
        ["model.ckpt-5.meta", "model.ckpt-5.npz"]
    _run_script(tmp_path, "import_and_train_on.py", _IMPORT_AND_TRAIN_ON, kind)
    return np.load(tmp_path / "first.npz"), np.load(tmp_path / "second.npz")


def _by_prefix(arrays, prefix):
    return {key[len(prefix):]: arrays[key] for key in arrays.files if key.startswith(prefix)}


def _assert_trains_on_as_straight(first, second):
    """Training 5 steps after the import gives bit for bit what 10 steps in
    one go gave: the imported graph runs the same ops, kernels and order on
    the same values (weights, optimizer slots, moving averages, global step)."""
    straight, trained_on = _by_prefix(first, "var:"), _by_prefix(second, "var:")
    assert sorted(trained_on) == sorted(straight)
    for name, value in straight.items():
        np.testing.assert_array_equal(trained_on[name], value, err_msg=name)
    assert int(trained_on["global_step"]) == 10


def _digits_test_images():
    from sklearn.datasets import load_digits
    return load_digits().data[1500:] / 16.0


def test_an_mlp_saved_in_one_process_restores_and_trains_on_in_another(tmp_path):
    first, second = _saved_then_imported(tmp_path, "mlp")
    # The restored model gives the first process's logits, bit for bit ...
    np.testing.assert_array_equal(second["logits"], first["logits"])
    # ... which are the float64 forward of the restored weights.
    weights = {name: value.astype(np.float64)
               for name, value in _by_prefix(second, "restored:").items()}
    hidden = np.maximum(_digits_test_images() @ weights["hidden/kernel"] +
                        weights["hidden/bias"], 0)
    expected = hidden @ weights["logits/kernel"] + weights["logits/bias"]
    np.testing.assert_allclose(second["logits"], expected, rtol=1e-5, atol=1e-5)
    assert int(weights["global_step"]) == 5
    assert "hidden/kernel/Momentum" in weights          # the optimizer's slots too
    assert list(second["trainable"]) == ["hidden/bias", "hidden/kernel", "logits/bias",
                                         "logits/kernel"]
    _assert_trains_on_as_straight(first, second)


def _numpy_conv_same_3x3(images, kernel):
    padded = np.pad(images, [(0, 0), (1, 1), (1, 1), (0, 0)])
    out = np.zeros(images.shape[:3] + (kernel.shape[3],))
    for row in range(3):
        for col in range(3):
            out += padded[:, row:row + 8, col:col + 8, :] @ kernel[row, col]
    return out


def _numpy_cnn(images, weights):
    conv = _numpy_conv_same_3x3(images.reshape(-1, 8, 8, 1), weights["conv/kernel"])
    normed = (conv - weights["bn/moving_mean"]) / np.sqrt(weights["bn/moving_variance"] +
                                                          0.001)
    relu = np.maximum(normed * weights["bn/gamma"] + weights["bn/beta"], 0)
    pooled = relu.reshape(-1, 4, 2, 4, 2, 4).max(axis=(2, 4)).reshape(len(images), -1)
    return pooled @ weights["logits/kernel"] + weights["logits/bias"]


def test_a_cnn_with_batch_norm_restores_and_trains_on_with_its_update_ops(tmp_path):
    first, second = _saved_then_imported(tmp_path, "cnn")
    np.testing.assert_array_equal(second["logits"], first["logits"])
    weights = {name: value.astype(np.float64)
               for name, value in _by_prefix(second, "restored:").items()}
    np.testing.assert_allclose(second["logits"], _numpy_cnn(_digits_test_images(), weights),
                               rtol=1e-5, atol=1e-5)
    assert len(first["update_ops"]) == 2         # the moving mean's and variance's
    assert list(second["update_ops"]) == list(first["update_ops"])
    # The moving statistics moved on after the import (the update ops ran) ...
    trained_on = _by_prefix(second, "var:")
    assert not np.array_equal(trained_on["bn/moving_mean"], weights["bn/moving_mean"])
    assert {"beta1_power", "beta2_power", "conv/kernel/Adam"} <= set(weights)
    # ... exactly as they did in the first process.
    _assert_trains_on_as_straight(first, second)


# -- collections, the MetaGraphDef's parts, scopes ----------------------------------------


def _model_with_collections():
    tf.reset_default_graph()
    tf.set_random_seed(4)
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    w = tf.get_variable("w", [3, 2], initializer=tf.random_uniform_initializer(-0.3, 0.7),
                        regularizer=lambda var: 0.01 * tf.reduce_sum(var * var))
    y = tf.matmul(x, w, name="y")
    loss = tf.losses.mean_squared_error(tf.zeros_like(y), y)
    tf.add_to_collection(tf.GraphKeys.LOSSES, loss)
    average = tf.train.ExponentialMovingAverage(0.9)
    tf.add_to_collection(tf.GraphKeys.UPDATE_OPS, average.apply([w]))
    tf.metrics.mean(y, name="mean_y")
    tf.summary.scalar("y_mean", tf.reduce_mean(y))
    step = tf.train.get_or_create_global_step()
    total_loss = tf.add_n([loss] + tf.get_collection(tf.GraphKeys.REGULARIZATION_LOSSES))
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(total_loss, global_step=step)
    tf.add_to_collection("train_op", train_op)
    tf.add_to_collection("outputs", y)
    tf.add_to_collection("names", "first")
    tf.add_to_collection("counts", 7)
    tf.add_to_collection("rates", 0.5)
    return w


def _collection_names():
    """Each collection's items as names (or values), the way they are compared."""
    graph = tf.get_default_graph()
    return {key: [getattr(item, "name", item) for item in graph.get_collection(key)]
            for key in graph._collections if graph.get_collection(key)}


def test_collections_round_trip_with_variables_rebuilt():
    w = _model_with_collections()
    tf.add_to_collection("python_objects", object())    # no form in a MetaGraphDef
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        initial_w = sess.run(w)
    expected = _collection_names()
    del expected["python_objects"]
    meta_graph_def = tf.train.export_meta_graph()
    assert "python_objects" not in meta_graph_def.collection_def
    variable_def = VariableDef.FromString(
        meta_graph_def.collection_def["trainable_variables"].bytes_list.value[0])
    assert (variable_def.variable_name, variable_def.initializer_name,
            variable_def.snapshot_name, variable_def.trainable) == \
        ("w:0", "w/Assign", "w/read:0", True)
    assert variable_def.initial_value_name == w.initial_value.name
    assert list(meta_graph_def.collection_def["counts"].int64_list.value) == [7]

    tf.reset_default_graph()
    tf.train.import_meta_graph(meta_graph_def)
    assert _collection_names() == expected
    imported_w, = tf.trainable_variables()
    assert isinstance(imported_w, tf.Variable) and imported_w.trainable
    assert tf.global_variables()[0] is imported_w       # one Variable, every collection
    assert tf.moving_average_variables() == [imported_w]
    assert tf.train.get_global_step() is tf.get_collection("global_step")[0]
    assert not tf.get_collection("local_variables")[0].trainable
    with tf.Session() as sess:
        # The initializers round-trip exactly: the same seeded draw in [-0.3, 0.7).
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        np.testing.assert_array_equal(sess.run(imported_w), initial_w)
        sess.run(tf.get_collection("update_ops"), {"x:0": np.ones((1, 3))})
        shadow = tf.get_default_graph().get_tensor_by_name("w/ExponentialMovingAverage:0")
        np.testing.assert_allclose(sess.run(shadow), initial_w, rtol=1e-6)
        before = sess.run(imported_w)
        sess.run(tf.get_collection("train_op")[0], {"x:0": np.ones((1, 3))})
        # d/dw of mean((x w)^2) + 0.01 * sum(w^2) with x = ones, by hand in float64
        b = before.astype(np.float64)
        grad = 2 * np.ones((3, 1)) * b.sum(axis=0) / 2 + 0.02 * b
        np.testing.assert_allclose(sess.run(imported_w), b - 0.1 * grad, rtol=1e-6)


def _described(value):
    """An attribute's value, ops by name and arrays as lists, to compare graphs."""
    if isinstance(value, tf.Operation):
        return ("op", value.name)
    if isinstance(value, (list, tuple)):
        return type(value)(_described(item) for item in value)
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.tolist())
    return value


def _op_descriptions(graph):
    return {op.name: (op.type, {key: _described(value) for key, value in op.attrs.items()},
                      [tensor.name for tensor in op.inputs],
                      sorted(control.name for control in op.control_inputs), op.device)
            for op in graph.get_operations()}


def test_every_op_comes_back_with_its_attributes_inputs_and_device():
    _model_with_collections()
    with tf.device("/cpu:0"):
        net = tf.layers.batch_normalization(tf.placeholder(tf.float64, [None, 4]),
                                            training=True, epsilon=1e-3)
        noisy = net + tf.random_uniform([4], -0.3, 0.7, dtype=tf.float64, seed=5)
    loss = tf.reduce_sum(tf.square(noisy))
    with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
        tf.train.AdamOptimizer(1e-3).minimize(loss)
    saver = tf.train.Saver()
    original = _op_descriptions(tf.get_default_graph())
    meta_graph_def = saver.export_meta_graph()
    tf.reset_default_graph()
    tf.train.import_meta_graph(meta_graph_def)
    imported = _op_descriptions(tf.get_default_graph())
    assert sorted(imported) == sorted(original)
    for name, description in original.items():
        assert imported[name] == description, name     # floats exact: 1e-3, -0.3, 0.7
    epsilon = [op.attrs["epsilon"] for op in tf.get_default_graph().get_operations()
               if op.type == "FusedBatchNorm"]
    assert epsilon == [1e-3]      # not float32's 0.0010000000474974513


def test_saver_def_meta_info_and_files_as_text_and_binary(tmp_path):
    _model_with_collections()
    saver = tf.train.Saver(max_to_keep=3)
    saver_def = saver.saver_def
    assert isinstance(saver_def, tf.train.SaverDef)
    assert (saver_def.filename_tensor_name, saver_def.restore_op_name,
            saver_def.max_to_keep) == ("save/Const:0", "save/restore_all", 3)
    info = tf.MetaGraphDef.MetaInfoDef(tags=["serve"])
    path = str(tmp_path / "model.meta.txt")
    written = tf.train.export_meta_graph(path, meta_info_def=info, as_text=True,
                                         saver_def=saver_def, strip_default_attrs=True)
    parsed = text_format.Parse(Path(path).read_text(), tf.MetaGraphDef())
    assert parsed == written
    assert list(parsed.meta_info_def.tags) == ["serve"]
    assert parsed.meta_info_def.stripped_default_attrs
    assert {op.name for op in parsed.meta_info_def.stripped_op_list.op} >= \
        {"MatMul", "VariableV2", "Assign", "ApplyGradientDescent"}
    assert parsed.saver_def == saver_def
    assert parsed.graph_def.node[0].attr["_output_shapes"].list.shape   # add_shapes, as TF
    binary = saver.export_meta_graph(str(tmp_path / "model.meta"))
    assert tf.MetaGraphDef.FromString((tmp_path / "model.meta").read_bytes()) == binary
    assert binary.saver_def == saver_def
    tf.reset_default_graph()
    assert tf.train.import_meta_graph(path).saver_def == saver_def   # text read back


def test_the_savers_collection_holds_saver_defs(tmp_path):
    w = _model_with_collections()
    saver = tf.train.Saver(max_to_keep=2)
    tf.add_to_collection(tf.GraphKeys.SAVERS, saver)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        prefix = saver.save(sess, str(tmp_path / "model"))
        values = sess.run(w)
    meta_graph_def = tf.train.export_meta_graph()
    saved, = meta_graph_def.collection_def["savers"].bytes_list.value
    assert tf.train.SaverDef.FromString(saved) == saver.saver_def
    tf.reset_default_graph()
    tf.train.import_meta_graph(meta_graph_def)
    imported, = tf.get_collection(tf.GraphKeys.SAVERS)
    assert imported.saver_def == saver.saver_def
    with tf.Session() as sess:
        imported.restore(sess, prefix)
        np.testing.assert_array_equal(sess.run("w:0"), values)


def test_save_writes_the_meta_graph_unless_told_not_to(tmp_path):
    w = _model_with_collections()
    saver = tf.train.Saver()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        saver.save(sess, str(tmp_path / "a"), global_step=1, meta_graph_suffix="graph")
        saver.save(sess, str(tmp_path / "b"), write_meta_graph=False)
        values = sess.run(w)
    assert sorted(os.listdir(tmp_path)) == ["a-1.graph", "a-1.npz", "b.npz", "checkpoint"]
    tf.reset_default_graph()
    saver = tf.train.import_meta_graph(str(tmp_path / "a-1.graph"))
    with tf.Session() as sess:
        saver.restore(sess, str(tmp_path / "a-1"))
        np.testing.assert_array_equal(sess.run("w:0"), values)


def test_import_scope_clear_devices_and_an_export_scope(tmp_path):
    _model_with_collections()
    with tf.device("/cpu:0"), tf.name_scope("head"):
        tf.nn.relu(tf.get_default_graph().get_tensor_by_name("y:0"), name="out")
    saver = tf.train.Saver()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        prefix = saver.save(sess, str(tmp_path / "model"))
        values = sess.run("w:0")
    meta_graph_def = saver.export_meta_graph(clear_devices=True)
    assert all(not node.device for node in meta_graph_def.graph_def.node)
    head = tf.train.export_meta_graph(export_scope="head")
    assert [node.name for node in head.graph_def.node] == ["out"]
    assert list(head.graph_def.node[0].input) == ["$unbound_inputs_y"]

    tf.reset_default_graph()
    scoped_saver = tf.train.import_meta_graph(str(tmp_path / "model.meta"),
                                              import_scope="copy")
    assert tf.get_collection("outputs")[0].name == "copy/y:0"
    assert [var.name for var in tf.trainable_variables()] == ["copy/w:0"]
    with tf.Session() as sess:
        scoped_saver.restore(sess, prefix)
        np.testing.assert_array_equal(sess.run("copy/w:0"), values)
    with pytest.raises(ValueError, match=r"Graph contains unbound inputs: "
                                         r"\$unbound_inputs_y\. Must provide"):
        tf.train.import_meta_graph(head)
    out, = tf.import_graph_def(head.graph_def, name="head_copy", return_elements=["out:0"],
                               input_map={"$unbound_inputs_y": -tf.ones([1, 2])})
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(out), np.zeros((1, 2)))


def test_without_a_saver_def_a_new_saver_or_none():
    _model_with_collections()
    meta_graph_def = tf.train.export_meta_graph()
    assert not meta_graph_def.HasField("saver_def")      # as TF: the Saver is not asked
    tf.reset_default_graph()
    saver = tf.train.import_meta_graph(meta_graph_def)
    assert isinstance(saver, tf.train.Saver)
    tf.reset_default_graph()
    tf.constant(1.0, name="c")
    constants_only = tf.train.export_meta_graph()
    tf.reset_default_graph()
    assert tf.train.import_meta_graph(constants_only) is None


# -- errors ------------------------------------------------------------------------------


def test_import_errors_are_tf_s(tmp_path):
    with pytest.raises(OSError, match="File .*missing.meta does not exist"):
        tf.train.import_meta_graph(str(tmp_path / "missing.meta"))
    garbage = tmp_path / "not_a_graph.meta"
    garbage.write_text("this is { not a MetaGraphDef")
    with pytest.raises(OSError, match="Cannot parse file .*not_a_graph.meta"):
        tf.train.import_meta_graph(str(garbage))
    with pytest.raises(TypeError, match="graph_def must be of type GraphDef, not str"):
        tf.train.export_meta_graph(graph_def="graph")
    with pytest.raises(TypeError, match="saver_def must be a SaverDef"):
        tf.train.Saver(saver_def="save/restore_all")


@pytest.mark.parametrize("build, node, op_type", [
    (lambda: tf.py_func(np.square, [tf.constant(2.0)], tf.float32, name="square"),
     "square", "PyFunc"),
    (lambda: tf.while_loop(lambda i: i < 3, lambda i: i + 1, [tf.constant(0)], name="loop"),
     "loop", "While"),
    (lambda: tf.cond(tf.constant(True), lambda: tf.constant(1.0),
                     lambda: tf.constant(2.0), name="branch"), "branch", "If"),
])
def test_ops_that_do_not_round_trip_are_named(build, node, op_type):
    tf.reset_default_graph()
    build()
    meta_graph_def = tf.train.export_meta_graph()
    tf.reset_default_graph()
    with pytest.raises(ValueError, match=rf"Cannot import node '{node}' \(op: {op_type}\)"):
        tf.train.import_meta_graph(meta_graph_def)


def test_an_unknown_op_type_is_tf_s_not_found_error():
    meta_graph_def = tf.MetaGraphDef()
    meta_graph_def.graph_def.node.add(name="n", op="NoSuchOp")
    with pytest.raises(tf.errors.NotFoundError, match="Op type not registered 'NoSuchOp'"):
        tf.train.import_meta_graph(meta_graph_def)
