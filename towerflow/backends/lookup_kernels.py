"""Host kernels of ``tf.lookup``'s hash tables (towerflow/ops/lookup_ops.py).
A table is Session state (``ctx.resource``) found by the op that made it,
filled once by its initializer, with TF 1.15's errors: a lookup before that
is FailedPreconditionError("Table not initialized."), and initializing again
with other entries FailedPreconditionError too.

Keys are Python ints or ``bytes`` (strings are object arrays of bytes)::

    LOOKUP_KERNELS["LookupTableFindV2"](ctx)(keys, default)   # -> values
"""

import threading

import numpy as np

from .. import errors


class HashTable:
    """The entries of one table in one Session."""

    def __init__(self, value_dtype):
        self.entries = None          # None until initialized
        self.value_dtype = value_dtype
        self.lock = threading.Lock()

    def initialize(self, entries, op):
        with self.lock:
            if self.entries is None:
                self.entries = entries
            elif self.entries != entries:
                raise errors.FailedPreconditionError(
                    None, op, "Table was already initialized with different data.")

    def find(self, keys, default, op):
        entries = self.entries
        if entries is None:
            raise errors.FailedPreconditionError(None, op, "Table not initialized.")
        flat = [entries.get(key, default) for key in keys.reshape(-1).tolist()]
        return np.array(flat, dtype=self.value_dtype).reshape(keys.shape)


def table_of(ctx):
    table_op = ctx.attrs["table"]
    value_dtype = table_op.attrs["value_dtype"].as_numpy_dtype
    return ctx.resource(("lookup table", table_op), lambda: HashTable(value_dtype))


def build_lookup_kernels():
    return {"HashTableV2": _table_handle, "InitializeTableV2": _initialize_from_tensors,
            "InitializeTableFromTextFileV2": _initialize_from_text_file,
            "LookupTableFindV2": _find, "LookupTableSizeV2": _size}


def _table_handle(ctx):
    return lambda: None      # the table is made on first use, by the ops that name it


def _initialize_from_tensors(ctx):
    op = ctx.op

    def initialize(keys, values):
        table = table_of(ctx)
        if keys.shape != values.shape:
            raise errors.InvalidArgumentError(
                None, op, f"Expected shape {list(keys.shape)} for value, got "
                f"{list(values.shape)}")
        table.initialize(_entries(keys.reshape(-1).tolist(), values.reshape(-1).tolist(),
                                  op), op)
    return initialize


def _entries(keys, values, op):
    """``{key: value}``, with TF's error for a key given two values."""
    entries = {}
    for key, value in zip(keys, values):
        if entries.setdefault(key, value) != value:
            raise errors.FailedPreconditionError(
                None, op, f"HashTable has different value for same key. Key {_text(key)} "
                f"has {_text(entries[key])} and trying to add value {_text(value)}")
    return entries


def _text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _initialize_from_text_file(ctx):
    op, attrs = ctx.op, ctx.attrs
    key_dtype = attrs["table"].attrs["key_dtype"]
    value_dtype = attrs["table"].attrs["value_dtype"]

    def initialize(filename):
        path = filename.item() if isinstance(filename, np.ndarray) else filename
        path = path.decode() if isinstance(path, bytes) else str(path)
        lines = _read_lines(path, op)
        if attrs["vocab_size"] >= 0:
            if len(lines) < attrs["vocab_size"]:
                raise errors.InvalidArgumentError(
                    None, op, f"Invalid vocab_size in {path}: expected: "
                    f"{attrs['vocab_size']} got: {len(lines)}")
            lines = lines[:attrs["vocab_size"]]
        keys = [_field(path, number, line, attrs["key_index"], key_dtype, attrs, op)
                for number, line in enumerate(lines)]
        values = [_field(path, number, line, attrs["value_index"], value_dtype, attrs, op)
                  for number, line in enumerate(lines)]
        table_of(ctx).initialize(_entries(keys, values, op), op)
    return initialize


def _read_lines(path, op):
    try:
        with open(path, "rb") as text:
            return [line.rstrip(b"\n").rstrip(b"\r") for line in text]
    except OSError as err:
        raise errors.NotFoundError(None, op, f"{path}; {err.strerror}") from None


def _field(path, number, line, index, dtype, attrs, op):
    """The key or value a line gives: its number, the whole line, or a column."""
    if index == -1:
        return number
    if index == -2:
        text = line
    else:
        columns = line.split(attrs["delimiter"].encode())
        if index >= len(columns):
            raise errors.InvalidArgumentError(
                None, op, f"Invalid number of columns in {path} line {number} "
                f"({line.decode(errors='replace')}) : expected {index + 1} got "
                f"{len(columns)}")
        text = columns[index]
    if dtype.is_string:
        return text
    try:
        return int(text) if dtype.is_integer else float(text)
    except ValueError:
        raise errors.InvalidArgumentError(
            None, op, f"Field {text.decode(errors='replace')} in line {number} is not a "
            f"valid {dtype.name}.") from None


def _find(ctx):
    op = ctx.op

    def find(keys, default):
        value = default.item() if default.dtype.kind != "O" else default.reshape(-1)[0]
        return table_of(ctx).find(np.asarray(keys), value, op)
    return find


def _size(ctx):
    def size():
        entries = table_of(ctx).entries
        return np.array(0 if entries is None else len(entries), np.int64)
    return size


LOOKUP_HOST_KERNELS = frozenset(build_lookup_kernels())
