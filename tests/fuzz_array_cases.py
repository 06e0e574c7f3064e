"""The op fuzzer's table for tf.*'s array ops: shapes, joins and splits,
slices, pads and tiles, gathers and scatters, masks, sorts, fills.

Arguments that TensorFlow takes as lists (shapes, axes, sizes) are drawn
around their valid range, so that some are out of it: an axis past the rank,
a size larger than the dimension, an index outside [0, size), a huge fill.
"""

import numpy as np
from fuzz_harness import (
    HUGE_DIM,
    NUMERIC_DTYPES,
    Case,
    OpSpec,
    Rejected,
    choose,
    random_shape,
    random_values,
    static_or_not,
)
from fuzz_math_cases import require_dtype

import towerflow as tf

ANY_DTYPES = NUMERIC_DTYPES + (np.bool_,)



def some_array(rng, min_rank=0, max_rank=4, dtypes=ANY_DTYPES, specials=True):
    return random_values(rng, random_shape(rng, min_rank, max_rank), choose(rng, dtypes),
                         specials)


def axis_around(rng, rank, extra=1):
    """An axis in [-rank, rank), and one time in six one just outside it."""
    span = max(rank, 1)
    if rng.random() < 1 / 6:
        return choose(rng, (-span - extra, span + extra - 1))
    return int(rng.integers(-span, span))


def check_axis(axis, rank):
    if not -rank <= axis < rank:
        raise Rejected(f"axis {axis} is out of range for rank {rank}")
    return axis % rank

# -- reshape, transpose, expand_dims, squeeze --------------------------------------


def _reshape_cases(rng):
    x = some_array(rng)
    dims = list(x.shape) or [1]
    target = list(rng.permutation(dims)) if rng.random() < 0.7 else random_shape(rng)
    target = [int(dim) for dim in target]
    if target and rng.random() < 0.4:
        target[int(rng.integers(len(target)))] = -1
    if rng.random() < 0.1:
        target = target + [choose(rng, (-1, -2, HUGE_DIM))]
    return Case((x,), {"shape": target}, static_or_not(rng))


def _reshape(x, shape):
    if sum(dim == -1 for dim in shape) > 1 or any(dim < -1 for dim in shape):
        raise Rejected("one -1 at most, no other negative size")
    known = int(np.prod([dim for dim in shape if dim != -1]))
    if -1 in shape and known == 0:
        raise Rejected("Reshape cannot infer the missing input size for an empty tensor")
    return x.reshape(shape)


def _dynamic_reshape_cases(rng):
    case = _reshape_cases(rng)
    shape = np.array(case.args["shape"], np.int32 if rng.random() < 0.5 else np.int64)
    return Case(case.inputs + (shape,), {}, case.static)


def _transpose_cases(rng):
    x = some_array(rng)
    perm = [int(axis) for axis in rng.permutation(x.ndim)]
    if rng.random() < 0.2:
        perm = [int(rng.integers(-1, x.ndim + 1)) for _ in range(x.ndim + choose(rng, (0, 1)))]
    return Case((x,), {"perm": perm if rng.random() < 0.9 else None}, static_or_not(rng))


def _transpose(x, perm):
    perm = list(range(x.ndim))[::-1] if perm is None else perm
    if sorted(perm) != list(range(x.ndim)):
        raise Rejected(f"{perm} is not a permutation of {x.ndim} axes")
    return np.transpose(x, perm)


def _expand_dims_cases(rng):
    x = some_array(rng, max_rank=3)
    return Case((x,), {"axis": axis_around(rng, x.ndim + 1)}, static_or_not(rng))


def _expand_dims(x, axis):
    check_axis(axis, x.ndim + 1)
    return np.expand_dims(x, axis)


def _squeeze_cases(rng):
    x = random_values(rng, random_shape(rng, dims=(1, 1, 2, 0)), choose(rng, ANY_DTYPES))
    axis = None if rng.random() < 0.4 or not x.ndim else [axis_around(rng, x.ndim)]
    return Case((x,), {"axis": axis}, static_or_not(rng, 0.6))


def _squeeze(x, axis):
    if axis is None:
        return np.squeeze(x)
    axes = [check_axis(value, x.ndim) for value in axis]
    if any(x.shape[value] != 1 for value in axes):
        raise Rejected("Can not squeeze a dimension other than 1")
    return np.squeeze(x, tuple(axes))

# -- concat, stack, unstack, split --------------------------------------------------


def _joined_cases(rng, count_range=(1, 4)):
    shape = random_shape(rng, max_rank=3)
    dtype = choose(rng, ANY_DTYPES)
    count = int(rng.integers(*count_range))
    shapes = [shape] * count
    if shape and rng.random() < 0.5:  # vary one axis: concat takes it, stack refuses it
        axis = int(rng.integers(len(shape)))
        shapes = [shape[:axis] + (int(rng.choice((0, 1, 2))),) + shape[axis + 1:]
                  for _ in shapes]
    arrays = tuple(random_values(rng, s, dtype) for s in shapes)
    return Case(arrays, {"axis": axis_around(rng, len(shape) + 1)}, static_or_not(rng))


def _concat(*xs, axis):
    if xs[0].ndim == 0:
        raise Rejected("Can't concatenate scalars (use tf.stack instead)")
    return np.concatenate(xs, axis=check_axis(axis, xs[0].ndim))


def _stack(*xs, axis):
    if len({x.shape for x in xs}) > 1:
        raise Rejected("Shapes of all inputs must match")
    return np.stack(xs, axis=check_axis(axis, xs[0].ndim + 1))


def _unstack_cases(rng):
    x = some_array(rng, min_rank=1, max_rank=3)
    return Case((x,), {"axis": axis_around(rng, x.ndim)}, True)


def _unstack(x, axis):
    axis = check_axis(axis, x.ndim)
    return [np.take(x, index, axis=axis) for index in range(x.shape[axis])]


def _split_cases(rng):
    x = some_array(rng, min_rank=1, max_rank=3)
    axis = axis_around(rng, x.ndim)
    size = x.shape[axis % x.ndim] if -x.ndim <= axis < x.ndim else 1
    if rng.random() < 0.5:
        splits = int(choose(rng, (1, 2, 3, max(size, 1))))
    else:
        splits = _random_sizes(rng, size)
    return Case((x,), {"num_or_size_splits": splits, "axis": axis}, True)


def _random_sizes(rng, total):
    cuts = sorted(int(cut) for cut in rng.integers(0, total + 1, int(rng.integers(0, 3))))
    sizes = [high - low for low, high in zip([0] + cuts, cuts + [total])]
    if rng.random() < 0.3:
        sizes[int(rng.integers(len(sizes)))] = -1
    if rng.random() < 0.15:
        sizes[-1] += 1                         # they no longer add up
    return sizes


def _split(x, num_or_size_splits, axis):
    axis = check_axis(axis, x.ndim)
    total = x.shape[axis]
    if isinstance(num_or_size_splits, int):
        if num_or_size_splits <= 0 or total % num_or_size_splits:
            raise Rejected("Number of ways to split should evenly divide the split dimension")
        return np.split(x, num_or_size_splits, axis=axis)
    sizes = _resolved_sizes(num_or_size_splits, total)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _resolved_sizes(sizes, total):
    sizes = list(sizes)
    if sizes.count(-1) > 1 or any(size < -1 for size in sizes):
        raise Rejected("one -1 at most")
    if -1 in sizes:
        sizes[sizes.index(-1)] = total - (sum(sizes) + 1)
    if sum(sizes) != total or min(sizes) < 0:
        raise Rejected("Determined shape must either match input shape along split_dim "
                       "exactly if fully specified, or be less than the size of the input "
                       "along split_dim if not fully specified")
    return sizes

# -- tile, pad, reverse, slice, strided_slice --------------------------------------


def _tile_cases(rng):
    x = some_array(rng, max_rank=3)
    multiples = [int(rng.choice((0, 1, 2, 3))) for _ in range(x.ndim)]
    if rng.random() < 0.15:
        multiples.append(1)
    if multiples and rng.random() < 0.1:
        multiples[0] = choose(rng, (-1, HUGE_DIM ** 2))
    return Case((x,), {"multiples": multiples}, static_or_not(rng))


def _tile(x, multiples):
    if len(multiples) != x.ndim or min(multiples, default=0) < 0:
        raise Rejected("Expected multiples argument to be a vector of length rank")
    return np.tile(x, multiples)


def _pad_cases(rng):
    x = some_array(rng, max_rank=3)
    paddings = [[int(rng.integers(0, 3)), int(rng.integers(0, 3))] for _ in range(x.ndim)]
    if rng.random() < 0.1:
        paddings.append([0, 0])
    if paddings and rng.random() < 0.1:
        paddings[0][0] = choose(rng, (-1, HUGE_DIM ** 2))
    mode = choose(rng, ("CONSTANT", "REFLECT", "SYMMETRIC"))
    return Case((x,), {"paddings": paddings, "mode": mode}, static_or_not(rng))


def _pad(x, paddings, mode):
    if len(paddings) != x.ndim or min((v for pair in paddings for v in pair), default=0) < 0:
        raise Rejected("paddings must be a [rank, 2] matrix of non-negative sizes")
    if x.ndim == 0:
        return x.copy()
    limit = {"CONSTANT": None, "REFLECT": 0, "SYMMETRIC": 1}[mode]
    if limit is not None and any(max(pair) > dim - 1 + limit
                                 for pair, dim in zip(paddings, x.shape)):
        raise Rejected(f"paddings must be less than the dimension size in {mode} mode")
    return np.pad(x, paddings, mode=mode.lower() if mode != "CONSTANT" else "constant")


def _reverse_cases(rng):
    x = some_array(rng, min_rank=1, max_rank=3)
    axes = [axis_around(rng, x.ndim) for _ in range(int(rng.integers(1, 3)))]
    return Case((x,), {"axis": axes}, static_or_not(rng, 0.7))


def _reverse(x, axis):
    axes = [check_axis(value, x.ndim) for value in axis]
    if len(set(axes)) != len(axes):
        raise Rejected("axis specified more than once")
    return np.flip(x, axes)


def _slice_cases(rng):
    x = some_array(rng, min_rank=1, max_rank=3)
    begin = [int(rng.integers(0, dim + 2)) for dim in x.shape]
    size = [int(rng.integers(-1, dim + 1)) for dim in x.shape]
    return Case((x,), {"begin": begin, "size": size}, static_or_not(rng))


def _slice(x, begin, size):
    ends = []
    for start, length, dim in zip(begin, size, x.shape):
        length = dim - start if length == -1 else length
        if not (0 <= start <= dim and 0 <= length and start + length <= dim):
            raise Rejected(f"Expected size in [0, {dim - start}], but got {length}")
        ends.append(start + length)
    return x[tuple(slice(start, end) for start, end in zip(begin, ends))]


def _strided_slice_cases(rng):
    x = some_array(rng, min_rank=1, max_rank=3)
    begin = [int(rng.integers(-dim - 1, dim + 2)) for dim in x.shape]
    end = [int(rng.integers(-dim - 1, dim + 2)) for dim in x.shape]
    strides = [int(choose(rng, (1, 1, 2, -1, -2, 0 if rng.random() < 0.1 else 1)))
               for _ in x.shape]
    return Case((x,), {"begin": begin, "end": end, "strides": strides}, static_or_not(rng))


def _strided_slice(x, begin, end, strides):
    if 0 in strides:
        raise Rejected("strides must be non-zero")
    return x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))]

# -- fills and shapes ---------------------------------------------------------------


def _fill_dims(rng):
    """A shape; one time in seven one with a negative size or too big for any
    memory (2**50 elements: huge, not merely large, so nothing is allocated)."""
    dims = [int(dim) for dim in random_shape(rng)]
    if rng.random() < 0.15:
        dims = dims + choose(rng, ([-1], [HUGE_DIM, HUGE_DIM]))
    return dims


def _fill_cases(rng):
    value = random_values(rng, (), choose(rng, ANY_DTYPES))
    return Case((value,), {"dims": _fill_dims(rng)}, static_or_not(rng))


def _fill(value, dims):
    return np.full(dims, value, value.dtype)


def _shaped_cases(rng):
    return Case((), {"shape": _fill_dims(rng), "dtype": choose(rng, (tf.float32, tf.int32,
                                                                     tf.bool))}, False)


def _zeros(shape, dtype):
    return np.zeros(shape, dtype.as_numpy_dtype)


def _ones(shape, dtype):
    return np.ones(shape, dtype.as_numpy_dtype)


def _shape_cases(rng):
    return Case((some_array(rng),), {"out_type": choose(rng, (tf.int32, tf.int64))},
                static_or_not(rng))


def _range_cases(rng):
    start, limit = (int(rng.integers(-6, 7)) for _ in range(2))
    delta = int(choose(rng, (1, 2, -1, -3, 0)))
    dtype = choose(rng, (np.int32, np.int64, np.float32))
    return Case(tuple(np.asarray(value, dtype) for value in (start, limit, delta)), {},
                static_or_not(rng))


def _range(start, limit, delta):
    if delta == 0 or (limit - start) * delta < 0:
        raise Rejected("Requires delta != 0 and start <= limit when delta > 0 "
                       "(start >= limit when delta < 0)")
    return np.arange(start, limit, delta, dtype=start.dtype)


def _add_n_cases(rng):
    case = _joined_cases(rng)
    return Case(case.inputs, {}, case.static)


def _add_n(*xs):
    require_dtype(xs[0], NUMERIC_DTYPES)
    if len({x.shape for x in xs}) > 1:
        raise Rejected("Inputs to AddN must have the same size and shape")
    total = xs[0].copy()
    for x in xs[1:]:
        total = total + x
    return total


def _clip_cases(rng):
    x = some_array(rng, dtypes=NUMERIC_DTYPES)
    low, high = sorted(random_values(rng, (2,), x.dtype, specials=False))
    return Case((x, np.asarray(low), np.asarray(high)), {}, static_or_not(rng))


def _clip_by_value(x, low, high):
    require_dtype(x, NUMERIC_DTYPES)
    return np.minimum(np.maximum(x, low), high)


ARRAY_SPECS = [
    OpSpec("reshape", tf.reshape, _reshape, _reshape_cases),
    OpSpec("reshape(shape tensor)", tf.reshape, lambda x, shape: _reshape(x, list(shape)),
           _dynamic_reshape_cases),
    OpSpec("transpose", tf.transpose, _transpose, _transpose_cases),
    OpSpec("expand_dims", tf.expand_dims, _expand_dims, _expand_dims_cases),
    OpSpec("squeeze", tf.squeeze, _squeeze, _squeeze_cases),
    OpSpec("concat", lambda *xs, axis: tf.concat(list(xs), axis), _concat, _joined_cases),
    OpSpec("stack", lambda *xs, axis: tf.stack(list(xs), axis), _stack, _joined_cases),
    OpSpec("unstack", tf.unstack, _unstack, _unstack_cases),
    OpSpec("split", tf.split, _split, _split_cases),
    OpSpec("tile", tf.tile, _tile, _tile_cases),
    OpSpec("pad", tf.pad, _pad, _pad_cases),
    OpSpec("reverse", tf.reverse, _reverse, _reverse_cases),
    OpSpec("slice", tf.slice, _slice, _slice_cases),
    OpSpec("strided_slice", tf.strided_slice, _strided_slice, _strided_slice_cases),
    OpSpec("fill", lambda value, dims: tf.fill(dims, value), _fill, _fill_cases),
    OpSpec("zeros", tf.zeros, _zeros, _shaped_cases),
    OpSpec("ones", tf.ones, _ones, _shaped_cases),
    OpSpec("shape", tf.shape, lambda x, out_type: np.array(x.shape, out_type.as_numpy_dtype),
           _shape_cases),
    OpSpec("range", tf.range, _range, _range_cases),
    OpSpec("add_n", lambda *xs: tf.add_n(list(xs)), _add_n, _add_n_cases),
    OpSpec("clip_by_value", tf.clip_by_value, _clip_by_value, _clip_cases),
]
