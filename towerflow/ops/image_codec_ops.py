"""Image file codecs of ``tf.image``: ``decode_png``, ``decode_jpeg``,
``decode_image``, ``encode_png``, ``encode_jpeg``. They run on the host CPU
through Pillow (towerflow/backends/image_codec_kernels.py)::

    image = tf.image.decode_png(tf.read_file('cat.png'), channels=3)   # uint8 [h, w, 3]
    png = tf.image.encode_png(tf.cast(pixels, tf.uint8))               # string scalar

As in TF 1.15, each decoder reads JPEG, PNG and GIF data alike.
"""

from .. import dtypes
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import TensorShape
from .constant_ops import convert_to_tensor


def _decode_shape(inputs, attrs):
    _check_contents(inputs[0])
    return [(TensorShape([None, None, attrs["channels"] or None]), attrs["dtype"])]


def _decode_image_shape(inputs, attrs):
    _check_contents(inputs[0])
    return [(TensorShape(None), attrs["dtype"])]


def _encode_shape(inputs, attrs):
    (image,) = inputs
    if image.shape.ndims not in (None, 3):
        raise ValueError(f"image must be 3-dimensional [height, width, channels], got "
                         f"shape {image.shape}")
    return [(TensorShape([]), dtypes.string)]


def _check_contents(contents):
    if not contents.dtype.is_string or contents.shape.ndims not in (None, 0):
        raise ValueError(f"contents must be a scalar string tensor, got {contents!r}")


register_op("DecodePng", _decode_shape)
register_op("DecodeJpeg", _decode_shape)
register_op("DecodeImage", _decode_image_shape)
register_op("EncodePng", _encode_shape)
register_op("EncodeJpeg", _encode_shape)
register_not_differentiable("DecodePng", "DecodeJpeg", "DecodeImage", "EncodePng",
                            "EncodeJpeg")


def _checked_channels(channels, allowed):
    channels = channels or 0
    if isinstance(channels, bool) or channels not in allowed:
        counts = ", ".join(map(str, allowed[:-1])) + f", or {allowed[-1]}"
        raise ValueError(f"channels must be {counts}, got {channels!r}")
    return channels


def _decode(op_type, contents, channels, dtype, name, allowed=(0, 1, 3, 4)):
    dtype = dtypes.as_dtype(dtype)
    if dtype not in (dtypes.uint8, dtypes.uint16):
        raise TypeError(f"{op_type}: dtype must be tf.uint8 or tf.uint16, got {dtype.name}")
    contents = convert_to_tensor(contents, dtype=dtypes.string, name="contents")
    attrs = {"channels": _checked_channels(channels, allowed), "dtype": dtype}
    return contents.graph.create_op(op_type, [contents], attrs, name=name or op_type).outputs[0]


def decode_png(contents, channels=0, dtype=dtypes.uint8, name=None):
    """Pixels [height, width, channels] of PNG data (``channels`` 0: the
    file's own; 1 gray, 3 RGB, 4 RGBA); 16-bit with ``dtype=tf.uint16``."""
    return _decode("DecodePng", contents, channels, dtype, name)


def decode_jpeg(contents, channels=0, ratio=1, fancy_upscaling=True,
                try_recover_truncated=False, acceptable_fraction=1, dct_method="",
                name=None):
    """uint8 pixels [height, width, channels] of JPEG data (``channels`` 0, 1 or
    3). ``ratio`` (downscaling while decoding) must be 1 here."""
    if ratio != 1:
        raise NotImplementedError(f"decode_jpeg: ratio={ratio!r} is not supported (only 1)")
    return _decode("DecodeJpeg", contents, channels, dtypes.uint8, name, (0, 1, 3))


def decode_image(contents, channels=None, dtype=dtypes.uint8, name=None,
                 expand_animations=True):
    """Pixels of JPEG, PNG or GIF data: [height, width, channels], or
    [frames, height, width, 3] for a GIF. The static shape is unknown, as in TF;
    a float ``dtype`` scales to [0, 1] as ``convert_image_dtype``."""
    dtype = dtypes.as_dtype(dtype)
    raw_dtype = dtype if dtype in (dtypes.uint8, dtypes.uint16) else dtypes.uint8
    pixels = _decode("DecodeImage", contents, channels, raw_dtype, name)
    if raw_dtype is dtype:
        return pixels
    from .image_ops import convert_image_dtype
    return convert_image_dtype(pixels, dtype)


def encode_png(image, compression=-1, name=None):
    """PNG data (a string scalar) of a uint8 or uint16 [height, width, channels]
    image with 1 to 4 channels; ``compression`` -1 (default) or 0..9."""
    image = convert_to_tensor(image, name="image")
    if image.dtype not in (dtypes.uint8, dtypes.uint16):
        raise TypeError(f"encode_png: image must be uint8 or uint16, got {image.dtype.name}")
    if isinstance(compression, bool) or compression not in range(-1, 10):
        raise ValueError(f"compression must be an int in -1..9, got {compression!r}")
    return image.graph.create_op("EncodePng", [image], {"compression": compression},
                                 name=name or "EncodePng").outputs[0]


def encode_jpeg(image, format="", quality=95, progressive=False, optimize_size=False,
                chroma_downsampling=True, density_unit="in", x_density=300, y_density=300,
                xmp_metadata="", name=None):
    """JPEG data (a string scalar) of a uint8 [height, width, 1 or 3] image;
    ``format`` '' (by channels), 'grayscale' or 'rgb'; ``quality`` 0..100."""
    image = convert_to_tensor(image, name="image")
    if image.dtype != dtypes.uint8:
        raise TypeError(f"encode_jpeg: image must be uint8, got {image.dtype.name}")
    if format not in ("", "grayscale", "rgb"):
        raise ValueError(f"format must be '', 'grayscale' or 'rgb', got {format!r}")
    if isinstance(quality, bool) or quality not in range(101):
        raise ValueError(f"quality must be an int in 0..100, got {quality!r}")
    return image.graph.create_op("EncodeJpeg", [image], {"format": format, "quality": quality},
                                 name=name or "EncodeJpeg").outputs[0]
