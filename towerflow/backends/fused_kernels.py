"""Fused kernels: softmax cross-entropy (loss and gradient in one pass) and
batch normalisation (forward and backward), written against ``xp``."""


import numpy as np

from .. import errors


# -- softmax cross-entropy -------------------------------------------------------------


def _cross_entropy_kernels(xp):
    def sparse(ctx):
        op = ctx.op

        def cross_entropy(logits, labels):
            _check_labels(xp, op, labels, logits.shape[1])
            rows = xp.arange(labels.shape[0])
            neg_log_probs, probs = _softmax_parts(xp, logits)
            loss = neg_log_probs[rows, labels]
            probs[rows, labels] -= 1
            return loss, probs
        return cross_entropy

    def dense(ctx):
        def cross_entropy(logits, labels):
            neg_log_probs, probs = _softmax_parts(xp, logits)
            loss = xp.einsum("ij,ij->i", labels, neg_log_probs)
            probs -= labels
            return loss, probs
        return cross_entropy

    return {"SoftmaxCrossEntropyWithLogits": dense,
            "SparseSoftmaxCrossEntropyWithLogits": sparse}


def _softmax_parts(xp, logits):
    """(-log softmax, softmax) of [N, K] logits along the last axis,
    with the max subtracted first so exp never overflows."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = xp.exp(shifted)
    total = probs.sum(axis=1, keepdims=True)
    probs /= total
    log_total = xp.log(total)
    xp.subtract(log_total, shifted, out=shifted)        # now -log softmax
    return shifted, probs


def _check_labels(xp, op, labels, classes):
    if labels.size == 0 or (int(labels.min()) >= 0 and int(labels.max()) < classes):
        return
    bad = xp.nonzero((labels < 0) | (labels >= classes))[0]
    first = int(bad[0])
    raise errors.InvalidArgumentError(
        None, op, f"Received a label value of {int(labels[first])} (at index {first}) "
        f"which is outside the valid range of [0, {classes}); {len(bad)} of "
        f"{labels.size} labels are out of range")


# -- fused batch norm ------------------------------------------------------------------


def _batch_norm_kernels(xp):
    channel = _PerChannel(xp)

    def forward(ctx):
        epsilon, training = ctx.attrs["epsilon"], bool(ctx.attrs["is_training"])
        y_dtype, stat_dtype = ctx.output_dtypes[0], ctx.output_dtypes[1]

        def batch_norm(x, scale, offset, mean, variance):
            rows = _rows(x)
            if training:
                mean, centered, variance = _batch_moments(channel, rows)
                count = rows.shape[0]
                moving_variance = variance * (count / max(count - 1, 1))
            else:
                centered = channel.apply(xp.subtract, rows, mean.astype(rows.dtype))
                moving_variance = variance
            inv_std = 1.0 / xp.sqrt(variance.astype(rows.dtype) + epsilon)
            channel.apply(xp.multiply, centered, scale * inv_std, out=centered)
            channel.apply(xp.add, centered, offset, out=centered)
            stats = (mean, moving_variance, mean, inv_std)
            return (centered.reshape(x.shape).astype(y_dtype, copy=False),) + \
                tuple(stat.astype(stat_dtype, copy=False) for stat in stats)
        return batch_norm

    def backward(ctx):
        training = bool(ctx.attrs["is_training"])
        dtypes = ctx.output_dtypes

        def batch_norm_grad(grad, x, scale, saved_mean, saved_inv_std):
            rows, grad_rows = _rows(x), _rows(grad)
            centered = channel.apply(xp.subtract, rows, saved_mean.astype(rows.dtype))
            doffset = channel.column_sums(grad_rows)
            dscale = channel.column_sums(grad_rows * centered) * saved_inv_std
            gain = scale * saved_inv_std
            dx = channel.apply(xp.multiply, grad_rows, gain)
            if training:    # the paths through the batch mean and variance
                count = rows.shape[0]
                channel.apply(xp.multiply, centered, gain * saved_inv_std * dscale *
                              (-1.0 / count), out=centered)
                dx += centered
                channel.apply(xp.subtract, dx, gain * doffset * (1.0 / count), out=dx)
            return tuple(out.astype(dtype, copy=False) for out, dtype in
                         zip((dx.reshape(x.shape), dscale, doffset), dtypes))
        return batch_norm_grad

    return {"FusedBatchNorm": forward, "FusedBatchNormGrad": backward}


def _rows(x):
    """x as [rows, C], in float32 at least (float16 statistics would overflow)."""
    compute = np.promote_types(x.dtype, np.float32)
    return x.reshape(-1, x.shape[-1]).astype(compute, copy=False)


def _batch_moments(channel, rows):
    """(mean, rows - mean, biased variance) over the rows; two passes for accuracy."""
    mean = channel.column_sums(rows) * (1.0 / rows.shape[0])
    centered = channel.apply(channel.xp.subtract, rows, mean)
    variance = channel.column_sums(centered * centered) * (1.0 / rows.shape[0])
    return mean, centered, variance


# Rows of about this many values: broadcasting a [C] vector over rows only C
# long makes NumPy's inner loop that short (several times slower).
LONG_ROW = 2048


def long_rows(rows2d):
    """C-contiguous ``rows2d`` [R, C] as [R / k, k*C] with k*C near LONG_ROW, and k."""
    count, width = rows2d.shape
    repeat = max(1, LONG_ROW // max(width, 1))
    while repeat > 1 and count % repeat:
        repeat //= 2
    return rows2d.reshape(count // repeat, width * repeat), repeat


class _PerChannel:
    """Per-channel arithmetic on [R, C] rows at full speed: vectors broadcast
    over long rows, column sums as a BLAS ones-vector product."""

    def __init__(self, xp):
        self.xp, self._ones = xp, {}

    def apply(self, ufunc, rows, vector, out=None):
        """``ufunc(rows, vector)`` with the [C] ``vector`` broadcast over the rows."""
        if not rows.flags.c_contiguous or (out is not None and not out.flags.c_contiguous):
            return ufunc(rows, vector, out=out) if out is not None else ufunc(rows, vector)
        wide, repeat = long_rows(rows)
        tiled = self.xp.tile(vector.astype(rows.dtype, copy=False), repeat)
        result = ufunc(wide, tiled, out=None if out is None else out.reshape(wide.shape))
        return result.reshape(rows.shape)

    def column_sums(self, rows):
        """The sum of each column, as ones @ rows (NumPy's sum(axis=0) is slower)."""
        if rows.dtype.kind != "f" or rows.dtype.itemsize < 4 or rows.shape[0] == 0:
            return rows.sum(axis=0)
        ones = self._ones.get(rows.dtype)
        if ones is None or ones.shape[0] < rows.shape[0]:
            ones = self._ones[rows.dtype] = self.xp.ones(rows.shape[0], rows.dtype)
        return self.xp.matmul(ones[:rows.shape[0]], rows)
