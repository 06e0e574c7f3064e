"""Host kernels of towerflow/ops/image_codec_ops.py: PNG / JPEG / GIF decoding
and PNG / JPEG encoding through Pillow (imported when a kernel is first built,
so towerflow imports without it)::

    KERNELS["DecodePng"](ctx)(contents)    # -> uint8 [height, width, channels]
"""

import io

import numpy as np

from .. import errors

# Pillow's modes by channel count, for encoding and for `channels` on decoding.
_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}


def build_image_codec_kernels():
    decode = {name: _decode for name in ("DecodePng", "DecodeJpeg", "DecodeImage")}
    return {**decode, "EncodePng": _encode_png, "EncodeJpeg": _encode_jpeg}


def _pillow(op):
    try:
        from PIL import Image, ImageSequence
    except ImportError:
        raise errors.UnimplementedError(
            None, op, f"{op.type} needs Pillow (pip install Pillow), which is not "
            f"installed") from None
    return Image, ImageSequence


def _decode(ctx):
    op, attrs = ctx.op, ctx.attrs
    image_module, sequence = _pillow(op)

    def decode(contents):
        data = bytes(np.asarray(contents, dtype=object)[()])
        try:
            image = image_module.open(io.BytesIO(data))
            image.load()
        # Pillow has no closed set of errors for bad data (OSError, SyntaxError, EOFError,
        # ValueError, struct.error, zlib.error, ... by plugin), so any is "not an image".
        except Exception:  # noqa: BLE001 -- Pillow's errors for bad data are open-ended
            raise errors.InvalidArgumentError(
                None, op, f"Expected image (JPEG, PNG, or GIF), got {_format_of(data)}"
            ) from None
        if image.format == "GIF" and op.type == "DecodeImage":
            frames = [_pixels(frame.copy(), attrs["channels"] or 3, attrs["dtype"])
                      for frame in sequence.Iterator(image)]
            return np.stack(frames)
        return _pixels(image, attrs["channels"], attrs["dtype"])
    return decode


def _format_of(data):
    if not data:
        return "empty file"
    return f"unknown format starting with '{data[:16]!r}'"


def _pixels(image, channels, dtype):
    """[height, width, channels] pixels of ``image``: its own channel count
    when ``channels`` is 0 (palettes expanded, as libpng does)."""
    wide = image.mode in ("I;16", "I;16B", "I")
    if channels == 0:
        channels = _native_channels(image)
    if wide and channels == 1:
        pixels = np.asarray(image, dtype=np.int64).astype(np.uint16)
        pixels = pixels if dtype.name == "uint16" else (pixels // 257).astype(np.uint8)
    else:
        pixels = np.asarray(image.convert(_MODES[channels]), dtype=np.uint8)
        if dtype.name == "uint16":          # TF scales 8-bit images to 16 bits
            pixels = pixels.astype(np.uint16) * 257
    return pixels.reshape(pixels.shape[:2] + (channels,))


def _native_channels(image):
    if image.mode == "P":
        return 4 if "transparency" in image.info else 3
    if image.mode in ("L", "1", "I;16", "I;16B", "I"):
        return 1
    return {"LA": 2, "RGB": 3, "RGBA": 4}.get(image.mode, 3)


def _checked_image(image, op, channel_counts):
    if image.ndim != 3:
        raise errors.InvalidArgumentError(
            None, op, f"image must be 3-dimensional{list(image.shape)}")
    if image.shape[2] not in channel_counts:
        counts = ", ".join(map(str, channel_counts[:-1])) + f", or {channel_counts[-1]}"
        raise errors.InvalidArgumentError(
            None, op, f"image must have {counts} channels, got {image.shape[2]}")


def _encode_png(ctx):
    op, level = ctx.op, ctx.attrs["compression"]
    image_module, _ = _pillow(op)

    def encode(image):
        _checked_image(image, op, (1, 2, 3, 4))
        channels = image.shape[2]
        if image.dtype == np.uint16:
            if channels != 1:
                raise errors.UnimplementedError(
                    None, op, "encode_png: uint16 images of more than 1 channel are not "
                    "supported (Pillow writes 16-bit PNGs in grayscale only)")
            picture = image_module.fromarray(np.ascontiguousarray(image[:, :, 0]))  # I;16
        else:
            picture = _from_array(image_module, image)
        buffer = io.BytesIO()
        picture.save(buffer, format="PNG", compress_level=6 if level < 0 else level)
        return np.array(buffer.getvalue(), dtype=object)
    return encode


def _from_array(image_module, image):
    channels = image.shape[2]
    pixels = image[:, :, 0] if channels == 1 else image
    return image_module.fromarray(np.ascontiguousarray(pixels), _MODES[channels])


def _encode_jpeg(ctx):
    op, attrs = ctx.op, ctx.attrs
    image_module, _ = _pillow(op)

    def encode(image):
        _checked_image(image, op, (1, 3))
        picture = _from_array(image_module, image)
        if attrs["format"] == "grayscale":
            picture = picture.convert("L")
        elif attrs["format"] == "rgb":
            picture = picture.convert("RGB")
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG", quality=attrs["quality"])
        return np.array(buffer.getvalue(), dtype=object)
    return encode
