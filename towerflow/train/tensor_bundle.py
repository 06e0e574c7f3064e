"""TensorFlow's V2 checkpoint format, the tensor bundle (tensor_bundle.cc).

A checkpoint ``<prefix>`` is ``<prefix>.index``, a sorted string table
(sstable.py) mapping ``""`` to a ``BundleHeaderProto`` (shard count,
endianness, version) and each tensor's name to a ``BundleEntryProto`` (dtype,
shape, shard, offset, size, masked CRC-32C of its bytes), and the shards
``<prefix>.data-00000-of-0000N`` holding the raw little-endian bytes. TF1's
``tf.train.Saver`` writes it by default, TF 2's ``tf.train.Checkpoint`` too::

    write_bundle("ckpt/model-3", {"dense/kernel": kernel, "global_step": np.int64(3)})
    reader = BundleReader("ckpt/model-3")
    reader.shapes()["dense/kernel"]       # -> [4, 8]
    reader.tensor("dense/kernel")         # verified against its CRC-32C
"""

import os
import struct

import ml_dtypes
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory
from tensorboard.compat.proto import tensor_shape_pb2, types_pb2, versions_pb2

from .. import errors
from . import sstable

HEADER_KEY = b""
INDEX_SUFFIX = ".index"
_VERSION_PRODUCER = 1          # TF's kTensorBundleVersion
# TF's DataType enum (types.proto) and the NumPy type of each stored element.
_NUMPY_OF_ENUM = {
    types_pb2.DT_FLOAT: np.float32, types_pb2.DT_DOUBLE: np.float64,
    types_pb2.DT_INT32: np.int32, types_pb2.DT_UINT8: np.uint8,
    types_pb2.DT_INT16: np.int16, types_pb2.DT_INT8: np.int8,
    types_pb2.DT_STRING: np.object_, types_pb2.DT_COMPLEX64: np.complex64,
    types_pb2.DT_INT64: np.int64, types_pb2.DT_BOOL: np.bool_,
    types_pb2.DT_BFLOAT16: ml_dtypes.bfloat16, types_pb2.DT_UINT16: np.uint16,
    types_pb2.DT_COMPLEX128: np.complex128, types_pb2.DT_HALF: np.float16,
    types_pb2.DT_UINT32: np.uint32, types_pb2.DT_UINT64: np.uint64,
}
_ENUM_OF_NUMPY = {np.dtype(numpy_type): enum for enum, numpy_type in _NUMPY_OF_ENUM.items()}


def _bundle_proto_classes():
    """BundleHeaderProto and BundleEntryProto with tensor_bundle.proto's field
    numbers (TensorBoard ships types, shapes and versions, not these), in a pool
    of their own so that a TensorFlow imported alongside does not clash."""
    pool = descriptor_pool.DescriptorPool()
    for module in (types_pb2, tensor_shape_pb2, versions_pb2):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(
            module.DESCRIPTOR.serialized_pb))
    bundle = descriptor_pb2.FileDescriptorProto(
        name="towerflow/tensor_bundle.proto", package="tensorflow", syntax="proto3",
        dependency=[module.DESCRIPTOR.name
                    for module in (types_pb2, tensor_shape_pb2, versions_pb2)])
    _message(bundle, "TensorSliceProto", [("extent", 1, "message", ".tensorflow.Extent", True)])
    _message(bundle, "Extent", [("start", 1, "int64"), ("length", 2, "int64")])
    _message(bundle, "BundleHeaderProto", [
        ("num_shards", 1, "int32"), ("endianness", 2, "int32"),
        ("version", 3, "message", ".tensorboard.VersionDef")])
    _message(bundle, "BundleEntryProto", [
        ("dtype", 1, "enum", ".tensorboard.DataType"),
        ("shape", 2, "message", ".tensorboard.TensorShapeProto"),
        ("shard_id", 3, "int32"), ("offset", 4, "int64"), ("size", 5, "int64"),
        ("crc32c", 6, "fixed32"),
        ("slices", 7, "message", ".tensorflow.TensorSliceProto", True)])
    pool.Add(bundle)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"tensorflow.{name}")) for name in ("BundleHeaderProto", "BundleEntryProto"))


def _message(file_proto, name, fields):
    """Add message ``name`` with ``(name, number, type, [type_name], [repeated])``
    fields. NOTE: the endianness enum is declared int32: same varint on the wire."""
    message = file_proto.message_type.add(name=name)
    kinds = descriptor_pb2.FieldDescriptorProto
    for field_name, number, kind, *rest in fields:
        field = message.field.add(name=field_name, number=number,
                                  type=getattr(kinds, f"TYPE_{kind.upper()}"))
        field.label = kinds.LABEL_REPEATED if rest[1:] == [True] else kinds.LABEL_OPTIONAL
        if rest:
            field.type_name = rest[0]


BundleHeaderProto, BundleEntryProto = _bundle_proto_classes()


def index_filename(prefix):
    return prefix + INDEX_SUFFIX


def data_filename(prefix, shard_id, num_shards):
    return f"{prefix}.data-{shard_id:05d}-of-{num_shards:05d}"


def is_bundle(prefix):
    """Whether a tensor bundle is saved under ``prefix`` (its index exists)."""
    return os.path.isfile(index_filename(prefix))


# -- reading ------------------------------------------------------------------------------

class BundleReader:
    """The entries of the bundle ``prefix``; tensors are read (and verified)
    when asked for. DataLossError when the index does not parse."""

    def __init__(self, prefix):
        self.prefix = prefix
        items = sstable.read_table(index_filename(prefix))
        if not items or items[0][0] != HEADER_KEY:
            raise errors.DataLossError(None, None, f"Checkpoint {prefix}: the index has no "
                                       "bundle header")
        header = _parse(BundleHeaderProto, items[0])
        if header.endianness != 0:
            raise errors.UnimplementedError(None, None, "Reading a bundle with different "
                                            "endianness from the reader")
        self.num_shards = header.num_shards
        self.entries = {key.decode("utf-8"): _parse(BundleEntryProto, (key, value))
                        for key, value in items[1:]}

    def shapes(self):
        """``{name: [dims]}`` of every whole tensor (slices of partitioned ones left out)."""
        return {name: [dim.size for dim in entry.shape.dim]
                for name, entry in self._whole_entries()}

    def numpy_dtypes(self):
        return {name: np.dtype(_numpy_type(entry.dtype, name))
                for name, entry in self._whole_entries()}

    def _whole_entries(self):
        return [(name, entry) for name, entry in self.entries.items() if not entry.slices]

    def tensor(self, name):
        """The array saved under ``name``: NotFoundError if there is none,
        DataLossError if its bytes do not match their CRC-32C."""
        entry = self.entries.get(name)
        if entry is None:
            raise errors.NotFoundError(None, None, f"Key {name} not found in checkpoint")
        if entry.slices:
            raise errors.UnimplementedError(None, None, f"Checkpoint {self.prefix}: '{name}' "
                                            "is a partitioned variable, saved in slices")
        raw = self._raw_bytes(entry)
        actual = _crc_of_entry(raw, entry)
        stored = sstable.unmask(entry.crc32c)
        if actual != stored:
            raise errors.DataLossError(None, None, f"Checksum does not match: stored "
                                       f"{stored:08d} vs. calculated on the restored bytes "
                                       f"{actual}")
        return _decode(raw, entry, name)

    def _raw_bytes(self, entry):
        path = data_filename(self.prefix, entry.shard_id, self.num_shards)
        try:
            with open(path, "rb") as stream:
                stream.seek(entry.offset)
                raw = stream.read(entry.size)
        except FileNotFoundError:
            raise errors.NotFoundError(None, None, f"{path}; No such file or directory") \
                from None
        if len(raw) != entry.size:
            raise errors.DataLossError(None, None, f"Requested {entry.size} bytes but read "
                                       f"{len(raw)} bytes.")
        return raw


def _parse(proto_class, item):
    key, value = item
    try:
        return proto_class.FromString(value)
    except message.DecodeError:
        raise errors.DataLossError(None, None, f"Entry for key "
                                   f"{key.decode('utf-8', 'replace')} not parseable.") from None


def _numpy_type(enum, name):
    try:
        return _NUMPY_OF_ENUM[enum]
    except KeyError:
        raise errors.UnimplementedError(
            None, None, f"Tensor '{name}' has dtype {types_pb2.DataType.Name(enum)}, which "
            "towerflow cannot read") from None


def _crc_of_entry(raw, entry):
    """What TF checksums: the bytes as stored, except for strings, whose lengths
    are checksummed as uint32s rather than the varints on disk."""
    if entry.dtype != types_pb2.DT_STRING:
        return sstable.crc32c(raw)
    lengths, position = _string_lengths(raw, entry)
    packed = struct.pack(f"<{len(lengths)}I", *lengths)
    return sstable.crc32c(packed + raw[position:])


def _string_lengths(raw, entry):
    """``(lengths, position of the length checksum)`` of a string tensor."""
    lengths, position = [], 0
    for _ in range(_element_count(entry)):
        length, position = sstable.get_varint(raw, position)
        lengths.append(length)
    return lengths, position


def _element_count(entry):
    return int(np.prod([dim.size for dim in entry.shape.dim], dtype=np.int64))


def _decode(raw, entry, name):
    shape = [dim.size for dim in entry.shape.dim]
    numpy_type = np.dtype(_numpy_type(entry.dtype, name))
    if entry.dtype == types_pb2.DT_STRING:
        lengths, position = _string_lengths(raw, entry)
        position += 4                                   # the masked CRC of the lengths
        values = np.empty(len(lengths), dtype=object)
        for index, length in enumerate(lengths):
            values[index] = raw[position:position + length]
            position += length
        return values.reshape(shape)
    expected = _element_count(entry) * numpy_type.itemsize
    if entry.size != expected:
        raise errors.DataLossError(None, None, f"Invalid size in bundle entry: key {name}; "
                                   f"stored size {entry.size}; expected size {expected}")
    return np.frombuffer(raw, numpy_type.newbyteorder("<")).astype(numpy_type).reshape(shape)


# -- writing ------------------------------------------------------------------------------

def bundle_files(variables):
    """``(data bytes, index bytes)`` of a one-shard bundle of ``{name: array}``,
    laid out as TF's BundleWriter does: tensors in name order, back to back."""
    data, entries = bytearray(), {}
    for name in sorted(variables):
        array = np.asarray(variables[name])
        raw = _encode(array, name)
        entries[name.encode("utf-8")] = _entry(array, len(data), raw)
        data += raw
    header = BundleHeaderProto(num_shards=1, endianness=0)
    header.version.producer = _VERSION_PRODUCER
    items = [(HEADER_KEY, header.SerializeToString())]
    items += [(key, entries[key].SerializeToString()) for key in sorted(entries)]
    return bytes(data), items


def _encode(array, name):
    if array.dtype.hasobject:
        raise TypeError(f"Variable '{name}' holds strings; TF checkpoints of string "
                        "variables are not written by towerflow")
    if array.dtype not in _ENUM_OF_NUMPY:
        raise TypeError(f"Variable '{name}' is {array.dtype}, which TF checkpoints do not hold")
    return np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()


def _entry(array, offset, raw):
    entry = BundleEntryProto(dtype=_ENUM_OF_NUMPY[array.dtype], shard_id=0, offset=offset,
                             size=len(raw), crc32c=sstable.mask(sstable.crc32c(raw)))
    entry.shape.SetInParent()           # a scalar still has a (dimensionless) shape
    for size in array.shape:
        entry.shape.dim.add(size=size)
    return entry
