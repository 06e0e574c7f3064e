"""``tf.python_io`` (and ``tf.io``'s TFRecord names): write and read TFRecord
files from Python, outside any graph (the format: towerflow/backends/tfrecord_format.py)::

    options = tf.python_io.TFRecordOptions(tf.python_io.TFRecordCompressionType.GZIP)
    with tf.python_io.TFRecordWriter('/tmp/train.tfrecord', options) as writer:
        writer.write(example.SerializeToString())
    for record in tf.python_io.tf_record_iterator('/tmp/train.tfrecord', options):
        example = tf.train.Example.FromString(record)
"""

from typing import ClassVar

from ..backends import tfrecord_format


class TFRecordCompressionType:
    """The compression of a TFRecord file: ``NONE``, ``ZLIB`` or ``GZIP``."""

    NONE = 0
    ZLIB = 1
    GZIP = 2


class TFRecordOptions:
    """How a TFRecord file is compressed: ``TFRecordOptions('GZIP')`` or
    ``TFRecordOptions(TFRecordCompressionType.ZLIB, compression_level=9)``.
    The zlib tuning arguments other than ``compression_level`` are accepted
    and ignored (they change speed and size, never the records read back)."""

    compression_type_map: ClassVar[dict[int, str]] = {
        TFRecordCompressionType.ZLIB: "ZLIB", TFRecordCompressionType.GZIP: "GZIP",
        TFRecordCompressionType.NONE: ""}

    def __init__(self, compression_type=None, flush_mode=None, input_buffer_size=None,
                 output_buffer_size=None, window_bits=None, compression_level=None,
                 compression_method=None, mem_level=None, compression_strategy=None):
        self.compression_type = compression_type
        self.compression_level = compression_level
        self.flush_mode, self.window_bits, self.mem_level = flush_mode, window_bits, mem_level
        self.input_buffer_size, self.output_buffer_size = input_buffer_size, output_buffer_size
        self.compression_method = compression_method
        self.compression_strategy = compression_strategy
        tfrecord_format.compression_name(compression_type)     # refuse bad names now

    @classmethod
    def get_compression_type_string(cls, options):
        """'', 'ZLIB' or 'GZIP' for ``options`` (TFRecordOptions, a type or a name)."""
        if not options:
            return ""
        if isinstance(options, TFRecordOptions):
            return cls.get_compression_type_string(options.compression_type)
        return tfrecord_format.compression_name(options)


class TFRecordWriter:
    """Writes records to a TFRecord file; a context manager that closes it::

        with tf.io.TFRecordWriter(path) as writer:
            writer.write(b'a record')
    """

    def __init__(self, path, options=None):
        level = getattr(options, "compression_level", None)
        self._writer = tfrecord_format.RecordsWriter(
            path, TFRecordOptions.get_compression_type_string(options),
            -1 if level is None else level)

    def write(self, record):
        """Appends ``record`` (bytes; a str is written as UTF-8)."""
        if isinstance(record, str):
            record = record.encode()
        if not isinstance(record, (bytes, bytearray, memoryview)):
            raise TypeError(f"TFRecordWriter.write expects bytes, got {record!r}")
        self._writer.write(record)

    def flush(self):
        self._writer.flush()

    def close(self):
        self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def tf_record_iterator(path, options=None):
    """The records of a TFRecord file, as bytes; a corrupted record raises
    ``tf.errors.DataLossError`` ('corrupted record at <byte offset>')::

        count = sum(1 for _ in tf.python_io.tf_record_iterator(path))
    """
    compression = TFRecordOptions.get_compression_type_string(options)
    for _, record in tfrecord_format.read_records(path, compression):
        yield record


__all__ = ["TFRecordCompressionType", "TFRecordOptions", "TFRecordWriter",
           "tf_record_iterator"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.python_io")
