"""Batches made in place: the input pipeline's thread gathers, crops, flips and
normalises each batch into one of a ring of preallocated buffers, with
whole-batch NumPy operations (no loop over examples), so a training step
costs no batch-sized allocation and the thread little CPU.

::

    ring = BatchRing(images, labels, batch_size=256, size=5, crop_padding=4, flip=True,
                     normalization=(mean, std, None))
    batch_images, batch_labels = ring.make(indices, np.random.default_rng(0))

The batches are bit for bit those of ``augment.random_crop``, then
``augment.random_flip_left_right``, then ``augment.normalize`` with the same
``rng``: the same draws in the same order (crop offsets, then flips).

Reuse is safe: a buffer is written again only when nothing outside the ring
refers to it (its reference count, views of it included); a caller that keeps
its batches (``list(pipeline.epoch())``) gets new buffers instead.

``TOWERFLOW_DATA_RING=0`` (read when a Pipeline is made) makes every batch
with the augment functions instead, into new arrays: the same batches.
"""

import sys
import threading

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import switches
from . import augment

__all__ = ["BatchRing", "ReferenceBatches", "enabled", "ring_size"]

# Batches alive at once in a training loop besides the prefetch queue's:
# the one the step uses, the one the loop still holds while it asks for the
# next, and the one being made (see ring_size). Measured: in 40 steps of the
# cifar10 recipe (prefetch 2) at most 4 buffers were in use when a batch
# was started, and no spare was made; a loop slower than the thread needs
# all 5 (with 4 it makes spares: tests/test_batch_ring.py).
_IN_FLIGHT = 3


def ring_size(prefetch):
    """Buffers a ring needs so that a training loop with a prefetch queue of
    ``prefetch`` batches never finds them all held: when the loop takes batch k+1
    it still holds batch k, the queue holds the next ``prefetch``, and the thread
    starts one more.

    >>> ring_size(2)
    5
    """
    return max(prefetch, 0) + _IN_FLIGHT


def enabled():
    """Whether pipelines make batches in a ring (TOWERFLOW_DATA_RING, default on)."""
    return switches.on("TOWERFLOW_DATA_RING")


class ReferenceBatches:
    """``BatchRing``'s interface over the augment functions, each batch a new
    array: what TOWERFLOW_DATA_RING=0 selects.

    >>> ReferenceBatches(images, labels, 4, True, None).make(indices, rng)
    """

    def __init__(self, images, labels, crop_padding=0, flip=False, normalization=None):
        self._images, self._labels = images, labels
        self._padding, self._flip, self._normalization = crop_padding, flip, normalization

    def make(self, indices, rng):
        images = self._images[indices]
        if self._padding:
            images = augment.random_crop(images, self._padding, rng)
        if self._flip:
            images = augment.random_flip_left_right(images, rng)
        if self._normalization is not None:
            images = augment.normalize(images, *self._normalization)
        return images, self._labels[indices]


class BatchRing:
    """Makes batches of ``images``/``labels`` into ``size`` reused buffers.

    crop_padding, flip: as ``Pipeline`` (images NHWC when either is set).
    normalization: (mean, std, scale) as ``augment.normalize``, or None to keep
        the images' dtype.

    >>> ring = BatchRing(images, labels, 128, ring_size(2), crop_padding=4, flip=True)
    >>> batch_images, batch_labels = ring.make(np.arange(128), np.random.default_rng(0))
    """

    def __init__(self, images, labels, batch_size, size, crop_padding=0, flip=False,
                 normalization=None):
        self._images, self._labels = images, labels
        # NOTE: a batch never holds more than every example (an epoch's last, or
        # only, batch is the rest): buffers of a huge batch_size's length ran out of
        # memory (issue 32, item 7: --batch-size 100000000000 on the digits)
        self._batch_size = min(batch_size, len(images))
        self._padding, self._flip = crop_padding, flip
        self._normalization = normalization
        self._slots = [None] * max(size, 1)
        self._turn = 0
        self._scratch = None           # (picked, padded, staged), made on first use
        self._lock = threading.Lock()  # one writer of the scratch buffers at a time
        self.buffers_made = 0          # image buffers allocated (the ring's, and spares)
        self.most_in_use = 0           # the most batches alive at once (one being made)

    @property
    def size(self):
        return len(self._slots)

    def make(self, indices, rng):
        """(images, labels) of the examples ``indices``, augmented with draws from
        ``rng`` (used only when cropping or flipping); views of a ring buffer."""
        with self._lock:
            images, labels = self._next_slot(len(indices))
            np.take(self._labels, indices, axis=0, out=labels, mode="clip")
            if self._normalization is None:
                self._write_pixels(images, indices, rng)
            else:
                staged = self._buffers()[2][:len(indices)]
                self._write_pixels(staged, indices, rng)
                augment.normalize_into(images, staged, *self._normalization)
            return images, labels

    # -- the ring --------------------------------------------------------------------

    def _next_slot(self, count):
        held = [slot is not None and _held(slot) for slot in self._slots]
        self.most_in_use = max(self.most_in_use, sum(held) + 1)
        index = self._turn % len(self._slots)
        self._turn += 1
        if self._slots[index] is None or held[index]:
            self._slots[index] = self._new_slot()
        images, labels = self._slots[index]
        return images[:count], labels[:count]

    def _new_slot(self):
        self.buffers_made += 1
        dtype = self._images.dtype if self._normalization is None else np.float32
        return (np.empty((self._batch_size,) + self._images.shape[1:], dtype),
                np.empty((self._batch_size,) + self._labels.shape[1:], self._labels.dtype))

    # -- pixels ----------------------------------------------------------------------

    def _write_pixels(self, out, indices, rng):
        """The examples' pixels into ``out``, cropped and flipped when asked."""
        # NOTE: mode="clip", because take's default "raise" copies through a
        # temporary buffer; the indices come from a permutation, always in range.
        if not (self._padding or self._flip):
            np.take(self._images, indices, axis=0, out=out, mode="clip")
            return
        count, padding = len(indices), self._padding
        offsets = rng.integers(0, 2 * padding + 1, size=(2, count)) if padding \
            else np.zeros((2, count), np.int64)
        flips = rng.random(count) < 0.5 if self._flip else np.zeros(count, bool)
        picked, padded, _ = self._buffers()
        np.take(self._images, indices, axis=0, out=picked[:count], mode="clip")
        if padding:     # the border stays zero: only the middle is ever written
            height, width = picked.shape[1:3]
            padded[:count, padding:padding + height, padding:padding + width] = \
                picked[:count]
        _crop_and_flip(out, padded, padding, offsets, flips)

    def _buffers(self):
        if self._scratch is None:
            shape = (self._batch_size,) + self._images.shape[1:]
            picked = np.empty(shape, self._images.dtype)
            padded = picked
            if self._padding:
                pad = 2 * self._padding
                padded = np.zeros((shape[0], shape[1] + pad, shape[2] + pad) + shape[3:],
                                  self._images.dtype)
            staged = np.empty(shape, self._images.dtype) if self._normalization else None
            self._scratch = (picked, padded, staged)
        return self._scratch


def _held(slot):
    """Whether anything outside the ring refers to ``slot``'s arrays (a view of
    one, batch[:n], refers to it too)."""
    return max(_reference_counts(slot)) > _UNHELD


def _reference_counts(slot):
    return [sys.getrefcount(array) for array in slot]


def _pixels(array):
    """``array`` [N, H, W, C] as [N, H, W] of whole pixels (one C-channel void item
    each), so that reversing a row moves pixels, not channels: 2x faster."""
    pixel = np.dtype((np.void, array.shape[3] * array.itemsize))
    return array.view(pixel)[..., 0]


def _windows(pixels, padding, height, width):
    """Every crop of ``pixels`` [N, H+2p, W+2p], as a view [N, 2p+1, 2p+1, H, W]."""
    batch_stride, row_stride, pixel_stride = pixels.strides
    count = 2 * padding + 1
    return as_strided(pixels, shape=(pixels.shape[0], count, count, height, width),
                      strides=(batch_stride, row_stride, pixel_stride, row_stride,
                               pixel_stride), writeable=False)


def _crop_and_flip(out, padded, padding, offsets, flips):
    """out[i] = the crop of padded[i] at offsets[:, i], mirrored where flips[i]: one
    gather each for the plain and the mirrored examples."""
    count, height, width = out.shape[:3]
    pixels, target = _pixels(padded[:count]), _pixels(out)
    plain, mirrored = np.flatnonzero(~flips), np.flatnonzero(flips)
    rows, columns = offsets
    target[plain] = _windows(pixels, padding, height, width)[
        plain, rows[plain], columns[plain]]
    # The mirror of the crop at column c is the crop of the mirrored image at 2p - c.
    target[mirrored] = _windows(pixels[:, :, ::-1], padding, height, width)[
        mirrored, rows[mirrored], 2 * padding - columns[mirrored]]


# What _reference_counts says of arrays that only their slot holds (measured
# rather than assumed: interpreters count a call's own references differently).
_UNHELD = max(_reference_counts((np.empty(1), np.empty(1))))
