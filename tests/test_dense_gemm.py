"""The blocked compiled GEMM (native.gemm, native_gemm.c's blocked_gemm) and the 2-D
MatMuls routed to it (parallel_gemm.compiled_matmul): NumPy's products in
float64 to ~1e-13 and in float32 within the K * eps bound, around every block
boundary (6-row tiles, 2-vector column panels, BLOCK_K = 256 deep, BLOCK_M =
144 rows, BLOCK_N = 1024 columns), all four transposes, split in parts; the
MatMul op and its gradients on every device.
"""

import os
import threading

import numpy as np
import pytest
from gradient_check import check_gradients, floats, grad_case

import towerflow as tf
from towerflow.backends import cpu_threads, native, parallel_gemm

needs_native = pytest.mark.skipif(
    not (native.VECTOR_GEMM and native.available()), reason="the compiled GEMM is not "
    "built, switched off (TOWERFLOW_NATIVE=0, TOWERFLOW_ISA=generic), or the CPU has no "
    "vector path (then every GEMM runs in NumPy)")

# (m, k, n): tiles of 6 rows and panels of 32 float32 / 16 float64 columns,
# ragged and whole; inner dimensions one short of, at and past 256 and 512; row
# blocks of 144 and column blocks of 1024 crossed; empty products and k = 0. Up to
# 64 columns with b under 512 KiB (not transposed) take the unpacked loops; (7,
# 2100, 64)'s b is past that, so the blocked kernel.
SHAPES = [(1, 1, 1), (5, 3, 15), (6, 256, 32), (7, 257, 33), (13, 255, 31), (12, 512, 16),
          (143, 300, 64), (144, 40, 97), (145, 513, 40), (150, 20, 1025), (50, 700, 1100),
          (7, 2100, 64), (3, 0, 40), (0, 9, 32), (11, 5, 0)]
TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]
TRANSPOSE_IDS = ["a@b", "aT@b", "a@bT", "aT@bT"]


def operands(rng, m, k, n, transpose_a, transpose_b, dtype):
    """a, b stored as the GEMM reads them: a [k, m] when transposed, b [n, k]."""
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    return a, b


def assert_product(out, left, right):
    """out within Higham's bound of the exact left @ right: k products summed
    in float are within k * eps/2 * sum |products| (float64: eps = 2.2e-16,
    against a long double reference: a float64 one errs by as much)."""
    wide = np.longdouble if out.dtype == np.float64 else np.float64
    exact = left.astype(wide) @ right.astype(wide)
    eps = np.finfo(out.dtype).eps
    bound = left.shape[1] * eps / 2 * (np.abs(left).astype(np.float64) @ np.abs(right))
    assert np.all(np.abs(out - exact) <= bound + np.finfo(out.dtype).tiny)


def assert_near_numpy(out, expected):
    """float64: within 1e-13 of the product's largest value (NumPy sums in
    another order; elements that cancel keep only that absolute error)."""
    scale = np.abs(expected).max() if expected.size else 0.0
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-13 * scale)


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_a, transpose_b", TRANSPOSES, ids=TRANSPOSE_IDS)
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_the_blocked_gemm_is_numpys_product(dtype, transpose_a, transpose_b, m, k, n):
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    a, b = operands(rng, m, k, n, transpose_a, transpose_b, dtype)
    out = np.full((m, n), np.nan, dtype)
    assert native.gemm(a, b, out, transpose_a, transpose_b)
    left, right = (a.T if transpose_a else a), (b.T if transpose_b else b)
    assert_product(out, left, right)
    if dtype == np.float64:
        assert_near_numpy(out, left @ right)


@needs_native
@pytest.mark.parametrize("transpose_a, transpose_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_a_block_of_the_product_is_written_and_nothing_else(transpose_a, transpose_b):
    m, k, n = 40, 300, 100
    a, b = operands(np.random.default_rng(1), m, k, n, transpose_a, transpose_b, np.float64)
    out = np.full((m, n), np.nan)
    native.gemm(a, b, out, transpose_a, transpose_b, rows=(7, 31), columns=(33, 70))
    whole = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
    assert_near_numpy(out[7:31, 33:70], whole[7:31, 33:70])
    out[7:31, 33:70] = np.nan
    assert np.isnan(out).all()


@needs_native
def test_parts_of_a_product_give_the_bits_of_the_whole():
    # every element sums its inner dimension in one fixed order, whatever the split
    rng = np.random.default_rng(2)
    a, b = operands(rng, 50, 600, 1100, False, True, np.float32)
    whole = np.empty((50, 1100), np.float32)
    native.gemm(a, b, whole, transpose_b=True)
    parts = np.empty_like(whole)
    for start, stop in cpu_threads.split(1100, 7):
        native.gemm(a, b, parts, transpose_b=True, columns=(start, stop))
    np.testing.assert_array_equal(parts, whole)
    for start, stop in cpu_threads.split(50, 3):
        native.gemm(a, b, parts, transpose_b=True, rows=(start, stop))
    np.testing.assert_array_equal(parts, whole)


@needs_native
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads Linux's /proc")
def test_threads_that_end_leave_no_packing_buffers_behind():
    # each thread packs into its own ~2.4 MiB buffer (float64), freed when it ends:
    # 40 threads kept theirs, 81 MiB, when the buffers had no destructor
    a, b, out = np.ones((12, 600)), np.ones((600, 1100)), np.empty((12, 1100))
    native.gemm(a, b, out)
    before = _resident_bytes()
    for _ in range(40):
        thread = threading.Thread(target=native.gemm, args=(a, b, out))
        thread.start()
        thread.join()
    # NOTE: half the 96 MiB that 40 kept buffers would hold: freed buffers stay
    # resident in glibc's per-thread arenas (towerflow's retain_freed_memory
    # turns trimming off), which held 28 MiB in a clean-clone CI run.
    assert _resident_bytes() - before < 40 * 2.4 * 2**20 / 2
    assert (out == 600).all()


def _resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@needs_native
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_a, transpose_b", TRANSPOSES, ids=TRANSPOSE_IDS)
@pytest.mark.parametrize("m, k, n", [(50, 300, 1030), (700, 40, 48), (9, 64, 33)])
def test_matmuls_split_across_the_pool_equal_one_part(pool, dtype, transpose_a,
                                                      transpose_b, m, k, n):
    """Wider than tall: parts of whole column panels; taller: of whole row tiles."""
    a, b = operands(np.random.default_rng(3), m, k, n, transpose_a, transpose_b, dtype)
    split = parallel_gemm.compiled_matmul(pool, a, b, transpose_a, transpose_b)
    serial = parallel_gemm.compiled_matmul(cpu_threads.SERIAL, a, b, transpose_a,
                                           transpose_b)
    np.testing.assert_array_equal(split, serial)
    assert_product(split, a.T if transpose_a else a, b.T if transpose_b else b)


@needs_native
def test_transposed_views_are_read_in_place_and_other_strides_left_to_numpy():
    rng = np.random.default_rng(4)
    a, w = rng.standard_normal((20, 64)), rng.standard_normal((40, 64))
    assert_near_numpy(parallel_gemm.compiled_matmul(cpu_threads.SERIAL, a, w.T),
                      a @ w.T)                                # w.T: Fortran-ordered
    assert parallel_gemm.compiled_matmul(cpu_threads.SERIAL, a[:, ::2], w[:32].T) is None


@needs_native
def test_narrow_products_mixed_dtypes_and_the_switch_stay_on_numpy(monkeypatch):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 128)).astype(np.float32)
    wide = rng.standard_normal((128, 32)).astype(np.float32)
    serial = cpu_threads.SERIAL
    assert parallel_gemm.compiled_matmul(serial, a, wide) is not None
    assert parallel_gemm.compiled_matmul(serial, a, wide[:, :31].copy()) is None  # < a panel
    assert parallel_gemm.compiled_matmul(serial, a, wide.astype(np.float64)) is None
    assert parallel_gemm.compiled_matmul(serial, a.astype(np.int32),
                                         wide.astype(np.int32)) is None
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    assert parallel_gemm.compiled_matmul(serial, a, wide) is None


@pytest.mark.skipif(native._compiled is None or not os.path.exists("/proc/cpuinfo"),
                    reason="needs the compiled kernels and Linux's /proc/cpuinfo")
def test_the_gemms_run_compiled_exactly_on_the_paths_the_cpu_has():
    with open("/proc/cpuinfo") as cpuinfo:
        flags = next(line for line in cpuinfo if line.startswith("flags")).split()
    fma = "fma" in flags
    expected = (("avx512",) if "avx512f" in flags and fma else ()) + (
        ("avx2",) if "avx2" in flags and fma else ())
    assert native._compiled.gemm_paths() == expected
    if native.FORCED_ISA is None:
        assert native.GEMM_PATH == (expected[0] if expected else None)


def test_without_a_vector_path_every_gemm_is_left_to_numpy(monkeypatch):
    # the GEMMs' vectors, split into pieces, ran 40x slower than OpenBLAS on plain x86-64
    monkeypatch.setattr(native, "VECTOR_GEMM", False)
    rng = np.random.default_rng(8)
    a, w = rng.standard_normal((50, 300)), rng.standard_normal((300, 64))
    out = np.full((50, 64), np.nan)
    assert not native.gemm(a, w, out) and np.isnan(out).all()
    assert not native.gemm_wins(1024, np.float32)
    assert parallel_gemm.compiled_matmul(cpu_threads.SERIAL, a, w) is None
    assert not native.winograd_gemms(np.ones((4, 36, 16)), 0, np.ones((36, 16, 16)),
                                     np.empty((4, 36, 16)))
    with tf.Graph().as_default(), tf.Session() as sess:
        assert_near_numpy(sess.run(tf.matmul(tf.constant(a), tf.constant(w))), a @ w)


@needs_native
def test_a_panel_is_two_vectors_of_columns():
    assert [native.gemm_wins(n, np.float32) for n in (31, 32, 1024)] == [False, True, True]
    assert [native.gemm_wins(n, np.float64) for n in (15, 16)] == [False, True]


# -- the MatMul op -------------------------------------------------------------------


@pytest.fixture
def compiled_calls(monkeypatch):
    """How many parts of MatMuls ran on the compiled GEMM."""
    calls = []
    original = parallel_gemm._split_gemm

    def counted(*args):
        calls.append(args[3].shape)
        return original(*args)
    monkeypatch.setattr(parallel_gemm, "_split_gemm", counted)
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transpose_a, transpose_b", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_matmul_op_on_every_device(op_device, compiled_calls, dtype, transpose_a,
                                   transpose_b):
    m, k, n = 50, 300, 70
    a, b = operands(np.random.default_rng(6), m, k, n, transpose_a, transpose_b, dtype)
    with tf.Graph().as_default(), tf.device(op_device):
        product = tf.matmul(tf.constant(a), tf.constant(b), transpose_a=transpose_a,
                            transpose_b=transpose_b)
        with tf.Session() as sess:
            got = sess.run(product)
    assert got.dtype == dtype
    assert_product(got, a.T if transpose_a else a, b.T if transpose_b else b)
    on_cpu = op_device.startswith("/cpu") and native.available() and native.VECTOR_GEMM
    assert compiled_calls == ([(m, n)] if on_cpu else [])


# Wide enough for the compiled GEMM in float64 (16 columns) in the forward
# product (17 x 18) and in both gradients (the shapes of their products below,
# as math_grad._matmul_grad builds them); 20 deep: ragged tiles and panels.
WIDE_GRAD_CASES = [
    grad_case("matmul_wide", lambda a, b: tf.matmul(a, b), floats(17, 20), floats(20, 18)),
    grad_case("matmul_wide_transpose_a", lambda a, b: tf.matmul(a, b, transpose_a=True),
              floats(20, 17), floats(20, 18)),
    grad_case("matmul_wide_transpose_b", lambda a, b: tf.matmul(a, b, transpose_b=True),
              floats(17, 20), floats(18, 20)),
    grad_case("matmul_wide_transpose_both",
              lambda a, b: tf.matmul(a, b, transpose_a=True, transpose_b=True),
              floats(20, 17), floats(18, 20)),
]
GRADIENT_PRODUCTS = {"matmul_wide": {(17, 20), (20, 18)},
                     "matmul_wide_transpose_a": {(20, 17), (20, 18)},
                     "matmul_wide_transpose_b": {(17, 20), (18, 20)},
                     "matmul_wide_transpose_both": {(20, 17), (18, 20)}}


@pytest.mark.parametrize("case", WIDE_GRAD_CASES, ids=lambda case: case.name)
def test_wide_matmul_gradients(op_device, compiled_calls, case):
    check_gradients(case, np.random.default_rng(7), device=op_device)
    on_cpu = op_device.startswith("/cpu") and native.available() and native.VECTOR_GEMM
    expected = GRADIENT_PRODUCTS[case.name] | {(17, 18)}
    assert set(compiled_calls) == (expected if on_cpu else set())
