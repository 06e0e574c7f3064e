"""Host kernels of towerflow/ops/parsing_ops.py: ``ParseExample`` (one
serialized tf.train.Example or a batch of them) and ``DecodeCSV``, with
TensorFlow 1.15's error messages (example_proto_fast_parsing.cc,
decode_csv_op.cc)::

    KERNELS["ParseExample"](ctx)(serialized)   # -> sparse triples, then dense values
"""

import numpy as np
from google.protobuf.message import DecodeError

from .. import errors

_KIND_OF_LIST = {"float32": "float_list", "int64": "int64_list", "string": "bytes_list"}
_TYPE_NAME = {"float_list": "float", "int64_list": "int64", "bytes_list": "string"}
_VALUES_NAME = {"float_list": "float", "int64_list": "int64", "bytes_list": "bytes"}


def build_parsing_kernels():
    return {"ParseExample": _parse_example, "DecodeCSV": _decode_csv}


# -- ParseExample ----------------------------------------------------------------------


def _parse_example(ctx):
    from ..api.example_protos import Example
    attrs, op = ctx.attrs, ctx.op
    batched = attrs["batched"]

    def parse(serialized):
        # NOTE: a string scalar may arrive as a bare bytes object (a slice of a vector).
        records = [bytes(item) for item in np.asarray(serialized, dtype=object).reshape(-1)]
        examples = [_features_of(Example, record, op) for record in records]
        outputs = []
        for key, dtype in attrs["sparse"]:
            outputs += _sparse_output(examples, key, dtype, batched, op)
        for spec in attrs["dense"]:
            outputs.append(_dense_output(examples, spec, batched, op))
        return outputs
    return parse


def _features_of(example_class, record, op):
    try:
        return example_class.FromString(record).features.feature
    except DecodeError:
        raise errors.InvalidArgumentError(
            None, op, f"Could not parse example input, value: '{record!r}'") from None


def _values(features, key, dtype, index, batched, op):
    """The values of feature ``key`` of one example, as an array of ``dtype``;
    None where the example lacks it (or holds an empty Feature)."""
    if key not in features or features[key].WhichOneof("kind") is None:
        return None
    feature = features[key]
    kind, expected = feature.WhichOneof("kind"), _KIND_OF_LIST[dtype.name]
    if kind != expected:
        raise _example_error(
            op, key, index, batched,
            f"Data types don't match. Data type: {_TYPE_NAME[kind]} but expected type: "
            f"{_TYPE_NAME[expected]}")
    values = getattr(feature, kind).value
    if dtype.is_string:
        array = np.empty(len(values), dtype=object)
        array[:] = list(values)
        return array
    return np.array(values, dtype=dtype.as_numpy_dtype)


def _example_error(op, key, index, batched, suffix):
    where = f"Name: <unknown>, Key: {key}, Index: {index}" if batched else f"Key: {key}"
    return errors.InvalidArgumentError(None, op, f"{where}.  {suffix}")


def _sparse_output(examples, key, dtype, batched, op):
    rows = [_values(features, key, dtype, index, batched, op)
            for index, features in enumerate(examples)]
    rows = [np.empty(0, dtype.as_numpy_dtype if not dtype.is_string else object)
            if row is None else row for row in rows]
    longest = max((len(row) for row in rows), default=0)
    positions = [np.arange(len(row), dtype=np.int64) for row in rows]
    if batched:
        example_ids = [np.full(len(row), index, np.int64) for index, row in enumerate(rows)]
        indices = np.stack([np.concatenate(example_ids or [np.empty(0, np.int64)]),
                            np.concatenate(positions or [np.empty(0, np.int64)])], axis=1)
        dense_shape = np.array([len(rows), longest], np.int64)
    else:
        indices = positions[0].reshape(-1, 1)
        dense_shape = np.array([longest], np.int64)
    values = np.concatenate(rows) if rows else np.empty(0, dtype.as_numpy_dtype)
    return [indices.astype(np.int64), values, dense_shape]


def _dense_output(examples, spec, batched, op):
    parsed = [_dense_values(features, spec, index, batched, op)
              for index, features in enumerate(examples)]
    if spec["sequence"]:
        parsed = _padded(parsed, spec)
    if not batched:
        return parsed[0]
    dtype = object if spec["dtype"].is_string else spec["dtype"].as_numpy_dtype
    if not parsed:
        rows = 0 if spec["sequence"] else None
        return np.empty((0,) + ((rows,) if rows is not None else ()) + spec["shape"], dtype)
    return np.stack(parsed).astype(dtype, copy=False)


def _dense_values(features, spec, index, batched, op):
    key, dtype, shape = spec["key"], spec["dtype"], spec["shape"]
    values = _values(features, key, dtype, index, batched, op)
    if values is None:
        return _missing(spec, index, batched, op)
    stride = int(np.prod(shape, dtype=np.int64))
    kind = _VALUES_NAME[_KIND_OF_LIST[dtype.name]]
    if spec["sequence"]:
        if stride == 0 or len(values) % stride:
            raise _example_error(op, key, index, batched,
                                 f"Number of {kind} values is not a multiple of stride "
                                 f"length. Saw {len(values)} values but output shape is: "
                                 f"{list(shape)}")
        return values.reshape((-1,) + shape)
    if len(values) != stride:
        raise _example_error(op, key, index, batched,
                             f"Number of {kind} values != expected.  Values size: "
                             f"{len(values)} but output shape: {list(shape)}")
    return values.reshape(shape)


def _missing(spec, index, batched, op):
    if spec["sequence"]:
        if not spec["allow_missing"]:
            raise errors.InvalidArgumentError(
                None, op, f"Name: <unknown>, Feature: {spec['key']} is required but could "
                f"not be found.")
        return np.empty((0,) + spec["shape"], spec["default"].dtype)
    if spec["default"] is None:
        where = "Name: <unknown>, " if batched else ""
        raise errors.InvalidArgumentError(
            None, op, f"{where}Feature: {spec['key']} (data type: {spec['dtype'].name}) is "
            f"required but could not be found.")
    return spec["default"]


def _padded(sequences, spec):
    """Sequences of different lengths padded with the default to the longest."""
    longest = max((len(sequence) for sequence in sequences), default=0)
    padded = []
    for sequence in sequences:
        filler = np.empty((longest - len(sequence),) + spec["shape"], sequence.dtype)
        filler[...] = spec["default"]
        padded.append(np.concatenate([sequence, filler]))
    return padded


# -- DecodeCSV -------------------------------------------------------------------------


def _decode_csv(ctx):
    attrs, op = ctx.attrs, ctx.op
    delim, na_value = attrs["field_delim"], attrs["na_value"]
    select_cols, quoted = attrs["select_cols"], attrs["use_quote_delim"]

    def decode(records, *defaults):
        records = np.asarray(records, dtype=object)     # a scalar may come as bytes
        for index, default in enumerate(defaults):
            if default.size > 1:
                raise errors.InvalidArgumentError(
                    None, op, f"There should only be 1 default per field but field {index} "
                    f"has {default.size}")
        columns = [np.empty(records.shape, _column_dtype(default)) for default in defaults]
        for index, record in enumerate(records.reshape(-1)):
            fields = _csv_fields(bytes(record), delim, quoted, op)
            if select_cols is not None:
                fields = _selected(fields, select_cols, index, op)
            if len(fields) != len(defaults):
                raise errors.InvalidArgumentError(
                    None, op, f"Expect {len(defaults)} fields but have {len(fields)} in "
                    f"record {index}")
            for column, (field, default) in enumerate(zip(fields, defaults)):
                columns[column].reshape(-1)[index] = _csv_value(
                    field, default, na_value, column, index, op)
        return columns
    return decode


def _column_dtype(default):
    return object if default.dtype == object else default.dtype


def _selected(fields, select_cols, index, op):
    if select_cols and select_cols[-1] >= len(fields):
        raise errors.InvalidArgumentError(
            None, op, f"Expect {len(select_cols)} fields but have {len(fields)} in "
            f"record {index}")
    return [fields[col] for col in select_cols]


_NUMBER_NAMES = {"float32": "float", "float64": "double", "int32": "int32", "int64": "int64"}


def _csv_value(field, default, na_value, column, index, op):
    if field == b"" or field == na_value:
        if default.size != 1:
            raise errors.InvalidArgumentError(
                None, op, f"Field {column} is required but missing in record {index}!")
        return default.reshape(-1)[0]
    if default.dtype == object:
        return field
    try:
        return _number(field.decode(), default.dtype)
    except (ValueError, UnicodeDecodeError, OverflowError):
        raise errors.InvalidArgumentError(
            None, op, f"Field {column} in record {index} is not a valid "
            f"{_NUMBER_NAMES[default.dtype.name]}: {field.decode(errors='replace')}") from None


def _number(text, dtype):
    if dtype.kind != "i":
        return float(text)
    value, limits = int(text, 10), np.iinfo(dtype)
    if not limits.min <= value <= limits.max:
        raise OverflowError(text)
    return value


def _csv_fields(record, delim, quoted, op):
    """The fields of one CSV record as TF's DecodeCSV splits it: a field in
    double quotes may hold the delimiter and "" for a quote; an empty record
    is no field; a record ending in the delimiter ends with an empty field."""
    fields, position, size = [], 0, len(record)
    while position < size:
        if record[position:position + 1] in (b"\n", b"\r"):
            position += 1
            continue
        if quoted and record[position:position + 1] == b'"':
            field, position = _quoted_field(record, position + 1, delim, op)
        else:
            end = record.find(delim, position)
            end = size if end < 0 else end
            field = record[position:end]
            if (quoted and b'"' in field) or b"\n" in field or b"\r" in field:
                raise errors.InvalidArgumentError(
                    None, op, "Unquoted fields cannot have quotes/CRLFs inside")
            position = end + 1
        fields.append(field)
    if record.endswith(delim):
        fields.append(b"")
    return fields


def _quoted_field(record, position, delim, op):
    """(field, position after its closing quote and delimiter)."""
    field = bytearray()
    while position < len(record):
        char = record[position:position + 1]
        if char != b'"':
            field += char
            position += 1
        elif record[position + 1:position + 2] == b'"':
            field += b'"'
            position += 2
        elif record[position + 1:position + 2] in (delim, b""):
            return bytes(field), position + 2
        else:
            raise errors.InvalidArgumentError(
                None, op, "Quote inside a string has to be escaped by another quote")
    raise errors.InvalidArgumentError(
        None, op, "Quoted field has to end with quote followed by delim or end")
