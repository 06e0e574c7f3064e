"""Image resizing kernels (towerflow/ops/image_ops.py), written once against
``xp``: TensorFlow 1's bilinear and nearest-neighbour resizes (output pixel
i reads input position i * in_size / out_size; with align_corners
i * (in_size - 1) / (out_size - 1); with half-pixel centres
(i + 0.5) * in_size / out_size, less 0.5 for bilinear).

A resize is separable: out = R @ image @ C^T per channel, with R and C
small interpolation matrices (out_size x in_size), so the forward pass is
two batched matmuls and the gradient the same two with the matrices
transposed.
"""

import functools

import numpy as np


def build_image_kernels(xp):
    return {"ResizeBilinear": functools.partial(_resize_bilinear, xp),
            "ResizeBilinearGrad": functools.partial(_resize_grad, xp, _bilinear_matrix),
            "ResizeNearestNeighbor": functools.partial(_resize_nearest, xp),
            "ResizeNearestNeighborGrad": functools.partial(_resize_grad, xp, _nearest_matrix)}


# How output pixels map onto input positions: (align_corners, half_pixel_centers).
LEGACY = (False, False)


def _scale(in_size, out_size, align_corners):
    """TF's CalculateResizeScale, in float32."""
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _source_positions(xp, in_size, out_size, mode=LEGACY, nearest=False):
    """Where each output pixel reads, in float32 as TensorFlow computes it:
    i * scale, or (i + 0.5) * scale (- 0.5 for bilinear) with half-pixel
    centres (TF's LegacyScaler, HalfPixelScaler(ForNN))."""
    align_corners, half_pixel = mode
    scale = _scale(in_size, out_size, align_corners)
    pixels = xp.arange(out_size, dtype=np.float32)
    if not half_pixel:
        return pixels * scale
    centres = (pixels + np.float32(0.5)) * scale
    return centres if nearest else centres - np.float32(0.5)


def _bilinear_matrix(xp, in_size, out_size, dtype, mode=LEGACY):
    """[out_size, in_size]: weight 1 - f on the pixel below each position and
    f on the one above (the same pixel at the last row: weights add to 1);
    positions below 0 (half-pixel centres) read pixel 0, as TF's kernel."""
    position = _source_positions(xp, in_size, out_size, mode)
    floor = xp.floor(position)
    fraction = (position - floor).astype(dtype).reshape(-1, 1)
    below = xp.maximum(floor, 0).astype(np.int64).reshape(-1, 1)
    above = xp.minimum(xp.ceil(position).astype(np.int64).reshape(-1, 1), in_size - 1)
    pixels = xp.arange(in_size).reshape(1, -1)
    return (below == pixels) * (1 - fraction) + (above == pixels) * fraction


def _nearest_pixels(xp, in_size, out_size, mode=LEGACY):
    """TF's nearest pixel: the position rounded (half away from zero) with
    align_corners, else its floor; within [0, in_size - 1]."""
    position = _source_positions(xp, in_size, out_size, mode, nearest=True)
    picked = xp.floor(position + np.float32(0.5)) if mode[0] else xp.floor(position)
    return xp.clip(picked.astype(np.int64), 0, in_size - 1)


def _nearest_matrix(xp, in_size, out_size, dtype, mode=LEGACY):
    pixels = xp.arange(in_size).reshape(1, -1)
    return (_nearest_pixels(xp, in_size, out_size, mode).reshape(-1, 1) ==
            pixels).astype(dtype)


def _mode(ctx):
    return (ctx.attrs.get("align_corners", False), ctx.attrs.get("half_pixel_centers", False))


def _cached(make):
    """``make(xp, in_size, out_size, dtype)`` remembered per arguments: a
    kernel builds its matrices once per input size, on its own device."""
    return functools.lru_cache(maxsize=16)(make)


def _separable(xp, images, rows, columns):
    """out[b, i, j, c] = sum over y, x of rows[i, y] * columns[j, x] * images[b, y, x, c]."""
    batch, height, width, channels = images.shape
    tall = xp.matmul(rows, images.reshape(batch, height, width * channels))
    return xp.matmul(columns, tall.reshape(batch, rows.shape[0], width, channels))


def _resize_bilinear(xp, ctx):
    out_height, out_width = ctx.attrs["size"]
    matrix, mode = _cached(_bilinear_matrix), _mode(ctx)

    def resize(images):
        height, width = images.shape[1:3]
        floats = images.astype(np.float32, copy=False)
        return _separable(xp, floats, matrix(xp, height, out_height, np.float32, mode),
                          matrix(xp, width, out_width, np.float32, mode))
    return resize


def _resize_nearest(xp, ctx):
    out_height, out_width = ctx.attrs["size"]
    mode = _mode(ctx)

    def resize(images):
        height, width = images.shape[1:3]
        rows = xp.take(images, _nearest_pixels(xp, height, out_height, mode), axis=1)
        return xp.take(rows, _nearest_pixels(xp, width, out_width, mode), axis=2)
    return resize


def _resize_grad(xp, make_matrix, ctx):
    """(grad, images) -> the images' gradient: the resize's transpose."""
    matrix, mode = _cached(make_matrix), _mode(ctx)
    dtype = ctx.output_dtypes[0]

    def resize_grad(grad, images):
        (height, width), (out_height, out_width) = images.shape[1:3], grad.shape[1:3]
        rows = matrix(xp, height, out_height, grad.dtype, mode).T
        columns = matrix(xp, width, out_width, grad.dtype, mode).T
        return _separable(xp, grad, rows, columns).astype(dtype, copy=False)
    return resize_grad
