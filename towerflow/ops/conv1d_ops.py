"""The convolutions TF 1.15 builds from conv2d: ``tf.nn.conv1d`` (an
``expand_dims`` to a height of 1, conv2d, a ``squeeze``, as TF's nn_ops.py),
``tf.nn.atrous_conv2d`` (a dilated conv2d) and 1-D pooling; their gradients
are those of the ops they are made of::

    y = tf.nn.conv1d(x, w, stride=1, padding='SAME')   # x [batch, width, in], w [k, in, out]
    y = tf.nn.atrous_conv2d(images, w, rate=2, padding='SAME')
"""

from . import array_ops, conv_ops, pad_ops, slice_ops
from .constant_ops import convert_to_tensor

_NWC = (None, "NWC", "NHWC")
_NCW = ("NCW", "NCHW")


def _width_axis(data_format):
    """The axis a height of 1 goes before: 1 (NWC) or 2 (NCW)."""
    if data_format in _NWC:
        return 1
    if data_format in _NCW:
        return 2
    raise ValueError('data_format must be "NWC" or "NCW".')


def _one_spatial(value, channel_index, name):
    """TF's _get_sequence(value, 1, channel_index, name): an int, [w], or
    [1, w, 1] / [1, 1, w] in the data format's order."""
    if value is None:
        return 1
    if isinstance(value, int):
        return value
    values = list(value)
    if len(values) == 1:
        return int(values[0])
    if len(values) == 3:
        return int(values[2] if channel_index == 1 else values[1])
    raise ValueError(f"{name} should be of length 1, 1 or 3 but was {len(values)}")


def conv1d(value=None, filters=None, stride=None, padding=None, use_cudnn_on_gpu=None,
           data_format=None, name=None, input=None, dilations=None):
    """1-D convolution of ``value`` [batch, width, in_channels] ('NWC', or
    [batch, in_channels, width] for 'NCW') with ``filters`` [width,
    in_channels, out_channels]: conv2d over a height of 1, as TF 1.15::

        y = tf.nn.conv1d(sequences, w, stride=2, padding='VALID')
    """
    value = convert_to_tensor(value if value is not None else input, name="value")
    filters = convert_to_tensor(filters, dtype=value.dtype, name="filters")
    axis = _width_axis(data_format)
    channel_index = 2 if axis == 1 else 1
    stride = _one_spatial(stride, channel_index, "stride")
    rate = _one_spatial(dilations, channel_index, "dilations")
    if axis == 2:       # NCW: the NHWC kernels on the transposed value, transposed back
        value = array_ops.transpose(value, [0, 2, 1])
    images = array_ops.expand_dims(value, 1)
    kernel = array_ops.expand_dims(filters, 0)
    if rate != 1:
        kernel = _dilated_filter(kernel, (1, rate), "conv1d")
    result = conv_ops.conv2d(images, kernel, [1, 1, stride, 1], padding)
    result = array_ops.squeeze(result, [1], name=name or "conv1d")
    return array_ops.transpose(result, [0, 2, 1]) if axis == 2 else result


def atrous_conv2d(value, filters, rate, padding, name=None):
    """conv2d with the filter's taps ``rate`` pixels apart (a "dilated" or
    "à trous" convolution), stride 1, as TF 1.15's ``tf.nn.atrous_conv2d``::

        y = tf.nn.atrous_conv2d(images, w, rate=2, padding='SAME')   # 3x3 sees 5x5

    The filter is spread with zeros to (k - 1) * rate + 1 taps: SAME pads by
    that effective size, as TF's space_to_batch formulation does, so the
    results match.
    """
    value = convert_to_tensor(value, name="value")
    filters = convert_to_tensor(filters, dtype=value.dtype, name="filters")
    rates = _rate_pair(rate)
    kernel = _dilated_filter(filters, rates, "atrous_conv2d") if rates != (1, 1) else filters
    return conv_ops.conv2d(value, kernel, [1, 1, 1, 1], padding, name=name or "atrous_conv2d")


def _rate_pair(rate):
    rates = (rate, rate) if isinstance(rate, int) else tuple(int(each) for each in rate)
    if len(rates) != 2:
        raise ValueError(f"len(dilation_rate)={len(rates)} but should be 2")
    if min(rates) < 1:
        raise ValueError(f"all values of dilation_rate must be positive, got {list(rates)}")
    return rates


def _dilated_filter(filters, rates, what):
    """[kh, kw, in, out] -> [(kh - 1) * rh + 1, (kw - 1) * rw + 1, in, out], the
    taps rh and rw apart with zeros between (gradients flow through the
    reshape, pad and slice back to the taps)."""
    dims = filters.shape.dims
    if dims is None or len(dims) != 4 or None in dims:
        raise ValueError(f"{what} with a rate above 1 needs the filter's shape known, "
                         f"got {filters.shape}")
    height, width, depth, count = dims
    (rate_h, rate_w) = rates
    spread = array_ops.reshape(filters, [height, 1, width, 1, depth, count])
    spread = pad_ops.pad(spread, [[0, 0], [0, rate_h - 1], [0, 0], [0, rate_w - 1],
                                  [0, 0], [0, 0]])
    spread = array_ops.reshape(spread, [height * rate_h, width * rate_w, depth, count])
    return slice_ops.slice(spread, [0, 0, 0, 0], [(height - 1) * rate_h + 1,
                                                  (width - 1) * rate_w + 1, depth, count])


def pool1d(pool, inputs, pool_size, strides, padding, channels_first, name=None):
    """``pool`` (conv_ops.max_pool or avg_pool) over the width of [batch,
    width, channels] (or [batch, channels, width]), as TF's Pooling1D does."""
    x = convert_to_tensor(inputs)
    if channels_first:
        x = array_ops.transpose(x, [0, 2, 1])
    pooled = pool(array_ops.expand_dims(x, 1), [1, 1, pool_size, 1], [1, 1, strides, 1],
                  padding)
    pooled = array_ops.squeeze(pooled, [1], name=name)
    return array_ops.transpose(pooled, [0, 2, 1]) if channels_first else pooled
