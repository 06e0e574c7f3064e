"""CIFAR-10 with a small fast residual network in the style of the CIFAR-10
speed records: channels-last, batch norm, label smoothing, Nesterov SGD with
a linear warm-up then a linear decay, random crop and flip augmentation, and
flip test-time augmentation (each test image's logits plus its mirror's).

    towerflow train cifar10 --data-dir ~/data              # every GPU as a tower
    towerflow train cifar10 --data-dir ~/data --cpu-towers 2 --epochs 4

``--data-dir`` holds ``cifar-10-batches-bin/`` or ``cifar-10-batches-py/``
(the official downloads; towerflow.data.cifar10.download fetches them).
"""

import towerflow as tf
from towerflow import data

WIDTHS = (32, 64, 128)


class Cifar10Recipe:
    name = "cifar10"
    defaults = {"batch_size": 256, "epochs": 10}
    label_smoothing = 0.2
    test_time_flip = True

    def load(self, data_dir=None):
        if data_dir is None:
            raise ValueError("the cifar10 recipe needs --data-dir (a directory with "
                             "cifar-10-batches-bin/ or cifar-10-batches-py/)")
        return data.cifar10.load(data_dir)

    def pipeline_options(self, train):
        mean, std = data.channel_stats(train.images)
        return {"crop_padding": 4, "flip": True, "mean": mean, "std": std}

    def logits(self, images, training):
        y = _conv_bn(images, WIDTHS[0], training)
        for width in WIDTHS:
            y = _block(y, width, training)
        y = tf.reduce_max(y, axis=[1, 2])                    # global max pool
        return tf.layers.dense(y, 10, use_bias=False) * 0.125

    def optimizer(self, global_step, total_steps):
        total = total_steps
        warmup = max(1, total // 5)
        # A linear decay to zero over the run, ramped up over its first fifth.
        decay = tf.train.polynomial_decay(0.2, global_step, max(total, 1),
                                          end_learning_rate=0.0, power=1.0)
        rate = tf.train.linear_warmup(decay, global_step, warmup)
        return tf.train.MomentumOptimizer(rate, 0.9, use_nesterov=True, weight_decay=5e-4)


def _conv_bn(x, width, training):
    y = tf.layers.conv2d(x, width, 3, padding="same", use_bias=False)
    y = tf.layers.batch_normalization(y, training=training, momentum=0.9)
    return tf.nn.relu(y)


def _block(x, width, training):
    """conv, pool, conv+residual: the speed-record network's building block."""
    y = _conv_bn(x, width, training)
    y = tf.layers.max_pooling2d(y, 2, 2)
    return y + _conv_bn(y, width, training)


RECIPE = Cifar10Recipe()
