"""A kernel that refuses its inputs gives the tf.errors exception TensorFlow
1.15 gives, in its words, naming the node (issue 32, item 12); a shape rule
that refuses them gives a ValueError or TypeError while the graph is built.

The message texts are TensorFlow's, from the kernel named in each case.
"""

import numpy as np
import pytest

import towerflow as tf
from towerflow.backends import numpy_backend

F32 = np.float32


def run_fed(build, *values, name="culprit"):
    """Run ``build(*placeholders)`` (unknown shapes: only the kernel can tell)
    fed ``values``; returns the OpError it raises."""
    placeholders = [tf.placeholder(tf.as_dtype(np.asarray(v).dtype)) for v in values]
    out = build(*placeholders, name)
    with tf.Session() as sess, pytest.raises(tf.errors.OpError) as info:
        sess.run(out, dict(zip(placeholders, values)))
    return info.value


def node(name, op_type):
    return f"\n\t [[node {name} (op: {op_type}) ]]"


# (id, build(*placeholders, name), fed values, error class, TF's message, op type, source)
CASES = [
    ("broadcast", lambda x, y, name: tf.add(x, y, name=name),
     (np.ones((2, 3), F32), np.ones(4, F32)), tf.errors.InvalidArgumentError,
     "Incompatible shapes: [2,3] vs. [4]", "Add"),              # cwise_ops_common.cc
    ("comparison", lambda x, y, name: tf.less(x, y, name=name),
     (np.ones((2, 3), F32), np.ones((3, 2), F32)), tf.errors.InvalidArgumentError,
     "Incompatible shapes: [2,3] vs. [3,2]", "Less"),
    ("matmul", lambda a, b, name: tf.matmul(a, b, name=name),
     (np.ones((2, 3), F32), np.ones((4, 2), F32)), tf.errors.InvalidArgumentError,
     "Matrix size-incompatible: In[0]: [2,3], In[1]: [4,2]", "MatMul"),   # matmul_op.cc
    ("batch_matmul", lambda a, b, name: tf.matmul(a, b, transpose_b=True, name=name),
     (np.ones((2, 2, 3), F32), np.ones((2, 2, 4), F32)), tf.errors.InvalidArgumentError,
     "In[0] mismatch In[1] shape: 3 vs. 4: [2,2,3] [2,2,4] 0 1", "MatMul"),
    ("matmul_vector", lambda a, b, name: tf.matmul(a, b, name=name),  # batch_matmul_op_impl.h
     (np.ones(3, F32), np.ones((3, 2), F32)), tf.errors.InvalidArgumentError,
     "In[0] ndims must be >= 2: 1", "MatMul"),
    ("reshape", lambda x, name: tf.reshape(x, [5], name=name),
     (np.ones((2, 3), F32),), tf.errors.InvalidArgumentError,
     "Input to reshape is a tensor with 6 values, but the requested shape has 5",
     "Reshape"),                                                    # reshape_op.h
    ("reshape_multiple", lambda x, name: tf.reshape(x, [-1, 4], name=name),
     (np.ones((2, 3), F32),), tf.errors.InvalidArgumentError,
     ("Input to reshape is a tensor with 6 values, but the requested shape requires a "
      "multiple of 4"), "Reshape"),
    ("reshape_empty", lambda x, name: tf.reshape(x, [0, -1], name=name),
     (np.ones((0, 3), F32),), tf.errors.InvalidArgumentError,
     ("Reshape cannot infer the missing input size for an empty tensor unless all "
      "specified input sizes are non-zero"), "Reshape"),
    ("concat", lambda x, y, name: tf.concat([x, y], 0, name=name),
     (np.ones((2, 3), F32), np.ones((2, 4), F32)), tf.errors.InvalidArgumentError,
     "ConcatOp : Dimensions of inputs should match: shape[0] = [2,3] vs. shape[1] = [2,4]",
     "ConcatV2"),                                                   # concat_op.cc
    ("concat_rank", lambda x, y, name: tf.concat([x, y], 0, name=name),
     (np.ones((2, 3), F32), np.ones(3, F32)), tf.errors.InvalidArgumentError,
     ("ConcatOp : Ranks of all input tensors should match: shape[0] = [2,3] vs. "
      "shape[1] = [3]"), "ConcatV2"),
    ("stack", lambda x, y, name: tf.stack([x, y], name=name),
     (np.ones(2, F32), np.ones(3, F32)), tf.errors.InvalidArgumentError,
     "Shapes of all inputs must match: values[0].shape = [2] != values[1].shape = [3]",
     "Pack"),                                                       # pack_op.cc
    ("reduction_axis", lambda x, name: tf.reduce_sum(x, 3, name=name),
     (np.ones((2, 3), F32),), tf.errors.InvalidArgumentError,
     "Invalid reduction dimension (3 for input with 2 dimension(s)", "Sum"),
    ("argmax_empty", lambda x, name: tf.argmax(x, 0, name=name),   # argmax_op.cc
     (np.ones((0, 3), F32),), tf.errors.InvalidArgumentError,
     "Reduction axis 0 is empty in shape [0,3]", "ArgMax"),
    ("argmax_scalar", lambda x, name: tf.argmax(x, 0, name=name),
     (np.float32(1),), tf.errors.InvalidArgumentError,
     "Expected dimension in the range [0, 0), but got 0", "ArgMax"),
    ("transpose", lambda x, name: tf.transpose(x, [0, 0], name=name),
     (np.ones((2, 3), F32),), tf.errors.InvalidArgumentError,
     "1 is missing from {0,0}.", "Transpose"),                      # transpose_op.cc
    ("floordiv_zero", lambda x, y, name: tf.floordiv(x, y, name=name),
     (np.array([1, 2], np.int32), np.array([1, 0], np.int32)),
     tf.errors.InvalidArgumentError, "Integer division by zero", "FloorDiv"),
    ("floormod_zero", lambda x, y, name: tf.floormod(x, y, name=name),
     (np.array([1], np.int64), np.array([0], np.int64)),
     tf.errors.InvalidArgumentError, "Integer division by zero", "FloorMod"),
    ("gather", lambda p, i, name: tf.gather(p, i, name=name),      # gather_op.cc
     (np.ones(5, F32), np.array([[1, 7]], np.int32)), tf.errors.InvalidArgumentError,
     "indices[0,1] = 7 is not in [0, 5)", "GatherV2"),
    ("split", lambda x, name: tf.split(x, [1, 1], name=name),      # split_v_op.cc
     (np.ones(3, F32),), tf.errors.InvalidArgumentError,
     ("Determined shape must either match input shape along split_dim exactly if fully "
      "specified, or be less than the size of the input along split_dim if not fully "
      "specified.  Got: 2"), "Split"),
    ("add_n", lambda x, y, name: tf.add_n([x, y], name=name),      # aggregate_ops.cc
     (np.ones((1, 2), F32), np.ones((2, 2), F32)), tf.errors.InvalidArgumentError,
     ("Inputs to operation AddN of type AddN must have the same size and shape.  "
      "Input 0: [1,2] != input 1: [2,2]"), "AddN"),
    ("bias_add", lambda x, b, name: tf.nn.bias_add(x, b, name=name),  # bias_op.cc
     (np.ones(3, F32), np.ones(3, F32)), tf.errors.InvalidArgumentError,
     "Input tensor must be at least 2D: [3]", "BiasAdd"),
    ("reverse", lambda x, name: tf.reverse(x, [-1, 1], name=name),  # reverse_op.cc
     (np.ones((2, 3), F32),), tf.errors.InvalidArgumentError,
     "axis 1 specified more than once.", "ReverseV2"),
    ("gather_nd", lambda p, i, name: tf.gather_nd(p, i, name=name),  # gather_nd_op.cc
     (np.ones(3, F32), np.zeros((0, 2), np.int32)), tf.errors.InvalidArgumentError,
     "index innermost dimension length must be <= params rank; saw: 2 vs. 1", "GatherNd"),
    ("lrn", lambda x, name: tf.nn.lrn(x, name=name),              # lrn_op.cc
     (np.ones((2, 3, 4), F32),), tf.errors.InvalidArgumentError,
     "in must be 4-dimensional", "LRN"),
    ("out_of_memory", lambda shape, name: tf.reshape(shape, [-1]) + tf.zeros(
        [2 ** 25, 2 ** 25], name=name), (np.ones(1, F32),), tf.errors.ResourceExhaustedError,
     ("OOM when allocating tensor with shape[33554432,33554432] and type float on "
      "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu"), "Fill"),
]


@pytest.mark.parametrize("build, values, error_class, message, op_type",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_refusing_kernel_gives_tensorflows_error_and_words(build, values, error_class,
                                                             message, op_type):
    error = run_fed(build, *values)
    assert type(error) is error_class
    assert error.op.type == op_type
    assert error.message == message + node(error.op.name, op_type)
    assert error.__cause__ is not error


def test_the_error_names_the_node_and_keeps_the_kernels_own_exception():
    error = run_fed(lambda x, y, name: tf.add(x, y, name=name),
                    np.ones((2, 3), F32), np.ones(4, F32), name="culprit")
    assert error.op.name == "culprit"
    assert error.message.endswith("[[node culprit (op: Add) ]]")
    assert isinstance(error.__cause__, ValueError)       # NumPy's broadcast error
    assert "could not be broadcast" in str(error.__cause__)


def test_an_unexplained_kernel_failure_keeps_numpys_words_behind_its_type():
    # A value NumPy's pad refuses and no explainer knows: its words, named.
    x = tf.placeholder(tf.float32)
    out = tf.pad(x, [[1, 1]], mode="REFLECT")
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError) as info:
        sess.run(out, {x: np.ones(1, F32)})
    assert "paddings must be less than the dimension size" in info.value.message
    assert info.value.message.endswith(node(out.op.name, out.op.type))


def test_a_kernel_bug_is_an_internal_error_not_a_refused_input(monkeypatch):
    def broken(ctx):
        def kernel(x):
            raise RuntimeError("a kernel's own bug")
        return kernel
    monkeypatch.setitem(numpy_backend.KERNELS, "Neg", broken)
    error = run_fed(lambda x, name: tf.negative(x, name=name), np.ones(2, F32))
    assert type(error) is tf.errors.InternalError
    assert error.message == "RuntimeError: a kernel's own bug" + node("culprit", "Neg")


def test_a_shape_rule_refusal_is_a_value_error_at_build():
    # concat of scalars: TensorFlow's shape function's words, while building
    with pytest.raises(ValueError, match=r"^Can't concatenate scalars \(use tf.stack "
                       r"instead\) \(while building op 'concat' of type ConcatV2\)"):
        tf.concat([tf.constant(1.0), tf.constant(2.0)], 0)


def test_a_dtype_outside_the_ops_type_list_is_tensorflows_type_error():
    # op_def_library.py's words
    with pytest.raises(TypeError, match=r"^Value passed to parameter 'x' has DataType int32 "
                       r"not in list of allowed values: float16, bfloat16, float32, float64$"):
        tf.sqrt(tf.constant([4, 9]))
    with pytest.raises(TypeError, match=r"parameter 'input' has DataType bool"):
        tf.reduce_sum(tf.constant([True]))
    with pytest.raises(TypeError, match=r"parameter 'features' has DataType bool"):
        tf.nn.relu(tf.constant([True]))


def test_int_arithmetic_wraps_inside_its_dtype_as_in_tensorflow():
    # two int32 tensors: the product overflows and wraps, as TF's does
    x = tf.placeholder(tf.int32)
    y = tf.placeholder(tf.int32)
    with tf.Session() as sess:
        product = sess.run(x * y, {x: np.array([2 ** 30], np.int32),
                                   y: np.array([8], np.int32)})
    assert product.dtype == np.int32 and product.tolist() == [0]


def test_integer_mean_sums_in_its_dtype_and_truncates():
    x = tf.placeholder(tf.int32)
    with tf.Session() as sess:
        mean = sess.run(tf.reduce_mean(x), {x: np.array([-7, 2], np.int32)})
        assert mean == -2                       # -5 / 2 truncated toward zero
        with pytest.raises(tf.errors.InvalidArgumentError, match="Integer division by zero"):
            sess.run(tf.reduce_mean(x), {x: np.zeros(0, np.int32)})


def test_an_empty_max_is_the_identity_and_an_empty_softmax_is_empty():
    x = tf.placeholder(tf.float32)
    n = tf.placeholder(tf.int32)
    with tf.Session() as sess:
        assert sess.run(tf.reduce_max(x), {x: np.zeros(0, F32)}) == -np.inf
        assert sess.run(tf.reduce_min(n), {n: np.zeros(0, np.int32)}) == 2 ** 31 - 1
        assert sess.run(tf.nn.softmax(x), {x: np.zeros((2, 0), F32)}).shape == (2, 0)


def test_tf1_div_floors_integers_and_divides_floats():
    with tf.Session() as sess:
        assert sess.run(tf.div(tf.constant(7), tf.constant(2))) == 3
        assert sess.run(tf.div(tf.constant(-7), tf.constant(2))) == -4
        assert sess.run(tf.div(tf.constant(7.0), tf.constant(2.0))) == 3.5


def test_a_loss_over_no_examples_is_zero():
    labels = tf.placeholder(tf.float32, [None])
    predictions = tf.placeholder(tf.float32, [None])
    loss = tf.losses.mean_squared_error(labels, predictions)
    with tf.Session() as sess:
        assert sess.run(loss, {labels: np.zeros(0, F32), predictions: np.zeros(0, F32)}) == 0
        assert sess.run(loss, {labels: [1.0, 2.0], predictions: [2.0, 4.0]}) == 2.5
