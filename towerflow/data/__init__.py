"""Data sets and the input pipeline.

::

    from towerflow import data
    train, test, class_names = data.cifar10.load('~/data')    # uint8 NHWC, int64 labels
    train, test, class_names = data.digits.load()              # float32 [N, 8, 8, 1]
    mnist = data.mnist.read_data_sets('MNIST_data')            # TF 1.x's tutorial reader

    mean, std = data.channel_stats(train.images)
    with data.Pipeline(train.images, train.labels, batch_size=128, seed=0,
                       crop_padding=4, flip=True, mean=mean, std=std) as pipeline:
        for images, labels in pipeline.epoch():
            ...

TF1's ``tf.data`` API is here too (towerflow/api/dataset*.py)::

    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(32)
    images_batch, labels_batch = tf.data.make_one_shot_iterator(dataset).get_next()

Loaders never download at run time (``cifar10.download`` is there for machines
that are online). ``tf.parallel.DataParallel`` cuts each global batch into
tower shards itself; ``shard_sizes(batch, num_towers)`` says how.
"""

from ..api import dataset_iterator as _iterators
from ..api import missing as _missing
from ..api.dataset import AUTOTUNE as _AUTOTUNE
from ..api.dataset import Dataset
from ..api.dataset_files import (
           FixedLengthRecordDataset,
           TextLineDataset,
           TFRecordDataset,
)
from . import augment, cifar10, digits, mnist
from .augment import channel_stats
from .pipeline import Pipeline
from .splits import Split, Splits, shard_sizes

Iterator = _iterators.Iterator
make_one_shot_iterator = _iterators.make_one_shot_iterator
make_initializable_iterator = _iterators.make_initializable_iterator
# tf.data.experimental.AUTOTUNE: let the pipeline choose (num_parallel_calls, prefetch)
experimental = _missing.namespace("tf.data.experimental", AUTOTUNE=_AUTOTUNE)

__all__ = ["Dataset", "FixedLengthRecordDataset", "Iterator", "Pipeline", "Split", "Splits",
           "TFRecordDataset", "TextLineDataset", "augment", "channel_stats", "cifar10",
           "digits", "experimental", "make_initializable_iterator", "make_one_shot_iterator",
           "mnist", "shard_sizes"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
__getattr__ = _missing.module_getattr("tf.data")
