"""A Horovod TF1 training program in the manner of Horovod's
tensorflow_mnist.py, written anew for towerflow: hvd.init(), a learning rate
scaled by hvd.size(), hvd.DistributedOptimizer, BroadcastGlobalVariablesHook,
StopAtStepHook, ``visible_device_list = str(hvd.local_rank())`` and a
MonitoredTrainingSession that checkpoints on rank 0 only.

    towerflow launch -n 2 -- python mnist_style.py OUT     # the job
    python mnist_style.py REF --as-ranks 2                 # alone, global batches

Every rank starts from different random weights (a seed per rank): only the
broadcast from rank 0 makes them agree. With ``--passes P`` each update
takes P backward passes per rank (backward_passes_per_step=P, averaged).
Writes OUT/rank_<r>.npz: the trainable variables, global step, and who the
rank was (rank, size, local rank and size, cross rank and size).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CLASSES, IMAGE_SIZE, arguments, data_set, micro_batch, whole_batch

import towerflow as tf
import towerflow.horovod as hvd

BASE_LEARNING_RATE = 0.001


def conv_model(images, labels):
    """Two convolutions and two dense layers; the mean cross-entropy."""
    with tf.variable_scope("conv_layer1"):
        hidden = tf.layers.conv2d(images, 6, kernel_size=[3, 3], activation=tf.nn.relu,
                                  padding="SAME")
        hidden = tf.nn.max_pool(hidden, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1],
                                padding="SAME")
    with tf.variable_scope("conv_layer2"):
        hidden = tf.layers.conv2d(hidden, 8, kernel_size=[3, 3], activation=tf.nn.relu,
                                  padding="SAME")
        hidden = tf.reshape(hidden, [-1, (IMAGE_SIZE // 2) ** 2 * 8])
    hidden = tf.layers.dense(hidden, 32, activation=tf.nn.relu)
    logits = tf.layers.dense(hidden, CLASSES)
    return tf.losses.sparse_softmax_cross_entropy(labels, logits)


class FinalValues(tf.train.SessionRunHook):
    """Keeps the trainable variables' values as the session closes."""

    def end(self, session):
        self.values = session.run({v.op.name: v for v in tf.trainable_variables()})
        self.step = session.run(tf.train.get_global_step())


def main():
    args = arguments(__doc__)
    hvd.init()
    alone = args.as_ranks > 0
    ranks = args.as_ranks if alone else hvd.size()
    passes = 1 if alone else args.passes
    tf.set_random_seed(100 + hvd.rank())        # different weights until the broadcast

    images = tf.placeholder(tf.float32, [None, IMAGE_SIZE, IMAGE_SIZE, 1], name="images")
    labels = tf.placeholder(tf.int64, [None], name="labels")
    loss = conv_model(images, labels)
    opt = tf.train.RMSPropOptimizer(BASE_LEARNING_RATE * ranks)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    opt = hvd.DistributedOptimizer(opt, compression=compression, backward_passes_per_step=passes,
                                   average_aggregated_gradients=True)
    global_step = tf.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=global_step)

    final = FinalValues()
    hooks = [hvd.BroadcastGlobalVariablesHook(0),
             tf.train.StopAtStepHook(last_step=args.updates * passes), final]
    config = tf.ConfigProto()
    config.gpu_options.allow_growth = True
    config.gpu_options.visible_device_list = str(hvd.local_rank())
    out = Path(args.out_dir)
    checkpoint_dir = str(out / "checkpoints") if hvd.rank() == 0 else None

    x, y = data_set(args.updates * args.batch_size * ranks * args.passes)
    with tf.train.MonitoredTrainingSession(checkpoint_dir=checkpoint_dir, hooks=hooks,
                                           config=config, save_summaries_steps=None,
                                           log_step_count_steps=None) as sess:
        run = 0
        while not sess.should_stop():
            step, pass_ = divmod(run, passes)
            if alone:
                feed = {images: whole_batch(x, step, args.batch_size, ranks, args.passes),
                        labels: whole_batch(y, step, args.batch_size, ranks, args.passes)}
            else:
                index = pass_ * ranks + hvd.rank()
                feed = {images: micro_batch(x, step, args.batch_size, ranks, passes, index),
                        labels: micro_batch(y, step, args.batch_size, ranks, passes, index)}
            sess.run(train_op, feed_dict=feed)
            run += 1

    facts = {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
             "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
             "cross_size": hvd.cross_size(), "global_step": final.step, "runs": run}
    np.savez(out / f"rank_{hvd.rank()}.npz", **final.values, **facts)


if __name__ == "__main__":
    main()
