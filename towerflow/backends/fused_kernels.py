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
    def forward(ctx):
        epsilon, training = ctx.attrs["epsilon"], bool(ctx.attrs["is_training"])
        y_dtype, stat_dtype = ctx.output_dtypes[0], ctx.output_dtypes[1]

        def batch_norm(x, scale, offset, mean, variance):
            rows = _rows(x)
            if training:
                mean, centered, variance = _batch_moments(xp, rows)
                count = rows.shape[0]
                moving_variance = variance * (count / max(count - 1, 1))
            else:
                centered, moving_variance = rows - mean.astype(rows.dtype), variance
            inv_std = 1.0 / xp.sqrt(variance.astype(rows.dtype) + epsilon)
            centered *= scale * inv_std
            centered += offset
            stats = (mean, moving_variance, mean, inv_std)
            return (centered.reshape(x.shape).astype(y_dtype, copy=False),) + \
                tuple(stat.astype(stat_dtype, copy=False) for stat in stats)
        return batch_norm

    def backward(ctx):
        training = bool(ctx.attrs["is_training"])
        dtypes = ctx.output_dtypes

        def batch_norm_grad(grad, x, scale, saved_mean, saved_inv_std):
            rows, grad_rows = _rows(x), _rows(grad)
            centered = rows - saved_mean.astype(rows.dtype)
            doffset = grad_rows.sum(axis=0)
            dscale = xp.einsum("ij,ij->j", grad_rows, centered) * saved_inv_std
            gain = scale * saved_inv_std
            dx = grad_rows * gain
            if training:    # the paths through the batch mean and variance
                count = rows.shape[0]
                centered *= gain * saved_inv_std * dscale * (-1.0 / count)
                dx += centered
                dx -= gain * doffset * (1.0 / count)
            return tuple(out.astype(dtype, copy=False) for out, dtype in
                         zip((dx.reshape(x.shape), dscale, doffset), dtypes))
        return batch_norm_grad

    return {"FusedBatchNorm": forward, "FusedBatchNormGrad": backward}


def _rows(x):
    """x as [rows, C], in float32 at least (float16 statistics would overflow)."""
    compute = np.promote_types(x.dtype, np.float32)
    return x.reshape(-1, x.shape[-1]).astype(compute, copy=False)


def _batch_moments(xp, rows):
    """(mean, rows - mean, biased variance) over the rows; two passes for accuracy."""
    mean = rows.mean(axis=0)
    centered = rows - mean
    variance = xp.einsum("ij,ij->j", centered, centered) * (1.0 / rows.shape[0])
    return mean, centered, variance
