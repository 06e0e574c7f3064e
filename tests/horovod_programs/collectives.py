"""hvd's collectives on every rank, their results saved for the test to check
against NumPy: each rank's inputs are a function of its rank alone.

    towerflow launch -n 2 -- python collectives.py OUT
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collective_inputs import dense_input, indexed_rows, ragged_rows

import towerflow as tf
import towerflow.horovod as hvd


def main():
    hvd.init()
    rank = hvd.rank()
    dense = tf.constant(dense_input(rank))
    rows = ragged_rows(rank)
    slices = tf.IndexedSlices(*(tf.constant(part) for part in indexed_rows(rank)),
                              dense_shape=tf.constant([5, 2], tf.int64))
    reduced_slices = hvd.allreduce(slices)
    fetches = {
        "average": hvd.allreduce(dense),
        "sum": hvd.allreduce(dense, op=hvd.Sum),
        "average_fp16": hvd.allreduce(dense, compression=hvd.Compression.fp16),
        "integer_sum": hvd.allreduce(tf.constant([rank + 1, 10 * rank], tf.int32), op=hvd.Sum),
        "gathered": hvd.allgather(tf.constant(rows)),
        "broadcast": hvd.broadcast(tf.constant(dense_input(rank)), root_rank=1),
        "broadcast_scalar": hvd.broadcast(tf.constant(float(rank) + 0.5), root_rank=1),
        "slices_values": reduced_slices.values,
        "slices_indices": reduced_slices.indices,
    }
    with tf.Session() as sess:
        values = sess.run(fetches)
    np.savez(Path(sys.argv[1]) / f"rank_{rank}.npz", **values)


if __name__ == "__main__":
    main()
