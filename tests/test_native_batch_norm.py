"""Training-mode batch norm on the CPU through the compiled kernels
(towerflow/backends/native_batch_norm.py): forward and gradient against the
NumPy kernels of fused_kernels.py in float64, float32 within bounds derived
from float32 rounding, the fused ReLU chains bit for bit against the separate
kernels, the same bits with any thread count, and NumPy's path wherever the
compiled kernels do not apply. (Finite differences on every device:
test_gradients_nn.py's fused_batch_norm cases.)"""

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from towerflow.backends import (
    batch_norm_pool,
    kernels,
    native,
    native_batch_norm,
    numpy_backend,
    window_geometry,
)
from towerflow.backends.cpu_threads import SERIAL, WorkerPool
from towerflow.backends.fused_kernels import _batch_norm_kernels

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")

EPSILON = 1e-3
NUMPY = _batch_norm_kernels(np)
CPU = native_batch_norm.cpu_batch_norm_kernels(NUMPY, numpy_backend.CPU_POOL)
U32 = 2.0 ** -24            # float32's unit roundoff
# 1 row; 1 channel; 3 channels; 33 channels in 2 blocks of partial sums, the
# second ragged; 33 channels over 6 blocks, big enough for the pool to split.
SHAPES = [(1, 5), (7, 1), (2, 3, 5, 3), (2, 45, 17, 33), (4, 40, 33, 33)]


def ctx(dtype, outputs, training=True):
    return SimpleNamespace(attrs={"epsilon": EPSILON, "is_training": training},
                           output_dtypes=[np.dtype(dtype)] * outputs)


def inputs(shape, dtype, seed=0, mean=1.0):
    rng = np.random.default_rng(seed)
    channels = shape[-1]
    x = rng.standard_normal(shape) * 2 + mean
    scale, offset = rng.standard_normal(channels), rng.standard_normal(channels)
    grad = rng.standard_normal(shape)
    return [array.astype(dtype) for array in (x, scale, offset, grad)]


def forward(table, kernel, x, scale, offset):
    channels = x.shape[-1]
    moving = (np.zeros(channels, x.dtype), np.ones(channels, x.dtype))
    return table[kernel](ctx(x.dtype, 5))(x, scale, offset, *moving)


def reference(x, scale, offset, grad, relu=False):
    """NumPy's kernels in float64 on the same values: (forward outputs, gradients)."""
    wide = [array.astype(np.float64) for array in (x, scale, offset, grad)]
    outputs = forward(NUMPY, "FusedBatchNorm", *wide[:3])
    y = np.maximum(outputs[0], 0) if relu else outputs[0]
    masked = wide[3] * (y > 0) if relu else wide[3]
    grads = NUMPY["FusedBatchNormGrad"](ctx(np.float64, 3))(
        masked, wide[0], wide[1], outputs[3], outputs[4])
    return (y,) + tuple(outputs[1:]), grads


@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])
@pytest.mark.parametrize("shape", SHAPES)
def test_float64_matches_the_numpy_kernels(shape, relu):
    x, scale, offset, grad = inputs(shape, np.float64)
    expected, expected_grads = reference(x, scale, offset, grad, relu)
    ours = forward(CPU, "_FusedBatchNormRelu" if relu else "FusedBatchNorm", x, scale, offset)
    for got, want in zip(ours, expected):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    grad_kernel = CPU["_ReluGradBatchNormGrad" if relu else "FusedBatchNormGrad"]
    relu_output = (ours[0],) if relu else ()
    grads = grad_kernel(ctx(np.float64, 3))(grad, *relu_output, x, scale, ours[3], ours[4])
    for got, want in zip(grads, expected_grads):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def assert_within(got, want, bound):
    excess = np.abs(got.astype(np.float64) - want) - bound
    assert excess.max() <= 0, f"off by up to {excess.max():.3g} beyond the bound"


@pytest.mark.parametrize("shape", SHAPES)
def test_float32_forward_is_within_float32_rounding(shape):
    """The sums are float64 (their error is far below float32's); each
    statistic is rounded once to float32 (u = 2^-24 relative), and
    y = (x - mean) * gain + offset makes three float32 roundings on top of
    mean's and gain's: |error| <= 4u (|y| + |gain| (|x - mean| + |mean|))."""
    x, scale, offset, grad = inputs(shape, np.float32)
    (y, mean, variance, _, inv_std), _ = reference(x, scale, offset, grad)
    ours = forward(CPU, "FusedBatchNorm", x, scale, offset)
    assert all(output.dtype == np.float32 for output in ours)
    for got, want in zip((ours[1], ours[2], ours[4]), (mean, variance, inv_std)):
        assert_within(got, want, 2 * U32 * np.abs(want))
    gain = np.abs(scale.astype(np.float64) * inv_std)
    centered = np.abs(x - mean)
    assert_within(ours[0], y, 4 * U32 * (np.abs(y) + gain * (centered + np.abs(mean))))


@pytest.mark.parametrize("shape", SHAPES)
def test_float32_gradient_is_within_float32_rounding(shape):
    """dscale and doffset: float64 sums rounded once (plus the float64 sums'
    own n * 2^-53 of the sum of magnitudes); dx = (g * gain + c * k_c) - k_m
    rounds c = x - mean, the two products, the sum and the difference, and
    its coefficients once each: |error| <= 6u (|g gain| + |c k_c| + |k_m|)."""
    x, scale, offset, grad = inputs(shape, np.float32)
    (_, _, _, mean, inv_std), _ = reference(x, scale, offset, grad)
    mean32, inv_std32 = mean.astype(np.float32), inv_std.astype(np.float32)
    # the float64 reference from the float32 statistics the kernel is given
    wide = [array.astype(np.float64) for array in (x, scale, grad, mean32, inv_std32)]
    dx, dscale, doffset = NUMPY["FusedBatchNormGrad"](ctx(np.float64, 3))(
        wide[2], wide[0], wide[1], wide[3], wide[4])
    ours = CPU["FusedBatchNormGrad"](ctx(np.float32, 3))(grad, x, scale, mean32, inv_std32)
    rows2d, grad2d = wide[0].reshape(-1, x.shape[-1]), wide[2].reshape(-1, x.shape[-1])
    count = rows2d.shape[0]
    sum_error = count * 2.0 ** -53
    centered = rows2d - wide[3]
    assert_within(ours[2], doffset, U32 * np.abs(doffset) + sum_error * np.abs(grad2d).sum(0))
    assert_within(ours[1], dscale, 2 * U32 * np.abs(dscale) +
                  sum_error * np.abs(grad2d * centered).sum(0) * wide[4])
    gain = wide[1] * wide[4]
    k_centered = gain * wide[4] * dscale / count
    k_mean = gain * doffset / count
    bound = 6 * U32 * (np.abs(grad2d * gain) + np.abs(centered * k_centered) + np.abs(k_mean))
    assert_within(ours[0].reshape(-1, x.shape[-1]), dx.reshape(-1, x.shape[-1]), bound)


def test_float32_variance_does_not_cancel_for_a_large_mean():
    """A mean 2e4 times the spread: E[x^2] - E[x]^2 in float32 would keep
    nothing of the variance (float32 spacing at 4e8 is 32)."""
    x, scale, offset, grad = inputs((8, 16, 16, 4), np.float32, mean=2e4)
    (_, _, variance, _, _), _ = reference(x, scale, offset, grad)
    ours = forward(CPU, "FusedBatchNorm", x, scale, offset)
    assert_within(ours[2], variance, 2 * U32 * variance)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fused_relu_chains_equal_the_separate_kernels_bit_for_bit(dtype):
    x, scale, offset, grad = inputs((3, 9, 7, 33), dtype, seed=2)
    grad[0, 0, 0, :4] = np.nan          # on a masked cell a NaN stays NaN (grad * 0)
    plain = forward(CPU, "FusedBatchNorm", x, scale, offset)
    fused = forward(CPU, "_FusedBatchNormRelu", x, scale, offset)
    relu_output = np.maximum(plain[0], 0)
    np.testing.assert_array_equal(fused[0], relu_output)
    for got, want in zip(fused[1:], plain[1:]):
        np.testing.assert_array_equal(got, want)
    stats = (plain[3], plain[4])
    separate = CPU["FusedBatchNormGrad"](ctx(dtype, 3))(
        grad * (relu_output > 0), x, scale, *stats)
    together = CPU["_ReluGradBatchNormGrad"](ctx(dtype, 3))(grad, relu_output, x, scale,
                                                            *stats)
    for got, want in zip(together, separate):
        np.testing.assert_array_equal(got, want)
    assert np.isnan(together[1]).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("workers", [2, 3, 4])
def test_any_thread_count_gives_the_same_bits_run_after_run(workers, dtype):
    """(In float64 another order of the sums would show in the last bits;
    in float32 it would mostly vanish in the rounding.)"""
    x, scale, offset, grad = inputs((4, 40, 33, 33), dtype, seed=3)
    pool = WorkerPool(workers)

    def both(parallel):
        outputs = native_batch_norm.batch_norm_training(x, scale, offset, EPSILON, True,
                                                        parallel)
        grads = native_batch_norm.batch_norm_grad_training(
            grad, outputs[0], x, scale, outputs[3], outputs[4], parallel)
        return outputs + grads

    serial = both(SERIAL)
    for _ in range(3):
        for got, want in zip(both(pool), serial):
            np.testing.assert_array_equal(got, want)


def test_strided_inference_and_float16_inputs_run_the_numpy_kernels():
    x, scale, offset, _ = inputs((4, 6, 6, 8), np.float32, seed=4)
    strided = x[:, ::2]
    assert native_batch_norm.batch_norm_training(strided, scale, offset, EPSILON) is None
    for kernel in ("FusedBatchNorm", "_FusedBatchNormRelu"):
        ours = forward(CPU, kernel, strided, scale, offset)
        numpy = forward(NUMPY, "FusedBatchNorm", strided, scale, offset)
        expected = np.maximum(numpy[0], 0) if kernel != "FusedBatchNorm" else numpy[0]
        np.testing.assert_array_equal(ours[0], expected)
    moving = (np.zeros(8, np.float32), np.ones(8, np.float32))
    inference = CPU["FusedBatchNorm"](ctx(np.float32, 5, training=False))(
        x, scale, offset, *moving)
    np.testing.assert_array_equal(inference[0], NUMPY["FusedBatchNorm"](
        ctx(np.float32, 5, training=False))(x, scale, offset, *moving)[0])
    assert native_batch_norm.batch_norm_training(
        x.astype(np.float16), scale, offset, EPSILON) is None


def test_the_native_switch_turns_the_compiled_kernels_off(monkeypatch):
    x, scale, offset, _ = inputs((2, 5, 5, 3), np.float32, seed=5)
    assert native_batch_norm.batch_norm_training(x, scale, offset, EPSILON) is not None
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    assert native_batch_norm.batch_norm_training(x, scale, offset, EPSILON) is None
    np.testing.assert_array_equal(forward(CPU, "FusedBatchNorm", x, scale, offset)[0],
                                  forward(NUMPY, "FusedBatchNorm", x, scale, offset)[0])


# -- whole training steps ----------------------------------------------------------------


def cifar_step_types(sess):
    return {unit.type for plan_, _ in sess._plans.values() for unit in plan_.units}


@pytest.mark.parametrize("batch", [1, 3])
def test_a_fused_cpu_training_step_equals_the_unfused_one_bit_for_bit(monkeypatch, batch):
    """The cifar10 recipe's network, two steps on /cpu:0: the batch-norm
    chains (and every other CPU fusion) change no bit."""
    from test_gpu_fusion import train_cifar
    results = {}
    for fused in (True, False):
        monkeypatch.setenv("TOWERFLOW_FUSION", "1" if fused else "0")
        losses, values, sess = train_cifar("/cpu:0", batch)
        assert ("_FusedBatchNormRelu" in cifar_step_types(sess)) == fused
        assert ("_ReluGradBatchNormGrad" in cifar_step_types(sess)) == fused
        assert ("_MaxPoolGradReluBatchNormGrad" in cifar_step_types(sess)) == fused
        results[fused] = (losses, values)
    np.testing.assert_array_equal(results[True][0], results[False][0])
    for fused_value, plain_value in zip(results[True][1], results[False][1]):
        np.testing.assert_array_equal(fused_value, plain_value)


def test_a_cpu_training_step_with_and_without_the_compiled_kernels_agrees(monkeypatch):
    """Up to float32 reordering, the budget test_parallel allows towers."""
    from test_gpu_fusion import train_cifar
    from test_parallel import relative_difference
    monkeypatch.setenv("TOWERFLOW_WINOGRAD", "0")
    results = []
    for switch in ("1", "0"):
        monkeypatch.setenv("TOWERFLOW_NATIVE", switch)
        losses, values, _ = train_cifar("/cpu:0", 3)
        results.append((losses, values))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    assert relative_difference(results[0][1], results[1][1]) <= 1e-5


# -- freed memory ------------------------------------------------------------------------


FAULTS_OF_A_SECOND_ARRAY = """
import resource
import numpy as np
from towerflow.backends import numpy_backend
size = (64 << 20) // 8
np.ones(size)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
again = np.ones(size)
assert again[-1] == 1
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_of_a_second_array(retain):
    """Minor page faults of allocating a 64 MiB array again, in a fresh process
    (NOTE: not this one: after hundreds of tests its heap's layout, and other
    tests' threads, made the count depend on the order the suite ran in)."""
    env = dict(os.environ, TOWERFLOW_RETAIN_FREED_MEMORY="1" if retain else "0")
    done = subprocess.run([sys.executable, "-c", FAULTS_OF_A_SECOND_ARRAY], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return int(done.stdout)


@pytest.mark.skipif(not numpy_backend.retain_freed_memory(), reason="not glibc")
def test_a_freed_64_mib_array_is_not_faulted_in_again():
    """Past glibc's largest mmap threshold (32 MiB) an array is mapped afresh
    and page-faulted in again on every allocation unless mmap is off."""
    assert faults_of_a_second_array(retain=True) <= 8
    assert faults_of_a_second_array(retain=False) > 100    # glibc's defaults: mapped again


# -- batch norm + ReLU + max pool --------------------------------------------------------


POOL_TABLE = {**kernels.build_kernels(np, numpy_backend.CPU_POOL), **CPU}
POOL_TABLE.update(batch_norm_pool.batch_norm_relu_pool_kernels(POOL_TABLE,
                                                               numpy_backend.CPU_POOL))


def pool_chain(table, x, scale, offset, ksize, strides, padding):
    """_FusedBatchNormReluPool's outputs from ``table``."""
    attrs = {"epsilon": EPSILON, "is_training": True,
             "pool": {"ksize": ksize, "strides": strides, "padding": padding}}
    dtypes = [x.dtype, np.uint8] + [x.dtype] * 4
    context = SimpleNamespace(attrs=attrs, output_dtypes=[np.dtype(d) for d in dtypes],
                              outputs_used=None)
    channels = x.shape[-1]
    moving = (np.zeros(channels, x.dtype), np.ones(channels, x.dtype))
    return table[batch_norm_pool.KERNEL](context)(x, scale, offset, *moving)


def separate_chain(x, scale, offset, ksize, strides, padding):
    relu = forward(CPU, "_FusedBatchNormRelu", x, scale, offset)
    pool_ctx = SimpleNamespace(attrs={"ksize": ksize, "strides": strides, "padding": padding},
                               output_dtypes=[x.dtype, np.dtype(np.uint8)], outputs_used=None)
    return tuple(POOL_TABLE["MaxPool"](pool_ctx)(relu[0])) + tuple(relu[1:])


POOLS = [((2, 2), (2, 2), "VALID", (4, 8, 8, 33)),      # windows tile the input
         ((2, 2), (2, 2), "VALID", (3, 7, 9, 5)),       # an odd row and column left out
         ((2, 2), (2, 2), "SAME", (2, 6, 6, 70)),        # more channels than a C block
         ((3, 3), (2, 2), "SAME", (2, 7, 7, 3))]         # overlapping: the separate kernels


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ksize, strides, padding, shape", POOLS)
def test_the_pool_chain_equals_the_separate_kernels_bit_for_bit(ksize, strides, padding,
                                                              shape, dtype):
    x, scale, offset, _ = inputs(shape, dtype, seed=6)
    x[0, 0, 0, 0] = np.nan
    x[-1, :2, :2, 1] = x[-1, 0, 0, 1]         # a tie in a window
    fused = pool_chain(POOL_TABLE, x, scale, offset, ksize, strides, padding)
    expected = separate_chain(x, scale, offset, ksize, strides, padding)
    assert len(fused) == len(expected) == 6
    for got, want in zip(fused, expected):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    lay = window_geometry._layout_maker({"ksize": ksize, "strides": strides,
                                         "padding": padding})(x.shape)
    compiled = native_batch_norm.batch_norm_relu_pool_training(
        x, scale, offset, EPSILON, lay, numpy_backend.CPU_POOL)
    assert (compiled is not None) == (ksize == strides)


# -- max pool gradient + ReLU gradient + batch-norm gradient -------------------------------


GRAD_TABLE = {**POOL_TABLE, **batch_norm_pool.pool_grad_batch_norm_grad_kernels(
    POOL_TABLE, numpy_backend.CPU_POOL)}

GRAD_POOLS = [((2, 2), "VALID", (4, 8, 8, 33)),     # 4 vectors of 8 channels and 1 more
              ((2, 2), "VALID", (3, 7, 9, 5)),      # an odd row and column no window covers
              ((2, 3), "VALID", (3, 8, 9, 16)),     # 6 taps, rows and columns unlike
              ((2, 2), "VALID", (4, 40, 34, 33)),   # blocks and thread parts start mid-row
              ((2, 2), "SAME", (2, 6, 6, 70)),      # SAME, tiling: no padding
              ((3, 3), "VALID", (2, 9, 9, 8)),      # 9 taps: more than 8, separate kernels
              ((3, 2), "SAME", (2, 7, 7, 3))]       # overlapping windows: separate kernels


def pooled_gradient_inputs(ksize, strides, padding, shape, dtype):
    """(pool input stand-in, winners, pooled gradient, pooled max, x, scale, saved
    mean, saved inv_std): the forward chain's outputs on x, a gradient with a
    NaN and an infinity, and a tie in a window."""
    x, scale, offset, _ = inputs(shape, dtype, seed=9)
    x[-1, :2, :2, 0] = x[-1, 0, 0, 0]
    pooled, winners, _, _, mean, inv_std = pool_chain(POOL_TABLE, x, scale, offset, ksize,
                                                      strides, padding)
    grad = np.random.default_rng(10).standard_normal(pooled.shape).astype(dtype)
    grad[0, 0, 0, :2] = np.nan, np.inf
    return x, winners, grad, pooled, x, scale, mean, inv_std


def pool_grad_context(ksize, strides, padding, dtype, kernel=batch_norm_pool.GRAD_KERNEL):
    pool = {"ksize": ksize, "strides": strides, "padding": padding}
    if kernel == "_MaxPoolGradRelu":
        return SimpleNamespace(attrs=pool, output_dtypes=[np.dtype(dtype)], outputs_used=None)
    return SimpleNamespace(attrs={"epsilon": EPSILON, "is_training": True, "pool": pool},
                           output_dtypes=[np.dtype(dtype)] * 3, outputs_used=None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ksize, padding, shape", GRAD_POOLS)
def test_the_pool_gradient_chain_equals_the_separate_kernels_bit_for_bit(ksize, padding,
                                                                        shape, dtype):
    strides = (2, 2) if ksize == (3, 2) else ksize
    arrays = pooled_gradient_inputs(ksize, strides, padding, shape, dtype)
    fused = GRAD_TABLE[batch_norm_pool.GRAD_KERNEL](
        pool_grad_context(ksize, strides, padding, dtype))(*arrays)
    (routed,) = GRAD_TABLE["_MaxPoolGradRelu"](
        pool_grad_context(ksize, strides, padding, dtype, "_MaxPoolGradRelu"))(*arrays[:4])
    expected = CPU["FusedBatchNormGrad"](ctx(dtype, 3))(routed, *arrays[4:])
    assert len(fused) == len(expected) == 3
    for got, want in zip(fused, expected):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert np.isnan(fused[0]).any() and np.isfinite(fused[0]).any()
    lay = window_geometry._layout_maker({"ksize": ksize, "strides": strides,
                                         "padding": padding})(shape)
    compiled = [native_batch_norm.batch_norm_grad_after_pool(*arrays[1:], lay, parallel)
                for parallel in (SERIAL, WorkerPool(3))]
    assert (compiled[0] is not None) == (ksize == strides and np.prod(ksize) <= 8)
    if compiled[0] is not None:
        for serial, threaded, want in zip(*compiled, expected):
            np.testing.assert_array_equal(serial, want)
            np.testing.assert_array_equal(threaded, want)


def test_the_pooled_gradient_kernels_refuse_a_geometry_unlike_the_rows():
    arrays = pooled_gradient_inputs((2, 2), (2, 2), "VALID", (2, 4, 4, 8), np.float32)
    _, winners, grad, pooled, x, *_ = arrays
    rows = x.reshape(-1, 8)
    with pytest.raises(ValueError, match=r"pool: its geometry's \(n, h, w, c\) must be"):
        native.batch_norm_sums((32, 8, 32, 0, 1), rows, rows[0], grad, None,
                               np.empty((1, 2, 8)), ((2, 4, 2, 8, 2, 2, 2, 1), winners, pooled))
    with pytest.raises(ValueError, match="pool: code, grad and pooled must be arrays"):
        native.batch_norm_sums((32, 8, 32, 0, 1), rows, rows[0], grad, None,
                               np.empty((1, 2, 8)), ((2, 4, 4, 8, 2, 2, 2, 2), None, pooled))
    with pytest.raises(ValueError, match="grad: expected an array, got None"):
        native.batch_norm_grad_apply((32, 8, 0, 32), None, None, rows,
                                     np.zeros((4, 8), np.float32), np.empty_like(rows))
    with pytest.raises(ValueError, match="windows must tile the input"):
        native.batch_norm_grad_apply((32, 8, 0, 32), grad, None, rows,
                                     np.zeros((4, 8), np.float32), np.empty_like(rows),
                                     ((2, 4, 4, 8, 3, 3, 2, 2), winners, pooled))


def test_the_pooled_gradient_kernels_take_edge_geometries():
    """A block larger than the rows (one block) routes as the rows' own block;
    zero channels write nothing (both crashed the process once: a scratch
    buffer sized by the block, a chunk divided by the channels)."""
    _, winners, grad, pooled, x, *_ = pooled_gradient_inputs((2, 2), (2, 2), "VALID",
                                                            (2, 4, 4, 8), np.float64)
    rows, pool = x.reshape(-1, 8), ((2, 4, 4, 8, 2, 2, 2, 2), winners, pooled)
    sums = [np.empty((1, 2, 8)) for _ in range(2)]
    native.batch_norm_sums((32, 8, 32, 0, 1), rows, rows[0], grad, None, sums[0], pool)
    native.batch_norm_sums((32, 8, 1 << 61, 0, 1), rows, rows[0], grad, None, sums[1], pool)
    np.testing.assert_array_equal(sums[0], sums[1])
    empty = np.empty((5, 0))
    native.batch_norm_grad_apply((5, 0, 0, 5), empty, None, empty, np.empty((4, 0)),
                                 np.empty((5, 0)))


# -- a training flag fed at run time --------------------------------------------------------


def _flagged_steps(training_flag, feed_flag, steps=2, pool=False):
    """Two momentum steps of conv -> batch norm -> ReLU (-> 2x2 max pool) ->
    dense on /cpu:0 with ``training=training_flag`` (True, or a bool
    placeholder fed ``feed_flag``): (losses, variables after, the op types the
    plans ran, fused chains included)."""
    import towerflow as tf
    rng = np.random.default_rng(8)
    images = rng.standard_normal((6, 8, 8, 16)).astype(np.float32)
    labels = rng.integers(0, 4, 6)
    with tf.Graph().as_default(), tf.device("/cpu:0"):
        x = tf.placeholder(tf.float32, images.shape)
        y_true = tf.placeholder(tf.int64, [6])
        flag = tf.placeholder(tf.bool, []) if training_flag is None else training_flag
        h = tf.layers.conv2d(x, 16, 3, padding="same", use_bias=False,
                             kernel_initializer=tf.constant_initializer(
                                 rng.standard_normal((3, 3, 16, 16)) * 0.1))
        h = tf.nn.relu(tf.layers.batch_normalization(h, training=flag, momentum=0.5))
        dense_weights = rng.standard_normal((8 * 8 * 16, 4)) * 0.02
        if pool:
            h, dense_weights = tf.nn.max_pool(h, [1, 2, 2, 1], [1, 2, 2, 1], "VALID"), \
                dense_weights[:4 * 4 * 16]
        logits = tf.layers.dense(tf.reshape(h, [6, -1]), 4,
                                 kernel_initializer=tf.constant_initializer(dense_weights))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y_true, logits=logits))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
        feed = {x: images, y_true: labels}
        if training_flag is None:
            feed[flag] = feed_flag
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            losses = [sess.run([train, loss], feed)[1] for _ in range(steps)]
            return losses, sess.run(tf.global_variables()), cifar_step_types(sess)


@pytest.mark.parametrize("pool", [False, True], ids=["relu", "relu-pool"])
def test_a_fed_true_training_flag_runs_the_compiled_kernels_bit_for_bit(monkeypatch, pool):
    # tf.layers.batch_normalization(x, training=a bool placeholder), TF1 programs'
    # usual switch: fed True, the step is the one built with training=True (the
    # compiled training kernels and the fused chains, the flag read on the host),
    # bit for bit; fed False, the NumPy inference kernels run, as for training=False
    calls = []
    sums = native.batch_norm_sums

    def counted(*args):
        calls.append(args[3] is None)       # forward sums: no gradient
        return sums(*args)
    monkeypatch.setattr(native, "batch_norm_sums", counted)
    fixed = _flagged_steps(True, None, pool=pool)
    fed = _flagged_steps(None, True, pool=pool)
    assert True in calls and False in calls     # forward and gradient sums ran compiled
    chains = {"_FusedBatchNormReluPool", "_MaxPoolGradReluBatchNormGrad"} if pool else \
        {"_FusedBatchNormRelu", "_ReluGradBatchNormGrad"}
    assert chains <= fed[2] and chains <= fixed[2]
    np.testing.assert_array_equal(fed[0], fixed[0])
    for fed_value, fixed_value in zip(fed[1], fixed[1]):
        np.testing.assert_array_equal(fed_value, fixed_value)
    calls.clear()
    inference = _flagged_steps(None, False, pool=pool)
    assert calls == [] and chains <= inference[2]
    np.testing.assert_array_equal(inference[0], _flagged_steps(False, None, pool=pool)[0])
