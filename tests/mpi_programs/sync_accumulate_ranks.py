"""Run by tests/test_sync_batch_norm_accumulation.py under `towerflow launch -n 2`:
every rank trains the small CNN of tests/test_sync_batch_norm.py with
sync_batch_norm=True, accumulation_steps=K, 2 logical-CPU towers a rank and
all_reduce='mpi', on the same global micro-batches of 12, 7 and 3, and counts
each micro-batch's collectives by kind (the statistics, their gradients, the
gradient buckets) from the run's step stats.

    python sync_accumulate_ranks.py OUT_DIR

Writes OUT_DIR/micro_batch_<B>_rank_<r>.npz: tower 0's global variables
(variable_0...) and the per-micro-batch counts.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared model
from conftest import split_cpu
from test_sync_batch_norm import small_cnn
from test_sync_batch_norm_accumulation import (
    LEARNING_RATE,
    K,
    count_collectives,
    micro_batches,
    placeholders,
)

import towerflow as tf
from towerflow.parallel.mpi import rank_from_environment


def train(micro_batch):
    """Tower 0's variables after the micro-batches, and each one's collectives."""
    tf.reset_default_graph()
    images, labels = placeholders()
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], all_reduce="mpi",
                                        sync_batch_norm=True, accumulation_steps=K,
                                        timeout=60)
    step = strategy.minimize(lambda shard: small_cnn(shard, False), (images, labels),
                             tf.train.GradientDescentOptimizer(LEARNING_RATE))
    variables = [v for v in tf.global_variables() if v.name.startswith("tower_0/")]
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    counts = []
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        for index, (x, y) in enumerate(micro_batches(micro_batch)):
            metadata = tf.RunMetadata()
            sess.run(step.op_for(index), {images: x, labels: y}, options=options,
                     run_metadata=metadata)
            counts.append(count_collectives(metadata))
        return sess.run(variables), counts


def main():
    out_dir = Path(sys.argv[1])
    rank = rank_from_environment()
    split_cpu(2)
    for micro_batch in (12, 7, 3):
        values, counts = train(micro_batch)
        np.savez(out_dir / f"micro_batch_{micro_batch}_rank_{rank}.npz",
                 statistics_sums=[c["statistics"] for c in counts],
                 statistics_gradient_sums=[c["statistics_gradients"] for c in counts],
                 gradient_sums=[c[None] for c in counts],
                 **{f"variable_{i}": value for i, value in enumerate(values)})
        print(f"rank {rank}, micro-batch {micro_batch}: collectives {counts}", flush=True)


if __name__ == "__main__":
    main()
