"""What the loaders return, and how a global batch is cut into tower shards.

::

    data = cifar10.load('~/data')
    data.train.images, data.train.labels    # a Split
    (train_x, train_y), (test_x, test_y), class_names = data
    shard_sizes(10, 4)                      # [3, 3, 2, 2]
"""

import collections
import operator
import os

__all__ = ["Split", "Splits", "shard_sizes"]

Split = collections.namedtuple("Split", ["images", "labels"])
Split.__doc__ = "One split of a data set: images [N, H, W, C] and int64 labels [N]."

Splits = collections.namedtuple("Splits", ["train", "test", "class_names"])
Splits.__doc__ = "A data set: the train and test Splits and the class names, by label."


def shard_sizes(batch, num_towers):
    """How many examples of a ``batch`` each of ``num_towers`` towers gets.

    The rule of ``numpy.array_split`` and of ``tf.parallel.DataParallel``: the
    first ``batch % num_towers`` towers get one example more; towers may get
    none when ``batch < num_towers``. Shards are contiguous, in tower order.

    >>> shard_sizes(10, 4)
    [3, 3, 2, 2]
    >>> shard_sizes(2, 4)
    [1, 1, 0, 0]
    """
    batch, num_towers = operator.index(batch), operator.index(num_towers)
    if num_towers < 1:
        raise ValueError(f"num_towers must be at least 1; received {num_towers}")
    if batch < 0:
        raise ValueError(f"batch must be a count of examples (>= 0); received {batch}")
    base, extra = divmod(batch, num_towers)
    return [base + 1 if tower < extra else base for tower in range(num_towers)]


def unusable_directory(directory):
    """Why ``directory`` cannot hold a data set's files ('the directory does not
    exist', 'it is not a directory'), or None: for not-found errors."""
    if not os.path.exists(directory):
        return "the directory does not exist"
    if not os.path.isdir(directory):
        return "it is not a directory"
    return None
