"""The TFRecord file format, as TensorFlow writes and reads it: each record is

    uint64 length (little-endian) | uint32 masked crc32c of the length bytes |
    data | uint32 masked crc32c of the data

optionally inside a GZIP or ZLIB stream. Reader kernels, ``tf.data.TFRecordDataset``
and ``tf.python_io`` all go through here::

    with open_records_writer('/tmp/a.tfrecord', 'GZIP') as write:
        write(b'first record')
    for offset, record in read_records('/tmp/a.tfrecord', 'GZIP'):
        ...

NOTE: CRC-32C (Castagnoli), not zlib's CRC-32; google-crc32c computes it (a
C extension wheel for CPython on x86_64 and aarch64, with a pure-Python fallback).
"""

import functools
import struct
import zlib

from .. import errors

_MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
# zlib window bits: 15 is a zlib stream, +16 a gzip stream (TF's defaults).
_WINDOW_BITS = {"ZLIB": 15, "GZIP": 31}
_READ_CHUNK = 1 << 16


def crc32c(data):
    """The CRC-32C of ``data``: ``crc32c(b'123456789') == 0xE3069283``."""
    return _crc32c_value()(bytes(data))


@functools.cache
def _crc32c_value():
    # NOTE: imported on first use, so towerflow imports (and runs all but
    # TFRecords) where the dependency is missing, as in an old environment.
    try:
        import google_crc32c
    except ImportError:
        raise ImportError("TFRecord files need the google-crc32c package (a towerflow "
                          "dependency): pip install google-crc32c") from None
    return google_crc32c.value


def masked_crc32c(data):
    """The CRC as TFRecords store it: rotated right by 15 bits plus a constant,
    so that a CRC of data holding CRCs is not degenerate."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def encode_record(data):
    """The bytes of one record framing ``data``."""
    length = _LENGTH.pack(len(data))
    return b"".join([length, _CRC.pack(masked_crc32c(length)), data,
                     _CRC.pack(masked_crc32c(data))])


def compression_name(compression):
    """'', 'ZLIB' or 'GZIP' from what TF accepts: None, '', a name, or
    TFRecordCompressionType's 0 / 1 / 2."""
    names = {None: "", "": "", 0: "", 1: "ZLIB", 2: "GZIP", "NONE": "",
             "ZLIB": "ZLIB", "GZIP": "GZIP"}
    key = compression.upper() if isinstance(compression, str) else compression
    if isinstance(key, bool) or key not in names:
        raise ValueError(f"Unsupported compression type: {compression!r}; expected '', "
                         f"'ZLIB' or 'GZIP'")
    return names[key]


class RecordsWriter:
    """Appends records to a file; ``compression``: '', 'ZLIB' or 'GZIP'."""

    def __init__(self, path, compression="", level=-1):
        self._file = _open(path, "wb", None)
        bits = _WINDOW_BITS.get(compression)
        self._deflate = None if bits is None else zlib.compressobj(level, zlib.DEFLATED, bits)

    def write(self, data):
        self._put(encode_record(bytes(data)))

    def flush(self):
        if self._deflate is not None:
            self._file.write(self._deflate.flush(zlib.Z_SYNC_FLUSH))
        self._file.flush()

    def close(self):
        if self._file.closed:
            return
        if self._deflate is not None:
            self._file.write(self._deflate.flush(zlib.Z_FINISH))
        self._file.close()

    def _put(self, data):
        self._file.write(data if self._deflate is None else self._deflate.compress(data))


class _InflatingFile:
    """``read(n)`` over a ZLIB or GZIP stream."""

    def __init__(self, file, window_bits):
        # NOTE: a bytearray: appending to and cutting from its front are cheap.
        self._file, self._inflate = file, zlib.decompressobj(window_bits)
        self._buffer = bytearray()

    def read(self, size):
        while len(self._buffer) < size and not self._inflate.eof:
            chunk = self._file.read(_READ_CHUNK)
            if not chunk:
                break
            self._buffer += self._inflate.decompress(chunk)
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def close(self):
        self._file.close()


def read_records(path, compression="", op=None):
    """(offset, data) of each record of the file at ``path``, checking both
    CRCs: DataLossError 'corrupted record at <offset>' or 'truncated record at
    <offset>' as TensorFlow's RecordReader; NotFoundError for a missing file."""
    file = open_stream(path, compression, op)
    try:
        offset = 0
        while True:
            header = _read_checked(file, 8, offset, op)
            if header is None:
                return
            (length,) = _LENGTH.unpack(header)
            data = _read_checked(file, length, offset + 12, op)
            if data is None:        # the header promised data the file lacks
                raise errors.DataLossError(None, op, f"truncated record at {offset}")
            yield offset, data
            offset += 16 + length
    except zlib.error as err:
        raise errors.DataLossError(None, op, f"{_text(path)}: {err}") from None
    finally:
        file.close()


def open_stream(path, compression="", op=None):
    """The file at ``path`` to ``read(n)`` from, inflated if ``compression``."""
    raw = _open(path, "rb", op)
    bits = _WINDOW_BITS.get(compression)
    return raw if bits is None else _InflatingFile(raw, bits)


def read_all(path, compression="", op=None):
    """The whole (inflated) content of the file at ``path``."""
    file = open_stream(path, compression, op)
    try:
        return file.read(1 << 62) if compression else file.read()
    except zlib.error as err:
        raise errors.DataLossError(None, op, f"{_text(path)}: {err}") from None
    finally:
        file.close()


def _read_checked(file, size, offset, op):
    """``size`` bytes and their masked CRC; None at a clean end of file."""
    chunk = file.read(size + 4)
    if not chunk:
        return None
    if len(chunk) != size + 4:
        raise errors.DataLossError(None, op, f"truncated record at {offset}")
    data, (stored,) = chunk[:size], _CRC.unpack(chunk[size:])
    if stored != masked_crc32c(data):
        raise errors.DataLossError(None, op, f"corrupted record at {offset}")
    return data


def _open(path, mode, op):
    try:
        return open(_text(path), mode)
    except OSError as err:
        error = errors.NotFoundError if isinstance(err, FileNotFoundError) else \
            errors.UnknownError
        raise error(None, op, f"{_text(path)}; {err.strerror}") from None


def _text(path):
    return path.decode() if isinstance(path, bytes) else str(path)
