"""``tf.image``: resizing (two ops with their gradients), flips, crops,
brightness, contrast, standardisation and dtype conversion, for one image
``[height, width, channels]`` or a batch ``[batch, height, width, channels]``
as TensorFlow 1 takes them. Random ones follow TF1's op seeding (a
graph seed from ``tf.set_random_seed`` and ``seed=``)."""

import numpy as np

from .. import dtypes
from ..graph.registry import register_gradient, register_op
from ..graph.shapes import TensorShape
from . import math_ops, random_ops
from .array_ops import concat, expand_dims, reshape, squeeze
from .constant_ops import constant, convert_to_tensor, zeros
from .index_ops import reverse
from .slice_ops import slice as slice_


class ResizeMethod:
    """TF1's resize methods (the values of ``tf.image.ResizeMethod``)."""
    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


_RESIZE_OPS = {ResizeMethod.BILINEAR: "ResizeBilinear",
               ResizeMethod.NEAREST_NEIGHBOR: "ResizeNearestNeighbor"}


def _image(image, what="image"):
    """The image as a tensor of rank 3 or 4 (ValueError otherwise)."""
    image = convert_to_tensor(image)
    if image.shape.ndims not in (3, 4):
        raise ValueError(f"'{what}' must be either 3 or 4 dimensions (a known rank), got "
                         f"{image.name} of shape {image.shape}")
    return image


def _height_width(image):
    """The static height and width (ValueError when unknown)."""
    height, width = image.shape.dims[-3:-1]
    if height is None or width is None:
        raise ValueError(f"this image op needs the height and width known, got {image.name} "
                         f"of shape {image.shape}")
    return height, width


# -- resize -------------------------------------------------------------------------


def _resize_shape(inputs, attrs):
    images = inputs[0]
    if images.shape.ndims not in (None, 4):
        raise ValueError(f"images must be 4-dimensional, got shape {images.shape}")
    batch = images.shape.dims[0] if images.shape.ndims else None
    channels = images.shape.dims[3] if images.shape.ndims else None
    dtype = attrs.get("output_dtype") or images.dtype
    return [(TensorShape([batch, *attrs["size"], channels]), dtype)]


def _resize_grad_shape(inputs, attrs):
    return [(inputs[1].shape, inputs[1].dtype)]


register_op("ResizeBilinear", _resize_shape)
register_op("ResizeNearestNeighbor", _resize_shape)
register_op("ResizeBilinearGrad", _resize_grad_shape, shape_only_inputs=(1,))
register_op("ResizeNearestNeighborGrad", _resize_grad_shape, shape_only_inputs=(1,))


def resize_images(images, size, method=ResizeMethod.BILINEAR, align_corners=False,
                  preserve_aspect_ratio=False, name=None):
    """Resize to ``size`` = [new_height, new_width], as TF1 does: output pixel
    i reads input position i * in / out (with ``align_corners``,
    i * (in - 1) / (out - 1))::

        small = tf.image.resize_images(images, [24, 24])    # float32
        big = tf.image.resize_images(img, [64, 64], tf.image.ResizeMethod.NEAREST_NEIGHBOR)

    Bilinear gives float32; nearest-neighbour keeps the dtype; an image
    already of that size is returned as it is.
    """
    images = _image(images, "images")
    size = _static_size(size)
    if method not in _RESIZE_OPS:
        raise ValueError(f"resize_images supports ResizeMethod.BILINEAR (0) and "
                         f"NEAREST_NEIGHBOR (1), got method {method!r}")
    if preserve_aspect_ratio:
        raise ValueError("resize_images supports preserve_aspect_ratio=False only")
    if tuple(images.shape.dims[-3:-1]) == size:
        return images
    batch = images if images.shape.ndims == 4 else expand_dims(images, 0)
    attrs = {"size": size, "align_corners": bool(align_corners)}
    if method == ResizeMethod.BILINEAR:
        attrs["output_dtype"] = dtypes.float32
    resized = batch.graph.create_op(_RESIZE_OPS[method], [batch], attrs,
                                    name=name or "resize_images").outputs[0]
    return resized if images.shape.ndims == 4 else squeeze(resized, [0])


def resize_bilinear(images, size, align_corners=False, name=None, half_pixel_centers=False):
    """TF 1.15's ResizeBilinear op on [batch, height, width, channels] images:
    a float32 result of ``size`` = [new_height, new_width]; ``align_corners``
    maps the corner pixels onto each other, ``half_pixel_centers`` samples
    at pixel centres (TF 2's resize)::

        big = tf.image.resize_bilinear(images, [64, 64], align_corners=True)
    """
    return _resize_op("ResizeBilinear", images, size, align_corners, half_pixel_centers,
                      name or "ResizeBilinear")


def resize_nearest_neighbor(images, size, align_corners=False, name=None,
                            half_pixel_centers=False):
    """TF 1.15's ResizeNearestNeighbor op: each output pixel the input pixel
    nearest its position (rounded with ``align_corners``, else floored); the
    dtype is kept: ``tf.image.resize_nearest_neighbor(masks, [32, 32])``."""
    return _resize_op("ResizeNearestNeighbor", images, size, align_corners,
                      half_pixel_centers, name or "ResizeNearestNeighbor")


def _resize_op(op_type, images, size, align_corners, half_pixel_centers, name):
    images = convert_to_tensor(images, name="images")
    if images.shape.ndims not in (None, 4):
        raise ValueError(f"Shape must be rank 4 but is rank {images.shape.ndims} for "
                         f"'{op_type}' with input shape {images.shape}")
    if images.dtype.is_bool or images.dtype == dtypes.string:
        raise TypeError(f"Value passed to parameter 'images' has DataType "
                        f"{images.dtype.name} not in list of allowed values")
    if align_corners and half_pixel_centers:
        raise ValueError("If half_pixel_centers is True, align_corners must be False.")
    attrs = {"size": _static_size(size), "align_corners": bool(align_corners),
             "half_pixel_centers": bool(half_pixel_centers)}
    if op_type == "ResizeBilinear":
        attrs["output_dtype"] = dtypes.float32
    return images.graph.create_op(op_type, [images], attrs, name=name).outputs[0]


def _static_size(size):
    try:
        height, width = (int(dim) for dim in size)
    except (TypeError, ValueError):
        raise ValueError(f"size must be [new_height, new_width] as two ints, got "
                         f"{size!r}") from None
    if height <= 0 or width <= 0:
        raise ValueError(f"size must be positive, got {[height, width]}")
    return height, width


def _resize_grad(grad_type):
    def gradient(op, grad):
        images = op.inputs[0]
        if not images.dtype.is_floating:
            return [None]
        attrs = {key: op.attrs[key] for key in ("align_corners", "half_pixel_centers")
                 if key in op.attrs}
        return [op.graph.create_op(grad_type, [grad, images], attrs).outputs[0]]
    return gradient


register_gradient("ResizeBilinear", _resize_grad("ResizeBilinearGrad"))
register_gradient("ResizeNearestNeighbor", _resize_grad("ResizeNearestNeighborGrad"))

# -- flips --------------------------------------------------------------------------


def flip_left_right(image):
    """The image mirrored left to right (each image of a batch)."""
    return reverse(_image(image), [-2])


def flip_up_down(image):
    """The image upside down (each image of a batch)."""
    return reverse(_image(image), [-3])


def random_flip_left_right(image, seed=None):
    """Mirrored left to right with probability 1/2 (each image of a batch on
    its own draw): ``tf.image.random_flip_left_right(img, seed=1)``."""
    return _random_flip(_image(image), -2, seed)


def random_flip_up_down(image, seed=None):
    """Upside down with probability 1/2 (each image of a batch on its own draw)."""
    return _random_flip(_image(image), -3, seed)


def _random_flip(image, axis, seed):
    if image.shape.ndims == 3:
        flip = math_ops.less(random_ops.random_uniform([], seed=seed), 0.5)
        return math_ops.where(flip, reverse(image, [axis]), image)
    batch = image.shape.dims[0]
    if batch is None:
        raise ValueError(f"a random flip of a batch needs the batch size known, got "
                         f"{image.name} of shape {image.shape}")
    # TF1's rule for batches: flip where the draw rounds to 1.
    draws = random_ops.random_uniform([batch], seed=seed)
    flip = reshape(math_ops.greater_equal(draws, 0.5), [batch, 1, 1, 1])
    return math_ops.where(flip, reverse(image, [axis]), image)


# -- brightness, contrast, standardisation ------------------------------------------


def adjust_brightness(image, delta):
    """``image + delta`` (integer images through float32, saturating back)."""
    image = convert_to_tensor(image)
    return _in_float(image, lambda floats: floats + math_ops.cast(delta, floats.dtype))


def random_brightness(image, max_delta, seed=None):
    """``image + delta`` with delta uniform in [-max_delta, max_delta)."""
    if max_delta < 0:
        raise ValueError(f"max_delta must be non-negative, got {max_delta}")
    delta = random_ops.random_uniform([], -max_delta, max_delta, seed=seed)
    return adjust_brightness(image, delta)


def adjust_contrast(images, contrast_factor):
    """Each channel of each image moved away from its mean by the factor:
    ``(x - mean) * contrast_factor + mean``."""
    images = _image(images, "images")

    def contrast(floats):
        mean = math_ops.reduce_mean(floats, axis=[-3, -2], keepdims=True)
        return (floats - mean) * math_ops.cast(contrast_factor, floats.dtype) + mean
    return _in_float(images, contrast)


def random_contrast(image, lower, upper, seed=None):
    """adjust_contrast by a factor uniform in [lower, upper)."""
    if upper <= lower:
        raise ValueError(f"upper must be > lower, got lower {lower} and upper {upper}")
    if lower < 0:
        raise ValueError(f"lower must be non-negative, got {lower}")
    factor = random_ops.random_uniform([], lower, upper, seed=seed)
    return adjust_contrast(image, factor)


def _in_float(image, adjust):
    """``adjust`` on a float image; an integer image goes through float32."""
    if image.dtype.is_floating:
        return adjust(image)
    adjusted = adjust(convert_image_dtype(image, dtypes.float32))
    return convert_image_dtype(adjusted, image.dtype, saturate=True)


def per_image_standardization(image):
    """Each image (the last 3 dimensions) scaled to mean 0 and variance 1:
    ``(x - mean) / max(stddev, 1 / sqrt(N))`` over its N values, as float32::

        image = tf.image.per_image_standardization(distorted_image)
    """
    image = convert_to_tensor(image)
    if image.shape.ndims is not None and image.shape.ndims < 3:
        raise ValueError(f"'image' must be at least three-dimensional, got shape "
                         f"{image.shape}")
    image = math_ops.cast_if_needed(image, dtypes.float32)
    axes = [-1, -2, -3]
    mean = math_ops.reduce_mean(image, axis=axes, keepdims=True)
    centred = image - mean
    stddev = math_ops.sqrt(math_ops.reduce_mean(math_ops.square(centred), axis=axes,
                                                keepdims=True))
    pixels = math_ops.cast(math_ops.reduce_prod(_shape_of_image(image)), dtypes.float32)
    return centred / math_ops.maximum(stddev, math_ops.rsqrt(pixels))


def _shape_of_image(image):
    from .array_ops import shape
    return shape(image)[-3:]


# -- crops and pads -----------------------------------------------------------------


def central_crop(image, central_fraction):
    """The central ``central_fraction`` of the height and width, as TF computes
    it: ``start = int((size - size * fraction) / 2)``, ``size - 2 * start`` kept."""
    image = _image(image)
    if not 0.0 < central_fraction <= 1.0:
        raise ValueError(f"central_fraction must be within (0, 1], got {central_fraction}")
    if central_fraction == 1.0:
        return image
    height, width = _height_width(image)
    top, left = (int((size - size * central_fraction) / 2) for size in (height, width))
    return _crop(image, top, left, height - 2 * top, width - 2 * left)


def _crop(image, top, left, height, width):
    lead = [0] * (image.shape.ndims - 3)
    return slice_(image, lead + [top, left, 0], [-1] * len(lead) + [height, width, -1])


def resize_image_with_crop_or_pad(image, target_height, target_width):
    """Crop the centre, or pad evenly with zeros, to the target size::

        tf.image.resize_image_with_crop_or_pad(image, 24, 24)
    """
    image = _image(image)
    height, width = _height_width(image)
    for name, value in (("target_height", target_height), ("target_width", target_width)):
        if int(value) <= 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    top, left = max((height - target_height) // 2, 0), max((width - target_width) // 2, 0)
    cropped = _crop(image, top, left, min(height, target_height), min(width, target_width))
    pad_top = max((target_height - height) // 2, 0)
    pad_left = max((target_width - width) // 2, 0)
    return _zero_pad(cropped, pad_top, target_height, pad_left, target_width)


def _zero_pad(image, top, height, left, width):
    """``image`` at (top, left) in zeros of [height, width] (static sizes)."""
    rows, columns = image.shape.dims[-3:-1]
    if (rows, columns) == (height, width):
        return image
    lead, channels = list(image.shape.dims[:-3]), image.shape.dims[-1]
    if None in lead or channels is None:
        raise ValueError(f"padding an image needs its shape known, got {image.shape}")

    def band(size, axis_dims):
        return [zeros(axis_dims, image.dtype)] if size else []
    tall = concat(band(top, lead + [top, columns, channels]) + [image] +
                  band(height - rows - top, lead + [height - rows - top, columns, channels]),
                  -3)
    return concat(band(left, lead + [height, left, channels]) + [tall] +
                  band(width - columns - left, lead + [height, width - columns - left,
                                                      channels]), -2)


def random_crop(value, size, seed=None, name=None):
    """A ``size`` slice of ``value`` at a uniformly random offset::

        distorted = tf.random_crop(image, [24, 24, 3])
    """
    value = convert_to_tensor(value)
    size = [int(dim) for dim in size]
    dims = value.shape.dims
    if dims is None or None in dims or len(dims) != len(size):
        raise ValueError(f"random_crop needs a value of known shape and one size per "
                         f"dimension, got shape {value.shape} and size {size}")
    if any(dim < want for dim, want in zip(dims, size)):
        raise ValueError(f"Need value.shape >= size, got {dims} and {size}")
    # TF's draw: a uniform int32 in [0, 2^31 - 1) per dimension, modulo the room left.
    draws = random_ops.random_uniform([len(size)], 0, 2**31 - 1, dtype=dtypes.int32,
                                      seed=seed)
    room = constant([dim - want + 1 for dim, want in zip(dims, size)], dtype=dtypes.int32)
    return slice_(value, math_ops.floormod(draws, room), size, name=name or "random_crop")


# -- dtype conversion ---------------------------------------------------------------


def convert_image_dtype(image, dtype, saturate=False, name=None):
    """Convert between image dtypes, rescaling: floats are in [0, 1), integers
    in [0, MAX] of their dtype (uint8: 0..255)::

        floats = tf.image.convert_image_dtype(uint8_image, tf.float32)   # / 255
    """
    image = convert_to_tensor(image)
    dtype = dtypes.as_dtype(dtype)
    if image.dtype is dtype:
        return image
    source, target = image.dtype, dtype
    if source.is_floating and target.is_floating:
        return math_ops.cast(image, target, name=name)
    if not source.is_floating and not target.is_floating:
        return _int_to_int(image, target, name)
    if target.is_floating:      # int -> float: [0, MAX] -> [0, 1]
        return math_ops.cast(image, target) * (1.0 / _max_of(source))
    scale = _max_of(target) + 0.5   # float -> int: [0, 1) -> [0, MAX]
    scaled = image * scale
    if saturate:
        scaled = _saturated(scaled, target)
    return math_ops.cast(scaled, target, name=name)


def _max_of(dtype):
    return int(np.iinfo(dtype.as_numpy_dtype).max)


def _saturated(values, dtype):
    """``values`` clamped to the range of integer ``dtype`` (TF's saturate_cast)."""
    limits = np.iinfo(dtype.as_numpy_dtype)
    low, high = (constant(limit, values.dtype) for limit in (limits.min, limits.max))
    return math_ops.minimum(math_ops.maximum(values, low), high)


def _int_to_int(image, target, name):
    """TF's integer rescale: a shift by the difference of the MAX values."""
    source_max, target_max = _max_of(image.dtype), _max_of(target)
    if source_max > target_max:
        factor = (source_max + 1) // (target_max + 1)
        return math_ops.cast(math_ops.floordiv(image, factor), target, name=name)
    factor = (target_max + 1) // (source_max + 1)
    return math_ops.cast(image, target) * factor
