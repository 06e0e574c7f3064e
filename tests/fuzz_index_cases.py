"""The op fuzzer's table for tf.*'s index ops: gathers and scatters, one_hot,
masks and where, sorts, unique and top_k.

Indices are drawn mostly inside [0, size) and one time in four with one
outside it (negative or past the end), which TensorFlow's CPU kernels refuse
(one_hot's excepted: a row of zeros).
"""

import numpy as np
from fuzz_array_cases import (
    ANY_DTYPES,
    axis_around,
    check_axis,
    some_array,
    static_or_not,
)
from fuzz_harness import (
    NUMERIC_DTYPES,
    Case,
    OpSpec,
    Rejected,
    choose,
    random_shape,
    random_values,
)

import towerflow as tf

# -- gather, gather_nd, scatter_nd, one_hot ----------------------------------------


def _indices(rng, size, shape, dtype=None):
    """Indices mostly in [0, size), some out of it (negative or past the end)."""
    dtype = dtype or choose(rng, (np.int32, np.int64))
    values = rng.integers(0, max(size, 1), shape)
    if rng.random() < 0.25 and values.size:
        values.flat[int(rng.integers(values.size))] = choose(rng, (-1, size, size + 7))
    return np.asarray(values, dtype)


def _gather_cases(rng):
    params = some_array(rng, min_rank=1, max_rank=3)
    axis = axis_around(rng, params.ndim)
    size = params.shape[axis % params.ndim]
    indices = _indices(rng, size, random_shape(rng, max_rank=2))
    return Case((params, indices), {"axis": axis}, static_or_not(rng))


def _gather(params, indices, axis):
    axis = check_axis(axis, params.ndim)
    _check_in_range(indices, params.shape[axis])
    return np.take(params, indices, axis=axis)


def _check_in_range(indices, size):
    bad = np.flatnonzero((indices < 0) | (indices >= size))
    if bad.size:
        raise Rejected(f"indices[{bad[0]}] = {indices.flat[bad[0]]} is not in [0, {size})")


def _gather_nd_cases(rng):
    params = some_array(rng, min_rank=1, max_rank=3)
    depth = int(rng.integers(1, params.ndim + 1 + (rng.random() < 0.1)))
    batch = random_shape(rng, max_rank=2)
    columns = [_indices(rng, params.shape[i] if i < params.ndim else 1, batch + (1,),
                        np.int64) for i in range(depth)]
    indices = np.concatenate(columns, axis=-1).astype(choose(rng, (np.int32, np.int64)))
    return Case((params, indices), {}, static_or_not(rng))


def _gather_nd(params, indices):
    depth = indices.shape[-1]
    if depth > params.ndim:
        raise Rejected("index innermost dimension length must be <= params rank")
    for column, size in zip(np.moveaxis(indices, -1, 0), params.shape):
        _check_in_range(column, size)
    flat = indices.reshape(-1, depth)
    rows = [params[tuple(index)] for index in flat]
    out_shape = indices.shape[:-1] + params.shape[depth:]
    return np.array(rows, params.dtype).reshape(out_shape)


def _scatter_nd_cases(rng):
    shape = [int(dim) for dim in random_shape(rng, min_rank=1, max_rank=3, dims=(1, 2, 3, 5))]
    depth = int(rng.integers(1, len(shape) + 1))
    batch = random_shape(rng, min_rank=1, max_rank=2)
    columns = [_indices(rng, shape[i], batch + (1,), np.int64) for i in range(depth)]
    indices = np.concatenate(columns, axis=-1).astype(choose(rng, (np.int32, np.int64)))
    updates_shape = batch + tuple(shape[depth:])
    if rng.random() < 0.1:
        updates_shape = updates_shape + (2,)
    updates = random_values(rng, updates_shape, choose(rng, NUMERIC_DTYPES), specials=False)
    return Case((indices, updates), {"shape": shape}, static_or_not(rng))


def _scatter_nd(indices, updates, shape):
    depth = indices.shape[-1]
    if updates.shape != indices.shape[:-1] + tuple(shape[depth:]):
        raise Rejected("updates must have shape indices.shape[:-1] + shape[depth:]")
    for column, size in zip(np.moveaxis(indices, -1, 0), shape):
        _check_in_range(column, size)
    out = np.zeros(shape, updates.dtype)
    np.add.at(out, tuple(np.moveaxis(indices, -1, 0)), updates)
    return out


def _one_hot_cases(rng):
    depth = int(choose(rng, (0, 1, 3, 5)))
    indices = _indices(rng, depth, random_shape(rng, max_rank=2))
    rank = indices.ndim
    axis = choose(rng, (-1, -1, 0, rank, rank + 1))
    return Case((indices,), {"depth": depth, "axis": axis}, static_or_not(rng))


def _one_hot(indices, depth, axis):
    """Indices outside [0, depth) give a row of zeros (TensorFlow's rule)."""
    if not -1 <= axis <= indices.ndim:
        raise Rejected("axis must be -1 or in [0, rank]")
    hot = (indices[..., None] == np.arange(depth)).astype(np.float32)
    return hot if axis == -1 else np.moveaxis(hot, -1, axis)

# -- masks, where ---------------------------------------------------------------------


def _boolean_mask_cases(rng):
    x = some_array(rng, min_rank=1, max_rank=3)
    mask_rank = int(rng.integers(1, x.ndim + 1))
    mask_shape = x.shape[:mask_rank]
    if rng.random() < 0.15:
        mask_shape = mask_shape[:-1] + (mask_shape[-1] + 1,)
    # NOTE: static shapes: TensorFlow needs the mask's rank when it builds the op
    return Case((x, random_values(rng, mask_shape, np.bool_)), {}, True)


def _boolean_mask(x, mask):
    if x.shape[:mask.ndim] != mask.shape:
        raise Rejected("mask's shape must match the tensor's leading dimensions")
    return x[mask]


def _sequence_mask_cases(rng):
    lengths = np.asarray(rng.integers(-1, 6, random_shape(rng, max_rank=2)),
                         choose(rng, (np.int32, np.int64)))
    maxlen = choose(rng, (None, 0, 3, 6))
    return Case((lengths,), {"maxlen": maxlen}, static_or_not(rng))


def _sequence_mask(lengths, maxlen):
    """Without maxlen, TF takes max(lengths): of no lengths, the lowest int."""
    if maxlen is None:
        maxlen = int(lengths.max(initial=np.iinfo(lengths.dtype).min))
        if maxlen < 0:
            raise Rejected("Requires start <= limit when delta > 0")
    return np.arange(maxlen) < lengths[..., None]


def _where_cases(rng):
    # NOTE: a condition of x's shape or a scalar only: where TF1's Select and
    # towerflow's where (TF2's, which broadcasts) agree
    shape = random_shape(rng, max_rank=3)
    condition_shape = shape if rng.random() < 0.7 else ()
    dtype = choose(rng, ANY_DTYPES)
    return Case((random_values(rng, condition_shape, np.bool_),
                 random_values(rng, shape, dtype), random_values(rng, shape, dtype)), {},
                static_or_not(rng))


def _where(condition, x, y):
    """Only shapes where TF1's Select and TF2's where agree: the condition of
    x's shape, or a scalar."""
    if condition.shape not in (x.shape, ()):
        raise Rejected("condition must be a scalar or of x's shape")
    return np.where(condition, x, y)

# -- sort, argsort, unique, top_k ---------------------------------------------------


def _sort_cases(rng):
    x = some_array(rng, min_rank=1, max_rank=3, dtypes=NUMERIC_DTYPES, specials=False)
    return Case((x,), {"axis": axis_around(rng, x.ndim),
                       "direction": choose(rng, ("ASCENDING", "DESCENDING"))},
                True)


def _sort(x, axis, direction):
    axis = check_axis(axis, x.ndim)
    ordered = np.sort(x, axis=axis, kind="stable")
    return np.flip(ordered, axis) if direction == "DESCENDING" else ordered


def _argsort(x, axis, direction):
    axis = check_axis(axis, x.ndim)
    keys = -x.astype(np.float64) if direction == "DESCENDING" else x
    return np.argsort(keys, axis=axis, kind="stable").astype(np.int32)


def _unique_cases(rng):
    x = np.asarray(rng.integers(-3, 4, random_shape(rng, max_rank=2)),
                   choose(rng, NUMERIC_DTYPES))
    return Case((x,), {}, static_or_not(rng))


def _unique(x):
    if x.ndim != 1:
        raise Rejected("unique expects a 1D vector")
    values, first, inverse = np.unique(x, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return [values[order], rank[inverse].astype(np.int32)]


def _top_k_cases(rng):
    """Distinct values in each row, so that only one order is right."""
    shape = random_shape(rng, min_rank=1, max_rank=3)
    x = (rng.permutation(int(np.prod(shape))).reshape(shape) - 4).astype(
        choose(rng, NUMERIC_DTYPES))
    k = int(rng.integers(-1, x.shape[-1] + 2))
    return Case((x,), {"k": k}, static_or_not(rng))


def _top_k(x, k):
    if not 0 <= k <= x.shape[-1]:
        raise Rejected(f"input must have at least k columns. Had {x.shape[-1]}, needed {k}")
    order = np.argsort(-x.astype(np.float64), axis=-1, kind="stable")[..., :k]
    return [np.take_along_axis(x, order, axis=-1), order.astype(np.int32)]

INDEX_SPECS = [
    OpSpec("gather", tf.gather, _gather, _gather_cases),
    OpSpec("nn.embedding_lookup", lambda params, ids, axis: tf.nn.embedding_lookup(params, ids),
           lambda params, ids, axis: _gather(params, ids, 0), _gather_cases),
    OpSpec("gather_nd", tf.gather_nd, _gather_nd, _gather_nd_cases),
    OpSpec("scatter_nd", tf.scatter_nd, _scatter_nd, _scatter_nd_cases),
    OpSpec("one_hot", tf.one_hot, _one_hot, _one_hot_cases),
    OpSpec("boolean_mask", tf.boolean_mask, _boolean_mask, _boolean_mask_cases),
    OpSpec("sequence_mask", tf.sequence_mask, _sequence_mask, _sequence_mask_cases),
    OpSpec("where", tf.where, _where, _where_cases),
    OpSpec("sort", tf.sort, _sort, _sort_cases),
    OpSpec("argsort", tf.argsort, _argsort, _sort_cases),
    OpSpec("unique", tf.unique, _unique, _unique_cases),
    OpSpec("nn.top_k", tf.nn.top_k, _top_k, _top_k_cases),
]
