"""Run by tests/test_gradient_accumulation.py under `towerflow launch -n 2`:
every rank trains the float64 MLP of that test with 2 logical-CPU towers,
all_reduce='mpi' and accumulation_steps=K on the same micro-batches, and
counts the collectives each micro-batch ran: the MpiAllReduce ops of the
run's step stats, and the collectives this rank's MPI world started (its
arrival rounds, which also count the one-time check of the first plan's
bucket shapes).

    python accumulate_ranks.py OUT_DIR

Writes OUT_DIR/rank_<r>.npz: the final variables (arr_0...), and per
micro-batch collectives_per_micro_batch and mpi_calls_per_micro_batch.
"""

import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared model
from conftest import split_cpu
from test_gradient_accumulation import adam, examples, mlp, placeholders

import towerflow as tf
from towerflow.parallel import mpi

MICRO_BATCH, K, UPDATES = 7, 3, 3
BUCKET_BYTES = 8 * 50       # the MLP's float64 gradients in 2 buckets: (w1, b1), (w2, b2)


def data():
    return examples(MICRO_BATCH * K * UPDATES, seed=5)


def all_reduce_ops(metadata):
    """The all-reduces of the gradient buckets (``all_reduce_mpi/sum_<b>``: a
    blocking MpiAllReduce, or the wait of one overlapping the backward pass)
    in a run's step stats."""
    return sum(1 for device in metadata.step_stats.dev_stats for node in device.node_stats
               if re.search(r"all_reduce_mpi/sum_\d+$", node.node_name)
               and re.search(r" = MpiAllReduce(Wait)?\(", node.timeline_label))


def main():
    out_dir = Path(sys.argv[1])
    rank = mpi.rank_from_environment()
    split_cpu(2)
    x, labels = placeholders()
    global_step = tf.train.get_or_create_global_step()
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], all_reduce="mpi",
                                        bucket_bytes=BUCKET_BYTES, accumulation_steps=K,
                                        timeout=30)
    step = strategy.minimize(mlp, (x, labels), adam(global_step), global_step=global_step)
    images, classes = data()
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    ops, calls = [], []
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        for index, start in enumerate(range(0, len(classes), MICRO_BATCH)):
            feed = {x: images[start:start + MICRO_BATCH],
                    labels: classes[start:start + MICRO_BATCH]}
            before, metadata = mpi.world()._calls, tf.RunMetadata()
            sess.run(step.op_for(index), feed, options=options, run_metadata=metadata)
            calls.append(mpi.world()._calls - before)
            ops.append(all_reduce_ops(metadata))
        values = sess.run(step.variables)
    np.savez(out_dir / f"rank_{rank}.npz", *values, collectives_per_micro_batch=ops,
             mpi_calls_per_micro_batch=calls)
    print(f"rank {rank}: collectives per micro-batch {ops}, MPI calls {calls}", flush=True)


if __name__ == "__main__":
    main()
