"""Window geometry shared by convolution and pooling: where each of a
window's KH*KW taps reads, with TensorFlow's SAME/VALID padding."""

import functools
from typing import NamedTuple

import numpy as np

from .. import errors

PADDINGS = ("SAME", "VALID")


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
        return _valid_output_size(size, window, stride), 0, 0
    out = -(-size // stride)
    pad_total = max((out - 1) * stride + window - size, 0)
    return out, pad_total // 2, pad_total - pad_total // 2


def _valid_output_size(size, window, stride):
    """TensorFlow's kernels' VALID size, (size - window + stride) / stride with C's
    division (toward zero): 0, an empty result, when the window exceeds the input
    by less than the stride; InvalidArgumentError when below 0."""
    numerator = size - window + stride
    out = numerator // stride if numerator >= 0 else -(-numerator // stride)
    if out < 0:
        raise errors.InvalidArgumentError(   # tensorflow/core/framework/kernel_shape_util.cc
            None, None, f"Computed output size would be negative: {out} [input_size: "
            f"{size}, effective_filter_size: {window}, stride: {stride}]")
    return out


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
    tiles = (kh, kw) == (sh, sw) and (top, bottom, left, right) == (0, 0, 0, 0) \
        and out_h * out_w > 0      # no window at all: nothing tiles (kernels return empty)
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


