"""Winograd F(4x4, 3x3) and F(2x2, 5x5) for stride-1 3x3 and 5x5 convolutions
on the compiled path.

A 3x3 convolution computed as im2col then one GEMM does 9*C multiply-adds
per output and channel. Winograd's minimal filtering (Lavin and Gray, "Fast
Algorithms for Convolutional Neural Networks", 2015) computes each 4x4 tile
of outputs from its 6x6 input window d as A^T [(G g G^T) * (B^T d B)] A:
the product is taken term by term, so over the input channels it is 36
GEMMs ``U[:, k] @ V[k]`` ([tiles, C] @ [C, O]) with 36 multiplies per 16
outputs instead of 144. The transforms of d and of the product only add and
scale, and the GEMMs run on a register-blocked kernel (``native_gemm.c``); the
filter's transform, V, is small and made here once per call.

A 5x5 convolution runs as F(2x2, 5x5) with the same interpolation points (0,
1, -1, 2, -2 and infinity): a tile's window is 6x6 again, so B^T, the
[tiles, 36, C] layout and the 36 GEMMs are F(4x4, 3x3)'s; the tiles step by
2 outputs (their windows overlap by 4), A^T is 2x6 and G 6x5 (both below:
the points' powers). 36 multiplies per 4 outputs instead of 100; the
transforms cost 4 times as much per output as F(4x4, 3x3)'s.

Layout: transformed tiles are tile-major, [tiles, 36, C]: a tile's 36 terms
are written as one contiguous run (term-major [36, tiles, C] scattered each
tile over 36 places: the input transform took 25% and the gradient tiles'
60% more time), and the GEMMs, which take a term's rows 36 * C apart, run on
blocks of tiles small enough to stay in cache.

The input gradient of a stride-1 convolution is itself one: the output
gradient convolved with the filter turned by 180 degrees and its channel
axes swapped, so :class:`WinogradConv` serves Conv2D and Conv2DBackpropInput.
The filter gradient is the forward pass transposed: G^T [(A e A^T) * U] G
summed over the tiles, where e is a tile of the output gradient and U the
transformed input the forward pass made (Conv2D keeps it for this instead
of its im2col patches: 2.25 times the input's size for F(4x4, 3x3), 9 times
for F(2x2, 5x5), whose im2col patches are 25 times): 36 GEMMs [C, tiles] @
[tiles, O] (see :func:`filter_gradient`).

Rounding: F(4x4, 3x3)'s float32 outputs differ from the direct sum by a few
1e-6 of the largest output (B's and A's entries up to 8 scale rounding
errors up), where im2col's GEMM differs by about 1e-7. F(2x2, 5x5)'s A has
entries up to 2 only, but its G has 2/3 and sums 25 taps: measured on
N(0, 1) inputs and filters of std 1/sqrt(25 C) (C = 32 and 64), its float32
outputs and input gradients are within about 6e-6 of the largest value of the
float64 direct sum and its filter gradients within 1e-5 (F(4x4, 3x3): 1e-5
and 7e-6), im2col's within 1.6e-6 (tests/test_winograd_5x5.py holds all of
them to 2e-5). Training does
not notice (cuDNN and oneDNN use the same transforms);
``TOWERFLOW_WINOGRAD=0`` turns both off.
"""

from typing import NamedTuple

import numpy as np

from .. import switches
from . import native
from .cpu_threads import SERIAL, split

TERMS = 36          # a tile's 6x6 window, and its 36 transformed terms
# Channel pairs per block of the compiled filter transform (native_winograd.c's
# FILTER_BLOCK): its thread parts are whole blocks.
_FILTER_BLOCK = 64


class Algorithm(NamedTuple):
    """One Winograd algorithm F(tile x tile, window x window) on 6x6 input
    windows (B^T and the A^T of each ``tile`` are in native_winograd.c).

    Example:
        >>> ALGORITHMS[5].tile, ALGORITHMS[5].transform.shape
        (2, (6, 5))
    """

    name: str
    window: int                 # filter taps per side
    tile: int                   # outputs per tile side
    transform: np.ndarray       # G [6, window]: V = G g G^T
    min_channels: int           # fewer input channels run as im2col

    def tiles_per_image(self, out_h, out_w):
        """The tiles covering an ``out_h`` x ``out_w`` output (the last ones cropped)."""
        return -(-out_h // self.tile) * -(-out_w // self.tile)


def _filter_transform(window, points=(0, 1, -1, 2, -2), scales=(1 / 4, -1 / 6, -1 / 6,
                                                                 1 / 24, 1 / 24)):
    """G [6, window] for the interpolation points and infinity: row j holds the
    powers of point j times its scale (1 / the product of its differences to
    the other points, the factor B^T leaves out), the last row picks the
    highest tap (the point at infinity)."""
    rows = [[scale * point ** k for k in range(window)] for point, scale in zip(points, scales)]
    return np.array(rows + [[0] * (window - 1) + [1]], dtype=np.float64)


# Fewer input channels than min_channels make the 36 GEMMs too thin to win (a
# first layer's 3 colour channels, say): im2col's single GEMM runs instead.
# F(2x2, 5x5)'s transforms cost 4 times F(4x4, 3x3)'s per output: measured by
# benchmarks/winograd_5x5_threshold.py (50 14x14 images, 64 output channels,
# forward and both gradients on one thread, under load), im2col over Winograd
# was 0.95-0.97x at 16 input channels, 1.12x at 20, 1.3x at 24, 1.4x at 32.
ALGORITHMS = {
    3: Algorithm("F(4x4, 3x3)", 3, 4, _filter_transform(3), 16),
    5: Algorithm("F(2x2, 5x5)", 5, 2, _filter_transform(5), 20),
}


def enabled():
    """Whether Winograd convolutions are on (TOWERFLOW_WINOGRAD, default on)."""
    return switches.on("TOWERFLOW_WINOGRAD")


def algorithm_for(filter_shape):
    """The Algorithm for a [KH, KW, ...] filter, or None (not 3x3 or 5x5)."""
    kh, kw = filter_shape[0], filter_shape[1]
    return ALGORITHMS.get(kh) if kh == kw else None


def applies(x, w, lay, channels, out_h, out_w):
    """Whether a convolution of ``x`` by ``w`` (``lay``: the window geometry)
    runs as Winograd: compiled kernels on, a 3x3 or 5x5 window at stride 1,
    at least the algorithm's min_channels input ``channels`` and a tile's
    worth of output."""
    algorithm = algorithm_for(tuple(lay.window))
    return enabled() and algorithm is not None and native.float_arrays(x, w) and \
        tuple(lay.strides) == (1, 1) and channels >= algorithm.min_channels and \
        out_h >= algorithm.tile and out_w >= algorithm.tile


class WinogradConv:
    """A stride-1 3x3 or 5x5 convolution of NHWC images by a [K, K, C, O]
    filter ``w``, whose output (r, q) reads input rows r - top .. r - top + K
    - 1 and columns q - left .. q - left + K - 1 (zeros outside the input);
    ``out_h`` x ``out_w`` outputs per image.

    Example:
        >>> conv = WinogradConv(np.ones((5, 5, 8, 16), np.float32), 2, 2, 14, 14)
        >>> conv.algorithm.name, conv.tiles_per_image
        ('F(2x2, 5x5)', 49)
    """

    def __init__(self, w, top, left, out_h, out_w, parallel=SERIAL):
        self.algorithm = algorithm_for(w.shape)
        self.channels, self.out_channels = w.shape[2], w.shape[3]
        self.top, self.left, self.out_h, self.out_w = top, left, out_h, out_w
        self.tiles_per_image = self.algorithm.tiles_per_image(out_h, out_w)
        self.dtype = w.dtype
        self.filter = _transformed_filter(w, self.algorithm, parallel)

    @classmethod
    def for_input_gradient(cls, w, lay, x_shape, parallel=SERIAL):
        """dx of the convolution ``lay`` of images of ``x_shape`` by ``w``, as a
        convolution of the output gradient: dx[h] sums grad[h + top - i] *
        w[i], which is the filter turned by 180 degrees at offset K - 1 - top."""
        top, _, left, _ = lay.pads
        turned = w[::-1, ::-1].transpose(0, 1, 3, 2)
        last = w.shape[0] - 1
        return cls(turned, last - top, last - left, x_shape[1], x_shape[2], parallel)

    def bytes_per_image(self):
        """Workspace bytes one image needs (its transformed inputs and products)."""
        return TERMS * self.tiles_per_image * (self.channels + self.out_channels) * \
            self.dtype.itemsize

    def workspace(self, images, with_inputs=True):
        """Buffers for blocks of up to ``images`` images (one per thread):
        (transformed inputs, or None where calls pass ``kept``, products)."""
        tiles = images * self.tiles_per_image
        inputs = np.empty(TERMS * tiles * self.channels, self.dtype) if with_inputs else None
        return inputs, np.empty(TERMS * tiles * self.out_channels, self.dtype)

    def kept_inputs(self, images):
        """(patches, kept): Conv2D's patches output, [rows, K*K*C] as wide as
        im2col's (see :func:`patch_rows`), and ``kept``, the [tiles, 36, C]
        view of its start that the transformed inputs of ``images`` images
        go to, for the filter gradient (see :func:`kept_tiles`)."""
        tiles = images * self.tiles_per_image
        width = self.algorithm.window ** 2 * self.channels
        patches = np.empty((patch_rows(tiles, self.algorithm), width), self.dtype)
        return patches, _tiles_in(patches, tiles, self.channels)

    def __call__(self, x, out, workspace, kept=None, first_image=0):
        """``out`` ([N, out_h, out_w, O], C-contiguous, any shape of that size)
        = the convolution of the images ``x``, through ``workspace``; with
        ``kept`` (from :meth:`kept_inputs`), the transformed inputs go there,
        as those of images ``first_image``.. of the batch."""
        n, tile = x.shape[0], self.algorithm.tile
        tiles = n * self.tiles_per_image
        if kept is None:
            kept, first_tile = workspace[0][:TERMS * tiles * self.channels].reshape(
                tiles, TERMS, self.channels), 0
        else:
            first_tile = first_image * self.tiles_per_image
        products = workspace[1][:TERMS * tiles * self.out_channels].reshape(
            tiles, TERMS, self.out_channels)
        _ran(native.winograd_input(x, self.top, self.left, self.out_h, self.out_w, kept,
                                   first_tile, tile), "input", x)
        if not native.winograd_gemms(kept, first_tile, self.filter, products):
            # output channels not a whole number of vectors: NumPy's GEMMs
            np.matmul(kept[first_tile:first_tile + tiles].transpose(1, 0, 2), self.filter,
                      out=products.transpose(1, 0, 2))
        _ran(native.winograd_output(products, (n, self.out_h, self.out_w, self.out_channels),
                                    out, tile), "output", out)

    def loops_compiled(self, x, out, kept=None):
        """Whether :meth:`over_blocks` makes one compiled call (which records
        under cpu_threads' run_compiled) for these arrays."""
        return native.winograd_conv_applies(x, self.filter, out, kept)

    def over_blocks(self, x, out, workspace, per_block, kept=None, first_image=0):
        """:meth:`__call__` over the images ``x`` in blocks of ``per_block``
        (``out`` and ``kept`` as there; ``workspace`` with its inputs buffer),
        in one compiled call where it applies (the Python loop cost 8 us per
        block, under the GIL)."""
        if native.winograd_conv(x, self.top, self.left, self.out_h, self.out_w, self.filter,
                                workspace[0], workspace[1], out, per_block,
                                self.algorithm.tile, kept, first_image * self.tiles_per_image):
            return
        for start in range(0, x.shape[0], per_block):
            stop = min(start + per_block, x.shape[0])
            self(x[start:stop], _images(out, start, stop, x.shape[0]), workspace, kept,
                 first_image + start)


def _images(array, start, stop, images):
    """Images start..stop of ``array`` (C-contiguous, any shape whose first
    axis is ``images`` images, or a multiple of them: rows of a 2-D view)."""
    per_image = array.shape[0] // images
    return array[start * per_image:stop * per_image]


def patch_rows(tiles, algorithm):
    """Rows of the patches array that holds ``tiles`` kept tiles (36 * C values
    each) in rows of K*K*C values, the last row part unused: 4 per tile for
    F(4x4, 3x3); for F(2x2, 5x5) 36 * tiles / 25 rounded up.
    NOTE: always fewer than im2col's rows, one per output, N*OH*OW (so
    :func:`kept_tiles` tells the two apart by their rows): with OH, OW >= the
    tile, F(4x4, 3x3) has ceil(OH/4) < OH/2 (OH >= 4) so 4 * tiles < N*OH*OW;
    F(2x2, 5x5) has ceil(OH/2) <= 2/3 OH (OH >= 2) so 36 * tiles / 25 <=
    0.64 N*OH*OW, below N*OH*OW - 1 from N*OH*OW >= 3 on (it is >= 4)."""
    return -(-TERMS * tiles // algorithm.window ** 2)


def kept_tiles(patches, grad, filter_shape):
    """The [tiles, 36, C] transformed inputs that ``patches`` (Conv2D's
    second output) holds, or None where they are im2col patches: one row per
    output, as many as ``grad`` [N, OH, OW, O] has (``filter_shape``: the
    [K, K, C, O] filter's)."""
    n, out_h, out_w, _ = grad.shape
    if patches.shape[0] == n * out_h * out_w or not isinstance(patches, np.ndarray):
        return None
    algorithm, channels = algorithm_for(filter_shape), filter_shape[2]
    tiles = n * algorithm.tiles_per_image(out_h, out_w) if algorithm else 0
    expected = (patch_rows(tiles, algorithm), algorithm.window ** 2 * channels) \
        if algorithm else None
    if patches.shape != expected:
        tile_rows = f"{expected[0]} rows" if expected else "none for this filter"
        raise ValueError(f"Conv2DBackpropFilter: patches of shape {patches.shape} are "
                         f"neither im2col patches ({n * out_h * out_w} rows) nor Winograd "
                         f"tiles ({tile_rows}) for a gradient of shape {grad.shape} and a "
                         f"filter of shape {tuple(filter_shape)}")
    return _tiles_in(patches, tiles, channels)


def _tiles_in(patches, tiles, channels):
    """The [tiles, 36, C] view of the start of ``patches`` (see patch_rows)."""
    return patches.reshape(-1)[:TERMS * tiles * channels].reshape(tiles, TERMS, channels)


def add_tile_products(kept, grad, first_image, workspace, sums, algorithm):
    """Add to ``sums`` [36, C, O] the sums over the tiles of images
    ``first_image``.. (``grad`` holds their output gradient) of U^T (A e
    A^T), U the ``kept`` inputs: the filter gradient before
    :func:`filter_gradient`."""
    n, out_h, out_w, out_channels = grad.shape
    per_image = algorithm.tiles_per_image(out_h, out_w)
    tiles = n * per_image
    transformed = workspace[:TERMS * tiles * out_channels].reshape(tiles, TERMS, out_channels)
    _ran(native.winograd_grad_tiles(grad, transformed, algorithm.tile), "gradient", grad)
    first = first_image * per_image
    if not native.winograd_gemms(kept, first, transformed, sums, sums=True):
        # output channels not a whole number of vectors: NumPy's GEMMs
        sums += np.matmul(kept[first:first + tiles].transpose(1, 2, 0),
                          transformed.transpose(1, 0, 2))


def add_tile_products_over_blocks(kept, grad, first_image, workspace, sums, algorithm,
                                  per_block):
    """:func:`add_tile_products` over ``grad``'s images in blocks of
    ``per_block``, in one compiled call where it applies."""
    first_tile = first_image * algorithm.tiles_per_image(grad.shape[1], grad.shape[2])
    if native.winograd_grad_sums(grad, kept, first_tile, workspace, sums, per_block,
                                 algorithm.tile):
        return
    for start in range(0, grad.shape[0], per_block):
        add_tile_products(kept, grad[start:start + per_block], first_image + start, workspace,
                          sums, algorithm)


def grad_workspace(grad, images, algorithm):
    """A buffer for :func:`add_tile_products` over blocks of up to ``images`` images."""
    return np.empty(images * _grad_tile_values(grad, algorithm), grad.dtype)


def grad_bytes_per_image(grad, algorithm):
    """Bytes of :func:`grad_workspace` one image's gradient tiles take."""
    return _grad_tile_values(grad, algorithm) * grad.itemsize


def _grad_tile_values(grad, algorithm):
    _, out_h, out_w, out_channels = grad.shape
    return TERMS * algorithm.tiles_per_image(out_h, out_w) * out_channels


def filter_gradient(products, algorithm, parallel=SERIAL):
    """dW [K, K, C, O] = G^T M G of the summed [36, C, O] tile products M, or
    of the sum of a stack [parts, 36, C, O] of them (added in order in their
    dtype; made in float64, then rounded once)."""
    channels, out_channels = products.shape[-2:]
    dw = _both_axes(np.ascontiguousarray(algorithm.transform.T),
                    np.ascontiguousarray(products).reshape(products.shape[:-3] + (6, 6, -1)),
                    parallel)
    window = algorithm.window
    return dw.reshape(window, window, channels, out_channels)


def _ran(done, transform, array):
    """Check that a compiled transform ran (:func:`applies` chose this path, so
    a refusal would leave the output unwritten)."""
    if not done:
        raise RuntimeError(f"the compiled Winograd {transform} transform refused a "
                           f"{array.dtype} array of shape {array.shape}")


def _transformed_filter(w, algorithm, parallel=SERIAL):
    """V = G g G^T for each (input, output) channel pair of the [K, K, C, O]
    filter, as [36, C, O] (made in float64, then rounded once)."""
    window = algorithm.window
    v = _both_axes(algorithm.transform, np.ascontiguousarray(w).reshape(window, window, -1),
                   parallel)
    return v.reshape(TERMS, w.shape[2], w.shape[3])


def _both_axes(matrix, grid, parallel=SERIAL):
    """``matrix`` applied along both leading axes of ``grid`` [K, K, X] (or of
    the sum of a stack [parts, K, K, X] of grids, added in order in their
    dtype): matrix @ grid[:, :, x] @ matrix.T for every x, summed in float64
    and rounded once to grid's dtype. Compiled (native.winograd_filter) where
    it applies, in parts of whole blocks of pairs on the pool (each pair's
    sums are its own: any split gives the same bits), else one float64 GEMM
    by the Kronecker product, [R*R, K*K] @ [K*K, X] (OpenBLAS: the compiled
    GEMM is slower on these short and very wide products)."""
    rows, pairs = matrix.shape[0], grid.shape[-1]
    out = np.empty((rows, rows, pairs), grid.dtype)
    if native.winograd_filter_applies(matrix, grid, out):
        blocks = -(-pairs // _FILTER_BLOCK)
        ranges = [(min(first * _FILTER_BLOCK, pairs), min(stop * _FILTER_BLOCK, pairs))
                  for first, stop in split(blocks, parallel.parts(blocks, out.size))]
        parallel.run_compiled(lambda part: native.winograd_filter(matrix, grid, out,
                                                                  *ranges[part]), len(ranges))
        return out
    if grid.ndim == 4:
        # NOTE: a reduction over the leading axis adds the grids one after another,
        # in order, in their dtype (as native_batch_norm's block sums rely on)
        grid = grid.sum(axis=0)
    both = np.kron(matrix, matrix) @ grid.astype(np.float64).reshape(
        grid.shape[0] * grid.shape[1], -1)
    return both.reshape(rows, rows, -1).astype(grid.dtype)
