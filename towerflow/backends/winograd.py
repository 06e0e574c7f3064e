"""Winograd F(4x4, 3x3) for stride-1 3x3 convolutions on the compiled path.

A 3x3 convolution computed as im2col then one GEMM does 9*C multiply-adds
per output and channel. Winograd's minimal filtering (Lavin and Gray, "Fast
Algorithms for Convolutional Neural Networks", 2015) computes each 4x4 tile
of outputs from its 6x6 input window d as A^T [(G g G^T) * (B^T d B)] A:
the product is taken term by term, so over the input channels it is 36
GEMMs ``U[:, k] @ V[k]`` ([tiles, C] @ [C, O]) with 36 multiplies per 16
outputs instead of 144. The transforms of d and of the product only add and
scale, and the GEMMs run on a register-blocked kernel (``_native.c``); the
filter's transform, V, is small and made here once per call.

Layout: transformed tiles are tile-major, [tiles, 36, C]: a tile's 36 terms
are written as one contiguous run (term-major [36, tiles, C] scattered each
tile over 36 places: the input transform took 25% and the gradient tiles'
60% more time), and the GEMMs, which take a term's rows 36 * C apart, run on
blocks of tiles small enough to stay in cache.

The input gradient of a stride-1 3x3 convolution is itself one: the output
gradient convolved with the filter turned by 180 degrees and its channel
axes swapped, so :class:`WinogradConv` serves Conv2D and Conv2DBackpropInput.
The filter gradient is the forward pass transposed: G^T [(A e A^T) * U] G
summed over the tiles, where e is a tile of the output gradient and U the
transformed input the forward pass made (Conv2D keeps it for this instead
of its im2col patches, 2.25 times the input's size): 36 GEMMs [C, tiles] @
[tiles, O] (see :func:`filter_gradient`).

Rounding: float32 outputs differ from the direct sum by a few 1e-6 of the
largest output (B's and A's entries up to 8 scale rounding errors up), where
im2col's GEMM differs by about 1e-7. Training does not notice (cuDNN and
oneDNN use the same transform); ``TOWERFLOW_WINOGRAD=0`` turns it off.
"""

import os

import numpy as np

from . import native

# G: the filter transform of F(4x4, 3x3) (B and A are in _native.c).
_G = np.array([[1 / 4, 0, 0],
               [-1 / 6, -1 / 6, -1 / 6],
               [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6],
               [1 / 24, -1 / 12, 1 / 6],
               [0, 0, 1]])

TILE = 4            # outputs per tile side
WINDOW = TILE + 2   # inputs per tile side
TERMS = WINDOW * WINDOW

# Fewer input channels than this make the 36 GEMMs too thin to win (a
# first layer's 3 colour channels, say): im2col's single GEMM runs instead.
MIN_CHANNELS = 16


def tiles_per_image(out_h, out_w):
    """The 4x4 tiles covering an ``out_h`` x ``out_w`` output (the last ones
    cropped)."""
    return -(-out_h // TILE) * -(-out_w // TILE)


def enabled():
    """Whether Winograd convolutions are on (TOWERFLOW_WINOGRAD, default on)."""
    return os.environ.get("TOWERFLOW_WINOGRAD", "1") != "0"


def applies(x, w, lay, channels, out_h, out_w):
    """Whether a convolution of ``x`` by ``w`` (``lay``: the window geometry)
    runs as Winograd: compiled kernels on, a 3x3 window at stride 1, at
    least MIN_CHANNELS input ``channels`` and a 4x4 output tile's worth of
    output."""
    return enabled() and native.float_arrays(x, w) and tuple(lay.window) == (3, 3) and \
        tuple(lay.strides) == (1, 1) and channels >= MIN_CHANNELS and \
        out_h >= TILE and out_w >= TILE


class WinogradConv:
    """A stride-1 3x3 convolution of NHWC images by a [3, 3, C, O] filter ``w``,
    whose output (r, q) reads input rows r - top .. r - top + 2 and columns
    q - left .. q - left + 2 (zeros outside the input); ``out_h`` x ``out_w``
    outputs per image."""

    def __init__(self, w, top, left, out_h, out_w):
        self.channels, self.out_channels = w.shape[2], w.shape[3]
        self.top, self.left, self.out_h, self.out_w = top, left, out_h, out_w
        self.tiles_per_image = tiles_per_image(out_h, out_w)
        self.dtype = w.dtype
        self.filter = _transformed_filter(w)

    @classmethod
    def for_input_gradient(cls, w, lay, x_shape):
        """dx of the convolution ``lay`` of images of ``x_shape`` by ``w``, as a
        convolution of the output gradient: dx[h] sums grad[h + top - i] *
        w[i], which is the filter turned by 180 degrees at offset 2 - top."""
        top, _, left, _ = lay.pads
        turned = w[::-1, ::-1].transpose(0, 1, 3, 2)
        return cls(turned, 2 - top, 2 - left, x_shape[1], x_shape[2])

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
        """An array for the transformed inputs of ``images`` images, kept for
        the filter gradient: [tiles, 36, C] (see :func:`as_patches`)."""
        return np.empty((images * self.tiles_per_image, TERMS, self.channels), self.dtype)

    def __call__(self, x, out, workspace, kept=None, first_image=0):
        """``out`` ([N, out_h, out_w, O], C-contiguous, any shape of that size)
        = the convolution of the images ``x``, through ``workspace``; with
        ``kept`` (from :meth:`kept_inputs`), the transformed inputs go there,
        as those of images ``first_image``.. of the batch."""
        n = x.shape[0]
        tiles = n * self.tiles_per_image
        if kept is None:
            kept, first_tile = workspace[0][:TERMS * tiles * self.channels].reshape(
                tiles, TERMS, self.channels), 0
        else:
            first_tile = first_image * self.tiles_per_image
        products = workspace[1][:TERMS * tiles * self.out_channels].reshape(
            tiles, TERMS, self.out_channels)
        _ran(native.winograd_input(x, self.top, self.left, self.out_h, self.out_w, kept,
                                   first_tile), "input", x)
        if not native.winograd_gemms(kept, first_tile, self.filter, products):
            # output channels not a whole number of vectors: NumPy's GEMMs
            np.matmul(kept[first_tile:first_tile + tiles].transpose(1, 0, 2), self.filter,
                      out=products.transpose(1, 0, 2))
        _ran(native.winograd_output(products, (n, self.out_h, self.out_w, self.out_channels),
                                    out), "output", out)


def as_patches(kept, filter_shape):
    """The transformed inputs as Conv2D's patches output: [36 * tiles * C /
    (9 * C), 9 * C] = [4 * tiles, 9 * C], as wide as im2col's patches (the
    op's declared shape); :func:`kept_tiles` tells the two apart."""
    return kept.reshape(-1, filter_shape[0] * filter_shape[1] * filter_shape[2])


def kept_tiles(patches, grad):
    """The [tiles, 36, C] transformed inputs that ``patches`` (Conv2D's
    second output) holds, or None where they are im2col patches: one row per
    output, as many as ``grad`` [N, OH, OW, O] has."""
    n, out_h, out_w, _ = grad.shape
    if patches.shape[0] == n * out_h * out_w or not isinstance(patches, np.ndarray):
        return None
    tiles = n * tiles_per_image(out_h, out_w)
    channels = patches.shape[1] // 9
    if patches.shape[0] * patches.shape[1] != TERMS * tiles * channels:
        raise ValueError(f"Conv2DBackpropFilter: patches of shape {patches.shape} are "
                         f"neither im2col patches ({n * out_h * out_w} rows) nor Winograd "
                         f"tiles ({4 * tiles} rows) for a gradient of shape {grad.shape}")
    return patches.reshape(tiles, TERMS, channels)


def add_tile_products(kept, grad, first_image, workspace, sums):
    """Add to ``sums`` [36, C, O] the sums over the tiles of images
    ``first_image``.. (``grad`` holds their output gradient) of U^T (A e
    A^T), U the ``kept`` inputs: the filter gradient before
    :func:`filter_gradient`."""
    n, out_h, out_w, out_channels = grad.shape
    per_image = tiles_per_image(out_h, out_w)
    tiles = n * per_image
    transformed = workspace[:TERMS * tiles * out_channels].reshape(tiles, TERMS, out_channels)
    _ran(native.winograd_grad_tiles(grad, transformed), "gradient", grad)
    first = first_image * per_image
    if not native.winograd_gemms(kept, first, transformed, sums, sums=True):
        # output channels not a whole number of vectors: NumPy's GEMMs
        sums += np.matmul(kept[first:first + tiles].transpose(1, 2, 0),
                          transformed.transpose(1, 0, 2))


def grad_workspace(grad, images):
    """A buffer for :func:`add_tile_products` over blocks of up to ``images`` images."""
    return np.empty(images * _grad_tile_values(grad), grad.dtype)


def grad_bytes_per_image(grad):
    """Bytes of :func:`grad_workspace` one image's gradient tiles take."""
    return _grad_tile_values(grad) * grad.itemsize


def _grad_tile_values(grad):
    _, out_h, out_w, out_channels = grad.shape
    return TERMS * tiles_per_image(out_h, out_w) * out_channels


def filter_gradient(products):
    """dW [3, 3, C, O] = G^T M G of the summed [36, C, O] tile products M
    (made in float64, then rounded once)."""
    _, channels, out_channels = products.shape
    dw = _both_axes(_G.T, products.astype(np.float64).reshape(WINDOW, WINDOW, -1))
    return dw.reshape(3, 3, channels, out_channels).astype(products.dtype)


def _ran(done, transform, array):
    """Check that a compiled transform ran (:func:`applies` chose this path, so
    a refusal would leave the output unwritten)."""
    if not done:
        raise RuntimeError(f"the compiled Winograd {transform} transform refused a "
                           f"{array.dtype} array of shape {array.shape}")


def _transformed_filter(w):
    """V = G g G^T for each (input, output) channel pair of the [3, 3, C, O]
    filter, as [36, C, O] (made in float64, then rounded once)."""
    v = _both_axes(_G, w.astype(np.float64).reshape(3, 3, -1))
    return v.reshape(TERMS, w.shape[2], w.shape[3]).astype(w.dtype)


def _both_axes(matrix, grid):
    """``matrix`` applied along both leading axes of ``grid`` [K, K, X]:
    matrix @ grid[:, :, x] @ matrix.T for every x, as one GEMM by the
    Kronecker product, [R*R, K*K] @ [K*K, X] (for a 128x128 filter: 1.6 ms
    as two GEMMs, the second over a stack of six; 0.2 ms as one).
    NOTE: OpenBLAS, not the compiled GEMM, which is slower on these short
    and very wide products."""
    rows = matrix.shape[0]
    both = np.kron(matrix, matrix) @ grid.reshape(grid.shape[0] * grid.shape[1], -1)
    return both.reshape(rows, rows, -1)
