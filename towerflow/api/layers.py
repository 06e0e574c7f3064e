"""``tf.layers``: TF 1.15's layer classes (``Dense``, ``Conv2D``, ...; see
base_layer.py: variables made on the first call, reused on later ones) and
the functions over them, which build a layer and call it once, making its
variables (with sensible initializers) under a unique variable scope::

    hidden = tf.layers.dense(x, 512, activation=tf.nn.relu)       # dense/kernel, dense/bias
    y = tf.layers.conv2d(images, 32, 3, padding='same')           # conv2d/kernel, ...
    y = tf.layers.batch_normalization(y, training=is_training)   # updates in UPDATE_OPS
    shared = tf.layers.Dense(10)                                  # one dense_1/kernel
    a, b = shared(x1), shared(x2)                                 # for both calls

Under a mixed-precision policy (towerflow.mixed_precision) a layer casts its
input to the compute dtype (float16 or bfloat16) and keeps its variables in float32,
reading them through casts; batch-norm statistics stay float32.
"""

import numpy as np

from .. import dtypes
from ..graph import core
from ..graph.core import GraphKeys, Tensor
from ..ops import array_ops, init_ops, math_ops, nn_ops, norm_ops, sync_norm_ops
from .base_layer import Layer
from .conv_layers import (
    AveragePooling1D,
    AveragePooling2D,
    Conv1D,
    Conv2D,
    Conv2DTranspose,
    MaxPooling1D,
    MaxPooling2D,
    SeparableConv2D,
    known,
)

__all__ = [
    "AveragePooling1D",
    "AveragePooling2D",
    "BatchNormalization",
    "Conv1D",
    "Conv2D",
    "Conv2DTranspose",
    "Dense",
    "Dropout",
    "Flatten",
    "Layer",
    "MaxPooling1D",
    "MaxPooling2D",
    "SeparableConv2D",
    "average_pooling1d",
    "average_pooling2d",
    "batch_normalization",
    "conv1d",
    "conv2d",
    "conv2d_transpose",
    "dense",
    "dropout",
    "flatten",
    "max_pooling1d",
    "max_pooling2d",
    "separable_conv2d",
]


# -- the classes -----------------------------------------------------------------------


class Dense(Layer):
    """``activation(inputs @ kernel + bias)`` over the last axis; variables
    ``kernel`` [in, units] and ``bias`` [units]::

        layer = tf.layers.Dense(10, activation=tf.nn.relu)
        y1, y2 = layer(x1), layer(x2)      # shared dense/kernel, dense/bias
    """

    _base_name = "dense"

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer=None,
                 bias_initializer=None, kernel_regularizer=None, bias_regularizer=None,
                 trainable=True, name=None, **kwargs):
        super().__init__(trainable=trainable, name=name, **kwargs)
        self.units, self.activation, self.use_bias = int(units), activation, use_bias
        self.kernel_initializer = kernel_initializer or init_ops.glorot_uniform_initializer()
        self.bias_initializer, self.kernel_regularizer = bias_initializer, kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel = self.bias = None

    def build(self, input_shape):
        in_units = known(input_shape.dims[-1] if input_shape.dims else None,
                         "dense input size")
        self.kernel = self.add_weight("kernel", [in_units, self.units], self.variable_dtype,
                                      self.kernel_initializer, self.kernel_regularizer)
        if self.use_bias:
            self.bias = self.add_weight("bias", [self.units], self.variable_dtype,
                                        self.bias_initializer, self.bias_regularizer)

    def call(self, inputs):
        x = math_ops.cast_if_needed(inputs, self.compute_dtype)
        in_units = self.kernel.shape.dims[0]
        # Over rank > 2 TF takes a tensordot on the last axis: one 2-D GEMM on
        # the flattened rows where the leading sizes are known, else a
        # broadcast matmul (the leading sizes known only at run time).
        inner_known = None not in x.shape.dims[1:-1]
        flat = x if x.shape.ndims == 2 or not inner_known else \
            array_ops.reshape(x, [-1, in_units])
        y = math_ops.matmul(flat, math_ops.cast_if_needed(self.kernel, self.compute_dtype))
        if self.bias is not None:
            y = nn_ops.bias_add(y, math_ops.cast_if_needed(self.bias, self.compute_dtype))
        if x.shape.ndims != 2 and inner_known:
            y = array_ops.reshape(y, [-1] + list(x.shape.dims[1:-1]) + [self.units])
        return self.activation(y) if self.activation is not None else y


class Flatten(Layer):
    """[batch, d1, d2, ...] -> [batch, d1*d2*...]: ``tf.layers.Flatten()(images)``.
    Non-batch dimensions known only at run time give ``[batch, ?]``, as in TF."""

    _base_name = "flatten"

    def call(self, inputs):
        rest = inputs.shape.dims[1:]
        if None not in rest:
            return array_ops.reshape(inputs, [-1, int(np.prod(rest))])
        outputs = array_ops.reshape(inputs, [array_ops.shape(inputs)[0], -1])
        outputs.set_shape([inputs.shape.dims[0], None])
        return outputs


class Dropout(Layer):
    """Dropout when called with ``training`` (a Python bool or a bool tensor)
    true, identity otherwise: ``tf.layers.Dropout(0.5)(x, training=is_training)``."""

    _base_name = "dropout"

    def __init__(self, rate=0.5, noise_shape=None, seed=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.rate, self.noise_shape, self.seed = rate, noise_shape, seed

    def call(self, inputs, training=False):
        if training is False or (not isinstance(self.rate, Tensor) and self.rate == 0):
            return inputs
        dropped = nn_ops.dropout(inputs, rate=self.rate, noise_shape=self.noise_shape,
                                 seed=self.seed)
        if training is True:
            return dropped
        return inputs + math_ops.cast(training, inputs.dtype) * (dropped - inputs)


class BatchNormalization(Layer):
    """Fused batch normalisation over the last axis with moving statistics.

    Called with ``training`` True (or a bool tensor that is true) it
    normalises with the batch statistics and adds the moving-average updates
    to the ``tf.GraphKeys.UPDATE_OPS`` collection (and ``layer.updates``); run
    them with the train op::

        y = tf.layers.BatchNormalization()(x, training=True)
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = optimizer.minimize(loss)

    ``synchronized=True`` (Keras's argument since TF 2.12, not TF 1.15's): in
    the towers of a ``tf.parallel.DataParallel`` step, training normalises
    with the statistics of the global batch across every tower and MPI rank
    (one all-reduce per layer; towerflow/ops/sync_norm_ops.py); on one device
    it is a plain batch norm.
    """

    _base_name = "batch_normalization"

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer=None, gamma_initializer=None,
                 moving_mean_initializer=None, moving_variance_initializer=None,
                 beta_regularizer=None, gamma_regularizer=None, trainable=True, name=None,
                 synchronized=False, **kwargs):
        super().__init__(trainable=trainable, name=name, **kwargs)
        self.axis, self.momentum, self.epsilon = axis, momentum, epsilon
        self.synchronized = _checked_flag(synchronized, "synchronized")
        self.center, self.scale = center, scale
        self.initializers = (gamma_initializer or init_ops.Ones(), beta_initializer,
                             moving_mean_initializer,
                             moving_variance_initializer or init_ops.Ones())
        self.regularizers = (gamma_regularizer, beta_regularizer)
        self.updates = []

    def build(self, input_shape):
        if self.axis not in (-1, (input_shape.ndims or 0) - 1):
            raise ValueError(f"batch_normalization normalises the last (channel) axis "
                             f"only, got axis={self.axis}")
        channels = known(input_shape.dims[-1] if input_shape.dims else None, "channel count")
        # float16 or bfloat16 under a mixed policy; the statistics stay float32
        low = self.compute_dtype in (dtypes.float16, dtypes.bfloat16)
        stats_dtype = self.stats_dtype = dtypes.float32 if low else self.compute_dtype
        gamma_init, beta_init, mean_init, var_init = self.initializers
        self.gamma = self.add_weight("gamma", [channels], stats_dtype, gamma_init,
                                     self.regularizers[0], trainable=self.scale)
        self.beta = self.add_weight("beta", [channels], stats_dtype, beta_init,
                                    self.regularizers[1], trainable=self.center)
        self.moving_mean = self.add_weight("moving_mean", [channels], stats_dtype,
                                           mean_init, trainable=False)
        self.moving_variance = self.add_weight("moving_variance", [channels], stats_dtype,
                                               var_init, trainable=False)

    def call(self, inputs, training=False):
        x = math_ops.cast_if_needed(inputs, self.compute_dtype)
        synchronized = self.synchronized or sync_norm_ops.every_batch_norm_synchronized()
        # inference (training=False) needs no statistics, so nothing to synchronize
        if synchronized and training is not False:
            y, batch_mean, batch_var = sync_norm_ops.synchronized_batch_norm(
                x, self.gamma, self.beta, self.moving_mean, self.moving_variance,
                self.epsilon, training, self.stats_dtype)
        else:
            y, batch_mean, batch_var = norm_ops.fused_batch_norm(
                x, self.gamma, self.beta, self.moving_mean, self.moving_variance,
                self.epsilon, is_training=training)
        if training is not False:
            self._add_updates(training, batch_mean, batch_var)
        return y

    def _add_updates(self, training, batch_mean, batch_var):
        decay = 1.0 - self.momentum
        if isinstance(training, Tensor):
            decay = math_ops.cast(training, self.stats_dtype) * decay
        graph = core.get_default_graph()
        for variable, batch_value in ((self.moving_mean, batch_mean),
                                      (self.moving_variance, batch_var)):
            update = variable.assign_sub((variable - batch_value) * decay)
            graph.add_to_collection(GraphKeys.UPDATE_OPS, update.op)
            self.updates.append(update.op)


# -- the functions: one layer, built and called once -----------------------------------


def _functional(layer_class, inputs, *args, name=None, reuse=None, call_args=None,
                **kwargs):
    """TF 1.15's functional layers: a named one uses the variable scope ``name``
    (so ``reuse=True``, or a reusing outer scope, shares its variables); an
    unnamed one a new unique scope (``dense``, ``dense_1``, ...)."""
    layer = layer_class(*args, name=name, _scope=name, _reuse=reuse, **kwargs)
    return layer(inputs, **(call_args or {}))


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None,
          bias_initializer=None, kernel_regularizer=None, bias_regularizer=None,
          trainable=True, name=None, reuse=None):
    """``tf.layers.Dense(...)(inputs)``; variables ``<name>/kernel`` and
    ``<name>/bias``, shared under ``reuse=True``::

        y = tf.layers.dense(x, 10, name='fc')
        y2 = tf.layers.dense(x2, 10, name='fc', reuse=True)    # same fc/kernel
    """
    return _functional(Dense, inputs, units, activation, use_bias, kernel_initializer,
                       bias_initializer, kernel_regularizer, bias_regularizer, trainable,
                       name=name, reuse=reuse)


def conv1d(inputs, filters, kernel_size, strides=1, padding="valid",
           data_format="channels_last", dilation_rate=1, activation=None, use_bias=True,
           kernel_initializer=None, bias_initializer=None, kernel_regularizer=None,
           bias_regularizer=None, trainable=True, name=None, reuse=None):
    """A 1-D convolution layer over [batch, width, channels]: ``tf.layers.conv1d(x,
    32, 5, padding='same')``; variables ``conv1d/kernel`` [k, in, filters] and
    ``conv1d/bias`` (scoped as in ``dense``)."""
    return _functional(Conv1D, inputs, filters, kernel_size, strides, padding, data_format,
                       dilation_rate, activation, use_bias, kernel_initializer,
                       bias_initializer, kernel_regularizer, bias_regularizer, trainable,
                       name=name, reuse=reuse)


def max_pooling1d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    """``tf.layers.max_pooling1d(x, 2, 2)`` over [batch, width, channels]."""
    return _functional(MaxPooling1D, inputs, pool_size, strides, padding, data_format,
                       name=name)


def average_pooling1d(inputs, pool_size, strides, padding="valid",
                      data_format="channels_last", name=None):
    """``tf.layers.average_pooling1d(x, 2, 2)`` over [batch, width, channels]."""
    return _functional(AveragePooling1D, inputs, pool_size, strides, padding, data_format,
                       name=name)


def conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid",
           data_format="channels_last", activation=None, use_bias=True,
           kernel_initializer=None, bias_initializer=None, kernel_regularizer=None,
           bias_regularizer=None, trainable=True, name=None, reuse=None):
    """A 2-D convolution layer (NHWC): ``tf.layers.conv2d(x, 32, 3, padding='same')``;
    variables ``conv2d/kernel`` and ``conv2d/bias`` (scoped as in ``dense``)."""
    return _functional(Conv2D, inputs, filters, kernel_size, strides, padding, data_format,
                       activation, use_bias, kernel_initializer, bias_initializer,
                       kernel_regularizer, bias_regularizer, trainable, name=name,
                       reuse=reuse)


def conv2d_transpose(inputs, filters, kernel_size, strides=(1, 1), padding="valid",
                     data_format="channels_last", activation=None, use_bias=True,
                     kernel_initializer=None, bias_initializer=None, kernel_regularizer=None,
                     bias_regularizer=None, trainable=True, name=None, reuse=None):
    """A transposed 2-D convolution layer: ``tf.layers.conv2d_transpose(x, 16, 3,
    strides=2, padding='same')`` doubles height and width; variables
    ``conv2d_transpose/kernel`` [kh, kw, filters, in_channels] and ``.../bias``."""
    return _functional(Conv2DTranspose, inputs, filters, kernel_size, strides, padding,
                       data_format, activation, use_bias, kernel_initializer,
                       bias_initializer, kernel_regularizer, bias_regularizer, trainable,
                       name=name, reuse=reuse)


def separable_conv2d(inputs, filters, kernel_size, strides=(1, 1), padding="valid",
                     data_format="channels_last", dilation_rate=(1, 1), depth_multiplier=1,
                     activation=None, use_bias=True, depthwise_initializer=None,
                     pointwise_initializer=None, bias_initializer=None,
                     depthwise_regularizer=None, pointwise_regularizer=None,
                     bias_regularizer=None, trainable=True, name=None, reuse=None):
    """A depthwise then 1x1 convolution layer: ``tf.layers.separable_conv2d(x, 64,
    3, padding='same')``; variables ``separable_conv2d/depthwise_kernel``,
    ``.../pointwise_kernel`` and ``.../bias``."""
    return _functional(SeparableConv2D, inputs, filters, kernel_size, strides, padding,
                       data_format, dilation_rate, depth_multiplier, activation, use_bias,
                       depthwise_initializer, pointwise_initializer, bias_initializer,
                       depthwise_regularizer, pointwise_regularizer, bias_regularizer,
                       trainable, name=name, reuse=reuse)


def max_pooling2d(inputs, pool_size, strides, padding="valid", data_format="channels_last",
                  name=None):
    """``tf.layers.max_pooling2d(x, 2, 2)``."""
    return _functional(MaxPooling2D, inputs, pool_size, strides, padding, data_format,
                       name=name)


def average_pooling2d(inputs, pool_size, strides, padding="valid",
                      data_format="channels_last", name=None):
    """``tf.layers.average_pooling2d(x, 2, 2)``."""
    return _functional(AveragePooling2D, inputs, pool_size, strides, padding, data_format,
                       name=name)


def flatten(inputs, name=None):
    """[batch, d1, d2, ...] -> [batch, d1*d2*...]: ``tf.layers.flatten(images)``."""
    return _functional(Flatten, inputs, name=name)


def dropout(inputs, rate=0.5, noise_shape=None, seed=None, training=False, name=None):
    """Dropout when ``training`` (a Python bool or a bool tensor), identity
    otherwise: ``tf.layers.dropout(x, 0.5, training=is_training)``."""
    return _functional(Dropout, inputs, rate, noise_shape, seed, name=name,
                       call_args={"training": training})


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=1e-3, center=True,
                        scale=True, beta_initializer=None, gamma_initializer=None,
                        moving_mean_initializer=None, moving_variance_initializer=None,
                        beta_regularizer=None, gamma_regularizer=None,
                        training=False, trainable=True, name=None, reuse=None,
                        synchronized=False):
    """``tf.layers.BatchNormalization(...)(inputs, training=training)``: in
    training the moving-average updates go to ``tf.GraphKeys.UPDATE_OPS``;
    ``synchronized=True``: the global batch's statistics in the towers of a
    ``tf.parallel.DataParallel`` step (see BatchNormalization)::

        y = tf.layers.batch_normalization(x, training=is_training)
        y = tf.layers.batch_normalization(x, training=True, synchronized=True)
    """
    return _functional(BatchNormalization, inputs, axis, momentum, epsilon, center, scale,
                       beta_initializer, gamma_initializer, moving_mean_initializer,
                       moving_variance_initializer, beta_regularizer, gamma_regularizer,
                       trainable, name=name, reuse=reuse, call_args={"training": training},
                       synchronized=synchronized)


def _checked_flag(value, what):
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be a Python bool, got {value!r}")
    return value

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.layers")
