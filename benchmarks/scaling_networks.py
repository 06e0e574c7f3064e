"""The networks benchmarks/scaling_model.py counts, built with towerflow's
tf.layers on one sample: the cifar10 recipe's network, ResNet-50 and ResNet-101
(v1.5), Inception V3. NETWORKS maps a name to (logits builder, input shape)."""

import towerflow as tf
from towerflow.recipes.cifar10 import RECIPE as CIFAR10


def cifar10_logits(images):
    return CIFAR10.logits(images, training=True)


def resnet_logits(blocks_per_stage, classes=1000):
    """ResNet v1.5 (stride on the 3x3 convolution, as torchvision and NVIDIA's
    examples), channels last: (3, 4, 6, 3) is ResNet-50, (3, 4, 23, 3) ResNet-101."""
    def logits(images):
        y = _conv_bn(images, 64, 7, 2, relu=True)
        y = tf.layers.max_pooling2d(y, 3, 2, padding="same")
        for stage, blocks in enumerate(blocks_per_stage):
            for index in range(blocks):
                stride = 2 if stage > 0 and index == 0 else 1
                y = _bottleneck(y, 64 * 2 ** stage, stride, project=index == 0)
        y = tf.reduce_mean(y, axis=[1, 2])
        return tf.layers.dense(y, classes)
    return logits


def _conv_bn(x, filters, size, stride, relu, padding="same", scale=True):
    y = tf.layers.conv2d(x, filters, size, strides=stride, padding=padding, use_bias=False)
    y = tf.layers.batch_normalization(y, scale=scale, training=True)
    return tf.nn.relu(y) if relu else y


def _bottleneck(x, width, stride, project):
    shortcut = _conv_bn(x, 4 * width, 1, stride, relu=False) if project else x
    y = _conv_bn(x, width, 1, 1, relu=True)
    y = _conv_bn(y, width, 3, stride, relu=True)
    y = _conv_bn(y, 4 * width, 1, 1, relu=False)
    return tf.nn.relu(y + shortcut)


def inception3_logits(images, classes=1000):
    """Inception V3 (Szegedy et al. 2015, "Rethinking the Inception Architecture"),
    channels last, as Keras' InceptionV3 and TF-slim's inception_v3 lay it out:
    every convolution without bias and with a batch norm without gamma (scale=False),
    no auxiliary classifier (Keras has none; slim's AuxLogits is left out)."""
    y = _conv_bn_relu(images, 32, (3, 3), 2, "valid")
    y = _conv_bn_relu(y, 32, (3, 3), 1, "valid")
    y = _conv_bn_relu(y, 64, (3, 3))
    y = tf.layers.max_pooling2d(y, 3, 2)
    y = _conv_bn_relu(y, 80, (1, 1), 1, "valid")
    y = _conv_bn_relu(y, 192, (3, 3), 1, "valid")
    y = tf.layers.max_pooling2d(y, 3, 2)
    for pool_filters in (32, 64, 64):                    # Mixed_5b..5d: 35x35
        y = _inception_35(y, pool_filters)
    y = _reduction_35(y)                                 # Mixed_6a: to 17x17
    for width in (128, 160, 160, 192):                   # Mixed_6b..6e
        y = _inception_17(y, width)
    y = _reduction_17(y)                                 # Mixed_7a: to 8x8
    for _ in range(2):                                   # Mixed_7b, 7c
        y = _inception_8(y)
    y = tf.reduce_mean(y, axis=[1, 2])
    return tf.layers.dense(y, classes)


def _conv_bn_relu(x, filters, size, stride=1, padding="same"):
    """Inception's unit (Keras' conv2d_bn): its batch norm has no gamma, since
    the convolution after it can absorb a scale (slim's inception_v3_arg_scope too)."""
    return _conv_bn(x, filters, size, stride, relu=True, padding=padding, scale=False)


def _chain(x, *convolutions):
    """Convolutions one after another: each (filters, (height, width)[, stride,
    padding])."""
    for convolution in convolutions:
        x = _conv_bn_relu(x, *convolution)
    return x


def _average_pool_branch(x, filters):
    y = tf.layers.average_pooling2d(x, 3, 1, padding="same")
    return _conv_bn_relu(y, filters, (1, 1))


def _inception_35(x, pool_filters):
    return tf.concat([_chain(x, (64, (1, 1))),
                      _chain(x, (48, (1, 1)), (64, (5, 5))),
                      _chain(x, (64, (1, 1)), (96, (3, 3)), (96, (3, 3))),
                      _average_pool_branch(x, pool_filters)], axis=3)


def _reduction_35(x):
    return tf.concat([_chain(x, (384, (3, 3), 2, "valid")),
                      _chain(x, (64, (1, 1)), (96, (3, 3)), (96, (3, 3), 2, "valid")),
                      tf.layers.max_pooling2d(x, 3, 2)], axis=3)


def _inception_17(x, width):
    """Factorised 7x7 convolutions: 1x7 then 7x1."""
    return tf.concat([_chain(x, (192, (1, 1))),
                      _chain(x, (width, (1, 1)), (width, (1, 7)), (192, (7, 1))),
                      _chain(x, (width, (1, 1)), (width, (7, 1)), (width, (1, 7)),
                             (width, (7, 1)), (192, (1, 7))),
                      _average_pool_branch(x, 192)], axis=3)


def _reduction_17(x):
    return tf.concat([_chain(x, (192, (1, 1)), (320, (3, 3), 2, "valid")),
                      _chain(x, (192, (1, 1)), (192, (1, 7)), (192, (7, 1)),
                             (192, (3, 3), 2, "valid")),
                      tf.layers.max_pooling2d(x, 3, 2)], axis=3)


def _inception_8(x):
    """Expanded filter bank: a 1x3 and a 3x1 convolution side by side."""
    wide = _chain(x, (384, (1, 1)))
    deep = _chain(x, (448, (1, 1)), (384, (3, 3)))
    return tf.concat([_chain(x, (320, (1, 1))),
                      _conv_bn_relu(wide, 384, (1, 3)), _conv_bn_relu(wide, 384, (3, 1)),
                      _conv_bn_relu(deep, 384, (1, 3)), _conv_bn_relu(deep, 384, (3, 1)),
                      _average_pool_branch(x, 192)], axis=3)


NETWORKS = {
    "cifar10": (cifar10_logits, (32, 32, 3)),
    "resnet50": (resnet_logits((3, 4, 6, 3)), (224, 224, 3)),
    "resnet101": (resnet_logits((3, 4, 23, 3)), (224, 224, 3)),
    "inception3": (inception3_logits, (299, 299, 3)),
}
