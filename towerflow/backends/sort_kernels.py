"""Kernels of tf.sort / tf.argsort, tf.unique, tf.boolean_mask and
tf.cumsum / tf.cumprod (towerflow/ops/sort_ops.py, mask_ops.py,
scan_ops.py), written once against ``xp``.

NOTE: tf.unique's and tf.boolean_mask's output sizes depend on the values,
so their kernels read a size on the host (a boolean-mask index does); on a
GPU that waits for the device and keeps the step out of a CUDA graph.
TensorFlow keeps tf.unique on the host, and its boolean_mask reads the
mask's count the same way (through tf.where).
"""

import functools
import math

import numpy as np

from .. import errors
from .index_kernels import _descending_order, _take_rows


def build_sort_kernels(xp):
    return {"Sort": functools.partial(_sort, xp),
            "SortGrad": functools.partial(_sort_grad, xp),
            "Unique": functools.partial(_unique, xp),
            "BooleanMask": functools.partial(_boolean_mask, xp),
            "BooleanMaskGrad": functools.partial(_boolean_mask_grad, xp),
            "Cumsum": functools.partial(_scan, xp, xp.cumsum, 0),
            "Cumprod": functools.partial(_scan, xp, xp.cumprod, 1)}


# -- sort, argsort ------------------------------------------------------------------


def _sort(xp, ctx):
    axis, descending = ctx.attrs["axis"], ctx.attrs["descending"]

    def sort(x):
        """Values and int32 indices; equal values keep their index order in
        both directions (TensorFlow sorts through top_k, which does)."""
        rows = xp.moveaxis(x, axis, -1)
        order = _descending_order(xp, rows) if descending else \
            xp.argsort(rows, axis=-1, kind="stable")
        values = _take_rows(xp, rows, order)
        return (xp.moveaxis(values, -1, axis),
                xp.moveaxis(order.astype(np.int32), -1, axis))
    return sort


def _sort_grad(xp, ctx):
    axis = ctx.attrs["axis"]

    def sort_grad(grad, indices):
        """Each sorted value's gradient back at the position it came from."""
        rows = xp.moveaxis(grad, axis, -1)
        order = xp.moveaxis(indices, axis, -1)
        order = order.reshape(math.prod(order.shape[:-1]), order.shape[-1])
        starts = xp.arange(order.shape[0]).reshape(-1, 1) * rows.shape[-1]
        out = xp.zeros(rows.size, grad.dtype)
        out[(order + starts).ravel()] = rows.reshape(-1)
        return xp.moveaxis(out.reshape(rows.shape), -1, axis)
    return sort_grad


# -- unique -------------------------------------------------------------------------


def _unique(xp, ctx):
    index_dtype = ctx.output_dtypes[1]

    def unique(x):
        """The distinct values in order of first occurrence, and where each
        element's value is among them: one stable sort, no Python loop."""
        if x.ndim != 1:
            raise errors.InvalidArgumentError(None, None, "unique expects a 1D vector.")
        if x.size == 0:
            return x.copy(), xp.zeros(0, index_dtype)
        order = xp.argsort(x, kind="stable")
        ordered = x[order]
        starts = xp.concatenate([xp.ones(1, bool), ordered[1:] != ordered[:-1]])
        group = xp.cumsum(starts) - 1                      # per sorted position
        firsts = order[starts]       # NOTE: a size read on the host (a mask index)
        by_first = xp.argsort(firsts, kind="stable")       # groups by first occurrence
        rank = xp.empty_like(by_first)
        rank[by_first] = xp.arange(by_first.size)
        idx = xp.empty(x.size, index_dtype)
        idx[order] = rank[group].astype(index_dtype)
        return x[firsts[by_first]], idx
    return unique


# -- boolean_mask -------------------------------------------------------------------


def _boolean_mask(xp, ctx):
    axis = ctx.attrs["axis"]

    def boolean_mask(tensor, mask):
        rows = _masked_view(tensor, mask, axis)
        return rows[(slice(None),) * axis + (mask.ravel(),)]   # NOTE: a host read
    return boolean_mask


def _masked_view(tensor, mask, axis):
    """``tensor`` with the mask's dimensions merged into one (TensorFlow's
    reshape), after checking they are the mask's shape."""
    covered = tensor.shape[axis:axis + mask.ndim]
    if covered != mask.shape:
        raise errors.InvalidArgumentError(
            None, None, f"Shapes {_shape_text(covered)} and {_shape_text(mask.shape)} "
            "are incompatible")
    # NOTE: the merged size spelled out: -1 is ambiguous in an empty tensor
    return tensor.reshape(tensor.shape[:axis] + (math.prod(covered),) +
                          tensor.shape[axis + mask.ndim:])


def _shape_text(shape):
    return "(" + ", ".join(str(dim) for dim in shape) + ("," if len(shape) == 1 else "") + ")"


def _boolean_mask_grad(xp, ctx):
    axis = ctx.attrs["axis"]

    def boolean_mask_grad(grad, tensor, mask):
        """The gradient rows back at the kept positions, zeros elsewhere."""
        rows = xp.zeros(_masked_view(tensor, mask, axis).shape, grad.dtype)
        rows[(slice(None),) * axis + (mask.ravel(),)] = grad
        return rows.reshape(tensor.shape)
    return boolean_mask_grad


# -- cumsum, cumprod ----------------------------------------------------------------


def _scan(xp, scan, identity, ctx):
    axis, exclusive, reverse = (ctx.attrs[key] for key in ("axis", "exclusive", "reverse"))

    def cumulative(x):
        moved = xp.moveaxis(x, axis, 0)
        if reverse:
            moved = xp.flip(moved, 0)
        out = scan(moved, axis=0, dtype=x.dtype)
        if exclusive and moved.shape[0]:
            # shifted by one, the identity first (exact, unlike out - x)
            first = xp.full((1,) + moved.shape[1:], identity, dtype=x.dtype)
            out = xp.concatenate([first, out[:-1]], axis=0)
        if reverse:
            out = xp.flip(out, 0)
        return xp.moveaxis(out, 0, axis)
    return cumulative
