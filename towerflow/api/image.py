"""``tf.image``: resizing, flips, crops, brightness and contrast,
standardisation and dtype conversion (towerflow/ops/image_ops.py), and the
PNG / JPEG codecs (towerflow/ops/image_codec_ops.py)."""

from ..ops.image_codec_ops import (
                             decode_image,
                             decode_jpeg,
                             decode_png,
                             encode_jpeg,
                             encode_png,
)
from ..ops.image_ops import (
                             ResizeMethod,
                             adjust_brightness,
                             adjust_contrast,
                             central_crop,
                             convert_image_dtype,
                             flip_left_right,
                             flip_up_down,
                             per_image_standardization,
                             random_brightness,
                             random_contrast,
                             random_crop,
                             random_flip_left_right,
                             random_flip_up_down,
                             resize_bilinear,
                             resize_image_with_crop_or_pad,
                             resize_images,
                             resize_nearest_neighbor,
)

resize = resize_images

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.image")
