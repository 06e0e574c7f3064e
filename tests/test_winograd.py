"""Winograd F(4x4, 3x3) convolutions (towerflow/backends/winograd.py): where the
compiled kernels run a stride-1 3x3 convolution of 16 (ALGORITHMS[3].min_channels) or more input
channels by Winograd, its output, input gradient and filter gradient match
the NumPy kernels' im2col GEMMs (to float rounding), on one thread and split
across threads, fused or not; everything else keeps im2col."""

import types

import numpy as np
import pytest

import towerflow as tf
from towerflow.backends import cpu_threads, native, winograd
from towerflow.backends.nn_kernels import build_nn_kernels

pytestmark = pytest.mark.skipif(not native.available(),
                                reason="towerflow.backends._native is not built")

# Tolerances relative to the largest value: Winograd's transforms scale float32
# rounding up by about 50x over the direct sum's (winograd.py).
RELATIVE = {np.float32: 5e-5, np.float64: 1e-12}

# (x shape, out channels, padding): sizes that are and are not multiples of the
# 4x4 tile, channels past the C kernels' 64-channel blocks, an empty batch,
# output channels that are (48) and are not whole vectors of the compiled GEMM
CASES = [
    ((3, 16, 16, 16), 24, "SAME"),
    ((2, 11, 9, 20), 17, "VALID"),
    ((2, 7, 13, 70), 5, "SAME"),
    ((1, 6, 6, 16), 66, "VALID"),
    ((0, 8, 8, 16), 8, "SAME"),
    ((3, 10, 9, 32), 48, "SAME"),       # whole vectors of outputs: the compiled GEMMs
]


def kernel(table, name, attrs, dtype):
    ctx = types.SimpleNamespace(attrs=attrs, op=None, resource=lambda key, make: make(),
                                output_dtypes=[np.dtype(dtype)] * 5)
    return table[name](ctx)


def conv_and_grads(table, x, w, grad_of, padding):
    """(y, dx, dw, patches) of Conv2D and its two gradient kernels."""
    attrs = {"strides": (1, 1), "padding": padding}
    y, patches = kernel(table, "Conv2D", attrs, x.dtype)(x, w)
    grad = grad_of(y.shape)
    dx = kernel(table, "Conv2DBackpropInput", attrs, x.dtype)(x, w, grad)
    dw = kernel(table, "Conv2DBackpropFilter", {"filter_shape": w.shape}, x.dtype)(
        patches, grad)
    return y, dx, dw, patches


def reference(x, w, grad_of, padding, monkeypatch):
    """conv_and_grads on the NumPy kernels (im2col GEMMs)."""
    with monkeypatch.context() as patch:
        patch.setenv("TOWERFLOW_NATIVE", "0")
        return conv_and_grads(build_nn_kernels(np), x, w, grad_of, padding)


def assert_close(actual, expected, dtype, what):
    scale = max(float(np.abs(expected).max()), 1.0) if expected.size else 1.0
    assert actual.shape == expected.shape, what
    np.testing.assert_allclose(actual, expected, rtol=0, atol=RELATIVE[dtype] * scale,
                               err_msg=what)


def random_case(x_shape, out_channels, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = (rng.standard_normal((3, 3, x_shape[3], out_channels)) * 0.2).astype(dtype)

    def grad_of(shape):
        return np.random.default_rng(seed + 1).standard_normal(shape).astype(dtype)
    return x, w, grad_of


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, out_channels, padding", CASES)
@pytest.mark.parametrize("threads", ["serial", "pool"])
def test_winograd_conv_and_gradients_match_im2col(request, monkeypatch, x_shape,
                                                  out_channels, padding, dtype, threads):
    x, w, grad_of = random_case(x_shape, out_channels, dtype)
    parallel = request.getfixturevalue("pool") if threads == "pool" else cpu_threads.SERIAL
    y, dx, dw, patches = conv_and_grads(build_nn_kernels(np, parallel), x, w, grad_of,
                                        padding)
    want = reference(x, w, grad_of, padding, monkeypatch)
    for name, actual, expected in zip(("output", "dx", "dw"), (y, dx, dw), want):
        assert_close(actual, expected, dtype, name)
    # Winograd ran: the patches output holds the transformed input tiles, 36
    # terms per tile of 4x4 outputs, as wide as im2col's patches
    tiles = x_shape[0] * -(-y.shape[1] // 4) * -(-y.shape[2] // 4)
    assert patches.shape == ((4 * tiles, 9 * x_shape[3]) if x_shape[0] else want[3].shape)


def test_threads_give_the_same_bits_on_every_run(pool):
    x, w, grad_of = random_case((6, 12, 12, 32), 16, np.float32)
    table = build_nn_kernels(np, pool)
    first = conv_and_grads(table, x, w, grad_of, "SAME")
    again = conv_and_grads(table, x, w, grad_of, "SAME")
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_inference_gives_the_training_outputs_in_every_thread_part(pool):
    # inference keeps no tiles: each part's blocks go through the workspace only
    x, w, _ = random_case((6, 12, 12, 32), 32, np.float32)
    table = build_nn_kernels(np, pool)
    attrs = {"strides": (1, 1), "padding": "SAME"}
    trained, _ = kernel(table, "Conv2D", attrs, np.float32)(x, w)
    ctx = types.SimpleNamespace(attrs=attrs, op=None, resource=lambda key, make: make(),
                                output_dtypes=[np.dtype(np.float32)] * 2,
                                outputs_used=[True, False])
    inferred, patches = table["Conv2D"](ctx)(x, w)
    assert patches is None
    np.testing.assert_array_equal(inferred, trained)


@pytest.mark.parametrize("what, x_shape, w_shape, strides", [
    ("too few input channels", (2, 8, 8, 15), (3, 3, 15, 16), (1, 1)),
    ("stride 2", (2, 8, 8, 16), (3, 3, 16, 16), (2, 2)),
    ("a 7x7 window", (2, 8, 8, 16), (7, 7, 16, 16), (1, 1)),
    ("a 3x5 window", (2, 8, 8, 16), (3, 5, 16, 16), (1, 1)),
    ("a 2x3 output", (2, 2, 3, 16), (3, 3, 16, 16), (1, 1)),
])
def test_other_convolutions_keep_im2col_patches(what, x_shape, w_shape, strides):
    x = np.ones(x_shape, np.float32)
    w = np.ones(w_shape, np.float32)
    y, patches = kernel(build_nn_kernels(np), "Conv2D",
                        {"strides": strides, "padding": "SAME"}, np.float32)(x, w)
    assert patches.shape == (y.shape[0] * y.shape[1] * y.shape[2], np.prod(w_shape[:3])), what


def test_towerflow_winograd_0_turns_it_off(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_WINOGRAD", "0")
    x, w, grad_of = random_case((2, 8, 8, 16), 8, np.float32)
    y, _dx, _dw, patches = conv_and_grads(build_nn_kernels(np), x, w, grad_of, "SAME")
    assert patches.shape == (2 * 8 * 8, 9 * 16)
    want = reference(x, w, grad_of, "SAME", monkeypatch)
    # The same im2col GEMM, summed in another order by the compiled kernel than
    # by OpenBLAS: each sum of depth products is within depth * eps * sum|products|
    # of the exact one (Higham's bound), so the two within twice that.
    depth = 9 * 16
    magnitude = reference(np.abs(x), np.abs(w), grad_of, "SAME", monkeypatch)[0]
    bound = 2 * depth * np.finfo(np.float32).eps / 2 * magnitude
    assert np.all(np.abs(y - want[0]) <= bound)


def test_float16_convolutions_take_the_numpy_path():
    x, w, _ = random_case((2, 8, 8, 16), 8, np.float16)
    _y, patches = kernel(build_nn_kernels(np), "Conv2D", {"strides": (1, 1), "padding": "SAME"},
                        np.float16)(x, w)
    assert patches.shape == (2 * 8 * 8, 9 * 16)


def test_the_compiled_transforms_match_their_matrices():
    # B^T d B of each tile's window, and A e A^T of each output-gradient tile,
    # against the matrices of Lavin and Gray written out here
    b_t = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                    [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float)
    a_t = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                    [0, 1, -1, 8, -8, 1]], float)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 5, 7, 3))
    top, left, out_h, out_w = 1, 2, 5, 6            # tiles 2 x 2, reading past every edge
    padded = np.zeros((2, 2 * 4 + 2, 2 * 4 + 2, 3))
    for row in range(padded.shape[1]):
        for col in range(padded.shape[2]):
            if 0 <= row - top < 5 and 0 <= col - left < 7:
                padded[:, row, col] = x[:, row - top, col - left]
    windows = np.stack([padded[:, 4 * ty:4 * ty + 6, 4 * tx:4 * tx + 6]
                        for ty in range(2) for tx in range(2)], axis=1)   # [n, tile, 6, 6, c]
    want = np.einsum("ai,ntijc,bj->ntabc", b_t, windows, b_t).reshape(8, 36, 3)
    u = np.full((10, 36, 3), np.nan)                # two spare tiles either side stay put
    assert native.winograd_input(x, top, left, out_h, out_w, u, first_tile=1)
    np.testing.assert_allclose(u[1:9], want, rtol=1e-13, atol=1e-13)
    assert np.isnan(u[0]).all() and np.isnan(u[9]).all()

    grad = rng.standard_normal((2, 5, 6, 3))
    tiles = np.zeros((2, 8, 8, 3))
    tiles[:, :5, :6] = grad
    blocks = np.stack([tiles[:, 4 * ty:4 * ty + 4, 4 * tx:4 * tx + 4]
                       for ty in range(2) for tx in range(2)], axis=1)
    want = np.einsum("ia,ntijc,jb->ntabc", a_t, blocks, a_t).reshape(8, 36, 3)
    v = np.empty((8, 36, 3))
    assert native.winograd_grad_tiles(grad, v)
    np.testing.assert_allclose(v, want, rtol=1e-13, atol=1e-13)


@pytest.mark.skipif(not native.VECTOR_GEMM, reason="the compiled GEMMs need AVX-512 or AVX2 with FMA")
@pytest.mark.parametrize("window", [3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("per_block", [1, 2, 3, 7])      # blocks that do and do not divide 5
def test_one_compiled_call_per_part_gives_the_bits_of_a_call_per_block(window, dtype,
                                                                        per_block):
    # native.winograd_conv and winograd_grad_sums loop over the blocks in C; the
    # same kernels called block by block from Python must give the same bits,
    # with the transformed inputs kept (from a part's first tile on) or not
    rng = np.random.default_rng(window * per_block)
    images, side, channels, out_channels = 5, 9, 24, 32
    x = rng.standard_normal((images, side, side, channels)).astype(dtype)
    w = (rng.standard_normal((window, window, channels, out_channels)) * 0.1).astype(dtype)
    pad = window // 2
    conv = winograd.WinogradConv(w, pad, pad, side, side)
    workspace = conv.workspace(per_block)
    _, kept = conv.kept_inputs(images + 2)               # the part: images 2.. of 7
    y = np.full((images, side, side, out_channels), np.nan, dtype)
    assert native.winograd_conv(x, pad, pad, side, side, conv.filter, workspace[0],
                                workspace[1], y, per_block, conv.algorithm.tile, kept,
                                first_tile=2 * conv.tiles_per_image)
    y_unkept = np.full_like(y, np.nan)
    assert native.winograd_conv(x, pad, pad, side, side, conv.filter, workspace[0],
                                workspace[1], y_unkept, per_block, conv.algorithm.tile)
    want, _, want_kept = np.empty_like(y), *conv.kept_inputs(images + 2)
    for start in range(0, images, per_block):
        stop = min(start + per_block, images)
        conv(x[start:stop], want[start:stop], conv.workspace(per_block), want_kept, 2 + start)
    assert np.array_equal(y, want) and np.array_equal(y_unkept, want)
    first = 2 * conv.tiles_per_image
    assert np.array_equal(kept[first:first + images * conv.tiles_per_image],
                          want_kept[first:first + images * conv.tiles_per_image])

    grad = rng.standard_normal(y.shape).astype(dtype)
    sums = np.ones((36, channels, out_channels), dtype)
    gradient_tiles = winograd.grad_workspace(grad, per_block, conv.algorithm)
    assert native.winograd_grad_sums(grad, kept, first, gradient_tiles, sums, per_block,
                                     conv.algorithm.tile)
    want_sums = np.ones_like(sums)
    for start in range(0, images, per_block):
        winograd.add_tile_products(kept, grad[start:start + per_block], 2 + start,
                                   winograd.grad_workspace(grad, per_block, conv.algorithm),
                                   want_sums, conv.algorithm)
    assert np.array_equal(sums, want_sums)


def test_the_compiled_block_loops_refuse_what_they_cannot_run():
    x = np.zeros((2, 8, 8, 16), np.float32)
    v = np.zeros((36, 16, 16), np.float32)
    u, m, y = np.zeros((4, 36, 16), np.float32), np.zeros((4, 36, 16), np.float32), \
        np.zeros((2, 8, 8, 16), np.float32)
    if native.VECTOR_GEMM:
        with pytest.raises(ValueError, match="tiles within plane_tiles"):   # 8 tiles, 4 kept
            native.winograd_conv(x, 1, 1, 8, 8, v, u, m, y, 1, kept=u)
        with pytest.raises(ValueError, match="kept tiles need the kept array"):
            native._compiled.winograd_conv((2, 8, 8, 16, 1, 1, 8, 8, 0, 8, 4, 16, 1, True),
                                           x, v, u, m, y, None)
        with pytest.raises(ValueError, match="block >= 1"):
            native.winograd_conv(x, 1, 1, 8, 8, v, u, m, y, 0)
        with pytest.raises(ValueError, match="the kept tiles expected"):
            native._compiled.winograd_grad_sums((2, 0, 0, 16, 0, 0, 8, 8, 0, 8, 4, 16, 1,
                                                 False), y, u, m, v)
    # output channels not a whole vector (the Python loop and NumPy's GEMMs run then)
    assert not native.winograd_conv(x, 1, 1, 8, 8, v[:, :, :8], u, m, y[..., :8].copy(), 1)
    assert not native.winograd_grad_sums(y[..., :8].copy(), u, 0, m, v[:, :, :8].copy(), 1)


@pytest.mark.parametrize("window", [3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pairs", [1, 7, 64, 75, 1000])    # whole and partial blocks of 64
def test_the_compiled_filter_transforms_match_the_float64_products(window, dtype, pairs):
    # V = G g G^T and dW = G^T M G, each summed in float64 and rounded once:
    # within half an ulp of the exact value, plus float64's summation error
    # (about 1e-16 of the sum's terms, far below float32's ulp, within a few
    # float64 ulps in float64)
    g = winograd.ALGORITHMS[window].transform
    rng = np.random.default_rng(window * pairs)
    for matrix, grid in ((g, rng.standard_normal((window, window, pairs))),
                         (np.ascontiguousarray(g.T), rng.standard_normal((6, 6, pairs)))):
        grid = grid.astype(dtype)
        out = np.full((matrix.shape[0], matrix.shape[0], pairs), np.nan, dtype)
        assert native.winograd_filter(matrix, grid, out)
        exact = np.einsum("ap,pqe,bq->abe", matrix, grid.astype(np.float64), matrix)
        scale = np.einsum("ap,pqe,bq->abe", abs(matrix), abs(grid.astype(np.float64)),
                          abs(matrix))
        ulp = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64)
        bound = (0.5 if dtype == np.float32 else 4) * ulp + 1e-15 * scale
        assert (np.abs(out - exact) <= bound).all()


def test_the_filter_transform_is_the_same_compiled_or_in_numpy(monkeypatch):
    w = np.random.default_rng(3).standard_normal((3, 3, 16, 24)).astype(np.float32)
    algorithm = winograd.ALGORITHMS[3]
    compiled = winograd._transformed_filter(w, algorithm)
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    numpy_made = winograd._transformed_filter(w, algorithm)
    assert compiled.dtype == numpy_made.dtype == np.float32
    # both round the float64 sum once: they differ only where the two float64
    # sums (in other orders) fall on either side of a float32 rounding boundary
    assert np.abs(compiled - numpy_made).max() <= np.spacing(np.abs(numpy_made)).max()
    assert (compiled != numpy_made).mean() < 0.01


def test_the_filter_transform_in_parts_gives_the_whole_transforms_bits(monkeypatch):
    # parts of whole 64-pair blocks (and a ragged last one) on the pool's threads
    monkeypatch.setattr(cpu_threads, "MIN_PARALLEL_ELEMENTS", 1)
    g = winograd.ALGORITHMS[3].transform
    grid = np.random.default_rng(5).standard_normal((3, 3, 1000)).astype(np.float32)
    whole = winograd._both_axes(g, grid)
    for workers in (2, 3):
        split = winograd._both_axes(g, grid, cpu_threads.WorkerPool(workers))
        np.testing.assert_array_equal(split.view(np.uint32), whole.view(np.uint32))
    out = np.full((6, 6, 1000), np.nan, np.float32)
    assert native.winograd_filter(g, grid, out, 64, 200)    # only pairs 64..199 written
    np.testing.assert_array_equal(out[:, :, 64:200], whole[:, :, 64:200])
    assert np.isnan(out[:, :, :64]).all() and np.isnan(out[:, :, 200:]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parts", [2, 3])
def test_the_filter_gradient_adds_a_stack_of_part_sums_as_numpy_would(dtype, parts):
    # the threads' tile-product sums, added in part order in their dtype while the
    # transform reads them: the bits of adding them first, compiled or in NumPy
    algorithm = winograd.ALGORITHMS[3]
    stack = np.random.default_rng(parts).standard_normal((parts, 36, 24, 16)).astype(dtype)
    total = stack[0].copy()
    for products in stack[1:]:
        total += products
    added_first = winograd.filter_gradient(total, algorithm)
    np.testing.assert_array_equal(winograd.filter_gradient(stack, algorithm), added_first)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TOWERFLOW_NATIVE", "0")
        np.testing.assert_array_equal(winograd.filter_gradient(stack, algorithm),
                                      winograd.filter_gradient(total, algorithm))


def test_the_filter_transform_keeps_nan_and_refuses_bad_shapes():
    g = winograd.ALGORITHMS[3].transform
    grid = np.zeros((3, 3, 9), np.float32)
    grid[1, 2, 4] = np.nan
    out = np.empty((6, 6, 9), np.float32)
    assert native.winograd_filter(g, grid, out)
    assert np.isnan(out[:, :, 4]).all() and not np.isnan(np.delete(out, 4, axis=2)).any()
    # the filter gradient's G^T M G too, a NaN in any of the 36 terms (F(4x4, 3x3)'s
    # written-out steps add the terms a row leaves out times 0, as the general one)
    for term in range(36):
        products = np.zeros((6, 6, 9), np.float32)
        products.reshape(36, 9)[term, 4] = np.nan
        gradient = np.empty((3, 3, 9), np.float32)
        assert native.winograd_filter(np.ascontiguousarray(g.T), products, gradient)
        assert np.isnan(gradient[:, :, 4]).all()
        assert not np.isnan(np.delete(gradient, 4, axis=2)).any()
    with pytest.raises(ValueError, match="out: expected 288 items"):     # 6 * 6 * 8
        native.winograd_filter(g, np.zeros((3, 3, 8), np.float32), out)
    with pytest.raises(ValueError, match="grid: expected 81 items"):     # 3 * 3 * 9
        native._compiled.winograd_filter((6, 3, 9, 0, 9, 1), g,
                                         np.zeros((3, 3, 8), np.float32), out)
    with pytest.raises(ValueError, match=r"1 to 6 rows and columns.* got \(7, 3, 9, 0, 9, 1\)"):
        native._compiled.winograd_filter((7, 3, 9, 0, 9, 1), np.zeros((7, 3)), grid, out)
    with pytest.raises(ValueError, match=r"0 <= first <= stop <= elements .* got "
                                         r"\(6, 3, 9, 2, 10, 1\)"):
        native._compiled.winograd_filter((6, 3, 9, 2, 10, 1), g, grid, out)
    with pytest.raises(ValueError, match=r"stack >= 1 expected, got \(6, 3, 9, 0, 9, 0\)"):
        native._compiled.winograd_filter((6, 3, 9, 0, 9, 0), g, grid, out)
    with pytest.raises(ValueError, match="grid: expected 162 items"):    # 2 * 3 * 3 * 9
        native._compiled.winograd_filter((6, 3, 9, 0, 9, 2), g, grid, out)
    assert not native.winograd_filter(g.astype(np.float32), grid, out)   # float64 matrix only
    assert not native.winograd_filter(g, grid, out.astype(np.float64))   # mixed floats


def test_bad_tile_buffers_are_refused_by_name():
    x = np.zeros((1, 8, 8, 16), np.float32)
    with pytest.raises(ValueError, match="u: expected 2304 items"):  # 36 * 4 tiles * 16
        native._compiled.winograd_input((1, 8, 8, 16, 1, 1, 8, 8, 0, 4), x,
                                        np.zeros((3, 36, 16), np.float32))
    with pytest.raises(ValueError, match="m: expected"):
        native.winograd_output(np.zeros((3, 36, 16), np.float32), (1, 8, 8, 16), x)
    with pytest.raises(ValueError, match="tiles within a plane"):
        native.winograd_input(x, 1, 1, 8, 8, np.zeros((4, 36, 16), np.float32), first_tile=1)
    assert not native.winograd_input(x, 1, 1, 8, 8, np.zeros((4, 36, 16), np.float64))


def test_filter_gradient_names_patches_of_the_wrong_size():
    grad = np.zeros((2, 8, 8, 4), np.float32)
    with pytest.raises(ValueError, match=r"neither im2col patches \(128 rows\) nor Winograd "
                                         r"tiles \(32 rows\)"):
        winograd.kept_tiles(np.zeros((30, 9 * 16), np.float32), grad, (3, 3, 16, 4))


def small_cnn(images, classes, convs, pool):
    """(loss, labels and image placeholders) of ``convs`` 16-channel 3x3 ReLU
    convolutions, an optional 2x2 max pool, then a dense layer."""
    x = tf.placeholder(tf.float32, images.shape)
    labels = tf.placeholder(tf.int64, classes.shape)
    hidden = x
    for _ in range(convs):
        hidden = tf.layers.conv2d(hidden, 16, 3, padding="same", activation=tf.nn.relu)
    if pool:
        hidden = tf.layers.max_pooling2d(hidden, 2, 2)
    logits = tf.layers.dense(tf.layers.flatten(hidden), int(classes.max()) + 1)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    return loss, {x: images, labels: classes}


def test_a_fused_winograd_training_step_is_bit_identical_to_the_unfused_one(monkeypatch):
    # conv (16 -> 16 channels) -> bias -> relu -> max pool -> dense, trained one
    # step with and without fusion: the fused kernel pools Winograd's output
    rng = np.random.default_rng(0)
    images = rng.standard_normal((4, 12, 12, 16)).astype(np.float32)
    classes = np.array([0, 1, 2, 1])

    def step(fusion):
        monkeypatch.setenv("TOWERFLOW_FUSION", fusion)
        with tf.Graph().as_default():
            tf.set_random_seed(1)
            loss, feed = small_cnn(images, classes, convs=1, pool=True)
            train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                sess.run(train, feed)
                return sess.run([loss] + tf.trainable_variables(), feed)
    for fused, unfused in zip(step("1"), step("0")):
        np.testing.assert_array_equal(fused, unfused)


def test_a_winograd_cnn_learns_as_the_im2col_one_does(monkeypatch):
    # twenty steps of a two-conv CNN: the losses follow the im2col run's to
    # float32 rounding, step after step
    images = np.random.default_rng(3).standard_normal((8, 8, 8, 3)).astype(np.float32)
    classes = (images[..., 0].mean(axis=(1, 2)) > 0).astype(np.int64)

    def losses(winograd_flag):
        monkeypatch.setenv("TOWERFLOW_WINOGRAD", winograd_flag)
        with tf.Graph().as_default():
            tf.set_random_seed(2)
            loss, feed = small_cnn(images, classes, convs=2, pool=False)
            train = tf.train.GradientDescentOptimizer(0.05).minimize(loss)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                return [sess.run([loss, train], feed)[0] for _ in range(20)]
    with_winograd, with_im2col = losses("1"), losses("0")
    np.testing.assert_allclose(with_winograd, with_im2col, rtol=1e-4)
    assert with_winograd[-1] < 0.5 * with_winograd[0]


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_winograd_gradients_match_finite_differences(padding):
    x, w, grad_of = random_case((1, 6, 7, 16), 2, np.float64)
    table = build_nn_kernels(np)
    weights = grad_of(kernel(table, "Conv2D", {"strides": (1, 1), "padding": padding},
                             np.float64)(x, w)[0].shape)
    _, dx, dw, patches = conv_and_grads(table, x, w, lambda shape: weights, padding)
    assert patches.shape[0] != weights[..., 0].size      # Winograd tiles, not im2col rows

    def loss(x, w):
        y, _ = kernel(table, "Conv2D", {"strides": (1, 1), "padding": padding},
                      np.float64)(x, w)
        return float(np.sum(y * weights))
    for value, analytic in ((x, dx), (w, dw)):
        numeric = np.zeros(value.shape)
        for pos in np.ndindex(value.shape):
            original = value[pos]
            value[pos] = original + 1e-6
            up = loss(x, w)
            value[pos] = original - 1e-6
            down = loss(x, w)
            value[pos] = original
            numeric[pos] = (up - down) / 2e-6
        np.testing.assert_allclose(analytic, numeric, atol=1e-7)
