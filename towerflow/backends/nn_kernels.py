"""Neural-network kernels, written once against an array module ``xp`` (NumPy
or CuPy): convolution here; pooling in pool_kernels.py; softmax cross-entropy
and batch norm in fused_kernels.py; window geometry in window_geometry.py.

Tensors are channels-last (NHWC), filters HWIO. The table follows the maker
protocol of :mod:`.kernels`: ``table[name](ctx)`` runs once when a plan
compiles and returns the function that runs on every step::

    table = build_nn_kernels(np)
    conv = table["Conv2D"](ctx)        # ctx.attrs = {"strides": (1, 1), "padding": "SAME"}
    y, patches = conv(x, w)            # patches: what the filter gradient reuses

Window ops loop over the KH*KW kernel taps, never over pixels. Pooling and
col2im read or write each tap as one strided slice of the input clipped to
its real (non-padding) cells; im2col copies one as_strided window view.
Given a CPU pool (``build_nn_kernels(np, pool)``, see :mod:`.cpu_threads`),
convolutions and pooling work on blocks of the batch's images in parallel.
Where the compiled kernels run (native.py), stride-1 3x3 and 5x5 convolutions of
enough channels are Winograd's (winograd.py), and ``patches`` are then its
transformed input tiles.
"""

import contextlib
from typing import NamedTuple

import numpy as np

from .. import errors
from . import conv_blocks, native, output_used, winograd
from .cpu_threads import SERIAL, split
from .filled_vectors import FilledVectors
from .fused_kernels import _batch_norm_kernels, _cross_entropy_kernels, long_rows
from .parallel_gemm import matmul_by_rows, matmul_over_rows
from .pool_kernels import _pool_kernels, max_pool_block, winner_dtype
from .window_geometry import _add_into, _layout_maker


def build_nn_kernels(xp, parallel=SERIAL):
    """The neural-network kernel table for array module ``xp``; ``parallel``
    (see :mod:`.cpu_threads`) splits the big kernels across CPU threads."""
    table = {}
    table.update(_conv_kernels(xp, parallel))
    table.update(_pool_kernels(xp, parallel))
    table.update(_cross_entropy_kernels(xp))
    table.update(_batch_norm_kernels(xp))
    return table


# -- convolution -------------------------------------------------------------------


def _conv_kernels(xp, parallel):
    def conv2d(ctx, patches_output=1):
        layout_of = _layout_maker(ctx.attrs)
        # No gradient reads the patches (inference): im2col a few images at a
        # time into small buffers instead of keeping the whole matrix.
        keep = output_used(ctx, patches_output)

        def conv(x, w, finish=None, keep_product=True):
            _check_depth(x, w)
            kh, kw, channels, out_channels = w.shape
            lay = layout_of(x.shape, (kh, kw))
            w2d = w.reshape(kh * kw * channels, out_channels)
            if (kh, kw) + lay.strides == (1, 1, 1, 1):
                patches = x.reshape(-1, channels)    # 1x1 stride 1: x is its own im2col
                y = matmul_by_rows(xp, parallel, patches, w2d)
                if finish is not None:
                    finish(y, slice(0, x.shape[0]))
            else:
                patches, y = _im2col_matmul(xp, parallel, x, w2d, lay, finish, keep_product) \
                    if keep \
                    else _im2col_matmul_in_blocks(xp, parallel, x, w2d, lay, finish,
                                                  keep_product)
            y_shape = (x.shape[0], lay.out_h, lay.out_w, out_channels)
            if y is None:           # not kept: a stand-in with its shape and dtype only
                y = xp.broadcast_to(xp.zeros((), xp.result_type(x, w)), y_shape)
            return y.reshape(y_shape), patches
        return conv

    def fused_conv2d(ctx):
        """Conv2D → BiasAdd (→ Relu (→ MaxPool)) as one kernel (see
        towerflow.fusion): the bias, and the ReLU or the pooling then the
        ReLU, go onto each image block's rows right after its GEMM."""
        conv, relu = conv2d(ctx, patches_output=0), ctx.attrs["activation"] == "Relu"
        if ctx.attrs.get("pool"):
            return _conv_bias_pool_relu(xp, conv, ctx)
        zeros = FilledVectors(xp, 0)

        def fused(x, w, bias):
            def finish(rows, images):
                _add_bias_in_place(xp, rows, bias)
                if relu:
                    _relu_in_place(xp, rows, zeros)
            y, patches = conv(x, w, finish)
            return patches, y
        return fused

    def backprop_filter(ctx):
        filter_shape = tuple(ctx.attrs["filter_shape"])
        algorithm = winograd.algorithm_for(filter_shape)

        def grad_filter(patches, grad):
            kept = winograd.kept_tiles(patches, grad, filter_shape)
            if kept is not None:    # the forward pass ran as Winograd
                dw = conv_blocks.winograd_filter_gradient(parallel, kept, grad, algorithm)
                return dw.reshape(filter_shape)
            grad2d = grad.reshape(-1, grad.shape[-1])
            return matmul_over_rows(xp, parallel, patches, grad2d).reshape(filter_shape)
        return grad_filter

    def backprop_input(ctx):
        layout_of = _layout_maker(ctx.attrs)

        def grad_input(x, w, grad):
            kh, kw, channels, out_channels = w.shape
            grad2d = grad.reshape(-1, out_channels)
            lay = layout_of(x.shape, (kh, kw))
            if (kh, kw) + lay.strides == (1, 1, 1, 1):
                return matmul_by_rows(xp, parallel, grad2d,
                                       w.reshape(channels, out_channels).T).reshape(x.shape)
            if winograd.applies(grad2d, w, lay, out_channels, x.shape[1], x.shape[2]):
                return conv_blocks.winograd_input_gradient(xp, parallel, x.shape, grad2d,
                                                           lay, w)
            if native.float_arrays(grad2d, w):
                return conv_blocks.matmul_col2im_cached(xp, parallel, x.shape, grad2d, lay, w)
            col2im = _col2im_channel_major if _channel_major(lay, kw, channels) \
                else _col2im_by_tap
            return _col2im_by_images(
                xp, parallel, x.shape, grad2d, lay, w,
                lambda rows, shape, out: col2im(xp, rows, w, shape, lay, out))
        return sized_backprop_input(ctx, grad_input)

    return {"Conv2D": conv2d, "Conv2DBackpropFilter": backprop_filter,
            "Conv2DBackpropInput": backprop_input, "_FusedConv2D": fused_conv2d}


class _ShapeOnly(NamedTuple):
    """What Conv2DBackpropInput's kernels read of their first input: its shape."""

    shape: tuple


def sized_backprop_input(ctx, grad_input):
    """The Conv2DBackpropInput kernel for both of the op's forms: ``grad_input(x,
    w, grad)`` (conv2d's gradient; it reads only x's shape), or for
    tf.nn.conv2d_transpose ``(w, grad)`` with the attrs ``input_sizes`` (H, W,
    C) and ``batch`` (an int to check, or None: grad's batch)."""
    sizes, batch = ctx.attrs.get("input_sizes"), ctx.attrs.get("batch")
    if sizes is None:
        return grad_input
    layout_of = _layout_maker(ctx.attrs)

    def kernel(*inputs):
        if len(inputs) == 3:        # a wrapping table's fallback passes the stand-in on
            return grad_input(*inputs)
        w, grad = inputs
        if batch is not None and grad.shape[0] != batch:
            raise errors.InvalidArgumentError(
                None, None, f"{_INPUT_LABEL}: input and out_backprop must have "
                f"the same batch size, input batch: {batch} outbackprop "
                f"batch: {grad.shape[0]} batch_dim: 0")
        x_shape = (grad.shape[0],) + tuple(sizes)
        _check_out_backprop(x_shape, w.shape, grad.shape, layout_of(x_shape, w.shape[:2]))
        return grad_input(_ShapeOnly(x_shape), w, grad)
    return kernel


_INPUT_LABEL = "Conv2DCustomBackpropInput"      # TF's CPU kernel's, in its messages


def _check_depth(x, w):
    """conv_ops.cc's check, for shapes the graph left open (an empty output
    would not read the channels)."""
    if x.shape[3] != w.shape[2]:
        raise errors.InvalidArgumentError(
            None, None, "input depth must be evenly divisible by filter depth: "
            f"{x.shape[3]} vs {w.shape[2]}")


def _check_out_backprop(x_shape, w_shape, grad_shape, lay):
    """TF's run-time checks of a fed out_backprop whose sizes the graph left
    open: conv2d of x by w must give its sizes and channels."""
    if w_shape[3] != grad_shape[3]:
        raise errors.InvalidArgumentError(
            None, None, f"{_INPUT_LABEL}: filter and out_backprop must have the same "
            f"out_depth")
    for axis, computed in ((1, lay.out_h), (2, lay.out_w)):
        if grad_shape[axis] != computed:
            raise errors.InvalidArgumentError(
                None, None, f"{_INPUT_LABEL}: Size of out_backprop doesn't match computed: "
                f"actual = {grad_shape[axis]}, computed = {computed} spatial_dim: {axis} input: "
                f"{x_shape[axis]} filter: {w_shape[axis - 1]} output: {grad_shape[axis]} "
                f"stride: {lay.strides[axis - 1]} dilation: 1")


def _conv_bias_pool_relu(xp, conv, ctx):
    """The kernel of Conv2D → BiasAdd → Relu → MaxPool: each block's conv + bias
    is max-pooled (winners recorded as MaxPool records them), then the ReLU
    runs on the pooled block, a quarter of the size for 2x2 pooling."""
    conv_layout_of, pool_layout_of = _layout_maker(ctx.attrs), _layout_maker(ctx.attrs["pool"])
    zeros = FilledVectors(xp, 0)

    def fused(x, w, bias):
        kh, kw, _, out_channels = w.shape
        conv_lay = conv_layout_of(x.shape, (kh, kw))
        conv_shape = (x.shape[0], conv_lay.out_h, conv_lay.out_w, out_channels)
        pool_lay = pool_layout_of(conv_shape)
        pooled = xp.empty((x.shape[0], pool_lay.out_h, pool_lay.out_w, out_channels),
                          xp.result_type(x, w))
        winners = xp.empty(pooled.shape, winner_dtype(pool_lay))

        def finish(rows, images):
            block = rows.reshape((-1,) + conv_shape[1:])
            if native.max_pool(block, pool_lay, pooled[images], winners[images], bias, relu=True):
                return
            _add_bias_in_place(xp, rows, bias)
            max_pool_block(xp, block, pool_lay, -np.inf, pooled[images], winners[images])
            _relu_in_place(xp, pooled[images].reshape(-1, out_channels), zeros)
        # NOTE: the conv + bias output stands in for the shape of the ReLU's
        # output (see towerflow.fusion): nothing reads its values, so where the
        # compiled kernels run it is never written out (saving a pass over
        # the largest activation of the layer), only pooled from cache.
        biased, patches = conv(x, w, finish, keep_product=False)
        return patches, biased, pooled, winners
    return fused


def _add_bias_in_place(xp, rows2d, bias):
    """rows2d += bias (a [C] vector) on [R, C] rows, as BiasAdd computes it."""
    wide, repeat = long_rows(rows2d)
    xp.add(wide, xp.tile(bias, repeat) if repeat > 1 else bias, out=wide)


def _relu_in_place(xp, rows2d, zeros):
    """rows2d = max(rows2d, 0), as Relu computes it: against an array of zeros
    (a FilledVectors) as long as the rows (NumPy's maximum against a scalar,
    or a broadcast row, runs several times slower)."""
    flat = rows2d.reshape(-1)
    xp.maximum(flat, zeros.get(flat.shape[0], flat.dtype), out=flat)


def _im2col_matmul(xp, parallel, x, w2d, lay, finish=None, keep_product=True):
    """(patches, patches @ w2d), image block by image block across the threads,
    each block's GEMM right after its patches (while they are still cached),
    then ``finish(rows, images)`` (if given) on the rows of the product of
    the block's ``images`` (a slice of the batch). ``keep_product=False``
    allows (on the compiled path) not keeping the product: it is then None."""
    n, _, _, channels = x.shape
    if native.float_arrays(x, w2d):
        return conv_blocks.im2col_matmul_cached(xp, parallel, x, w2d, lay, finish,
                                                _compiled_conv_parts(parallel, x, w2d, lay),
                                                keep_product)
    parts = _conv_parts(parallel, x, w2d, lay)
    rows_per_image, depth = lay.out_h * lay.out_w, w2d.shape[0]
    flops = n * rows_per_image * depth * w2d.shape[1]
    if parts == 1:
        patches = _im2col(xp, x, lay)
        with parallel.blas_threads(flops):
            y = xp.matmul(patches, w2d)
        if finish is not None:
            finish(y, slice(0, n))
        return patches, y
    (kh, kw), out_hw = lay.window, (lay.out_h, lay.out_w)
    if _channel_major(lay, kw, channels):  # F-ordered: the transpose of a C-ordered grid
        grid = xp.empty((kh, kw, channels, n) + out_hw, x.dtype)
        patches, image_axis = grid.reshape(depth, -1).T, 3
    else:
        patches = xp.empty((n * rows_per_image, depth), x.dtype)
        grid, image_axis = patches.reshape((n,) + out_hw + (kh, kw, channels)), 0
    y = xp.empty((n * rows_per_image, w2d.shape[1]), xp.result_type(x, w2d))
    ranges = split(n, parts)

    def part(index):
        start, stop = ranges[index]
        rows = slice(start * rows_per_image, stop * rows_per_image)
        images = (slice(None),) * image_axis + (slice(start, stop),)
        _im2col(xp, x[start:stop], lay, out=grid[images])
        xp.matmul(patches[rows], w2d, out=y[rows])
        if finish is not None:
            finish(y[rows], slice(start, stop))
    parallel.run(part, parts)
    return patches, y


def _conv_parts(parallel, x, w2d, lay):
    """How many parts a convolution's image blocks split into across threads."""
    n, rows_per_image = x.shape[0], lay.out_h * lay.out_w
    flops = n * rows_per_image * w2d.shape[0] * w2d.shape[1]
    return parallel.gemm_parts(n, flops, n * rows_per_image)


def _compiled_conv_parts(parallel, x, w2d, lay):
    """How many parts a convolution on the compiled kernels splits into."""
    flops = x.shape[0] * lay.out_h * lay.out_w * w2d.shape[0] * w2d.shape[1]
    return parallel.compiled_parts(x.shape[0], flops)


# Bytes of im2col patches per block when the patches are not kept.
_PATCH_BLOCK_BYTES = 1 << 22


def _im2col_matmul_in_blocks(xp, parallel, x, w2d, lay, finish=None, keep_product=True):
    """(None, patches @ w2d) without keeping the patches: each block of a few
    images gets its own small patch matrix, GEMM and ``finish`` (threads take
    the blocks in turn); on the compiled path each thread's blocks share one
    patch buffer (and ``keep_product=False`` may leave the product None), or
    run by Winograd. Off the host
    (GPUs) the patches are made whole. GEMMs over other row blocks may round
    the last bit differently from :func:`_im2col_matmul`; each path alone is
    deterministic."""
    if native.float_arrays(x, w2d):
        return conv_blocks.im2col_matmul_cached(xp, parallel, x, w2d, lay, finish,
                                                _compiled_conv_parts(parallel, x, w2d, lay),
                                                keep_product, keep_patches=False)
    n = x.shape[0]
    rows_per_image = lay.out_h * lay.out_w
    image_bytes = rows_per_image * w2d.shape[0] * x.dtype.itemsize
    per_block = max(1, _PATCH_BLOCK_BYTES // max(image_bytes, 1))
    if not parallel.host or n <= per_block:
        return None, _im2col_matmul(xp, parallel, x, w2d, lay, finish)[1]
    y = xp.empty((n * rows_per_image, w2d.shape[1]), xp.result_type(x, w2d))
    starts = range(0, n, per_block)

    def block(index):
        start = starts[index]
        stop = min(start + per_block, n)
        rows = y[start * rows_per_image:stop * rows_per_image]
        xp.matmul(_im2col(xp, x[start:stop], lay), w2d, out=rows)
        if finish is not None:
            finish(rows, slice(start, stop))
    parallel.run(block, len(starts))
    return None, y


def _col2im_by_images(xp, parallel, x_shape, grad2d, lay, w, col2im):
    """dx from ``col2im(grad rows, dx shape, out)``, image block by image block."""
    n = x_shape[0]
    rows_per_image = lay.out_h * lay.out_w
    flops = grad2d.shape[0] * grad2d.shape[1] * w.shape[0] * w.shape[1] * w.shape[2]
    parts = parallel.gemm_parts(n, flops, grad2d.shape[0])
    if parts == 1:
        with parallel.blas_threads(flops):
            return col2im(grad2d, x_shape, None)
    dx = xp.empty(x_shape, grad2d.dtype)
    ranges = split(n, parts)

    def part(index):
        start, stop = ranges[index]
        col2im(grad2d[start * rows_per_image:stop * rows_per_image],
               (stop - start,) + tuple(x_shape[1:]), dx[start:stop])
    parallel.run(part, parts)
    return dx


def _channel_major(lay, kw, channels):
    """Whether to lay im2col out channel-major: when a pixel's run of KW*C values
    is shorter than an output row, copies and adds along rows make longer runs."""
    return kw * channels < lay.out_w


def _im2col(xp, x, lay, out=None):
    """The [N*OH*OW, KH*KW*C] patch matrix: C-ordered, or for few channels the
    F-ordered transpose of a [KH, KW, C, N, OH, OW] array (same values). With
    ``out`` (a [N, OH, OW, KH, KW, C] or that [KH, KW, C, N, OH, OW] array) the
    patches are written there instead."""
    (n, _, _, c), (kh, kw) = x.shape, lay.window
    rows = n * lay.out_h * lay.out_w
    if _channel_major(lay, kw, c):
        planes = _pad(xp, x.transpose(3, 0, 1, 2), lay, (2, 3), copy=True)   # [C, N, H, W]
        windows = _window_view(xp, planes, lay, (2, 3)).transpose(4, 5, 0, 1, 2, 3)
        if out is not None:
            out[...] = windows
            return out
        grid = xp.ascontiguousarray(windows)
        return grid.reshape(kh * kw * c, rows).T
    windows = _window_view(xp, _pad(xp, x, lay, (1, 2)), lay, (1, 2)).transpose(0, 1, 2, 4, 5, 3)
    if out is not None:
        out[...] = windows
        return out
    return xp.ascontiguousarray(windows).reshape(rows, kh * kw * c)


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


def _col2im_by_tap(xp, grad2d, w, x_shape, lay, dx=None):
    """dx as a sum over taps of g2d @ w[i, j].T, each an [N, OH, OW, C] block added
    to its strided slice of dx in runs of OW*C (the columns of g2d @ w2d.T would
    add in runs of C). A tap that reads every input cell writes dx directly.
    ``dx``: a C-contiguous array to write the result to."""
    n, _, _, c = x_shape
    # NOTE: contiguous [O, C] filter taps: GEMMs with a transposed view as
    # their second operand ran ~15% slower.
    w_t = xp.ascontiguousarray(w.transpose(0, 1, 3, 2))
    taps = list(lay.taps)
    whole = next((tap for tap in taps if tap.whole), None)
    if dx is None:
        dx = xp.empty(x_shape, grad2d.dtype)
    if whole is None:
        dx.fill(0)
    else:
        taps.remove(whole)
        xp.matmul(grad2d, w_t[whole.row, whole.col], out=dx.reshape(-1, c))
    product = xp.empty((n, lay.out_h, lay.out_w, c), grad2d.dtype)
    with _small_buffers(xp):
        for tap in taps:
            xp.matmul(grad2d, w_t[tap.row, tap.col], out=product.reshape(-1, c))
            _add_into(dx[tap.in_index], product[tap.out_index])
    return dx


@contextlib.contextmanager
def _small_buffers(xp):
    """NumPy's ufunc buffer at 1024 elements: adding strided blocks whose rows are
    already hundreds of values long, the default 8192 makes NumPy copy every
    operand through its buffers (about half the add's time)."""
    setbufsize = getattr(xp, "setbufsize", None)
    if setbufsize is None:
        yield
        return
    previous = setbufsize(1024)
    try:
        yield
    finally:
        setbufsize(previous)


def _col2im_channel_major(xp, grad2d, w, x_shape, lay, out=None):
    """dx for few channels: dpatches.T = w2d @ g2d.T is [KH, KW, C, N, OH, OW] in
    memory; its taps add into a [C, N, H, W] dx in runs of OW, then one transpose
    (into ``out`` if given)."""
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
    if out is None:
        return xp.ascontiguousarray(dx.transpose(1, 2, 3, 0))
    out[...] = dx.transpose(1, 2, 3, 0)
    return out


