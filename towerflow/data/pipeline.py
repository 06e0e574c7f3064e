"""The input pipeline: shuffled, augmented, normalised global batches from
in-memory arrays, made ahead on a background thread, resumable exactly.

::

    train, test, _ = tf.data.cifar10.load(data_dir)
    mean, std = tf.data.channel_stats(train.images)
    with tf.data.Pipeline(train.images, train.labels, batch_size=128, seed=0,
                          crop_padding=4, flip=True, mean=mean, std=std) as pipeline:
        for epoch in range(epochs):
            for images, labels in pipeline.epoch():     # float32 [128, 32, 32, 3], int64 [128]
                sess.run(step.train_op, {x: images, y: labels})
            saver.save(...); np.savez(path, **pipeline.state())

Order. Epoch ``e`` visits the examples in the permutation drawn from
``(seed, e)``, in global batches of ``batch_size``; the last batch holds
what is left (fewer examples, never padded or repeated: ``DataParallel``
weighs a ragged batch exactly) unless ``drop_remainder=True``. The random
crop offsets and flips of batch ``b`` are drawn from ``(seed, e, b)``.
So every batch is a pure function of (seed, epoch, batch index): the order
is reproducible, differs from epoch to epoch, and is the same with or
without prefetching.

Resuming. ``state()`` is a dict of plain ints: seed, epoch, position (the
examples of this epoch already delivered), batch_size and num_examples. It
counts batches the caller has *received*, not those made ahead. After
``restore(state)`` the pipeline delivers the very batches it would have
delivered next.
"""

import collections.abc
import operator

import numpy as np

from . import batch_ring
from .prefetch import Prefetcher

__all__ = ["Pipeline", "check_state"]

_ORDER_STREAM, _AUGMENT_STREAM = 0, 1
_STATE_KEYS = ("seed", "epoch", "position", "batch_size", "num_examples")


def check_state(state, batch_size, num_examples, drop_remainder=False):
    """The values of ``state`` (from ``Pipeline.state()``) as ints, or a ValueError
    (TypeError for a state that is no dict) saying why a Pipeline of ``batch_size`` over ``num_examples`` examples cannot
    continue from it; checked before a run builds anything on it.

    >>> check_state(pipeline.state(), 64, 1438)["epoch"]
    2
    """
    expected = f"expected the dict of {', '.join(_STATE_KEYS)} that state() returns"
    if not isinstance(state, collections.abc.Mapping):
        raise TypeError(f"Pipeline state is a {type(state).__name__}; {expected}")
    missing = [key for key in _STATE_KEYS if key not in state]
    if missing:
        raise ValueError(f"Pipeline state lacks {', '.join(missing)}; {expected}")
    values = {key: _whole_number(state[key], key) for key in _STATE_KEYS}
    for key, mine in (("batch_size", batch_size), ("num_examples", num_examples)):
        if values[key] != mine:
            raise ValueError(f"Pipeline state is for {key}={values[key]}, but this "
                             f"Pipeline has {key}={mine}: the data order would differ")
    position = values["position"]
    if values["epoch"] < 0 or values["seed"] < 0 or position < 0 or position % batch_size \
            or position // batch_size >= _batches(num_examples, batch_size, drop_remainder):
        raise ValueError(f"Pipeline state has an impossible seed/epoch/position "
                         f"({values['seed']}, {values['epoch']}, {position}) for "
                         f"batch_size {batch_size} and {num_examples} examples")
    return values


def _batches(num_examples, batch_size, drop_remainder):
    """Batches in one epoch: the last one smaller unless ``drop_remainder``."""
    full, rest = divmod(num_examples, batch_size)
    return full + (1 if rest and not drop_remainder else 0)


def _whole_number(value, key):
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"Pipeline state's {key} is {value!r}, not a whole number") from None


def _random_seed():
    return int(np.random.SeedSequence().entropy % (1 << 63))


def _epoch_order(seed, epoch, count, shuffle):
    if not shuffle:
        return np.arange(count)
    return np.random.default_rng([seed, epoch, _ORDER_STREAM]).permutation(count)


class _BatchMaker:
    """Makes batch ``index`` of one epoch into the pipeline's ring; holds the
    ring and the settings only (never the Pipeline), so the prefetch thread
    keeps nothing else alive."""

    def __init__(self, pipeline, epoch):
        self.ring = pipeline._ring
        self.order = _epoch_order(pipeline._seed, epoch, pipeline.num_examples,
                                  pipeline.shuffle)
        self.seed, self.epoch, self.batch_size = pipeline._seed, epoch, pipeline.batch_size

    def __call__(self, index):
        chosen = self.order[index * self.batch_size:(index + 1) * self.batch_size]
        rng = np.random.default_rng([self.seed, self.epoch, _AUGMENT_STREAM, index])
        return self.ring.make(chosen, rng)


class Pipeline:
    """Global batches of (images, labels) for training, epoch by epoch.

    images: array [N, ...] (NHWC [N, H, W, C] for crops and flips).
    labels: array [N] (or [N, ...]); returned as they are.
    batch_size: examples per global batch (DataParallel splits it across towers).
    shuffle, seed: a new permutation each epoch, drawn from ``seed`` (a random
        seed, recorded in ``state()``, when None).
    drop_remainder: leave out the last, smaller batch of each epoch.
    crop_padding: pad each image with this many zeros per side, then crop a
        random window of the original size (0: no crop).
    flip: mirror each image left-right with probability 1/2.
    mean, std, scale: images become float32 ``(x * scale - mean) / std``, with
        ``scale`` 1/255 for integer pixels and 1 for float ones. When all three
        are None, images keep their dtype.
    prefetch: batches made ahead on a background thread (0: made on demand).
        Batches are made in place into a ring of ``prefetch + 3`` reused buffers
        (towerflow/data/batch_ring.py); a buffer the caller still holds is never
        written again. TOWERFLOW_DATA_RING=0: new arrays, the same batches.

    >>> pipeline = Pipeline(images, labels, batch_size=100, seed=0)
    >>> for batch_images, batch_labels in pipeline.epoch(): ...
    """

    def __init__(self, images, labels, batch_size, shuffle=True, seed=None,
                 drop_remainder=False, crop_padding=0, flip=False, mean=None, std=None,
                 scale=None, prefetch=2):
        self._images, self._labels = np.asarray(images), np.asarray(labels)
        if self._images.ndim == 0 or self._images.shape[:1] != self._labels.shape[:1]:
            raise ValueError(f"images and labels must have the same number of examples "
                             f"(first axis); images.shape: {self._images.shape}, "
                             f"labels.shape: {self._labels.shape}")
        self.batch_size = operator.index(batch_size)
        self.drop_remainder = bool(drop_remainder)
        if self.num_examples == 0:
            raise ValueError("Pipeline needs at least one example; images and labels are empty")
        if self.batch_size < 1 or (self.drop_remainder and self.batch_size > self.num_examples):
            raise ValueError(f"batch_size must be at least 1 (and at most the "
                             f"{self.num_examples} examples with drop_remainder=True); "
                             f"received {batch_size}")
        self.shuffle, self.flip = bool(shuffle), bool(flip)
        self.crop_padding = operator.index(crop_padding)
        if self.crop_padding < 0:
            raise ValueError(f"crop_padding must be >= 0; received {crop_padding}")
        if (self.crop_padding or self.flip) and self._images.ndim != 4:
            raise ValueError(f"crop_padding and flip need images [N, height, width, "
                             f"channels]; got shape {self._images.shape}")
        self._normalization = None if mean is None and std is None and scale is None \
            else (mean, std, scale)
        self.prefetch = operator.index(prefetch)
        self._ring = self._batch_source()
        self._seed = _random_seed() if seed is None else self._check_seed(seed)
        self._epoch, self._position = 0, 0
        self._active = None        # the epoch() iteration in progress, if any
        self._prefetcher = None

    def _batch_source(self):
        """Where batches are made: a ring of reused buffers, or (TOWERFLOW_DATA_RING=0)
        the augment functions into new arrays; the same batches either way."""
        augmentation = (self.crop_padding, self.flip, self._normalization)
        if not batch_ring.enabled():
            return batch_ring.ReferenceBatches(self._images, self._labels, *augmentation)
        return batch_ring.BatchRing(self._images, self._labels, self.batch_size,
                                    batch_ring.ring_size(self.prefetch), *augmentation)

    @staticmethod
    def _check_seed(seed):
        seed = operator.index(seed)
        if seed < 0:
            raise ValueError(f"seed must be a non-negative integer; received {seed}")
        return seed

    # -- sizes and position ----------------------------------------------------------

    @property
    def num_examples(self):
        return self._images.shape[0]

    @property
    def batches_per_epoch(self):
        """Batches in one epoch: the last one smaller unless drop_remainder."""
        return _batches(self.num_examples, self.batch_size, self.drop_remainder)

    @property
    def epochs_completed(self):
        """Epochs delivered completely (the epoch ``epoch()`` serves next)."""
        return self._epoch

    @property
    def seed(self):
        return self._seed

    # -- iteration -------------------------------------------------------------------

    def epoch(self):
        """Iterate over the batches of the current epoch that were not delivered yet
        (all of them, unless resumed or interrupted), as (images, labels).

        >>> for images, labels in pipeline.epoch(): ...
        """
        return self._iterate()

    def _iterate(self):
        if self._active is not None:
            raise RuntimeError("this Pipeline is already being iterated; finish or "
                               "close() that epoch() iterator before starting another")
        token = self._active = object()
        source = None
        try:
            epoch, first = self._epoch, self._position // self.batch_size
            indices = range(first, self.batches_per_epoch)
            make_batch = _BatchMaker(self, epoch)
            if self.prefetch > 0:
                self._prefetcher = source = Prefetcher(make_batch, indices, self.prefetch)
            else:
                source = map(make_batch, indices)
            for index, batch in zip(indices, source):
                if self._active is not token:
                    raise RuntimeError("this epoch() iterator was ended by close() or "
                                       "restore(); call epoch() again")
                self._delivered(epoch, index)
                yield batch
        finally:
            if isinstance(source, Prefetcher):
                source.close()
            if self._active is token:
                self._active, self._prefetcher = None, None

    def _delivered(self, epoch, index):
        if index + 1 < self.batches_per_epoch:
            self._epoch, self._position = epoch, (index + 1) * self.batch_size
        else:
            self._epoch, self._position = epoch + 1, 0

    # -- checkpointing ---------------------------------------------------------------

    def state(self):
        """Where the pipeline stands, as plain ints: save it with a checkpoint.

        >>> np.savez('data_state.npz', **pipeline.state())
        """
        return {"seed": self._seed, "epoch": self._epoch, "position": self._position,
                "batch_size": self.batch_size, "num_examples": self.num_examples}

    def restore(self, state):
        """Continue from ``state`` (from ``state()``, ints or 0-d arrays): the next
        batches are those that followed when the state was taken. Ends an epoch()
        iteration in progress.

        >>> pipeline.restore(dict(np.load('data_state.npz')))
        """
        values = check_state(state, self.batch_size, self.num_examples, self.drop_remainder)
        self.close()
        self._seed, self._epoch, self._position = (values["seed"], values["epoch"],
                                                   values["position"])

    # -- resources -------------------------------------------------------------------

    def close(self):
        """Stop the prefetch thread and end the epoch() iteration in progress (if
        resumed, it raises RuntimeError). epoch() may be called again later."""
        prefetcher, self._prefetcher, self._active = self._prefetcher, None, None
        if prefetcher is not None:
            prefetcher.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        prefetcher = getattr(self, "_prefetcher", None)
        if prefetcher is not None:
            prefetcher.close()

    def __repr__(self):
        return (f"<Pipeline num_examples={self.num_examples} batch_size={self.batch_size} "
                f"batches_per_epoch={self.batches_per_epoch} epoch={self._epoch} "
                f"position={self._position}>")
