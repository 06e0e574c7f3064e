"""bfloat16 (tf.bfloat16, ml_dtypes' NumPy type): the dtype, its casts, ops
on it against float32 NumPy within bfloat16's rounding, the compiled kernels
never handed it, and what the GPU backend does with it.

Tolerances: bfloat16 keeps 8 significant bits and rounds to nearest, so each
rounding is off by at most U = 2**-8 of its value; a result built with r
roundings is within (1 + U)**r - 1 of the sum of its terms' magnitudes, plus
the float32 arithmetic of the kernel and of the reference (2**-24 per term
each).
"""

import pickle
import types

import ml_dtypes
import numpy as np
import pytest

import towerflow as tf
from towerflow import errors
from towerflow.backends import (
    KernelContext,
    bfloat16_kernels,
    cupy_bfloat16,
    native,
    winograd,
)
from towerflow.backends.window_geometry import _layout

BF16 = np.dtype(ml_dtypes.bfloat16)
U = 2.0 ** -8          # bfloat16's unit roundoff (8 significant bits)
F32 = 2.0 ** -24       # float32's


def bound(magnitude, roundings=1, float32_terms=1):
    """The largest |result - reference| of a result with ``roundings``
    bfloat16 roundings, the result and the float32 reference each summing
    ``float32_terms`` terms whose magnitudes add up to ``magnitude``."""
    return ((1 + U) ** roundings * (1 + F32) ** (2 * float32_terms) - 1) * magnitude


def bf16(array):
    return np.asarray(array, np.float32).astype(BF16)


# -- the dtype -------------------------------------------------------------------------


def test_bfloat16_is_a_floating_dtype_backed_by_ml_dtypes():
    assert tf.bfloat16.as_numpy_dtype is ml_dtypes.bfloat16
    assert tf.bfloat16.name == "bfloat16" and repr(tf.bfloat16) == "tf.bfloat16"
    assert tf.bfloat16.size == 2
    assert tf.bfloat16.is_floating and not tf.bfloat16.is_integer
    assert not tf.bfloat16.is_unsigned and not tf.bfloat16.is_bool
    for name in ("bfloat16", ml_dtypes.bfloat16, BF16, tf.bfloat16):
        assert tf.as_dtype(name) is tf.bfloat16
    assert pickle.loads(pickle.dumps(tf.bfloat16)) is tf.bfloat16


def test_min_and_max_are_bfloat16_values_as_in_tensorflow():
    # TF: the largest finite bfloat16, 0x1.FEp127, as a bfloat16 scalar
    assert tf.bfloat16.max == float.fromhex("0x1.FEp127")
    assert tf.bfloat16.min == -float.fromhex("0x1.FEp127")
    assert type(tf.bfloat16.max) is ml_dtypes.bfloat16


def test_casts_round_to_nearest_even_and_truncate_to_integers():
    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8)], np.float32)
    values = np.array([1.7, -1.7, 2.5, 3.4e38], np.float32)
    with tf.Graph().as_default():
        x = tf.constant(ties)
        y = tf.constant(values)
        rounded = tf.cast(x, tf.bfloat16)
        out = tf.cast(y, tf.bfloat16)
        back = tf.cast(rounded, tf.float32)
        as_int = tf.cast(tf.cast(tf.constant(values[:3]), tf.bfloat16), tf.int32)
        from_int = tf.cast(tf.constant([3, -7]), tf.bfloat16)
        as_bool = tf.cast(tf.constant([0.0, 0.5], tf.bfloat16), tf.bool)
        with tf.Session() as sess:
            got = sess.run([rounded, out, back, as_int, from_int, as_bool])
    assert got[0].dtype == BF16
    # halfway cases go to the even neighbour: 1 + 2**-8 -> 1, 1 + 3 * 2**-8 -> 1 + 2**-6
    np.testing.assert_array_equal(got[0].astype(np.float32), [1.0, 1 + 2**-6, -1.0])
    assert got[1].astype(np.float32)[3] == np.inf    # past bfloat16's max
    assert got[2].dtype == np.float32
    np.testing.assert_array_equal(got[2], got[0].astype(np.float32))
    np.testing.assert_array_equal(got[3], [1, -1, 2])  # toward zero, as TF
    np.testing.assert_array_equal(got[4].astype(np.float32), [3.0, -7.0])
    np.testing.assert_array_equal(got[5], [False, True])


def test_constants_feeds_and_dtype_errors():
    with tf.Graph().as_default():
        c = tf.constant(0.1, dtype=tf.bfloat16)
        inferred = tf.convert_to_tensor(bf16([1.0, 2.0]))
        p = tf.placeholder(tf.bfloat16, [2])
        f = tf.placeholder(tf.float32, [2])
        i = tf.placeholder(tf.int32, [2])
        assert inferred.dtype is tf.bfloat16
        with tf.Session() as sess:
            assert sess.run(c) == float.fromhex("0x1.9Ap-4")       # 0.1 in bfloat16
            fed = sess.run(p, {p: np.array([0.1, 3.0], np.float32)})   # rounded on the way in
            assert fed.dtype == BF16 and fed[0] == ml_dtypes.bfloat16(0.1)
            widened = sess.run(f, {f: bf16([0.1, 3.0])})              # lossless
            assert widened.dtype == np.float32 and widened[0] == np.float32(fed[0])
            with pytest.raises(errors.InvalidArgumentError,
                               match="Cannot feed value of dtype bfloat16 to Tensor .* of "
                                     "dtype int32"):
                sess.run(i, {i: bf16([1.0, 2.0])})
        with pytest.raises(TypeError, match="has type float32 that does not match type "
                                            "bfloat16"):
            c + tf.constant(1.0)


def test_bfloat16_variables_save_and_restore_bit_for_bit(tmp_path):
    # NumPy alone would write bfloat16 to the .npz as raw 'V2' bytes, read back as void
    values = bf16([0.1, -2.5, 3e38, np.inf])
    with tf.Graph().as_default():
        w = tf.Variable(values, name="w")
        assert w.dtype is tf.bfloat16
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            path = tf.train.Saver().save(sess, str(tmp_path / "model"))
    with tf.Graph().as_default():
        w = tf.Variable(tf.zeros([4], tf.bfloat16), name="w")
        with tf.Session() as sess:
            tf.train.Saver().restore(sess, path)
            restored = sess.run(w)
    assert restored.dtype == BF16
    assert restored.tobytes() == values.tobytes()
    assert tf.train.load_variable(path, "w").dtype == BF16


# -- ops against float32 NumPy ----------------------------------------------------------


def run_bf16(device, build, *arrays):
    """``build(*placeholders)`` on ``device`` fed ``arrays`` (bfloat16); its
    outputs' values."""
    with tf.device(device):
        feeds = [tf.placeholder(tf.bfloat16, array.shape) for array in arrays]
        outputs = build(*feeds)
    with tf.Session() as sess:
        return sess.run(outputs, dict(zip(feeds, arrays)))


def assert_within(got, want, allowed, what):
    assert got.dtype == BF16, f"{what}: {got.dtype}"
    error = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(np.argmax(error - allowed), error.shape)
    assert np.all(error <= allowed), \
        f"{what}: error {error[worst]} > {allowed[worst]} at {worst}"


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


# (name, op, float32 reference, magnitude of the terms, roundings)
ELEMENTWISE = [
    ("exp", tf.exp, np.exp, np.exp, 1),
    ("tanh", tf.tanh, np.tanh, lambda x: np.abs(np.tanh(x)), 1),
    ("sigmoid", tf.sigmoid, sigmoid, sigmoid, 1),
    ("square", tf.square, np.square, np.square, 1),
    ("relu", tf.nn.relu, lambda x: np.maximum(x, 0), lambda x: np.maximum(x, 0), 1),
    ("half", lambda x: x * 0.5, lambda x: x * np.float32(0.5), lambda x: np.abs(x) / 2, 1),
    # |x| + 0.5 is rounded too (relative U in, U / 2 out of the rsqrt): two roundings
    ("rsqrt", lambda x: tf.rsqrt(tf.abs(x) + 0.5), lambda x: 1 / np.sqrt(np.abs(x) + 0.5),
     lambda x: 1 / np.sqrt(np.abs(x) + 0.5), 2),
]


@pytest.mark.parametrize("name, op, reference, magnitude, roundings", ELEMENTWISE,
                         ids=[case[0] for case in ELEMENTWISE])
def test_elementwise_ops_round_once(name, op, reference, magnitude, roundings, op_device,
                                    rng):
    x = bf16(rng.standard_normal((6, 50)) * 2)
    wide = x.astype(np.float32)
    (got,) = run_bf16(op_device, lambda t: [op(t)], x)
    # a few float32 ulps of the function itself (exp, tanh), in both
    assert_within(got, reference(wide), bound(magnitude(wide), roundings, 4), name)


def test_matmul_of_float32_data_is_within_three_roundings(op_device, rng):
    a = rng.standard_normal((16, 40)).astype(np.float32)
    b = rng.standard_normal((40, 24)).astype(np.float32)
    with tf.device(op_device):
        product = tf.matmul(tf.cast(a, tf.bfloat16), tf.cast(b, tf.bfloat16))
    with tf.Session() as sess:
        got = sess.run(product)
    # a and b rounded to bfloat16, then the float32 product rounded once
    allowed = bound(np.abs(a) @ np.abs(b), roundings=3, float32_terms=40)
    assert_within(got, a @ b, allowed, "matmul")


def test_convolution_accumulates_in_float32(op_device, rng):
    # 16 channels, 3x3, stride 1: where the compiled kernels run Winograd for float32
    x = bf16(rng.standard_normal((2, 8, 8, 16)))
    w = bf16(rng.standard_normal((3, 3, 16, 8)) * 0.2)
    (got,) = run_bf16(op_device, lambda xs, ws: [tf.nn.conv2d(xs, ws, [1, 1, 1, 1], "SAME")],
                      x, w)
    # (Winograd's own float32 error, a few 1e-6 of the largest output, is far
    # inside one bfloat16 rounding)
    want = conv_reference(x.astype(np.float64), w.astype(np.float64))
    magnitude = conv_reference(np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)))
    assert_within(got, want, bound(magnitude, 1, 9 * 16), "conv2d")


def conv_reference(x, w):
    """SAME, stride 1, 3x3: y = the sum over taps of shifted x @ w[tap]."""
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    height, width = x.shape[1:3]
    return sum(padded[:, i:i + height, j:j + width] @ w[i, j]
               for i in range(3) for j in range(3))


def test_reductions_accumulate_in_float32(op_device, rng):
    # NOTE: NumPy sums bfloat16 in bfloat16: np.ones(1000, bfloat16).sum() is 256.
    x = bf16(rng.uniform(0.5, 1.5, (4, 1000)))
    wide = x.astype(np.float64)
    total, mean, ones = run_bf16(op_device, lambda t: [
        tf.reduce_sum(t, axis=1), tf.reduce_mean(t), tf.reduce_sum(tf.ones_like(t))], x)
    magnitude = np.abs(wide).sum(axis=1)
    assert_within(total, wide.sum(axis=1), bound(magnitude, 1, 1000), "reduce_sum")
    assert_within(mean, np.float64(wide.mean()), bound(np.abs(wide).mean(), 1, 4000), "mean")
    assert ones == 4000


def test_softmax_and_cross_entropy_in_float32(op_device, rng):
    logits = bf16(rng.standard_normal((8, 10)) * 3)
    labels = rng.integers(0, 10, 8)
    z = logits.astype(np.float64)
    shifted = z - z.max(axis=1, keepdims=True)
    log_total = np.log(np.exp(shifted).sum(axis=1))
    probs = np.exp(shifted - log_total[:, None])

    def build(t):
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=t)
        (grad,) = tf.gradients(tf.reduce_sum(loss), [t])
        return [tf.nn.softmax(t), loss, grad]
    softmax, loss, grad = run_bf16(op_device, build, logits)
    rows = np.arange(8)
    assert_within(softmax, probs, bound(probs, 1, 12), "softmax")
    # loss = log-sum-exp - z[label]: terms of magnitude |lse| + |z[label]|
    lse = log_total + z.max(axis=1)
    assert_within(loss, lse - z[rows, labels],
                  bound(np.abs(lse) + np.abs(z[rows, labels]), 1, 12), "cross-entropy")
    one_hot = np.eye(10)[labels]
    assert_within(grad, probs - one_hot, bound(probs + one_hot, 2, 12), "its gradient")


def test_batch_norm_statistics_are_float32_exact(op_device, rng):
    x = bf16(rng.standard_normal((64, 6)) * 3 + 10)
    gamma = np.linspace(0.5, 2.0, 6).astype(np.float32)
    beta = np.linspace(-1.0, 1.0, 6).astype(np.float32)
    wide = x.astype(np.float64)

    def build(t):
        y, mean, variance = tf.nn.fused_batch_norm(t, gamma, beta, epsilon=1e-3)
        return [y, mean, variance]
    y, mean, variance = run_bf16(op_device, build, x)
    # the statistics: float32, from float32 sums of 64 positive terms (63
    # roundings), then a scaling (and for the variance, the centring and the
    # squares before, the unbiasing after); bfloat16 sums would be off by ~U
    assert mean.dtype == variance.dtype == np.float32
    np.testing.assert_allclose(mean, wide.mean(axis=0), rtol=(63 + 2) * F32)
    np.testing.assert_allclose(variance, wide.var(axis=0, ddof=1), rtol=(63 + 6) * F32)
    normalised = (wide - wide.mean(axis=0)) / np.sqrt(wide.var(axis=0) + 1e-3)
    assert_within(y, normalised * gamma + beta,
                  bound(np.abs(normalised * gamma) + np.abs(beta), 1, 200), "batch norm")


def test_max_pool_is_exact_and_avg_pool_rounds_once(op_device, rng):
    x = bf16(rng.standard_normal((2, 6, 6, 3)))
    wide = x.astype(np.float64)
    windows = wide.reshape(2, 3, 2, 3, 2, 3)
    top, mean = run_bf16(op_device, lambda t: [
        tf.nn.max_pool(t, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"),
        tf.nn.avg_pool(t, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")], x)
    assert top.dtype == BF16
    np.testing.assert_array_equal(top.astype(np.float64), windows.max(axis=(2, 4)))
    assert_within(mean, windows.mean(axis=(2, 4)),
                  bound(np.abs(windows).mean(axis=(2, 4)), 1, 4), "avg_pool")


# -- the compiled kernels and Winograd never see bfloat16 ---------------------------------


def test_the_compiled_kernels_and_winograd_refuse_bfloat16_arrays():
    x = np.zeros((2, 8, 8, 16), BF16)
    w = np.zeros((3 * 3 * 16, 16), BF16)
    lay = _layout(8, 8, 3, 3, 1, 1, "SAME")
    assert not native.float_arrays(x, w)
    assert not native.im2col(x, lay, np.zeros((128, 144), BF16))
    assert not winograd.applies(x, w, lay, 16, 8, 8)
    pool = _layout(8, 8, 2, 2, 2, 2, "VALID")
    assert not native.max_pool(x, pool, np.zeros((2, 4, 4, 16), BF16),
                               np.zeros((2, 4, 4, 16), np.uint8))
    if native.available():      # the same arrays in float32 are taken
        assert native.float_arrays(x.astype(np.float32), w.astype(np.float32))


class _DtypeSpy:
    """Stands in for the compiled module: records (kernel, argument index,
    dtype) of every array handed to it, then calls the real kernel."""

    def __init__(self, compiled):
        self.compiled, self.seen = compiled, []

    def __getattr__(self, name):
        kernel = getattr(self.compiled, name)

        def call(*args):
            self.seen += [(name, index, arg.dtype) for index, arg in enumerate(args)
                          if isinstance(arg, np.ndarray)]
            return kernel(*args)
        return call


def test_a_bfloat16_conv_net_hands_the_compiled_kernels_float32(monkeypatch, rng):
    if not native.available():
        pytest.skip("the compiled kernels are not built or are switched off")
    spy = _DtypeSpy(native._compiled)
    monkeypatch.setattr(native, "_compiled", spy)
    x = bf16(rng.standard_normal((4, 8, 8, 16)))
    w = bf16(rng.standard_normal((3, 3, 16, 16)) * 0.1)

    def build(xs, ws):
        y = tf.nn.max_pool(tf.nn.relu(tf.nn.conv2d(xs, ws, [1, 1, 1, 1], "SAME")),
                           [1, 2, 2, 1], [1, 2, 2, 1], "VALID")
        return tf.gradients(tf.reduce_sum(y * y), [xs, ws])
    grad_x, grad_w = run_bf16("/cpu:0", build, x, w)
    assert grad_x.dtype == grad_w.dtype == BF16
    kernels = {name for name, _, _ in spy.seen}
    # Winograd: one call per thread's part (a vector path), else its kernels block by block
    assert "max_pool" in kernels and kernels & {"winograd_conv", "winograd_input"}, kernels
    # the data are float32 (winner bits uint8); the filter transform's matrix,
    # winograd_filter's first array, is float64 whatever the data
    data = {dtype for name, index, dtype in spy.seen if (name, index) != ("winograd_filter", 1)}
    assert data <= {np.dtype(np.float32), np.dtype(np.uint8)}


# -- kernel tables and the GPU mapping ---------------------------------------------------


def fake_ctx(op_type="MatMul", dtype=tf.bfloat16, device_name="/device:GPU:0"):
    tensor = types.SimpleNamespace(dtype=dtype)
    op = types.SimpleNamespace(name="product", type=op_type, inputs=[tensor, tensor],
                               op_def=types.SimpleNamespace(shape_only_inputs=()))
    return KernelContext(op=op, attrs={}, output_dtypes=[np.dtype(dtype.as_numpy_dtype)],
                         device=types.SimpleNamespace(name=device_name),
                         resource=None)


def test_bfloat16_ops_compute_in_float32_and_round_their_outputs():
    seen = {}

    def make_product(ctx):
        seen["output_dtypes"] = ctx.output_dtypes

        def product(a, b):
            seen["inputs"] = (a.dtype, b.dtype)
            return a @ b
        return product
    table = bfloat16_kernels.with_bfloat16({"MatMul": make_product})
    product = table["MatMul"](fake_ctx())(bf16([[1.0, 2.0]]), bf16([[3.0], [1 / 3]]))
    assert seen == {"output_dtypes": [np.dtype(np.float32)],
                    "inputs": (np.dtype(np.float32), np.dtype(np.float32))}
    assert product.dtype == BF16
    # an op without bfloat16 gets the kernel itself
    assert table["MatMul"](fake_ctx(dtype=tf.float32)).__name__ == "product"


def test_a_backend_without_bfloat16_refuses_it_by_op_device_and_reason():
    reason = cupy_bfloat16.unsupported_reason(types.SimpleNamespace(
        __version__="13.6.0", add=types.SimpleNamespace(types=["ee->e", "ff->f"])))
    assert reason == ("CuPy 13.6.0 has no bfloat16 dtype (its ufuncs have no bfloat16 "
                      "loops): bfloat16 on a GPU needs CuPy >= 14 with the ml_dtypes package")
    table = bfloat16_kernels.with_bfloat16({"MatMul": lambda ctx: np.matmul,
                                            "Reshape": lambda ctx: np.reshape},
                                           unsupported=reason)
    for op_type in ("MatMul", "Reshape"):
        with pytest.raises(errors.UnimplementedError,
                           match=rf"op 'product' \({op_type}\) has bfloat16 tensors, which "
                                 rf"/device:GPU:0 cannot hold: CuPy 13.6.0 has no bfloat16"):
            table[op_type](fake_ctx(op_type))
    assert table["MatMul"](fake_ctx(dtype=tf.float32)) is np.matmul


def test_the_installed_cupy_holds_bfloat16_as_the_gpu_kernels_expect():
    cupy = pytest.importorskip("cupy")
    assert cupy_bfloat16.unsupported_reason(cupy) is None, cupy.__version__
    loops = {name: getattr(cupy, name).types for name in ("add", "multiply", "exp", "less")}
    assert "EE->E" in loops["add"] and "E->E" in loops["exp"] and "EE->?" in loops["less"]
    assert BF16.char == "E"
    from towerflow.backends import cupy_backend
    # the GPU table: NCCL sums bfloat16 itself (ncclBfloat16 = 9); the rest as on the CPU
    assert "NcclAllReduce" in cupy_bfloat16.GPU_NATIVE_BFLOAT16_KERNELS
    assert tf.parallel.nccl.NCCL_DTYPES["bfloat16"] == 9
    assert set(cupy_backend.KERNELS) >= set(bfloat16_kernels.NATIVE_BFLOAT16_KERNELS)
