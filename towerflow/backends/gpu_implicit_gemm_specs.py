"""Implicit-GEMM convolution kernels for the GPU (see cupy_conv.py): the
convolution, its input gradient and its filter gradient as tiled GEMMs whose
operand tiles are gathered straight from the images, so no patch or column
matrix is ever written (im2col + cuBLAS writes [N*OH*OW, KH*KW*C] patches,
about 2.8 GB a step for the cifar10 recipe at batch 512).

One GEMM template serves all three: C[rows, cols] = A[rows, depth] @
B[depth, cols], a block computing a 64 x 64 tile of C with 256 threads (a 4 x
4 tile each), depth taken 8 at a time through two shared tiles; ``LOAD_A``
and ``LOAD_B`` gather an element of A and B (0 outside the operands). The
three GEMMs (channels-last, as everywhere in towerflow):

- forward:         A = the patches of x [N*OH*OW, KH*KW*C], B = w [KH*KW*C, O];
- input gradient:  A = the taps of grad that read each input cell
                   [N*H*W, KH*KW*O], B = w read as [KH*KW*O, C];
- filter gradient: A = the patches transposed [KH*KW*C, N*OH*OW], B = grad
                   [N*OH*OW, O], the depth (every output) split across
                   ``splits`` blocks along z that write partial sums, added
                   in split order by a second kernel (no atomics: the same
                   bits every run).

NOTE: plain FP32 arithmetic on the CUDA cores, where cuBLAS under TF32 uses
the tensor cores; whether saving the patch traffic wins is for a GPU to
measure (benchmarks/gpu_check.sh times both). Off by default:
``TOWERFLOW_GPU_CONV=implicit`` turns it on. Each kernel's CUDA C runs in
the tests on the CPU (towerflow/simgpu/cuda_emulation.py) against its NumPy
reference and the NumPy kernels.
"""

import numpy as np

from .gpu_conv_specs import col2im_reference, im2col_reference
from .kernel_specs import RawKernelSpec

TILE = 64                   # rows and columns of C a block computes
DEPTH_STEP = 8              # depth a shared tile holds
THREADS = 256               # 16 x 16 threads, a 4 x 4 tile of C each
MIN_DEPTH_PER_SPLIT = 4096  # outputs each split of the filter gradient sums, at least
MAX_SPLITS = 64

_GEOMETRY = ("int height, int width, int channels, int window_h, int window_w, "
             "int stride_h, int stride_w, int pad_top, int pad_left, int out_h, int out_w, "
             "int out_channels")

_GEMM = """    // C tile [m0, m0 + 64) x [n0, n0 + 64); depth [depth_begin, depth_end).
    __shared__ T a_tile[8 * 64];         // [depth step][row of the tile]
    __shared__ T b_tile[8 * 64];         // [depth step][column of the tile]
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const long long m0 = (long long)blockIdx.x * 64;
    const int n0 = blockIdx.y * 64;
    DEPTH_RANGE
    T acc[4][4];
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c) acc[r][c] = (T)0;
    for (long long k0 = depth_begin; k0 < depth_end; k0 += 8) {
        for (int e = threadIdx.x; e < 8 * 64; e += blockDim.x) {
            const int kk = e % 8, mm = e / 8;      // A: consecutive threads, consecutive depth
            const long long row = m0 + mm, k = k0 + kk;
            T a = (T)0;
            if (row < rows && k < depth_end) { LOAD_A }
            a_tile[kk * 64 + mm] = a;
            const int nn = e % 64, kb = e / 64;    // B: consecutive threads, consecutive columns
            const long long kb_depth = k0 + kb;
            const int col = n0 + nn;
            T b = (T)0;
            if (col < cols && kb_depth < depth_end) { LOAD_B }
            b_tile[kb * 64 + nn] = b;
        }
        __syncthreads();
        for (int kk = 0; kk < 8; ++kk) {
            T a[4], b[4];
            for (int r = 0; r < 4; ++r) a[r] = a_tile[kk * 64 + ty * 4 + r];
            for (int c = 0; c < 4; ++c) b[c] = b_tile[kk * 64 + tx * 4 + c];
            for (int r = 0; r < 4; ++r)
                for (int c = 0; c < 4; ++c) acc[r][c] += a[r] * b[c];
        }
        __syncthreads();
    }
    for (int r = 0; r < 4; ++r) {
        const long long row = m0 + ty * 4 + r;
        for (int c = 0; c < 4; ++c) {
            const int col = n0 + tx * 4 + c;
            if (row < rows && col < cols) STORE
        }
    }"""

# The tap (i, j), channel c of depth index k of a patch row, and the input
# cell (row, col) output (p, q) reads through it: the forward's and the
# filter gradient's gather (NOTE: every index from the kernel's own ints).
_PATCH_ELEMENT = """const long long per_image = (long long)out_h * out_w;
                const long long image = PATCH_ROW / per_image;
                const long long rest = PATCH_ROW - image * per_image;
                const int p = (int)(rest / out_w), q = (int)(rest - (long long)p * out_w);
                const int tap = (int)(PATCH_COLUMN / channels);
                const int c = (int)(PATCH_COLUMN - (long long)tap * channels);
                const int i = tap / window_w, j = tap - (tap / window_w) * window_w;
                const int in_row = p * stride_h - pad_top + i;
                const int in_col = q * stride_w - pad_left + j;
                if (in_row >= 0 && in_row < height && in_col >= 0 && in_col < width)
                    a = x[((image * height + in_row) * width + in_col) * channels + c];"""


def _gemm(depth_range, load_a, load_b, store):
    return (_GEMM.replace("DEPTH_RANGE", depth_range).replace("LOAD_A", load_a)
            .replace("LOAD_B", load_b).replace("STORE", store))


# -- forward ---------------------------------------------------------------------------------


def forward_reference(x, w, y, height, width, channels, window_h, window_w, stride_h,
                      stride_w, pad_top, pad_left, out_h, out_w, out_channels):
    """y [N*OH*OW, O] = im2col(x) @ w."""
    depth = window_h * window_w * channels
    patches = np.empty((y.size // out_channels, depth), x.dtype)
    im2col_reference(x, patches, height, width, channels, window_h, window_w, stride_h,
                     stride_w, pad_top, pad_left, out_h, out_w)
    y.reshape(-1, out_channels)[...] = patches @ w.reshape(depth, out_channels)


IMPLICIT_CONV = RawKernelSpec(
    "towerflow_implicit_conv", "const T* x, const T* w, T* y, long long rows, " + _GEOMETRY,
    _gemm("const int cols = out_channels;\n"
          "    const long long depth_begin = 0;\n"
          "    const long long depth_end = (long long)window_h * window_w * channels;",
          _PATCH_ELEMENT.replace("PATCH_ROW", "row").replace("PATCH_COLUMN", "k"),
          "b = w[kb_depth * out_channels + col];",
          "y[row * cols + col] = acc[r][c];"),
    lambda x, w, y, rows, **geometry: forward_reference(x, w, y, **geometry))


# -- input gradient --------------------------------------------------------------------------

# Depth index k = (tap, o); input cell (h, w_) of image; the output (p, q) that
# reads it through tap (i, j), if any (stride and bounds), gives grad's value.
_INPUT_GRAD_A = """const long long per_image = (long long)height * width;
                const long long image = row / per_image;
                const long long rest = row - image * per_image;
                const int h = (int)(rest / width), w_ = (int)(rest - (long long)h * width);
                const int tap = (int)(k / out_channels);
                const int o = (int)(k - (long long)tap * out_channels);
                const int i = tap / window_w, j = tap - (tap / window_w) * window_w;
                const int row_offset = h + pad_top - i, col_offset = w_ + pad_left - j;
                if (row_offset >= 0 && col_offset >= 0 && row_offset % stride_h == 0 &&
                        col_offset % stride_w == 0) {
                    const int p = row_offset / stride_h, q = col_offset / stride_w;
                    if (p < out_h && q < out_w)
                        a = grad[((image * out_h + p) * out_w + q) * out_channels + o];
                }"""


def input_grad_reference(grad, w, dx, rows, height, width, channels, window_h, window_w,
                         stride_h, stride_w, pad_top, pad_left, out_h, out_w, out_channels):
    """dx = col2im(grad @ w^T)."""
    columns = grad.reshape(-1, out_channels) @ w.reshape(-1, out_channels).T
    col2im_reference(columns, dx, height, width, channels, window_h, window_w, stride_h,
                     stride_w, pad_top, pad_left, out_h, out_w)


IMPLICIT_INPUT_GRAD = RawKernelSpec(
    "towerflow_implicit_conv_input_grad",
    "const T* grad, const T* w, T* dx, long long rows, " + _GEOMETRY,
    _gemm("const int cols = channels;\n"
          "    const long long depth_begin = 0;\n"
          "    const long long depth_end = (long long)window_h * window_w * out_channels;",
          _INPUT_GRAD_A,
          "const long long tap = kb_depth / out_channels;\n"
          "                const long long o = kb_depth - tap * out_channels;\n"
          "                b = w[(tap * channels + col) * out_channels + o];",
          "dx[row * cols + col] = acc[r][c];"),
    input_grad_reference)


# -- filter gradient -------------------------------------------------------------------------


def filter_grad_splits(outputs):
    """(splits, outputs per split) of the filter gradient's depth (one row per
    output): a function of the shape alone, so the partial sums add in the
    same order every run. ``filter_grad_splits(524288)`` is (64, 8192)."""
    if outputs <= 0:
        return 1, DEPTH_STEP
    splits = max(1, min(MAX_SPLITS, outputs // MIN_DEPTH_PER_SPLIT))
    per_split = -(-outputs // splits)
    per_split = -(-per_split // DEPTH_STEP) * DEPTH_STEP
    return max(1, -(-outputs // per_split)), per_split


def filter_grad_partials_reference(x, grad, partials, rows, outputs, per_split, height,
                                   width, channels, window_h, window_w, stride_h, stride_w,
                                   pad_top, pad_left, out_h, out_w, out_channels):
    """partials [splits, KH*KW*C, O]: per split, its outputs' patches^T @ grad."""
    patches = np.empty((outputs, rows), x.dtype)
    im2col_reference(x, patches, height, width, channels, window_h, window_w, stride_h,
                     stride_w, pad_top, pad_left, out_h, out_w)
    grad2d = grad.reshape(outputs, out_channels)
    parts = partials.reshape(-1, rows, out_channels)
    for split in range(parts.shape[0]):
        chosen = slice(split * per_split, (split + 1) * per_split)
        parts[split] = patches[chosen].T @ grad2d[chosen]


IMPLICIT_FILTER_GRAD_PARTIALS = RawKernelSpec(
    "towerflow_implicit_filter_grad_partials",
    "const T* x, const T* grad, T* partials, long long rows, long long outputs, "
    "int per_split, " + _GEOMETRY,
    _gemm("const int cols = out_channels;\n"
          "    const long long depth_begin = (long long)blockIdx.z * per_split;\n"
          "    const long long depth_end = depth_begin + per_split < outputs ?\n"
          "        depth_begin + per_split : outputs;\n"
          "    T* const out = partials + (long long)blockIdx.z * rows * cols;",
          _PATCH_ELEMENT.replace("PATCH_ROW", "k").replace("PATCH_COLUMN", "row"),
          "b = grad[kb_depth * out_channels + col];",
          "out[row * cols + col] = acc[r][c];"),
    filter_grad_partials_reference)


def filter_grad_finish_reference(partials, dw, splits, count):
    """dw = the partials added in split order."""
    total = partials.reshape(splits, count)[0].copy()
    for split in range(1, splits):
        total += partials.reshape(splits, count)[split]
    dw.reshape(count)[...] = total


IMPLICIT_FILTER_GRAD_FINISH = RawKernelSpec(
    "towerflow_implicit_filter_grad_finish",
    "const T* partials, T* dw, int splits, long long count",
    """    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= count) return;
    T total = partials[e];
    for (int s = 1; s < splits; ++s) total += partials[(long long)s * count + e];
    dw[e] = total;""",
    filter_grad_finish_reference)


def grid(rows, cols, splits=1):
    """The launch grid of a GEMM of ``rows`` x ``cols`` (x ``splits``)."""
    return (-(-rows // TILE), -(-cols // TILE), splits)
