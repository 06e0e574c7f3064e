"""Running and log-domain reductions: tf.cumsum, tf.cumprod (one op each,
with their gradients) and tf.reduce_logsumexp (built over max, exp, sum
and log, as TensorFlow builds it, so its gradient comes from theirs)."""

from .. import dtypes
from ..autodiff import stop_gradient
from ..graph import shapes
from ..graph.registry import register_gradient, register_op
from .constant_ops import convert_to_tensor, zeros_like
from .math_ops import add, exp, is_finite, log, reduce_max, reduce_sum, subtract, where

# -- cumsum, cumprod ----------------------------------------------------------------


def _scan_shape(inputs, attrs):
    x = inputs[0]
    if x.dtype.is_bool:
        raise TypeError(f"a cumulative sum or product needs a numeric tensor, got "
                        f"{x.name} of bool")
    return [(x.shape, x.dtype)]


register_op("Cumsum", _scan_shape, exact_gradients=True, type_list=dtypes.REAL_TYPES)
register_op("Cumprod", _scan_shape, exact_gradients=True, type_list=dtypes.REAL_TYPES)


def _scan(op_type, x, axis, exclusive, reverse, name):
    x = convert_to_tensor(x)
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{op_type.lower()} needs a static int axis, got {axis!r}")
    rank = x.shape.ndims
    if rank is None:
        raise ValueError(f"{op_type.lower()} needs a tensor of known rank, got {x.name}")
    if not -rank <= axis < rank:
        raise ValueError(f"ScanOp: Expected scan axis in the range [{-rank}, {rank}), "
                         f"but got {axis}")
    attrs = {"axis": axis % rank, "exclusive": bool(exclusive), "reverse": bool(reverse)}
    return x.graph.create_op(op_type, [x], attrs, name=name or op_type).outputs[0]


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running sums along ``axis``; ``exclusive`` leaves each element out of
    its own sum, ``reverse`` sums from the end::

        tf.cumsum([a, b, c])                  # [a, a + b, a + b + c]
        tf.cumsum([a, b, c], exclusive=True)  # [0, a, a + b]
        tf.cumsum([a, b, c], reverse=True)    # [a + b + c, b + c, c]
    """
    return _scan("Cumsum", x, axis, exclusive, reverse, name)


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running products along ``axis`` (``exclusive`` and ``reverse`` as in
    :func:`cumsum`)::

        tf.cumprod([a, b, c], exclusive=True)   # [1, a, a * b]
    """
    return _scan("Cumprod", x, axis, exclusive, reverse, name)


def _cumsum_grad(op, grad):
    """Each input adds to every later (earlier, reversed) output: the
    gradient is the running sum of the output gradients the other way."""
    attrs = op.attrs
    return [cumsum(grad, attrs["axis"], attrs["exclusive"], not attrs["reverse"])]


def _cumprod_grad(op, grad):
    """TensorFlow's: cumsum(prod * grad) the other way, over x.
    NOTE: undefined where x is 0, as in TensorFlow."""
    x, attrs = op.inputs[0], op.attrs
    summed = cumsum(op.outputs[0] * grad, attrs["axis"], attrs["exclusive"],
                    not attrs["reverse"])
    return [summed / x]


register_gradient("Cumsum", _cumsum_grad)
register_gradient("Cumprod", _cumprod_grad)

# -- reduce_logsumexp ---------------------------------------------------------------


def reduce_logsumexp(input_tensor, axis=None, keepdims=None, name=None,
                     reduction_indices=None, keep_dims=None):
    """``log(sum(exp(x)))`` over ``axis``, computed as
    ``max + log(sum(exp(x - max)))`` so that large inputs do not overflow::

        tf.reduce_logsumexp([[0., 0., 0.], [0., 0., 0.]], 1)   # [log(3), log(3)]
        tf.reduce_logsumexp([1000., 1000.])                     # 1000 + log(2)

    An infinite max is replaced by 0 before the shift (TensorFlow's rule), so
    a row of -inf gives -inf, not NaN. ``reduction_indices`` and ``keep_dims``
    are TF1's aliases.
    """
    x = convert_to_tensor(input_tensor)
    if axis is not None and reduction_indices is not None:
        raise ValueError("Give axis or reduction_indices, not both")
    axis = reduction_indices if axis is None else axis
    keepdims = bool(keepdims if keepdims is not None else keep_dims)
    shapes.normalize_axes(axis, x.shape.ndims)     # a bad axis fails here, named
    raw_max = reduce_max(x, axis, keepdims=True)
    shift = stop_gradient(where(is_finite(raw_max), raw_max, zeros_like(raw_max)))
    total = log(reduce_sum(exp(subtract(x, shift)), axis, keepdims=keepdims))
    if not keepdims:
        shift = reduce_sum(shift, axis)      # drops the kept size-1 axes, exactly
    return add(total, shift, name=name or "ReduceLogSumExp")
