"""The sorted string table of TensorFlow's checkpoint index (``<prefix>.index``).

TensorFlow keeps LevelDB's table format (tensorflow/core/lib/io/format.cc,
block_builder.cc, table_builder.cc): data blocks of prefix-compressed
``(key, value)`` entries with restart points, an empty metaindex block, an index
block mapping a separator key to each data block's handle, and a 48-byte
footer (two block handles, padding, the magic number). Each block is followed
by a trailer: its compression type (one byte) and the masked CRC-32C of the
block and that byte. Example::

    write_table(stream, [(b"", header), (b"dense/bias", entry)])
    read_table("model.ckpt.index")      # -> [(b"", header), (b"dense/bias", entry)]
"""

import functools
import struct

from .. import errors

MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48            # 2 block handles padded to 20 bytes each, then the magic
BLOCK_TRAILER_SIZE = 5      # the compression type, then the masked CRC-32C
BLOCK_SIZE = 262144         # TF's table::Options: a data block is flushed past this
RESTART_INTERVAL = 16
NO_COMPRESSION, SNAPPY = 0, 1
_MASK_DELTA = 0xA282EAD8


def crc32c(data):
    """The CRC-32C (Castagnoli) of ``data``, as TF's crc32c::Value."""
    return _crc32c_library().value(bytes(data))


@functools.cache
def _crc32c_library():
    # Imported on first use: only TF's formats need it, not ``import towerflow``.
    try:
        import google_crc32c
    except ImportError as err:
        raise ImportError("TensorFlow's checkpoint format needs the google-crc32c package "
                          "(a towerflow dependency): pip install google-crc32c") from err
    return google_crc32c


def mask(crc):
    """TF's crc32c::Mask: a CRC stored next to the data it covers is masked, so
    the CRC of a string holding CRCs stays well distributed."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked):
    rotated = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


def put_varint(number):
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def get_varint(data, position):
    """``(value, position after it)``; DataLossError past the end of ``data``."""
    value, shift = 0, 0
    while True:
        if position >= len(data) or shift > 63:
            raise _corrupt("bad varint")
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if byte < 0x80:
            return value, position


def _corrupt(reason):
    return errors.DataLossError(None, None, reason)


# -- reading ------------------------------------------------------------------------------

def read_table(path):
    """Every ``(key, value)`` of the table in the file ``path``, in key order.
    DataLossError with TF's message when a checksum, the magic number or a block
    does not parse."""
    with open(path, "rb") as stream:
        data = stream.read()
    if len(data) < FOOTER_SIZE:
        raise _corrupt(f"file is too short to be an sstable: {path}")
    footer = data[-FOOTER_SIZE:]
    if struct.unpack("<Q", footer[-8:])[0] != MAGIC:
        raise _corrupt(f"not an sstable (bad magic number): {path}")
    _, position = _read_handle(footer, 0)           # the metaindex: TF writes it empty
    index_handle, _ = _read_handle(footer, position)
    entries = []
    for _, handle in _block_entries(_read_block(data, index_handle)):
        entries += _block_entries(_read_block(data, _read_handle(handle, 0)[0]))
    return entries


def _read_handle(data, position):
    offset, position = get_varint(data, position)
    size, position = get_varint(data, position)
    return (offset, size), position


def _read_block(data, handle):
    offset, size = handle
    if offset + size + BLOCK_TRAILER_SIZE > len(data):
        raise _corrupt("truncated block read")
    block = data[offset:offset + size + 1]
    stored = struct.unpack("<I", data[offset + size + 1:offset + size + 5])[0]
    if unmask(stored) != crc32c(block):
        raise _corrupt("block checksum mismatch")
    if block[-1] == NO_COMPRESSION:
        return block[:-1]
    if block[-1] == SNAPPY:
        return snappy_uncompress(block[:-1])
    raise _corrupt("bad block type")


def _block_entries(block):
    """The ``(key, value)`` pairs of one block: each entry stores how many bytes
    of the previous key it shares, then the rest of its key and its value."""
    if len(block) < 4:
        raise _corrupt("bad block contents")
    restarts = struct.unpack("<I", block[-4:])[0]
    end = len(block) - 4 * (restarts + 1)
    if end < 0:
        raise _corrupt("bad block contents")
    entries, key, position = [], b"", 0
    while position < end:
        shared, position = get_varint(block, position)
        unshared, position = get_varint(block, position)
        value_size, position = get_varint(block, position)
        if shared > len(key) or position + unshared + value_size > end:
            raise _corrupt("bad entry in block")
        key = key[:shared] + bytes(block[position:position + unshared])
        position += unshared
        entries.append((key, bytes(block[position:position + value_size])))
        position += value_size
    return entries


def snappy_uncompress(data):
    """Snappy's raw format (a varint length, then literals and back-references):
    TF compresses a table block with Snappy when that saves an eighth of it."""
    size, position = get_varint(data, 0)
    out = bytearray()
    while position < len(data):
        tag = data[position]
        position += 1
        kind = tag & 3
        if kind == 0:                                   # a literal
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                length = int.from_bytes(data[position:position + extra], "little")
                position += extra
            out += data[position:position + length + 1]
            position += length + 1
            continue
        if kind == 1:
            length, offset = 4 + ((tag >> 2) & 7), ((tag >> 5) << 8) | data[position]
            position += 1
        else:
            width = 2 if kind == 2 else 4
            length = (tag >> 2) + 1
            offset = int.from_bytes(data[position:position + width], "little")
            position += width
        if offset == 0 or offset > len(out):
            raise _corrupt("corrupted compressed block contents")
        for _ in range(length):                         # the copy may overlap itself
            out.append(out[-offset])
    if len(out) != size:
        raise _corrupt("corrupted compressed block contents")
    return bytes(out)


# -- writing ------------------------------------------------------------------------------

def write_table(stream, items):
    """Write the sorted ``items`` (``(key bytes, value bytes)``) as TF's
    TableBuilder does with its default options, blocks uncompressed (TF reads
    both; Snappy would only shorten the index)."""
    writer = _TableWriter(stream)
    last_key = None
    for key, value in items:
        if last_key is not None and key <= last_key:
            raise ValueError(f"table keys must be sorted and unique: {key!r} after {last_key!r}")
        writer.add(key, value)
        last_key = key
    writer.finish()


class _TableWriter:
    def __init__(self, stream):
        self._stream, self._offset = stream, 0
        self._block, self._index = _BlockBuilder(RESTART_INTERVAL), _BlockBuilder(1)
        self._last_key, self._pending_handle = b"", None

    def add(self, key, value):
        if self._block.entries and len(key) + len(value) >= 2 * BLOCK_SIZE:
            self._flush()
        if self._pending_handle is not None:
            self._index.add(shortest_separator(self._last_key, key), self._pending_handle)
            self._pending_handle = None
        self._last_key = key
        self._block.add(key, value)
        if self._block.size_estimate() >= BLOCK_SIZE:
            self._flush()

    def _flush(self):
        if self._block.entries:
            self._pending_handle = self._write_block(self._block.finish())
            self._block = _BlockBuilder(RESTART_INTERVAL)

    def finish(self):
        self._flush()
        metaindex = self._write_block(_BlockBuilder(RESTART_INTERVAL).finish())
        if self._pending_handle is not None:
            self._index.add(short_successor(self._last_key), self._pending_handle)
        index = self._write_block(self._index.finish())
        footer = (metaindex + index).ljust(FOOTER_SIZE - 8, b"\0")
        self._stream.write(footer + struct.pack("<Q", MAGIC))

    def _write_block(self, contents):
        """Append a block and its trailer; returns its encoded handle."""
        trailer_type = bytes([NO_COMPRESSION])
        crc = mask(crc32c(contents + trailer_type))
        self._stream.write(contents + trailer_type + struct.pack("<I", crc))
        handle = put_varint(self._offset) + put_varint(len(contents))
        self._offset += len(contents) + BLOCK_TRAILER_SIZE
        return handle


class _BlockBuilder:
    def __init__(self, restart_interval):
        self._interval = restart_interval
        self._buffer, self._restarts = bytearray(), [0]
        self._since_restart, self._last_key, self.entries = 0, b"", 0

    def add(self, key, value):
        shared = 0
        if self._since_restart < self._interval:
            limit = min(len(key), len(self._last_key))
            while shared < limit and key[shared] == self._last_key[shared]:
                shared += 1
        else:
            self._restarts.append(len(self._buffer))
            self._since_restart = 0
        self._buffer += put_varint(shared) + put_varint(len(key) - shared)
        self._buffer += put_varint(len(value)) + key[shared:] + value
        self._last_key, self._since_restart, self.entries = key, self._since_restart + 1, \
            self.entries + 1

    def size_estimate(self):
        return len(self._buffer) + 4 * len(self._restarts) + 4

    def finish(self):
        restarts = b"".join(struct.pack("<I", point) for point in self._restarts)
        return bytes(self._buffer) + restarts + struct.pack("<I", len(self._restarts))


def shortest_separator(start, limit):
    """A short key >= ``start`` and < ``limit`` (TF's FindShortestSeparator)."""
    common = 0
    while common < min(len(start), len(limit)) and start[common] == limit[common]:
        common += 1
    if common < min(len(start), len(limit)):
        byte = start[common]
        if byte < 0xFF and byte + 1 < limit[common]:
            return start[:common] + bytes([byte + 1])
    return start


def short_successor(key):
    """A short key >= ``key`` (TF's FindShortSuccessor)."""
    for position, byte in enumerate(key):
        if byte != 0xFF:
            return key[:position] + bytes([byte + 1])
    return key
