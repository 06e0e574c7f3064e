"""The op fuzzer's table for tf.image and the random ops. A random op is
judged by what must hold of its draw (shape, dtype, range; a crop is a window
of its input, a shuffle a permutation of its rows), and its reference only
says whether TensorFlow refuses the case.

Image ops take images of known rank (TensorFlow's do too), so their cases
are static.
"""

import numpy as np
from fuzz_harness import (
    FLOAT_DTYPES,
    HUGE_DIM,
    NUMERIC_DTYPES,
    Case,
    OpSpec,
    Rejected,
    choose,
    random_shape,
    random_values,
    static_or_not,
)
from fuzz_math_cases import draw_dtype, require_dtype

import towerflow as tf


def image_array(rng, dtypes=FLOAT_DTYPES, specials=False):
    """[h, w, c] or [n, h, w, c]; one time in ten of another rank."""
    rank = choose(rng, (3, 3, 4, 4, 4, 2)) if rng.random() < 0.9 else choose(rng, (1, 5))
    shape = random_shape(rng, rank, rank, dims=(1, 2, 3, 4))
    return random_values(rng, shape, choose(rng, dtypes), specials)


def require_image(image):
    if image.ndim not in (3, 4):
        raise Rejected("'image' must be either 3 or 4 dimensions")

# -- image ------------------------------------------------------------------------------


def _image_cases(rng):
    return Case((image_array(rng),), {}, True)


def _flip(axis):
    def flip(image):
        require_image(image)
        return np.flip(image, axis)
    return flip


def _brightness_cases(rng):
    return Case((image_array(rng),), {"delta": float(rng.normal())}, True)


def _brightness(image, delta):
    """NOTE: TF casts the Python float delta through float32 (its constant's dtype)."""
    return image + image.dtype.type(np.float32(delta))


def _contrast_cases(rng):
    return Case((image_array(rng),), {"contrast_factor": float(rng.uniform(0, 2))}, True)


def _contrast(images, contrast_factor):
    require_image(images)
    mean = np.mean(images, axis=(-3, -2), keepdims=True, dtype=np.float64)
    return ((images - mean) * contrast_factor + mean).astype(images.dtype)


def _standardization(image):
    """(x - mean) / max(stddev, 1 / sqrt(N)) per image, as float32."""
    if image.ndim < 3:
        raise Rejected("'image' must be at least three-dimensional")
    x = image.astype(np.float64)
    axes = (-1, -2, -3)
    mean = x.mean(axis=axes, keepdims=True)
    stddev = np.sqrt(np.square(x - mean).mean(axis=axes, keepdims=True))
    count = int(np.prod(image.shape[-3:]))
    return ((x - mean) / np.maximum(stddev, 1 / np.sqrt(count))).astype(np.float32)


def _central_crop_cases(rng):
    fraction = float(choose(rng, (0.5, 0.75, 1.0, 0.0, 1.5)))
    return Case((image_array(rng),), {"central_fraction": fraction}, True)


def _central_crop(image, central_fraction):
    require_image(image)
    if not 0 < central_fraction <= 1:
        raise Rejected("central_fraction must be within (0, 1]")
    height, width = image.shape[-3:-1]
    top, left = (int((size - size * central_fraction) / 2) for size in (height, width))
    return image[..., top:height - top, left:width - left, :]


def _crop_or_pad_cases(rng):
    return Case((image_array(rng),), {"target_height": int(rng.integers(0, 6)),
                                      "target_width": int(rng.integers(1, 6))}, True)


def _crop_or_pad(image, target_height, target_width):
    """Centred: crop (offset (size - target) // 2) or pad with zeros."""
    require_image(image)
    if target_height <= 0 or target_width <= 0:
        raise Rejected("target sizes must be positive")
    for axis, target in ((-3, target_height), (-2, target_width)):
        image = _centred(image, axis, target)
    return image


def _centred(image, axis, target):
    size = image.shape[axis]
    if size >= target:
        start = (size - target) // 2
        return np.take(image, range(start, start + target), axis=axis)
    before = (target - size) // 2
    pads = [(0, 0)] * image.ndim
    pads[axis] = (before, target - size - before)
    return np.pad(image, pads)


def _resize_cases(rng):
    size = [int(dim) for dim in rng.integers(0, 6, 2)]
    method = choose(rng, (0, 1))
    return Case((image_array(rng, FLOAT_DTYPES + (np.uint8,)),),
                {"size": size, "method": method}, True)


def _resize(images, size, method):
    """TF1 without align_corners: output pixel i reads input position i * in / out,
    bilinear (float32 out) or nearest (the input's dtype)."""
    require_image(images)
    if min(size) <= 0:
        raise Rejected("size must be positive")
    if tuple(images.shape[-3:-1]) == tuple(size):
        return images
    for axis, out in ((-3, size[0]), (-2, size[1])):
        images = _resampled(images, axis, out, method)
    return images if method else images.astype(np.float32)


def _resampled(images, axis, out, method):
    size = images.shape[axis]
    position = np.arange(out) * (size / out)
    low = np.minimum(np.floor(position).astype(int), size - 1)
    if method:                      # nearest
        return np.take(images, low, axis=axis)
    high = np.minimum(low + 1, size - 1)
    fraction = (position - low).reshape([-1] + [1] * (-axis - 1))
    below = np.take(images, low, axis=axis).astype(np.float64)
    above = np.take(images, high, axis=axis).astype(np.float64)
    return below + (above - below) * fraction


def _convert_cases(rng):
    image = image_array(rng, FLOAT_DTYPES + (np.uint8, np.int32))
    if image.dtype.kind == "f":
        image = np.abs(image) % 1
    else:
        image = np.abs(image)
    return Case((image,), {"dtype": choose(rng, (tf.float32, tf.float64))}, True)


def _convert_image_dtype(image, dtype):
    """Integers [0, MAX] -> floats [0, 1]; floats to floats as they are."""
    target = dtype.as_numpy_dtype
    if image.dtype.kind == "f":
        return image.astype(target)
    return (image.astype(target) * target(1.0 / np.iinfo(image.dtype).max)).astype(target)

# -- random ops: judged by what must hold -------------------------------------------------


def _draw_shape_cases(rng):
    shape = [int(dim) for dim in random_shape(rng)]
    if rng.random() < 0.1:
        shape += choose(rng, ([-1], [HUGE_DIM, HUGE_DIM]))
    return Case((), {"shape": shape, "dtype": choose(rng, (tf.float32, tf.float64))}, False)


def _valid_shape(shape, dtype):
    if min(shape, default=0) < 0 or np.prod(shape, dtype=float) > 2 ** 40:
        raise Rejected("a negative size, or a shape too big for memory")


def _draws(low=-np.inf, high=np.inf):
    """A check: the draw has the asked shape and dtype, and values in [low, high)."""
    def check(value, case):
        value = np.asarray(value)
        assert value.shape == tuple(case.args["shape"])
        assert value.dtype == case.args["dtype"].as_numpy_dtype
        assert np.all((value >= low) & (value < high)), value
    return check


def _shuffle_check(value, case):
    (x,) = case.inputs
    assert value.shape == x.shape and value.dtype == x.dtype

    def rows(array):
        return sorted(np.asarray(row).tobytes() for row in array)
    assert rows(value) == rows(x), "not a permutation of the rows"


def _shuffle_cases(rng):
    return Case((random_values(rng, random_shape(rng), choose(rng, NUMERIC_DTYPES), False),),
                {}, static_or_not(rng))


def _shuffle(x):
    if x.ndim == 0:
        raise Rejected("random_shuffle needs a tensor of rank >= 1")


def _crop_cases(rng):
    x = random_values(rng, random_shape(rng, 1, 3), choose(rng, NUMERIC_DTYPES), False)
    size = [int(rng.integers(0, dim + 2)) for dim in x.shape]
    return Case((x,), {"size": size}, True)


def _crop_valid(x, size):
    if len(size) != x.ndim or any(want > dim for want, dim in zip(size, x.shape)):
        raise Rejected("Need value.shape >= size")


def _crop_check(value, case):
    """The result is a ``size`` window of the input at some offset."""
    (x,), size = case.inputs, case.args["size"]
    assert value.shape == tuple(size) and value.dtype == x.dtype
    offsets = np.ndindex(*[dim - want + 1 for dim, want in zip(x.shape, size)])
    assert any(np.array_equal(x[tuple(slice(o, o + w) for o, w in zip(offset, size))], value)
               for offset in offsets)


def _categorical_cases(rng):
    rows, classes = int(rng.choice((0, 1, 3))), int(rng.choice((1, 2, 5)))
    logits = random_values(rng, (rows, classes), draw_dtype(rng, FLOAT_DTYPES), False)
    return Case((logits,), {"num_samples": int(rng.integers(0, 4))}, static_or_not(rng))


def _categorical_valid(logits, num_samples):
    require_dtype(logits, FLOAT_DTYPES)


def _categorical_check(value, case):
    (logits,), samples = case.inputs, case.args["num_samples"]
    assert value.shape == (logits.shape[0], samples) and value.dtype == np.int64
    assert np.all((value >= 0) & (value < logits.shape[1]))


def _dropout_cases(rng):
    x = random_values(rng, random_shape(rng), draw_dtype(rng, FLOAT_DTYPES), False)
    return Case((x,), {"rate": float(choose(rng, (0.0, 0.5, 0.9, 1.0, -0.5)))},
                static_or_not(rng))


def _dropout_valid(x, rate):
    require_dtype(x, FLOAT_DTYPES)
    if not 0 <= rate < 1:
        raise Rejected("rate must be in [0, 1)")


def _dropout_check(value, case):
    """Each element dropped (0) or kept and scaled by 1 / (1 - rate)."""
    (x,), rate = case.inputs, case.args["rate"]
    assert value.shape == x.shape and value.dtype == x.dtype
    kept = (x / (1 - rate)).astype(x.dtype)
    assert np.all((value == 0) | np.isclose(value, kept, rtol=1e-5)), value


def _random_flip_check(axis):
    """Each image (of a batch: each one on its own) as it was, or flipped."""
    def check(value, case):
        (image,) = case.inputs
        assert value.shape == image.shape and value.dtype == image.dtype
        images = zip(value, image) if image.ndim == 4 else [(value, image)]
        for out, original in images:
            assert np.array_equal(out, original) or \
                np.array_equal(out, np.flip(original, axis))
    return check


def _random_brightness_check(value, case):
    (image,), bound = case.inputs, case.args["max_delta"]
    assert value.shape == image.shape and value.dtype == image.dtype
    delta = (value.astype(np.float64) - image).ravel()
    assert np.all(np.abs(delta) <= bound * (1 + 1e-5) + 1e-6)


def _contrast_check(value, case):
    """A random contrast factor keeps each channel's mean (x - mean) * f + mean."""
    (image,) = case.inputs
    assert value.shape == image.shape and value.dtype == image.dtype
    np.testing.assert_allclose(value.mean(axis=(-3, -2)), image.mean(axis=(-3, -2)),
                               rtol=1e-4, atol=1e-4)


def _spec(name, build, reference, cases, **options):
    return OpSpec(name, build, reference, cases, **options)


IMAGE_RANDOM_SPECS = [
    _spec("image.flip_left_right", tf.image.flip_left_right, _flip(-2), _image_cases),
    _spec("image.flip_up_down", tf.image.flip_up_down, _flip(-3), _image_cases),
    _spec("image.adjust_brightness", tf.image.adjust_brightness, _brightness,
          _brightness_cases),
    _spec("image.adjust_contrast", tf.image.adjust_contrast, _contrast, _contrast_cases,
          tolerance=lambda case, expected: (1e-5, 1e-5)),
    _spec("image.per_image_standardization", tf.image.per_image_standardization,
          _standardization, _image_cases, tolerance=lambda case, expected: (1e-5, 1e-5)),
    _spec("image.central_crop", tf.image.central_crop, _central_crop, _central_crop_cases),
    _spec("image.resize_image_with_crop_or_pad", tf.image.resize_image_with_crop_or_pad,
          _crop_or_pad, _crop_or_pad_cases),
    _spec("image.resize_images", tf.image.resize_images, _resize, _resize_cases,
          tolerance=lambda case, expected: (1e-5, 1e-5)),
    _spec("image.resize", tf.image.resize, _resize, _resize_cases,
          tolerance=lambda case, expected: (1e-5, 1e-5)),
    _spec("image.convert_image_dtype", tf.image.convert_image_dtype, _convert_image_dtype,
          _convert_cases, tolerance=lambda case, expected: (1e-6, 1e-7)),
    _spec("random_normal", tf.random_normal, _valid_shape, _draw_shape_cases, check=_draws()),
    _spec("random.normal", tf.random.normal, _valid_shape, _draw_shape_cases, check=_draws()),
    _spec("truncated_normal", tf.truncated_normal, _valid_shape, _draw_shape_cases,
          check=_draws(-2.0, 2.0 + 1e-6)),
    _spec("random.truncated_normal", tf.random.truncated_normal, _valid_shape,
          _draw_shape_cases, check=_draws(-2.0, 2.0 + 1e-6)),
    _spec("random_uniform", tf.random_uniform, _valid_shape, _draw_shape_cases,
          check=_draws(0.0, 1.0)),
    _spec("random.uniform", tf.random.uniform, _valid_shape, _draw_shape_cases,
          check=_draws(0.0, 1.0)),
    _spec("random_shuffle", tf.random_shuffle, _shuffle, _shuffle_cases, check=_shuffle_check),
    _spec("random.shuffle", tf.random.shuffle, _shuffle, _shuffle_cases, check=_shuffle_check),
    _spec("random_crop", tf.random_crop, _crop_valid, _crop_cases, check=_crop_check),
    _spec("image.random_crop", tf.image.random_crop, _crop_valid, _crop_cases,
          check=_crop_check),
    _spec("multinomial", tf.multinomial, _categorical_valid, _categorical_cases,
          check=_categorical_check),
    _spec("random.categorical", tf.random.categorical, _categorical_valid,
          _categorical_cases, check=_categorical_check),
    _spec("categorical", tf.categorical, _categorical_valid, _categorical_cases,
          check=_categorical_check),
    _spec("random.multinomial", tf.random.multinomial, _categorical_valid,
          _categorical_cases, check=_categorical_check),
    _spec("nn.dropout", lambda x, rate: tf.nn.dropout(x, rate=rate), _dropout_valid,
          _dropout_cases, check=_dropout_check),
    _spec("image.random_flip_left_right", tf.image.random_flip_left_right,
          lambda image: require_image(image), _image_cases, check=_random_flip_check(-2)),
    _spec("image.random_flip_up_down", tf.image.random_flip_up_down,
          lambda image: require_image(image), _image_cases, check=_random_flip_check(-3)),
    _spec("image.random_brightness", tf.image.random_brightness, lambda image, max_delta: None,
          lambda rng: Case((image_array(rng),), {"max_delta": float(rng.uniform(0, 1))}, True),
          check=_random_brightness_check),
    _spec("image.random_contrast", tf.image.random_contrast,
          lambda image, lower, upper: require_image(image),
          lambda rng: Case((image_array(rng),), {"lower": 0.5, "upper": 1.5}, True),
          check=_contrast_check),
]
