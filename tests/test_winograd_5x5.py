"""Winograd F(2x2, 5x5) (towerflow/backends/winograd.py): where the compiled
kernels run a stride-1 5x5 convolution of enough input channels by Winograd,
its output, input gradient and filter gradient equal the float64 direct sum
(to 1e-12 in float64, to the measured Winograd rounding in float32), for
ragged outputs, SAME and VALID, batches across cache blocks, on one thread
and split; Conv2D's patches output carries the kept tiles to the filter
gradient, which tells them from im2col patches by their rows."""

import numpy as np
import pytest
from gradient_check import check_gradients, floats, grad_case
from test_winograd import conv_and_grads as conv_and_grads_of

import towerflow as tf
from towerflow.backends import cpu_threads, native, winograd
from towerflow.backends.nn_kernels import build_nn_kernels

pytestmark = pytest.mark.skipif(not native.available(),
                                reason="towerflow.backends._native is not built")

F25 = winograd.ALGORITHMS[5]
B_T = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float)
A_T = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 1]], float)

# Largest difference from the float64 direct sum, relative to its largest
# value: measured for float32 on N(0, 1) inputs and gradients, filters of std
# 1/sqrt(25 C) (C 16..64, batches up to 50): up to 6e-6 for outputs and input
# gradients, 1e-5 for filter gradients (sums over every tile), where
# im2col's GEMM gives 1e-6 and 5e-7 (winograd.py). float64: the transforms'
# rounding only.
RELATIVE = {np.float32: 2e-5, np.float64: 1e-12}

# (x shape, out channels, padding): outputs of odd sizes (not whole 2x2 tiles),
# one tile (2x2), batch 1, an empty batch, channels at the threshold and past
# the C kernels' 64-channel blocks, output channels that are (64, 32) and are
# not (17, 5) whole vectors of the compiled GEMM (then NumPy's GEMMs run)
CASES = [
    ((3, 14, 14, 32), 64, "SAME"),
    ((2, 9, 7, 20), 17, "VALID"),       # output 5x3
    ((1, 5, 6, 24), 32, "SAME"),
    ((2, 6, 6, 70), 21, "VALID"),       # output 2x2: a single tile
    ((0, 8, 8, 32), 16, "SAME"),
    ((7, 11, 13, 20), 20, "SAME"),
]


def conv_and_grads(table, x, w, grad, padding):
    """(y, dx, dw, patches) of Conv2D and its two gradient kernels (test_winograd's,
    with the output gradient given)."""
    return conv_and_grads_of(table, x, w, lambda shape: grad, padding)


def direct(x, w, grad, padding):
    """(y, dx, dw) by NumPy's im2col in float64: the direct sums."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TOWERFLOW_NATIVE", "0")
        return conv_and_grads(build_nn_kernels(np), x.astype(np.float64),
                              w.astype(np.float64), grad.astype(np.float64), padding)[:3]


def random_case(x_shape, out_channels, padding, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal((5, 5, x_shape[3], out_channels)) / np.sqrt(25 * x_shape[3])
    out_h, out_w = (x_shape[1], x_shape[2]) if padding == "SAME" else \
        (x_shape[1] - 4, x_shape[2] - 4)
    grad = rng.standard_normal((x_shape[0], out_h, out_w, out_channels))
    return x, w, grad


def assert_close(actual, expected, dtype, what):
    scale = float(np.abs(expected).max()) if expected.size else 1.0
    assert actual.shape == expected.shape and actual.dtype == dtype, what
    np.testing.assert_allclose(actual, expected, rtol=0, atol=RELATIVE[dtype] * scale,
                               err_msg=what)


def kept_rows(x_shape, y_shape):
    """Rows of Conv2D's patches when Winograd ran: 36 terms per 2x2 tile of
    outputs in rows of 25 * C."""
    tiles = x_shape[0] * -(-y_shape[1] // 2) * -(-y_shape[2] // 2)
    return -(-36 * tiles // 25)


def test_the_f2x2_5x5_matrices_give_the_direct_correlation():
    # Y = A^T [(G g G^T) * (B^T d B)] A over a 6x6 window is the 2x2 outputs'
    # 5x5 correlation, with F(4x4, 3x3)'s B^T and the G winograd.py makes
    rng = np.random.default_rng(1)
    g_matrix = F25.transform
    for _ in range(20):
        d, g = rng.standard_normal((6, 6)), rng.standard_normal((5, 5))
        y = A_T @ ((g_matrix @ g @ g_matrix.T) * (B_T @ d @ B_T.T)) @ A_T.T
        want = [[np.sum(d[i:i + 5, j:j + 5] * g) for j in range(2)] for i in range(2)]
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-13)


def test_the_compiled_f2x2_transforms_match_their_matrices():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 5, 6, 3))
    top, left, out_h, out_w = 2, 1, 5, 3            # tiles 3 x 2, reading past every edge
    padded = np.zeros((2, 2 * 3 + 4, 2 * 2 + 4, 3))
    padded[:, top:top + 5, left:left + 6][:, :, :padded.shape[2] - left] = \
        x[:, :, :padded.shape[2] - left]
    windows = np.stack([padded[:, 2 * ty:2 * ty + 6, 2 * tx:2 * tx + 6]
                        for ty in range(3) for tx in range(2)], axis=1)
    want = np.einsum("ai,ntijc,bj->ntabc", B_T, windows, B_T).reshape(12, 36, 3)
    u = np.full((14, 36, 3), np.nan)                 # a spare tile either side stays put
    assert native.winograd_input(x, top, left, out_h, out_w, u, first_tile=1, tile=2)
    np.testing.assert_allclose(u[1:13], want, rtol=0, atol=1e-13)
    assert np.isnan(u[0]).all() and np.isnan(u[13]).all()

    m = rng.standard_normal((12, 36, 3))
    y = np.empty((2, 5, 3, 3))
    assert native.winograd_output(m, y.shape, y, tile=2)
    tiles = np.einsum("ai,ntijc,bj->ntabc", A_T, m.reshape(2, 6, 6, 6, 3), A_T)
    full = tiles.reshape(2, 3, 2, 2, 2, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 6, 4, 3)
    np.testing.assert_allclose(y, full[:, :5, :3], rtol=0, atol=1e-13)

    grad = rng.standard_normal((2, 5, 3, 3))
    cells = np.zeros((2, 6, 4, 3))
    cells[:, :5, :3] = grad
    blocks = np.stack([cells[:, 2 * ty:2 * ty + 2, 2 * tx:2 * tx + 2]
                       for ty in range(3) for tx in range(2)], axis=1)
    want = np.einsum("ia,ntijc,jb->ntabc", A_T, blocks, A_T).reshape(12, 36, 3)
    v = np.empty((12, 36, 3))
    assert native.winograd_grad_tiles(grad, v, tile=2)
    np.testing.assert_allclose(v, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, out_channels, padding", CASES)
@pytest.mark.parametrize("threads", ["serial", "pool"])
def test_winograd_5x5_and_gradients_match_the_direct_sum(request, x_shape, out_channels,
                                                         padding, dtype, threads):
    x, w, grad = random_case(x_shape, out_channels, padding)
    parallel = request.getfixturevalue("pool") if threads == "pool" else cpu_threads.SERIAL
    y, dx, dw, patches = conv_and_grads(build_nn_kernels(np, parallel), x.astype(dtype),
                                        w.astype(dtype), grad.astype(dtype), padding)
    for name, actual, expected in zip(("output", "dx", "dw"), (y, dx, dw),
                                      direct(x, w, grad, padding)):
        assert_close(actual, expected, dtype, name)
    # Winograd ran: the patches hold its kept tiles, as wide as im2col's patches
    assert patches.shape == (kept_rows(x_shape, y.shape), 25 * x_shape[3])


@pytest.mark.parametrize("block_bytes", ["1", "300000"])
def test_batches_across_cache_blocks_match_the_direct_sum(monkeypatch, pool, block_bytes):
    # blocks of one image, and of two (a ragged last block in each thread's part)
    monkeypatch.setenv("TOWERFLOW_CACHE_BLOCK_BYTES", block_bytes)
    x, w, grad = random_case((9, 7, 6, 24), 32, "SAME", seed=3)
    y, dx, dw, _ = conv_and_grads(build_nn_kernels(np, pool), x, w, grad, "SAME")
    for name, actual, expected in zip(("output", "dx", "dw"), (y, dx, dw),
                                      direct(x, w, grad, "SAME")):
        assert_close(actual, expected, np.float64, name)


def test_fewer_channels_than_the_threshold_keep_im2col():
    below = F25.min_channels - 1
    x, w, grad = random_case((2, 8, 8, below), below, "SAME")
    y, dx, dw, patches = conv_and_grads(build_nn_kernels(np), x, w, grad, "SAME")
    assert patches.shape == (2 * 8 * 8, 25 * below)
    for name, actual, expected in zip(("output", "dx", "dw"), (y, dx, dw),
                                      direct(x, w, grad, "SAME")):
        assert_close(actual, expected, np.float64, name)


def test_towerflow_winograd_0_turns_5x5_off(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_WINOGRAD", "0")
    x, w, grad = random_case((2, 8, 8, 32), 16, "SAME")
    _, _, _, patches = conv_and_grads(build_nn_kernels(np), x, w, grad, "SAME")
    assert patches.shape == (2 * 8 * 8, 25 * 32)


@pytest.mark.parametrize("window", [3, 5])
def test_kept_tile_rows_never_equal_im2col_rows(window):
    # what kept_tiles tells them apart by, for every output Winograd runs on
    algorithm = winograd.ALGORITHMS[window]
    for n in range(1, 9):
        for out_h in range(algorithm.tile, 41):
            for out_w in range(algorithm.tile, 41):
                tiles = n * algorithm.tiles_per_image(out_h, out_w)
                assert winograd.patch_rows(tiles, algorithm) < n * out_h * out_w


def test_filter_gradient_names_patches_of_the_wrong_size():
    grad = np.zeros((2, 8, 8, 4), np.float32)
    with pytest.raises(ValueError, match=r"neither im2col patches \(128 rows\) nor Winograd "
                                         r"tiles \(47 rows\) for a gradient of shape "
                                         r"\(2, 8, 8, 4\) and a filter of shape "
                                         r"\(5, 5, 32, 4\)"):
        winograd.kept_tiles(np.zeros((46, 25 * 32), np.float32), grad, (5, 5, 32, 4))
    with pytest.raises(ValueError, match=r"Winograd tiles \(none for this filter\)"):
        winograd.kept_tiles(np.zeros((46, 49 * 32), np.float32), grad, (7, 7, 32, 4))


def test_the_compiled_transforms_refuse_other_tiles_by_name():
    x = np.zeros((1, 8, 8, 16), np.float32)
    with pytest.raises(ValueError, match=r"the tile 4 \(F\(4x4, 3x3\)\) or 2"):
        native.winograd_input(x, 2, 2, 8, 8, np.zeros((64, 36, 16), np.float32), tile=1)
    with pytest.raises(ValueError, match=r"the tile 4 \(F\(4x4, 3x3\)\) or 2"):
        native.winograd_output(np.zeros((16, 36, 16), np.float32), x.shape, x, tile=3)


# -- through the graph, on every device ------------------------------------------------


@pytest.fixture
def winograd_calls(monkeypatch):
    # the algorithm of each Winograd convolution made (one per Conv2D or dx op)
    calls = []
    make = winograd.WinogradConv.__init__

    def counted(self, *args, **kwargs):
        make(self, *args, **kwargs)
        calls.append(self.algorithm.name)
    monkeypatch.setattr(winograd.WinogradConv, "__init__", counted)
    return calls


def conv5x5(x, w):
    return tf.nn.conv2d(x, w, [1, 1, 1, 1], "SAME")


def small_filter(*shape):
    """A filter of std 1/sqrt(taps): outputs near 1, so that the central
    differences' rounding stays far below the tolerance."""
    return lambda rng: rng.standard_normal(shape) / np.sqrt(np.prod(shape[:3]))


@pytest.mark.parametrize("case", [
    # dx by Winograd needs 20 output channels; dw differentiates a thinner filter
    grad_case("dx", conv5x5, floats(1, 3, 4, 20), small_filter(5, 5, 20, 20), wrt=(0,)),
    grad_case("dw", conv5x5, floats(1, 3, 4, 20), small_filter(5, 5, 20, 2), wrt=(1,)),
], ids=lambda case: case.name)
def test_5x5_gradients_match_finite_differences(case, op_device, rng, winograd_calls):
    check_gradients(case, rng, op_device)
    if op_device.startswith("/cpu") and native.available():
        assert "F(2x2, 5x5)" in winograd_calls


def test_5x5_convolutions_match_pytorch(op_device, winograd_calls):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((3, 9, 8, 24)), rng.standard_normal((5, 5, 24, 32)) * 0.05
    weights = rng.standard_normal((3, 9, 8, 32))
    with tf.Graph().as_default(), tf.device(op_device):
        x_in, w_in = tf.constant(x), tf.constant(w)
        y = conv5x5(x_in, w_in)
        grads = tf.gradients(tf.reduce_sum(y * weights), [x_in, w_in])
        with tf.Session() as sess:
            got = sess.run([y] + grads)
    x_t = torch.tensor(x.transpose(0, 3, 1, 2), requires_grad=True)
    w_t = torch.tensor(w.transpose(3, 2, 0, 1), requires_grad=True)
    y_t = torch.nn.functional.conv2d(x_t, w_t, padding=2)
    (y_t * torch.tensor(weights.transpose(0, 3, 1, 2))).sum().backward()
    want = [y_t.detach().numpy().transpose(0, 2, 3, 1), x_t.grad.numpy().transpose(0, 2, 3, 1),
            w_t.grad.numpy().transpose(2, 3, 1, 0)]
    for name, actual, expected in zip(("output", "dx", "dw"), got, want):
        assert_close(actual, expected, np.float64, name)
    if op_device.startswith("/cpu"):
        assert winograd_calls.count("F(2x2, 5x5)") == 2      # Conv2D and dx


def test_an_mnist_cnn_step_is_the_same_with_winograd_off(monkeypatch):
    # the classic TF1 MNIST CNN's 5x5 convolutions (1 -> 32 -> 64 channels) in
    # float32: one training step by Winograd equals the im2col one to the
    # measured rounding
    images = np.random.default_rng(3).standard_normal((6, 28, 28, 1)).astype(np.float32)
    classes = np.arange(6) % 10

    def step(flag):
        monkeypatch.setenv("TOWERFLOW_WINOGRAD", flag)
        with tf.Graph().as_default():
            tf.set_random_seed(4)
            x = tf.constant(images)
            hidden = tf.layers.conv2d(x, 32, 5, padding="same", activation=tf.nn.relu)
            hidden = tf.layers.max_pooling2d(hidden, 2, 2)
            hidden = tf.layers.conv2d(hidden, 64, 5, padding="same", activation=tf.nn.relu)
            logits = tf.layers.dense(tf.layers.flatten(hidden), 10)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=tf.constant(classes), logits=logits))
            grads = tf.gradients(loss, tf.trainable_variables())
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                return sess.run([loss] + grads)
    with_winograd, with_im2col = step("1"), step("0")
    for actual, expected in zip(with_winograd, with_im2col):
        assert_close(actual, expected, np.float32, "step")
