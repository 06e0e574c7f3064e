"""Local response normalisation (tf.nn.lrn) and its gradient, written once
against ``xp``."""

import functools

from .. import errors


def build_lrn_kernels(xp):
    return {"LRN": functools.partial(_lrn, xp), "LRNGrad": functools.partial(_lrn_grad, xp)}


def _window_sum(xp, values, radius):
    """Each channel's sum over channels [d - radius, d + radius] (the ones that
    exist): 2 * radius + 1 shifted adds of the zero-padded channels, in a
    fixed order (no running sum whose differences would lose precision)."""
    channels = values.shape[-1]
    padded = xp.pad(values, [(0, 0)] * (values.ndim - 1) + [(radius, radius)])
    total = padded[..., 0:channels]
    for offset in range(1, 2 * radius + 1):
        total = total + padded[..., offset:offset + channels]
    return total


def _norm(xp, x, attrs):
    """bias + alpha * (the window's sum of squares)."""
    return attrs["bias"] + attrs["alpha"] * _window_sum(xp, x * x, attrs["depth_radius"])


def _lrn(xp, ctx):
    attrs = ctx.attrs

    def lrn(x):
        if x.ndim != 4:     # an input of rank unknown when the graph was built
            raise errors.InvalidArgumentError(None, None, "in must be 4-dimensional")
        return x * _norm(xp, x, attrs) ** -attrs["beta"]
    return lrn


def _lrn_grad(xp, ctx):
    attrs, beta = ctx.attrs, ctx.attrs["beta"]

    def lrn_grad(grad, x):
        """y_d = x_d N_d^-beta with N_d = bias + alpha * sum_{j in W(d)} x_j^2, and
        j in W(d) exactly when d in W(j), so dL/dx_j = g_j N_j^-beta
        - 2 alpha beta x_j * sum_{d in W(j)} g_d x_d N_d^(-beta - 1)."""
        norm = _norm(xp, x, attrs)
        scaled = norm ** -beta
        spread = _window_sum(xp, grad * x * scaled / norm, attrs["depth_radius"])
        return grad * scaled - (2 * attrs["alpha"] * beta) * x * spread
    return lrn_grad
