"""Kernels of the indexing ops (towerflow/ops/slice_ops.py, index_ops.py,
select_ops.py), written once against the array module ``xp``.

NOTE: a slice bound given as a tensor, tf.range's arguments and the check
that gather's indices are in range are read on the host (TensorFlow keeps
them in host memory too); on a GPU that waits for the device, so a step
that uses them is not captured into a CUDA graph.
"""

import functools
import math

import numpy as np

from .. import errors
from ..graph import shapes


def build_index_kernels(xp):
    return {"StridedSlice": functools.partial(_strided_slice, xp),
            "StridedSliceGrad": functools.partial(_strided_slice_grad, xp),
            "WriteStepRow": functools.partial(_write_step_row, xp),
            "Range": functools.partial(_range, xp),
            "GatherV2": functools.partial(_gather, xp),
            "GatherGrad": functools.partial(_gather_grad, xp),
            "IndexedSlicesToDense": functools.partial(_indexed_slices_to_dense, xp),
            "OneHot": functools.partial(_one_hot, xp),
            "TopKV2": functools.partial(_top_k, xp),
            "InTopKV2": functools.partial(_in_top_k, xp),
            "ReverseV2": lambda ctx: functools.partial(_reverse, xp, ctx.attrs["axis"])}


def _reverse(xp, axes, x):
    """``x`` flipped along ``axes`` (normalised to its rank at run time when the
    graph did not know it), each axis once (tensorflow/core/kernels/reverse_op.cc)."""
    seen = set()
    for axis in axes:
        if not -x.ndim <= axis < x.ndim:
            raise errors.InvalidArgumentError(
                None, None, f"'axis'[{axes.index(axis)}] = {axis} is out of valid range "
                f"[{-x.ndim}, {x.ndim - 1}].")
        if axis % x.ndim in seen:
            raise errors.InvalidArgumentError(
                None, None, f"axis {axis % x.ndim} specified more than once.")
        seen.add(axis % x.ndim)
    return xp.flip(x, axis=tuple(seen))


# -- slicing ------------------------------------------------------------------------


def _strided_slice(xp, ctx):
    index_of = _indexer(ctx.attrs["spec"])
    return lambda x, *bounds: x[index_of(x.shape, bounds)]


def _strided_slice_grad(xp, ctx):
    index_of = _indexer(ctx.attrs["spec"])

    def scatter(grad, x, *bounds):
        out = xp.zeros(x.shape, grad.dtype)
        out[index_of(x.shape, bounds)] = grad
        return out
    return scatter


def _write_step_row(xp, ctx):
    """In place, after a copy at row 0 (see WriteStepRow's contract)."""
    def write(rows, index, value):
        index = _checked_index(int(index), rows.shape, 0)   # NOTE: a host read on a GPU
        if index == 0:
            rows = rows.copy()      # this run's own buffer: the initial rows stay
        rows[index] = value
        return rows
    return write


def _indexer(spec):
    """``index_of(shape, bounds)``: the NumPy index of ``spec`` for an input
    of ``shape``, with the Dynamic bounds' values read from ``bounds``."""
    consuming = sum(entry[0] != "..." and entry[0] != "new" for entry in spec)

    def index_of(shape, bounds):
        values = [int(bound) for bound in bounds]      # NOTE: a host read on a GPU
        index, axis = [], 0
        for kind, *entry in spec:
            # a Dynamic bound (slice_ops: a tuple holding an input position)
            entry = [values[v[0] - 1] if isinstance(v, tuple) else v for v in entry]
            if kind == "...":
                index.append(Ellipsis)
                axis += len(shape) - consuming
                continue
            index.append(_index_part(kind, entry, shape, axis))
            axis += kind != "new"
        return tuple(index)
    if any(isinstance(value, tuple) for _, *entry in spec for value in entry):
        return index_of
    return _last_shape_cached(index_of)


def _last_shape_cached(index_of):
    """``index_of`` of a spec without tensor bounds, whose index depends on the
    input's shape only: built again only when the shape changes, not per run."""
    last = [(None, None)]       # (shape, index); one tuple, swapped whole

    def cached(shape, bounds):
        last_shape, index = last[0]
        if last_shape != shape:
            index = index_of(shape, bounds)
            last[0] = (shape, index)
        return index
    return cached


def _index_part(kind, entry, shape, axis):
    if kind == "new":
        return None
    if kind == "index":
        return _checked_index(entry[0], shape, axis)
    if kind == "slice":
        return slice(*entry)
    begin, size = entry
    if axis >= len(shape):
        raise errors.InvalidArgumentError(
            None, None, f"tf.slice has more parts than the input's {len(shape)} dims")
    return slice(begin, begin + shapes.slice_size(begin, size, shape[axis], axis))


def _checked_index(index, shape, axis):
    dim = shape[axis] if axis < len(shape) else 0
    if not -dim <= index < dim:
        raise errors.InvalidArgumentError(
            None, None, f"slice index {index} of dimension {axis} out of bounds: "
            f"expected an index in [{-dim}, {dim})")
    return index


# -- range, gather, one_hot ---------------------------------------------------------


def _range(xp, ctx):
    dtype = ctx.output_dtypes[0]

    def arange(start, limit, delta):
        start, limit, delta = (value.item() for value in (start, limit, delta))
        shapes.range_length(start, limit, delta)      # TensorFlow's checks
        return xp.arange(start, limit, delta, dtype=dtype)
    return arange


def _gather(xp, ctx):
    axis = ctx.attrs["axis"]

    def gather(params, indices):
        _check_indices(xp, indices, params.shape[axis])
        return xp.take(params, indices, axis=axis)
    return gather


def _check_indices(xp, indices, limit):
    """TensorFlow's CPU rule: every index in [0, limit) (NumPy would wrap -1)."""
    if indices.size == 0:
        return
    outside = (indices < 0) | (indices >= limit)
    if bool(outside.any()):                     # NOTE: a host read on a GPU
        first = int(xp.argmax(outside.ravel()))
        position = ",".join(str(int(i)) for i in np.unravel_index(first, indices.shape))
        value = int(indices.ravel()[first])
        raise errors.InvalidArgumentError(      # tensorflow/core/kernels/gather_op.cc
            None, None, f"indices[{position}] = {value} is not in [0, {limit})")


def _gather_grad(xp, ctx):

    def scatter_add(grad, params, indices):
        """Sum the gradient rows of repeated indices into the params' rows."""
        axis = ctx.attrs["axis"] % params.ndim
        rows = indices.ndim
        moved = xp.moveaxis(grad, list(range(axis, axis + rows)), list(range(rows)))
        shape = (params.shape[axis],) + moved.shape[rows:]
        out = xp.zeros(shape, grad.dtype)
        xp.add.at(out, indices, moved)
        return xp.moveaxis(out, 0, axis)
    return scatter_add


def _indexed_slices_to_dense(xp, ctx):
    """TF's unsorted_segment_sum(values, indices, dense_shape[0]): zeros with
    the rows of ``values`` added at ``indices`` (repeated ones add up)."""
    def to_dense(values, indices, dense_shape):
        rows = int(dense_shape[0])          # NOTE: a host read on a GPU
        outside = (indices < 0) | (indices >= rows)
        if indices.size and bool(outside.any()):
            first = int(xp.argmax(outside))
            raise errors.InvalidArgumentError(  # segment_reduction_ops.cc's words
                None, None, f"segment_ids[{first}] = {int(indices[first])} is out of "
                f"range [0, {rows})")
        out = xp.zeros((rows,) + tuple(values.shape[1:]), values.dtype)
        xp.add.at(out, indices, values)
        return out
    return to_dense


def _one_hot(xp, ctx):
    depth, axis, dtype = ctx.attrs["depth"], ctx.attrs["axis"], ctx.output_dtypes[0]
    classes = xp.arange(depth)

    def one_hot(indices, on_value, off_value):
        hot = xp.expand_dims(indices, -1) == classes    # out of range: all off
        out = xp.where(hot, on_value, off_value).astype(dtype, copy=False)
        return out if axis == -1 else xp.moveaxis(out, -1, axis)
    return one_hot


# -- top_k, in_top_k ----------------------------------------------------------------


def _top_k(xp, ctx):
    k = ctx.attrs["k"]

    def top_k(x):
        columns = x.shape[-1]
        if columns < k:
            raise errors.InvalidArgumentError(
                None, None, f"input must have at least k columns. Had {columns}, "
                f"needed {k}")
        indices = _descending_order(xp, x)[..., :k]
        return _take_rows(xp, x, indices), indices.astype(np.int32)
    return top_k


def _descending_order(xp, x):
    """Indices sorting the last axis in decreasing order, ties in increasing
    index order (TensorFlow's): a stable ascending sort of the reversed rows,
    read backwards."""
    columns = x.shape[-1]
    ascending = xp.argsort(xp.flip(x, -1), axis=-1, kind="stable")
    return (columns - 1) - xp.flip(ascending, -1)


def _take_rows(xp, x, indices):
    """``x[..., indices]`` row by row (take_along_axis on the last axis)."""
    columns = x.shape[-1]
    # NOTE: the row count spelled out: reshape(-1, 0) of no rows is ambiguous
    rows = indices.reshape(math.prod(indices.shape[:-1]), indices.shape[-1])
    starts = xp.arange(rows.shape[0]).reshape(-1, 1) * columns
    return xp.take(x.reshape(-1), rows + starts).reshape(indices.shape)


def _in_top_k(xp, ctx):
    k = ctx.attrs["k"]

    def in_top_k(predictions, targets):
        """TensorFlow's rule: the target is in when fewer than k classes score
        strictly higher (ties with the k-th are in); a target out of range, or
        a row with a non-finite score, is never in."""
        classes = predictions.shape[1]
        valid = (targets >= 0) & (targets < classes)
        safe = xp.where(valid, targets, 0).reshape(-1, 1)
        target_score = _take_rows(xp, predictions, safe)
        higher = (predictions > target_score).sum(axis=1)
        finite = xp.isfinite(predictions).all(axis=1)
        return valid & finite & (higher < k)
    return in_top_k
