"""Neural-network kernels (convolution, pooling, softmax cross-entropy, fused
batch norm), written once against an array module ``xp`` (NumPy or CuPy).

Tensors are channels-last (NHWC), filters HWIO. The table follows the maker
protocol of :mod:`.kernels`: ``table[name](ctx)`` runs once when a plan
compiles and returns the function that runs on every step::

    table = build_nn_kernels(np)
    conv = table["Conv2D"](ctx)        # ctx.attrs = {"strides": (1, 1), "padding": "SAME"}
    y, patches = conv(x, w)            # patches: the im2col matrix the filter gradient reuses

Window ops loop over the KH*KW kernel taps, never over pixels. Pooling and
col2im read or write each tap as one strided slice of the input clipped to
its real (non-padding) cells; im2col copies one as_strided window view.
"""

import functools
from typing import NamedTuple

import numpy as np

from .. import errors

PADDINGS = ("SAME", "VALID")


def build_nn_kernels(xp):
    """The neural-network kernel table for array module ``xp``."""
    table = {}
    table.update(_conv_kernels(xp))
    table.update(_pool_kernels(xp))
    table.update(_cross_entropy_kernels(xp))
    table.update(_batch_norm_kernels(xp))
    return table


# -- window geometry -------------------------------------------------------------------


class _Tap(NamedTuple):
    """One kernel offset: the outputs whose window cell (row, col) is a real
    input cell, and those input cells (same count, strided)."""

    row: int
    col: int
    out_index: tuple      # (:, out rows, out cols) into [N, OH, OW, C]
    in_index: tuple       # (:, in rows, in cols) into [N, H, W, C]
    full: bool            # covers every output (no padding on this tap)
    whole: bool           # reads every input cell (stride 1, output as big as input)


class _Layout(NamedTuple):
    key: tuple            # the arguments of _layout (slices are unhashable before 3.12)
    window: tuple         # (KH, KW)
    strides: tuple        # (SH, SW)
    out_h: int
    out_w: int
    pads: tuple           # (top, bottom, left, right)
    taps: tuple           # non-empty taps, row-major over the window
    tiles: bool           # windows tile the input: ksize == strides, no padding
    inv_counts: object    # [OH, OW, 1] float64: 1 / real cells per window


def _axis_geometry(size, window, stride, padding):
    """(out, pad_before, pad_after) along one axis, by TensorFlow's rules."""
    if padding == "VALID":
        return max((size - window) // stride + 1, 0), 0, 0
    out = -(-size // stride)
    pad_total = max((out - 1) * stride + window - size, 0)
    return out, pad_total // 2, pad_total - pad_total // 2


def _axis_tap(offset, size, stride, pad_before, out):
    """(out slice, in slice, count) of the outputs whose cell ``offset`` is real."""
    first = offset - pad_before                 # input index read by output 0
    low = max(0, -(first // stride))            # ceil(-first / stride)
    high = min(out, max((size - 1 - first) // stride + 1, 0))
    if high <= low:
        return slice(0, 0), slice(0, 0), 0
    start = first + low * stride
    return slice(low, high), slice(start, start + (high - low - 1) * stride + 1, stride), \
        high - low


@functools.lru_cache(maxsize=1024)
def _layout(height, width, kh, kw, sh, sw, padding):
    """Where every tap of a (kh, kw) window with strides (sh, sw) reads."""
    out_h, top, bottom = _axis_geometry(height, kh, sh, padding)
    out_w, left, right = _axis_geometry(width, kw, sw, padding)
    rows = [_axis_tap(i, height, sh, top, out_h) for i in range(kh)]
    cols = [_axis_tap(j, width, sw, left, out_w) for j in range(kw)]
    taps = tuple(
        _Tap(i, j, (slice(None), row_out, col_out), (slice(None), row_in, col_in),
             row_n == out_h and col_n == out_w,
             (row_in, col_in) == (slice(0, height, 1), slice(0, width, 1)))
        for i, (row_out, row_in, row_n) in enumerate(rows)
        for j, (col_out, col_in, col_n) in enumerate(cols) if row_n and col_n)
    counts_h, counts_w = np.zeros(out_h), np.zeros(out_w)
    for row_out, _, _ in rows:
        counts_h[row_out] += 1
    for col_out, _, _ in cols:
        counts_w[col_out] += 1
    inv_counts = 1.0 / np.multiply.outer(counts_h, counts_w)[:, :, None]   # never 0 cells
    tiles = (kh, kw) == (sh, sw) and (top, bottom, left, right) == (0, 0, 0, 0)
    return _Layout((height, width, kh, kw, sh, sw, padding), (kh, kw), (sh, sw),
                   out_h, out_w, (top, bottom, left, right), taps, tiles, inv_counts)


def _layout_maker(attrs):
    """``layout_of(x_shape, (kh, kw))`` for an op's strides and padding; the
    window defaults to the op's ksize (pooling; conv passes its filter's)."""
    (sh, sw), padding, ksize = attrs["strides"], attrs["padding"], attrs.get("ksize")
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")

    def layout_of(x_shape, window=ksize):
        return _layout(x_shape[1], x_shape[2], window[0], window[1], sh, sw, padding)
    return layout_of


def _tile_view(x, lay):
    """x as [N, OH, KH, OW, KW, C] when windows tile it (a view: splits axes only)."""
    (n, _, _, c), (kh, kw) = x.shape, lay.window
    cropped = x[:, :lay.out_h * kh, :lay.out_w * kw]
    return cropped.reshape(n, lay.out_h, kh, lay.out_w, kw, c)


def _add_into(target, value):
    """target += value on a view (``a[idx] += v`` would also write a[idx] back)."""
    target += value


# -- convolution -------------------------------------------------------------------


def _conv_kernels(xp):
    def conv2d(ctx):
        layout_of = _layout_maker(ctx.attrs)

        def conv(x, w):
            kh, kw, channels, out_channels = w.shape
            lay = layout_of(x.shape, (kh, kw))
            w2d = w.reshape(kh * kw * channels, out_channels)
            if (kh, kw) + lay.strides == (1, 1, 1, 1):
                patches = x.reshape(-1, channels)    # 1x1 stride 1: x is its own im2col
            else:
                patches = _im2col(xp, x, lay)
            y = xp.matmul(patches, w2d).reshape(x.shape[0], lay.out_h, lay.out_w, out_channels)
            return y, patches
        return conv

    def backprop_filter(ctx):
        filter_shape = tuple(ctx.attrs["filter_shape"])

        def grad_filter(patches, grad):
            grad2d = grad.reshape(-1, grad.shape[-1])
            return xp.matmul(patches.T, grad2d).reshape(filter_shape)
        return grad_filter

    def backprop_input(ctx):
        layout_of = _layout_maker(ctx.attrs)

        def grad_input(x, w, grad):
            kh, kw, channels, out_channels = w.shape
            grad2d = grad.reshape(-1, out_channels)
            lay = layout_of(x.shape, (kh, kw))
            if (kh, kw) + lay.strides == (1, 1, 1, 1):
                return xp.matmul(grad2d, w.reshape(channels, out_channels).T).reshape(x.shape)
            if _channel_major(lay, kw, channels):
                return _col2im_channel_major(xp, grad2d, w, x.shape, lay)
            return _col2im_by_tap(xp, grad2d, w, x.shape, lay)
        return grad_input

    return {"Conv2D": conv2d, "Conv2DBackpropFilter": backprop_filter,
            "Conv2DBackpropInput": backprop_input}


def _channel_major(lay, kw, channels):
    """Whether to lay im2col out channel-major: when a pixel's run of KW*C values
    is shorter than an output row, copies and adds along rows make longer runs."""
    return kw * channels < lay.out_w


def _im2col(xp, x, lay):
    """The [N*OH*OW, KH*KW*C] patch matrix: C-ordered, or for few channels the
    F-ordered transpose of a [KH, KW, C, N, OH, OW] array (same values)."""
    (n, _, _, c), (kh, kw) = x.shape, lay.window
    rows = n * lay.out_h * lay.out_w
    if _channel_major(lay, kw, c):
        planes = _pad(xp, x.transpose(3, 0, 1, 2), lay, (2, 3), copy=True)   # [C, N, H, W]
        windows = _window_view(xp, planes, lay, (2, 3))
        grid = xp.ascontiguousarray(windows.transpose(4, 5, 0, 1, 2, 3))
        return grid.reshape(kh * kw * c, rows).T
    windows = _window_view(xp, _pad(xp, x, lay, (1, 2)), lay, (1, 2))
    return xp.ascontiguousarray(windows.transpose(0, 1, 2, 4, 5, 3)).reshape(rows, kh * kw * c)


def _pad(xp, array, lay, spatial, copy=False):
    """``array`` zero-padded by TensorFlow's rule on its ``spatial`` axes (``array``
    itself when there is nothing to pad, unless ``copy``)."""
    top, bottom, left, right = lay.pads
    if not (top or bottom or left or right or copy):
        return array
    axis_h, axis_w = spatial
    shape, interior = list(array.shape), [slice(None)] * array.ndim
    shape[axis_h] += top + bottom
    shape[axis_w] += left + right
    interior[axis_h] = slice(top, top + array.shape[axis_h])
    interior[axis_w] = slice(left, left + array.shape[axis_w])
    padded = xp.zeros(shape, array.dtype) if top or bottom or left or right \
        else xp.empty(shape, array.dtype)
    padded[tuple(interior)] = array
    return padded


def _window_view(xp, padded, lay, spatial):
    """``padded`` seen as windows: its ``spatial`` axes become output positions and
    (KH, KW) axes are appended. A view through as_strided (NumPy and CuPy have
    it); a copy built tap by tap for array modules without it."""
    (axis_h, axis_w), (kh, kw), (sh, sw) = spatial, lay.window, lay.strides
    shape, strides = list(padded.shape), list(padded.strides)
    shape[axis_h], shape[axis_w] = lay.out_h, lay.out_w
    strides[axis_h] *= sh
    strides[axis_w] *= sw
    shape, strides = shape + [kh, kw], strides + [padded.strides[axis_h], padded.strides[axis_w]]
    as_strided = getattr(getattr(getattr(xp, "lib", None), "stride_tricks", None),
                         "as_strided", None)
    if as_strided is not None:
        return as_strided(padded, tuple(shape), tuple(strides))
    windows = xp.empty(tuple(shape), padded.dtype)
    for i in range(kh):
        for j in range(kw):
            index = [slice(None)] * padded.ndim
            index[axis_h] = slice(i, i + (lay.out_h - 1) * sh + 1, sh)
            index[axis_w] = slice(j, j + (lay.out_w - 1) * sw + 1, sw)
            windows[..., i, j] = padded[tuple(index)]
    return windows


def _col2im_by_tap(xp, grad2d, w, x_shape, lay):
    """dx as a sum over taps of g2d @ w[i, j].T, each an [N, OH, OW, C] block added
    to its strided slice of dx in runs of OW*C (the columns of g2d @ w2d.T would
    add in runs of C). A tap that reads every input cell writes dx directly."""
    n, _, _, c = x_shape
    taps = list(lay.taps)
    whole = next((tap for tap in taps if tap.whole), None)
    if whole is None:
        dx = xp.zeros(x_shape, grad2d.dtype)
    else:
        taps.remove(whole)
        dx = xp.empty(x_shape, grad2d.dtype)
        xp.matmul(grad2d, w[whole.row, whole.col].T, out=dx.reshape(-1, c))
    product = xp.empty((n, lay.out_h, lay.out_w, c), grad2d.dtype)
    for tap in taps:
        xp.matmul(grad2d, w[tap.row, tap.col].T, out=product.reshape(-1, c))
        _add_into(dx[tap.in_index], product[tap.out_index])
    return dx


def _col2im_channel_major(xp, grad2d, w, x_shape, lay):
    """dx for few channels: dpatches.T = w2d @ g2d.T is [KH, KW, C, N, OH, OW] in
    memory; its taps add into a [C, N, H, W] dx in runs of OW, then one transpose."""
    kh, kw, c, out_channels = w.shape
    n, height, width, _ = x_shape
    columns = xp.matmul(w.reshape(-1, out_channels), grad2d.T)
    columns = columns.reshape(kh, kw, c, n, lay.out_h, lay.out_w)
    taps = list(lay.taps)
    whole = next((tap for tap in taps if tap.whole), None)
    if whole is None:
        dx = xp.zeros((c, n, height, width), grad2d.dtype)
    else:
        taps.remove(whole)
        dx = columns[whole.row, whole.col]      # ours to overwrite: no other tap reads it
    for tap in taps:
        _add_into(dx[(slice(None),) + tap.in_index],
                  columns[tap.row, tap.col][(slice(None),) + tap.out_index])
    return xp.ascontiguousarray(dx.transpose(1, 2, 3, 0))


# -- pooling -------------------------------------------------------------------------


def _pool_kernels(xp):
    def max_pool(ctx):
        layout_of, dtype = _layout_maker(ctx.attrs), np.dtype(ctx.output_dtypes[0])
        lowest = -np.inf if dtype.kind == "f" else np.iinfo(dtype).min   # padding never wins
        return lambda x: _max_pool_with_winner(xp, x, layout_of(x.shape), lowest)

    def max_pool_grad(ctx):
        layout_of = _layout_maker(ctx.attrs)
        return lambda x, winner, grad: _max_pool_grad(xp, x, winner, grad, layout_of(x.shape))

    def avg_pool(ctx):
        layout_of, dtype, scales = _layout_maker(ctx.attrs), ctx.output_dtypes[0], {}

        def pool(x):
            lay = layout_of(x.shape)
            total = _reduce_taps(xp, xp.add, x, lay, 0)
            total *= _window_scale(xp, lay, dtype, scales)
            return total
        return pool

    def avg_pool_grad(ctx):
        layout_of, dtype, scales = _layout_maker(ctx.attrs), ctx.output_dtypes[0], {}

        def grad_fn(x, grad):
            lay = layout_of(x.shape)
            if lay.tiles:
                return _avg_pool_grad_tiles(xp, grad, x.shape, lay)
            share = grad * _window_scale(xp, lay, dtype, scales)
            dx = xp.zeros(x.shape, grad.dtype)
            for tap in lay.taps:
                _add_into(dx[tap.in_index], share[tap.out_index])
            return dx
        return grad_fn

    return {"MaxPool": max_pool, "MaxPoolGrad": max_pool_grad,
            "AvgPool": avg_pool, "AvgPoolGrad": avg_pool_grad}


def _window_scale(xp, lay, dtype, cache):
    """1 / (real cells per window): a number, or under SAME padding an [OH, OW, 1]
    array, made once per layout (``cache``) and kept on the device."""
    scale = cache.get(lay.key)
    if scale is None:
        scale = cache[lay.key] = (
            1.0 / len(lay.taps) if all(tap.full for tap in lay.taps)
            else xp.asarray(lay.inv_counts, dtype=dtype))
    return scale


def _reduce_taps(xp, ufunc, x, lay, fill):
    """ufunc-reduce every window over its real cells (padding never takes part)."""
    n, _, _, c = x.shape
    taps = lay.taps
    if taps and taps[0].full:
        out, taps = x[taps[0].in_index].copy(), taps[1:]
    else:
        out = xp.full((n, lay.out_h, lay.out_w, c), fill, x.dtype)
    for tap in taps:
        region = out[tap.out_index]
        ufunc(region, x[tap.in_index], out=region)
    return out


def _max_pool_with_winner(xp, x, lay, lowest):
    """(max over each window, which taps of the window hold that maximum).

    The second output is a bit mask (bit k: tap k, row-major, equals the max);
    the gradient picks the lowest set bit, TensorFlow's first maximum. With
    more than 64 taps it is the index of the first maximum instead.

    NOTE: recording the maxima here keeps the backward pass to cheap integer
    ops on small arrays; rediscovering them from x and y there was slow
    exactly where ties are common (after a ReLU)."""
    out = _reduce_taps(xp, xp.maximum, x, lay, lowest)
    code_dtype = _CODE_DTYPES.get(max(8, 1 << (len(lay.taps) - 1).bit_length()))
    if code_dtype is None:
        return out, _first_max_index(xp, x, out, lay)
    code = xp.zeros(out.shape, code_dtype)
    hit = xp.empty(out.shape, bool)
    for bit, tap in enumerate(lay.taps):
        region, hit_region = code[tap.out_index], hit[tap.out_index]
        xp.equal(x[tap.in_index], out[tap.out_index], out=hit_region)
        region += hit_region.astype(code_dtype, copy=False) * code_dtype(1 << bit)
    return out, code


_CODE_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _first_max_index(xp, x, out, lay):
    """Index of each window's first maximum (for windows of more than 64 taps)."""
    index = xp.full(out.shape, len(lay.taps), np.int32)
    for position in reversed(range(len(lay.taps))):
        tap = lay.taps[position]
        xp.copyto(index[tap.out_index], position, where=x[tap.in_index] == out[tap.out_index])
    return index


def _max_pool_grad(xp, x, code, grad, lay):
    """Each window's gradient to its first maximum; overlapping windows add up.
    An infinite gradient is selected, never multiplied (inf * 0 would be NaN)."""
    finite = bool(xp.isfinite(grad.sum()))
    exact_cover = lay.tiles and (lay.out_h * lay.window[0], lay.out_w * lay.window[1]) == \
        tuple(x.shape[1:3])
    dx = xp.empty(x.shape, grad.dtype) if exact_cover else xp.zeros(x.shape, grad.dtype)
    for position, tap in enumerate(lay.taps):
        first = _is_first_max(code[tap.out_index], position)
        routed = grad[tap.out_index] * first if finite else \
            xp.where(first, grad[tap.out_index], 0)
        if exact_cover:
            dx[tap.in_index] = routed
        else:
            _add_into(dx[tap.in_index], routed)
    return dx


def _is_first_max(code, position):
    if code.dtype == np.int32:  # an index, not a bit mask
        return code == position
    lower_and_own = code.dtype.type((1 << (position + 1)) - 1)
    return (code & lower_and_own) == code.dtype.type(1 << position)


def _avg_pool_grad_tiles(xp, grad, shape, lay):
    (n, out_h, out_w, c), (kh, kw) = grad.shape, lay.window
    share = grad * (1.0 / (kh * kw))
    tiled = xp.broadcast_to(share[:, :, None, :, None, :], (n, out_h, kh, out_w, kw, c))
    return _untile(xp, tiled, shape)


def _untile(xp, tiled, shape):
    """[N, OH, KH, OW, KW, C] back to [N, H, W, C], zeros where VALID cropped."""
    n, out_h, kh, out_w, kw, c = tiled.shape
    if (out_h * kh, out_w * kw) == tuple(shape[1:3]):
        return xp.ascontiguousarray(tiled).reshape(shape)
    dx = xp.zeros(shape, tiled.dtype)
    dx[:, :out_h * kh, :out_w * kw] = tiled.reshape(n, out_h * kh, out_w * kw, c)
    return dx


# -- softmax cross-entropy -------------------------------------------------------------


def _cross_entropy_kernels(xp):
    def sparse(ctx):
        op = ctx.op

        def cross_entropy(logits, labels):
            _check_labels(xp, op, labels, logits.shape[1])
            rows = xp.arange(labels.shape[0])
            neg_log_probs, probs = _softmax_parts(xp, logits)
            loss = neg_log_probs[rows, labels]
            probs[rows, labels] -= 1
            return loss, probs
        return cross_entropy

    def dense(ctx):
        def cross_entropy(logits, labels):
            neg_log_probs, probs = _softmax_parts(xp, logits)
            loss = xp.einsum("ij,ij->i", labels, neg_log_probs)
            probs -= labels
            return loss, probs
        return cross_entropy

    return {"SoftmaxCrossEntropyWithLogits": dense,
            "SparseSoftmaxCrossEntropyWithLogits": sparse}


def _softmax_parts(xp, logits):
    """(-log softmax, softmax) of [N, K] logits along the last axis,
    with the max subtracted first so exp never overflows."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = xp.exp(shifted)
    total = probs.sum(axis=1, keepdims=True)
    probs /= total
    log_total = xp.log(total)
    xp.subtract(log_total, shifted, out=shifted)        # now -log softmax
    return shifted, probs


def _check_labels(xp, op, labels, classes):
    if labels.size == 0 or (int(labels.min()) >= 0 and int(labels.max()) < classes):
        return
    bad = xp.nonzero((labels < 0) | (labels >= classes))[0]
    first = int(bad[0])
    raise errors.InvalidArgumentError(
        None, op, f"Received a label value of {int(labels[first])} (at index {first}) "
        f"which is outside the valid range of [0, {classes}); {len(bad)} of "
        f"{labels.size} labels are out of range")


# -- fused batch norm ------------------------------------------------------------------


def _batch_norm_kernels(xp):
    def forward(ctx):
        epsilon, training = ctx.attrs["epsilon"], bool(ctx.attrs["is_training"])
        y_dtype, stat_dtype = ctx.output_dtypes[0], ctx.output_dtypes[1]

        def batch_norm(x, scale, offset, mean, variance):
            rows = _rows(x)
            if training:
                mean, centered, variance = _batch_moments(xp, rows)
                count = rows.shape[0]
                moving_variance = variance * (count / max(count - 1, 1))
            else:
                centered, moving_variance = rows - mean.astype(rows.dtype), variance
            inv_std = 1.0 / xp.sqrt(variance.astype(rows.dtype) + epsilon)
            centered *= scale * inv_std
            centered += offset
            stats = (mean, moving_variance, mean, inv_std)
            return (centered.reshape(x.shape).astype(y_dtype, copy=False),) + \
                tuple(stat.astype(stat_dtype, copy=False) for stat in stats)
        return batch_norm

    def backward(ctx):
        training = bool(ctx.attrs["is_training"])
        dtypes = ctx.output_dtypes

        def batch_norm_grad(grad, x, scale, saved_mean, saved_inv_std):
            rows, grad_rows = _rows(x), _rows(grad)
            centered = rows - saved_mean.astype(rows.dtype)
            doffset = grad_rows.sum(axis=0)
            dscale = xp.einsum("ij,ij->j", grad_rows, centered) * saved_inv_std
            gain = scale * saved_inv_std
            dx = grad_rows * gain
            if training:    # the paths through the batch mean and variance
                count = rows.shape[0]
                centered *= gain * saved_inv_std * dscale * (-1.0 / count)
                dx += centered
                dx -= gain * doffset * (1.0 / count)
            return tuple(out.astype(dtype, copy=False) for out, dtype in
                         zip((dx.reshape(x.shape), dscale, doffset), dtypes))
        return batch_norm_grad

    return {"FusedBatchNorm": forward, "FusedBatchNormGrad": backward}


def _rows(x):
    """x as [rows, C], in float32 at least (float16 statistics would overflow)."""
    compute = np.promote_types(x.dtype, np.float32)
    return x.reshape(-1, x.shape[-1]).astype(compute, copy=False)


def _batch_moments(xp, rows):
    """(mean, rows - mean, biased variance) over the rows; two passes for accuracy."""
    mean = rows.mean(axis=0)
    centered = rows - mean
    variance = xp.einsum("ij,ij->j", centered, centered) * (1.0 / rows.shape[0])
    return mean, centered, variance
