"""Pooling kernels (max and average, NHWC, SAME/VALID), written against ``xp``:
loops over the window's taps, never over pixels; max pool records which taps
hold each window's maximum so the gradient routes to the first one cheaply."""


import numpy as np

from . import native, output_used
from .cpu_threads import split
from .window_geometry import _add_into, _layout_maker

# -- pooling -------------------------------------------------------------------------


def _pool_kernels(xp, parallel):
    def max_pool(ctx):
        layout_of, dtype = _layout_maker(ctx.attrs), np.dtype(ctx.output_dtypes[0])
        lowest = -np.inf if dtype.kind == "f" else np.iinfo(dtype).min   # padding never wins
        if not output_used(ctx, 1):      # no gradient reads the winners (inference)
            return lambda x: (_max_pool_only(xp, parallel, x, layout_of(x.shape), lowest), None)
        return lambda x: _max_pool_with_winner(xp, parallel, x, layout_of(x.shape), lowest)

    def max_pool_grad(ctx):
        layout_of = _layout_maker(ctx.attrs)
        return lambda x, winner, grad: _max_pool_grad(xp, parallel, x, winner, grad,
                                                      layout_of(x.shape))

    def max_pool_grad_grad(ctx):
        layout_of = _layout_maker(ctx.attrs)
        return lambda x, winner, grad: _max_pool_grad_grad(xp, winner, grad,
                                                           layout_of(x.shape))

    def max_pool_grad_relu(ctx):
        """MaxPoolGrad → ReluGrad(·, x) as one kernel (see towerflow.fusion): the
        cell a window's gradient goes to equals the window's max, so the
        gradient is masked by ``max > 0`` before routing, on a pooled-size array."""
        layout_of = _layout_maker(ctx.attrs)

        def grad_fn(x, winner, grad, pooled):
            return (_max_pool_grad(xp, parallel, x, winner, grad, layout_of(x.shape),
                                   relu_output=pooled),)
        return grad_fn

    def avg_pool(ctx):
        layout_of, dtype, scales = _layout_maker(ctx.attrs), ctx.output_dtypes[0], {}

        def pool(x):
            lay = layout_of(x.shape)
            if not lay.taps:    # a VALID window larger than the input: no window
                return xp.zeros((x.shape[0], lay.out_h, lay.out_w, x.shape[3]), x.dtype)
            total = _reduce_taps(xp, xp.add, x, lay, 0)
            total *= _window_scale(xp, lay, dtype, scales)
            return total
        return pool

    def avg_pool_grad(ctx):
        layout_of, dtype, scales = _layout_maker(ctx.attrs), ctx.output_dtypes[0], {}

        def grad_fn(x, grad):
            lay = layout_of(x.shape)
            if not lay.taps:
                return xp.zeros(x.shape, grad.dtype)
            if lay.tiles:
                return _avg_pool_grad_tiles(xp, grad, x.shape, lay)
            share = grad * _window_scale(xp, lay, dtype, scales)
            dx = xp.zeros(x.shape, grad.dtype)
            for tap in lay.taps:
                _add_into(dx[tap.in_index], share[tap.out_index])
            return dx
        return grad_fn

    return {"MaxPool": max_pool, "MaxPoolGrad": max_pool_grad,
            "MaxPoolGradGrad": max_pool_grad_grad,
            "_MaxPoolGradRelu": max_pool_grad_relu,
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


def _by_images(xp, parallel, n, elements, work, compiled=False):
    """``work(start, stop)`` over ranges of the batch's images, one per worker;
    ``compiled``: each range only calls a compiled kernel (see
    cpu_threads.Serial.run_compiled)."""
    parts = parallel.parts(n, elements)
    if parts == 1:
        work(0, n)
        return
    ranges = split(n, parts)
    run = parallel.run_compiled if compiled else parallel.run
    run(lambda index: work(*ranges[index]), parts)


def _max_pool_with_winner(xp, parallel, x, lay, lowest):
    """(max over each window, which taps of the window hold that maximum).

    The second output is a bit mask (bit k: tap k, row-major, equals the max);
    the gradient picks the lowest set bit, TensorFlow's first maximum. With
    more than 64 taps it is the index of the first maximum instead.

    NOTE: recording the maxima here keeps the backward pass to cheap integer
    ops on small arrays; rediscovering them from x and y there was slow
    exactly where ties are common (after a ReLU)."""
    n, _, _, c = x.shape
    out = xp.empty((n, lay.out_h, lay.out_w, c), x.dtype)
    code = xp.empty(out.shape, winner_dtype(lay))
    if not lay.taps:    # a VALID window larger than the input: no window
        return out, code

    def work(start, stop):
        images = slice(start, stop)
        max_pool_block(xp, x[images], lay, lowest, out[images], code[images])
    _by_images(xp, parallel, n, x.size, work)
    return out, code


def max_pool_block(xp, x, lay, lowest, out, code):
    """MaxPool of a block of images into ``out``, its winners into ``code``."""
    if native.max_pool(x, lay, out, code):
        return
    _window_max(xp, x, lay, lowest, out)
    if code.dtype == np.int32:
        code[...] = _first_max_index(xp, x, out, lay)
    else:
        _winner_bits(xp, x, lay, out, code)


def winner_dtype(lay):
    """The dtype of MaxPool's winners: a bit per tap, or an index past 64 taps."""
    return _CODE_DTYPES.get(max(8, 1 << (len(lay.taps) - 1).bit_length()), np.int32)


def _max_pool_only(xp, parallel, x, lay, lowest):
    """The max over each window, without recording which tap holds it."""
    n, _, _, c = x.shape
    out = xp.empty((n, lay.out_h, lay.out_w, c), x.dtype)
    if not lay.taps:
        return out

    def work(start, stop):
        if not native.max_pool(x[start:stop], lay, out[start:stop]):
            _window_max(xp, x[start:stop], lay, lowest, out[start:stop])
    _by_images(xp, parallel, n, x.size, work)
    return out


_CODE_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _window_max(xp, x, lay, lowest, out):
    """out = the max of every window over its real cells (padding never wins)."""
    taps = lay.taps
    if len(taps) > 1 and taps[0].full and taps[1].full:
        xp.maximum(x[taps[0].in_index], x[taps[1].in_index], out=out)
        taps = taps[2:]
    elif taps and taps[0].full:
        out[...] = x[taps[0].in_index]
        taps = taps[1:]
    else:
        out.fill(lowest)
    for tap in taps:
        region = out[tap.out_index]
        xp.maximum(region, x[tap.in_index], out=region)


def _winner_bits(xp, x, lay, out, code):
    """code = the bit mask of the taps equal to each window's max."""
    hit = xp.empty(out.shape, bool)
    if code.dtype != np.uint8:
        code.fill(0)
        for bit, tap in enumerate(lay.taps):
            region, hit_region = code[tap.out_index], hit[tap.out_index]
            xp.equal(x[tap.in_index], out[tap.out_index], out=hit_region)
            region += hit_region.astype(code.dtype) * code.dtype.type(1 << bit)
        return
    # NOTE: Horner's rule from the last tap (code = 2 * code + hit): array-array
    # adds run vectorised, shifts by a scalar did not. A bool array is a uint8
    # array of 0s and 1s.
    hits = hit.view(np.uint8)
    code.fill(0)
    for position in reversed(range(len(lay.taps))):
        tap = lay.taps[position]
        if position < len(lay.taps) - 1:
            xp.add(code, code, out=code)
        region, hit_region = code[tap.out_index], hits[tap.out_index]
        xp.equal(x[tap.in_index], out[tap.out_index], out=hit[tap.out_index])
        xp.add(region, hit_region, out=region)


def _first_max_index(xp, x, out, lay):
    """Index of each window's first maximum (for windows of more than 64 taps)."""
    index = xp.full(out.shape, len(lay.taps), np.int32)
    for position in reversed(range(len(lay.taps))):
        tap = lay.taps[position]
        xp.copyto(index[tap.out_index], position, where=x[tap.in_index] == out[tap.out_index])
    return index


def _max_pool_grad(xp, parallel, x, code, grad, lay, relu_output=None):
    """Each window's gradient to its first maximum; overlapping windows add up.
    An infinite gradient is selected, never multiplied (inf * 0 would be NaN):
    on the CPU the image blocks multiply, each checking its gradient is finite,
    and if one is not, all are done again by selecting; on a GPU all select.
    Given ``relu_output`` (the pooled maxima), each block's gradient is first
    masked by ``relu_output > 0`` as ReluGrad masks it (multiplying, as
    TensorFlow's ReluGrad does). Tiling windows go to the compiled kernel
    where it is built (native.py)."""
    if not lay.taps:    # no window: nothing flows back
        return xp.zeros(x.shape, grad.dtype)
    dx = xp.empty(x.shape, grad.dtype)
    if native.max_pool_grad_applies(code, grad, lay, dx, relu_output):
        _by_images(xp, parallel, x.shape[0], x.size, lambda start, stop: native.max_pool_grad(
            code[start:stop], grad[start:stop], lay, dx[start:stop],
            None if relu_output is None else relu_output[start:stop]), compiled=True)
        return dx
    exact_cover = lay.tiles and (lay.out_h * lay.window[0], lay.out_w * lay.window[1]) == \
        tuple(x.shape[1:3])
    if not exact_cover:
        dx.fill(0)
    infinite = []
    # NOTE: on a GPU each block's check would wait for the device (and break
    # CUDA-graph capture): CuPy selects from the start instead.
    check_finite = xp is np

    def work(start, stop, finite=check_finite):
        images = slice(start, stop)
        block = grad[images]
        if relu_output is not None:
            block = block * (relu_output[images] > 0)
        if finite and not bool(xp.isfinite(block.sum())):
            infinite.append(start)
            return
        _route_to_first_max(xp, code[images], block, lay, dx[images], exact_cover, finite)
    _by_images(xp, parallel, x.shape[0], x.size, work)
    if infinite:
        if not exact_cover:
            dx.fill(0)
        _by_images(xp, parallel, x.shape[0], x.size,
                   lambda start, stop: work(start, stop, finite=False))
    return dx


def _route_to_first_max(xp, code, grad, lay, dx, exact_cover, finite):
    if code.dtype != np.int32:          # isolate the lowest set bit: the first maximum
        code = code & xp.negative(code)
    for position, tap in enumerate(lay.taps):
        first = code[tap.out_index] == code.dtype.type(
            position if code.dtype == np.int32 else 1 << position)
        if exact_cover and finite:
            xp.multiply(grad[tap.out_index], first, out=dx[tap.in_index])
            continue
        routed = grad[tap.out_index] * first if finite else \
            xp.where(first, grad[tap.out_index], 0)
        if exact_cover:
            dx[tap.in_index] = routed
        else:
            _add_into(dx[tap.in_index], routed)


def _max_pool_grad_grad(xp, code, grad, lay):
    """MaxPoolGrad's transpose: each window takes the cell of ``grad`` at its
    first maximum (an input-shaped ``grad`` to a pooled-shaped result).
    Copied, never multiplied by a mask, so an infinite cell stays where it is."""
    out = xp.zeros(code.shape, grad.dtype)
    if code.dtype != np.int32:          # isolate the lowest set bit: the first maximum
        code = code & xp.negative(code)
    for position, tap in enumerate(lay.taps):
        first = code[tap.out_index] == code.dtype.type(
            position if code.dtype == np.int32 else 1 << position)
        xp.copyto(out[tap.out_index], grad[tap.in_index], where=first)
    return out


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


