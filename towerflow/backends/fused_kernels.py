"""Fused kernels: softmax cross-entropy (loss and gradient in one pass) and
batch normalisation (forward and backward), written against ``xp``."""

import numpy as np

from .. import errors
from .filled_vectors import FilledVectors, column_sums

# -- softmax cross-entropy -------------------------------------------------------------


def _cross_entropy_kernels(xp):
    def sparse(ctx):
        op = ctx.op
        if xp is not np:
            return lambda logits, labels: _sparse_unchecked(xp, logits, labels)

        def cross_entropy(logits, labels):
            _check_labels(op, labels, logits.shape[1])
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


def _sparse_unchecked(xp, logits, labels):
    """The GPU form, as TensorFlow's GPU kernel: labels are not checked (that
    would read them on the host); a row whose label is out of range gets a
    NaN loss and NaN gradients."""
    classes = logits.shape[1]
    valid = (labels >= 0) & (labels < classes)
    safe_labels = xp.where(valid, labels, 0)
    rows = xp.arange(labels.shape[0])
    neg_log_probs, probs = _softmax_parts(xp, logits)
    picked = neg_log_probs[rows, safe_labels]
    loss = xp.where(valid, picked, xp.nan).astype(logits.dtype, copy=False)
    probs[rows, safe_labels] -= 1
    xp.copyto(probs, xp.nan, where=xp.logical_not(valid)[:, None])
    return loss, probs


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


def _check_labels(op, labels, classes):
    """TensorFlow's CPU check: the smallest label if it is negative, else the
    largest if it is too big, with every label (NumPy arrays only: the values
    are read on the host)."""
    if labels.size == 0:
        return
    low, high = int(labels.min()), int(labels.max())
    if low >= 0 and high < classes:
        return
    values = " ".join(str(value) for value in labels.tolist())
    raise errors.InvalidArgumentError(
        None, op, f"Received a label value of {low if low < 0 else high} which is outside "
        f"the valid range of [0, {classes}).  Label values: {values}")


# -- fused batch norm ------------------------------------------------------------------


def _batch_norm_kernels(xp):
    channel = _PerChannel(xp)

    def forward(ctx):
        epsilon, training = ctx.attrs["epsilon"], ctx.attrs["is_training"]
        y_dtype, stat_dtype = ctx.output_dtypes[0], ctx.output_dtypes[1]

        def batch_norm(x, scale, offset, mean, variance, fed_training=None):
            rows = _rows(x)
            mode, fed_training = _host_flag(xp, training, fed_training)
            if fed_training is not None:
                mean, centered, variance, moving_variance = _fed_moments(
                    channel, rows, mean, variance, fed_training)
            elif mode:
                mean, centered, variance = _batch_moments(channel, rows)
                moving_variance = variance * _bessel(rows.shape[0])
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
        training, dtypes = ctx.attrs["is_training"], ctx.output_dtypes

        def batch_norm_grad(grad, x, scale, saved_mean, saved_inv_std, fed_training=None):
            mode, fed_training = _host_flag(xp, training, fed_training)
            rows, grad_rows = _rows(x), _rows(grad)
            if rows.shape[0] == 0:     # TF: zero scale and offset gradients
                dx, zeros = xp.zeros_like(x), xp.zeros(scale.shape, rows.dtype)
                return tuple(out.astype(dtype, copy=False)
                             for out, dtype in zip((dx, zeros, zeros), dtypes))
            centered = channel.apply(xp.subtract, rows, saved_mean.astype(rows.dtype))
            doffset = channel.column_sums(grad_rows)
            dscale = channel.column_sums(grad_rows * centered) * saved_inv_std
            gain = scale * saved_inv_std
            dx = channel.apply(xp.multiply, grad_rows, gain)
            if mode or fed_training is not None:
                # the paths through the batch mean and variance
                count = max(rows.shape[0], 1)
                through_variance = gain * saved_inv_std * dscale * (-1.0 / count)
                through_mean = gain * doffset * (1.0 / count)
                if fed_training is not None:
                    # NOTE: zero in inference, selected per channel on the device
                    # (the flag is never read on the host); in training the same
                    # arithmetic as a fixed training mode.
                    through_variance = xp.where(fed_training, through_variance, 0)
                    through_mean = xp.where(fed_training, through_mean, 0)
                channel.apply(xp.multiply, centered, through_variance, out=centered)
                dx += centered
                channel.apply(xp.subtract, dx, through_mean, out=dx)
            return tuple(out.astype(dtype, copy=False) for out, dtype in
                         zip((dx.reshape(x.shape), dscale, doffset), dtypes))
        return batch_norm_grad

    return {"FusedBatchNorm": forward, "FusedBatchNormGrad": backward}


def _host_flag(xp, training, fed_training):
    """(mode, fed flag left to select on the device). On the CPU a fed flag is
    already a host value: read it, and run the fixed mode (the device select
    computes the batch statistics even in inference, 7x slower there)."""
    if fed_training is not None and xp is np:
        return bool(fed_training), None
    return training, fed_training


def _per_row(count):
    """1 / count; NaN for an empty batch, which has no mean."""
    return 1.0 / count if count else float("nan")


def _bessel(count):
    """The factor from the biased batch variance to the unbiased one."""
    return count / max(count - 1, 1)


def _fed_moments(channel, rows, mean, variance, training):
    """(mean, rows - mean, variance, moving variance) for a batch norm whose
    mode is the bool array ``training``: the batch's in training, the given
    ``mean``/``variance`` otherwise, selected on the device (never read on the
    host). In training it is the same arithmetic as :func:`_batch_moments`."""
    xp, count = channel.xp, rows.shape[0]
    per_row = _per_row(count)
    batch_mean = channel.column_sums(rows) * per_row
    mean = xp.where(training, batch_mean, mean.astype(rows.dtype))
    centered = channel.apply(xp.subtract, rows, mean)
    batch_variance = channel.column_sums(centered * centered) * per_row
    moving_variance = xp.where(training, batch_variance * _bessel(count), variance)
    variance = xp.where(training, batch_variance, variance.astype(rows.dtype))
    return mean, centered, variance, moving_variance


def _rows(x):
    """x as [rows, C], in float32 at least (float16 statistics would overflow)."""
    compute = np.promote_types(x.dtype, np.float32)
    return x.reshape(-1, x.shape[-1]).astype(compute, copy=False)


def _batch_moments(channel, rows):
    """(mean, rows - mean, biased variance) over the rows; two passes for accuracy.
    An empty batch has NaN statistics, as TF's FusedBatchNorm gives."""
    per_row = _per_row(rows.shape[0])
    mean = channel.column_sums(rows) * per_row
    centered = channel.apply(channel.xp.subtract, rows, mean)
    variance = channel.column_sums(centered * centered) * per_row
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
        # NOTE: a FilledVectors, so a graph captured on a shorter ones vector
        # keeps reading memory that is still its own (filled_vectors.py).
        self.xp, self._ones = xp, FilledVectors(xp, 1)

    def apply(self, ufunc, rows, vector, out=None):
        """``ufunc(rows, vector)`` with the [C] ``vector`` broadcast over the rows."""
        if not rows.flags.c_contiguous or (out is not None and not out.flags.c_contiguous):
            return ufunc(rows, vector, out=out) if out is not None else ufunc(rows, vector)
        wide, repeat = long_rows(rows)
        tiled = self.xp.tile(vector.astype(rows.dtype, copy=False), repeat)
        result = ufunc(wide, tiled, out=None if out is None else out.reshape(wide.shape))
        return result.reshape(rows.shape)

    def column_sums(self, rows):
        """The sum of each column (see filled_vectors.column_sums)."""
        return column_sums(self._ones, rows)


def batch_norm_chain_kernels(xp, table, train, train_grad, takes_op=None,
                             flag_on_device=False):
    """Makers for FusedBatchNorm, FusedBatchNormGrad and fusion.py's chains
    ``_FusedBatchNormRelu`` / ``_ReluGradBatchNormGrad`` for a backend with its
    own training-mode kernels: ``train(x, scale, offset, epsilon, relu)`` and
    ``train_grad(grad, relu_output, x, scale, mean, inv_std)`` (relu_output
    None unless masked) return the op's outputs, or None where they do not
    take the arrays; then, and in inference, or where ``takes_op(ctx)`` says
    no, ``table``'s makers run (the chains as the separate kernels would
    compute them). A training flag fed at run time (``is_training`` None:
    ``tf.layers.batch_normalization(x, training=is_training_placeholder)``)
    is read on the host where ``xp`` is NumPy: True runs the training
    kernels. On a GPU it stays on the device: with ``flag_on_device`` the
    kernels take it (``train(..., fed=(flag, mean, variance))``,
    ``train_grad(..., training=flag)``) and select on the device; without,
    the table's makers run::

        kernels = batch_norm_chain_kernels(np, table, native_train, native_grad)
    """
    takes_op = takes_op or (lambda ctx: True)
    # NOTE: the makers as they are now: callers update ``table`` with the result
    generic = {name: table[name] for name in ("FusedBatchNorm", "FusedBatchNormGrad")}

    def runs_training(ctx):
        """Whether the op may run the training kernels: in training mode,
        decided when built or (on the host) by a fed flag."""
        training = ctx.attrs["is_training"]
        fed_here = training is None and (xp is np or flag_on_device)
        return (training is True or fed_here) and takes_op(ctx)

    def on_device(fed_training):
        """The fed flag, where the kernels select on the device with it."""
        return fed_training[0] if fed_training and xp is not np else None

    def forward(relu):
        def make(ctx):
            fallback = generic["FusedBatchNorm"](ctx)
            if relu:
                fallback = _relu_after(xp, fallback)
            if not runs_training(ctx):
                return fallback
            epsilon = ctx.attrs["epsilon"]

            def run(x, scale, offset, mean, variance, *fed_training):
                flag = on_device(fed_training)
                if flag is not None:
                    outputs = train(x, scale, offset, epsilon, relu, (flag, mean, variance))
                else:
                    outputs = train(x, scale, offset, epsilon, relu) \
                        if trains(fed_training) else None
                return fallback(x, scale, offset, mean, variance, *fed_training) \
                    if outputs is None else outputs
            return run
        return make

    def backward(masked):
        def make(ctx):
            fallback = generic["FusedBatchNormGrad"](ctx)
            if masked:
                fallback = _relu_grad_before(fallback)
            if not runs_training(ctx):
                return fallback
            fed = ctx.attrs["is_training"] is None      # the flag: the last input

            def run(grad, *inputs):
                arrays, fed_training = (inputs[:-1], inputs[-1:]) if fed else (inputs, ())
                relu_output, (x, scale, mean, inv_std) = \
                    (arrays[0], arrays[1:]) if masked else (None, arrays)
                flag = on_device(fed_training)
                if flag is not None:
                    outputs = train_grad(grad, relu_output, x, scale, mean, inv_std, flag)
                else:
                    outputs = train_grad(grad, relu_output, x, scale, mean, inv_std) \
                        if trains(fed_training) else None
                return fallback(grad, *inputs) if outputs is None else outputs
            return run
        return make

    return {"FusedBatchNorm": forward(False), "_FusedBatchNormRelu": forward(True),
            "FusedBatchNormGrad": backward(False), "_ReluGradBatchNormGrad": backward(True)}


def trains(fed_training):
    """Whether a batch norm bound to its training kernels runs them: with no
    flag fed (``fed_training`` empty: training decided when built), or a fed
    flag (``fed_training[0]``, on the host) that is True."""
    return not fed_training or bool(fed_training[0])


def _relu_after(xp, generic):
    def run(*inputs):
        outputs = generic(*inputs)
        return (xp.maximum(outputs[0], 0),) + tuple(outputs[1:])
    return run


def _relu_grad_before(generic):
    def run(grad, relu_output, *inputs):
        return generic(grad * (relu_output > 0), *inputs)
    return run
