"""The compiled window kernels (towerflow/backends/native_window.c; also
the GEMM of native_gemm.c) against the
NumPy kernels they stand in for: the same values (bit for bit for pooling and
im2col, to rounding for col2im, which adds in another order), on ties, NaN
and infinities, for every geometry they take; and NumPy for everything else.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import types

import numpy as np
import pytest

from towerflow.backends import native, nn_kernels, pool_kernels
from towerflow.backends.cpu_threads import SERIAL
from towerflow.backends.window_geometry import _layout

# The GEMMs run only on a vector path (AVX-512, or AVX2 with FMA): elsewhere
# native.gemm declines.
needs_vector_gemm = pytest.mark.skipif(
    not native.VECTOR_GEMM, reason="the compiled GEMM is not built, or the CPU has "
    "neither AVX-512 nor AVX2 with FMA (then every GEMM runs in NumPy)")
needs_native = pytest.mark.skipif(
    not native.available(), reason="towerflow.backends._native is not built (no C compiler "
    "when towerflow was installed) or is switched off (TOWERFLOW_NATIVE=0, "
    "TOWERFLOW_ISA=generic): the NumPy kernels run instead")

# (n, h, w, c, (kh, kw)) for pools whose windows tile the input (VALID, ksize ==
# strides; up to 8 taps): cropped edges, more channels than one block of 64
TILED_POOLS = [(2, 8, 8, 3, (2, 2)), (3, 9, 7, 5, (2, 2)), (2, 9, 9, 70, (2, 2)),
               (1, 5, 6, 2, (1, 1)), (2, 4, 9, 1, (2, 4)), (2, 6, 7, 3, (1, 3))]
# (n, h, w, c, kernel, stride, padding) for im2col / col2im
CONV_GEOMETRIES = [(2, 8, 8, 3, 3, 1, "SAME"), (3, 7, 6, 4, 3, 2, "SAME"),
                   (2, 9, 9, 2, 4, 3, "VALID"), (1, 7, 7, 5, 5, 2, "SAME"),
                   (2, 5, 5, 3, 1, 1, "VALID"), (1, 3, 4, 2, 5, 1, "SAME")]
FLOATS = [np.float32, np.float64]


@pytest.fixture
def numpy_only(monkeypatch):
    """Runs the NumPy kernels, as where _native is not built."""
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")


def tied_images(rng, shape, dtype):
    """Values on a coarse grid, so windows often hold their max twice, with
    NaN, +inf and -inf sprinkled in."""
    x = rng.integers(-3, 4, shape).astype(dtype)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=max(3, flat.size // 40), replace=False)
    flat[picks[0::3]], flat[picks[1::3]], flat[picks[2::3]] = np.nan, np.inf, -np.inf
    return x


def test_compiled_kernels_are_built_where_a_compiler_is():
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler!r}) on this machine")
    assert native._compiled is not None, "pip found a compiler but _native was not built"
    assert native.available() == (native.FORCED_ISA != "generic")


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    assert not native.available()
    x = np.ones((1, 4, 4, 1), np.float32)
    lay = _layout(4, 4, 2, 2, 2, 2, "VALID")
    assert not native.max_pool(x, lay, np.empty((1, 2, 2, 1), np.float32))


# -- max pooling -------------------------------------------------------------------------


def numpy_max_pool(x, lay, bias, relu):
    """The NumPy kernels' conv + bias → max pool (winners) → ReLU."""
    x = x + bias if bias is not None else x.copy()
    out = np.empty((x.shape[0], lay.out_h, lay.out_w, x.shape[3]), x.dtype)
    code = np.empty(out.shape, pool_kernels.winner_dtype(lay))
    pool_kernels._window_max(np, x, lay, -np.inf, out)
    pool_kernels._winner_bits(np, x, lay, out, code)
    return x, np.maximum(out, 0) if relu else out, code


@needs_native
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("geometry", TILED_POOLS)
@pytest.mark.parametrize("bias_relu", [False, True])
def test_max_pool_matches_numpy_bit_for_bit(geometry, dtype, bias_relu):
    n, h, w, c, k = geometry
    rng = np.random.default_rng(k[1] * 100 + c)
    x = tied_images(rng, (n, h, w, c), dtype)
    bias = rng.integers(-1, 2, c).astype(dtype) if bias_relu else None
    lay = _layout(h, w, *k, *k, "VALID")
    want_x, want_out, want_code = numpy_max_pool(x, lay, bias, bias_relu)
    out, code = np.full(want_out.shape, 7, dtype), np.full(want_out.shape, 99, np.uint8)
    assert native.max_pool(x, lay, out, code, bias, relu=bias_relu)
    np.testing.assert_array_equal(x, want_x)       # the bias is added everywhere, cropped cells too
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(code, want_code)
    assert native.max_pool(x, lay, out)            # without winners
    np.testing.assert_array_equal(out, numpy_max_pool(x, lay, None, False)[1])


@needs_native
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("geometry", TILED_POOLS)
@pytest.mark.parametrize("masked", [False, True])
def test_max_pool_grad_matches_numpy(geometry, dtype, masked, monkeypatch):
    n, h, w, c, k = geometry
    rng = np.random.default_rng(k[1] * 10 + c)
    lay = _layout(h, w, *k, *k, "VALID")
    x = tied_images(rng, (n, h, w, c), dtype)
    _, pooled, code = numpy_max_pool(x, lay, None, masked)
    grad = rng.standard_normal(pooled.shape).astype(dtype)
    grad.reshape(-1)[::17] = np.inf
    relu_output = pooled if masked else None
    got = pool_kernels._max_pool_grad(np, SERIAL, x, code, grad, lay, relu_output)
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    with np.errstate(invalid="ignore"):            # inf * 0 in the ReLU mask
        want = pool_kernels._max_pool_grad(np, SERIAL, x, code, grad, lay, relu_output)
    np.testing.assert_array_equal(got, want)       # NaN where inf meets a ReLU mask, as NumPy


@needs_native
def test_pools_that_do_not_tile_are_left_to_numpy():
    x = np.zeros((1, 6, 6, 2), np.float32)
    overlapping = _layout(6, 6, 3, 3, 2, 2, "VALID")
    padded = _layout(5, 5, 2, 2, 2, 2, "SAME")
    assert not native.max_pool(x, overlapping, np.empty((1, 2, 2, 2), np.float32))
    assert not native.max_pool(x[:, :5, :5], padded, np.empty((1, 3, 3, 2), np.float32))
    wide = _layout(6, 6, 3, 3, 3, 3, "VALID")      # 9 taps: more than uint8 winner bits
    assert not native.max_pool(x, wide, np.empty((1, 2, 2, 2), np.float32))
    ints = np.zeros((1, 4, 4, 1), np.int32)
    assert not native.max_pool(ints, _layout(4, 4, 2, 2, 2, 2, "VALID"),
                               np.empty((1, 2, 2, 1), np.int32))


# -- im2col and col2im -------------------------------------------------------------------


@needs_native
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("geometry", CONV_GEOMETRIES)
def test_im2col_matches_numpy_bit_for_bit(geometry, dtype):
    n, h, w, c, k, s, padding = geometry
    x = np.random.default_rng(h * w + c).standard_normal((n, h, w, c)).astype(dtype)
    lay = _layout(h, w, k, k, s, s, padding)
    patches = np.full((n * lay.out_h * lay.out_w, k * k * c), np.nan, dtype)
    assert native.im2col(x, lay, patches)
    np.testing.assert_array_equal(patches, nn_kernels._im2col(np, x, lay))


@needs_native
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("geometry", CONV_GEOMETRIES)
def test_col2im_is_the_adjoint_of_im2col(geometry, dtype):
    """<im2col(x), P> == <x, col2im(P)> for any x and P, and col2im matches the
    NumPy path (a sum of the taps' GEMMs) on a real filter gradient."""
    n, h, w, c, k, s, padding = geometry
    rng = np.random.default_rng(h * w * c)
    x = rng.standard_normal((n, h, w, c))
    lay = _layout(h, w, k, k, s, s, padding)
    patches = rng.standard_normal((n * lay.out_h * lay.out_w, k * k * c)).astype(dtype)
    dx = np.full((n, h, w, c), np.nan, dtype)
    assert native.col2im(patches, lay, dx)
    lhs = np.sum(nn_kernels._im2col(np, x, lay) * patches.astype(np.float64))
    np.testing.assert_allclose(np.sum(x * dx), lhs, rtol=1e-5 if dtype == np.float32 else 1e-12)

    filters = rng.standard_normal((k, k, c, 3)).astype(dtype)
    grad2d = rng.standard_normal((patches.shape[0], 3)).astype(dtype)
    assert native.col2im(np.ascontiguousarray(grad2d @ filters.reshape(-1, 3).T), lay, dx)
    want = nn_kernels._col2im_by_tap(np, grad2d, filters, x.shape, lay)
    np.testing.assert_allclose(dx, want, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


@needs_native
def test_bad_buffers_are_refused_by_name():
    lay = _layout(4, 4, 3, 3, 1, 1, "SAME")
    x = np.zeros((1, 4, 4, 2), np.float32)
    with pytest.raises(ValueError, match="patches: expected 288 items"):
        native._compiled.im2col(native._conv_geometry(x, lay), x,
                                np.empty((16, 17), np.float32))
    with pytest.raises(ValueError, match="patches: expected .* kind 'f'"):
        native._compiled.im2col(native._conv_geometry(x, lay), x,
                                np.empty((16, 18), np.float64))
    with pytest.raises(ValueError, match="windows must tile the input"):
        native._compiled.max_pool((1, 4, 4, 2, 3, 3, 2, 2), x, None,
                                  np.empty((1, 2, 2, 2), np.float32), None, False)
    assert not native.im2col(x[:, :, ::2], _layout(4, 2, 3, 3, 1, 1, "SAME"),
                             np.empty((8, 18), np.float32))      # not contiguous


# -- whole kernels, compiled and NumPy ---------------------------------------------------


def make_ctx(attrs):
    return types.SimpleNamespace(attrs=attrs, op=None, outputs_used=None,
                                 resource=lambda key, make: make())


def conv_pool_step(seed):
    """Conv2D + bias + ReLU + MaxPool forward (fused kernel) and both conv
    gradients, as one training step runs them, on 4 threads' worth of images."""
    rng = np.random.default_rng(seed)
    table = nn_kernels.build_nn_kernels(np)
    x = rng.standard_normal((5, 12, 12, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    attrs = {"strides": (1, 1), "padding": "SAME", "activation": "Relu",
             "pool": {"ksize": (2, 2), "strides": (2, 2), "padding": "VALID"}}
    patches, biased, pooled, winners = table["_FusedConv2D"](make_ctx(attrs))(x, w, bias)
    grad = rng.standard_normal(pooled.shape).astype(np.float32)
    pool_grad = table["_MaxPoolGradRelu"](make_ctx(attrs["pool"]))
    dbiased = pool_grad(biased, winners, grad, pooled)[0]
    conv_ctx = make_ctx({**attrs, "filter_shape": w.shape})
    dx = table["Conv2DBackpropInput"](conv_ctx)(x, w, dbiased)
    dw = table["Conv2DBackpropFilter"](conv_ctx)(patches, dbiased)
    return biased, pooled, winners, dbiased, dx, dw


@needs_native
def test_a_conv_pool_step_matches_the_numpy_kernels(monkeypatch):
    compiled = conv_pool_step(3)
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    numpy = conv_pool_step(3)
    # conv + bias only stands in for the ReLU output's shape: on the compiled
    # path it is never written out
    assert (compiled[0].shape, compiled[0].dtype) == (numpy[0].shape, numpy[0].dtype)
    assert compiled[0].strides == (0, 0, 0, 0)
    # The compiled GEMM sums the 27 products in another order than OpenBLAS:
    # each sum within 27 * eps/2 * sum|products| of the exact one (Higham's
    # bound), so the two within twice that; sum|products| <= max|x| * the
    # largest column sum of |w|. The winners and the pool gradient are the
    # same (no near-tie in this data).
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((5, 12, 12, 3)), rng.standard_normal((3, 3, 3, 8))
    magnitude = np.abs(x).max() * np.abs(w).reshape(27, 8).sum(axis=0).max()
    np.testing.assert_allclose(compiled[1], numpy[1], rtol=0,
                               atol=27 * np.finfo(np.float32).eps * magnitude)
    for name, got, want in zip(["winners", "pool grad"], compiled[2:4], numpy[2:4]):
        np.testing.assert_array_equal(got, want, err_msg=name)
    for name, got, want in zip(["dx", "dw"], compiled[4:], numpy[4:]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


@needs_native
def test_float16_convolutions_take_the_numpy_path(monkeypatch):
    """Mixed precision runs convolutions in float16, which the compiled loops
    do not take: the results are the NumPy kernels' own."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 9, 9, 3)).astype(np.float16)
    w = rng.standard_normal((3, 3, 3, 5)).astype(np.float16)
    attrs = {"strides": (1, 1), "padding": "SAME"}

    def run():
        table = nn_kernels.build_nn_kernels(np)
        y, patches = table["Conv2D"](make_ctx(attrs))(x, w)
        grad = np.ones(y.shape, np.float16)
        dx = table["Conv2DBackpropInput"](make_ctx(attrs))(x, w, grad)
        dw = table["Conv2DBackpropFilter"](make_ctx({"filter_shape": w.shape}))(patches, grad)
        return y, dx, dw
    compiled = run()
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    for got, want in zip(compiled, run()):
        np.testing.assert_array_equal(got, want)


# -- the compiled GEMM (Winograd's 36 products, im2col's thin GEMMs) --------------------

GEMM_SHAPES = [(1, 1, 1), (6, 27, 32), (13, 9, 33), (7, 64, 16), (100, 3, 70), (5, 0, 40),
               (0, 4, 32), (9, 600, 64), (13, 20, 48), (13, 9, 80),
               # tiles of 8 rows (32 = 4 x 8, 22 = 8 + 8 + 6) and of 10 (64 = 6 x 10 +
               # 4, 42 = 4 x 10 + 2, 18 = 10 + 8), see gemm_f32
               (32, 40, 32), (22, 3, 32), (64, 36, 48), (42, 11, 16), (18, 5, 16),
               # a.T @ b deeper than one chunk of b's rows (512 KiB): added chunk by chunk
               (27, 12293, 32), (5, 9000, 16)]


@needs_vector_gemm
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transposed", [False, True], ids=["a@b", "a.T@b"])
@pytest.mark.parametrize("m, k, n", GEMM_SHAPES)
def test_the_compiled_gemm_is_a_matrix_product(dtype, transposed, m, k, n):
    # rows past the kernel's 8- and 10-row tiles, columns in two-vector blocks, one
    # vector and both, an empty inner dimension, an empty product, a long inner
    # dimension; widths that are not whole vectors (the blocked kernel's padding);
    # deep a.T @ b in chunks of inner rows, the last one ragged
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((k, m) if transposed else (m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    out = np.full((m, n), np.nan, dtype)
    assert native.gemm(a, b, out, transpose_a=transposed)
    left = a.T if transposed else a
    # float64 inputs: a float64 reference has errors of the bound's size itself
    wide = np.longdouble if dtype == np.float64 else np.float64
    exact = left.astype(wide) @ b.astype(wide)
    # Higham: a sum of k products is within k * eps/2 * sum|products| of the exact one
    bound = k * np.finfo(dtype).eps / 2 * (np.abs(left).astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(out - exact) <= bound)


def test_whole_vectors_of_columns_are_16_float32_or_8_float64_values():
    assert [native.vector_columns(n, np.float32) for n in (16, 32, 48, 8, 33)] == \
        [True, True, True, False, False]
    assert [native.vector_columns(n, np.float64) for n in (8, 24, 4)] == [True, True, False]


@needs_vector_gemm
def test_the_compiled_gemm_refuses_mismatched_shapes_by_name():
    a, b = np.ones((4, 3), np.float32), np.ones((4, 16), np.float32)
    with pytest.raises(ValueError, match=r"gemm: shapes \(4, 3\) @ \(4, 16\)"):
        native.gemm(a, b, np.empty((4, 16), np.float32))
    assert not native.gemm(a, b.astype(np.float64), np.empty((3, 5)), transpose_a=True)
    with pytest.raises(ValueError, match=r"geometry \(m, k, n, .*the block within the "
                                         r"\[m, n\] product"):
        native._compiled.gemm((4, 3, 5, False, False, 0, 4, 2, 4), a.T.copy(),
                              np.ones((3, 5), np.float32), np.empty((4, 5), np.float32))


@needs_vector_gemm
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("depth", [1000, 3000, 10000])     # unpacked, either, chunked
@pytest.mark.parametrize("columns", [32, 64])
def test_a_split_product_gives_the_whole_products_bits(dtype, depth, columns):
    # blocks of columns or rows (a split GEMM's parts) take the whole product's
    # kernel, so each element sums in the same order
    rng = np.random.default_rng(depth + columns)
    a = rng.standard_normal((depth, 48)).astype(dtype)        # a.T @ b, a stored [K, M]
    b = rng.standard_normal((depth, columns)).astype(dtype)
    whole = np.empty((48, columns), dtype)
    assert native.gemm(a, b, whole, transpose_a=True)
    lanes = 64 // np.dtype(dtype).itemsize
    for block in ({"columns": (0, lanes)}, {"columns": (lanes, columns)},
                  {"rows": (0, 24)}, {"rows": (24, 48)}):
        part = np.full_like(whole, np.nan)
        assert native.gemm(a, b, part, transpose_a=True, **block)
        rows, cols = (slice(*block.get("rows", (0, 48))), slice(*block.get("columns", (0, columns))))
        np.testing.assert_array_equal(part[rows, cols], whole[rows, cols])


def test_the_compiled_gemm_runs_exactly_where_the_cpu_has_its_vectors():
    """On a CPU with neither vector path (a plain x86-64) native.gemm declines
    and writes nothing: its callers take NumPy's GEMM instead."""
    a, b = np.ones((60, 50), np.float32), np.ones((50, 48), np.float32)
    out = np.full((60, 48), np.nan, np.float32)
    assert bool(native.gemm(a, b, out)) == native.VECTOR_GEMM
    if native.VECTOR_GEMM:
        np.testing.assert_array_equal(out, 50.0)
    else:
        assert np.isnan(out).all()


@pytest.mark.parametrize("isa, running", [("avx2", True), ("generic", False), ("avx512", True)])
def test_towerflow_isa_forces_a_path(isa, running):
    """TOWERFLOW_ISA=avx2 runs the GEMMs on the AVX2 path (where the CPU has AVX2
    and FMA), avx512 on the AVX-512 one (where it has AVX-512: else none),
    generic runs no compiled kernel; an unknown path is refused by name."""
    code = ("import json; from towerflow.backends import native; "
            "print(json.dumps([native.GEMM_PATH, native.VECTOR_GEMM, native.available()]))")
    env = {**os.environ, "TOWERFLOW_ISA": isa}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    built = native._compiled is not None and os.environ.get("TOWERFLOW_NATIVE", "1") != "0"
    path = isa if isa in native.GEMM_PATHS and built else None
    assert json.loads(done.stdout) == [path, path is not None, running and built]
    env["TOWERFLOW_ISA"] = "sse2"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=False)
    assert "TOWERFLOW_ISA='sse2': expected one of avx512, avx2, generic" in done.stderr


@needs_native
def test_a_gemm_path_the_cpu_cannot_run_is_refused_by_name():
    with pytest.raises(ValueError, match="'sse2' is no vector path"):
        native._compiled.select_gemm_path("sse2")
    missing = [path for path in ("avx512", "avx2") if path not in native.GEMM_PATHS]
    for path in missing:
        with pytest.raises(ValueError, match=f"this CPU cannot run the {path} path"):
            native._compiled.select_gemm_path(path)
    assert native._compiled.gemm_path() == native.GEMM_PATH     # unchanged


@needs_vector_gemm
def test_the_compiled_gemm_gives_the_same_bits_on_every_thread():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((60, 50)).astype(np.float32), \
        rng.standard_normal((50, 48)).astype(np.float32)
    outs = [np.full((60, 48), np.nan, np.float32) for _ in range(4)]
    threads = [threading.Thread(target=native.gemm, args=(a, b, out)) for out in outs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not np.isnan(outs[0]).any()
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])
