"""TensorFlow's ``tensorflow.python.*`` import paths with ``tensorflow``
renamed ``towerflow`` (towerflow/python): the names TF1 programs import from
them are towerflow's own, and a missing one says so."""

import subprocess
import sys

import numpy as np
import pytest

import towerflow as tf


def test_framework_ops_and_math_ops_build_and_run_a_graph():
    from towerflow.python.framework import constant_op, dtypes, ops
    from towerflow.python.ops import array_ops, math_ops, nn_ops
    ops.reset_default_graph()
    graph = ops.get_default_graph()
    a = constant_op.constant([[1.0, 2.0], [3.0, 4.0]], dtype=dtypes.float32)
    b = array_ops.placeholder(dtypes.float32, [2, 2])
    product = nn_ops.relu(math_ops.matmul(a, b) - 10.0)
    assert product.graph is graph is tf.get_default_graph()
    with tf.Session() as sess:
        value = sess.run(product, {b: np.eye(2, dtype=np.float32) * 4})
    np.testing.assert_array_equal(value, np.maximum(np.array([[4, 8], [12, 16]]) - 10.0, 0))


def test_import_paths_give_towerflows_own_objects():
    from towerflow.python.client import device_lib, timeline
    from towerflow.python.framework import errors, ops, tensor_shape
    from towerflow.python.ops import (
        control_flow_ops,
        init_ops,
        rnn,
        rnn_cell,
        rnn_cell_impl,
        state_ops,
        variable_scope,
        variables,
    )
    from towerflow.python.platform import flags, gfile, tf_logging
    from towerflow.python.training import adam, moving_averages, saver, training_util
    from towerflow.python.util import nest
    assert ops.Graph is tf.Graph and ops.Tensor is tf.Tensor
    assert ops.GraphKeys is tf.GraphKeys and ops.name_scope is tf.name_scope
    assert tensor_shape.TensorShape is tf.TensorShape
    assert errors.NotFoundError is tf.errors.NotFoundError
    assert control_flow_ops.cond is tf.cond and control_flow_ops.group is tf.group
    assert init_ops.zeros_initializer is tf.zeros_initializer
    assert rnn.dynamic_rnn is tf.nn.dynamic_rnn
    assert rnn_cell.LSTMCell is rnn_cell_impl.LSTMCell is tf.nn.rnn_cell.LSTMCell
    assert state_ops.assign is tf.assign and variables.Variable is tf.Variable
    assert variable_scope.variable_scope is tf.variable_scope
    assert gfile.GFile is tf.gfile.GFile and tf_logging.info is tf.logging.info
    assert flags.DEFINE_integer is tf.flags.DEFINE_integer
    assert saver.Saver is tf.train.Saver and adam.AdamOptimizer is tf.train.AdamOptimizer
    assert training_util.get_or_create_global_step is tf.train.get_or_create_global_step
    assert moving_averages.ExponentialMovingAverage is tf.train.ExponentialMovingAverage
    assert timeline.Timeline is tf.client.timeline.Timeline
    assert device_lib.list_local_devices is tf.device_lib.list_local_devices
    assert nest.flatten([1, (2, [3])]) == [1, 2, 3]


def test_import_statement_forms():
    import towerflow.python.ops.math_ops
    from towerflow.python.ops import nn_ops
    from towerflow.python.ops.rnn_cell_impl import LSTMStateTuple, RNNCell
    assert towerflow.python.ops.math_ops.reduce_sum is tf.reduce_sum
    assert nn_ops.softmax is tf.nn.softmax
    assert RNNCell is tf.nn.rnn_cell.RNNCell and LSTMStateTuple is tf.nn.rnn_cell.LSTMStateTuple
    assert tf.python.ops.math_ops is towerflow.python.ops.math_ops


def test_the_tutorial_mnist_reader_path():
    from towerflow.examples.tutorials.mnist import input_data
    assert callable(input_data.read_data_sets)


def test_missing_names_and_modules_say_so():
    from towerflow.python.ops import math_ops
    assert not hasattr(math_ops, "lgamma")
    with pytest.raises(AttributeError) as error:
        math_ops.lgamma  # noqa: B018
    assert str(error.value) == ("towerflow has no tensorflow.python.ops.math_ops.lgamma "
                                "(not implemented; see the TF1 compatibility page)")
    with pytest.raises(AttributeError, match="no tensorflow.python.ops.math_ops._private"):
        math_ops._private  # noqa: B018
    with pytest.raises(ModuleNotFoundError, match=r"^towerflow has no tensorflow.python.ops."
                                                  r"tensor_array_ops \(not implemented"):
        import towerflow.python.ops.tensor_array_ops  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match="towerflow has no tensorflow.python.keras"):
        from towerflow.python import keras  # noqa: F401


def test_a_path_whose_namespace_is_not_there_is_left_out():
    """The mapping table maps tf.sparse's paths before tf.sparse exists; only
    the paths of namespaces that exist are installed."""
    from towerflow import python
    assert python.IMPORT_PATHS["ops.sparse_ops"] == ("sparse",)
    assert ("towerflow.python.ops.sparse_ops" in sys.modules) == hasattr(tf, "sparse")


def test_a_tf1_program_with_tensorflow_python_imports_runs():
    program = """
from towerflow.python.framework import dtypes, ops
from towerflow.python.ops import array_ops, math_ops, variables, init_ops, variable_scope
from towerflow.python.training import gradient_descent
from towerflow.python.client import session
ops.reset_default_graph()
x = array_ops.placeholder(dtypes.float32, [None, 1])
with variable_scope.variable_scope('model'):
    w = variable_scope.get_variable('w', [1, 1], initializer=init_ops.zeros_initializer())
loss = math_ops.reduce_mean(math_ops.square(math_ops.matmul(x, w) - 3.0 * x))
train = gradient_descent.GradientDescentOptimizer(0.1).minimize(loss)
with session.Session() as sess:
    sess.run(variables.global_variables_initializer())
    for _ in range(200):
        sess.run(train, {x: [[1.0], [2.0]]})
    print(round(float(sess.run(w)[0, 0]), 4))
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=300, check=True)
    assert result.stdout.split()[-1] == "3.0"
