"""Image augmentation and normalisation on NumPy batches, vectorised.

::

    rng = np.random.default_rng(0)
    images = augment.random_crop(images, padding=4, rng=rng)   # pad 4 with zeros, crop back
    images = augment.random_flip_left_right(images, rng)
    images = augment.normalize(images, mean=(0.49, 0.48, 0.45), std=(0.25, 0.24, 0.26))

Batches are NHWC. Each example gets its own random offset or flip, drawn at
once for the whole batch and applied with one indexing operation (no Python
loop over examples). ``crop`` and ``flip_left_right`` take the offsets and the
flip mask explicitly; the ``random_`` forms draw them from ``rng``.
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = [
    "channel_stats",
    "crop",
    "default_scale",
    "flip_left_right",
    "normalize",
    "normalize_into",
    "random_crop",
    "random_flip_left_right",
]


def _check_nhwc(images, what):
    if images.ndim != 4:
        raise ValueError(f"{what} needs images [N, height, width, channels]; "
                         f"got shape {images.shape}")


def crop(images, padding, offsets_y, offsets_x):
    """Pad each image with ``padding`` zeros on every side, then cut out a window
    of the original size whose top-left corner is (offsets_y[i], offsets_x[i])
    in the padded image (each 0..2*padding; ``padding`` is the unshifted one).

    >>> crop(images, 4, np.full(n, 4), np.full(n, 4))    # == images
    """
    _check_nhwc(images, "crop")
    count, height, width = images.shape[:3]
    offsets_y, offsets_x = np.asarray(offsets_y), np.asarray(offsets_x)
    for offsets in (offsets_y, offsets_x):
        if offsets.shape != (count,) or (count and not 0 <= offsets.min() <= offsets.max()
                                         <= 2 * padding):
            raise ValueError(f"crop offsets must be {count} integers in 0..{2 * padding}; "
                             f"got {offsets!r}")
    padded = np.zeros((count, height + 2 * padding, width + 2 * padding) + images.shape[3:],
                      dtype=images.dtype)
    padded[:, padding:padding + height, padding:padding + width] = images
    # Every window of the padded image, as a view [N, 2p+1, 2p+1, C, H, W]; pick
    # one per example (a single gather), then back to NHWC.
    windows = sliding_window_view(padded, (height, width), axis=(1, 2))
    chosen = windows[np.arange(count), offsets_y, offsets_x]
    return np.ascontiguousarray(chosen.transpose(0, 2, 3, 1))


def random_crop(images, padding, rng):
    """``crop`` at offsets drawn uniformly from 0..2*padding, per example.

    >>> random_crop(cifar_batch, 4, np.random.default_rng(0)).shape   # [N, 32, 32, 3]
    """
    offsets = rng.integers(0, 2 * padding + 1, size=(2, len(images)))
    return crop(images, padding, offsets[0], offsets[1])


def flip_left_right(images, mask):
    """A copy of ``images`` with the examples where ``mask`` is True mirrored
    (columns reversed).

    >>> flip_left_right(images, np.ones(len(images), bool))   # == images[:, :, ::-1]
    """
    _check_nhwc(images, "flip_left_right")
    mask = np.asarray(mask, dtype=bool)
    flipped = images.copy()
    flipped[mask] = images[mask][:, :, ::-1]
    return flipped


def random_flip_left_right(images, rng, probability=0.5):
    """``flip_left_right`` of each example with ``probability``.

    >>> random_flip_left_right(images, np.random.default_rng(0))
    """
    return flip_left_right(images, rng.random(len(images)) < probability)


def default_scale(dtype):
    """1/255 for integer pixels (0..255 -> 0..1), 1 for float pixels."""
    return 1.0 / 255.0 if np.dtype(dtype).kind in "uib" else 1.0


def normalize(images, mean=None, std=None, scale=None):
    """float32 ``(images * scale - mean) / std`` (up to float32 rounding), with
    ``mean`` and ``std`` per channel (the last axis) or scalars; ``scale``
    defaults to ``default_scale``.

    >>> normalize(uint8_images, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    """
    return normalize_into(np.empty(images.shape, np.float32), images, mean, std, scale)


def normalize_into(out, images, mean=None, std=None, scale=None):
    """``normalize(images, mean, std, scale)`` written into ``out`` (a C-contiguous
    float32 array of images' shape), bit for bit; returns ``out``.

    >>> normalize_into(np.empty(batch.shape, np.float32), batch, mean, std)
    """
    scale = default_scale(images.dtype) if scale is None else scale
    channels = images.shape[-1] if images.ndim > 1 else 1
    try:
        mean = np.broadcast_to(np.asarray(0.0 if mean is None else mean, np.float64), (channels,))
        std = np.broadcast_to(np.asarray(1.0 if std is None else std, np.float64), (channels,))
    except ValueError:
        raise ValueError(f"mean and std must be scalars or have one value per channel "
                         f"({channels}, the last axis of images {images.shape}); received "
                         f"mean={mean!r}, std={std!r}") from None
    if out.shape != images.shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"normalize_into needs a C-contiguous float32 out of shape "
                         f"{images.shape}; got {out.dtype} {out.shape}")
    # NOTE: a broadcast over a last axis of 3 runs NumPy's inner loop 3 elements at
    # a time; rows of width*channels make it several times faster.
    repeats = images.shape[-2] if images.ndim > 2 else 1
    rows = out.reshape(-1, repeats * channels)
    factors = np.tile(scale / std, repeats).astype(np.float32)
    # dtype=float32: the pixels are cast first, as images.astype(np.float32) would be
    np.multiply(images.reshape(rows.shape), factors, out=rows, dtype=np.float32,
                casting="unsafe")
    rows += np.tile(-mean / std, repeats).astype(np.float32)
    return out


def channel_stats(images, scale=None, chunk=4096):
    """Per-channel (mean, std) of ``images`` * ``scale``, as float32 arrays [C]:
    what ``normalize`` and ``Pipeline(mean=, std=)`` take. Summed in float64,
    ``chunk`` images at a time.

    >>> mean, std = channel_stats(cifar.train.images)    # about (0.49, 0.48, 0.45), ...
    """
    scale = default_scale(images.dtype) if scale is None else scale
    flat = images.reshape(-1, images.shape[-1])
    rows = max(1, chunk * flat.shape[0] // max(len(images), 1))
    total = np.zeros(flat.shape[1])
    squares = np.zeros(flat.shape[1])
    for start in range(0, flat.shape[0], rows):
        part = flat[start:start + rows].astype(np.float64)
        total += part.sum(axis=0)
        squares += np.square(part).sum(axis=0)
    count = max(flat.shape[0], 1)
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean ** 2, 0.0))
    return (mean * scale).astype(np.float32), (std * scale).astype(np.float32)
