"""A Horovod TF1 program in the manner of Horovod's
tensorflow_synthetic_benchmark.py, written anew for towerflow: a plain
tf.Session, ``hvd.broadcast_global_variables(0)`` run after the initializer,
a DistributedOptimizer (fp16 compression optional) built after the session
started, batches timed with timeit and reported by rank 0 alone.

    towerflow launch -n 2 -- python benchmark_style.py OUT [--fp16-allreduce]
    python benchmark_style.py REF --as-ranks 2                  # the reference

The "synthetic" batches are constants cut from a fixed data set, so that a
job and the reference see the same global batches. Writes OUT/rank_<r>.npz
(the trainable variables) and, on rank 0, OUT/report.txt (the timings).
"""

import sys
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CLASSES, arguments, data_set, micro_batch, whole_batch

import towerflow as tf
import towerflow.horovod as hvd


def small_convnet(images, training):
    """A convolution, batch-free global average pooling and a classifier."""
    hidden = tf.layers.conv2d(images, 8, 3, padding="SAME", activation=tf.nn.relu)
    hidden = tf.layers.conv2d(hidden, 8, 3, strides=2, padding="SAME", activation=tf.nn.relu)
    pooled = tf.reduce_mean(hidden, axis=[1, 2])
    return tf.layers.dense(pooled, CLASSES)


def main():
    args = arguments(__doc__)
    hvd.init()
    alone = args.as_ranks > 0
    ranks = args.as_ranks if alone else hvd.size()
    tf.set_random_seed(200 + hvd.rank())

    config = tf.ConfigProto()
    config.gpu_options.visible_device_list = str(hvd.local_rank())

    x, y = data_set(args.updates * args.batch_size * ranks, channels=3)
    if alone:
        images, labels = whole_batch(x, 0, args.batch_size, ranks, 1), \
            whole_batch(y, 0, args.batch_size, ranks, 1)
    else:
        images = micro_batch(x, 0, args.batch_size, ranks, 1, hvd.rank())
        labels = micro_batch(y, 0, args.batch_size, ranks, 1, hvd.rank())
    data, target = tf.constant(images), tf.constant(labels)
    logits = small_convnet(data, training=True)

    opt = tf.train.GradientDescentOptimizer(0.05 * ranks)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    opt = hvd.DistributedOptimizer(opt, compression=compression)
    init = tf.global_variables_initializer()
    bcast_op = hvd.broadcast_global_variables(0)

    def log(line):
        if hvd.rank() == 0:
            with open(Path(args.out_dir) / "report.txt", "a") as report:
                report.write(line + "\n")

    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    log(f"Number of CPUs: {hvd.size()}")
    with tf.Session(config=config) as session:
        init.run()
        bcast_op.run()
        loss = tf.losses.sparse_softmax_cross_entropy(target, logits)
        train_op = opt.minimize(loss)
        seconds = timeit.timeit(lambda: session.run(train_op), number=args.updates)
        log(f"Img/sec per CPU: {args.batch_size * args.updates / seconds:.1f}")
        values = session.run({v.op.name: v for v in tf.trainable_variables()})
    np.savez(Path(args.out_dir) / f"rank_{hvd.rank()}.npz", **values)


if __name__ == "__main__":
    main()
