"""Convolution and pooling (NHWC), with TensorFlow's SAME/VALID padding.

``tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding='SAME')`` with ``x`` of
shape [batch, height, width, in_channels] and ``w`` of shape [height, width,
in_channels, out_channels]. The Conv2D op also outputs what its filter
gradient reuses instead of rebuilding it: the im2col patch matrix, or where
the compiled kernels run it by Winograd (see backends/winograd.py) the
transformed input tiles, given the patches' width.
"""

from .. import dtypes
from ..graph.registry import register_gradient, register_op
from ..graph.shapes import TensorShape
from .constant_ops import convert_to_tensor

PADDINGS = ("SAME", "VALID")


def output_size(size, window, stride, padding):
    """One spatial output dimension (None stays None). As in TensorFlow's shape
    functions, a VALID window larger than a known input is a ValueError (the
    kernels, which see only run-time shapes, return an empty result instead
    when the excess is below the stride; see window_geometry.py)."""
    if size is None:
        return None
    if padding == "SAME":
        return -(-size // stride)
    if window is not None and window > size:
        raise ValueError(f"Negative dimension size caused by subtracting {window} from "
                         f"{size}: a VALID window larger than the input")
    return (size - window) // stride + 1


def _spatial_attrs(strides, padding, what):
    strides = _four(strides, "strides", what)
    if strides[0] != 1 or strides[3] != 1:
        raise ValueError(f"{what}: strides over the batch and channel axes must be 1, "
                         f"got {list(strides)}")
    padding = padding.upper() if isinstance(padding, str) else padding
    if padding not in PADDINGS:
        raise ValueError(f"{what}: padding must be 'SAME' or 'VALID', got {padding!r}")
    return (strides[1], strides[2]), padding


def _four(values, name, what):
    values = [values] * 4 if isinstance(values, int) else list(values)
    if len(values) == 2:
        values = [1] + values + [1]
    if len(values) != 4 or any(int(v) < 1 for v in values):
        raise ValueError(f"{what}: {name} must be 4 positive ints [1, h, w, 1], got {values}")
    return tuple(int(v) for v in values)


def _check_nhwc(tensor, what):
    if tensor.shape.ndims not in (None, 4):
        raise ValueError(f"{what} needs a 4-D NHWC input, got shape {tensor.shape}")
    if not tensor.dtype.is_floating:
        raise TypeError(f"{what} needs a floating input, got {tensor.dtype.name}")


def _spatial_out(x_shape, window, strides, padding, channels):
    dims = x_shape.dims if x_shape.dims is not None else [None] * 4
    height = output_size(dims[1], window[0], strides[0], padding)
    width = output_size(dims[2], window[1], strides[1], padding)
    return TensorShape([dims[0], height, width, channels])


def _conv2d_shape(inputs, attrs):
    x, w = inputs
    _check_nhwc(x, "conv2d")
    if w.shape.ndims not in (None, 4) or w.dtype is not x.dtype:
        raise ValueError(f"conv2d filter must be 4-D [h, w, in, out] of {x.dtype.name}, "
                         f"got shape {w.shape} of {w.dtype.name}")
    window = (w.shape.dims or [None] * 4)[:2]
    in_x = (x.shape.dims or [None] * 4)[3]
    in_w = (w.shape.dims or [None] * 4)[2]
    if None not in (in_x, in_w) and in_x != in_w:
        raise ValueError(f"conv2d: input has {in_x} channels but the filter expects {in_w}")
    out_channels = (w.shape.dims or [None] * 4)[3]
    y = _spatial_out(x.shape, window, attrs["strides"], attrs["padding"], out_channels)
    columns = None if None in (window[0], window[1], in_w) else window[0] * window[1] * in_w
    return [(y, x.dtype), (TensorShape([None, columns]), x.dtype)]


register_op("Conv2D", _conv2d_shape, exact_gradients=True)
# (x, w, grad) -> grad w.r.t. x;  (patches, grad) -> grad w.r.t. w
register_op("Conv2DBackpropInput", lambda inputs, attrs: [(inputs[0].shape, inputs[0].dtype)])
register_op("Conv2DBackpropFilter",
            lambda inputs, attrs: [(TensorShape(attrs["filter_shape"]), inputs[0].dtype)])


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True,
           data_format="NHWC", dilations=None, name=None, filters=None):
    """2-D convolution, NHWC input and HWIO filter: ``tf.nn.conv2d(x, w, [1, 1, 1, 1],
    'SAME')``."""
    if data_format != "NHWC":
        raise ValueError(f"conv2d supports data_format='NHWC' only, got {data_format!r}")
    if dilations not in (None, 1, [1, 1, 1, 1], (1, 1, 1, 1)):
        raise ValueError(f"conv2d supports dilation 1 only, got {dilations}")
    x = convert_to_tensor(input)
    w = convert_to_tensor(filter if filter is not None else filters, dtype=x.dtype)
    stride_hw, padding = _spatial_attrs(strides if strides is not None else 1, padding,
                                        "conv2d")
    attrs = {"strides": stride_hw, "padding": padding}
    return x.graph.create_op("Conv2D", [x, w], attrs, name=name or "Conv2D").outputs[0]


def _conv2d_grad(op, grad, _grad_patches):
    x, w = op.inputs
    graph = x.graph
    attrs = {"strides": op.attrs["strides"], "padding": op.attrs["padding"]}
    grad_x = graph.create_op("Conv2DBackpropInput", [x, w, grad], attrs).outputs[0]
    if not w.shape.is_fully_defined():
        raise ValueError(f"the gradient of conv2d needs a filter of known shape, got {w.shape}")
    attrs = {"filter_shape": tuple(w.shape.dims)}
    grad_w = graph.create_op("Conv2DBackpropFilter", [op.outputs[1], grad], attrs).outputs[0]
    return [grad_x, grad_w]


register_gradient("Conv2D", _conv2d_grad)

# -- pooling ---------------------------------------------------------------------------


def _pool_shape(inputs, attrs):
    x = inputs[0]
    _check_nhwc(x, "pooling")
    channels = (x.shape.dims or [None] * 4)[3]
    return [(_spatial_out(x.shape, attrs["ksize"], attrs["strides"], attrs["padding"],
                          channels), x.dtype)]


def _max_pool_shape(inputs, attrs):
    ((shape, dtype),) = _pool_shape(inputs, attrs)
    return [(shape, dtype), (shape, dtypes.uint8)]


# (x) -> (y, winner): winner is the index, within its window, of each output's
# first maximum, which the gradient routes to.
register_op("MaxPool", _max_pool_shape, exact_gradients=True)
register_op("AvgPool", _pool_shape, exact_gradients=True)
# (x, winner, grad) -> grad w.r.t. x;  (x, grad) -> grad w.r.t. x
register_op("MaxPoolGrad", lambda inputs, attrs: [(inputs[0].shape, inputs[0].dtype)],
            shape_only_inputs=(0,))
register_op("AvgPoolGrad", lambda inputs, attrs: [(inputs[0].shape, inputs[0].dtype)],
            shape_only_inputs=(0,))


def _pool(op_type, value, ksize, strides, padding, name):
    x = convert_to_tensor(value)
    window = _four(ksize, "ksize", op_type)
    if window[0] != 1 or window[3] != 1:
        raise ValueError(f"{op_type}: ksize over the batch and channel axes must be 1, "
                         f"got {list(window)}")
    stride_hw, padding = _spatial_attrs(strides, padding, op_type)
    attrs = {"ksize": (window[1], window[2]), "strides": stride_hw, "padding": padding}
    return x.graph.create_op(op_type, [x], attrs, name=name or op_type).outputs[0]


def max_pool(value, ksize, strides, padding, data_format="NHWC", name=None):
    """Max over windows: ``tf.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], 'VALID')``."""
    _check_format(data_format)
    return _pool("MaxPool", value, ksize, strides, padding, name)


def avg_pool(value, ksize, strides, padding, data_format="NHWC", name=None):
    """Mean over windows (SAME padding averages the real cells only)."""
    _check_format(data_format)
    return _pool("AvgPool", value, ksize, strides, padding, name)


def _check_format(data_format):
    if data_format != "NHWC":
        raise ValueError(f"pooling supports data_format='NHWC' only, got {data_format!r}")


def _pool_attrs(op):
    return {key: op.attrs[key] for key in ("ksize", "strides", "padding")}


register_gradient("MaxPool", lambda op, g, _g_winner: [op.graph.create_op(
    "MaxPoolGrad", [op.inputs[0], op.outputs[1], g], _pool_attrs(op)).outputs[0]])
register_gradient("AvgPool", lambda op, g: [op.graph.create_op(
    "AvgPoolGrad", [op.inputs[0], g], _pool_attrs(op)).outputs[0]])
