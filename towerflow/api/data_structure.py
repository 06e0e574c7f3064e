"""Nested element structures, as ``tf.data`` sees them: tuples (namedtuples
too) and dicts are structure, everything else (a list included, as in TF's
``tf.data.util.nest``) is one component::

    flatten(({"a": 1, "b": 2}, 3))                     # [1, 2, 3]
    pack_as(({"a": 0, "b": 0}, 0), [4, 5, 6])          # ({'a': 4, 'b': 5}, 6)

A ``tf.SparseTensor`` in an element travels as three dense components, held
together in the structure by a :class:`SparseComponents` (indices, values,
dense_shape); the public views (``output_types``, ``output_shapes``,
``output_classes``, ``get_next()``) show it as one SparseTensor, as TF does.
"""

import collections

from ..graph.core import Tensor
from ..graph.shapes import TensorShape
from ..ops import nest
from ..ops.sparse_ops import SparseTensor


class SparseComponents(collections.namedtuple("SparseComponents",
                                              ["indices", "values", "dense_shape"])):
    """The three components a SparseTensor of an element travels as (their
    tensors, dtypes or shapes)."""


def is_structure(value):
    return isinstance(value, (tuple, dict))


def flatten(structure):
    """The leaves of ``structure``, depth first (ops/nest.py's walk, with
    tf.data's rule that a list is one leaf)."""
    return nest.flatten(structure, is_structure)


def pack_as(structure, leaves):
    """``leaves`` (as ``flatten`` lists them) arranged as ``structure``."""
    return _pack(structure, iter(leaves))


def _pack(structure, leaves):
    if not is_structure(structure):
        return next(leaves)
    if isinstance(structure, dict):
        return {key: _pack(structure[key], leaves) for key in sorted(structure)}
    values = [_pack(child, leaves) for child in structure]
    if hasattr(structure, "_fields"):          # a namedtuple
        return type(structure)(*values)
    return type(structure)(values)


def map_structure(function, structure):
    """``structure`` with every leaf replaced by ``function(leaf)``."""
    return pack_as(structure, [function(leaf) for leaf in flatten(structure)])


def same_structure(first, second):
    """Whether the two nestings match (same tuple lengths, same dict keys)."""
    if is_structure(first) != is_structure(second):
        return False
    if not is_structure(first):
        return True
    if isinstance(first, dict) != isinstance(second, dict):
        return False
    if isinstance(first, dict) and sorted(first) != sorted(second):
        return False
    if len(first) != len(second):
        return False
    return all(same_structure(a, b) for a, b in zip(nest.children(first), nest.children(second)))


# -- SparseTensors in elements ---------------------------------------------------------


def map_components(structure, dense, sparse):
    """``structure`` with each SparseComponents replaced by ``sparse(it)`` and
    every other leaf by ``dense(leaf)``."""
    if isinstance(structure, SparseComponents):
        return sparse(structure)
    if isinstance(structure, dict):
        return {key: map_components(value, dense, sparse) for key, value in structure.items()}
    if isinstance(structure, tuple):
        values = [map_components(child, dense, sparse) for child in structure]
        return type(structure)(*values) if hasattr(structure, "_fields") else tuple(values)
    return dense(structure)


def _same(leaf):
    return leaf


def as_components(structure):
    """A function's result with each SparseTensor as its SparseComponents."""
    def split(leaf):
        if isinstance(leaf, SparseTensor):
            return SparseComponents(leaf.indices, leaf.values, leaf.dense_shape)
        return leaf
    return map_structure(split, structure)


def as_sparse_tensors(structure):
    """Tensors nested as an element, each SparseComponents made a SparseTensor."""
    return map_components(structure, _same, lambda parts: SparseTensor(*parts))


def public_types(types):
    return map_components(types, _same, lambda parts: parts.values)


def public_shapes(shapes):
    """A sparse component's shape as TF shows it: its dense rank, sizes unknown."""
    return map_components(shapes, _same, lambda parts: TensorShape(
        None if parts.dense_shape.dims is None or parts.dense_shape.dims[0] is None
        else [None] * parts.dense_shape.dims[0]))


def public_classes(types):
    return map_components(types, lambda _: Tensor, lambda _: SparseTensor)


def sparse_starts(structure):
    """The flat positions where a SparseComponents' three components begin."""
    marked = map_components(structure, lambda _: "dense",
                            lambda _: SparseComponents("sparse", "", ""))
    return [index for index, mark in enumerate(flatten(marked)) if mark == "sparse"]
