"""What the Horovod-style test programs share: a fixed data set, and the
slice of each global batch a rank trains on.

A job of N ranks and a reference process that runs alone with ``--as-ranks
N`` see the same global batches: rank r takes micro-batches r, r + N, ... of
each global batch; the reference takes the whole batch at once.
"""

import argparse

import numpy as np

IMAGE_SIZE, CLASSES = 8, 10


def data_set(samples, channels=1, seed=7):
    """Images in [0, 1) and labels 0..9, the same in every process."""
    rng = np.random.RandomState(seed)
    images = rng.rand(samples, IMAGE_SIZE, IMAGE_SIZE, channels).astype(np.float32)
    labels = rng.randint(0, CLASSES, size=samples).astype(np.int64)
    return images, labels


def micro_batch(array, step, per_rank, ranks, passes, index):
    """Micro-batch ``index`` (0 .. ranks * passes - 1) of global batch ``step``."""
    global_batch = per_rank * ranks * passes
    start = step * global_batch + index * per_rank
    return array[start:start + per_rank]


def whole_batch(array, step, per_rank, ranks, passes):
    global_batch = per_rank * ranks * passes
    return array[step * global_batch:(step + 1) * global_batch]


def arguments(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out_dir")
    parser.add_argument("--as-ranks", type=int, default=0,
                        help="run alone on the global batch of a job of this many ranks")
    parser.add_argument("--batch-size", type=int, default=8, help="per rank and pass")
    parser.add_argument("--updates", type=int, default=6)
    parser.add_argument("--passes", type=int, default=1, help="backward_passes_per_step")
    parser.add_argument("--fp16-allreduce", action="store_true")
    return parser.parse_args()
