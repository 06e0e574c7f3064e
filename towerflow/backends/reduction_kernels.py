"""The reduction kernels, written once against the array module ``xp``."""

import functools

import numpy as np

from .. import errors


def build_reduction_kernels(xp):
    """Sum, Mean, Max, ..., ArgMax: TensorFlow's reductions, with its rules for
    empty inputs, integer means and axes known at run time only."""
    def reducer(fn, pass_dtype):
        def make(ctx):
            options = {"keepdims": ctx.attrs["keepdims"]}
            if pass_dtype:
                options["dtype"] = ctx.output_dtypes[0]
            if ctx.op.inputs[0].shape.ndims is None:    # axes known at run time only
                return _axes_at_run_time(fn, ctx.attrs["axes"], options)
            return functools.partial(fn, axis=ctx.attrs["axes"], **options)
        return make

    def mean(ctx):
        integer = ctx.output_dtypes[0].kind != "f"
        return reducer(_integer_mean if integer else _float_mean, True)(ctx)

    def arg(fn):
        def make(ctx):
            axis, dtype = ctx.attrs["axis"], ctx.output_dtypes[0]

            def arg_reduce(x):
                if not -x.ndim <= axis < x.ndim:   # NumPy takes axis 0 of a scalar
                    raise errors.InvalidArgumentError(      # argmax_op.cc's words
                        None, None, f"Expected dimension in the range [{-x.ndim}, "
                        f"{x.ndim}), but got {axis}")
                return fn(x, axis=axis).astype(dtype)
            return arg_reduce
        return make

    return {"Sum": reducer(xp.sum, True), "Prod": reducer(xp.prod, True), "Mean": mean,
            "Max": reducer(_or_identity(xp, xp.amax, _lowest), False),
            "Min": reducer(_or_identity(xp, xp.amin, _highest), False),
            "Any": reducer(xp.any, False), "All": reducer(xp.all, False),
            "ArgMax": arg(xp.argmax), "ArgMin": arg(xp.argmin)}


def _float_mean(x, axis, keepdims, dtype):
    # NOTE: sum * (1 / count) skips xp.mean's Python-level overhead, which
    # dominates for the small tensors of a loss.
    total = x.sum(axis=axis, keepdims=keepdims, dtype=dtype)
    return total * dtype.type(total.size / x.size if x.size else float("nan"))


def _integer_mean(x, axis, keepdims, dtype):
    """TensorFlow's mean of integers: summed in their dtype (an int32 sum wraps),
    divided with C's truncation toward zero; an empty one divides by zero."""
    total = x.sum(axis=axis, keepdims=keepdims, dtype=dtype)
    if total.size == 0:
        return total
    count = x.size // total.size
    if count == 0:
        raise errors.InvalidArgumentError(None, None, "Integer division by zero")
    floored = total // count
    return (floored + ((total % count != 0) & (total < 0))).astype(dtype, copy=False)


def _lowest(dtype):
    """The identity of max, TensorFlow's result for an empty reduction."""
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype):
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


def _or_identity(xp, fn, identity):
    """The reduction ``fn``, but an empty input gives the reduction's identity
    where NumPy refuses ("zero-size array to reduction operation maximum")."""
    def reduce(x, axis=None, keepdims=False):
        if x.size:
            return fn(x, axis=axis, keepdims=keepdims)
        reduced = xp.sum(x, axis=axis, keepdims=keepdims)     # an empty sum is fine
        return xp.full(xp.shape(reduced), identity(x.dtype), x.dtype)
    return reduce


def _axes_at_run_time(fn, axes, options):
    """A reduction over ``axes`` of an input of rank unknown when the graph was
    built: they are checked against its rank and their duplicates dropped
    (TensorFlow's ReductionHelper) each run."""
    def reduce(x):
        rank = x.ndim
        for axis in axes or ():
            if not -rank <= axis < rank:
                raise errors.InvalidArgumentError(
                    None, None, f"Invalid reduction dimension ({axis} for input with {rank} "
                    "dimension(s)")
        unique = None if axes is None else tuple(sorted({axis % rank for axis in axes}))
        return fn(x, axis=unique, **options)
    return reduce
