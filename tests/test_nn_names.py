"""TF 1.15's tf.nn activations, conv1d, atrous_conv2d, bidirectional_dynamic_rnn,
weighted_moments, xw_plus_b, the TF1 resize ops, tf.layers' 1-D layers,
einsum, tensordot, linspace, meshgrid, reverse_sequence and the tf.math /
tf.linalg namespaces (issue 34): values against NumPy in float64, gradients
against float64 central differences (tests/gradient_check.py)."""

import math

import numpy as np
import pytest
from gradient_check import away_from_zero, check_gradients, floats, grad_case, positive

import towerflow as tf

SELU_SCALE, SELU_ALPHA = 1.0507009873554805, 1.6732632423543772


def run(fetches, feed=None):
    with tf.Session() as session:
        return session.run(fetches, feed)


# -- activations ----------------------------------------------------------------------

ACTIVATIONS = {
    "leaky_relu": (tf.nn.leaky_relu, lambda x: np.where(x > 0, x, 0.2 * x)),
    "relu6": (tf.nn.relu6, lambda x: np.clip(x, 0, 6)),
    "selu": (tf.nn.selu, lambda x: np.where(x > 0, SELU_SCALE * x,
                                            SELU_SCALE * SELU_ALPHA * np.expm1(x))),
    "softplus": (tf.nn.softplus, lambda x: np.logaddexp(0.0, x)),
    "softsign": (tf.nn.softsign, lambda x: x / (1 + np.abs(x))),
    "swish": (tf.nn.swish, lambda x: x / (1 + np.exp(-x))),
    "elu": (tf.nn.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activations_match_numpy(name, dtype):
    build, reference = ACTIVATIONS[name]
    x = np.concatenate([np.linspace(-8, 8, 41), [-40.0, 40.0, 7.0, 5.99, 0.0]]).astype(dtype)
    y = run(build(tf.constant(x)))
    assert y.dtype == dtype
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(y, reference(x.astype(np.float64)), rtol=4 * eps, atol=4 * eps)


def test_softplus_takes_tf_s_three_ranges_without_overflow():
    x = np.array([-200.0, -30.0, 0.0, 30.0, 200.0, 1000.0], np.float32)
    y = run(tf.nn.softplus(x))
    assert np.isfinite(y).all()
    expected = np.logaddexp(0.0, x.astype(np.float64)).astype(np.float32)   # exp(-200) is 0
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_leaky_relu_defaults_to_alpha_0_2_and_casts_integers_to_float32():
    y = tf.nn.leaky_relu(tf.constant([-5, 0, 5]))
    assert y.dtype is tf.float32 and y.op.type == "LeakyRelu"
    np.testing.assert_array_equal(run(y), [-1.0, 0.0, 5.0])
    np.testing.assert_allclose(run(tf.nn.leaky_relu([-2.0, 3.0], alpha=0.01)), [-0.02, 3.0])


def test_relu6_keeps_integers_and_the_float_only_ones_refuse_them():
    y = tf.nn.relu6(tf.constant([-3, 2, 9], tf.int32))
    assert y.dtype is tf.int32
    np.testing.assert_array_equal(run(y), [0, 2, 6])
    for build in (tf.nn.selu, tf.nn.softplus, tf.nn.softsign):
        with pytest.raises(TypeError, match="'features' has DataType int32 not in list"):
            build(tf.constant([1, 2]))


def test_tf_math_softplus_is_tf_nn_softplus():
    assert tf.math.softplus is tf.nn.softplus and tf.math.softsign is tf.nn.softsign


# -- gradients (float64 central differences) ------------------------------------------

GRAD_CASES = [
    grad_case("leaky_relu", lambda x: tf.nn.leaky_relu(x, 0.3), away_from_zero(3, 4)),
    grad_case("relu6", tf.nn.relu6, lambda rng: rng.choice([-1.0, 1.0, 4.0, 8.0], (3, 4)) +
              rng.uniform(-0.5, 0.5, (3, 4))),
    grad_case("selu", tf.nn.selu, away_from_zero(3, 4)),
    grad_case("softplus", tf.nn.softplus, floats(3, 4)),
    grad_case("softsign", tf.nn.softsign, floats(3, 4)),
    grad_case("swish", tf.nn.swish, floats(3, 4)),
    grad_case("conv1d", lambda x, w: tf.nn.conv1d(x, w, 2, "SAME"), floats(2, 7, 3),
              floats(3, 3, 2), unknown=(0,)),
    grad_case("conv1d_dilated", lambda x, w: tf.nn.conv1d(x, w, 1, "VALID", dilations=2),
              floats(2, 7, 2), floats(2, 2, 2), unknown=(0,)),
    grad_case("atrous_conv2d", lambda x, w: tf.nn.atrous_conv2d(x, w, 2, "SAME"),
              floats(1, 5, 6, 2), floats(2, 3, 2, 2), unknown=(0,)),
    grad_case("weighted_moments", lambda x, w: list(tf.nn.weighted_moments(x, [0], w)),
              floats(4, 3), positive(4, 1)),
    grad_case("xw_plus_b", tf.nn.xw_plus_b, floats(3, 4), floats(4, 2), floats(2)),
    grad_case("resize_nearest_align_corners", lambda x: tf.image.resize_nearest_neighbor(
        x, [5, 7], align_corners=True), floats(2, 3, 4, 1)),
    grad_case("reverse_sequence", lambda x: tf.reverse_sequence(x, [3, 0, 5], seq_axis=1),
              floats(3, 5, 2)),
    grad_case("einsum_matmul", lambda a, b: tf.einsum("ij,jk->ik", a, b), floats(2, 3),
              floats(3, 4)),
    grad_case("einsum_summed_alone", lambda a, b: tf.einsum("bij,jk->bk", a, b),
              floats(2, 3, 4), floats(4, 2)),
    grad_case("einsum_three", lambda a, b, c: tf.einsum("ab,bc,cd->ad", a, b, c),
              floats(2, 3), floats(3, 2), floats(2, 2)),
    grad_case("einsum_trace", lambda a: tf.einsum("ii", a), floats(3, 3)),
    grad_case("tensordot", lambda a, b: tf.tensordot(a, b, [[1, 2], [0, 1]]),
              floats(2, 3, 4), floats(3, 4, 2)),
    grad_case("matrix_inverse", tf.linalg.inv, lambda rng: rng.standard_normal((2, 3, 3)) +
              4 * np.eye(3), unknown=()),
    grad_case("cholesky", lambda a: tf.linalg.cholesky(
        tf.matmul(a, a, transpose_b=True) + 3 * tf.eye(3, dtype=tf.float64)), floats(3, 3)),
    grad_case("matrix_determinant", tf.linalg.det, lambda rng: rng.standard_normal((2, 3, 3))
              + 2 * np.eye(3), unknown=()),
    grad_case("matrix_solve", tf.linalg.solve, lambda rng: rng.standard_normal((3, 3)) +
              4 * np.eye(3), floats(3, 2)),
    grad_case("matrix_solve_adjoint", lambda a, b: tf.linalg.solve(a, b, adjoint=True),
              lambda rng: rng.standard_normal((3, 3)) + 4 * np.eye(3), floats(3, 2)),
    grad_case("band_part", lambda a: tf.linalg.band_part(a, 1, 0), floats(2, 4, 3)),
    grad_case("diag", tf.linalg.diag, floats(2, 3)),
    grad_case("diag_part", tf.linalg.diag_part, floats(2, 3, 4)),
    grad_case("trace", tf.linalg.trace, floats(3, 3)),
    grad_case("norm", lambda a: tf.norm(a, axis=1), away_from_zero(3, 4)),
    grad_case("meshgrid", lambda a, b: tf.meshgrid(a, b), floats(3), floats(2)),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda case: case.name)
def test_gradients_match_central_differences(case):
    check_gradients(case, np.random.default_rng(34))


# -- convolutions ---------------------------------------------------------------------


def conv1d_reference(x, w, stride, padding, rate=1):
    """Direct float64 loops: out[b, i, o] = sum_k,c x[b, i*stride + k*rate - pad, c] w[k, c, o]."""
    width, taps = x.shape[1], (w.shape[0] - 1) * rate + 1
    if padding == "SAME":
        out_width = -(-width // stride)
        pad = max((out_width - 1) * stride + taps - width, 0) // 2
    else:
        out_width, pad = (width - taps) // stride + 1, 0
    out = np.zeros((x.shape[0], out_width, w.shape[2]))
    for i in range(out_width):
        for k in range(w.shape[0]):
            at = i * stride + k * rate - pad
            if 0 <= at < width:
                out[:, i] += x[:, at] @ w[k]
    return out


@pytest.mark.parametrize("stride,padding,rate", [(1, "SAME", 1), (2, "SAME", 1),
                                                 (3, "VALID", 1), (1, "SAME", 2),
                                                 (1, "VALID", 3)])
def test_conv1d_matches_direct_loops(stride, padding, rate):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 11, 3)), rng.standard_normal((3, 3, 4))
    y = run(tf.nn.conv1d(x, w, stride, padding, dilations=rate))
    np.testing.assert_allclose(y, conv1d_reference(x, w, stride, padding, rate), rtol=1e-12)


def test_conv1d_strides_as_lists_ncw_and_bad_formats():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 9, 3)), rng.standard_normal((2, 3, 5))
    expected = conv1d_reference(x, w, 2, "VALID")
    np.testing.assert_allclose(run(tf.nn.conv1d(x, w, [1, 2, 1], "VALID")), expected)
    ncw = tf.nn.conv1d(x.transpose(0, 2, 1), w, 2, "VALID", data_format="NCW")
    np.testing.assert_allclose(run(ncw), expected.transpose(0, 2, 1))
    with pytest.raises(ValueError, match='data_format must be "NWC" or "NCW".'):
        tf.nn.conv1d(x, w, 1, "SAME", data_format="NHWCX")
    with pytest.raises(ValueError, match="stride should be of length 1, 1 or 3 but was 2"):
        tf.nn.conv1d(x, w, [1, 1], "SAME")


def dilated_conv2d_reference(x, w, rate, padding):
    """float64 loops over the taps of a filter spread ``rate`` apart."""
    taps_h, taps_w = (w.shape[0] - 1) * rate + 1, (w.shape[1] - 1) * rate + 1
    if padding == "SAME":
        top, left = (taps_h - 1) // 2, (taps_w - 1) // 2
        x = np.pad(x, [(0, 0), (top, taps_h - 1 - top), (left, taps_w - 1 - left), (0, 0)])
    out_h, out_w = x.shape[1] - taps_h + 1, x.shape[2] - taps_w + 1
    out = np.zeros((x.shape[0], out_h, out_w, w.shape[3]))
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            window = x[:, i * rate:i * rate + out_h, j * rate:j * rate + out_w]
            out += window @ w[i, j]
    return out


@pytest.mark.parametrize("rate,padding", [(1, "SAME"), (2, "SAME"), (3, "VALID"),
                                          (2, "VALID")])
def test_atrous_conv2d_matches_dilated_loops(rate, padding):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 9, 8, 3)), rng.standard_normal((3, 2, 3, 2))
    y = run(tf.nn.atrous_conv2d(x, w, rate, padding))
    np.testing.assert_allclose(y, dilated_conv2d_reference(x, w, rate, padding), rtol=1e-12)


def test_atrous_conv2d_refuses_a_rate_below_one():
    with pytest.raises(ValueError, match="all values of dilation_rate must be positive"):
        tf.nn.atrous_conv2d(tf.zeros([1, 4, 4, 1]), tf.zeros([2, 2, 1, 1]), 0, "SAME")


# -- moments, xw_plus_b ---------------------------------------------------------------


def test_weighted_moments_match_numpy_weighted_statistics():
    rng = np.random.default_rng(4)
    x, weights = rng.standard_normal((6, 3)), rng.uniform(0.1, 2.0, (6, 1))
    mean, variance = run(tf.nn.weighted_moments(x, [0], weights))
    full = np.broadcast_to(weights, x.shape)
    expected_mean = np.average(x, axis=0, weights=full)
    np.testing.assert_allclose(mean, expected_mean)
    np.testing.assert_allclose(variance, np.average((x - expected_mean) ** 2, axis=0,
                                                    weights=full))
    kept = tf.nn.weighted_moments(x, [0], weights, keep_dims=True)
    assert [each.shape.as_list() for each in kept] == [[1, 3], [1, 3]]


def test_xw_plus_b():
    rng = np.random.default_rng(5)
    x, w, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2)), rng.standard_normal(2)
    y = tf.nn.xw_plus_b(x, w, b)
    assert y.op.name == "xw_plus_b"
    np.testing.assert_allclose(run(y), x @ w + b)


# -- resize ---------------------------------------------------------------------------


def tf1_source(i, in_size, out_size, align_corners, half_pixel):
    """TF 1.15's CalculateResizeScale and scalers, in float32 as its kernels."""
    if align_corners and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    return (np.float32(i) + np.float32(0.5)) * scale if half_pixel else np.float32(i) * scale


def bilinear_reference(image, size, align_corners=False, half_pixel=False):
    height, width = image.shape[1:3]

    def taps(i, in_size, out_size):
        where = tf1_source(i, in_size, out_size, align_corners, half_pixel)
        where = where - np.float32(0.5) if half_pixel else where
        low = math.floor(where)
        return max(low, 0), min(math.ceil(where), in_size - 1), float(where - low)
    out = np.zeros((image.shape[0], *size, image.shape[3]))
    for i in range(size[0]):
        top, bottom, dy = taps(i, height, size[0])
        for j in range(size[1]):
            left, right, dx = taps(j, width, size[1])
            upper = image[:, top, left] * (1 - dx) + image[:, top, right] * dx
            lower = image[:, bottom, left] * (1 - dx) + image[:, bottom, right] * dx
            out[:, i, j] = upper * (1 - dy) + lower * dy
    return out


def nearest_reference(image, size, align_corners=False, half_pixel=False):
    def pick(i, in_size, out_size):
        where = tf1_source(i, in_size, out_size, align_corners, half_pixel)
        index = math.floor(where + 0.5) if align_corners else math.floor(where)
        return min(max(index, 0), in_size - 1)
    rows = [pick(i, image.shape[1], size[0]) for i in range(size[0])]
    columns = [pick(j, image.shape[2], size[1]) for j in range(size[1])]
    return image[:, rows][:, :, columns]


RESIZES = [((4, 4), (3, 3)), ((3, 5), (7, 2)), ((5, 4), (5, 9)), ((2, 2), (1, 1))]


@pytest.mark.parametrize("in_size,out_size", RESIZES)
@pytest.mark.parametrize("mode", ["legacy", "align_corners", "half_pixel"])
def test_resize_bilinear_and_nearest_match_tf1_s_formulas(in_size, out_size, mode):
    image = np.random.default_rng(6).standard_normal((2, *in_size, 3)).astype(np.float32)
    flags = {"align_corners": mode == "align_corners", "half_pixel_centers": mode ==
             "half_pixel"}
    bilinear = tf.image.resize_bilinear(image, out_size, **flags)
    nearest = tf.image.resize_nearest_neighbor(image, out_size, **flags)
    assert bilinear.dtype is tf.float32 and bilinear.op.type == "ResizeBilinear"
    got_bilinear, got_nearest = run([bilinear, nearest])
    reference_flags = (flags["align_corners"], flags["half_pixel_centers"])
    np.testing.assert_allclose(got_bilinear, bilinear_reference(image, out_size,
                                                                *reference_flags), atol=1e-5)
    np.testing.assert_array_equal(got_nearest, nearest_reference(image, out_size,
                                                                 *reference_flags))


def test_resize_align_corners_known_values_and_kept_dtype():
    image = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    y = run(tf.image.resize_bilinear(image, [3, 3], align_corners=True))[0, :, :, 0]
    np.testing.assert_array_equal(y, [[0, 1.5, 3], [6, 7.5, 9], [12, 13.5, 15]])
    ints = tf.image.resize_nearest_neighbor(image.astype(np.int32), [2, 2],
                                            align_corners=True)
    assert ints.dtype is tf.int32
    np.testing.assert_array_equal(run(ints)[0, :, :, 0], [[0, 3], [12, 15]])
    images = tf.image.resize_images(image, [3, 3], align_corners=True)
    np.testing.assert_array_equal(run(images)[0, :, :, 0], y)


def test_resize_refuses_align_corners_with_half_pixel_centers_and_3d_images():
    with pytest.raises(ValueError, match="If half_pixel_centers is True, align_corners"):
        tf.image.resize_bilinear(tf.zeros([1, 2, 2, 1]), [3, 3], True, half_pixel_centers=True)
    with pytest.raises(ValueError, match="Shape must be rank 4 but is rank 3"):
        tf.image.resize_nearest_neighbor(tf.zeros([2, 2, 1]), [3, 3])


@pytest.mark.parametrize("mode", [{"align_corners": True}, {"half_pixel_centers": True}])
def test_resize_bilinear_gradient_is_its_transpose(mode):
    # <resize(x), g> = <x, resize'(g)> (float32 output, as TF: no float64 differences)
    rng = np.random.default_rng(7)
    x, g = rng.standard_normal((1, 3, 4, 2)), rng.standard_normal((1, 5, 3, 2))
    images = tf.placeholder(tf.float64, x.shape)
    resized = tf.image.resize_bilinear(images, [5, 3], **mode)
    (grad,) = tf.gradients(tf.reduce_sum(tf.cast(resized, tf.float64) * g), images)
    forward, backward = run([resized, grad], {images: x})
    np.testing.assert_allclose(np.sum(forward * g), np.sum(x * backward), rtol=1e-5)


# -- einsum, tensordot, linspace, meshgrid, reverse_sequence ---------------------------

EINSUMS = [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]),
           ("i,i->", [(5,), (5,)]), ("i,j->ij", [(2,), (3,)]), ("ij->ji", [(2, 3)]),
           ("ii", [(3, 3)]), ("aij,ajk->aik", [(2, 2, 3), (2, 3, 4)]),
           ("...ij,...jk->...ik", [(2, 5, 2, 3), (2, 5, 3, 1)]), ("bij,jk->bk", [(2, 3, 4),
                                                                             (4, 2)]),
           ("ab,bc,cd->ad", [(2, 3), (3, 2), (2, 4)]), ("ij,ij,jk->ik", [(2, 3), (2, 3),
                                                                       (3, 2)])]


@pytest.mark.parametrize("equation,shapes", EINSUMS, ids=[each[0] for each in EINSUMS])
def test_einsum_matches_numpy(equation, shapes):
    rng = np.random.default_rng(8)
    operands = [rng.standard_normal(shape) for shape in shapes]
    np.testing.assert_allclose(run(tf.einsum(equation, *operands)),
                               np.einsum(equation, *operands), rtol=1e-12)


def test_einsum_refuses_what_tf_1_15_refuses():
    m = tf.zeros([3, 3])
    with pytest.raises(ValueError, match="an axis appears more than once: ii"):
        tf.einsum("ii->i", m)
    with pytest.raises(ValueError, match="Indices have incorrect format: ij->j1"):
        tf.einsum("ij->j1", m)
    with pytest.raises(ValueError, match='Got 1 arguments for equation "ij,jk->ik", '
                                         "expecting 2"):
        tf.einsum("ij,jk->ik", m)
    with pytest.raises(ValueError, match="Invalid equation: ij->k"):
        tf.einsum("ij->k", m)
    with pytest.raises(TypeError, match="invalid keyword arguments for this function: "
                                        "optimize"):
        tf.einsum("ij->ji", m, optimize="greedy")


def test_einsum_checks_label_sizes_at_run_time():
    a = tf.placeholder(tf.float32, [None, None])
    with pytest.raises(tf.errors.InvalidArgumentError, match="label 'j'"):
        run(tf.einsum("ij,jk->ik", a, a), {a: np.zeros((2, 3), np.float32)})


@pytest.mark.parametrize("axes", [1, 0, [[1, 2], [0, 1]], [[0], [2]], [2, 0]])
def test_tensordot_matches_numpy(axes):
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((3, 4, 2)), rng.standard_normal((2, 4, 3))
    if axes == 1:
        b = rng.standard_normal((2, 5))
    if axes == [[1, 2], [0, 1]]:
        b = rng.standard_normal((4, 2, 5))
    np.testing.assert_allclose(run(tf.tensordot(a, b, axes)), np.tensordot(a, b, axes),
                               rtol=1e-12)


def test_linspace_and_meshgrid_match_numpy():
    for start, stop, num in [(0.0, 1.0, 5), (-3.0, 7.0, 11), (2.0, 2.0, 1), (1.0, -1.0, 4)]:
        y = run(tf.linspace(start, stop, num))
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, np.linspace(start, stop, num), rtol=1e-6)
    assert tf.lin_space is tf.linspace
    with pytest.raises(tf.errors.InvalidArgumentError, match="Requires num > 0: 0"):
        run(tf.linspace(0.0, 1.0, 0))
    for indexing in ("xy", "ij"):
        grids = run(tf.meshgrid([1, 2, 3], [4.0, 5.0], [6, 7], indexing=indexing))
        for got, expected in zip(grids, np.meshgrid([1, 2, 3], [4.0, 5.0], [6, 7],
                                                    indexing=indexing)):
            np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="indexing parameter must be either 'xy' or 'ij'"):
        tf.meshgrid([1], [2], indexing="yx")


def test_reverse_sequence_matches_a_per_row_reversal():
    rng = np.random.default_rng(10)
    x, lengths = rng.standard_normal((4, 6, 2)), np.array([6, 0, 3, 1])
    expected = x.copy()
    for row, length in enumerate(lengths):
        expected[row, :length] = x[row, :length][::-1]
    np.testing.assert_array_equal(run(tf.reverse_sequence(x, lengths, seq_axis=1)), expected)
    time_major = tf.reverse_sequence(x.transpose(1, 0, 2), lengths.astype(np.int64),
                                     seq_axis=0, batch_axis=1)
    np.testing.assert_array_equal(run(time_major), expected.transpose(1, 0, 2))
    lengths_in = tf.placeholder(tf.int32, [4])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"seq_lens\(0\) > input.dims"):
        run(tf.reverse_sequence(x, lengths_in, seq_axis=1), {lengths_in: [7, 0, 0, 0]})


# -- linear algebra -------------------------------------------------------------------


def spd(rng, *batch, size=3):
    a = rng.standard_normal((*batch, size, size))
    return a @ np.swapaxes(a, -1, -2) + size * np.eye(size)


def test_matrix_ops_match_numpy():
    rng = np.random.default_rng(11)
    a, b = spd(rng, 2), rng.standard_normal((2, 3, 2))
    lower = np.linalg.cholesky(a)
    checks = [(tf.linalg.inv(a), np.linalg.inv(a)), (tf.matrix_inverse(a, adjoint=True),
                                                     np.linalg.inv(np.swapaxes(a, -1, -2))),
              (tf.linalg.cholesky(a), lower), (tf.linalg.det(a), np.linalg.det(a)),
              (tf.linalg.solve(a, b), np.linalg.solve(a, b)),
              (tf.linalg.logdet(a), np.linalg.slogdet(a)[1]),
              (tf.linalg.cholesky_solve(tf.constant(lower), b), np.linalg.solve(a, b)),
              (tf.linalg.band_part(a, 1, 0), np.tril(np.triu(a, -1))),
              (tf.linalg.band_part(a, -1, 0), np.tril(a)),
              (tf.linalg.diag([[1.0, 2.0]]), [[[1.0, 0.0], [0.0, 2.0]]]),
              (tf.linalg.diag_part(b), np.diagonal(b, axis1=-2, axis2=-1)),
              (tf.linalg.trace(a), np.trace(a, axis1=-2, axis2=-1)),
              (tf.linalg.transpose(b), np.swapaxes(b, -1, -2)),
              (tf.linalg.matmul(b, b, adjoint_a=True), np.swapaxes(b, -1, -2) @ b),
              (tf.linalg.matvec(a, b[..., 0]), (a @ b[..., :1])[..., 0]),
              (tf.eye(2, 3, batch_shape=[2]), np.broadcast_to(np.eye(2, 3), (2, 2, 3)))]
    for tensor, expected in checks:
        np.testing.assert_allclose(run(tensor), expected, rtol=1e-10, atol=1e-12,
                                   err_msg=tensor.name)


@pytest.mark.parametrize("ord,axis", [("euclidean", None), (1, None), (np.inf, 0), (3, 1),
                                      ("fro", [0, 1]), (1, [0, 1]), (np.inf, [0, 1])])
def test_norm_matches_numpy(ord, axis):
    x = np.random.default_rng(12).standard_normal((3, 4))
    numpy_ord = None if ord in ("euclidean", "fro") and axis is None else ord
    expected = np.linalg.norm(x.ravel() if axis is None else x, numpy_ord,
                              None if axis is None else tuple(axis) if isinstance(axis, list)
                              else axis)
    np.testing.assert_allclose(run(tf.norm(x, ord=ord, axis=axis)), expected, rtol=1e-12)


def test_linalg_errors_are_tf_s():
    with pytest.raises(tf.errors.InvalidArgumentError, match="Input is not invertible."):
        run(tf.linalg.inv(np.zeros((2, 2))))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Cholesky decomposition was not "
                                                             "successful"):
        run(tf.linalg.cholesky(-np.eye(2)))
    with pytest.raises(ValueError, match="Dimensions must be equal, but are 2 and 3"):
        tf.linalg.det(tf.zeros([2, 3]))
    with pytest.raises(TypeError, match="'input' has DataType int32 not in list"):
        tf.linalg.inv(tf.zeros([2, 2], tf.int32))
    with pytest.raises(ValueError, match="'ord' must be a supported vector norm, got -1"):
        tf.norm(tf.zeros([2]), ord=-1)


def test_tf_math_and_tf_linalg_name_what_they_leave_out():
    assert tf.math.reduce_sum is tf.reduce_sum and tf.math.log is tf.log
    assert tf.linalg.inv is tf.matrix_inverse and tf.linalg.einsum is tf.einsum
    for module, namespace in ((tf.math, "tf.math"), (tf.linalg, "tf.linalg")):
        for name in module.NOT_IMPLEMENTED:
            assert name in " ".join(module.__doc__.split()) or name.startswith("LinearOp")
            with pytest.raises(AttributeError, match=f"towerflow has no {namespace}.{name} "
                                                     r"\(not implemented; see the TF1"):
                getattr(module, name)
    x = np.random.default_rng(13).standard_normal((4, 3))
    np.testing.assert_allclose(run(tf.math.reduce_variance(x, 0)), x.var(0))
    np.testing.assert_allclose(run(tf.math.reduce_std(x)), x.std())
    np.testing.assert_allclose(run(tf.math.log_sigmoid(x)), -np.logaddexp(0.0, -x))


# -- bidirectional_dynamic_rnn --------------------------------------------------------


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def gru_by_hand(weights, scope, x, lengths, reverse):
    """A GRU over each sequence in NumPy (TF's layout), backwards when
    ``reverse``; outputs zero past each length, placed where they were read."""
    gate_w, gate_b = weights[f"{scope}/gru_cell/gates/kernel"], weights[
        f"{scope}/gru_cell/gates/bias"]
    cand_w, cand_b = weights[f"{scope}/gru_cell/candidate/kernel"], weights[
        f"{scope}/gru_cell/candidate/bias"]
    units = cand_b.shape[0]
    outputs, states = np.zeros(x.shape[:2] + (units,)), np.zeros((x.shape[0], units))
    for row, length in enumerate(lengths):
        h = np.zeros(units)
        steps = range(length - 1, -1, -1) if reverse else range(length)
        for t in steps:
            reset, update = np.split(sigmoid(np.concatenate([x[row, t], h]) @ gate_w + gate_b),
                                     2)
            candidate = np.tanh(np.concatenate([x[row, t], reset * h]) @ cand_w + cand_b)
            h = update * h + (1 - update) * candidate
            outputs[row, t] = h
        states[row] = h
    return outputs, states


@pytest.mark.parametrize("time_major", [False, True])
def test_bidirectional_gru_is_a_forward_and_a_reversed_pass(time_major):
    rng = np.random.default_rng(14)
    x, lengths = rng.standard_normal((3, 5, 2)), np.array([5, 2, 0])
    inputs = tf.constant(x.transpose(1, 0, 2) if time_major else x)
    (out_fw, out_bw), (state_fw, state_bw) = tf.nn.bidirectional_dynamic_rnn(
        tf.nn.rnn_cell.GRUCell(4), tf.nn.rnn_cell.GRUCell(4), inputs,
        sequence_length=lengths, dtype=tf.float64, time_major=time_major)
    variables = tf.trainable_variables()
    assert {v.op.name for v in variables} >= {"bidirectional_rnn/fw/gru_cell/gates/kernel",
                                              "bidirectional_rnn/bw/gru_cell/gates/kernel"}
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        values = session.run([out_fw, out_bw, state_fw, state_bw] + variables)
    weights = {v.op.name: value for v, value in zip(variables, values[4:])}
    got = [each.transpose(1, 0, 2) if time_major and each.ndim == 3 else each
           for each in values[:4]]
    forward = gru_by_hand(weights, "bidirectional_rnn/fw", x, lengths, reverse=False)
    backward = gru_by_hand(weights, "bidirectional_rnn/bw", x, lengths, reverse=True)
    for actual, expected in zip(got, [forward[0], backward[0], forward[1], backward[1]]):
        np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-12)


def test_bidirectional_lstm_without_lengths_reverses_the_whole_time_axis():
    rng = np.random.default_rng(15)
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    cell_fw, cell_bw = tf.nn.rnn_cell.LSTMCell(3), tf.nn.rnn_cell.LSTMCell(3)
    (_, out_bw), (_, state_bw) = tf.nn.bidirectional_dynamic_rnn(cell_fw, cell_bw, x,
                                                                 dtype=tf.float32)
    # the same backward cell run by hand over the reversed inputs, reversed back
    by_hand, hand_state = tf.nn.dynamic_rnn(cell_bw, x[:, ::-1].copy(), dtype=tf.float32,
                                            scope="bidirectional_rnn/bw")
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        got, state, expected, expected_state = session.run([out_bw, state_bw, by_hand,
                                                            hand_state])
    np.testing.assert_allclose(got, expected[:, ::-1], rtol=1e-6)
    np.testing.assert_allclose(state.h, expected_state.h, rtol=1e-6)
    with pytest.raises(TypeError, match="The argument 'cell_bw'"):
        tf.nn.bidirectional_dynamic_rnn(cell_fw, "not a cell", x, dtype=tf.float32)


# -- tf.layers' 1-D layers and a 1-D CNN ----------------------------------------------


def test_layers_conv1d_and_1d_pools():
    rng = np.random.default_rng(16)
    x = rng.standard_normal((2, 9, 3)).astype(np.float32)
    y = tf.layers.conv1d(x, 4, 3, strides=2, padding="same", name="c1")
    assert y.shape.as_list() == [2, 5, 4]
    names = {v.op.name: v for v in tf.trainable_variables()}
    assert names["c1/kernel"].shape.as_list() == [3, 3, 4]
    pooled_max = tf.layers.max_pooling1d(x, 2, 2)
    pooled_mean = tf.layers.AveragePooling1D(3, 1, padding="valid")(x)
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        kernel, bias, conv, high, mean = session.run([names["c1/kernel"], names["c1/bias"],
                                                      y, pooled_max, pooled_mean])
    np.testing.assert_allclose(conv, conv1d_reference(x.astype(np.float64), kernel, 2,
                                                      "SAME") + bias, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(high, x[:, :8].reshape(2, 4, 2, 3).max(axis=2))
    windows = np.stack([x[:, i:i + 3].mean(axis=1) for i in range(7)], axis=1)
    np.testing.assert_allclose(mean, windows, rtol=1e-6)
    assert isinstance(tf.layers.Conv1D(2, 3), tf.layers.Layer)


def test_a_1d_cnn_with_leaky_relu_learns_digit_rows():
    # Each 8x8 digit read as a sequence of 8 rows of 8 pixels: conv1d + leaky_relu
    # learns it well above chance (10%) in a few hundred steps.
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int32)
    order = np.random.default_rng(17).permutation(len(labels))
    train, test = order[:1400], order[1400:]
    tf.set_random_seed(34)
    x, y = tf.placeholder(tf.float32, [None, 8, 8]), tf.placeholder(tf.int32, [None])
    h = tf.nn.leaky_relu(tf.layers.conv1d(x, 32, 3, padding="same"))
    h = tf.layers.max_pooling1d(h, 2, 2)
    h = tf.nn.leaky_relu(tf.layers.conv1d(h, 32, 3, padding="same"))
    logits = tf.layers.dense(tf.layers.flatten(h), 10)
    loss = tf.losses.sparse_softmax_cross_entropy(y, logits)
    step = tf.train.AdamOptimizer(0.01).minimize(loss)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32),
                                               y), tf.float32))
    rng = np.random.default_rng(18)
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        for _ in range(300):
            batch = rng.choice(train, 64)
            session.run(step, {x: images[batch], y: labels[batch]})
        held_out = session.run(accuracy, {x: images[test], y: labels[test]})
    assert held_out > 0.9, held_out
