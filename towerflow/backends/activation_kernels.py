"""Kernels of the elementwise NN ops (activations, softmax, bias add,
dropout) and categorical sampling, written against ``xp``."""

import math

import numpy as np

from .. import errors
from .cpu_threads import SERIAL
from .filled_vectors import FilledVectors, column_sums
from .fused_kernels import LONG_ROW, long_rows


def build_activation_kernels(xp, parallel=SERIAL):
    """The activation kernel table for array module ``xp``; ``parallel`` (see
    :mod:`.cpu_threads`) splits the big kernels across CPU threads."""
    def fixed(fn):
        return lambda ctx: fn

    split = _SplitKernels(xp, parallel)

    def elu(x):
        return xp.where(x > 0, x, xp.expm1(xp.minimum(x, 0)))

    def elu_grad(grad, y):
        return xp.where(y > 0, grad, grad * (y + 1))

    return {
        "Relu": fixed(split.relu), "ReluGrad": fixed(split.relu_grad),
        "Elu": fixed(elu), "EluGrad": fixed(elu_grad),
        "Gelu": lambda ctx: _gelu(xp, ctx.attrs["approximate"], ctx.output_dtypes[0]),
        "GeluGrad": lambda ctx: _gelu_grad(xp, ctx.attrs["approximate"],
                                           ctx.output_dtypes[0]),
        **build_more_activations(xp),
        "Softmax": lambda ctx: _softmax(xp, ctx.attrs["axis"]),
        "LogSoftmax": lambda ctx: _log_softmax(xp, ctx.attrs["axis"]),
        "BiasAdd": fixed(split.bias_add), "BiasAddGrad": fixed(split.bias_add_grad),
        "Dropout": lambda ctx: _dropout(xp, ctx),
        "Multinomial": lambda ctx: _multinomial(xp, ctx),
    }


def build_more_activations(xp):
    """leaky_relu, relu6, selu, softplus, softsign and their gradients, as
    TF 1.15's kernels compute them (nn_ops.cc, softplus_op.h, softsign_op.h);
    each gradient takes (grad, x) or (grad, y) as its op's gradient function
    passes (towerflow/ops/activation_ops.py)."""
    from ..ops.activation_ops import SELU_ALPHA, SELU_SCALE

    def fixed(fn):
        return lambda ctx: fn

    def leaky(ctx):
        alpha = ctx.attrs["alpha"]
        return lambda x: xp.where(x > 0, x, x * x.dtype.type(alpha))

    def leaky_grad(ctx):
        alpha = ctx.attrs["alpha"]
        return lambda grad, x: xp.where(x > 0, grad, grad * grad.dtype.type(alpha))

    def selu(x):
        scale, scale_alpha = x.dtype.type(SELU_SCALE), x.dtype.type(SELU_SCALE * SELU_ALPHA)
        return xp.where(x < 0, scale_alpha * xp.expm1(xp.minimum(x, 0)), scale * x)

    def selu_grad(grad, y):
        scale, scale_alpha = y.dtype.type(SELU_SCALE), y.dtype.type(SELU_SCALE * SELU_ALPHA)
        return xp.where(y < 0, grad * (y + scale_alpha), grad * scale)

    return {
        "LeakyRelu": leaky, "LeakyReluGrad": leaky_grad,
        "Relu6": fixed(lambda x: xp.minimum(xp.maximum(x, 0), 6).astype(x.dtype, copy=False)),
        "Relu6Grad": fixed(lambda grad, y: grad * ((y > 0) & (y < 6))),
        "Selu": fixed(selu), "SeluGrad": fixed(selu_grad),
        "Softplus": fixed(lambda x: _softplus(xp, x)),
        "SoftplusGrad": fixed(lambda grad, x: _softplus_grad(xp, grad, x)),
        "Softsign": fixed(lambda x: x / (xp.abs(x) + 1)),
        "SoftsignGrad": fixed(lambda grad, x: grad / xp.square(xp.abs(x) + 1)),
    }


def _softplus(xp, x):
    """TF's three ranges: x itself above -threshold, exp(x) below threshold,
    log1p(exp(x)) between (threshold = log(epsilon) + 2)."""
    threshold = np.log(np.finfo(x.dtype).eps) + 2
    with np.errstate(over="ignore"):
        exps = xp.exp(x)
        middle = xp.log1p(exps)
    return xp.where(x > -threshold, x, xp.where(x < threshold, exps, middle)).astype(
        x.dtype, copy=False)


def _softplus_grad(xp, grad, x):
    with np.errstate(over="ignore"):    # exp(-x) = inf: a gradient of 0, as TF's
        return grad / (xp.exp(-x) + 1)


# Below this many elements the kernels below take NumPy's plain one-call path:
# their own set-up would cost more than it saves.
_SMALL = 1 << 12


class _SplitKernels:
    """ReLU and bias kernels that split big arrays across the CPU threads (see
    ``parallel.for_ranges``). Small inputs, and inputs they do not expect
    (strided, mixed dtypes, broadcasting), take the plain one-call path."""

    def __init__(self, xp, parallel):
        self.xp, self.parallel = xp, parallel
        self._zeros, self._ones = FilledVectors(xp, 0), FilledVectors(xp, 1)

    def _zeros_of(self, size, dtype):
        """``size`` zeros: NumPy's maximum against an array runs vectorised,
        against a scalar 0 several times slower."""
        return self._zeros.get(size, dtype)

    def relu(self, x):
        xp = self.xp
        if x.size < _SMALL or not self.parallel.host or not _plain_floats(x):
            return xp.maximum(x, 0)
        out = xp.empty_like(x)
        x_flat, out_flat = x.reshape(-1), out.reshape(-1)
        self.parallel.for_ranges(x.size, lambda start, stop: xp.maximum(
            x_flat[start:stop], self._zeros_of(stop - start, x.dtype), out=out_flat[start:stop]))
        return out

    def relu_grad(self, grad, y):
        xp = self.xp
        if self.parallel.parts(grad.size, grad.size) == 1 or not _plain_floats(grad, y):
            return grad * (y > 0)
        out = xp.empty_like(grad)
        grad_flat, y_flat, out_flat = grad.reshape(-1), y.reshape(-1), out.reshape(-1)

        def block(start, stop):
            xp.multiply(grad_flat[start:stop], y_flat[start:stop] > 0, out=out_flat[start:stop])
        self.parallel.for_ranges(grad.size, block)
        return out

    def bias_add(self, x, bias):
        xp = self.xp
        _check_bias(x, bias)
        if x.size < _SMALL or bias.ndim != 1 or x.ndim < 1 or bias.shape[0] != x.shape[-1] or \
                not _plain_floats(x) or bias.dtype != x.dtype:
            return xp.add(x, bias)
        channels = bias.shape[0]
        if channels >= LONG_ROW // 4 and self.parallel.parts(x.size, x.size) == 1:
            return xp.add(x, bias)
        # NOTE: long rows against a bias tiled to match: broadcasting a short
        # bias makes NumPy's inner loop as short as the channel count.
        x_rows, repeat = long_rows(x.reshape(-1, channels))
        row = x_rows.shape[1]
        tiled = xp.tile(bias, repeat) if repeat > 1 else bias
        out = xp.empty_like(x)
        out_rows = out.reshape(x_rows.shape)

        def block(start, stop):
            xp.add(x_rows[start // row:stop // row], tiled, out=out_rows[start // row:stop // row])
        self.parallel.for_ranges(x.size, block, align=row)
        return out

    def bias_add_grad(self, grad):
        grad2d = grad.reshape(-1, grad.shape[-1])
        if grad.size < _SMALL or grad.dtype.kind != "f" or grad.dtype.itemsize < 4:
            return grad2d.sum(axis=0)
        # NOTE: ones @ grad2d is a BLAS gemv, several times faster than NumPy's
        # sum(axis=0); one call, as splitting it across threads cost more than
        # it saved.
        return column_sums(self._ones, grad2d)


def _check_bias(x, bias):
    """tensorflow/core/kernels/bias_op.cc's checks, for shapes the graph left open."""
    if x.ndim < 2:
        raise errors.InvalidArgumentError(
            None, None, f"Input tensor must be at least 2D: {_dims(x.shape)}")
    if bias.ndim != 1 or bias.shape[0] != x.shape[-1]:
        raise errors.InvalidArgumentError(
            None, None, "Must provide as many biases as the last dimension of the input "
            f"tensor: {_dims(bias.shape)} vs. {_dims(x.shape)}")


def _dims(shape):
    return "[" + ",".join(str(dim) for dim in shape) + "]"


def _plain_floats(first, *others):
    """Whether the arrays are C-contiguous floats of one dtype and shape."""
    return first.dtype.kind == "f" and first.flags.c_contiguous and all(
        other.dtype == first.dtype and other.shape == first.shape and
        other.flags.c_contiguous for other in others)


def _check_axis(axis, x):
    """The softmax axis against a rank the graph did not know."""
    if not -x.ndim <= axis < x.ndim:
        raise errors.InvalidArgumentError(
            None, None, f"axis {axis} is out of range for a tensor of rank {x.ndim}")


def _softmax(xp, axis):
    def softmax(x):
        _check_axis(axis, x)
        if x.size == 0:     # NOTE: no max of an empty axis; the result is empty too
            return xp.empty_like(x)
        e = xp.exp(x - x.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        return e
    return softmax


def _log_softmax(xp, axis):
    def log_softmax(x):
        _check_axis(axis, x)
        if x.size == 0:
            return xp.empty_like(x)
        shifted = x - x.max(axis=axis, keepdims=True)
        return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
    return log_softmax


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def erf(xp, x):
    """The error function to ~1.5e-7 (Abramowitz & Stegun 7.1.26): NumPy has no
    erf, and float32 needs no more."""
    sign = xp.sign(x)
    a = xp.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
        -1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * xp.exp(-a * a))


def erf_float64(xp, x):
    """The error function to ~2e-15, for float64 (where 1.5e-7 is no match for
    TensorFlow's): a series of positive terms below |x| = 2.5, the continued
    fraction of erfc above; both evaluated everywhere, then selected."""
    a = xp.abs(x)
    near = xp.minimum(a, 2.5)
    term, total, twice_square = near, near, 2.0 * near * near
    for n in range(1, 35):   # erf = 2/sqrt(pi) e^-x^2 sum x (2x^2)^n / (2n+1)!!
        term = term * twice_square * (1.0 / (2 * n + 1))
        total = total + term
    series = total * xp.exp(-near * near) * (2.0 / math.sqrt(math.pi))
    far = xp.maximum(a, 2.5)
    fraction = far
    for k in range(25, 0, -1):   # erfc = e^-x^2 / sqrt(pi) / (x + (1/2) / (x + 1 / (x + ...
        fraction = far + (0.5 * k) / fraction
    erfc = xp.exp(-far * far) * (1.0 / math.sqrt(math.pi)) / fraction
    return xp.sign(x) * xp.where(a < 2.5, series, 1.0 - erfc)


def _erf_for(xp, dtype):
    if dtype == xp.float64:
        return lambda x: erf_float64(xp, x)
    return lambda x: erf(xp, x)


def _gelu(xp, approximate, dtype):
    if approximate:
        return lambda x: 0.5 * x * (1.0 + xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
    erf_fn = _erf_for(xp, dtype)
    return lambda x: (0.5 * x * (1.0 + erf_fn(x * (1 / math.sqrt(2.0))))).astype(x.dtype)


def _gelu_grad(xp, approximate, dtype):
    erf_fn = _erf_for(xp, dtype)

    def exact(grad, x):
        cdf = 0.5 * (1.0 + erf_fn(x * (1 / math.sqrt(2.0))))
        pdf = xp.exp(-0.5 * x * x) * (1 / math.sqrt(2.0 * math.pi))
        return (grad * (cdf + x * pdf)).astype(x.dtype)

    def tanh_form(grad, x):
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
        t = xp.tanh(inner)
        d_inner = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)
        return grad * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner)
    return tanh_form if approximate else exact


def _seeded_stream(xp, ctx):
    seed = ctx.attrs["seed"]  # (graph seed, op seed[, tower]) or (None, None)
    seed = None if seed[0] is None else list(seed)
    return ctx.resource(("random", ctx.op), lambda: xp.random.default_rng(seed))


def _dropout(xp, ctx):
    rng, static_rate = _seeded_stream(xp, ctx), ctx.attrs["rate"]
    noise_shape, op = ctx.attrs["noise_shape"], ctx.op

    def dropout(x, fed_rate=None):
        rate = static_rate if fed_rate is None else _fed_dropout_rate(xp, op, fed_rate)
        shape = x.shape if noise_shape is None else tuple(
            size if want is None else want for size, want in zip(x.shape, noise_shape))
        keep = rng.random(shape, dtype=xp.float32) >= rate
        if fed_rate is None:
            scale = x.dtype.type(1.0 / (1.0 - rate))
        else:   # on the device, in float64 as the Python float above
            scale = xp.true_divide(1.0, 1.0 - rate.astype(xp.float64)).astype(x.dtype)
        mask = keep.astype(x.dtype) * scale
        return x * mask, mask
    return dropout


def _fed_dropout_rate(xp, op, fed_rate):
    """A fed rate as a float32 array. On the CPU it is checked (NumPy arrays
    are on the host already); on a GPU, as in TensorFlow, it is not (a check
    would wait for the device): a rate of 1 then gives NaNs."""
    if xp is np:
        rate = float(fed_rate)
        if not 0.0 <= rate < 1.0:
            raise errors.InvalidArgumentError(
                None, op, f"dropout rate must be in [0, 1), got {rate} (keep_prob "
                f"{1.0 - rate}); feed a keep_prob in (0, 1]")
    return xp.asarray(fed_rate).astype(xp.float32, copy=False)


def _multinomial(xp, ctx):
    rng, count, dtype = _seeded_stream(xp, ctx), ctx.attrs["num_samples"], ctx.output_dtypes[0]

    def sample(logits):
        # Gumbel-max: argmax(logits + Gumbel noise) is a draw from softmax(logits).
        shape = logits.shape[:1] + (count,) + logits.shape[1:]
        noise = -xp.log(-xp.log(rng.random(shape, dtype=xp.float64) + 1e-300) + 1e-300)
        return (logits[:, None, :].astype(xp.float64) + noise).argmax(axis=-1).astype(dtype)
    return sample
