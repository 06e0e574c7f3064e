"""aligned_memory: while a plan's steps run, NumPy's arrays of 4 KiB or more
start on 64-byte boundaries; small ones, zeros and the allocator outside the
steps stay as NumPy's. (That training gives the same bits with the switch on
and off is the differential suite's: test_differential.py.)"""

import numpy as np
import pytest

import towerflow as tf
from towerflow.backends import aligned_memory

pytestmark = pytest.mark.skipif(not aligned_memory.built(),
                                reason="the aligned allocator is not built")

SIZES = [4096, 4097, 5000, 65536 + 4, 1 << 22, (1 << 25) + 12]


def handler_name():
    # NOTE: numpy.core became numpy._core in NumPy 2 (the old name warns)
    core = getattr(np, "_core", None) or np.core
    return core.multiarray.get_handler_name()


@pytest.mark.parametrize("nbytes", SIZES)
def test_blocks_of_4_kib_or_more_start_on_a_cache_line(nbytes):
    with aligned_memory.arrays():
        arrays = [np.empty(nbytes, np.uint8) for _ in range(8)]
        zeros = [np.zeros(nbytes // 4, np.float32) for _ in range(8)]
    assert all(array.ctypes.data % 64 == 0 for array in arrays)
    assert all(array.ctypes.data % 64 == 0 for array in zeros)


@pytest.mark.parametrize("nbytes", [1, 7, 100, 4095] + SIZES)
def test_zeros_are_zeros_and_arrays_hold_what_is_written(nbytes):
    with aligned_memory.arrays():
        # a freed block, dirty, comes back first: calloc must clear it
        np.full(nbytes, 0xAB, np.uint8)
        zeros = np.zeros(nbytes, np.uint8)
        grown = np.arange(nbytes, dtype=np.uint8)
    assert not zeros.any()
    np.testing.assert_array_equal(grown, np.arange(nbytes, dtype=np.uint8))


def test_the_allocator_is_set_only_inside_and_restored(monkeypatch):
    before = handler_name()
    with aligned_memory.arrays():
        assert handler_name() == "towerflow_aligned64"
    assert handler_name() == before
    monkeypatch.setenv("TOWERFLOW_ALIGNED_ARRAYS", "0")
    with aligned_memory.arrays():
        assert handler_name() == before


def test_a_plans_big_outputs_are_aligned_and_its_values_numpys(monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1001)).astype(np.float32)
    y = rng.standard_normal((64, 1001)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        total = tf.constant(x) + tf.constant(y) * 3.0
        with tf.Session() as sess:
            aligned = sess.run(total)
            monkeypatch.setenv("TOWERFLOW_ALIGNED_ARRAYS", "0")
            default = sess.run(total)
    assert aligned.ctypes.data % 64 == 0
    np.testing.assert_array_equal(aligned, x + y * np.float32(3.0))
    np.testing.assert_array_equal(default, aligned)
