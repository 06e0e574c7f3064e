"""Static shapes: :class:`TensorShape` and the shape rules ops share.

A shape of unknown rank has ``dims is None``. Inside towerflow ``dims`` is a
tuple of ints and None (unknown, printed ``?``); users see TensorFlow 1.15's
API, where indexing or iterating a shape gives :class:`Dimension` objects::

    TensorShape([None, 784]).as_list()   # [None, 784]
    str(TensorShape([None, 784]))         # '(?, 784)'
    TensorShape([None, 784])[1].value    # 784
"""

import math
import operator

from .dimension import Dimension, as_dimension


class TensorShape:
    """The static shape of a tensor, possibly partly unknown."""

    __slots__ = ("dims",)

    def __init__(self, dims):
        if dims is None:
            self.dims = None
        elif isinstance(dims, TensorShape):
            self.dims = dims.dims
        elif isinstance(dims, (str, bytes)):
            raise TypeError("A string has ambiguous TensorShape, please wrap in a list "
                            f"or convert to an int: {dims}")
        elif isinstance(dims, (int, Dimension)) or not hasattr(dims, "__iter__"):
            self.dims = (_as_dim(dims),)
        else:
            self.dims = tuple(_as_dim(dim) for dim in dims)

    @property
    def ndims(self):
        return None if self.dims is None else len(self.dims)

    rank = ndims

    def as_list(self):
        """The dims as a list of ints and None (unknown)."""
        if self.dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self.dims)

    def is_fully_defined(self):
        return self.dims is not None and None not in self.dims

    def assert_is_fully_defined(self):
        if not self.is_fully_defined():
            raise ValueError(f"Shape {self} is not fully defined")

    def num_elements(self):
        if not self.is_fully_defined():
            return None
        count = 1
        for dim in self.dims:
            count *= dim
        return count

    def is_compatible_with(self, other):
        other = as_shape(other)
        if self.dims is None or other.dims is None:
            return True
        if len(self.dims) != len(other.dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self.dims, other.dims))

    def assert_is_compatible_with(self, other):
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {as_shape(other)} are incompatible")

    def merge_with(self, other):
        """The most specific shape compatible with both; ValueError if none."""
        other = as_shape(other)
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {other} are not compatible")
        if self.dims is None:
            return other
        if other.dims is None:
            return self
        return TensorShape([a if a is not None else b for a, b in zip(self.dims, other.dims)])

    def most_specific_compatible_shape(self, other):
        """The dims both shapes agree on; the others unknown."""
        other = as_shape(other)
        if self.dims is None or other.dims is None or self.ndims != other.ndims:
            return unknown_shape()
        return TensorShape([a if a == b else None for a, b in zip(self.dims, other.dims)])

    def concatenate(self, other):
        """The dims of ``self`` then those of ``other`` (unknown if either is)."""
        other = as_shape(other)
        if self.dims is None or other.dims is None:
            return unknown_shape()
        return TensorShape(self.dims + other.dims)

    def __add__(self, other):
        return self.concatenate(other)

    def __radd__(self, other):
        return as_shape(other).concatenate(self)

    def assert_same_rank(self, other):
        other = as_shape(other)
        if self.ndims is not None and other.ndims is not None and self.ndims != other.ndims:
            raise ValueError(f"Shapes {self} and {other} must have the same rank")

    def assert_has_rank(self, rank):
        if self.ndims not in (None, rank):
            raise ValueError(f"Shape {self} must have rank {rank}")

    def with_rank(self, rank):
        """This shape, given ``rank`` if unknown; ValueError for another rank."""
        try:
            return self.merge_with(unknown_shape(rank))
        except ValueError:
            raise ValueError(f"Shape {self} must have rank {rank}") from None

    def with_rank_at_least(self, rank):
        if self.ndims is not None and self.ndims < rank:
            raise ValueError(f"Shape {self} must have rank at least {rank}")
        return self

    def with_rank_at_most(self, rank):
        if self.ndims is not None and self.ndims > rank:
            raise ValueError(f"Shape {self} must have rank at most {rank}")
        return self

    def __bool__(self):
        # TF 1.15: a shape is true when its rank is known (even a scalar's).
        return self.dims is not None

    def __len__(self):
        if self.dims is None:
            raise ValueError("Cannot take the length of Shape with unknown rank.")
        return len(self.dims)

    def __iter__(self):
        if self.dims is None:
            raise ValueError("Cannot iterate over a shape with unknown rank.")
        return iter([Dimension(dim) for dim in self.dims])

    def __getitem__(self, key):
        """A Dimension for an index, a TensorShape for a slice (TF 1.15)."""
        if self.dims is not None:
            if isinstance(key, slice):
                return TensorShape(self.dims[key])
            return Dimension(self.dims[key])
        if isinstance(key, slice):
            return _slice_of_unknown_rank(key)
        return Dimension(None)

    def __eq__(self, other):
        try:
            return self.dims == as_shape(other).dims
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self):
        return hash(self.dims)

    def __repr__(self):
        if self.dims is None:
            return "TensorShape(None)"
        return f"TensorShape({[Dimension(dim) for dim in self.dims]})"

    def __str__(self):
        if self.dims is None:
            return "<unknown>"
        text = ", ".join("?" if dim is None else str(dim) for dim in self.dims)
        return f"({text},)" if len(self.dims) == 1 else f"({text})"


def _slice_of_unknown_rank(key):
    """TF 1.15: a slice of a shape of unknown rank has a known rank only when
    both ends are given and not negative."""
    if key.step is not None:
        raise ValueError("Steps are not yet handled")
    start = 0 if key.start is None else key.start
    if key.stop is None or start < 0 or key.stop < 0:
        return unknown_shape()
    return unknown_shape(key.stop - start)


def _as_dim(dim):
    """A dimension as towerflow keeps it: an int >= 0, or None (unknown)."""
    if dim is None:
        return None
    return as_dimension(dim).value


def as_shape(shape):
    """A TensorShape from a TensorShape, list/tuple of dims, or None (unknown rank)."""
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)


def unknown_shape(rank=None):
    return TensorShape(None if rank is None else [None] * rank)


def scalar():
    return TensorShape([])


# --- shape rules shared by several ops -------------------------------------


def broadcast(shape_a, shape_b):
    """NumPy broadcasting on static shapes; ValueError when dimensions clash."""
    if shape_a.dims is None or shape_b.dims is None:
        return unknown_shape()
    a, b = list(shape_a.dims), list(shape_b.dims)
    width = max(len(a), len(b))
    a = [1] * (width - len(a)) + a
    b = [1] * (width - len(b)) + b
    return TensorShape([_broadcast_dim(x, y, shape_a, shape_b) for x, y in zip(a, b)])


def _broadcast_dim(x, y, shape_a, shape_b):
    if x == 1:
        return y
    if y == 1:
        return x
    if x is None or y is None:
        return x if y is None else y
    if x != y:
        raise ValueError(f"Incompatible shapes for broadcasting: {shape_a} and {shape_b}")
    return x


def normalize_axes(axis, rank, what="axis"):
    """Axis argument (None, int or list) → sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(rank)) if rank is not None else None
    try:
        axes = [operator.index(axis)]   # an int, a NumPy int or a Dimension
    except TypeError:
        axes = list(axis)
    if rank is None:
        return tuple(axes)
    result = []
    for item in axes:
        if not -rank <= item < max(rank, 1):
            raise ValueError(f"{what} {item} is out of range for a tensor of rank {rank}")
        result.append(item % rank if rank else 0)
    return tuple(sorted(set(result)))


def reduce(shape, axes, keepdims):
    """Shape after reducing ``axes`` (already normalised; None = all, unknown rank)."""
    if shape.dims is None:
        return unknown_shape()
    if keepdims:
        return TensorShape([1 if i in axes else d for i, d in enumerate(shape.dims)])
    return TensorShape([d for i, d in enumerate(shape.dims) if i not in axes])


def matmul(shape_a, shape_b, transpose_a, transpose_b):
    """Shape of ``a @ b`` with optional transposes of the two last axes."""
    if shape_a.dims is None or shape_b.dims is None:
        return unknown_shape()
    if len(shape_a.dims) < 2 or len(shape_b.dims) < 2:
        raise ValueError(
            f"MatMul needs inputs of rank >= 2, got shapes {shape_a} and {shape_b}")
    rows, inner_a = shape_a.dims[-2:][::-1] if transpose_a else shape_a.dims[-2:]
    inner_b, cols = shape_b.dims[-2:][::-1] if transpose_b else shape_b.dims[-2:]
    if inner_a is not None and inner_b is not None and inner_a != inner_b:
        raise ValueError(
            f"Dimensions must be equal, but are {inner_a} and {inner_b} for MatMul "
            f"with input shapes {shape_a}, {shape_b}")
    batch = broadcast(TensorShape(shape_a.dims[:-2]), TensorShape(shape_b.dims[:-2]))
    return TensorShape(list(batch.dims) + [rows, cols])


def reshape(input_shape, target):
    """Shape of reshaping to ``target`` (a list that may hold one -1)."""
    target = list(target)
    if target.count(-1) > 1:
        raise ValueError(f"Reshape target {target} may hold at most one -1")
    if -1 not in target:
        _check_same_size(input_shape, target)
        return TensorShape(target)
    known = 1
    for dim in target:
        known *= dim if dim != -1 else 1
    total = input_shape.num_elements()
    if total is None:
        return TensorShape([None if dim == -1 else dim for dim in target])
    if known == 0 or total % known:
        raise ValueError(f"Cannot reshape a tensor of shape {input_shape} to {target}")
    return TensorShape([total // known if dim == -1 else dim for dim in target])


def reshape_partial(input_shape, target):
    """TF's Reshape shape function for a target known only in part (a
    TensorShape whose unknown dims came from -1 or run-time values): one
    unknown target dim is inferred from the input where TF infers it."""
    if target.dims is None or input_shape.dims is None:
        return target
    out_unknown = [axis for axis, dim in enumerate(target.dims) if dim is None]
    in_unknown = [axis for axis, dim in enumerate(input_shape.dims) if dim is None]
    if len(out_unknown) > 1 or len(in_unknown) > 1:
        return target
    known_out = math.prod(dim for dim in target.dims if dim is not None)
    known_in = math.prod(dim for dim in input_shape.dims if dim is not None)
    if not out_unknown and not in_unknown:
        _check_same_size(input_shape, list(target.dims))
        return target
    if out_unknown and not in_unknown and known_out > 0:
        if known_in % known_out:
            raise ValueError(f"Dimension size must be evenly divisible by {known_out} "
                             f"but is {known_in}")
        return _replaced(target, out_unknown[0], known_in // known_out)
    if out_unknown and in_unknown and known_in == known_out:
        return _replaced(target, out_unknown[0], input_shape.dims[in_unknown[0]])
    return target


def _replaced(shape, axis, dim):
    dims = list(shape.dims)
    dims[axis] = dim
    return TensorShape(dims)


def _check_same_size(input_shape, target):
    total = input_shape.num_elements()
    wanted = 1
    for dim in target:
        wanted *= dim
    if total is not None and total != wanted:
        raise ValueError(
            f"Cannot reshape a tensor with {total} elements (shape {input_shape}) "
            f"to shape {target} ({wanted} elements)")


def transpose(shape, perm):
    if shape.dims is None:
        return unknown_shape(None if perm is None else len(perm))
    if sorted(perm) != list(range(len(shape.dims))):
        raise ValueError(f"transpose perm {list(perm)} is not a permutation of the "
                         f"{len(shape.dims)} axes of shape {shape}")
    return TensorShape([shape.dims[axis] for axis in perm])


def concat(shapes, axis):
    """Shape of concatenating ``shapes`` along ``axis`` (normalised)."""
    known = [shape for shape in shapes if shape.dims is not None]
    if not known:
        return unknown_shape()
    rank = len(known[0].dims)
    result = [None] * rank
    total = 0
    for shape in known:
        if len(shape.dims) != rank:
            raise ValueError(f"concat inputs must share one rank, got {shapes}")
        for i, dim in enumerate(shape.dims):
            if i != axis:
                result[i] = _merge_dim(result[i], dim, shapes)
        total = None if total is None or shape.dims[axis] is None else total + shape.dims[axis]
    result[axis] = total if len(known) == len(shapes) else None
    return TensorShape(result)


def _merge_dim(a, b, shapes):
    if a is None:
        return b
    if b is not None and a != b:
        raise ValueError(f"concat inputs must match outside the concat axis, got {shapes}")
    return a


def slice_size(begin, size, dim, axis):
    """The length tf.slice takes on ``axis``: ``size``, or the rest of the
    dimension for -1; ValueError (TF's wording) unless 0 <= begin <= dim and
    0 <= size <= dim - begin. Checked by the shape rule and the kernel alike."""
    if not 0 <= begin <= dim:
        raise ValueError(f"Expected begin[{axis}] in [0, {dim}], but got {begin}")
    if size == -1:
        return dim - begin
    if not 0 <= size <= dim - begin:
        raise ValueError(f"Expected size[{axis}] in [0, {dim - begin}], but got {size}")
    return size


def range_length(start, limit, delta):
    """How many numbers tf.range(start, limit, delta) gives; ValueError (with
    TensorFlow's wording) for a zero delta or one pointing away from limit."""
    if delta == 0:
        raise ValueError(f"Requires delta != 0: {delta}")
    if delta > 0 and start > limit:
        raise ValueError(f"Requires start <= limit when delta > 0: {start}/{limit}")
    if delta < 0 and start < limit:
        raise ValueError(f"Requires start >= limit when delta < 0: {start}/{limit}")
    return math.ceil((limit - start) / delta)      # as NumPy's arange counts


def check_mirror_padding(dims, paddings, mode):
    """TensorFlow's MirrorPad rule for each known dimension: REFLECT leaves
    out the edge, so each side pads less than the dimension; SYMMETRIC
    repeats it, so at most the dimension. Checked by the shape rule and the
    kernel alike."""
    for dim, (before, after) in zip(dims, paddings):
        if dim is None:
            continue
        if mode == "reflect" and max(before, after) >= dim:
            raise ValueError(f"paddings must be less than the dimension size: {before}, "
                             f"{after} not less than {dim}")
        if mode == "symmetric" and max(before, after) > dim:
            raise ValueError(f"paddings must be no greater than the dimension size: "
                             f"{before}, {after} greater than {dim}")


def split_sizes_message(determined):
    """tensorflow/core/kernels/split_v_op.cc's words for split sizes that do not
    fit the dimension (``determined``: the sum of those given)."""
    return ("Determined shape must either match input shape along split_dim exactly if "
            "fully specified, or be less than the size of the input along split_dim if "
            f"not fully specified.  Got: {determined}")


def split_count_message(axis, total, num_split):
    """tensorflow/core/kernels/split_op.cc's words for equal parts that do not
    divide the dimension."""
    return (f"Number of ways to split should evenly divide the split dimension, but got "
            f"split_dim {axis} (size = {total}) and num_split {num_split}")
