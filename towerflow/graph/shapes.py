"""Static shapes: :class:`TensorShape` and the shape rules ops share.

A dimension is an ``int`` or ``None`` (unknown, printed ``?``); a shape of
unknown rank has ``dims is None``::

    TensorShape([None, 784]).as_list()   # [None, 784]
    str(TensorShape([None, 784]))         # '(?, 784)'
"""

import math


class TensorShape:
    """The static shape of a tensor, possibly partly unknown."""

    __slots__ = ("dims",)

    def __init__(self, dims):
        if dims is None:
            self.dims = None
        elif isinstance(dims, TensorShape):
            self.dims = dims.dims
        elif isinstance(dims, int):
            self.dims = (_as_dim(dims),)
        else:
            self.dims = tuple(_as_dim(dim) for dim in dims)

    @property
    def ndims(self):
        return None if self.dims is None else len(self.dims)

    rank = ndims

    def as_list(self):
        if self.dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self.dims)

    def is_fully_defined(self):
        return self.dims is not None and None not in self.dims

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

    def __len__(self):
        if self.dims is None:
            raise ValueError("Cannot take the length of a shape with unknown rank.")
        return len(self.dims)

    def __iter__(self):
        if self.dims is None:
            raise ValueError("Cannot iterate over a shape with unknown rank.")
        return iter(self.dims)

    def __getitem__(self, key):
        if self.dims is None:
            return None if isinstance(key, int) else unknown_shape()
        if isinstance(key, slice):
            return TensorShape(self.dims[key])
        return self.dims[key]

    def __eq__(self, other):
        try:
            return self.dims == as_shape(other).dims
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self):
        return hash(self.dims)

    def __repr__(self):
        return "TensorShape(None)" if self.dims is None else f"TensorShape({list(self.dims)})"

    def __str__(self):
        if self.dims is None:
            return "<unknown>"
        text = ", ".join("?" if dim is None else str(dim) for dim in self.dims)
        return f"({text},)" if len(self.dims) == 1 else f"({text})"


def _as_dim(dim):
    if dim is None or (hasattr(dim, "value") and dim.value is None):
        return None
    value = int(dim)
    if value < 0:
        raise ValueError(f"Dimension {dim!r} must be >= 0 or None (unknown)")
    return value


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
    axes = [axis] if isinstance(axis, int) else list(axis)
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
