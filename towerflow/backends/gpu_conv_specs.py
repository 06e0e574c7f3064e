"""The GPU convolution kernels (see cupy_conv.py): im2col and col2im, each
one pass over memory, as CUDA source with a NumPy reference apiece.

Layouts (channels-last, as everywhere in towerflow):

- ``x`` / ``dx``: [N, H, W, C];
- ``patches`` / ``columns``: [N * OH * OW, KH * KW * C], row (n, p, q),
  column (i, j, c): the value under tap (i, j) of output (p, q)'s window,
  channel c, or 0 where the window hangs over the padding. This is the
  C-ordered im2col matrix of nn_kernels._im2col.

Output (p, q) reads input row ``p * stride_h - pad_top + i`` and column
``q * stride_w - pad_left + j`` through tap (i, j) (TensorFlow's SAME/VALID
geometry, window_geometry._layout).

im2col writes each element of ``patches`` once; col2im writes each element
of ``dx`` once, the sum of the columns that read it, added tap by tap in
row-major tap order (so the reference adds in the same order and, in
float32, gets the same bits). One block per output row of an image
(im2col) or input row (col2im): the rows of its elements are contiguous, so
a warp reads and writes consecutive addresses.
"""

import numpy as np

from .kernel_specs import BITS_TYPES, RawKernelSpec

BLOCK = 256
_GEOMETRY = ("int height, int width, int channels, int window_h, int window_w, "
             "int stride_h, int stride_w, int pad_top, int pad_left, int out_h, int out_w")


def _padded_extent(size, window, stride, pad_before, out):
    """Cells a padded axis needs so that every window's taps are inside it."""
    return max(pad_before + size, (out - 1) * stride + window) if out > 0 else pad_before + size


def _tap_slice(offset, stride, out):
    return slice(offset, offset + (out - 1) * stride + 1, stride)


def _padded_like(images, pads, window, strides, outs):
    n, height, width, channels = images.shape
    rows = _padded_extent(height, window[0], strides[0], pads[0], outs[0])
    cols = _padded_extent(width, window[1], strides[1], pads[1], outs[1])
    return np.zeros((n, rows, cols, channels), images.dtype)


def im2col_reference(x, patches, height, width, channels, window_h, window_w, stride_h,
                     stride_w, pad_top, pad_left, out_h, out_w):
    """What towerflow_im2col writes to ``patches``."""
    images = x.reshape(-1, height, width, channels)
    window, strides, outs = (window_h, window_w), (stride_h, stride_w), (out_h, out_w)
    padded = _padded_like(images, (pad_top, pad_left), window, strides, outs)
    padded[:, pad_top:pad_top + height, pad_left:pad_left + width] = images
    grid = patches.reshape(images.shape[0], out_h, out_w, window_h, window_w, channels)
    for i in range(window_h):
        for j in range(window_w):
            grid[:, :, :, i, j] = padded[:, _tap_slice(i, stride_h, out_h),
                                         _tap_slice(j, stride_w, out_w)]


def col2im_reference(columns, dx, height, width, channels, window_h, window_w, stride_h,
                     stride_w, pad_top, pad_left, out_h, out_w):
    """What towerflow_col2im writes to ``dx``: taps added in row-major order."""
    images = dx.reshape(-1, height, width, channels)
    window, strides, outs = (window_h, window_w), (stride_h, stride_w), (out_h, out_w)
    padded = _padded_like(images, (pad_top, pad_left), window, strides, outs)
    grid = columns.reshape(images.shape[0], out_h, out_w, window_h, window_w, channels)
    for i in range(window_h):
        for j in range(window_w):
            padded[:, _tap_slice(i, stride_h, out_h), _tap_slice(j, stride_w, out_w)] += \
                grid[:, :, :, i, j]
    images[...] = padded[:, pad_top:pad_top + height, pad_left:pad_left + width]


IM2COL = RawKernelSpec(
    "towerflow_im2col", "const T* x, T* patches, " + _GEOMETRY,
    """    // One block per (image, output row p): its out_w patch rows are contiguous.
    const int image = blockIdx.x / out_h;
    const int p = blockIdx.x - image * out_h;
    const int depth = window_h * window_w * channels;
    const int count = out_w * depth;
    const long long image_base = (long long)image * height * width * channels;
    T* out = patches + (long long)blockIdx.x * count;
    for (int e = threadIdx.x; e < count; e += blockDim.x) {
        const int q = e / depth;
        const int column = e - q * depth;
        const int tap = column / channels;
        const int c = column - tap * channels;
        const int i = tap / window_w;
        const int j = tap - i * window_w;
        const int row = p * stride_h - pad_top + i;
        const int col = q * stride_w - pad_left + j;
        T value = 0;
        if (row >= 0 && row < height && col >= 0 && col < width) {
            value = x[image_base + ((long long)row * width + col) * channels + c];
        }
        out[e] = value;
    }""",
    im2col_reference, types=BITS_TYPES)


COL2IM = RawKernelSpec(
    "towerflow_col2im", "const T* columns, T* dx, " + _GEOMETRY,
    """    // One block per (image, input row h): dx's row of width * channels values.
    const int image = blockIdx.x / height;
    const int h = blockIdx.x - image * height;
    const int depth = window_h * window_w * channels;
    const int count = width * channels;
    const long long image_rows = (long long)image * out_h;
    T* out = dx + (long long)blockIdx.x * count;
    for (int e = threadIdx.x; e < count; e += blockDim.x) {
        const int w = e / channels;
        const int c = e - w * channels;
        T total = 0;
        for (int i = 0; i < window_h; ++i) {
            const int row_offset = h + pad_top - i;       // p * stride_h if output p reads h
            if (row_offset < 0 || row_offset % stride_h != 0) continue;
            const int p = row_offset / stride_h;
            if (p >= out_h) continue;
            for (int j = 0; j < window_w; ++j) {
                const int col_offset = w + pad_left - j;
                if (col_offset < 0 || col_offset % stride_w != 0) continue;
                const int q = col_offset / stride_w;
                if (q >= out_w) continue;
                total += columns[((image_rows + p) * out_w + q) * depth
                                 + (i * window_w + j) * channels + c];
            }
        }
        out[e] = total;
    }""",
    col2im_reference)


def geometry_args(x_shape, lay):
    """The geometry arguments of both kernels for images of ``x_shape`` and a
    window_geometry layout ``lay``::

        launcher.raw(IM2COL, n * lay.out_h, BLOCK, x=x, patches=patches,
                     **geometry_args(x.shape, lay))
    """
    _, height, width, channels = x_shape
    (window_h, window_w), (stride_h, stride_w) = lay.window, lay.strides
    top, _, left, _ = lay.pads
    return {"height": height, "width": width, "channels": channels,
            "window_h": window_h, "window_w": window_w, "stride_h": stride_h,
            "stride_w": stride_w, "pad_top": top, "pad_left": left,
            "out_h": lay.out_h, "out_w": lay.out_w}
