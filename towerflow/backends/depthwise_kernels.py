"""Depthwise convolution (tf.nn.depthwise_conv2d) and its two gradients,
written once against ``xp``. Simple rather than fast: a loop over the
filter's KH*KW taps, each one strided slice of the input (clipped to its
real, non-padding cells, as window_geometry's taps are) times the tap's
[C, M] weights; no im2col, no GEMM, no Winograd.

x is [N, H, W, C], the filter [KH, KW, C, M], the output [N, OH, OW, C*M]
with channel c*M + m from input channel c and multiplier m (TF's order)::

    kernel = build_depthwise_kernels(np)["DepthwiseConv2dNative"](ctx)
    y = kernel(x, w)      # ctx.attrs: strides (sh, sw), padding, dilations (dh, dw)
"""

import functools

from .. import errors
from .window_geometry import _add_into, _axis_geometry, _axis_tap


def build_depthwise_kernels(xp):
    return {"DepthwiseConv2dNative": functools.partial(_forward, xp),
            "DepthwiseConv2dNativeBackpropInput": functools.partial(_backprop_input, xp),
            "DepthwiseConv2dNativeBackpropFilter": functools.partial(_backprop_filter, xp)}


@functools.lru_cache(maxsize=256)
def depthwise_taps(height, width, window, strides, dilations, padding):
    """(out_h, out_w, taps): each tap ``(row, col, out_index, in_index)`` with
    the [N, OH, OW] outputs whose dilated window cell (row, col) is a real
    input cell, and those cells in [N, H, W] (TF's SAME/VALID rule on the
    dilated window, (K - 1) * rate + 1 wide)."""
    axes = [_axis_taps(size, k, s, d, padding) for size, k, s, d in
            zip((height, width), window, strides, dilations)]
    (out_h, rows), (out_w, cols) = axes
    taps = tuple((i, j, (slice(None), row_out, col_out), (slice(None), row_in, col_in))
                 for i, row_out, row_in in rows for j, col_out, col_in in cols)
    return out_h, out_w, taps


def _axis_taps(size, window, stride, dilation, padding):
    out, pad_before, _ = _axis_geometry(size, (window - 1) * dilation + 1, stride, padding)
    taps = []
    for index in range(window):
        out_slice, in_slice, count = _axis_tap(index * dilation, size, stride, pad_before, out)
        if count:
            taps.append((index, out_slice, in_slice))
    return out, taps


def _taps_of(ctx):
    attrs = ctx.attrs

    def taps_of(x_shape, w_shape):
        return depthwise_taps(x_shape[1], x_shape[2], tuple(w_shape[:2]), attrs["strides"],
                              attrs["dilations"], attrs["padding"])
    return taps_of


def _forward(xp, ctx):
    taps_of = _taps_of(ctx)

    def depthwise(x, w):
        n, _, _, channels = x.shape
        if w.shape[2] != channels:     # shapes the graph left open (depthwise_conv_op.cc)
            raise errors.InvalidArgumentError(
                None, None, f"input and filter must have the same depth: {channels} vs "
                f"{w.shape[2]}")
        out_h, out_w, taps = taps_of(x.shape, w.shape)
        y = xp.zeros((n, out_h, out_w, channels, w.shape[3]), xp.result_type(x, w))
        for row, col, out_index, in_index in taps:
            _add_into(y[out_index], x[in_index][..., None] * w[row, col])
        return y.reshape(n, out_h, out_w, channels * w.shape[3])
    return depthwise


def _backprop_input(xp, ctx):
    taps_of = _taps_of(ctx)

    def grad_input(x, w, grad):
        """x gives its shape only (the op's shape_only_inputs)."""
        out_h, out_w, taps = taps_of(x.shape, w.shape)
        grad = grad.reshape(grad.shape[0], out_h, out_w, w.shape[2], w.shape[3])
        dx = xp.zeros(x.shape, grad.dtype)
        for row, col, out_index, in_index in taps:
            _add_into(dx[in_index], (grad[out_index] * w[row, col]).sum(axis=-1))
        return dx
    return grad_input


def _backprop_filter(xp, ctx):
    taps_of = _taps_of(ctx)

    def grad_filter(x, w, grad):
        """w gives its shape only (the op's shape_only_inputs)."""
        out_h, out_w, taps = taps_of(x.shape, w.shape)
        grad = grad.reshape(grad.shape[0], out_h, out_w, *w.shape[2:])
        dw = xp.zeros(w.shape, grad.dtype)
        for row, col, out_index, in_index in taps:
            dw[row, col] = (x[in_index][..., None] * grad[out_index]).sum(axis=(0, 1, 2))
        return dw
    return grad_filter
