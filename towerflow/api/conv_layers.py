"""The convolution and pooling layer classes of ``tf.layers`` (NHWC only),
with TF 1.15's arguments and variable names::

    conv = tf.layers.Conv2D(32, 3, padding='same', activation=tf.nn.relu)
    up = tf.layers.Conv2DTranspose(1, 3, strides=2, padding='same')   # 2x the size
    y = up(conv(images))              # conv2d/kernel, conv2d_transpose/kernel, ...
"""

from ..ops import conv1d_ops, conv_ops, depthwise_conv_ops, init_ops, math_ops, nn_ops
from .base_layer import Layer


def known(dim, what):
    if dim is None:
        raise ValueError(f"{what} must be known when the layer is built")
    return dim


def pair(value, what):
    """An int or a pair as (h, w): ``kernel_size=3`` -> (3, 3)."""
    pair_ = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair_) != 2:
        raise ValueError(f"{what} must be an int or a pair, got {value!r}")
    return int(pair_[0]), int(pair_[1])


def _check_channels_last(data_format, what):
    if data_format != "channels_last":
        raise ValueError(f"{what} supports channels_last only, got {data_format!r}")


def _padding(padding, what):
    if not isinstance(padding, str) or padding.lower() not in ("same", "valid"):
        raise ValueError(f"{what}: padding must be 'same' or 'valid', got {padding!r}")
    return padding.upper()


class _Conv(Layer):
    """What the convolution layers share: kernel and bias, then activation."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid",
                 data_format="channels_last", activation=None, use_bias=True,
                 kernel_initializer=None, bias_initializer=None, kernel_regularizer=None,
                 bias_regularizer=None, trainable=True, name=None, **kwargs):
        super().__init__(trainable=trainable, name=name, **kwargs)
        _check_channels_last(data_format, type(self).__name__)
        self.filters = int(filters)
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.strides = pair(strides, "strides")
        self.padding = _padding(padding, type(self).__name__)
        self.activation, self.use_bias = activation, use_bias
        self.kernel_initializer = kernel_initializer or init_ops.glorot_uniform_initializer()
        self.bias_initializer, self.kernel_regularizer = bias_initializer, kernel_regularizer
        self.bias_regularizer = bias_regularizer
        self.kernel = self.bias = None

    def _in_channels(self, input_shape):
        dims = input_shape.dims if input_shape is not None else None
        return known(dims[-1] if dims else None, f"{self._base_name} input channels")

    def _add_bias(self):
        if self.use_bias:
            self.bias = self.add_weight("bias", [self.filters], self.variable_dtype,
                                        self.bias_initializer, self.bias_regularizer)

    def _finish(self, y):
        if self.bias is not None:
            y = nn_ops.bias_add(y, math_ops.cast_if_needed(self.bias, y.dtype))
        return self.activation(y) if self.activation is not None else y


class Conv2D(_Conv):
    """2-D convolution: kernel [kh, kw, in_channels, filters]::

        y = tf.layers.Conv2D(32, 3, strides=2, padding='same')(images)
    """

    _base_name = "conv2d"

    def build(self, input_shape):
        shape = [*self.kernel_size, self._in_channels(input_shape), self.filters]
        self.kernel = self.add_weight("kernel", shape, self.variable_dtype,
                                      self.kernel_initializer, self.kernel_regularizer)
        self._add_bias()

    def call(self, inputs):
        x = math_ops.cast_if_needed(inputs, self.compute_dtype)
        y = conv_ops.conv2d(x, math_ops.cast_if_needed(self.kernel, self.compute_dtype),
                            [1, *self.strides, 1], self.padding)
        return self._finish(y)


class Conv1D(_Conv):
    """1-D convolution over [batch, width, channels]: kernel [k, in_channels,
    filters] (``conv1d/kernel``), run as ``tf.nn.conv1d``::

        y = tf.layers.Conv1D(32, 5, padding='same', activation=tf.nn.leaky_relu)(seqs)
    """

    _base_name = "conv1d"

    def __init__(self, filters, kernel_size, strides=1, padding="valid",
                 data_format="channels_last", dilation_rate=1, activation=None,
                 use_bias=True, kernel_initializer=None, bias_initializer=None,
                 kernel_regularizer=None, bias_regularizer=None, trainable=True, name=None,
                 **kwargs):
        super().__init__(filters, 1, 1, padding, data_format, activation, use_bias,
                         kernel_initializer, bias_initializer, kernel_regularizer,
                         bias_regularizer, trainable, name, **kwargs)
        self.kernel_size = (single(kernel_size, "kernel_size"),)
        self.strides = (single(strides, "strides"),)
        self.dilation_rate = single(dilation_rate, "dilation_rate")
        if self.dilation_rate != 1 and self.strides != (1,):
            raise ValueError("strides > 1 not supported in conjunction with dilation_rate > 1")

    def build(self, input_shape):
        shape = [*self.kernel_size, self._in_channels(input_shape), self.filters]
        self.kernel = self.add_weight("kernel", shape, self.variable_dtype,
                                      self.kernel_initializer, self.kernel_regularizer)
        self._add_bias()

    def call(self, inputs):
        x = math_ops.cast_if_needed(inputs, self.compute_dtype)
        y = conv1d_ops.conv1d(x, math_ops.cast_if_needed(self.kernel, self.compute_dtype),
                              self.strides[0], self.padding, dilations=self.dilation_rate)
        return self._finish(y)


def single(value, what):
    """An int or a 1-tuple as an int: ``kernel_size=(3,)`` -> 3."""
    values = (value,) if isinstance(value, int) else tuple(value)
    if len(values) != 1:
        raise ValueError(f"The `{what}` argument must be a tuple of 1 integers. "
                         f"Received: {value!r}")
    return int(values[0])


def transposed_size(size, window, stride, padding):
    """TF's deconv_output_length: the output length of a transposed convolution."""
    if padding == "VALID":
        return size * stride + max(window - stride, 0)
    return size * stride


class Conv2DTranspose(_Conv):
    """The transpose of Conv2D (upsampling for strides > 1): kernel [kh, kw,
    filters, in_channels]; an input of size n gives n * stride ('same') or
    n * stride + max(kernel - stride, 0) ('valid')::

        y = tf.layers.Conv2DTranspose(16, 3, strides=2, padding='same')(x)  # 7x7 -> 14x14
    """

    _base_name = "conv2d_transpose"

    def build(self, input_shape):
        shape = [*self.kernel_size, self.filters, self._in_channels(input_shape)]
        self.kernel = self.add_weight("kernel", shape, self.variable_dtype,
                                      self.kernel_initializer, self.kernel_regularizer)
        self._add_bias()

    def call(self, inputs):
        x = math_ops.cast_if_needed(inputs, self.compute_dtype)
        dims = x.shape.dims or [None] * 4
        sizes = [transposed_size(known(dims[axis], "Conv2DTranspose input height and width"),
                                 self.kernel_size[axis - 1], self.strides[axis - 1],
                                 self.padding) for axis in (1, 2)]
        # NOTE: a None batch is the batch of x when the graph runs (conv_ops).
        y = conv_ops.conv2d_transpose(
            x, math_ops.cast_if_needed(self.kernel, self.compute_dtype),
            [dims[0], *sizes, self.filters], [1, *self.strides, 1], self.padding)
        return self._finish(y)


class SeparableConv2D(_Conv):
    """A depthwise convolution (``depth_multiplier`` filters per input channel)
    then a 1x1 convolution to ``filters`` channels; variables depthwise_kernel,
    pointwise_kernel and bias::

        y = tf.layers.SeparableConv2D(64, 3, padding='same')(x)
    """

    _base_name = "separable_conv2d"

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid",
                 data_format="channels_last", dilation_rate=(1, 1), depth_multiplier=1,
                 activation=None, use_bias=True, depthwise_initializer=None,
                 pointwise_initializer=None, bias_initializer=None,
                 depthwise_regularizer=None, pointwise_regularizer=None,
                 bias_regularizer=None, trainable=True, name=None, **kwargs):
        super().__init__(filters, kernel_size, strides, padding, data_format, activation,
                         use_bias, depthwise_initializer, bias_initializer,
                         depthwise_regularizer, bias_regularizer, trainable, name, **kwargs)
        self.dilation_rate = pair(dilation_rate, "dilation_rate")
        self.depth_multiplier = int(depth_multiplier)
        self.pointwise_initializer = pointwise_initializer or \
            init_ops.glorot_uniform_initializer()
        self.pointwise_regularizer = pointwise_regularizer
        self.depthwise_kernel = self.pointwise_kernel = None

    def build(self, input_shape):
        channels = self._in_channels(input_shape)
        self.depthwise_kernel = self.add_weight(
            "depthwise_kernel", [*self.kernel_size, channels, self.depth_multiplier],
            self.variable_dtype, self.kernel_initializer, self.kernel_regularizer)
        self.pointwise_kernel = self.add_weight(
            "pointwise_kernel", [1, 1, channels * self.depth_multiplier, self.filters],
            self.variable_dtype, self.pointwise_initializer, self.pointwise_regularizer)
        self._add_bias()

    def call(self, inputs):
        x = math_ops.cast_if_needed(inputs, self.compute_dtype)
        depthwise, pointwise = (math_ops.cast_if_needed(kernel, self.compute_dtype)
                                for kernel in (self.depthwise_kernel, self.pointwise_kernel))
        y = depthwise_conv_ops.separable_conv2d(x, depthwise, pointwise, [1, *self.strides, 1],
                                                self.padding, rate=self.dilation_rate)
        return self._finish(y)


class _Pooling2D(Layer):
    def __init__(self, pool_size, strides, padding="valid", data_format="channels_last",
                 name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        _check_channels_last(data_format, type(self).__name__)
        self.pool_size, self.strides = pair(pool_size, "pool_size"), pair(strides, "strides")
        self.padding = _padding(padding, type(self).__name__)

    def call(self, inputs):
        return self._pool(inputs, [1, *self.pool_size, 1], [1, *self.strides, 1],
                          self.padding)


class MaxPooling2D(_Pooling2D):
    """``tf.layers.MaxPooling2D(2, 2)(x)``: the max over 2x2 windows, stride 2."""

    _base_name = "max_pooling2d"
    _pool = staticmethod(conv_ops.max_pool)


class AveragePooling2D(_Pooling2D):
    """``tf.layers.AveragePooling2D(2, 2)(x)``: the mean over 2x2 windows, stride 2."""

    _base_name = "average_pooling2d"
    _pool = staticmethod(conv_ops.avg_pool)


class _Pooling1D(Layer):
    """Pooling over the width of [batch, width, channels] (``channels_first``:
    [batch, channels, width]), as TF 1.15's Pooling1D."""

    def __init__(self, pool_size, strides, padding="valid", data_format="channels_last",
                 name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError("The `data_format` argument must be one of \"channels_first\", "
                             f"\"channels_last\". Received: {data_format}")
        self.channels_first = data_format == "channels_first"
        self.pool_size, self.strides = single(pool_size, "pool_size"), single(strides,
                                                                               "strides")
        self.padding = _padding(padding, type(self).__name__)

    def call(self, inputs):
        return conv1d_ops.pool1d(self._pool, inputs, self.pool_size, self.strides,
                                 self.padding, self.channels_first)


class MaxPooling1D(_Pooling1D):
    """``tf.layers.MaxPooling1D(2, 2)(x)``: the max over windows of 2, stride 2."""

    _base_name = "max_pooling1d"
    _pool = staticmethod(conv_ops.max_pool)


class AveragePooling1D(_Pooling1D):
    """``tf.layers.AveragePooling1D(2, 2)(x)``: the mean over windows of 2, stride 2."""

    _base_name = "average_pooling1d"
    _pool = staticmethod(conv_ops.avg_pool)
