"""scikit-learn's handwritten digits: 1,797 images of 8x8 pixels, 10 classes.

::

    from towerflow.data import digits
    train, test, class_names = digits.load(test_fraction=0.2, seed=0)
    train.images.shape, train.images.dtype     # (1438, 8, 8, 1) float32 in [0, 1]
    test.labels.dtype                          # int64, 0..9

The images come with scikit-learn (nothing is downloaded). They are small
enough to train on in seconds, which makes them a quick check of a model or
of a multi-tower setup before CIFAR-10.
"""

import numpy as np

from .splits import Split, Splits

__all__ = ["load", "CLASS_NAMES", "MAX_PIXEL"]

CLASS_NAMES = tuple(str(digit) for digit in range(10))
MAX_PIXEL = 16.0         # the digits' pixels are counts 0..16


def _load_digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise ImportError(
            f"towerflow.data.digits needs scikit-learn, which cannot be imported ({exc}); "
            f"install it with: pip install 'towerflow[data]' (or pip install "
            f"scikit-learn)") from None
    return load_digits()


def load(test_fraction=0.2, seed=0):
    """The digits as ``Splits(train, test, class_names)``.

    Images are float32 NHWC [N, 8, 8, 1] scaled to [0, 1], labels int64. The
    examples are shuffled by ``seed`` (the same split on every call) and the
    last ``round(test_fraction * 1797)`` of them form the test split.

    >>> train, test, _ = digits.load(test_fraction=0.2, seed=0)
    >>> len(train.labels), len(test.labels)
    (1438, 359)
    """
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must be between 0 and 1 (exclusive); "
                         f"received {test_fraction!r}")
    bunch = _load_digits()
    images = (bunch.images / MAX_PIXEL).astype(np.float32)[..., np.newaxis]
    labels = bunch.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    num_test = min(max(int(round(test_fraction * len(labels))), 1), len(labels) - 1)
    train, test = order[:-num_test], order[-num_test:]
    return Splits(Split(images[train], labels[train]), Split(images[test], labels[test]),
                  CLASS_NAMES)
