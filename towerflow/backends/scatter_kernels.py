"""Kernels of the coordinate-tuple ops (towerflow/ops/scatter_ops.py) and of
tf.pad and tf.tile (towerflow/ops/pad_ops.py), written once against ``xp``.

NOTE: gather_nd's and scatter_nd's check that every coordinate is inside the
shape is read on the host (TensorFlow's CPU rule, kept on every device); on
a GPU that waits for the device, as tf.gather's check does.
"""

import functools
import math

import numpy as np

from .. import errors
from ..graph import shapes


def build_scatter_kernels(xp):
    return {"GatherNd": functools.partial(_gather_nd, xp),
            "GatherNdGrad": functools.partial(_gather_nd_grad, xp),
            "ScatterNd": functools.partial(_scatter_nd, xp),
            "PadV2": functools.partial(_constant_pad, xp),
            "MirrorPad": functools.partial(_mirror_pad, xp),
            "PadGrad": functools.partial(_pad_grad, xp),
            "Tile": functools.partial(_tile, xp),
            "TileGrad": functools.partial(_tile_grad, xp),
            "DynamicTile": functools.partial(_dynamic_tile, xp),
            "DynamicTileGrad": functools.partial(_dynamic_tile_grad, xp)}


# -- gather_nd, scatter_nd ----------------------------------------------------------


def _linear_indices(xp, indices, outer_shape):
    """Each coordinate tuple (last axis of ``indices``) as one row-major
    offset into ``outer_shape``, as int64."""
    linear = xp.zeros(indices.shape[:-1], np.int64)
    for axis, size in enumerate(outer_shape):
        linear = linear * size + indices[..., axis].astype(np.int64)
    return linear


def _check_inside(xp, indices, outer_shape, what, shape):
    """TensorFlow's CPU rule: every coordinate inside ``outer_shape``."""
    if indices.size == 0:
        return
    outside = xp.zeros(indices.shape[:-1], bool)
    for axis, size in enumerate(outer_shape):
        column = indices[..., axis]
        outside = outside | (column < 0) | (column >= size)
    if bool(outside.any()):                     # NOTE: a host read on a GPU
        first = int(xp.argmax(outside.ravel()))
        position = ",".join(str(int(i)) for i in np.unravel_index(first, outside.shape))
        values = ", ".join(str(int(v)) for v in indices.reshape(-1, len(outer_shape))[first])
        dims = ",".join(str(dim) for dim in shape)
        raise errors.InvalidArgumentError(
            None, None, f"indices[{position}] = [{values}] does not index into {what} "
            f"[{dims}]")


def _gather_nd(xp, ctx):
    def gather_nd(params, indices):
        depth = indices.shape[-1]
        if depth > params.ndim:     # tensorflow/core/kernels/gather_nd_op.cc's check
            raise errors.InvalidArgumentError(
                None, None, "index innermost dimension length must be <= params rank; "
                f"saw: {depth} vs. {params.ndim}")
        outer, inner = params.shape[:depth], params.shape[depth:]
        _check_inside(xp, indices, outer, "param shape", params.shape)
        rows = params.reshape((math.prod(outer),) + inner)
        return xp.take(rows, _linear_indices(xp, indices, outer), axis=0)
    return gather_nd


def _scatter_add(xp, updates, indices, shape):
    """Zeros of ``shape``, ``updates`` added at the coordinate tuples."""
    depth = indices.shape[-1]
    outer, inner = tuple(shape[:depth]), tuple(shape[depth:])
    out = xp.zeros((math.prod(outer),) + inner, updates.dtype)
    linear = _linear_indices(xp, indices, outer)
    xp.add.at(out, linear, updates.reshape(linear.shape + inner))
    return out.reshape(tuple(shape))


def _gather_nd_grad(xp, ctx):
    return lambda grad, params, indices: _scatter_add(xp, grad, indices, params.shape)


def _scatter_nd(xp, ctx):
    shape = ctx.attrs["shape"]

    def scatter_nd(indices, updates):
        _check_updates_shape(indices.shape, updates.shape, shape)
        _check_inside(xp, indices, shape[:indices.shape[-1]], "shape", shape)
        return _scatter_add(xp, updates, indices, shape)
    return scatter_nd


def _check_updates_shape(indices_shape, updates_shape, shape):
    """tensorflow/core/kernels/scatter_nd_op.cc's rule, for shapes the graph left
    open: updates.shape = indices.shape[:-1] + shape[depth:]."""
    if tuple(updates_shape) != tuple(indices_shape[:-1]) + tuple(shape[indices_shape[-1]:]):
        text = ",".join
        raise errors.InvalidArgumentError(
            None, None, "Must have updates.shape = indices.shape[:batch_dim] + "
            f"params_shape[slice_dim:], got updates.shape: [{text(map(str, updates_shape))}]"
            f", indices.shape: [{text(map(str, indices_shape))}], params_shape: "
            f"[{text(map(str, shape))}]")


# -- pad ----------------------------------------------------------------------------


def _constant_pad(xp, ctx):
    paddings = ctx.attrs["paddings"]

    def pad(x, constant_value):
        if len(paddings) != x.ndim:     # a rank the graph did not know (pad_op.cc's words)
            raise errors.InvalidArgumentError(
                None, None, "The first dimension of paddings must be the rank of inputs"
                f"[{len(paddings)},2] [{','.join(map(str, x.shape))}]")
        shape = tuple(dim + before + after for dim, (before, after) in zip(x.shape, paddings))
        out = xp.full(shape, constant_value, dtype=x.dtype)
        out[_center(x.shape, paddings)] = x
        return out
    return pad


def _center(shape, paddings):
    return tuple(slice(before, before + dim) for dim, (before, _) in zip(shape, paddings))


def _mirror_pad(xp, ctx):
    paddings, mode = ctx.attrs["paddings"], ctx.attrs["mode"]

    def pad(x):
        if len(paddings) != x.ndim:
            raise errors.InvalidArgumentError(
                None, None, "The first dimension of paddings must be the rank of inputs"
                f"[{len(paddings)},2] [{','.join(map(str, x.shape))}]")
        shapes.check_mirror_padding(x.shape, paddings, mode)
        return xp.pad(x, paddings, mode=mode) if x.ndim else x.copy()  # NumPy: no [] pads
    return pad


def _pad_grad(xp, ctx):
    paddings, mode = ctx.attrs["paddings"], ctx.attrs["mode"]

    def pad_grad(grad, x):
        for axis, (before, after) in enumerate(paddings):
            grad = _fold_axis(xp, grad, axis, before, after, mode)
        return grad
    return pad_grad


def _fold_axis(xp, grad, axis, before, after, mode):
    """The gradient of one padded axis: the centre, plus (mirror modes) the
    padded parts added onto the elements they copied."""
    moved = xp.moveaxis(grad, axis, 0)
    size = moved.shape[0] - before - after
    center = moved[before:before + size].copy()
    if mode != "constant":
        skip = 1 if mode == "reflect" else 0     # REFLECT does not repeat the edge
        left, right = xp.flip(moved[:before], 0), xp.flip(moved[before + size:], 0)
        center[skip:skip + before] = center[skip:skip + before] + left
        end = size - skip
        center[end - after:end] = center[end - after:end] + right
    return xp.moveaxis(center, 0, axis)


# -- tile ---------------------------------------------------------------------------


def _tile(xp, ctx):
    multiples = ctx.attrs["multiples"]
    return lambda x: _tiled(xp, x, multiples)


def _tiled(xp, x, multiples):
    if len(multiples) != x.ndim:
        raise errors.InvalidArgumentError(
            None, None, f"Expected multiples argument to be a vector of length "
            f"{x.ndim} but got length {len(multiples)}")
    return xp.tile(x, multiples)


def _tile_grad(xp, ctx):
    multiples = ctx.attrs["multiples"]
    return lambda grad, x: _summed_tiles(grad, x, multiples)


def _summed_tiles(grad, x, multiples):
    """Each tile's gradient summed: grad seen as [m0, d0, m1, d1, ...]."""
    split = [size for pair in zip(multiples, x.shape) for size in pair]
    tiles = tuple(range(0, 2 * x.ndim, 2))
    return grad.reshape(split).sum(axis=tiles, dtype=grad.dtype)


def _dynamic_tile(xp, ctx):
    """tf.tile with multiples read on the host when the graph runs."""
    return lambda x, multiples: _tiled(xp, x, _read_multiples(multiples))


def _dynamic_tile_grad(xp, ctx):
    return lambda grad, x, multiples: _summed_tiles(grad, x, _read_multiples(multiples))


def _read_multiples(multiples):
    values = [int(count) for count in multiples.reshape(-1).tolist()]
    for axis, count in enumerate(values):
        if count < 0:
            raise errors.InvalidArgumentError(
                None, None, f"Expected multiples[{axis}] >= 0, but got {count}")
    return values
