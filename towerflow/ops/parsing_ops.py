"""Parsing serialized ``tf.train.Example`` records and CSV lines (TF 1.15's
parsing_ops): ``parse_single_example``, ``parse_example`` and ``decode_csv``.
Their kernels run on the host CPU (towerflow/backends/parsing_kernels.py)::

    features = tf.parse_single_example(serialized, {
        'image': tf.FixedLenFeature([], tf.string),
        'label': tf.FixedLenFeature([], tf.int64, default_value=-1),
        'tags': tf.VarLenFeature(tf.string),
    })
    label, name = tf.decode_csv(line, record_defaults=[[0], ['']])

A ``VarLenFeature`` parses into a ``tf.SparseTensor`` (towerflow/ops/sparse_ops.py):
``tf.sparse.to_dense(features['tags'], default_value='')`` makes it dense, and
fetching it gives a ``tf.SparseTensorValue`` of NumPy arrays.
"""

import collections
import itertools

import numpy as np

from .. import dtypes
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import TensorShape, as_shape
from .constant_ops import convert_to_tensor
from .sparse_ops import SparseTensor

FixedLenFeature = collections.namedtuple("FixedLenFeature", ["shape", "dtype",
                                                             "default_value"])
FixedLenFeature.__new__.__defaults__ = (None,)
FixedLenFeature.__doc__ = """A feature of fixed ``shape`` (every example has
the same number of values); ``default_value`` (None: the feature is required)
fills examples that lack it: ``tf.FixedLenFeature([], tf.int64, default_value=0)``."""

VarLenFeature = collections.namedtuple("VarLenFeature", ["dtype"])
VarLenFeature.__doc__ = """A feature with any number of values, parsed into a
SparseTensor: ``tf.VarLenFeature(tf.string)``."""

FixedLenSequenceFeature = collections.namedtuple(
    "FixedLenSequenceFeature", ["shape", "dtype", "allow_missing", "default_value"])
FixedLenSequenceFeature.__new__.__defaults__ = (False, None)
FixedLenSequenceFeature.__doc__ = """A feature holding any number of values of
``shape`` each, parsed into a dense [count, *shape] tensor (in a batch, padded
with ``default_value``): ``tf.FixedLenSequenceFeature([2], tf.float32,
allow_missing=True)``."""

_FEATURE_DTYPES = (dtypes.float32, dtypes.int64, dtypes.string)
_CSV_DTYPES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.string)


def _parse_example_shape(inputs, attrs):
    serialized = inputs[0]
    if not serialized.dtype.is_string:
        raise TypeError(f"serialized must be a string tensor, got {serialized.dtype.name}")
    batch = [] if not attrs["batched"] else [serialized.shape.dims[0]
                                            if serialized.shape.ndims else None]
    outputs = []
    for _, dtype in attrs["sparse"]:
        outputs += [(TensorShape([None, len(batch) + 1]), dtypes.int64),
                    (TensorShape([None]), dtype),
                    (TensorShape([len(batch) + 1]), dtypes.int64)]
    for spec in attrs["dense"]:
        rows = [None] if spec["sequence"] else []
        outputs.append((TensorShape(batch + rows + list(spec["shape"])), spec["dtype"]))
    return outputs


def _decode_csv_shape(inputs, attrs):
    records = inputs[0]
    if not records.dtype.is_string:
        raise TypeError(f"decode_csv: records must be a string tensor, got "
                        f"{records.dtype.name}")
    return [(records.shape, default.dtype) for default in inputs[1:]]


register_op("ParseExample", _parse_example_shape, variadic_outputs=True)
register_op("DecodeCSV", _decode_csv_shape, variadic_outputs=True)
register_not_differentiable("ParseExample", "DecodeCSV")


def parse_single_example(serialized, features, name=None, example_names=None):
    """The features of one serialized Example (a string scalar): a dict from
    each key of ``features`` to a Tensor (FixedLenFeature, FixedLenSequenceFeature)
    or a SparseTensor (VarLenFeature)::

        parsed = tf.parse_single_example(record, {'x': tf.FixedLenFeature([2], tf.float32)})
    """
    return _parse(serialized, features, name or "ParseSingleExample", batched=False)


def parse_example(serialized, features, name=None, example_names=None):
    """The features of a batch of serialized Examples (a string vector): as
    :func:`parse_single_example`, each tensor with a leading batch dimension::

        batch = tf.parse_example(records, {'label': tf.FixedLenFeature([], tf.int64)})
    """
    return _parse(serialized, features, name or "ParseExample", batched=True)


def _parse(serialized, features, name, batched):
    if not features:
        raise ValueError(f"Missing: features was {features}.")
    serialized = convert_to_tensor(serialized, dtype=dtypes.string, name="serialized")
    rank = serialized.shape.ndims
    if rank is not None and rank != int(batched):
        raise ValueError(f"{'parse_example' if batched else 'parse_single_example'} needs "
                         f"serialized of rank {int(batched)}, got shape {serialized.shape}")
    sparse_keys, dense_keys, sparse, dense = [], [], [], []
    for key in sorted(features):
        spec = _feature_spec(key, features[key])
        if spec is None:
            sparse_keys.append(key)
            sparse.append((key, dtypes.as_dtype(features[key].dtype)))
        else:
            dense_keys.append(key)
            dense.append(spec)
    op = serialized.graph.create_op(
        "ParseExample", [serialized],
        {"batched": batched, "sparse": sparse, "dense": dense}, name=name)
    outputs = list(op.outputs)
    parsed = {key: SparseTensor(*outputs[3 * index:3 * index + 3])
              for index, key in enumerate(sparse_keys)}
    parsed.update(zip(dense_keys, outputs[3 * len(sparse):]))
    return parsed


def _feature_spec(key, feature):
    """The kernel's spec of a dense feature; None for a VarLenFeature."""
    if not isinstance(feature, (FixedLenFeature, VarLenFeature, FixedLenSequenceFeature)):
        # TF 1.15 raises ValueError here; TypeError would break code that catches it.
        raise ValueError(f"Invalid feature {key}:{feature}.")  # noqa: TRY004 -- TF's type
    dtype = dtypes.as_dtype(feature.dtype)
    if dtype not in _FEATURE_DTYPES:
        raise ValueError(f"Feature {key}: dtype must be tf.float32, tf.int64 or tf.string "
                         f"(the types an Example holds), got {dtype.name}")
    if isinstance(feature, VarLenFeature):
        return None
    shape = as_shape(feature.shape)
    if not shape.is_fully_defined():
        raise ValueError(f"All dimensions of shape for feature {key} need to be known but "
                         f"received {shape}.")
    sequence = isinstance(feature, FixedLenSequenceFeature)
    return {"key": key, "dtype": dtype, "shape": tuple(shape.as_list()), "sequence": sequence,
            "allow_missing": sequence and bool(feature.allow_missing),
            "default": _default_array(key, feature, dtype, shape, sequence)}


def _default_array(key, feature, dtype, shape, sequence):
    """The default as an array of the feature's shape (sequence features: one
    padding value); None where the feature is required."""
    if feature.default_value is None:
        return np.array(b"" if dtype.is_string else 0, dtype.as_numpy_dtype) \
            if sequence else None
    value = dtypes.to_string_array(feature.default_value) if dtype.is_string else \
        np.asarray(feature.default_value, dtype.as_numpy_dtype)
    target = () if sequence else tuple(shape.as_list())
    if value.size != int(np.prod(target, dtype=np.int64)):
        raise ValueError(f"Feature {key}: default_value {feature.default_value!r} has "
                         f"{value.size} values but the shape {list(target)} needs "
                         f"{int(np.prod(target, dtype=np.int64))}")
    return value.reshape(target)


def decode_csv(records, record_defaults, field_delim=",", use_quote_delim=True, name=None,
               na_value="", select_cols=None):
    """Each CSV string of ``records`` split into columns, one tensor per
    column of ``records``' shape, typed by ``record_defaults`` (a list of [value]
    defaults, or [] for a required column)::

        label, x, y = tf.decode_csv(line, record_defaults=[[0], [0.0], [0.0]])
    """
    records = convert_to_tensor(records, dtype=dtypes.string, name="records")
    if len(field_delim) != 1:
        raise ValueError(f"field_delim should be only 1 char, got {field_delim!r}")
    defaults = [_csv_default(value, index) for index, value in enumerate(record_defaults)]
    if select_cols is not None:
        select_cols = _checked_select_cols(select_cols, len(defaults))
    op = records.graph.create_op(
        "DecodeCSV", [records, *defaults],
        {"field_delim": field_delim.encode(), "use_quote_delim": bool(use_quote_delim),
         "na_value": na_value.encode(), "select_cols": select_cols}, name=name or "DecodeCSV")
    return list(op.outputs)


def _csv_default(value, index):
    tensor = convert_to_tensor(value, name=f"record_defaults_{index}")
    if tensor.dtype not in _CSV_DTYPES:
        raise TypeError(f"record_defaults[{index}] must be float32, float64, int32, int64 "
                        f"or string, got {tensor.dtype.name}")
    if tensor.shape.ndims is not None and tensor.shape.ndims > 1:
        raise ValueError("Shape of a default must be a length-0 or length-1 vector, or a "
                         "scalar.")
    return tensor


def _checked_select_cols(select_cols, count):
    cols = [int(col) for col in select_cols]
    if any(later <= earlier for earlier, later in itertools.pairwise(cols)):
        raise ValueError("select_cols is not strictly increasing.")
    if cols and cols[0] < 0:
        raise ValueError("select_cols contains negative values.")
    if len(cols) != count:
        raise ValueError("Length of select_cols and record_defaults do not match.")
    return cols
