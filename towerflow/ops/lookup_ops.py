"""Lookup tables (TF 1.15's ``tf.lookup``): a hash table from keys (strings
or ints) to values, filled once per Session by its initializer op, which
``tf.tables_initializer()`` runs with every other table's::

    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(['cat', 'dog'], [0, 1], value_dtype=tf.int64),
        default_value=-1)
    ids = table.lookup(tf.constant(['dog', 'emu']))       # [1, -1]
    sess.run(tf.tables_initializer())

As a queue, a table is Session state found by the op that made it (its
kernels: towerflow/backends/lookup_kernels.py); its ops stay on the CPU.
"""

from .. import dtypes
from ..graph import core
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import TensorShape
from .array_ops import group, no_op
from .constant_ops import convert_to_tensor
from .script_ops import keep_on_host

TABLE_INITIALIZERS = core.GraphKeys.TABLE_INITIALIZERS

def _no_outputs(inputs, attrs):
    return []


def _find_shape(inputs, attrs):
    return [(inputs[0].shape, attrs["table"].attrs["value_dtype"])]


register_op("HashTableV2", _no_outputs, stateful=True)
register_op("InitializeTableV2", _no_outputs, stateful=True)
register_op("InitializeTableFromTextFileV2", _no_outputs, stateful=True)
register_op("LookupTableFindV2", _find_shape, stateful=True)
register_op("LookupTableSizeV2", lambda inputs, attrs: [(TensorShape([]), dtypes.int64)],
            stateful=True)
register_not_differentiable("HashTableV2", "InitializeTableV2",
                            "InitializeTableFromTextFileV2", "LookupTableFindV2",
                            "LookupTableSizeV2")


def _table_op(op_type, inputs, attrs, name):
    return keep_on_host(core.get_default_graph().create_op(op_type, inputs, attrs, name=name))


class TextFileIndex:
    """Which part of a text file's line is a key or a value: a column
    number, or the whole line, or the line's number."""

    WHOLE_LINE = -2
    LINE_NUMBER = -1


class KeyValueTensorInitializer:
    """Fills a table with ``keys[i] -> values[i]``."""

    def __init__(self, keys, values, key_dtype=None, value_dtype=None, name=None):
        self._keys = convert_to_tensor(keys, dtype=key_dtype, name="keys")
        self._values = convert_to_tensor(values, dtype=value_dtype, name="values")
        self._name = name or "key_value_init"
        self.key_dtype, self.value_dtype = self._keys.dtype, self._values.dtype

    def initialize(self, table):
        """The op that fills ``table`` (a StaticHashTable)."""
        _check_signature(table, self.key_dtype, self.value_dtype)
        return _table_op("InitializeTableV2", [self._keys, self._values],
                         {"table": table.resource_op}, self._name)


class TextFileInitializer:
    """Fills a table from a text file: one entry per line, the key and value
    being a column (split at ``delimiter``), the whole line
    (``TextFileIndex.WHOLE_LINE``) or the line number (``LINE_NUMBER``)."""

    def __init__(self, filename, key_dtype, key_index, value_dtype, value_index,
                 vocab_size=None, delimiter="\t", name=None):
        self.key_dtype, self.value_dtype = dtypes.as_dtype(key_dtype), \
            dtypes.as_dtype(value_dtype)
        _check_index("key", key_index, self.key_dtype)
        _check_index("value", value_index, self.value_dtype)
        if vocab_size is not None and vocab_size <= 0:
            raise ValueError(f"Invalid vocab_size {vocab_size}.")
        self._filename = convert_to_tensor(filename, dtype=dtypes.string, name="asset_filepath")
        self._attrs = {"key_index": int(key_index), "value_index": int(value_index),
                       "vocab_size": -1 if vocab_size is None else int(vocab_size),
                       "delimiter": delimiter}
        self._name = name or "text_file_init"

    def initialize(self, table):
        _check_signature(table, self.key_dtype, self.value_dtype)
        return _table_op("InitializeTableFromTextFileV2", [self._filename],
                         {"table": table.resource_op, **self._attrs}, self._name)


def _check_index(what, index, dtype):
    """TF 1.15's ValueErrors for a column index that cannot give ``dtype``."""
    plural = f"{what.capitalize()}s"
    if index < TextFileIndex.WHOLE_LINE:
        raise ValueError(f"Invalid {what} index {index}.")
    if index == TextFileIndex.LINE_NUMBER and dtype is not dtypes.int64:
        raise ValueError(f"Signature mismatch. {plural} must be dtype int64, got "
                         f"{dtype.name}.")
    if index == TextFileIndex.WHOLE_LINE and what == "key" and not (
            dtype.is_integer or dtype is dtypes.string):
        raise ValueError(f"Signature mismatch. Keys must be integer or string, got "
                         f"{dtype.name}.")
    if index == TextFileIndex.WHOLE_LINE and what == "value" and dtype is not dtypes.string:
        raise ValueError(f"Signature mismatch. Values must be dtype string, got "
                         f"{dtype.name}.")


def _check_signature(table, key_dtype, value_dtype):
    if key_dtype is not table.key_dtype or value_dtype is not table.value_dtype:
        raise TypeError(f"Invalid key/value dtypes for table: expected {table.key_dtype.name}"
                        f"-{table.value_dtype.name}, got {key_dtype.name}-"
                        f"{value_dtype.name}")


class StaticHashTable:
    """A table from keys to values, immutable once its initializer has run
    (the op in ``table.initializer``, in the collection tf.tables_initializer
    runs); a key it does not hold looks up ``default_value``."""

    def __init__(self, initializer, default_value, name=None):
        self.key_dtype, self.value_dtype = initializer.key_dtype, initializer.value_dtype
        self._default_value = convert_to_tensor(default_value, dtype=self.value_dtype)
        self._name = name or "hash_table"
        self.resource_op = _table_op("HashTableV2", [], {
            "key_dtype": self.key_dtype, "value_dtype": self.value_dtype}, self._name)
        self.initializer = initializer.initialize(self)
        core.get_default_graph().add_to_collection(TABLE_INITIALIZERS, self.initializer)

    name = property(lambda self: self._name)
    default_value = property(lambda self: self._default_value)
    init = property(lambda self: self.initializer)

    def lookup(self, keys, name=None):
        """The values of ``keys`` (a tensor of any shape), ``default_value``
        for those not in the table; FailedPreconditionError before the
        initializer has run."""
        keys = convert_to_tensor(keys, dtype=None if isinstance(keys, core.Tensor)
                                 else self.key_dtype)
        if keys.dtype is not self.key_dtype:
            raise TypeError(f"Signature mismatch. Keys must be dtype {self.key_dtype.name}, "
                            f"got {keys.dtype.name}.")
        return _table_op("LookupTableFindV2", [keys, self._default_value],
                         {"table": self.resource_op}, name or f"{self._name}_Lookup"
                         ).outputs[0]

    def size(self, name=None):
        """The number of entries, an int64 scalar."""
        return _table_op("LookupTableSizeV2", [], {"table": self.resource_op},
                         name or f"{self._name}_Size").outputs[0]


def tables_initializer(name="init_all_tables"):
    """One op that runs every table initializer of the default graph."""
    initializers = core.get_default_graph().get_collection(TABLE_INITIALIZERS)
    return group(*initializers, name=name) if initializers else no_op(name=name)
