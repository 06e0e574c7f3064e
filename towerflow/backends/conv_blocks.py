"""Convolutions on the compiled path (native.py), in blocks of images that fit
in a core's cache, each thread taking its part of the batch: im2col then one
GEMM per block, or Winograd for stride-1 3x3 and 5x5 windows (winograd.py); the
input gradient as one wide GEMM per block then col2im, or Winograd; the
filter gradient from Winograd's kept input tiles. nn_kernels.py chooses
these where native.float_arrays accepts the arrays (C-contiguous float32 or
float64 NumPy arrays).
"""

import os

import numpy as np

from . import native, winograd
from .cpu_threads import split

# Bytes of im2col patches per cache block (about an L2 cache), unless
# TOWERFLOW_CACHE_BLOCK_BYTES says otherwise (0: no blocks, each thread's
# part in one piece; read per call, so tests can switch it).
_CACHE_BLOCK_BYTES = 1 << 20


def im2col_matmul_cached(xp, parallel, x, w2d, lay, finish, parts, keep_product=True,
                          keep_patches=True):
    """nn_kernels' ``_im2col_matmul`` with the compiled im2col, in blocks of images
    whose patches fit in a core's cache: each block's GEMM reads its patches,
    and ``finish`` its rows, while they are still cached (the whole-part
    patches of the NumPy path would be out of cache by then). A stride-1 3x3
    convolution of enough channels runs by Winograd instead (see
    winograd.py), with no im2col: its "patches" are the transformed input
    tiles the filter gradient reads. Whatever is not kept (``keep_product``,
    ``keep_patches``) goes to one cached buffer per thread, reused block
    after block, and comes back as None."""
    n = x.shape[0]
    rows_per_image, depth, width = lay.out_h * lay.out_w, w2d.shape[0], w2d.shape[1]
    dtype = xp.result_type(x, w2d)
    y = xp.empty((n * rows_per_image, width), dtype) if keep_product else None
    fast = _winograd_forward(x, w2d, lay, parallel)
    # Winograd keeps its transformed inputs for the filter gradient in the
    # patches output instead of im2col's patches (see WinogradConv.kept_inputs)
    patches, kept = fast.kept_inputs(n) if fast is not None and keep_patches else \
        (None, None)
    if keep_patches and kept is None:
        patches = xp.empty((n * rows_per_image, depth), x.dtype)
    per_block = _images_per_cache_block(
        rows_per_image * depth * x.itemsize if fast is None else fast.bytes_per_image())
    ranges = split(n, parts)
    compiled_loop = fast is not None and finish is None and keep_product

    def part(index):
        first, last = ranges[index]
        block_rows = min(per_block, last - first) * rows_per_image
        patch_scratch = None if keep_patches or fast is not None else \
            xp.empty((block_rows, depth), x.dtype)
        product_scratch = None if keep_product else xp.empty((block_rows, width), dtype)
        # the compiled loop transforms each block into the workspace, then copies
        # it to the kept tiles; block by block, the transform writes there itself
        workspace = None if fast is None else \
            fast.workspace(min(per_block, last - first), with_inputs=kept is None or compiled_loop)
        if compiled_loop:
            rows = slice(first * rows_per_image, last * rows_per_image)
            fast.over_blocks(x[first:last], y[rows], workspace,
                             _block_images(first, last, per_block), kept, first)
            return
        for start, stop in _cache_blocks(first, last, per_block):
            rows = slice(start * rows_per_image, stop * rows_per_image)
            count = (stop - start) * rows_per_image
            product = y[rows] if keep_product else product_scratch[:count]
            if fast is not None:
                fast(x[start:stop], product, workspace, kept, start)
            else:
                block_patches = patches[rows] if keep_patches else patch_scratch[:count]
                _compiled(native.im2col(x[start:stop], lay, block_patches), "im2col", x.dtype)
                _matmul(xp, block_patches, w2d, product)
            if finish is not None:
                finish(product, slice(start, stop))
    # only compiled calls in a part (they record, see run_compiled): Winograd's one
    # loop, or im2col and the compiled GEMM block by block, with no finish
    compiled = fast.loops_compiled(x, y, kept) if compiled_loop else \
        fast is None and finish is None and native.float_arrays(x, w2d) and \
        native.gemm_takes(width, w2d)
    _run_parts(parallel, part, parts, n * rows_per_image * depth * width, compiled)
    return patches, y


def _winograd_forward(x, w2d, lay, parallel):
    """The Winograd form of the convolution of ``x`` by ``w2d`` (the [KH*KW*C,
    O] filter), or None where it does not apply (see winograd.applies)."""
    channels = x.shape[3]
    if not winograd.applies(x, w2d, lay, channels, lay.out_h, lay.out_w):
        return None
    top, _, left, _ = lay.pads
    return winograd.WinogradConv(w2d.reshape(tuple(lay.window) + (channels, -1)), top, left,
                                 lay.out_h, lay.out_w, parallel)


def matmul_col2im_cached(xp, parallel, x_shape, grad2d, lay, w):
    """dx by the compiled col2im, in blocks of images whose patch gradient
    (grad rows @ w2d.T) fits in a core's cache: one GEMM per block, as wide
    as the whole filter (the by-tap path's GEMMs are one tap wide each)."""
    n = x_shape[0]
    rows_per_image, depth = lay.out_h * lay.out_w, w.shape[0] * w.shape[1] * w.shape[2]
    w2d_t = xp.ascontiguousarray(w.reshape(depth, -1).T)
    flops = grad2d.shape[0] * grad2d.shape[1] * depth
    ranges = split(n, parallel.compiled_parts(n, flops))
    per_block = _images_per_cache_block(rows_per_image * depth * grad2d.itemsize)
    dx = xp.empty(x_shape, grad2d.dtype)

    def part(index):
        first, last = ranges[index]
        columns = xp.empty((min(per_block, last - first) * rows_per_image, depth), dx.dtype)
        for start, stop in _cache_blocks(first, last, per_block):
            block = columns[:(stop - start) * rows_per_image]
            _matmul(xp, grad2d[start * rows_per_image:stop * rows_per_image], w2d_t, block)
            _compiled(native.col2im(block, lay, dx[start:stop]), "col2im", dx.dtype)
    _run_parts(parallel, part, len(ranges), flops,
               native.gemm_takes(depth, grad2d, w2d_t) and native.accepts(dx))
    return dx


def winograd_input_gradient(xp, parallel, x_shape, grad2d, lay, w):
    """dx of a stride-1 3x3 or 5x5 convolution as the Winograd convolution of the
    output gradient (see WinogradConv.for_input_gradient), in cache blocks of
    images, each written straight into its slice of dx."""
    n = x_shape[0]
    conv = winograd.WinogradConv.for_input_gradient(w, lay, x_shape, parallel)
    grad = grad2d.reshape(n, lay.out_h, lay.out_w, w.shape[3])
    flops = grad2d.shape[0] * grad2d.shape[1] * w.shape[0] * w.shape[1] * w.shape[2]
    ranges = split(n, parallel.compiled_parts(n, flops))
    per_block = _images_per_cache_block(conv.bytes_per_image())
    dx = xp.empty(x_shape, grad2d.dtype)

    def part(index):
        first, last = ranges[index]
        workspace = conv.workspace(min(per_block, last - first))
        conv.over_blocks(grad[first:last], dx[first:last], workspace,
                         _block_images(first, last, per_block))
    _run_parts(parallel, part, len(ranges), flops, conv.loops_compiled(grad, dx))
    return dx


# The filter gradient's blocks are cache blocks too, so that the GEMMs read the
# gradient tiles their transform just wrote (with the compiled GEMM, 1 MiB
# blocks took 10-25% less time than 16 MiB ones on the cifar10 network's 32-,
# 64- and 128-channel layers).


def winograd_filter_gradient(parallel, kept, grad, algorithm):
    """dW [K, K, C, O] from the ``kept`` Winograd inputs [tiles, 36, C] of the
    forward pass and the output gradient: each block of images adds its tile
    products, the threads' sums are added in part order (a fixed order) by
    the filter transform as it reads them (see winograd.py)."""
    grad = np.ascontiguousarray(grad)
    n = grad.shape[0]
    flops = kept.shape[0] * kept.shape[1] * kept.shape[2] * grad.shape[3]
    ranges = split(n, parallel.compiled_parts(n, flops))
    per_block = _images_per_cache_block(winograd.grad_bytes_per_image(grad, algorithm))
    sums = np.zeros((len(ranges), winograd.TERMS, kept.shape[2], grad.shape[3]), grad.dtype)

    def part(index):
        first, last = ranges[index]
        workspace = winograd.grad_workspace(grad, min(per_block, last - first), algorithm)
        winograd.add_tile_products_over_blocks(kept, grad[first:last], first, workspace,
                                               sums[index], algorithm,
                                               _block_images(first, last, per_block))
    _run_parts(parallel, part, len(ranges), flops, native.winograd_grad_sums_applies(grad, kept))
    return winograd.filter_gradient(sums, algorithm, parallel)


def _matmul(xp, a, b, out):
    """out = a @ b, by the compiled GEMM where it takes the arrays (about 2x
    OpenBLAS's single-threaded speed on these thin products, see native.py)."""
    if not (native.vector_columns(out.shape[1], out.dtype) and native.gemm(a, b, out)):
        xp.matmul(a, b, out=out)


def _images_per_cache_block(bytes_per_image):
    """Images whose patches (or patch gradient) fill about the cache block's
    bytes (see _CACHE_BLOCK_BYTES); with blocks off, any number."""
    block_bytes = _cache_block_bytes()
    if block_bytes == 0:
        return 1 << 62
    return max(1, block_bytes // max(bytes_per_image, 1))


def _cache_block_bytes():
    setting = os.environ.get("TOWERFLOW_CACHE_BLOCK_BYTES", "")
    try:
        block_bytes = int(setting) if setting else _CACHE_BLOCK_BYTES
    except ValueError:
        block_bytes = -1
    if block_bytes < 0:
        raise ValueError(f"TOWERFLOW_CACHE_BLOCK_BYTES must be a number of bytes >= 0 "
                         f"(0: no cache blocks); got {setting!r}")
    return block_bytes


def _cache_blocks(first, last, per_block):
    """(start, stop) of the blocks of ``per_block`` images in [first, last)."""
    if last - first <= per_block:
        return ((first, last),) if last > first else ()
    return _several_blocks(first, last, per_block)


def _block_images(first, last, per_block):
    """Images per block of the compiled loops over images first..last: the
    first of :func:`_cache_blocks`'s blocks (all but the last are that size)."""
    blocks = _cache_blocks(first, last, per_block)
    return blocks[0][1] - blocks[0][0] if blocks else 1


def _several_blocks(first, last, per_block):
    return [(start, min(start + per_block, last)) for start in range(first, last, per_block)]


def _compiled(done, kernel, dtype):
    """Check that a compiled kernel ran: callers chose the compiled path by
    native.float_arrays, so a refusal would leave its output unwritten."""
    if not done:
        raise RuntimeError(f"the compiled {kernel} refused {dtype} blocks")


def _run_parts(parallel, part, parts, flops, compiled=False):
    """``part(i)`` for each part on the pool (``compiled``: a part only makes
    one compiled call that records, see cpu_threads.Serial.run_compiled); one
    part alone may use several BLAS threads for its GEMMs instead."""
    if parts > 1:
        (parallel.run_compiled if compiled else parallel.run)(part, parts)
        return
    with parallel.blas_threads(flops):
        part(0)
