"""The NN kernels (conv, pooling, softmax cross-entropy, fused batch norm),
called directly, against naive loop references, float64 central differences
and, where PyTorch is installed, PyTorch as a second oracle."""

import itertools
import math
import types

import numpy as np
import pytest

from towerflow import errors
from towerflow.backends import native
from towerflow.backends.nn_kernels import build_nn_kernels

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed: "
                                 "no second oracle")

KERNELS = build_nn_kernels(np)


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def kernel_path(request, monkeypatch):
    """Every test twice: with the compiled window kernels (native.py) where they
    are built and apply, and with the NumPy kernels alone."""
    if request.param == "numpy":
        monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    elif not native.available():
        pytest.skip("towerflow.backends._native is not built: the NumPy run covers it")
    return request.param
TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-10), np.float32: dict(rtol=1e-4, atol=1e-4)}

# (x shape, filter shape, strides, padding)
CONV_CASES = [
    ((1, 5, 5, 2), (1, 1, 2, 3), (1, 1), "VALID"),
    ((3, 7, 7, 2), (1, 1, 2, 3), (2, 2), "SAME"),
    ((1, 6, 6, 2), (2, 2, 2, 3), (2, 2), "VALID"),
    ((1, 8, 8, 1), (2, 2, 1, 2), (2, 2), "SAME"),
    ((3, 7, 7, 2), (3, 3, 2, 4), (1, 1), "SAME"),
    ((1, 7, 7, 3), (3, 3, 3, 2), (2, 2), "SAME"),
    ((1, 7, 7, 2), (3, 3, 2, 3), (3, 3), "VALID"),
    ((3, 7, 6, 1), (5, 5, 1, 2), (1, 2), "SAME"),
    ((1, 7, 7, 2), (5, 5, 2, 2), (2, 1), "VALID"),
    ((1, 4, 4, 2), (5, 5, 2, 2), (1, 1), "SAME"),
]
# (x shape, ksize, strides, padding)
POOL_CASES = [
    ((1, 4, 4, 2), (2, 2), (2, 2), "VALID"),
    ((3, 7, 7, 2), (2, 2), (2, 2), "VALID"),
    ((1, 8, 8, 1), (2, 2), (2, 2), "SAME"),
    ((3, 7, 7, 2), (2, 2), (2, 2), "SAME"),
    ((1, 7, 7, 3), (3, 3), (1, 1), "SAME"),
    ((3, 7, 7, 2), (3, 3), (2, 2), "SAME"),
    ((1, 7, 6, 2), (3, 3), (2, 2), "VALID"),
    ((1, 5, 5, 1), (5, 5), (1, 1), "SAME"),
    ((1, 6, 6, 2), (1, 1), (2, 2), "VALID"),
    ((1, 6, 7, 1), (2, 3), (1, 2), "SAME"),
]
FLOATS = [np.float64, np.float32]


def kernel(name, attrs=None, output_dtypes=(np.float64,), table=KERNELS):
    ctx = types.SimpleNamespace(attrs=attrs or {}, op=None, resource=lambda key, make: make(),
                                output_dtypes=[np.dtype(d) for d in output_dtypes])
    return table[name](ctx)


def call(name, attrs, *inputs, output_dtypes=None):
    """Run one kernel; check it leaves its inputs untouched and keeps their dtype."""
    dtype = inputs[0].dtype
    before = [np.copy(a) for a in inputs]
    result = kernel(name, attrs, output_dtypes or [dtype] * 5)(*inputs)
    for array, original in zip(inputs, before):
        np.testing.assert_array_equal(array, original, err_msg=f"{name} wrote an input")
    outputs = result if isinstance(result, tuple) else (result,)
    if output_dtypes is None:  # every float output keeps the input dtype (not MaxPool's winner)
        floats = [out for out in outputs if out.dtype.kind == "f"]
        assert all(out.dtype == dtype for out in floats), [out.dtype for out in outputs]
    return result


def close(actual, expected, dtype):
    np.testing.assert_allclose(actual, expected, **TOLERANCE[dtype])


def random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def distinct(shape, seed=0):
    """Values with gaps of at least 1 / size: no ties, safe for finite differences."""
    return np.random.default_rng(seed).permutation(math.prod(shape)).reshape(shape) / 7.0


def numeric_grad(forward, inputs, index, weights, eps=1e-6):
    """d sum(forward(*inputs) * weights) / d inputs[index], by float64 central differences."""
    inputs = [np.array(a, dtype=np.float64) for a in inputs]
    target, grad = inputs[index], np.zeros(inputs[index].shape)
    for pos in np.ndindex(target.shape):
        original = target[pos]
        target[pos] = original + eps
        up = np.sum(forward(*inputs) * weights)
        target[pos] = original - eps
        down = np.sum(forward(*inputs) * weights)
        target[pos] = original
        grad[pos] = (up - down) / (2 * eps)
    return grad


# -- naive references: explicit loops over windows --------------------------------------


def geometry(size, window, stride, padding):
    """(out size, padding before) by TensorFlow's rules."""
    if padding == "VALID":
        return (size - window) // stride + 1, 0
    out = math.ceil(size / stride)
    return out, max((out - 1) * stride + window - size, 0) // 2


def windows(height, width, window, strides, padding):
    """(OH, OW, {(oh, ow): [(i, j, ih, iw) of real cells, row-major]})."""
    out_h, top = geometry(height, window[0], strides[0], padding)
    out_w, left = geometry(width, window[1], strides[1], padding)
    cells = {}
    for oh in range(out_h):
        for ow in range(out_w):
            cells[oh, ow] = [(i, j, oh * strides[0] + i - top, ow * strides[1] + j - left)
                             for i in range(window[0]) for j in range(window[1])
                             if 0 <= oh * strides[0] + i - top < height
                             and 0 <= ow * strides[1] + j - left < width]
    return out_h, out_w, cells


def ref_conv(x, w, strides, padding):
    """(y, patches, dx_of(g), dw_of(g)) of a convolution, by loops."""
    n, height, width, c = x.shape
    kh, kw, _, o = w.shape
    out_h, out_w, cells = windows(height, width, (kh, kw), strides, padding)
    y, patches = np.zeros((n, out_h, out_w, o)), np.zeros((n, out_h, out_w, kh, kw, c))
    for b, ((oh, ow), taps) in itertools.product(range(n), cells.items()):
        for i, j, ih, iw in taps:
            patches[b, oh, ow, i, j] = x[b, ih, iw]
            y[b, oh, ow] += x[b, ih, iw] @ w[i, j]

    def grads(g):
        dx, dw = np.zeros(x.shape), np.zeros(w.shape)
        for b, ((oh, ow), taps) in itertools.product(range(n), cells.items()):
            for i, j, ih, iw in taps:
                dx[b, ih, iw] += w[i, j] @ g[b, oh, ow]
                dw[i, j] += np.outer(x[b, ih, iw], g[b, oh, ow])
        return dx, dw
    return y, patches.reshape(n * out_h * out_w, -1), grads


def ref_pool(kind, x, ksize, strides, padding, g=None):
    """(y, dx): max or mean over each window's real cells; the max's gradient
    goes to the window's first maximum, row-major."""
    n, height, width, c = x.shape
    out_h, out_w, cells = windows(height, width, ksize, strides, padding)
    y, dx = np.zeros((n, out_h, out_w, c)), np.zeros(x.shape)
    g = np.zeros(y.shape) if g is None else g
    for b, ch, ((oh, ow), taps) in itertools.product(range(n), range(c), cells.items()):
        values = [x[b, ih, iw, ch] for _, _, ih, iw in taps]
        if kind == "max":
            y[b, oh, ow, ch] = max(values)
            receivers, share = [taps[values.index(max(values))]], 1.0
        else:
            y[b, oh, ow, ch] = sum(values) / len(values)
            receivers, share = taps, 1.0 / len(values)
        for _, _, ih, iw in receivers:
            dx[b, ih, iw, ch] += g[b, oh, ow, ch] * share
    return y, dx


def ref_cross_entropy(logits, labels):
    loss, backprop = np.zeros(len(logits)), np.zeros(logits.shape)
    for row, (z, p) in enumerate(zip(logits, labels)):
        log_total = math.log(sum(math.exp(v) for v in z))
        loss[row] = sum(-pk * (zk - log_total) for zk, pk in zip(z, p))
        backprop[row] = [math.exp(zk - log_total) - pk for zk, pk in zip(z, p)]
    return loss, backprop


# -- convolution -----------------------------------------------------------------------

CONV_IDS = [f"{x}*{w}/s{s[0]}{s[1]}/{p}" for x, w, s, p in CONV_CASES]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("x_shape, w_shape, strides, padding", CONV_CASES, ids=CONV_IDS)
def test_conv2d_and_its_backprops_match_loops(x_shape, w_shape, strides, padding, dtype):
    x, w = random(x_shape, 1), random(w_shape, 2)
    y_ref, patches_ref, grads_ref = ref_conv(x, w, strides, padding)
    g = random(y_ref.shape, 3)
    dx_ref, dw_ref = grads_ref(g)
    attrs = {"strides": strides, "padding": padding}
    x, w, g = x.astype(dtype), w.astype(dtype), g.astype(dtype)

    y, patches = call("Conv2D", attrs, x, w)
    close(y, y_ref, dtype)
    close(patches, patches_ref, dtype)
    dx = call("Conv2DBackpropInput", attrs, x, w, g)
    dw = call("Conv2DBackpropFilter", {"filter_shape": w_shape}, patches, g)
    close(dx, dx_ref, dtype)
    close(dw, dw_ref, dtype)


@pytest.mark.parametrize("x_shape, w_shape, strides, padding", CONV_CASES[::2],
                         ids=CONV_IDS[::2])
def test_conv2d_backprops_match_finite_differences(x_shape, w_shape, strides, padding):
    attrs = {"strides": strides, "padding": padding}
    x, w = random(x_shape, 4), random(w_shape, 5)
    forward = kernel("Conv2D", attrs)
    y, patches = forward(x, w)
    weights = random(y.shape, 6)

    def conv(*inputs):
        return forward(*inputs)[0]
    np.testing.assert_allclose(call("Conv2DBackpropInput", attrs, x, w, weights),
                               numeric_grad(conv, [x, w], 0, weights), atol=1e-7)
    np.testing.assert_allclose(call("Conv2DBackpropFilter", {"filter_shape": w_shape},
                                    patches, weights),
                               numeric_grad(conv, [x, w], 1, weights), atol=1e-7)


@pytest.mark.parametrize("w_shape, strides", [((1, 1, 3, 4), (1, 1)), ((3, 3, 3, 4), (2, 2))])
def test_patches_times_the_filter_matrix_is_the_output(w_shape, strides):
    x, w = random((2, 7, 7, 3), 7).astype(np.float32), random(w_shape, 8).astype(np.float32)
    y, patches = call("Conv2D", {"strides": strides, "padding": "SAME"}, x, w)
    w2d = w.reshape(-1, 4)
    # the kernel's GEMM may sum in another order than NumPy's: each within depth
    # * eps/2 * sum|products| of the exact sum (Higham), so within twice that
    bound = w2d.shape[0] * np.finfo(np.float32).eps * (np.abs(patches) @ np.abs(w2d))
    assert np.all(np.abs(y.reshape(bound.shape) - patches @ w2d) <= bound)
    assert np.shares_memory(patches, x) == (w_shape[0] == 1)   # 1x1 stride 1: x is a view


class NoStrideTricks:
    """NumPy without numpy.lib: stands in for an array module with no as_strided."""

    lib = None

    def __getattr__(self, name):
        return getattr(np, name)


@pytest.mark.parametrize("x_shape, w_shape, strides, padding", CONV_CASES[3:6],
                         ids=CONV_IDS[3:6])
def test_conv2d_without_as_strided_builds_the_same_patches(x_shape, w_shape, strides, padding):
    x, w = random(x_shape, 70), random(w_shape, 71)
    conv = kernel("Conv2D", {"strides": strides, "padding": padding},
                  table=build_nn_kernels(NoStrideTricks()))
    y, patches = conv(x, w)
    y_ref, patches_ref, _ = ref_conv(x, w, strides, padding)
    close(y, y_ref, np.float64)
    close(patches, patches_ref, np.float64)


# -- pooling ---------------------------------------------------------------------------

POOL_IDS = [f"{x}/k{k[0]}{k[1]}/s{s[0]}{s[1]}/{p}" for x, k, s, p in POOL_CASES]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("x_shape, ksize, strides, padding", POOL_CASES, ids=POOL_IDS)
def test_pools_and_their_grads_match_loops(x_shape, ksize, strides, padding, kind, dtype):
    x = distinct(x_shape) - 3.0     # negative values: padding must not win the max
    attrs = {"ksize": ksize, "strides": strides, "padding": padding}
    y_ref, _ = ref_pool(kind, x, ksize, strides, padding)
    g = random(y_ref.shape, 9)
    _, dx_ref = ref_pool(kind, x, ksize, strides, padding, g)
    x, g = x.astype(dtype), g.astype(dtype)
    if kind == "max":
        y, winner = call("MaxPool", attrs, x)
        dx = call("MaxPoolGrad", attrs, x, winner, g)
    else:
        y = call("AvgPool", attrs, x)
        dx = call("AvgPoolGrad", attrs, x, g)
    close(y, y_ref, dtype)
    close(dx, dx_ref, dtype)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("x_shape, ksize, strides, padding", POOL_CASES[1::2],
                         ids=POOL_IDS[1::2])
def test_pool_grads_match_finite_differences(x_shape, ksize, strides, padding, kind):
    attrs = {"ksize": ksize, "strides": strides, "padding": padding}
    x = distinct(x_shape, 10)
    pool = kernel("MaxPool" if kind == "max" else "AvgPool", attrs)
    if kind == "max":
        max_pool, pool = pool, lambda x: max_pool(x)[0]
    y = pool(x)
    weights = random(y.shape, 11)
    dx = (call("MaxPoolGrad", attrs, x, call("MaxPool", attrs, x)[1], weights)
          if kind == "max" else call("AvgPoolGrad", attrs, x, weights))
    np.testing.assert_allclose(dx, numeric_grad(pool, [x], 0, weights), atol=1e-7)


@pytest.mark.parametrize("x_shape, ksize, strides, padding", POOL_CASES, ids=POOL_IDS)
def test_max_pool_grad_breaks_ties_towards_the_first_maximum(x_shape, ksize, strides, padding):
    x = np.random.default_rng(12).integers(0, 2, x_shape).astype(np.float32)
    attrs = {"ksize": ksize, "strides": strides, "padding": padding}
    y, winner = call("MaxPool", attrs, x)
    g = random(y.shape, 13).astype(np.float32)
    _, dx_ref = ref_pool("max", x.astype(np.float64), ksize, strides, padding, g)
    close(call("MaxPoolGrad", attrs, x, winner, g), dx_ref, np.float32)


def test_max_pool_grad_keeps_an_infinite_gradient_on_the_maximum():
    attrs = {"ksize": (2, 2), "strides": (2, 2), "padding": "VALID"}
    x = np.array([[1.0, 2.0], [3.0, 0.0]]).reshape(1, 2, 2, 1)
    _, winner = call("MaxPool", attrs, x)
    dx = call("MaxPoolGrad", attrs, x, winner, np.full((1, 1, 1, 1), np.inf))
    np.testing.assert_array_equal(dx[0, :, :, 0], [[0.0, 0.0], [np.inf, 0.0]])


def test_same_avg_pool_averages_real_cells_only():
    x = np.arange(9.0).reshape(1, 3, 3, 1)
    y = call("AvgPool", {"ksize": (2, 2), "strides": (2, 2), "padding": "SAME"}, x)
    np.testing.assert_allclose(y[0, :, :, 0], [[2.0, 3.5], [6.5, 8.0]])


# -- softmax cross-entropy -----------------------------------------------------------------


def soft_labels(shape, seed):
    weights = np.random.default_rng(seed).random(shape)
    return weights / weights.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1, 2), (3, 5), (4, 10)])
def test_softmax_cross_entropy_matches_loops(shape, dtype):
    logits, labels = random(shape, 14) * 3, soft_labels(shape, 15)
    loss_ref, backprop_ref = ref_cross_entropy(logits, labels)
    loss, backprop = call("SoftmaxCrossEntropyWithLogits", {},
                          logits.astype(dtype), labels.astype(dtype))
    close(loss, loss_ref, dtype)
    close(backprop, backprop_ref, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
def test_sparse_softmax_cross_entropy_matches_the_dense_one(label_dtype, dtype):
    logits, labels = random((5, 4), 16).astype(dtype), np.array([0, 3, 1, 1, 2], label_dtype)
    loss, backprop = call("SparseSoftmaxCrossEntropyWithLogits", {}, logits, labels)
    loss_ref, backprop_ref = ref_cross_entropy(logits.astype(np.float64), np.eye(4)[labels])
    close(loss, loss_ref, dtype)
    close(backprop, backprop_ref, dtype)


def test_cross_entropy_backprop_matches_finite_differences():
    logits, labels, weights = random((3, 6), 17), soft_labels((3, 6), 18), random(3, 19)
    forward = kernel("SoftmaxCrossEntropyWithLogits")
    _, backprop = forward(logits, labels)
    numeric = numeric_grad(lambda z: forward(z, labels)[0], [logits], 0, weights)
    np.testing.assert_allclose(backprop * weights[:, None], numeric, atol=1e-8)


def test_cross_entropy_is_stable_for_huge_logits():
    logits = np.array([[1000.0, 0.0, -1000.0]], np.float32)
    loss, backprop = call("SoftmaxCrossEntropyWithLogits", {}, logits,
                          np.array([[0.0, 1.0, 0.0]], np.float32))
    close(loss, [1000.0], np.float32)
    close(backprop, [[1.0, -1.0, 0.0]], np.float32)


@pytest.mark.parametrize("bad", [4, -1])
def test_sparse_labels_out_of_range_name_the_value_and_the_classes(bad):
    run = kernel("SparseSoftmaxCrossEntropyWithLogits")
    with pytest.raises(errors.InvalidArgumentError, match=rf"label value of {bad}\b.*\[0, 4\)"):
        run(np.zeros((3, 4)), np.array([0, bad, 2]))


# -- fused batch norm ------------------------------------------------------------------------

EPSILON = 1e-3


def ref_batch_norm(x, scale, offset):
    axes = tuple(range(x.ndim - 1))
    mean, variance = x.mean(axis=axes), x.var(axis=axes)
    return (x - mean) / np.sqrt(variance + EPSILON) * scale + offset, mean, variance


def ref_batch_norm_grad(g, x, scale):
    """The textbook training backward, per channel."""
    dx, rows = np.zeros(x.shape), x.size // x.shape[-1]
    for ch in range(x.shape[-1]):
        xc, gc = x[..., ch], g[..., ch]
        inv_std = 1.0 / math.sqrt(xc.var() + EPSILON)
        xhat, dxhat = (xc - xc.mean()) * inv_std, gc * scale[ch]
        dx[..., ch] = inv_std / rows * (rows * dxhat - dxhat.sum() - xhat * (dxhat * xhat).sum())
    return dx


def batch_norm_inputs(shape, seed=20):
    channels = shape[-1]
    return (random(shape, seed) * 2 + 1, random(channels, seed + 1), random(channels, seed + 2),
            random(channels, seed + 3), np.abs(random(channels, seed + 4)) + 0.5)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4, 5)])
def test_fused_batch_norm_training(shape, dtype):
    x, scale, offset, mean, variance = batch_norm_inputs(shape)
    attrs = {"epsilon": EPSILON, "is_training": True}
    y_ref, mean_ref, var_ref = ref_batch_norm(x, scale, offset)
    inputs = [a.astype(dtype) for a in (x, scale, offset, mean, variance)]
    y, batch_mean, batch_var, saved_mean, saved_inv_std = call("FusedBatchNorm", attrs, *inputs)
    rows = x.size // shape[-1]
    close(y, y_ref, dtype)
    close(np.stack([batch_mean, batch_var, saved_mean, saved_inv_std]),
          np.stack([mean_ref, var_ref * rows / (rows - 1), mean_ref,
                    1 / np.sqrt(var_ref + EPSILON)]), dtype)

    g = random(shape, 30)
    dx, dscale, doffset = call("FusedBatchNormGrad", attrs, g.astype(dtype), inputs[0],
                               inputs[1], saved_mean, saved_inv_std)
    axes = tuple(range(len(shape) - 1))
    close(dx, ref_batch_norm_grad(g, x, scale), dtype)
    close(dscale, (g * (y_ref - offset) / scale).sum(axis=axes), dtype)
    close(doffset, g.sum(axis=axes), dtype)


@pytest.mark.parametrize("is_training", [True, False])
def test_fused_batch_norm_inference_and_grads_match_finite_differences(is_training):
    attrs = {"epsilon": EPSILON, "is_training": is_training}
    inputs = list(batch_norm_inputs((2, 3, 2, 3), 40))
    forward = kernel("FusedBatchNorm", attrs, [np.float64] * 5)
    y, batch_mean, batch_var, saved_mean, saved_inv_std = forward(*inputs)
    if not is_training:     # inference: the given statistics, echoed
        x, scale, offset, mean, variance = inputs
        close(y, (x - mean) / np.sqrt(variance + EPSILON) * scale + offset, np.float64)
        close(np.stack([batch_mean, batch_var, saved_inv_std]),
              np.stack([mean, variance, 1 / np.sqrt(variance + EPSILON)]), np.float64)
    weights = random(y.shape, 41)
    grads = call("FusedBatchNormGrad", attrs, weights, inputs[0], inputs[1], saved_mean,
                 saved_inv_std)
    for index, grad in enumerate(grads):       # x, scale, offset
        numeric = numeric_grad(lambda *a: forward(*a)[0], inputs, index, weights)
        np.testing.assert_allclose(grad, numeric, atol=1e-7)


def test_fused_batch_norm_computes_float16_statistics_in_float32():
    x = (random((64, 2), 50) * 30 + 300).astype(np.float16)   # sum of squares overflows fp16
    ones, zeros = np.ones(2, np.float32), np.zeros(2, np.float32)
    dtypes = [np.float16] + [np.float32] * 4
    y, batch_mean, batch_var, _, _ = call(
        "FusedBatchNorm", {"epsilon": EPSILON, "is_training": True}, x, ones, zeros, zeros,
        ones, output_dtypes=dtypes)
    assert y.dtype == np.float16 and batch_mean.dtype == batch_var.dtype == np.float32
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(batch_mean, x64.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(batch_var, x64.var(axis=0, ddof=1), rtol=1e-4)
    np.testing.assert_allclose(y, (x64 - x64.mean(0)) / x64.std(0), atol=1e-2)


# -- PyTorch as a second oracle ------------------------------------------------------------


def to_torch(array):
    """NHWC NumPy -> NCHW torch tensor that records gradients."""
    return torch.from_numpy(np.ascontiguousarray(array.transpose(0, 3, 1, 2))).requires_grad_()


def torch_pad(x_shape, window, strides, padding):
    """F.pad's (left, right, top, bottom) for TensorFlow's padding."""
    pads = []
    for size, k, s in zip(x_shape[1:3], window, strides):
        out, before = geometry(size, k, s, padding)
        total = max((out - 1) * s + k - size, 0) if padding == "SAME" else 0
        pads.append((before, total - before))
    return pads[1] + pads[0]


def from_torch(tensor):
    return tensor.detach().numpy().transpose(0, 2, 3, 1)


@needs_torch
@pytest.mark.parametrize("x_shape, w_shape, strides, padding", CONV_CASES, ids=CONV_IDS)
def test_conv2d_agrees_with_torch(x_shape, w_shape, strides, padding):
    x, w = random(x_shape, 60), random(w_shape, 61)
    attrs = {"strides": strides, "padding": padding}
    y, patches = call("Conv2D", attrs, x, w)
    g = random(y.shape, 62)
    x_t, w_t = to_torch(x), torch.from_numpy(w.transpose(3, 2, 0, 1).copy()).requires_grad_()
    padded = F.pad(x_t, torch_pad(x_shape, w_shape[:2], strides, padding))
    y_t = F.conv2d(padded, w_t, stride=strides)
    y_t.backward(torch.from_numpy(g.transpose(0, 3, 1, 2).copy()))
    close(y, from_torch(y_t), np.float64)
    close(call("Conv2DBackpropInput", attrs, x, w, g), from_torch(x_t.grad), np.float64)
    close(call("Conv2DBackpropFilter", {"filter_shape": w_shape}, patches, g),
          w_t.grad.numpy().transpose(2, 3, 1, 0), np.float64)


@needs_torch
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("x_shape, ksize, strides, padding", POOL_CASES, ids=POOL_IDS)
def test_pools_agree_with_torch(x_shape, ksize, strides, padding, kind):
    x = distinct(x_shape, 63)
    attrs = {"ksize": ksize, "strides": strides, "padding": padding}
    pads = torch_pad(x_shape, ksize, strides, padding)
    x_t = to_torch(x)
    if kind == "max":
        y, winner = call("MaxPool", attrs, x)
        y_t = F.max_pool2d(F.pad(x_t, pads, value=-math.inf), ksize, strides)
    else:
        y = call("AvgPool", attrs, x)
        real = F.avg_pool2d(F.pad(torch.ones_like(x_t), pads), ksize, strides)
        y_t = F.avg_pool2d(F.pad(x_t, pads), ksize, strides) / real
    g = random(y.shape, 64)
    y_t.backward(torch.from_numpy(g.transpose(0, 3, 1, 2).copy()))
    dx = (call("MaxPoolGrad", attrs, x, winner, g) if kind == "max"
          else call("AvgPoolGrad", attrs, x, g))
    close(y, from_torch(y_t), np.float64)
    close(dx, from_torch(x_t.grad), np.float64)


@needs_torch
def test_softmax_cross_entropy_agrees_with_torch():
    logits, labels = random((8, 10), 65) * 4, soft_labels((8, 10), 66)
    loss, backprop = call("SoftmaxCrossEntropyWithLogits", {}, logits, labels)
    logits_t = torch.from_numpy(logits).requires_grad_()
    loss_t = F.cross_entropy(logits_t, torch.from_numpy(labels), reduction="none")
    loss_t.sum().backward()
    close(loss, loss_t.detach().numpy(), np.float64)
    close(backprop, logits_t.grad.numpy(), np.float64)
    sparse_loss, _ = call("SparseSoftmaxCrossEntropyWithLogits", {}, logits,
                          labels.argmax(axis=1))
    close(sparse_loss, F.cross_entropy(torch.from_numpy(logits),
                                       torch.from_numpy(labels.argmax(axis=1)),
                                       reduction="none").numpy(), np.float64)
