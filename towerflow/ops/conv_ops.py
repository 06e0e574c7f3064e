"""Convolution and pooling (NHWC), with TensorFlow's SAME/VALID padding.

``tf.nn.conv2d(x, w, strides=[1, 1, 1, 1], padding='SAME')`` with ``x`` of
shape [batch, height, width, in_channels] and ``w`` of shape [height, width,
in_channels, out_channels]. The Conv2D op also outputs what its filter
gradient reuses instead of rebuilding it: the im2col patch matrix, or where
the compiled kernels run it by Winograd (see backends/winograd.py) the
transformed input tiles, given the patches' width.
"""

import numpy as np

from .. import dtypes
from ..graph.core import Tensor
from ..graph.registry import register_gradient, register_op
from ..graph.shapes import TensorShape
from .constant_ops import constant_value, convert_to_tensor

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


def _backprop_input_shape(inputs, attrs):
    """(x, w, grad): x's shape; (w, grad) with attrs ``input_sizes`` (H, W, C) and
    ``batch``, as ``conv2d_transpose`` builds it: the batch (else grad's), then
    those sizes."""
    if len(inputs) == 3:
        return [(inputs[0].shape, inputs[0].dtype)]
    grad = inputs[1]
    batch = attrs["batch"] if attrs["batch"] is not None else (grad.shape.dims or [None])[0]
    return [(TensorShape([batch, *attrs["input_sizes"]]), grad.dtype)]


register_op("Conv2D", _conv2d_shape, exact_gradients=True)
# (x, w, grad) or (w, grad) -> grad w.r.t. x (tf.nn.conv2d_transpose);
# (patches, grad) -> grad w.r.t. w
register_op("Conv2DBackpropInput", _backprop_input_shape, exact_gradients=True)
# NOTE: the gradient reaching the patches (second order: the gradient of a
# Conv2DBackpropFilter) is given as the gradient w.r.t. the Conv2D's input x,
# of x's shape, not of the patches' (which may be Winograd tiles): Conv2D's
# gradient adds it to its input's; exact_gradients keeps autodiff from
# summing it to the patches' shape.
register_op("Conv2DBackpropFilter",
            lambda inputs, attrs: [(TensorShape(attrs["filter_shape"]), inputs[0].dtype)],
            exact_gradients=True)


def conv2d(input, filter=None, strides=None, padding=None, use_cudnn_on_gpu=True,
           data_format="NHWC", dilations=None, name=None, filters=None):
    """2-D convolution, NHWC input and HWIO filter: ``tf.nn.conv2d(x, w, [1, 1, 1, 1],
    'SAME')``."""
    _check_layout("conv2d", data_format, dilations)
    x = convert_to_tensor(input)
    w = convert_to_tensor(filter if filter is not None else filters, dtype=x.dtype)
    stride_hw, padding = _spatial_attrs(strides if strides is not None else 1, padding,
                                        "conv2d")
    attrs = {"strides": stride_hw, "padding": padding}
    return x.graph.create_op("Conv2D", [x, w], attrs, name=name or "Conv2D").outputs[0]


def _conv2d_grad(op, grad, grad_through_patches):
    x, w = op.inputs
    graph = x.graph
    attrs = {"strides": op.attrs["strides"], "padding": op.attrs["padding"]}
    grad_x = graph.create_op("Conv2DBackpropInput", [x, w, grad], attrs).outputs[0]
    if grad_through_patches.op.type != "ZerosLike":   # x-shaped (see Conv2DBackpropFilter)
        grad_x = grad_x + grad_through_patches
    if not w.shape.is_fully_defined():
        raise ValueError(f"the gradient of conv2d needs a filter of known shape, got {w.shape}")
    # NOTE: the strides and padding let a kernel that gets x, not patches, as its
    # first input (the GPU's implicit GEMM, cupy_conv.py) lay the windows out.
    attrs = {"filter_shape": tuple(w.shape.dims), **attrs}
    grad_w = graph.create_op("Conv2DBackpropFilter", [op.outputs[1], grad], attrs).outputs[0]
    return [grad_x, grad_w]


register_gradient("Conv2D", _conv2d_grad)

# -- transposed convolution ------------------------------------------------------------

_LABEL = "Conv2DCustomBackpropInput"   # TF's wording for the shape checks below


def conv2d_transpose(value, filter=None, output_shape=None, strides=None, padding="SAME",
                     data_format="NHWC", name=None, input=None, filters=None,
                     dilations=None):
    """The transpose (gradient) of conv2d, with filter [h, w, out_channels,
    in_channels]: it is Conv2DBackpropInput with ``value`` as the gradient::

        up = tf.nn.conv2d_transpose(x, w, [batch, 14, 14, 32], [1, 2, 2, 1], 'SAME')

    ``output_shape``: a list, a NumPy array or a 1-D int tensor (a constant,
    ``tf.stack`` of ints and scalar tensors, or ``tf.shape(t)``); its height,
    width and channels must be known when the graph is built, its batch may
    be a run-time value (it is then the batch of ``value``)."""
    _check_layout("conv2d_transpose", data_format, dilations)
    x = convert_to_tensor(value if value is not None else input)
    w = convert_to_tensor(filter if filter is not None else filters, dtype=x.dtype)
    _check_transpose_channels(x, w)
    dims = _output_dims(output_shape)
    if isinstance(output_shape, (list, np.ndarray)):
        _check_output_channels(dims[3], w)
    return _backprop_input(x, w, dims, strides, padding, "conv2d_transpose",
                           name or "conv2d_transpose")


def conv2d_backprop_input(input_sizes, filter=None, out_backprop=None, strides=None,
                          padding=None, use_cudnn_on_gpu=True, data_format="NHWC",
                          dilations=None, name=None, filters=None):
    """The gradient of ``conv2d(x, filter)`` with respect to ``x`` (of shape
    ``input_sizes``), given the gradient ``out_backprop`` of its output: the
    op conv2d_transpose builds (the same filter, [h, w, in, out] as conv2d
    takes it; only the arguments' order and the op's name differ)::

        dx = tf.nn.conv2d_backprop_input([8, 28, 28, 3], w, dy, [1, 1, 1, 1], 'SAME')

    ``input_sizes`` as conv2d_transpose's ``output_shape``."""
    _check_layout("conv2d_backprop_input", data_format, dilations)
    grad = convert_to_tensor(out_backprop)
    w = convert_to_tensor(filter if filter is not None else filters, dtype=grad.dtype)
    dims = _output_dims(input_sizes, "conv2d_backprop_input", "input_sizes")
    _check_depths(_LABEL, (dims[3], _dim(w, 2)), (_dim(w, 3), _dim(grad, 3)))
    return _backprop_input(grad, w, dims, strides, padding, "conv2d_backprop_input",
                           name or "Conv2DBackpropInput")


def _check_layout(what, data_format, dilations):
    if data_format != "NHWC":
        raise ValueError(f"{what} supports data_format='NHWC' only, got {data_format!r}")
    if dilations not in (None, 1, [1, 1, 1, 1], (1, 1, 1, 1)):
        raise ValueError(f"{what} supports dilation 1 only, got {dilations}")


def _check_depths(label, in_depths, out_depths):
    """TF's kernels' depth checks (TF 1.14 on): the input's channels against
    the filter's third axis, the filter's fourth against the gradient's
    channels. A multiple (TF's grouped convolutions) is refused too."""
    (in_depth, filter_depth), known = in_depths, None not in in_depths
    if known and (filter_depth < 1 or in_depth % filter_depth):
        raise ValueError(f"{label}: input depth must be evenly divisible by filter depth")
    if known and in_depth != filter_depth:
        raise ValueError(f"{label}: grouped convolutions (input depth {in_depth}, filter "
                         f"depth {filter_depth}) are not supported")
    if None not in out_depths and out_depths[0] != out_depths[1]:
        raise ValueError(f"{label}: filter and out_backprop must have the same out_depth")


def _backprop_input(grad, w, dims, strides, padding, what, name):
    """Conv2DBackpropInput of ``grad`` by ``w`` into the shape ``dims``."""
    _check_nhwc(grad, what)
    stride_hw, padding = _spatial_attrs(strides if strides is not None else 1, padding, what)
    _check_backprop_sizes(_LABEL, dims, grad, (_dim(w, 0), _dim(w, 1)), stride_hw, padding)
    attrs = {"strides": stride_hw, "padding": padding, "input_sizes": tuple(dims[1:]),
             "batch": dims[0]}
    return grad.graph.create_op("Conv2DBackpropInput", [w, grad], attrs, name=name).outputs[0]


_FILTER_LABEL = "Conv2DCustomBackpropFilter"     # TF's CPU kernel's, as _LABEL


def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding,
                           use_cudnn_on_gpu=True, data_format="NHWC", dilations=None,
                           name=None):
    """The gradient of ``conv2d(input, filter)`` with respect to a filter of
    shape ``filter_sizes`` [h, w, in, out] (known when the graph is built: a
    list, an array or a constant, as are the heights and widths of ``input``
    and ``out_backprop``), given the gradient ``out_backprop`` of its
    output::

        dw = tf.nn.conv2d_backprop_filter(x, [3, 3, 3, 16], dy, [1, 1, 1, 1], 'SAME')

    It runs a Conv2D of ``input`` by a zero filter for the patches (or
    Winograd tiles) the filter gradient reads: about twice the cost of the
    filter gradient inside a training step, which reuses the forward's."""
    _check_layout("conv2d_backprop_filter", data_format, dilations)
    x = convert_to_tensor(input)
    grad = convert_to_tensor(out_backprop, dtype=x.dtype)
    sizes = _output_dims(filter_sizes, "conv2d_backprop_filter", "filter_sizes",
                         open_batch=False)
    _check_nhwc(x, "conv2d_backprop_filter")
    _check_nhwc(grad, "conv2d_backprop_filter")
    if None in [_dim(tensor, axis) for tensor in (x, grad) for axis in (1, 2)]:
        # NOTE: the kernel sees the patches, not the input's height and width, so it
        # could not tell a fed out_backprop of swapped sizes (6x4 for 4x6) from a
        # right one: the sizes are checked here, and must be known here
        raise ValueError(f"conv2d_backprop_filter needs the height and width of input and "
                         f"out_backprop known when the graph is built, got {x.shape} and "
                         f"{grad.shape}")
    _check_depths(_FILTER_LABEL, (_dim(x, 3), sizes[2]), (sizes[3], _dim(grad, 3)))
    stride_hw, padding = _spatial_attrs(strides, padding, "conv2d_backprop_filter")
    _check_backprop_sizes(_FILTER_LABEL, x.shape.dims, grad, sizes[:2], stride_hw, padding)
    zeros = np.zeros(sizes, dtype=x.dtype.as_numpy_dtype)
    conv = x.graph.create_op("Conv2D", [x, convert_to_tensor(zeros)],
                             {"strides": stride_hw, "padding": padding})
    return x.graph.create_op("Conv2DBackpropFilter", [conv.outputs[1], grad],
                             {"filter_shape": tuple(sizes), "strides": stride_hw,
                              "padding": padding},
                             name=name or "Conv2DBackpropFilter").outputs[0]


def _check_transpose_channels(x, w):
    in_x, in_w = _dim(x, 3), _dim(w, 3)
    if None not in (in_x, in_w) and in_x != in_w:
        raise ValueError(f"input channels does not match filter's input channels, "
                         f"{in_x} != {in_w}")


def _check_output_channels(channels, w):
    if None not in (channels, _dim(w, 2)) and channels != _dim(w, 2):
        raise ValueError(f"output_shape does not match filter's output channels, "
                         f"{channels} != {_dim(w, 2)}")


def _dim(tensor, axis):
    dims = tensor.shape.dims
    return None if dims is None or len(dims) <= axis else dims[axis]


def _output_dims(output_shape, what="conv2d_transpose", name="output_shape", open_batch=True):
    """[batch, height, width, channels] of conv2d_transpose's output_shape (or
    ``what``'s argument ``name``), all known when the graph is built but, with
    ``open_batch``, the batch (then None where it is a run-time value)."""
    elements = _shape_elements(output_shape)
    if len(elements) != 4:
        raise ValueError(f"{name} must have shape (4,), got ({len(elements)},)")
    dims = [_static_dim(element) for element in elements]
    if None in dims[1 if open_batch else 0:]:
        which = f"{name}'s height, width and channels" if open_batch else "all its sizes"
        raise ValueError(f"{what} needs {which} known when the graph is built, "
                         f"got {output_shape}")
    return dims


def _shape_elements(output_shape):
    """The four elements of output_shape: ints, scalar tensors or None."""
    if not isinstance(output_shape, Tensor):
        return list(np.asarray(output_shape, dtype=object).reshape(-1)) \
            if isinstance(output_shape, np.ndarray) else list(output_shape)
    value = constant_value(output_shape)
    if value is not None:
        return value.reshape(-1).tolist()
    op = output_shape.op
    if op.type == "Pack":
        return list(op.inputs)
    if op.type == "Shape":
        return list(op.inputs[0].shape.dims or [None] * 4)
    if output_shape.shape.ndims != 1 or output_shape.shape.dims[0] != 4:
        raise ValueError(f"output_shape must have shape (4,), got {output_shape.shape}")
    return [None] * 4


def _static_dim(element):
    if isinstance(element, Tensor):
        value = constant_value(element)
        return None if value is None else value.item()
    return None if element is None else int(element)


def _check_backprop_sizes(label, input_dims, grad, windows, strides, padding):
    """TF's kernels' shape checks: conv2d of an input of ``input_dims`` [N, H,
    W, ...] by windows of ``windows`` (h, w) gives ``grad``'s batch and sizes."""
    batch = _dim(grad, 0)
    if None not in (batch, input_dims[0]) and batch != input_dims[0]:
        raise ValueError(f"{label}: input and out_backprop must have the same batch size, "
                         f"input batch: {input_dims[0]} outbackprop batch: {batch} "
                         f"batch_dim: 0")
    for axis in (1, 2):
        window, actual, size = windows[axis - 1], _dim(grad, axis), input_dims[axis]
        if None in (window, actual, size):
            continue
        computed = output_size(size, window, strides[axis - 1], padding)
        if computed != actual:
            raise ValueError(
                f"{label}: Size of out_backprop doesn't match computed: actual = {actual}, "
                f"computed = {computed} spatial_dim: {axis} input: {size} filter: "
                f"{window} output: {actual} stride: {strides[axis - 1]} dilation: 1")


def _conv2d_transpose_grad(op, grad):
    """y = A^T v for the linear map A = conv2d(., w): dv = A grad = conv2d(grad, w),
    and dw = the filter gradient of that conv2d against v."""
    w, value = op.inputs[-2:]
    if not w.shape.is_fully_defined():
        raise ValueError(f"the gradient of conv2d_transpose needs a filter of known shape, "
                         f"got {w.shape}")
    attrs = {"strides": op.attrs["strides"], "padding": op.attrs["padding"]}
    conv = op.graph.create_op("Conv2D", [grad, w], attrs)
    grad_w = op.graph.create_op("Conv2DBackpropFilter", [conv.outputs[1], value],
                                {"filter_shape": tuple(w.shape.dims), **attrs}).outputs[0]
    grad_x = [None] if len(op.inputs) == 3 else []   # (x, w, grad): x gives a shape only
    return grad_x + [grad_w, conv.outputs[0]]


register_gradient("Conv2DBackpropInput", _conv2d_transpose_grad)

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
# (x, winner, grad of x's shape) -> MaxPoolGrad's transpose: each window's
# first maximum's cell of grad (a second-order gradient, TF's MaxPoolGradGrad)
register_op("MaxPoolGradGrad", lambda inputs, attrs: [(inputs[1].shape, inputs[2].dtype)],
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
