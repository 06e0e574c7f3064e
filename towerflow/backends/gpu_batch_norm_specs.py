"""The GPU batch-norm kernels (see cupy_conv.py): training-mode batch norm,
with or without the ReLU after it, and its gradient, with or without the
ReLU's gradient before it, each as three launches:

1. ``*_partials`` (RawKernel): one pass over the [R, C] rows; block b sums
   rows [b * rows_per_block, (b + 1) * rows_per_block) per channel into
   [blocks, C] partial sums (each thread strides over the block's rows, then
   the block adds its threads' sums in a fixed order: no atomics, the same
   bits every run);
2. ``*_finish`` (RawKernel, one thread per channel): adds the partials in
   block order and makes the per-channel coefficients;
3. ``*_apply`` (ElementwiseKernel): one pass that reads the rows and
   writes the output.

The forward statistics are one pass: sums of ``x - shift`` and of its
square, ``shift`` being the batch's first row (a sample of each channel,
so the sums do not cancel the way plain sums of squares would when a
channel's mean is large against its spread); the variance is
``E[d^2] - E[d]^2`` of ``d = x - shift``.

The references compute the same quantities in the same precision (T);
their sums run in NumPy's order, not the kernel's, so they agree with the
CUDA kernels to rounding, not to the bit.
"""

import numpy as np

from .kernel_specs import ElementwiseKernelSpec, RawKernelSpec

BLOCK = 256                 # threads per block of the partial-sum kernels (NOTE: their
                            # shared arrays hold 256 values: never launch them wider)
FINISH_BLOCK = 128
MAX_BLOCKS = 1024           # partial sums per channel, at most
MIN_ROWS_PER_BLOCK = 64


def partial_blocks(rows):
    """(blocks, rows_per_block) for the partial sums over ``rows`` rows: a
    function of the shape alone, so the sums add in the same order every run.
    ``partial_blocks(524288)`` is (1024, 512)."""
    blocks = max(1, min(MAX_BLOCKS, -(-rows // MIN_ROWS_PER_BLOCK)))
    rows_per_block = max(1, -(-rows // blocks))
    return -(-rows // rows_per_block), rows_per_block


def _block_starts(rows, rows_per_block):
    return np.arange(0, rows, rows_per_block)


# The loop shared by both partial-sum kernels: ACCUMULATE adds one element
# (index i, channel c) to the sums s and s2.
_PARTIALS_BODY = """    // Threads [row_offset][lane]: lanes_per_row consecutive channels of a row
    // (consecutive addresses), rows_per_step rows at a time.
    __shared__ T shared_first[256];
    __shared__ T shared_second[256];
    const int lanes_per_row = channels < (int)blockDim.x ? channels : (int)blockDim.x;
    const int rows_per_step = blockDim.x / lanes_per_row;
    const int lane = threadIdx.x % lanes_per_row;
    const int row_offset = threadIdx.x / lanes_per_row;
    const long long first = (long long)blockIdx.x * rows_per_block;
    const long long last = first + rows_per_block < rows ? first + rows_per_block : rows;
    for (int base = 0; base < channels; base += lanes_per_row) {
        const int c = base + lane;
        const bool active = c < channels && row_offset < rows_per_step;
        T s = 0, s2 = 0;
        if (active) {
            SETUP
            for (long long r = first + row_offset; r < last; r += rows_per_step) {
                const long long i = r * channels + c;
                ACCUMULATE
            }
        }
        shared_first[threadIdx.x] = s;
        shared_second[threadIdx.x] = s2;
        __syncthreads();
        if (active && row_offset == 0) {
            for (int k = 1; k < rows_per_step; ++k) {
                s += shared_first[k * lanes_per_row + lane];
                s2 += shared_second[k * lanes_per_row + lane];
            }
            first_out[(long long)blockIdx.x * channels + c] = s;
            second_out[(long long)blockIdx.x * channels + c] = s2;
        }
        __syncthreads();
    }"""


def _partials_body(setup, accumulate):
    return _PARTIALS_BODY.replace("SETUP", setup).replace("ACCUMULATE", accumulate)


def _block_sums(values, rows_per_block, out):
    """``out`` [blocks, C] = the sums of ``values`` [R, C] over each block's rows."""
    out.reshape(-1, values.shape[1])[...] = np.add.reduceat(
        values, _block_starts(values.shape[0], rows_per_block), axis=0)


def stats_partials_reference(x, shift, rows, channels, rows_per_block, first_out,
                             second_out):
    """Per block: sums of d = x - shift and of d * d."""
    centered = x.reshape(rows, channels) - shift.reshape(channels)
    _block_sums(centered, rows_per_block, first_out)
    _block_sums(centered * centered, rows_per_block, second_out)


BN_STATS_PARTIALS = RawKernelSpec(
    "towerflow_bn_stats_partials",
    "const T* x, const T* shift, long long rows, int channels, int rows_per_block, "
    "T* first_out, T* second_out",
    _partials_body("const T center = shift[c];",
                   "const T d = x[i] - center;\n                s += d;\n"
                   "                s2 += d * d;"),
    stats_partials_reference)


def stats_finish_reference(first, second, shift, scale, blocks, channels, rows, epsilon,
                           mean, variance, inv_std, gain):
    """Per channel: mean, the unbiased variance (for the moving average),
    1 / sqrt(biased variance + epsilon) and scale * inv_std."""
    dtype = mean.dtype.type
    count = dtype(rows)
    shifted_mean = first.reshape(blocks, channels).sum(axis=0) / count
    biased = np.maximum(second.reshape(blocks, channels).sum(axis=0) / count
                        - shifted_mean * shifted_mean, dtype(0))
    mean[...] = shift + shifted_mean
    variance[...] = biased * (count / (count - dtype(1) if rows > 1 else dtype(1)))
    inv_std[...] = dtype(1) / np.sqrt(biased + epsilon)
    gain[...] = scale * inv_std


_STATS_FINISH_PARAMS = ("const T* first, const T* second, const T* shift, const T* scale, "
                        "int blocks, int channels, long long rows, T epsilon, T* mean, "
                        "T* variance, T* inv_std, T* gain")
_STATS_FINISH_BODY = """    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    T total = 0, total_sq = 0;
    for (int b = 0; b < blocks; ++b) {
        total += first[(long long)b * channels + c];
        total_sq += second[(long long)b * channels + c];
    }
    const T count = (T)rows;
    const T shifted_mean = total / count;
    T biased = total_sq / count - shifted_mean * shifted_mean;
    if (biased < (T)0) biased = (T)0;
    T inv;
    INFERENCE_OR {
        mean[c] = shift[c] + shifted_mean;
        variance[c] = biased * (count / (rows > 1 ? count - (T)1 : (T)1));
        inv = (T)1 / sqrt(biased + epsilon);
    }
    inv_std[c] = inv;
    gain[c] = scale[c] * inv;"""

BN_STATS_FINISH = RawKernelSpec(
    "towerflow_bn_stats_finish", _STATS_FINISH_PARAMS,
    _STATS_FINISH_BODY.replace("INFERENCE_OR", ""), stats_finish_reference)


def stats_finish_fed_reference(first, second, shift, scale, blocks, channels, rows, epsilon,
                               mean, variance, inv_std, gain, training, given_mean,
                               given_variance):
    """The batch's statistics where the fed flag ``training`` is True, else the
    given (moving) mean and variance, as the generic kernel selects them."""
    stats_finish_reference(first, second, shift, scale, blocks, channels, rows, epsilon,
                           mean, variance, inv_std, gain)
    if not training.reshape(-1)[0]:
        mean[...], variance[...] = given_mean, given_variance
        inv_std[...] = mean.dtype.type(1) / np.sqrt(given_variance + epsilon)
        gain[...] = scale * inv_std


# NOTE: the flag is read on the device, never on the host (a captured step
# replays with whatever value is fed).
BN_STATS_FINISH_FED = RawKernelSpec(
    "towerflow_bn_stats_finish_fed",
    _STATS_FINISH_PARAMS + ", const bool* training, const T* given_mean, "
    "const T* given_variance",
    _STATS_FINISH_BODY.replace("INFERENCE_OR", """if (!training[0]) {
        mean[c] = given_mean[c];
        variance[c] = given_variance[c];
        inv = (T)1 / sqrt(given_variance[c] + epsilon);
    } else"""),
    stats_finish_fed_reference)


BN_APPLY = ElementwiseKernelSpec(
    "T x, T mean, T gain, T offset", "T y",
    "y = (x - mean) * gain + offset;",
    "towerflow_bn_apply",
    lambda x, mean, gain, offset: (x - mean) * gain + offset)

# NOTE: v < 0 ? 0 : v keeps a NaN (as np.maximum(v, 0) does); v > 0 ? v : 0 would not.
BN_APPLY_RELU = ElementwiseKernelSpec(
    "T x, T mean, T gain, T offset", "T y",
    "T v = (x - mean) * gain + offset;\ny = v < (T)0 ? (T)0 : v;",
    "towerflow_bn_apply_relu",
    lambda x, mean, gain, offset: np.maximum((x - mean) * gain + offset, 0))


def _masked(grad, relu_output, masked):
    """ReluGrad's product: grad * (y > 0) (so an infinite gradient at y <= 0
    gives NaN, as TensorFlow's does)."""
    return grad * (relu_output > 0) if masked else grad


def grad_partials_reference(grad, relu_output, x, mean, rows, channels, rows_per_block,
                            masked, first_out, second_out):
    """Per block: sums of g and of g * (x - mean), g the (masked) gradient."""
    g = _masked(grad, relu_output, masked).reshape(rows, channels)
    _block_sums(g, rows_per_block, first_out)
    _block_sums(g * (x.reshape(rows, channels) - mean.reshape(channels)), rows_per_block,
                second_out)


BN_GRAD_PARTIALS = RawKernelSpec(
    "towerflow_bn_grad_partials",
    "const T* grad, const T* relu_output, const T* x, const T* mean, long long rows, "
    "int channels, int rows_per_block, int masked, T* first_out, T* second_out",
    _partials_body("const T center = mean[c];",
                   "T g = grad[i];\n"
                   "                if (masked) g = g * (relu_output[i] > (T)0 ? (T)1 : (T)0);\n"
                   "                s += g;\n                s2 += g * (x[i] - center);"),
    grad_partials_reference)


def grad_finish_reference(first, second, scale, inv_std, blocks, channels, rows, dscale,
                          doffset, gain, k_centered, k_offset):
    """Per channel: doffset, dscale and the coefficients of dx = g * gain +
    (x - mean) * k_centered - k_offset (FusedBatchNormGrad's, in its order)."""
    dtype = dscale.dtype.type
    count = dtype(rows)
    doffset[...] = first.reshape(blocks, channels).sum(axis=0)
    dscale[...] = second.reshape(blocks, channels).sum(axis=0) * inv_std
    gain[...] = scale * inv_std
    k_centered[...] = gain * inv_std * dscale * (dtype(-1) / count)
    k_offset[...] = gain * doffset * (dtype(1) / count)


_GRAD_FINISH_PARAMS = ("const T* first, const T* second, const T* scale, const T* inv_std, "
                       "int blocks, int channels, long long rows, T* dscale, T* doffset, "
                       "T* gain, T* k_centered, T* k_offset")
_GRAD_FINISH_BODY = """    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    T total = 0, total_centered = 0;
    for (int b = 0; b < blocks; ++b) {
        total += first[(long long)b * channels + c];
        total_centered += second[(long long)b * channels + c];
    }
    const T count = (T)rows;
    const T inv = inv_std[c];
    const T scale_c = total_centered * inv;
    const T g = scale[c] * inv;
    doffset[c] = total;
    dscale[c] = scale_c;
    gain[c] = g;
    const T through_variance = g * inv * scale_c * ((T)-1 / count);
    const T through_mean = g * total * ((T)1 / count);
    k_centered[c] = FED_SELECT through_variance;
    k_offset[c] = FED_SELECT through_mean;"""

BN_GRAD_FINISH = RawKernelSpec(
    "towerflow_bn_grad_finish", _GRAD_FINISH_PARAMS,
    _GRAD_FINISH_BODY.replace("FED_SELECT ", ""), grad_finish_reference)


def grad_finish_fed_reference(first, second, scale, inv_std, blocks, channels, rows, dscale,
                              doffset, gain, k_centered, k_offset, training):
    """As in training, but with no path through the batch statistics (the
    k terms 0) where the fed flag ``training`` is False."""
    grad_finish_reference(first, second, scale, inv_std, blocks, channels, rows, dscale,
                          doffset, gain, k_centered, k_offset)
    if not training.reshape(-1)[0]:
        k_centered[...], k_offset[...] = 0, 0


BN_GRAD_FINISH_FED = RawKernelSpec(
    "towerflow_bn_grad_finish_fed", _GRAD_FINISH_PARAMS + ", const bool* training",
    _GRAD_FINISH_BODY.replace("FED_SELECT", "!training[0] ? (T)0 :"),
    grad_finish_fed_reference)


BN_GRAD_APPLY = ElementwiseKernelSpec(
    "T grad, T x, T mean, T gain, T k_centered, T k_offset", "T dx",
    "dx = grad * gain + (x - mean) * k_centered - k_offset;",
    "towerflow_bn_grad_apply",
    lambda grad, x, mean, gain, k_centered, k_offset:
        grad * gain + (x - mean) * k_centered - k_offset)

BN_GRAD_APPLY_MASKED = ElementwiseKernelSpec(
    "T grad, T relu_output, T x, T mean, T gain, T k_centered, T k_offset", "T dx",
    "T g = grad * (relu_output > (T)0 ? (T)1 : (T)0);\n"
    "dx = g * gain + (x - mean) * k_centered - k_offset;",
    "towerflow_bn_grad_apply_masked",
    lambda grad, relu_output, x, mean, gain, k_centered, k_offset:
        _masked(grad, relu_output, True) * gain + (x - mean) * k_centered - k_offset)
