"""native.run_parts: the parts' compiled calls are recorded, then run on C
threads without the GIL. They give what the calls give run at once, each
exactly once and each part's in order; nothing runs before every part is
recorded; a kernel that cannot record, or an error in a part, stops the run
before any recorded call writes; nested and concurrent calls stay correct."""

import multiprocessing
import threading

import numpy as np
import pytest

from towerflow.backends import cpu_threads, native

pytestmark = pytest.mark.skipif(not native.available(), reason="no compiled kernels")

CHANNELS = 16


def rows_of(part, parts, rows):
    return rows * part // parts, rows * (part + 1) // parts


def batch_norm_rows(x, coefficients, out, first, stop, relu=False):
    """Record (or run) y = (x - mean) * gain + offset over rows [first, stop)."""
    native.batch_norm_apply((x.shape[0], CHANNELS, first, stop), x, coefficients, out, relu)


def random_rows(rows, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, CHANNELS)).astype(np.float32)
    coefficients = rng.standard_normal((3, CHANNELS)).astype(np.float32)
    return x, coefficients


def at_once(x, coefficients, relu=False):
    out = np.empty_like(x)
    batch_norm_rows(x, coefficients, out, 0, x.shape[0], relu)
    return out


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("parts", [1, 2, 7])
def test_recorded_calls_give_the_bits_of_calls_run_at_once(threads, parts):
    x, coefficients = random_rows(1000, seed=parts)
    out = np.full_like(x, np.nan)

    def work(part):
        batch_norm_rows(x, coefficients, out, *rows_of(part, parts, len(x)))
    native.run_parts(work, parts, threads)
    np.testing.assert_array_equal(out.view(np.uint32), at_once(x, coefficients).view(np.uint32))


def test_nothing_runs_until_every_part_is_recorded():
    x, coefficients = random_rows(600, seed=1)
    out = np.full_like(x, -7.0)
    seen_unwritten = []

    def work(part):
        batch_norm_rows(x, coefficients, out, *rows_of(part, 3, len(x)))
        seen_unwritten.append(bool(np.all(out == -7.0)))
    native.run_parts(work, 3, 2)
    assert seen_unwritten == [True, True, True]
    np.testing.assert_array_equal(out, at_once(x, coefficients))


def test_a_parts_calls_run_in_the_order_recorded():
    # the second call reads what the first writes
    x, coefficients = random_rows(512, seed=2)
    middle, out = np.empty_like(x), np.empty_like(x)

    def work(part):
        first, stop = rows_of(part, 4, len(x))
        batch_norm_rows(x, coefficients, middle, first, stop, relu=True)
        batch_norm_rows(middle, coefficients, out, first, stop)
    for _ in range(20):
        out.fill(np.nan)
        native.run_parts(work, 4, 2)
        np.testing.assert_array_equal(out, at_once(at_once(x, coefficients, True), coefficients))


@pytest.mark.parametrize("threads", [2, 3])
def test_every_part_runs_exactly_once_over_many_back_to_back_jobs(threads):
    # max_pool adds its bias to x in place: a part run twice (or never) would
    # leave x off by the bias; integers keep the sums exact. Up to 31 parts a
    # job's claims are a mask (each thread takes its home parts first), above
    # that the next part in order: both, mixed job after job.
    rng = np.random.default_rng(3)
    images_in_all = 48
    x = rng.integers(-50, 50, (images_in_all, 4, 4, CHANNELS)).astype(np.float32)
    start = x.copy()
    bias = np.ones(CHANNELS, np.float32)
    out = np.empty((images_in_all, 2, 2, CHANNELS), np.float32)
    jobs = 0
    for count in rng.integers(1, images_in_all + 1, 400):
        images = np.linspace(0, images_in_all, count + 1).astype(int)

        def work(part, images=images):
            first, stop = images[part], images[part + 1]
            native._compiled.max_pool((stop - first, 4, 4, CHANNELS, 2, 2, 2, 2), x[first:stop],
                                      bias, out[first:stop], None, False)
        native.run_parts(work, int(count), threads)
        jobs += 1
    np.testing.assert_array_equal(x, start + jobs)


def test_a_kernel_that_cannot_record_stops_the_run_before_any_recorded_call():
    x, coefficients = random_rows(64, seed=4)
    out = np.full_like(x, -7.0)
    image, tiles = np.ones((1, 4, 4, 16), np.float32), np.empty((1, 36, 16), np.float32)

    def work(part):
        batch_norm_rows(x, coefficients, out, *rows_of(part, 2, len(x)))
        if part == 1:   # Winograd's lone input transform runs at once: it cannot record
            assert native.winograd_input(image, 1, 1, 4, 4, tiles)
    with pytest.raises(RuntimeError, match="part 1 called winograd_input, which runs at once"):
        native.run_parts(work, 2, 2)
    assert np.all(out == -7.0)


def test_an_error_in_a_part_is_raised_and_no_recorded_call_runs():
    x, coefficients = random_rows(64, seed=5)
    out = np.full_like(x, -7.0)

    def work(part):
        batch_norm_rows(x, coefficients, out, *rows_of(part, 3, len(x)))
        if part == 2:
            raise ValueError("part 2 failed")
    with pytest.raises(ValueError, match="part 2 failed"):
        native.run_parts(work, 3, 2)
    assert np.all(out == -7.0)
    native.run_parts(lambda part: batch_norm_rows(x, coefficients, out, 0, len(x)), 1, 2)
    np.testing.assert_array_equal(out, at_once(x, coefficients))


def test_a_bad_argument_in_a_recorded_call_raises_and_records_nothing():
    x, coefficients = random_rows(64, seed=6)
    out = np.full_like(x, -7.0)

    def work(part):
        if part == 1:
            batch_norm_rows(x, coefficients[:2], out, 0, len(x))    # [2, C]: [3, C] expected
        batch_norm_rows(x, coefficients, out, 0, len(x))
    with pytest.raises(ValueError, match="coefficients: expected 48 items"):
        native.run_parts(work, 2, 2)
    assert np.all(out == -7.0)


def test_a_nested_run_records_into_the_enclosing_part_in_order():
    x, coefficients = random_rows(300, seed=7)
    middle, out = np.empty_like(x), np.empty_like(x)

    def work(part):
        first, stop = rows_of(part, 2, len(x))
        native.run_parts(lambda inner: batch_norm_rows(x, coefficients, middle, first, stop,
                                                       relu=True), 1, 2)
        batch_norm_rows(middle, coefficients, out, first, stop)
    native.run_parts(work, 2, 2)
    np.testing.assert_array_equal(out, at_once(at_once(x, coefficients, True), coefficients))


def test_another_python_threads_calls_run_at_once_while_one_records():
    x, coefficients = random_rows(128, seed=8)
    recorded, elsewhere = np.full_like(x, -7.0), np.full_like(x, -7.0)
    expected = at_once(x, coefficients)
    seen = []

    def other_thread():
        batch_norm_rows(x, coefficients, elsewhere, 0, len(x))

    def work(part):
        batch_norm_rows(x, coefficients, recorded, *rows_of(part, 2, len(x)))
        if part == 0:
            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join()
            seen.append(bool(np.all(elsewhere == expected)))
    native.run_parts(work, 2, 2)
    assert seen == [True]
    np.testing.assert_array_equal(recorded, expected)


# (JAX, when another test has imported it, warns that forking a multithreaded
# process may deadlock: the child here only runs NumPy and the compiled kernels)
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_the_pool_works_in_a_forked_child():
    x, coefficients = random_rows(256, seed=9)
    native.run_parts(lambda part: batch_norm_rows(x, coefficients, np.empty_like(x),
                                                  *rows_of(part, 2, len(x))), 2, 2)
    with multiprocessing.get_context("fork").Pool(1) as child:
        result = child.apply(_split_in_child, (x, coefficients))
    np.testing.assert_array_equal(result, at_once(x, coefficients))


def _split_in_child(x, coefficients):
    out = np.empty_like(x)
    native.run_parts(lambda part: batch_norm_rows(x, coefficients, out,
                                                  *rows_of(part, 4, len(x))), 4, 2)
    return out


@pytest.mark.parametrize("count, threads", [(-1, 2), (2, 0)])
def test_bad_counts_name_the_values(count, threads):
    with pytest.raises(ValueError, match=f"got count {count} and threads {threads}"):
        native.run_parts(lambda part: None, count, threads)


def test_the_pools_run_compiled_splits_and_serial_runs_at_once():
    x, coefficients = random_rows(400, seed=10)
    for pool in (cpu_threads.WorkerPool(2), cpu_threads.SERIAL):
        out = np.full_like(x, np.nan)

        def work(part, out=out):
            batch_norm_rows(x, coefficients, out, *rows_of(part, 3, len(x)))
        pool.run_compiled(work, 3)
        np.testing.assert_array_equal(out, at_once(x, coefficients))


@pytest.mark.skipif(not native.VECTOR_GEMM, reason="the compiled GEMM needs AVX-512 or AVX2 with FMA")
def test_gemm_im2col_and_col2im_record_and_give_the_bits_of_calls_run_at_once():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((6, 5, 5, 3)).astype(np.float32)
    w = rng.standard_normal((27, 32)).astype(np.float32)
    geometry = (6, 5, 5, 3, 3, 3, 1, 1, 1, 1, 5, 5)      # 3x3 SAME
    patches, product = np.empty((150, 27), np.float32), np.empty((150, 32), np.float32)
    native._compiled.im2col(geometry, x, patches)
    assert native.gemm(patches, w, product)
    back = np.zeros_like(x)
    native._compiled.col2im(geometry, back, patches)
    recorded = [np.full_like(array, np.nan) for array in (patches, product)]
    recorded_back = np.zeros_like(x)

    def work(part):     # each part: its images' patches, then their product by w
        rows = slice(75 * part, 75 * (part + 1))
        images = slice(3 * part, 3 * (part + 1))
        native._compiled.im2col((3,) + geometry[1:], x[images], recorded[0][rows])
        assert native.gemm(recorded[0][rows], w, recorded[1][rows])
        native._compiled.col2im((3,) + geometry[1:], recorded_back[images], recorded[0][rows])
    native.run_parts(work, 2, 2)
    for got, want in zip(recorded + [recorded_back], [patches, product, back]):
        np.testing.assert_array_equal(got, want)
