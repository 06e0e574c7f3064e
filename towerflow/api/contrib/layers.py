"""``tf.contrib.layers``: contrib's layer functions over the core layers of
``tf.layers``, with contrib's defaults and names::

    net = tf.contrib.layers.conv2d(images, 32, 3)        # SAME padding, ReLU: Conv/weights
    net = tf.contrib.layers.batch_norm(net, is_training=True)   # BatchNorm/beta, ...
    net = tf.contrib.layers.flatten(net)
    logits = tf.contrib.layers.fully_connected(net, 10, activation_fn=None)

What differs from ``tf.layers``: ``activation_fn`` defaults to ReLU,
``conv2d`` pads SAME, weights start from ``xavier_initializer()``, variables
are ``weights``/``biases`` in a scope named ``fully_connected``, ``Conv``,
``BatchNorm`` (made unique: ``Conv_1``), ``normalizer_fn`` replaces the bias,
and ``batch_norm`` has ``decay=0.999``, ``scale=False`` (no gamma) and
``updates_collections`` (None: the moving averages update with the output).
Each takes ``tf.contrib.framework.arg_scope`` defaults.
"""

import numpy as np

from ...graph import core
from ...graph.core import GraphKeys
from ...ops import array_ops, constant_ops, conv_ops, init_ops, nn_ops, variable_scope
from .. import layers as core_layers
from .. import missing as _missing
from ..conv_layers import pair
from .framework import add_arg_scope
from .initializers import (
    variance_scaling_initializer,
    xavier_initializer,
    xavier_initializer_conv2d,
)
from .optimizers import OPTIMIZER_CLS_NAMES, OPTIMIZER_SUMMARIES, optimize_loss  # noqa: F401
from .regularizers import apply_regularization, l1_regularizer, l2_regularizer

__all__ = ["apply_regularization", "avg_pool2d", "batch_norm", "conv2d", "convolution2d",
           "dropout", "flatten", "fully_connected", "l1_regularizer", "l2_regularizer",
           "linear", "max_pool2d", "optimize_loss", "variance_scaling_initializer",
           "xavier_initializer", "xavier_initializer_conv2d"]

_CONTRIB_NAMES = {"kernel": "weights", "bias": "biases"}
_XAVIER, _ZEROS = xavier_initializer(), init_ops.zeros_initializer()   # the defaults


class _ContribNames:
    """Makes a core layer's ``kernel`` and ``bias`` contrib's ``weights`` and ``biases``."""

    def add_weight(self, name, *args, **kwargs):
        return super().add_weight(_CONTRIB_NAMES.get(name, name), *args, **kwargs)


class _FullyConnected(_ContribNames, core_layers.Dense):
    pass


class _Convolution2D(_ContribNames, core_layers.Conv2D):
    pass


class _BatchNorm(core_layers.BatchNormalization):
    """contrib's batch norm makes no gamma without ``scale`` and no beta without
    ``center`` (core's layer keeps them as constant variables)."""

    def add_weight(self, name, shape, dtype=None, *args, **kwargs):
        if name == "gamma" and not self.scale:
            return constant_ops.ones(shape, dtype)
        if name == "beta" and not self.center:
            return constant_ops.zeros(shape, dtype)
        return super().add_weight(name, shape, dtype, *args, **kwargs)


@add_arg_scope
def fully_connected(inputs, num_outputs, activation_fn=nn_ops.relu, normalizer_fn=None,
                    normalizer_params=None, weights_initializer=_XAVIER,
                    weights_regularizer=None, biases_initializer=_ZEROS,
                    biases_regularizer=None, reuse=None, variables_collections=None,
                    outputs_collections=None, trainable=True, scope=None):
    """``activation_fn(inputs @ weights + biases)`` (ReLU by default), variables
    ``fully_connected/weights`` and ``fully_connected/biases``."""
    if isinstance(num_outputs, bool) or not isinstance(num_outputs, int):
        raise ValueError(f"num_outputs should be int or long, got {num_outputs}.")  # noqa: TRY004
    with variable_scope.variable_scope(scope, "fully_connected", [inputs],
                                       reuse=reuse) as sc:
        layer = _FullyConnected(
            num_outputs, None, use_bias=_has_bias(normalizer_fn, biases_initializer),
            kernel_initializer=weights_initializer, bias_initializer=biases_initializer,
            kernel_regularizer=weights_regularizer, bias_regularizer=biases_regularizer,
            trainable=trainable, _scope=sc, _reuse=reuse)
        outputs = layer(inputs)
        _collect_variables(layer, variables_collections)
        return _finished(outputs, normalizer_fn, normalizer_params, activation_fn,
                         outputs_collections)


@add_arg_scope
def convolution2d(inputs, num_outputs, kernel_size, stride=1, padding="SAME",
                  data_format=None, rate=1, activation_fn=nn_ops.relu, normalizer_fn=None,
                  normalizer_params=None, weights_initializer=_XAVIER,
                  weights_regularizer=None, biases_initializer=_ZEROS,
                  biases_regularizer=None, reuse=None, variables_collections=None,
                  outputs_collections=None, trainable=True, scope=None):
    """A 2-D convolution (NHWC), SAME padding and ReLU by default; variables
    ``Conv/weights`` [kh, kw, in, out] and ``Conv/biases``."""
    _check_convolution(inputs, data_format, rate)
    with variable_scope.variable_scope(scope, "Conv", [inputs], reuse=reuse) as sc:
        layer = _Convolution2D(
            num_outputs, kernel_size, stride, padding,
            use_bias=_has_bias(normalizer_fn, biases_initializer),
            kernel_initializer=weights_initializer, bias_initializer=biases_initializer,
            kernel_regularizer=weights_regularizer, bias_regularizer=biases_regularizer,
            trainable=trainable, _scope=sc, _reuse=reuse)
        outputs = layer(inputs)
        _collect_variables(layer, variables_collections)
        return _finished(outputs, normalizer_fn, normalizer_params, activation_fn,
                         outputs_collections)


conv2d = convolution2d


def _check_convolution(inputs, data_format, rate):
    if data_format not in (None, "NWC", "NCW", "NHWC", "NCHW", "NDHWC", "NCDHW"):
        raise ValueError(f"Invalid data_format: {data_format!r}")
    if data_format not in (None, "NHWC"):
        raise NotImplementedError(f"tf.contrib.layers.conv2d: towerflow convolves NHWC "
                                  f"data only, got data_format={data_format!r}")
    if pair(rate, "rate") != (1, 1):
        raise NotImplementedError(f"tf.contrib.layers.conv2d: towerflow has no atrous "
                                  f"(dilated) convolution, got rate={rate!r}")
    rank = constant_ops.convert_to_tensor(inputs).shape.ndims
    if rank is not None and rank != 4:
        raise ValueError(f"Convolution expects input with rank 4, got {rank}")


def _has_bias(normalizer_fn, biases_initializer):
    return not normalizer_fn and biases_initializer is not None


def _collect_variables(layer, variables_collections):
    """Add the layer's variables to ``variables_collections`` (a list, or a
    dict {'weights': [...], 'biases': [...]}), as contrib does."""
    for variable, kind in ((layer.kernel, "weights"), (layer.bias, "biases")):
        if variable is None or not variables_collections:
            continue
        names = (variables_collections.get(kind) if isinstance(variables_collections, dict)
                 else variables_collections)
        for name in names or []:
            if variable not in core.get_default_graph().get_collection(name):
                core.get_default_graph().add_to_collection(name, variable)


def _finished(outputs, normalizer_fn, normalizer_params, activation_fn, outputs_collections):
    """The normalizer (in the layer's scope, as contrib), the activation, the collections."""
    if normalizer_fn is not None:
        outputs = normalizer_fn(outputs, **(normalizer_params or {}))
    if activation_fn is not None:
        outputs = activation_fn(outputs)
    for name in outputs_collections or []:
        core.get_default_graph().add_to_collection(name, outputs)
    return outputs


@add_arg_scope
def linear(inputs, num_outputs, **kwargs):
    """``fully_connected`` without an activation."""
    return fully_connected(inputs, num_outputs, activation_fn=None, **kwargs)


@add_arg_scope
def batch_norm(inputs, decay=0.999, center=True, scale=False, epsilon=0.001,
               activation_fn=None, param_initializers=None, param_regularizers=None,
               updates_collections=GraphKeys.UPDATE_OPS, is_training=True, reuse=None,
               variables_collections=None, outputs_collections=None, trainable=True,
               batch_weights=None, fused=None, data_format="NHWC",
               zero_debias_moving_mean=False, scope=None, renorm=False,
               renorm_clipping=None, renorm_decay=0.99, adjustment=None):
    """Batch normalisation over the last axis, contrib's way: variables
    ``BatchNorm/beta`` (``center``), ``BatchNorm/gamma`` (``scale``, off by
    default), ``BatchNorm/moving_mean`` and ``moving_variance`` (``decay``);
    in training (``is_training``: a bool or a bool tensor) the moving-average
    updates go to ``updates_collections``, or run with the output when it is None."""
    _check_batch_norm(data_format, batch_weights, renorm, adjustment, zero_debias_moving_mean)
    initializers, regularizers = param_initializers or {}, param_regularizers or {}
    with variable_scope.variable_scope(scope, "BatchNorm", [inputs], reuse=reuse) as sc:
        layer = _BatchNorm(
            -1, decay, epsilon, center, scale, initializers.get("beta"),
            initializers.get("gamma"), initializers.get("moving_mean"),
            initializers.get("moving_variance"), regularizers.get("beta"),
            regularizers.get("gamma"), trainable=trainable, _scope=sc, _reuse=reuse)
        outputs = layer(inputs, training=is_training)
        outputs = _routed_updates(outputs, layer.updates, updates_collections)
        if variables_collections:
            for variable in layer.variables:
                for name in _collections_for(variables_collections, variable):
                    core.get_default_graph().add_to_collection(name, variable)
        return _finished(outputs, None, None, activation_fn, outputs_collections)


def _check_batch_norm(data_format, batch_weights, renorm, adjustment, zero_debias):
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError(f"data_format has to be either NCHW or NHWC. got {data_format!r}")
    unsupported = {"data_format='NCHW'": data_format == "NCHW",
                   "batch_weights": batch_weights is not None, "renorm": renorm,
                   "adjustment": adjustment is not None,
                   "zero_debias_moving_mean": zero_debias}
    named = [name for name, given in unsupported.items() if given]
    if named:
        raise NotImplementedError(f"tf.contrib.layers.batch_norm: towerflow does not "
                                  f"support {', '.join(named)}")


def _routed_updates(outputs, updates, updates_collections):
    """Move the layer's updates from UPDATE_OPS to ``updates_collections``;
    with None, make ``outputs`` wait for them instead (contrib's in-place mode)."""
    if not updates or updates_collections == GraphKeys.UPDATE_OPS:
        return outputs
    graph = core.get_default_graph()
    update_ops = graph.get_collection_ref(GraphKeys.UPDATE_OPS)
    update_ops[:] = [op for op in update_ops if op not in updates]
    if updates_collections is None:
        with graph.control_dependencies(updates):
            return array_ops.identity(outputs)
    for name in ([updates_collections] if isinstance(updates_collections, str)
                 else updates_collections):
        for op in updates:
            graph.add_to_collection(name, op)
    return outputs


def _collections_for(variables_collections, variable):
    if not isinstance(variables_collections, dict):
        return variables_collections
    short_name = variable.op.name.rsplit("/", 1)[-1]
    return variables_collections.get(short_name) or []


@add_arg_scope
def flatten(inputs, outputs_collections=None, scope=None):
    """[batch, d1, d2, ...] -> [batch, d1*d2*...]: ``tf.contrib.layers.flatten(net)``."""
    inputs = constant_ops.convert_to_tensor(inputs)
    rank = inputs.shape.ndims
    if rank is None or rank < 2:
        raise ValueError("Inputs must have a least 2 dimensions.")
    with core.get_default_graph().name_scope(scope or "Flatten"):
        outputs = array_ops.reshape(inputs, [-1, _inner_size(inputs)])
    return _finished(outputs, None, None, None, outputs_collections)


def _inner_size(inputs):
    inner = inputs.shape.dims[1:]
    if None in inner:
        raise ValueError(f"tf.contrib.layers.flatten: towerflow needs the non-batch "
                         f"dimensions known, got shape {inputs.shape}")
    return int(np.prod(inner))


@add_arg_scope
def max_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC",
               outputs_collections=None, scope=None):
    """Max pooling, contrib's defaults (stride 2, VALID): ``max_pool2d(net, [2, 2])``."""
    return _pool(conv_ops.max_pool, "MaxPool2D", inputs, kernel_size, stride, padding,
                 data_format, outputs_collections, scope)


@add_arg_scope
def avg_pool2d(inputs, kernel_size, stride=2, padding="VALID", data_format="NHWC",
               outputs_collections=None, scope=None):
    """Average pooling, contrib's defaults (stride 2, VALID)."""
    return _pool(conv_ops.avg_pool, "AvgPool2D", inputs, kernel_size, stride, padding,
                 data_format, outputs_collections, scope)


def _pool(pool, default_name, inputs, kernel_size, stride, padding, data_format,
          outputs_collections, scope):
    if data_format not in ("NHWC", "NCHW"):
        raise ValueError("data_format has to be either NCHW or NHWC.")
    kernel_h, kernel_w = pair(kernel_size, "kernel_size")
    stride_h, stride_w = pair(stride, "stride")
    with core.get_default_graph().name_scope(scope or default_name):
        outputs = pool(inputs, [1, kernel_h, kernel_w, 1], [1, stride_h, stride_w, 1],
                       padding.upper(), data_format)
    return _finished(outputs, None, None, None, outputs_collections)


@add_arg_scope
def dropout(inputs, keep_prob=0.5, noise_shape=None, is_training=True,
            outputs_collections=None, scope=None, seed=None):
    """Dropout keeping ``keep_prob`` of the values when ``is_training`` (a bool
    or a bool tensor), identity otherwise."""
    with core.get_default_graph().name_scope(scope or "Dropout"):
        outputs = core_layers.Dropout(1.0 - keep_prob, noise_shape, seed)(
            inputs, training=is_training)
    return _finished(outputs, None, None, None, outputs_collections)


__getattr__ = _missing.module_getattr("tf.contrib.layers")
