"""Neural-network ops (channels-last, NHWC): activations, softmax and the
fused cross-entropy losses, convolution, pooling, bias add, fused batch
normalisation; each with its shape rule and gradient. Exposed as ``tf.nn``."""

from .. import dtypes
from ..graph import shapes
from ..graph.core import Tensor
from ..graph.registry import register_gradient, register_op
from ..graph.shapes import TensorShape
from .constant_ops import constant_value, convert_to_tensor
from . import math_ops


def _same_as_input(inputs, attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


def _check_floating(op_type, tensor):
    if not tensor.dtype.is_floating:
        raise TypeError(f"{op_type} needs a floating tensor, got {tensor.name} of "
                        f"{tensor.dtype.name}")


def _float_unary_shape(inputs, attrs):
    _check_floating(attrs.get("_op", "op"), inputs[0])
    return [(inputs[0].shape, inputs[0].dtype)]


def _create(op_type, inputs, attrs=None, name=None):
    return inputs[0].graph.create_op(op_type, inputs, attrs or {}, name=name or op_type)


# -- activations -------------------------------------------------------------------

register_op("Relu", _same_as_input, exact_gradients=True, type_list=dtypes.REAL_TYPES,
            typed_input="features")
register_op("Elu", _same_as_input, type_list=dtypes.FLOATING_TYPES, typed_input="features")
register_op("Gelu", _same_as_input, type_list=dtypes.FLOATING_TYPES, typed_input="features")
register_op("ReluGrad", _same_as_input)   # (grad, y)
register_op("EluGrad", _same_as_input)    # (grad, y)
register_op("GeluGrad", _same_as_input)   # (grad, x), attr approximate


def relu(features, name=None):
    """max(features, 0): ``tf.nn.relu(x)``."""
    x = convert_to_tensor(features)
    return _create("Relu", [x], {"_op": "relu"}, name).outputs[0]


def elu(features, name=None):
    """x if x > 0 else exp(x) - 1."""
    x = convert_to_tensor(features)
    return _create("Elu", [x], {"_op": "elu"}, name).outputs[0]


def gelu(features, approximate=False, name=None):
    """x * Φ(x); ``approximate=True`` uses the tanh form."""
    x = convert_to_tensor(features)
    return _create("Gelu", [x], {"_op": "gelu", "approximate": bool(approximate)},
                   name).outputs[0]


register_gradient("Relu", lambda op, g: [_create("ReluGrad", [g, op.outputs[0]]).outputs[0]])
register_gradient("Elu", lambda op, g: [_create("EluGrad", [g, op.outputs[0]]).outputs[0]])
register_gradient("Gelu", lambda op, g: [_create(
    "GeluGrad", [g, op.inputs[0]], {"approximate": op.attrs["approximate"]}).outputs[0]])

sigmoid = math_ops.sigmoid
tanh = math_ops.tanh

# -- softmax -------------------------------------------------------------------------


def _softmax_shape(inputs, attrs):
    x = inputs[0]
    _check_floating("softmax", x)
    shapes.normalize_axes(attrs["axis"], x.shape.ndims, "softmax axis")
    return [(x.shape, x.dtype)]


register_op("Softmax", _softmax_shape, type_list=dtypes.FLOATING_TYPES, typed_input="logits")
register_op("LogSoftmax", _softmax_shape, type_list=dtypes.FLOATING_TYPES,
            typed_input="logits")


def softmax(logits, axis=-1, name=None, dim=None):
    """exp(logits) normalised along ``axis``: ``tf.nn.softmax(logits / 0.6)``."""
    x = convert_to_tensor(logits)
    axis = dim if dim is not None else axis
    return _create("Softmax", [x], {"axis": int(axis)}, name).outputs[0]


def log_softmax(logits, axis=-1, name=None):
    """log(softmax(logits)), computed stably."""
    x = convert_to_tensor(logits)
    return _create("LogSoftmax", [x], {"axis": int(axis)}, name).outputs[0]


def _softmax_grad(op, grad):
    y, axis = op.outputs[0], op.attrs["axis"]
    return [(grad - math_ops.reduce_sum(grad * y, axis, keepdims=True)) * y]


def _log_softmax_grad(op, grad):
    y, axis = op.outputs[0], op.attrs["axis"]
    return [grad - math_ops.exp(y) * math_ops.reduce_sum(grad, axis, keepdims=True)]


register_gradient("Softmax", _softmax_grad)
register_gradient("LogSoftmax", _log_softmax_grad)

# -- cross-entropy -----------------------------------------------------------------


def _xent_shape(inputs, attrs):
    logits, labels = inputs
    _check_floating("softmax_cross_entropy_with_logits", logits)
    if logits.shape.ndims not in (None, 2):
        raise ValueError(f"logits must be [batch, classes], got shape {logits.shape}")
    if attrs["sparse"]:
        if not labels.dtype.is_integer:
            raise TypeError(f"sparse labels must be int32 or int64, got {labels.dtype.name}")
        batch = TensorShape(logits.shape.dims[:1] if logits.shape.dims else [None])
        batch.merge_with(labels.shape)
    else:
        if labels.dtype is not logits.dtype:
            raise TypeError(f"labels ({labels.dtype.name}) and logits "
                            f"({logits.dtype.name}) must share a dtype")
        logits.shape.merge_with(labels.shape)
    batch_dims = logits.shape.dims[:1] if logits.shape.dims else [None]
    return [(TensorShape(batch_dims), logits.dtype), (logits.shape, logits.dtype)]


register_op("SoftmaxCrossEntropyWithLogits", _xent_shape)
register_op("SparseSoftmaxCrossEntropyWithLogits", _xent_shape)


def softmax_cross_entropy_with_logits(labels=None, logits=None, axis=-1, name=None,
                                      label_smoothing=0.0):
    """Per-example cross-entropy of ``softmax(logits)`` against a label
    distribution, fused with its gradient. ``label_smoothing`` (a towerflow
    extension) mixes the labels with the uniform distribution first."""
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(labels, dtype=logits.dtype)
    if axis not in (-1, 1):
        raise ValueError(f"softmax_cross_entropy_with_logits supports the last axis, got {axis}")
    if label_smoothing:
        classes = logits.shape.dims[-1] if logits.shape.dims else None
        if classes is None:
            raise ValueError("label_smoothing needs the number of classes to be known")
        labels = labels * (1.0 - label_smoothing) + label_smoothing / classes
    if logits.shape.ndims not in (None, 2):  # TF flattens the leading dims
        logits.shape.merge_with(labels.shape)  # TF's "Shapes ... are not compatible"
        return _over_flat_rows("SoftmaxCrossEntropyWithLogits", logits, labels, name)
    op = _create("SoftmaxCrossEntropyWithLogits", [logits, labels], {"sparse": False}, name)
    return op.outputs[0]


softmax_cross_entropy_with_logits_v2 = softmax_cross_entropy_with_logits


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """Per-example cross-entropy against integer class labels: labels of rank
    r, logits of rank r + 1 (``[..., classes]``), a loss of the labels' shape.

    Example: ``tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[[1, 0]],
    logits=tf.zeros([1, 2, 3]))`` gives ``[[log 3, log 3]]``.
    """
    logits = convert_to_tensor(logits)
    labels = convert_to_tensor(labels)
    if labels.shape.ndims is not None and logits.shape.ndims is not None and \
            labels.shape.ndims != logits.shape.ndims - 1:
        raise ValueError(f"Rank mismatch: Rank of labels (received {labels.shape.ndims}) "
                         "should equal rank of logits minus 1 (received "
                         f"{logits.shape.ndims}).")
    if logits.shape.ndims not in (None, 2):  # TF flattens the leading dims
        return _over_flat_rows("SparseSoftmaxCrossEntropyWithLogits", logits, labels, name)
    op = _create("SparseSoftmaxCrossEntropyWithLogits", [logits, labels],
                 {"sparse": True}, name)
    return op.outputs[0]


def _over_flat_rows(op_type, logits, labels, name):
    """The cross-entropy of logits of rank other than 2 as TF 1.15 computes it:
    over ``[-1, classes]`` rows, reshaped back to the leading dims (any of
    them, and the classes, may be known only at run time)."""
    from .array_ops import reshape, shape
    sparse = op_type.startswith("Sparse")
    leading = logits.shape.dims[:-1]
    classes = logits.shape.dims[-1]
    if classes is None:
        classes = shape(logits)[-1]
    flat_logits = reshape(logits, [-1, classes])
    flat_labels = reshape(labels, [-1] if sparse else [-1, classes])
    op = _create(op_type, [flat_logits, flat_labels], {"sparse": sparse}, None)
    if sum(dim is None for dim in leading) <= 1:   # a static target suffices
        return reshape(op.outputs[0], [-1 if dim is None else dim for dim in leading],
                       name=name)
    cost = reshape(op.outputs[0], shape(labels if sparse else logits)[:len(leading)],
                   name=name)
    cost.set_shape(TensorShape(leading).merge_with(labels.shape) if sparse else leading)
    return cost


def _xent_grad(op, grad_loss, grad_backprop):
    """The second output is the gradient softmax(logits) - labels: one that
    a gradient reached (second order, TF's grad_grad) adds the softmax's
    Jacobian times it to the logits' gradient (and, unlike TF 1.15, which
    leaves it out, minus it to the dense labels')."""
    grad_logits = _expand_last(grad_loss) * op.outputs[1]
    second_order = grad_backprop.op.type != "ZerosLike"
    if second_order:
        probs = softmax(op.inputs[0])
        grad_logits += (grad_backprop - math_ops.reduce_sum(
            grad_backprop * probs, -1, keepdims=True)) * probs
    if op.attrs["sparse"]:
        return [grad_logits, None]
    grad_labels = _expand_last(grad_loss) * -log_softmax(op.inputs[0])
    return [grad_logits, grad_labels - grad_backprop if second_order else grad_labels]


def _expand_last(tensor):
    from .array_ops import expand_dims
    return expand_dims(tensor, -1)


register_gradient("SoftmaxCrossEntropyWithLogits", _xent_grad)
register_gradient("SparseSoftmaxCrossEntropyWithLogits", _xent_grad)

# -- bias add, l2 loss, dropout ---------------------------------------------------


def _bias_add_shape(inputs, attrs):
    value, bias = inputs
    if bias.shape.ndims not in (None, 1):
        raise ValueError(f"bias must be 1-D, got shape {bias.shape}")
    if value.shape.ndims is not None and value.shape.ndims < 2:
        raise ValueError(f"Shape must be at least rank 2 but is rank {value.shape.ndims}")
    if bias.dtype is not value.dtype:
        raise TypeError(f"bias ({bias.dtype.name}) and value ({value.dtype.name}) must "
                        "share a dtype")
    channels = value.shape.dims[-1] if value.shape.dims else None
    TensorShape([channels]).merge_with(bias.shape)
    return [(value.shape, value.dtype)]


def _bias_add_grad_shape(inputs, attrs):
    grad = inputs[0]
    return [(TensorShape([grad.shape.dims[-1] if grad.shape.dims else None]), grad.dtype)]


register_op("BiasAdd", _bias_add_shape, exact_gradients=True, type_list=dtypes.REAL_TYPES,
            typed_input="value")
register_op("BiasAddGrad", _bias_add_grad_shape)   # sum over every axis but the last
register_gradient("BiasAdd", lambda op, g: [g, _create("BiasAddGrad", [g]).outputs[0]])


def bias_add(value, bias, data_format=None, name=None):
    """``value + bias`` with ``bias`` along the last (channel) axis."""
    if data_format not in (None, "NHWC", "N...C"):
        raise ValueError(f"bias_add supports channels-last data only, got {data_format!r}")
    value = convert_to_tensor(value)
    bias = convert_to_tensor(bias, dtype=value.dtype)
    return _create("BiasAdd", [value, bias], name=name).outputs[0]


def l2_loss(t, name=None):
    """sum(t ** 2) / 2."""
    t = convert_to_tensor(t)
    return math_ops.multiply(math_ops.reduce_sum(math_ops.square(t)), 0.5,
                             name=name or "L2Loss")


def _dropout_shape(inputs, attrs):
    x = inputs[0]
    _check_floating("dropout", x)
    if len(inputs) > 1 and inputs[1].shape.ndims not in (None, 0):
        raise ValueError(f"dropout rate must be a scalar, got shape {inputs[1].shape}")
    return [(x.shape, x.dtype), (shapes.unknown_shape(x.shape.ndims), x.dtype)]


# (x[, rate]) -> (x * mask, mask), mask = keep / (1 - rate) drawn from the op's seeded
# stream; the rate is the attr, or (attr None) the scalar input fed at run time.
register_op("Dropout", _dropout_shape, stateful=True)
register_gradient("Dropout", lambda op, g, _g_mask: [math_ops.multiply(g, op.outputs[1])] +
                  [None] * (len(op.inputs) - 1))


def dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None):
    """Zero each element with probability ``rate`` (or 1 - ``keep_prob``) and scale
    the rest by 1 / (1 - rate); a fresh mask every run, reproducible with a seed.
    ``noise_shape`` shares one draw along its size-1 axes. Either may be a scalar
    tensor: ``tf.nn.dropout(h, keep_prob)`` with ``keep_prob`` fed 0.5 or 1.0."""
    from .random_ops import get_seed
    x = convert_to_tensor(x)
    _check_floating("dropout", x)   # before a rate of 0 returns x: TF refuses it too
    noise = None if noise_shape is None else _noise_dims(x, noise_shape)
    attrs = {"seed": get_seed(seed), "noise_shape": noise}
    rate_tensor = _dropout_rate_tensor(keep_prob, rate)
    if rate_tensor is not None:
        attrs["rate"] = None
        return _create("Dropout", [x, rate_tensor], attrs, name or "dropout").outputs[0]
    attrs["rate"] = _dropout_rate(keep_prob, rate)
    if attrs["rate"] == 0.0:
        return x
    return _create("Dropout", [x], attrs, name or "dropout").outputs[0]


def _noise_dims(x, noise_shape):
    """noise_shape as ints, with None for "x's own size": given as None, or
    (TF1's idiom) as ``tf.shape(x)[i]``; other scalar tensors must be constants."""
    from .shape_values import is_dimension_of
    dims = []
    for axis, dim in enumerate(noise_shape):
        if isinstance(dim, Tensor) and is_dimension_of(dim, x, axis):
            dims.append(None)
        elif isinstance(dim, Tensor):
            value = constant_value(dim)
            if value is None:
                raise ValueError(f"dropout's noise_shape[{axis}] must be an int, None, a "
                                 f"constant or tf.shape(x)[{axis}], got {dim.name}")
            dims.append(int(value))
        else:
            dims.append(None if dim is None else int(dim))
    return tuple(dims)


def _dropout_rate_tensor(keep_prob, rate):
    """The rate as a tensor when keep_prob or rate is one (None otherwise)."""
    if isinstance(rate, Tensor) and keep_prob is None:
        return rate
    if isinstance(keep_prob, Tensor) and rate is None:
        return math_ops.subtract(1.0, keep_prob)
    return None


def _dropout_rate(keep_prob, rate):
    if (keep_prob is None) == (rate is None):
        raise ValueError("dropout needs exactly one of rate= and keep_prob=")
    rate = float(rate) if rate is not None else 1.0 - float(keep_prob)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    return rate


def xw_plus_b(x, weights, biases, name=None):
    """matmul(x, weights) + biases, the biases along the last axis:
    ``tf.nn.xw_plus_b(x, w, b)`` for x [batch, in], w [in, out], b [out]."""
    product = math_ops.matmul(x, weights)
    return bias_add(product, biases, name=name or "xw_plus_b")
