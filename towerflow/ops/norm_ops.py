"""Normalisation: fused batch normalisation (one kernel forward, one
backward), ``moments`` and the composite ``batch_normalization``."""

from .. import dtypes
from ..graph.core import Tensor
from ..graph.registry import register_gradient, register_op
from ..graph.shapes import TensorShape
from . import math_ops
from .constant_ops import convert_to_tensor, zeros_like


def _fused_shape(inputs, attrs):
    x = inputs[0]
    if not x.dtype.is_floating:
        raise TypeError(f"batch normalisation needs a floating input, got {x.dtype.name}")
    channels = TensorShape([x.shape.dims[-1] if x.shape.dims else None])
    for tensor in inputs[1:5]:
        channels = channels.merge_with(tensor.shape)
    stats_dtype = inputs[1].dtype
    return [(x.shape, x.dtype)] + [(channels, stats_dtype)] * 4


def _fused_grad_shape(inputs, attrs):
    grad, x, scale = inputs[:3]
    return [(x.shape, x.dtype), (scale.shape, scale.dtype), (scale.shape, scale.dtype)]


# (x, scale, offset, mean, variance[, is_training]) ->
#     (y, batch_mean, batch_variance (unbiased), saved_mean, saved_inv_std)
register_op("FusedBatchNorm", _fused_shape)
# (grad, x, scale, saved_mean, saved_inv_std[, is_training]) -> (dx, dscale, doffset)
register_op("FusedBatchNormGrad", _fused_grad_shape)


def _fused_batch_norm_grad(op, grad_y, *_unused_stat_grads):
    x, scale = op.inputs[0], op.inputs[1]
    inputs = [grad_y, x, scale, op.outputs[3], op.outputs[4]] + list(op.inputs[5:])
    attrs = {"epsilon": op.attrs["epsilon"], "is_training": op.attrs["is_training"]}
    grad_x, grad_scale, grad_offset = op.graph.create_op(
        "FusedBatchNormGrad", inputs, attrs).outputs
    return [grad_x, grad_scale, grad_offset, None, None] + [None] * (len(op.inputs) - 5)


register_gradient("FusedBatchNorm", _fused_batch_norm_grad)


def fused_batch_norm(x, scale, offset, mean=None, variance=None, epsilon=0.001,
                     data_format="NHWC", is_training=True, name=None):
    """Batch normalisation over every axis but the last. Returns (y, batch_mean,
    batch_variance); in training the statistics are the batch's (variance
    unbiased, for moving averages), else ``mean``/``variance`` are used.
    ``is_training`` may be a Python bool or a scalar bool tensor."""
    if data_format not in ("NHWC", "N...C"):
        raise ValueError(f"fused_batch_norm supports channels-last data only, got "
                         f"{data_format!r}")
    x = convert_to_tensor(x)
    scale = convert_to_tensor(scale)
    offset = convert_to_tensor(offset, dtype=scale.dtype)
    mean = _stat_input(mean, scale, is_training, "mean")
    variance = _stat_input(variance, scale, is_training, "variance")
    inputs = [x, scale, offset, mean, variance]
    attrs = {"epsilon": float(epsilon), "is_training": is_training}
    if isinstance(is_training, Tensor):
        if not is_training.dtype.is_bool:
            raise TypeError(f"is_training must be a bool tensor, got {is_training.dtype.name}")
        inputs.append(is_training)
        attrs["is_training"] = None  # decided at run time by the extra input
    else:
        attrs["is_training"] = bool(is_training)
    op = x.graph.create_op("FusedBatchNorm", inputs, attrs, name=name or "FusedBatchNorm")
    return op.outputs[0], op.outputs[1], op.outputs[2]


def _stat_input(value, scale, is_training, what):
    if value is not None:
        return convert_to_tensor(value, dtype=scale.dtype)
    if is_training is False:
        raise ValueError(f"fused_batch_norm in inference mode needs {what}=")
    from .constant_ops import zeros_like
    return zeros_like(scale)


def moments(x, axes, shift=None, name=None, keepdims=False, keep_dims=None):
    """(mean, variance) of ``x`` over ``axes``: ``mean, var = tf.nn.moments(x, [0])``."""
    x = convert_to_tensor(x)
    keepdims = bool(keepdims if keep_dims is None else keep_dims)
    mean = math_ops.reduce_mean(x, axes, keepdims=True)
    variance = math_ops.reduce_mean(math_ops.squared_difference(x, mean), axes,
                                    keepdims=True)
    if not keepdims:
        from .array_ops import squeeze
        mean, variance = squeeze(mean, axes), squeeze(variance, axes)
    return mean, variance


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """(x - mean) * scale / sqrt(variance + eps) + offset, with broadcasting;
    ``offset`` and ``scale`` may be None."""
    x = convert_to_tensor(x)
    inv = math_ops.rsqrt(variance + variance_epsilon)
    if scale is not None:
        inv = inv * scale
    shifted = offset - mean * inv if offset is not None else -mean * inv
    return math_ops.add(x * inv, shifted, name=name or "batchnorm")



# -- local response normalisation ----------------------------------------------------


def _lrn_shape(inputs, attrs):
    x = inputs[0]
    if x.dtype not in (dtypes.float16, dtypes.float32, dtypes.float64):
        raise TypeError(f"lrn needs a float16, float32 or float64 input, got {x.dtype.name}")
    if x.shape.ndims not in (None, 4):
        raise ValueError(f"input must be 4-dimensional, got {x.name} of shape {x.shape}")
    return [(x.shape, x.dtype)]


# x -> x / (bias + alpha * sum of x^2 over the channel window) ** beta
register_op("LRN", _lrn_shape)
# (grad, x) -> the input's gradient (TensorFlow's LRNGrad formula)
register_op("LRNGrad", lambda inputs, attrs: [(inputs[1].shape, inputs[1].dtype)])


def local_response_normalization(input, depth_radius=5, bias=1, alpha=1, beta=0.5,
                                 name=None):
    """TensorFlow's LRN over the last axis of a 4-D input::

        sqr_sum[a, b, c, d] = sum(input[a, b, c, d - depth_radius : d + depth_radius + 1] ** 2)
        output = input / (bias + alpha * sqr_sum) ** beta

    Example (AlexNet, the CIFAR-10 tutorial)::

        norm1 = tf.nn.lrn(pool1, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)
    """
    x = convert_to_tensor(input)
    if isinstance(depth_radius, bool) or not isinstance(depth_radius, int) or depth_radius < 0:
        raise ValueError(f"depth_radius must be a non-negative int, got {depth_radius!r}")
    attrs = {"depth_radius": depth_radius, "bias": float(bias), "alpha": float(alpha),
             "beta": float(beta)}
    return x.graph.create_op("LRN", [x], attrs, name=name or "LRN").outputs[0]


lrn = local_response_normalization


def _lrn_grad(op, grad):
    return [op.graph.create_op("LRNGrad", [grad, op.inputs[0]], dict(op.attrs)).outputs[0]]


register_gradient("LRN", _lrn_grad)


def weighted_moments(x, axes, frequency_weights, name=None, keep_dims=None, keepdims=None):
    """The frequency-weighted (mean, variance) of ``x`` over ``axes``, the
    weights broadcast against ``x``, as TF 1.15's two-pass ``tf.nn.weighted_moments``
    (float16 computed in float32)::

        mean, variance = tf.nn.weighted_moments(x, [0], weights)
    """
    from .array_ops import squeeze
    keepdims = bool(keepdims if keep_dims is None else keep_dims)
    x = convert_to_tensor(x, name="x")
    weights = convert_to_tensor(frequency_weights, name="frequency_weights")
    in_dtype = x.dtype
    if in_dtype == dtypes.float16:
        x = math_ops.cast(x, dtypes.float32)
    weights = math_ops.cast_if_needed(weights, x.dtype)
    weighted_sum = math_ops.reduce_sum(weights * x, axes, keepdims=True)
    # weights + zeros_like(x): one weight per element of x, whatever broadcasting said
    weight_sum = math_ops.reduce_sum(weights + zeros_like(x), axes, keepdims=True)
    divisor = math_ops.reciprocal(weight_sum)
    mean = weighted_sum * divisor
    variance = math_ops.reduce_sum(weights * math_ops.squared_difference(x, mean), axes,
                                   keepdims=True) * divisor
    if not keepdims:
        mean, variance = squeeze(mean, axes), squeeze(variance, axes)
    if in_dtype == dtypes.float16:
        mean, variance = (math_ops.cast(each, dtypes.float16) for each in (mean, variance))
    return mean, variance
