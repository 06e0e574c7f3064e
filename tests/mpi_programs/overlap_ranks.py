"""Run by tests/test_allreduce_overlap.py under `towerflow launch -n 2`: every
rank trains a 3-layer MLP (one tower on /cpu:0, all_reduce='mpi', small
buckets, so several all-reduces) on the same global batches, with or without
the all-reduce overlapping the backward pass, and traces one step the way
`towerflow train --trace` does (towerflow/training_trace.py).

    python overlap_ranks.py OUT_DIR --overlap 1|0 [--steps N]

Writes OUT_DIR/rank_<r>.npz (final variables) and, from rank 0,
OUT_DIR/trace.json (a Chrome trace of step 2, a row group per rank).
"""

import argparse
from pathlib import Path

import numpy as np

import towerflow as tf
from towerflow.training_trace import StepTraces

FEATURES, HIDDEN, CLASSES, BATCH = 32, 64, 10, 16


def tower_fn(inputs):
    x, labels = inputs
    init = tf.glorot_uniform_initializer
    hidden = x
    for seed in (1, 2):
        hidden = tf.layers.dense(hidden, HIDDEN, activation=tf.nn.relu,
                                 kernel_initializer=init(seed=seed))
    logits = tf.layers.dense(hidden, CLASSES, kernel_initializer=init(seed=3))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))


def overlap_arguments():
    """OUT_DIR --overlap 1|0 [--steps N] (also nccl_overlap_ranks.py's)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--overlap", type=int, required=True)
    parser.add_argument("--steps", type=int, default=4)
    return parser.parse_args()


def main():
    args = overlap_arguments()
    x = tf.placeholder(tf.float64, [None, FEATURES])
    labels = tf.placeholder(tf.int64, [None])
    # 8 KiB buckets: one or two variables each, so several all-reduces
    strategy = tf.parallel.DataParallel(["/cpu:0"], all_reduce="mpi", bucket_bytes=8 << 10,
                                        overlap=bool(args.overlap), timeout=60)
    step = strategy.minimize(tower_fn, (x, labels), tf.train.MomentumOptimizer(0.1, 0.9))
    traces = StepTraces(str(Path(args.out) / "trace.json"), steps=1, first_step=0,
                        strategy=strategy)
    rng = np.random.default_rng(0)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for done in range(args.steps):
            feed = {x: rng.standard_normal((BATCH, FEATURES)),
                    labels: rng.integers(0, CLASSES, BATCH)}
            sess.run(step.train_op, feed, **traces.run_options(done))
        values = sess.run(step.variables)
    traces.finish()
    np.savez(Path(args.out) / f"rank_{strategy.rank}.npz", *values)


if __name__ == "__main__":
    main()
