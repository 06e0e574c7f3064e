"""Each rank's inputs to collectives.py, shared with the test's NumPy references."""

import numpy as np


def dense_input(rank):
    """Values with more digits than float16 keeps."""
    rng = np.random.RandomState(11 + rank)
    return rng.uniform(-3, 3, size=(3, 4)).astype(np.float32)


def ragged_rows(rank):
    """rank + 1 rows of 3: the ranks gather different row counts."""
    return np.arange((rank + 1) * 3, dtype=np.float32).reshape(rank + 1, 3) + 100 * rank


def indexed_rows(rank):
    """(values, indices) of an IndexedSlices: two rows of a [5, 2] tensor."""
    values = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32) * (rank + 1)
    return values, np.array([rank, 4], np.int64)
