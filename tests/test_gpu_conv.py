"""The GPU convolution and batch-norm kernels (towerflow/backends/cupy_conv.py).

Without a GPU: each kernel's NumPy reference (ReferenceLauncher) and its
CUDA C run on the CPU (EmulatedLauncher, threads in order and reversed; see
towerflow/simgpu/cuda_emulation.py), each through the GPU kernel makers,
match the NumPy kernels on random inputs (ragged shapes, strides 1-3, SAME
and VALID, float32 and float64) within a bound derived from float32 (or
float64) rounding; every CUDA source compiles with NVRTC; gpu_traffic.py's counts of the new kernels are what
they launch. On a GPU (marker gpu): the CUDA kernels against their
references."""

import os
import sys

import numpy as np
import pytest
from test_gpu_backend import nvrtc_or_skip, real_gpu  # noqa: F401  (real_gpu: the fixture)

import towerflow as tf
from towerflow.backends import KernelContext, cupy_conv, kernel_specs, kernels
from towerflow.backends import gpu_batch_norm_specs as bn_specs
from towerflow.backends import gpu_conv_specs as conv_specs
from towerflow.backends import gpu_implicit_gemm_specs as implicit_specs
from towerflow.backends.window_geometry import _layout
from towerflow.simgpu import cuda_emulation

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

GENERIC = kernels.build_kernels(np)
GPU = cupy_conv.gpu_kernels(np, GENERIC, cupy_conv.ReferenceLauncher())
# The kernels' CUDA C itself, run on the CPU (threads in order, and reversed:
# a missing barrier shows under one order or the other).
NEEDS_COMPILER = pytest.mark.skipif(not cuda_emulation.available(),
                                    reason="no C++ compiler for the CUDA emulation")
LAUNCHER_OBJECTS = {"references": cupy_conv.ReferenceLauncher(),
                    "cuda_c": cupy_conv.EmulatedLauncher(),
                    "cuda_c_reversed": cupy_conv.EmulatedLauncher(reverse=True)}
TABLES = {name: cupy_conv.gpu_kernels(np, GENERIC, launcher)
          for name, launcher in LAUNCHER_OBJECTS.items()}
LAUNCHERS = [pytest.param(name, marks=() if name == "references" else NEEDS_COMPILER)
             for name in TABLES]
RAW_SPECS = [conv_specs.IM2COL, conv_specs.COL2IM, bn_specs.BN_STATS_PARTIALS,
             bn_specs.BN_STATS_FINISH, bn_specs.BN_GRAD_PARTIALS, bn_specs.BN_GRAD_FINISH,
             bn_specs.BN_STATS_FINISH_FED, bn_specs.BN_GRAD_FINISH_FED,
             implicit_specs.IMPLICIT_CONV, implicit_specs.IMPLICIT_INPUT_GRAD,
             implicit_specs.IMPLICIT_FILTER_GRAD_PARTIALS,
             implicit_specs.IMPLICIT_FILTER_GRAD_FINISH]
ELEMENTWISE_SPECS = [bn_specs.BN_APPLY, bn_specs.BN_APPLY_RELU, bn_specs.BN_GRAD_APPLY,
                     bn_specs.BN_GRAD_APPLY_MASKED]


def ctx(attrs, dtype=np.float32, outputs=5):
    return KernelContext(op=None, attrs=attrs, output_dtypes=[np.dtype(dtype)] * outputs,
                         device=None, resource=None)


def eps(dtype):
    return float(np.finfo(dtype).eps)


# -- convolutions -----------------------------------------------------------------------

# (x shape, window, stride, padding): ragged sizes, strides 1-3, windows 1-5,
# one channel, a VALID window that leaves rows unread, padding on one side only.
CONV_CASES = [((3, 7, 9, 5), 3, 1, "SAME"), ((2, 8, 8, 3), 3, 2, "SAME"),
              ((2, 9, 7, 4), 2, 2, "VALID"), ((2, 6, 6, 3), 5, 3, "VALID"),
              ((1, 5, 6, 1), 4, 1, "SAME"), ((2, 5, 5, 2), 1, 1, "SAME"),
              ((2, 7, 5, 3), 1, 2, "VALID"), ((1, 4, 4, 16), 3, 1, "SAME")]


def conv_case(rng, shape, window, stride, padding, dtype, out_channels=4):
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((window, window, shape[3], out_channels)).astype(dtype)
    return x, w, {"strides": (stride, stride), "padding": padding}


def conv_outputs(table, x, w, attrs, grad):
    """(y, dx, dw) from ``table``'s kernels (the filter gradient from its patches)."""
    y, patches = table["Conv2D"](ctx(attrs, x.dtype))(x, w)
    dx = table["Conv2DBackpropInput"](ctx(attrs, x.dtype))(x, w, grad)
    filter_grad = table.get("Conv2DBackpropFilter", GENERIC["Conv2DBackpropFilter"])
    dw = filter_grad(ctx({**attrs, "filter_shape": w.shape}, x.dtype))(patches, grad)
    return y, dx, dw


def conv_bounds(x, w, attrs, grad):
    """Per element, the rounding each of two implementations may add, twice:
    a sum of n products errs by at most n * eps * (sum of |products|), the
    sums of |products| being the same convolutions of |x|, |w|, |grad|."""
    kh, kw, channels, out_channels = w.shape
    magnitudes = conv_outputs(GENERIC, *(np.abs(a).astype(np.float64) for a in (x, w)),
                              attrs, np.abs(grad).astype(np.float64))
    terms = (kh * kw * channels, out_channels + kh * kw, grad.size // out_channels)
    return [2 * n * eps(x.dtype) * magnitude for n, magnitude in zip(terms, magnitudes)]


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, window, stride, padding", CONV_CASES)
def test_conv_kernels_match_the_numpy_kernels(rng, shape, window, stride, padding, dtype,
                                              launcher):
    x, w, attrs = conv_case(rng, shape, window, stride, padding, dtype)
    y_shape = GENERIC["Conv2D"](ctx(attrs, dtype))(x, w)[0].shape
    grad = rng.standard_normal(y_shape).astype(dtype)
    ours = conv_outputs(TABLES[launcher], x, w, attrs, grad)
    theirs = conv_outputs(GENERIC, x, w, attrs, grad)
    for name, mine, expected, bound in zip(("y", "dx", "dw"), ours, theirs,
                                           conv_bounds(x, w, attrs, grad)):
        assert mine.shape == expected.shape and mine.dtype == dtype, name
        assert np.all(np.abs(mine - expected) <= bound), name


def implicit_tables(monkeypatch):
    """The GPU kernel tables with TOWERFLOW_GPU_CONV=implicit, by launcher."""
    monkeypatch.setenv(cupy_conv.CONV_SWITCH, "implicit")
    return {"references": cupy_conv.gpu_kernels(np, GENERIC, cupy_conv.ReferenceLauncher()),
            "cuda_c": cupy_conv.gpu_kernels(np, GENERIC, cupy_conv.EmulatedLauncher()),
            "cuda_c_reversed": cupy_conv.gpu_kernels(
                np, GENERIC, cupy_conv.EmulatedLauncher(reverse=True))}


# CONV_CASES, and one whose filter gradient sums its 8,250 outputs in two
# splits (the second ragged).
IMPLICIT_CASES = CONV_CASES + [((3, 55, 50, 2), 3, 1, "SAME")]


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, window, stride, padding", IMPLICIT_CASES)
def test_implicit_gemm_convolutions_match_the_numpy_kernels(monkeypatch, rng, shape, window,
                                                            stride, padding, dtype, launcher):
    """y, dx and dw by implicit GEMM (no patch matrix: Conv2D passes x on to
    the filter gradient) within the same rounding bound as im2col's."""
    x, w, attrs = conv_case(rng, shape, window, stride, padding, dtype)
    table = implicit_tables(monkeypatch)[launcher]
    y_shape = GENERIC["Conv2D"](ctx(attrs, dtype))(x, w)[0].shape
    grad = rng.standard_normal(y_shape).astype(dtype)
    ours = conv_outputs(table, x, w, attrs, grad)
    assert table["Conv2D"](ctx(attrs, dtype))(x, w)[1] is x     # no patches made
    theirs = conv_outputs(GENERIC, x, w, attrs, grad)
    for name, mine, expected, bound in zip(("y", "dx", "dw"), ours, theirs,
                                           conv_bounds(x, w, attrs, grad)):
        assert mine.shape == expected.shape and mine.dtype == dtype, name
        assert np.all(np.abs(mine - expected) <= bound), name


def test_implicit_gemm_falls_back_to_the_generic_kernels(monkeypatch, rng):
    """Integer convolutions, and a filter gradient given im2col patches, take
    the generic kernels, float16 ones im2col's; an unknown path is refused by
    name; an empty batch's filter gradient is zero."""
    table = implicit_tables(monkeypatch)["references"]
    half = rng.standard_normal((2, 5, 5, 2)).astype(np.float16)
    half_w = rng.standard_normal((3, 3, 2, 2)).astype(np.float16)
    attrs = {"strides": (1, 1), "padding": "SAME"}
    assert table["Conv2D"](ctx(attrs, np.float16))(half, half_w)[1].shape == (50, 18)
    empty = cupy_conv.implicit_filter_grad(cupy_conv.ReferenceLauncher(), np,
                                           np.ones((0, 5, 5, 2)), np.ones((0, 5, 5, 3)),
                                           (3, 3, 2, 3), _layout(5, 5, 3, 3, 1, 1, "SAME"))
    np.testing.assert_array_equal(empty, np.zeros((3, 3, 2, 3)))
    x = rng.integers(-3, 3, (2, 5, 5, 2)).astype(np.int32)
    w = rng.integers(-3, 3, (3, 3, 2, 2)).astype(np.int32)
    attrs = {"strides": (1, 1), "padding": "SAME"}
    y, patches = table["Conv2D"](ctx(attrs, np.int32))(x, w)
    np.testing.assert_array_equal(y, GENERIC["Conv2D"](ctx(attrs, np.int32))(x, w)[0])
    grad = np.ones(y.shape, np.int32)
    filter_attrs = {**attrs, "filter_shape": w.shape}
    np.testing.assert_array_equal(
        table["Conv2DBackpropFilter"](ctx(filter_attrs, np.int32))(patches, grad),
        GENERIC["Conv2DBackpropFilter"](ctx(filter_attrs, np.int32))(patches, grad))
    monkeypatch.setenv(cupy_conv.CONV_SWITCH, "im2col")     # read when a kernel is made
    assert table["Conv2D"](ctx(attrs))(x.astype(np.float32), w.astype(np.float32))[1].ndim == 2
    monkeypatch.setenv(cupy_conv.CONV_SWITCH, "cudnn")
    with pytest.raises(ValueError, match="TOWERFLOW_GPU_CONV='cudnn': expected one of "
                                         "im2col, implicit"):
        table["Conv2D"](ctx(attrs))


def test_the_filter_gradient_splits_cover_the_outputs_in_order():
    for outputs in (1, 7, 4095, 4096, 8250, 524288, 10**7):
        splits, per_split = implicit_specs.filter_grad_splits(outputs)
        assert 1 <= splits <= implicit_specs.MAX_SPLITS and per_split % 8 == 0
        assert (splits - 1) * per_split < outputs <= splits * per_split


def test_im2col_takes_float16_by_its_bits(rng):
    x, w, attrs = conv_case(rng, (2, 6, 5, 3), 3, 2, "SAME", np.float16)
    patches = GPU["Conv2D"](ctx(attrs, np.float16))(x, w)[1]
    expected = GENERIC["Conv2D"](ctx(attrs, np.float32))(x.astype(np.float32),
                                                         w.astype(np.float32))[1]
    np.testing.assert_array_equal(np.asarray(patches, np.float32), np.asarray(expected))


def test_col2im_adds_taps_in_the_order_cuda_does(rng):
    """The reference's float32 sums are bit for bit a sequential sum over the
    taps in row-major order (what each CUDA thread does)."""
    x_shape, lay = (1, 5, 5, 2), _layout(5, 5, 3, 3, 1, 1, "SAME")
    columns = rng.standard_normal((25, 18)).astype(np.float32)
    dx = cupy_conv.col2im(cupy_conv.ReferenceLauncher(), np, columns, x_shape, lay)
    grid = columns.reshape(5, 5, 3, 3, 2)
    total = np.float32(0)
    for i in range(3):
        for j in range(3):
            p, q = 2 + 1 - i, 2 + 1 - j     # the outputs whose tap (i, j) reads cell (2, 2)
            total = np.float32(total + grid[p, q, i, j, 1])
    assert dx[0, 2, 2, 1] == total


def test_other_dtypes_take_the_generic_kernels(rng):
    x = rng.integers(-3, 3, (2, 5, 5, 2)).astype(np.int32)
    w = rng.integers(-3, 3, (3, 3, 2, 2)).astype(np.int32)
    attrs = {"strides": (1, 1), "padding": "SAME"}
    np.testing.assert_array_equal(GPU["Conv2D"](ctx(attrs, np.int32))(x, w)[0],
                                  GENERIC["Conv2D"](ctx(attrs, np.int32))(x, w)[0])


# -- batch norm -------------------------------------------------------------------------


def bn_inputs(rng, shape, dtype, mean=0.0, spread=1.0):
    channels = shape[-1]
    x = (rng.standard_normal(shape) * spread + mean).astype(dtype)
    return x, (rng.standard_normal(channels) + 1).astype(dtype), \
        rng.standard_normal(channels).astype(dtype)


def bn_forward_bounds(x, scale, offset, epsilon):
    """Bounds on (mean, unbiased variance, inv_std, y) differences: the
    kernels sum d = x - x[0] and d^2 over R rows where the NumPy kernel sums x
    and (x - mean)^2; each sum errs by at most (R + 2) * eps * its sum of
    magnitudes, and the rest follows to first order."""
    rows = x.reshape(-1, x.shape[-1]).astype(np.float64)
    count, unit = rows.shape[0], eps(x.dtype)
    d = rows - rows[0]
    mean, var = rows.mean(axis=0), rows.var(axis=0)
    sums = 2 * (count + 2) * unit
    mean_tol = sums * (np.abs(rows).mean(axis=0) + np.abs(d).mean(axis=0))
    var_tol = 2 * sums * ((d * d).mean(axis=0) + d.mean(axis=0) ** 2) + 2 * mean_tol * \
        np.abs(d).mean(axis=0)
    inv_std = 1 / np.sqrt(var + epsilon)
    inv_tol = inv_std * (0.5 * var_tol / (var + epsilon) + 4 * unit)
    gain = np.abs(scale) * inv_std
    gain_tol = np.abs(scale) * inv_tol + 2 * unit * gain
    centered = np.abs(rows - mean)
    y_tol = mean_tol * gain + centered * gain_tol + 4 * unit * (centered * gain + np.abs(offset))
    return mean_tol, var_tol * count / max(count - 1, 1) + 2 * unit * var, inv_tol, y_tol


# (shape, mean, spread): one row per image pixel; a channel mean far above
# its spread (where plain sums of squares would cancel); a single row;
# rows that end inside a block of the partial sums.
BN_CASES = [((4, 5, 5, 6), 0.0, 1.0), ((3, 7, 7, 3), 100.0, 1.0), ((1, 1, 1, 5), 0.0, 1.0),
            ((2, 33, 5, 4), -3.0, 0.1), ((300, 300), 0.5, 2.0)]


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, mean, spread", BN_CASES)
def test_batch_norm_matches_the_numpy_kernel(rng, shape, mean, spread, dtype, relu, launcher):
    x, scale, offset = bn_inputs(rng, shape, dtype, mean, spread)
    attrs = {"epsilon": 1e-3, "is_training": True}
    table = TABLES[launcher]
    kernel = table["_FusedBatchNormRelu" if relu else "FusedBatchNorm"](ctx(attrs, dtype))
    y, batch_mean, batch_var, saved_mean, inv_std = kernel(x, scale, offset, scale, scale)
    expected = GENERIC["FusedBatchNorm"](ctx(attrs, dtype))(x, scale, offset, scale, scale)
    mean_tol, var_tol, inv_tol, y_tol = bn_forward_bounds(x, scale, offset, 1e-3)
    assert np.all(np.abs(batch_mean - expected[1]) <= mean_tol)
    assert np.all(np.abs(saved_mean - expected[3]) <= mean_tol)
    assert np.all(np.abs(batch_var - expected[2]) <= var_tol)
    assert np.all(np.abs(inv_std - expected[4]) <= inv_tol)
    expected_y = np.maximum(expected[0], 0) if relu else expected[0]
    assert y.dtype == dtype and y.shape == x.shape
    assert np.all(np.abs(y - expected_y).reshape(-1, x.shape[-1]) <= y_tol)


def bn_grad_bounds(grad, x, scale, mean, inv_std):
    """Bounds on (dx, dscale, doffset) differences: doffset and dscale are
    sums over R rows ((R + 2) * eps * the sum of magnitudes each, both
    sides); dx = g * gain + (x - mean) * k1 - k2 follows to first order."""
    g = grad.reshape(-1, x.shape[-1]).astype(np.float64)
    centered = x.reshape(g.shape).astype(np.float64) - mean
    count, unit = g.shape[0], eps(x.dtype)
    sums = 2 * (count + 2) * unit
    doffset_tol = sums * np.abs(g).sum(axis=0)
    dscale = (g * centered).sum(axis=0) * inv_std
    dscale_tol = sums * (np.abs(g * centered)).sum(axis=0) * inv_std + 2 * unit * np.abs(dscale)
    gain = np.abs(scale * inv_std)
    k1, k2 = gain * inv_std * np.abs(dscale) / count, gain * np.abs(g.sum(axis=0)) / count
    k1_tol = gain * inv_std * dscale_tol / count + 6 * unit * k1
    k2_tol = gain * doffset_tol / count + 4 * unit * k2
    dx_tol = np.abs(centered) * k1_tol + k2_tol + 4 * unit * (
        np.abs(g) * gain + np.abs(centered) * k1 + k2)
    return dx_tol, dscale_tol, doffset_tol


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, mean, spread", BN_CASES)
def test_batch_norm_gradient_matches_the_numpy_kernel(rng, shape, mean, spread, dtype, masked,
                                                      launcher):
    x, scale, offset = bn_inputs(rng, shape, dtype, mean, spread)
    attrs = {"epsilon": 1e-3, "is_training": True}
    forward = GENERIC["FusedBatchNorm"](ctx(attrs, dtype))(x, scale, offset, scale, scale)
    saved_mean, inv_std = forward[3], forward[4]
    grad = rng.standard_normal(shape).astype(dtype)
    relu_output = np.maximum(forward[0], 0)
    masked_grad = grad * (relu_output > 0) if masked else grad
    expected = GENERIC["FusedBatchNormGrad"](ctx(attrs, dtype, 3))(
        masked_grad, x, scale, saved_mean, inv_std)
    table = TABLES[launcher]
    if masked:
        ours = table["_ReluGradBatchNormGrad"](ctx(attrs, dtype, 3))(
            grad, relu_output, x, scale, saved_mean, inv_std)
    else:
        ours = table["FusedBatchNormGrad"](ctx(attrs, dtype, 3))(grad, x, scale, saved_mean,
                                                                  inv_std)
    bounds = bn_grad_bounds(masked_grad, x, scale, saved_mean, inv_std)
    assert np.all(np.abs(ours[0] - expected[0]).reshape(bounds[0].shape) <= bounds[0])
    for mine, theirs, bound in zip(ours[1:], expected[1:], bounds[1:]):
        assert np.all(np.abs(mine - theirs) <= bound)


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_fed_training_flag_selects_on_the_device(rng, launcher, training, dtype):
    """A flag fed at run time (a bool array on the device, never read on the
    host) picks the batch's statistics or the moving ones in the finish
    kernels, and the gradient's paths through the batch statistics: each as
    the generic kernel computes that mode (the cifar10 recipe feeds its flag)."""
    shape, epsilon = (2, 33, 5, 4), 1e-3
    x, scale, offset = bn_inputs(rng, shape, dtype, -3.0, 0.1)
    moving_mean = rng.standard_normal(4).astype(dtype) - 3
    moving_variance = (rng.random(4) * 0.02 + 0.005).astype(dtype)
    fed = (np.array(training), moving_mean, moving_variance)
    ours = cupy_conv.batch_norm_training(LAUNCHER_OBJECTS[launcher], np, x, scale, offset,
                                         epsilon, True, fed)
    attrs = {"epsilon": epsilon, "is_training": training}
    expected = GENERIC["FusedBatchNorm"](ctx(attrs, dtype))(x, scale, offset, moving_mean,
                                                           moving_variance)
    if training:
        mean_tol, var_tol, inv_tol, y_tol = bn_forward_bounds(x, scale, offset, epsilon)
    else:   # the given statistics, copied; inv_std and y rounded a few times each
        mean_tol, var_tol = 0, 0
        inv_tol = 4 * eps(dtype) * expected[4]
        gain = np.abs(scale * expected[4])
        rows = x.reshape(-1, shape[-1])
        y_tol = 8 * eps(dtype) * (np.abs(rows - moving_mean) * gain + np.abs(offset))
    for index, bound in ((1, mean_tol), (2, var_tol), (3, mean_tol), (4, inv_tol)):
        assert np.all(np.abs(ours[index] - expected[index]) <= bound), index
    difference = np.abs(ours[0] - np.maximum(expected[0], 0)).reshape(-1, shape[-1])
    assert np.all(difference <= y_tol)
    grad = rng.standard_normal(shape).astype(dtype)
    dx, dscale, doffset = cupy_conv.batch_norm_grad_training(
        LAUNCHER_OBJECTS[launcher], np, grad, None, x, scale, expected[3], expected[4],
        np.array(training))
    expected_grad = GENERIC["FusedBatchNormGrad"](ctx(attrs, dtype, 3))(
        grad, x, scale, expected[3], expected[4])
    bounds = bn_grad_bounds(grad, x, scale, expected[3], expected[4])
    assert np.all(np.abs(dx - expected_grad[0]).reshape(bounds[0].shape) <= bounds[0])
    for mine, theirs, bound in zip((dscale, doffset), expected_grad[1:], bounds[1:]):
        assert np.all(np.abs(mine - theirs) <= bound)


def test_relu_keeps_nan_and_its_gradient_multiplies_as_relu_grad_does():
    """A NaN stays NaN through the ReLU (as np.maximum keeps it); an infinite
    gradient where the ReLU output is 0 gives NaN (inf * 0), as ReluGrad's does."""
    y = bn_specs.BN_APPLY_RELU.reference(np.array([np.nan, -1.0, 2.0], np.float32),
                                         np.float32(0), np.float32(1), np.float32(0))
    np.testing.assert_array_equal(y, [np.nan, 0.0, 2.0])
    with np.errstate(invalid="ignore"):
        dx = bn_specs.BN_GRAD_APPLY_MASKED.reference(*(np.array(v, np.float32) for v in (
            [np.inf, 1.0], [0.0, 3.0], [0, 0], 0, 1, 0, 0)))
    assert np.isnan(dx[0]) and dx[1] == 1.0


@pytest.mark.parametrize("x_dtype, stats_dtype, training", [
    (np.float16, np.float16, True), (np.float16, np.float32, True),
    (np.float32, np.float32, False)], ids=["float16", "mixed", "inference"])
def test_other_batch_norms_take_the_generic_kernel(rng, x_dtype, stats_dtype, training):
    x, scale, offset = bn_inputs(rng, (2, 3, 3, 4), x_dtype)
    scale, offset = scale.astype(stats_dtype), offset.astype(stats_dtype)
    attrs = {"epsilon": 1e-3, "is_training": training}
    args = (x, scale, offset, offset, scale)        # moving mean and variance
    ours = GPU["FusedBatchNorm"](ctx(attrs, x_dtype))(*args)
    theirs = GENERIC["FusedBatchNorm"](ctx(attrs, x_dtype))(*args)
    for mine, expected in zip(ours, theirs):
        np.testing.assert_array_equal(mine, expected)


def test_partial_blocks_cover_the_rows_in_at_most_max_blocks():
    for rows in (1, 63, 64, 65, 1000, 65536, 524288, 10**7 + 3):
        blocks, per_block = bn_specs.partial_blocks(rows)
        assert blocks <= bn_specs.MAX_BLOCKS and (blocks - 1) * per_block < rows <= \
            blocks * per_block


# -- the spec objects --------------------------------------------------------------------


def test_a_kernel_refuses_wrong_arguments_and_dtypes_by_name():
    with pytest.raises(TypeError, match=r"missing arguments \['patches'"):
        conv_specs.IM2COL.ordered_args({"x": np.zeros(1)}, np.dtype(np.float32))
    with pytest.raises(TypeError, match="no version for int32 arrays.*float32, float64"):
        conv_specs.COL2IM.source(np.int32)
    assert kernel_specs.spec_named("towerflow_col2im") is conv_specs.COL2IM


def test_scalars_reach_the_kernel_as_its_c_types():
    args = bn_specs.BN_STATS_FINISH.ordered_args(
        {name: 1 for name in ("first", "second", "shift", "scale", "mean", "variance",
                              "inv_std", "gain")} |
        {"blocks": 2, "channels": 3, "rows": 10, "epsilon": 1e-3}, np.dtype(np.float64))
    assert [type(arg) for arg in args[4:8]] == [np.int32, np.int32, np.int64, np.float64]


# -- NVRTC -------------------------------------------------------------------------------


def compile_log(source, name):
    """None if ``source`` compiles for sm_80 (Ampere and later), else the log."""
    nvrtc = nvrtc_or_skip()
    program = nvrtc.createProgram(source, f"{name}.cu", (), ())
    try:
        nvrtc.compileProgram(program, ["-arch=compute_80"])
    except nvrtc.NVRTCError:
        return nvrtc.getProgramLog(program)
    assert name.encode() in nvrtc.getPTX(program)
    return None


@pytest.mark.parametrize("spec, dtype", [(spec, dtype) for spec in RAW_SPECS
                                         for dtype in spec.types], ids=str)
def test_raw_kernels_compile_with_nvrtc(spec, dtype):
    assert compile_log(spec.source(dtype), spec.name) is None


@pytest.mark.parametrize("spec, ctype", [(spec, ctype) for spec in ELEMENTWISE_SPECS
                                         for ctype in spec.types.values()], ids=str)
def test_elementwise_kernels_compile_with_nvrtc(spec, ctype):
    assert compile_log(spec.standalone_source(ctype), spec.name) is None


def test_a_broken_kernel_fails_the_compile_check():
    body = conv_specs.COL2IM.body.replace("total += columns", "total += column")
    broken = kernel_specs.RawKernelSpec("towerflow_broken_col2im", conv_specs.COL2IM.params,
                                        body, None, register=False)
    log = compile_log(broken.source(np.float32), broken.name)
    assert log is not None and "column" in log


# -- the traffic model -------------------------------------------------------------------


class CountingLauncher(cupy_conv.ReferenceLauncher):
    """Runs the references and records (kernel, bytes read, bytes written):
    const pointers and inputs are read, the rest written, each array once."""

    def __init__(self):
        self.kernels = []

    def raw(self, spec, grid, block, **args):
        params = kernel_specs.parse_params(spec.params)
        self._record(spec.name, [args[name] for kind, name in params
                                 if kind.startswith("const") and kind.endswith("*")],
                     [args[name] for kind, name in params if not kind.startswith("const")
                      and kind.endswith("*")])
        super().raw(spec, grid, block, **args)

    def elementwise(self, spec, *arrays):
        count = len(spec.input_names)
        self._record(spec.name, arrays[:count], arrays[count:])
        super().elementwise(spec, *arrays)

    def gemm(self, a, b):
        out = super().gemm(a, b)
        self._record("gemm", [a, b], [out])
        return out

    def _record(self, name, reads, writes):
        unique = {id(array): array for array in reads}.values()
        self.kernels.append((name, sum(a.nbytes for a in unique),
                             sum(a.nbytes for a in writes)))


def test_the_traffic_model_counts_what_the_new_kernels_launch(rng):
    import gpu_traffic

    import towerflow as tf
    from towerflow import fusion, plan
    images = tf.placeholder(tf.float32, [3, 9, 7, 5])
    y = tf.layers.conv2d(images, 6, 3, strides=2, padding="same", use_bias=False)
    y = tf.nn.relu(tf.layers.batch_normalization(y, training=True))
    y = tf.layers.conv2d(y, 4, 2, padding="valid", use_bias=False)
    y = tf.layers.batch_normalization(y, training=True)
    loss = tf.reduce_sum(tf.nn.relu(y) * y)
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
    names = set(GENERIC) | set(cupy_conv.FUSED_KERNELS)
    units = fusion.fuse(plan._needed_ops([train_op], [images]), [train_op], [images],
                        lambda op: "GPU", lambda device: names)
    checked = set()
    for unit in units:
        # NOTE: the GPU table's Conv2DBackpropFilter runs the generic kernel on
        # im2col patches (the model counts it as before); its own is implicit GEMM's
        if unit.type not in GPU or unit.type == "Conv2DBackpropFilter":
            continue
        launcher = CountingLauncher()
        table = cupy_conv.gpu_kernels(np, GENERIC, launcher)
        inputs = [rng.standard_normal(t.shape.as_list()).astype(np.float32) + 2
                  for t in unit.inputs]
        dtypes = [np.dtype(t.dtype.as_numpy_dtype) for t in unit.outputs]
        table[unit.type](KernelContext(unit, unit.attrs, dtypes, None, None))(*inputs)
        assert launcher.kernels == list(gpu_traffic.AFTER[unit.type](unit)), unit.name
        checked.add(unit.type)
    assert checked == {"Conv2D", "Conv2DBackpropInput", "_FusedBatchNormRelu",
                       "FusedBatchNorm", "FusedBatchNormGrad", "_ReluGradBatchNormGrad"}


# -- on a GPU ---------------------------------------------------------------------------


@pytest.fixture
def cupy_launcher(real_gpu):  # noqa: F811  (the fixture)
    """(cupy, the GPU kernel table); the new kernels launched by CupyLauncher."""
    import cupy
    table = real_gpu.KERNELS
    return cupy, {**table, **cupy_conv.gpu_kernels(cupy, table, cupy_conv.CupyLauncher())}


@pytest.mark.gpu
@pytest.mark.parametrize("shape, window, stride, padding", CONV_CASES)
def test_cuda_conv_kernels_match_their_references(cupy_launcher, rng, shape, window, stride,
                                                  padding):
    cupy, table = cupy_launcher
    x, w, attrs = conv_case(rng, shape, window, stride, padding, np.float64)
    grad = rng.standard_normal(GPU["Conv2D"](ctx(attrs, np.float64))(x, w)[0].shape)
    on_gpu = conv_outputs(table, cupy.asarray(x), cupy.asarray(w), attrs, cupy.asarray(grad))
    for mine, expected, bound in zip(on_gpu, conv_outputs(GPU, x, w, attrs, grad),
                                     conv_bounds(x, w, attrs, grad)):
        assert np.all(np.abs(cupy.asnumpy(mine) - expected) <= bound)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, mean, spread", BN_CASES)
def test_cuda_batch_norm_kernels_match_their_references(cupy_launcher, rng, shape, mean,
                                                        spread):
    cupy, table = cupy_launcher
    x, scale, offset = bn_inputs(rng, shape, np.float32, mean, spread)
    attrs = {"epsilon": 1e-3, "is_training": True}
    args = (x, scale, offset, scale, scale)
    ours = table["_FusedBatchNormRelu"](ctx(attrs))(*(cupy.asarray(a) for a in args))
    reference = GPU["_FusedBatchNormRelu"](ctx(attrs))(*args)
    mean_tol, var_tol, inv_tol, y_tol = bn_forward_bounds(x, scale, offset, 1e-3)
    for index, bound in ((0, y_tol), (1, mean_tol), (2, var_tol), (4, inv_tol)):
        difference = np.abs(cupy.asnumpy(ours[index]) - reference[index])
        assert np.all(difference.reshape(-1, x.shape[-1]) <= bound), index
    grad = rng.standard_normal(shape).astype(np.float32)
    grad_args = (grad, reference[0], x, scale, reference[3], reference[4])
    ours = table["_ReluGradBatchNormGrad"](ctx(attrs, outputs=3))(
        *(cupy.asarray(a) for a in grad_args))
    expected = GPU["_ReluGradBatchNormGrad"](ctx(attrs, outputs=3))(*grad_args)
    bounds = bn_grad_bounds(grad * (reference[0] > 0), x, scale, reference[3], reference[4])
    assert np.all(np.abs(cupy.asnumpy(ours[0]) - expected[0]).reshape(bounds[0].shape)
                  <= bounds[0])


def test_an_inference_convolution_keeps_no_patch_matrix(gpu_backend, monkeypatch, rng):
    """Only a plan that reads the patches (its gradient) builds the whole patch
    matrix; inference takes the generic kernel, which works in blocks."""
    built = []
    real_im2col = cupy_conv.im2col
    monkeypatch.setattr(cupy_conv, "im2col", lambda *args: built.append(1) or
                        real_im2col(*args))
    x_value = rng.standard_normal((2, 8, 8, 16)).astype(np.float32)
    with tf.device("/gpu:0"):
        x = tf.Variable(x_value)
        w = tf.Variable(rng.standard_normal((3, 3, 16, 8)).astype(np.float32))
        y = tf.reduce_sum(tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME"))
        grad = tf.gradients(y, w)[0]
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    sess.run(y)
    assert built == []
    sess.run(grad)
    assert built


def fed_flag_losses(device):
    """Losses of three training steps (flag fed True by default) and three
    evaluations (flag fed False) of a conv + batch norm + ReLU network."""
    tf.reset_default_graph()
    weights = np.random.default_rng(5).standard_normal((3, 3, 3, 8)).astype(np.float32)
    with tf.device(device):
        images = tf.placeholder(tf.float32, [4, 8, 8, 3])
        training = tf.placeholder_with_default(True, [])
        y = tf.layers.conv2d(images, 8, 3, padding="same", use_bias=False,
                             kernel_initializer=tf.constant_initializer(weights))
        y = tf.nn.relu(tf.layers.batch_normalization(y, training=training))
        loss = tf.reduce_mean(y * y)
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    rng, losses = np.random.default_rng(0), []
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        for _ in range(3):
            batch = rng.random((4, 8, 8, 3)).astype(np.float32)
            losses.append(session.run([loss, train_op], {images: batch})[0])
            losses.append(session.run(loss, {images: batch, training: False}))
    return losses


@pytest.mark.gpu
def test_a_fed_training_flag_runs_the_fused_batch_norm_on_a_gpu(real_gpu, monkeypatch):  # noqa: F811
    """The cifar10 recipe feeds its flag: on a GPU that reaches the fused
    batch-norm kernels (selecting on the device), not the generic ones, and
    trains and evaluates as /cpu:0 does."""
    fed_calls = []
    fused = cupy_conv.batch_norm_training

    def counting(*args, **kwargs):
        fed_calls.append(len(args) > 7 and args[7] is not None)
        return fused(*args, **kwargs)
    monkeypatch.setattr(cupy_conv, "batch_norm_training", counting)
    on_gpu = fed_flag_losses("/gpu:0")
    assert fed_calls and all(fed_calls)         # every batch norm, fed flag and all
    np.testing.assert_allclose(on_gpu, fed_flag_losses("/cpu:0"), rtol=1e-5)
