"""Reading records from files named in a queue (fixed-length, TFRecord, text
lines, whole files), reading and writing one file, and decoding raw bytes: the
first stage of a TF1 queue input pipeline. These ops run on the CPU::

    files = tf.train.string_input_producer(['data_batch_1.bin'])
    reader = tf.FixedLengthRecordReader(record_bytes=1 + 32 * 32 * 3)
    key, value = reader.read(files)     # b'data_batch_1.bin:0', the record's bytes
    record = tf.decode_raw(value, tf.uint8)                  # shape (3073,)
"""

from .. import dtypes
from ..graph import core
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import TensorShape
from .constant_ops import convert_to_tensor


def _reader_shape(inputs, attrs):
    return []


def _read_shape(inputs, attrs):
    return [(TensorShape([]), dtypes.string), (TensorShape([]), dtypes.string)]


def _decode_raw_shape(inputs, attrs):
    (data,) = inputs
    if not data.dtype.is_string:
        raise TypeError(f"decode_raw needs a string tensor, got {data.dtype.name}")
    dims = None if data.shape.dims is None else list(data.shape.dims) + [None]
    return [(TensorShape(dims), attrs["out_type"])]


def _read_file_shape(inputs, attrs):
    _check_string_scalar(inputs[0], "filename")
    return [(TensorShape([]), dtypes.string)]


def _write_file_shape(inputs, attrs):
    _check_string_scalar(inputs[0], "filename")
    _check_string_scalar(inputs[1], "contents")
    return []


def _check_string_scalar(tensor, what):
    if not tensor.dtype.is_string or tensor.shape.ndims not in (None, 0):
        raise ValueError(f"{what} must be a scalar string tensor, got {tensor!r}")


_READER_OPS = ("FixedLengthRecordReaderV2", "TFRecordReaderV2", "TextLineReaderV2",
               "WholeFileReaderV2")
for _reader in _READER_OPS:
    register_op(_reader, _reader_shape, stateful=True)
register_op("ReaderReadV2", _read_shape, stateful=True, variadic_outputs=True)
register_op("DecodeRaw", _decode_raw_shape)
register_op("ReadFile", _read_file_shape, stateful=True)
register_op("WriteFile", _write_file_shape, stateful=True)
register_not_differentiable(*_READER_OPS, "ReaderReadV2", "DecodeRaw", "ReadFile",
                            "WriteFile")


class ReaderBase:
    """A reader of the files a queue names (the reader op made by a subclass);
    ``read(queue)`` gives the next (key, value) pair of string scalars."""

    def __init__(self, op_type, attrs, name):
        graph = core.get_default_graph()
        self._reader_op = graph.create_op(op_type, [], attrs, name=name or op_type)

    reader_ref = property(lambda self: self._reader_op)

    def read(self, queue, name=None):
        """(key, value) string scalars: the record's key and its bytes. When the
        current file is done, dequeues the next file name from ``queue``;
        OutOfRangeError once that queue is closed and empty.
        """
        queue_op = getattr(queue, "queue_ref", queue)
        graph = self._reader_op.graph
        with graph.colocate_with(self._reader_op):
            op = graph.create_op("ReaderReadV2", [],
                                 {"reader": self._reader_op, "queue": queue_op},
                                 name=name or "ReaderReadV2")
        return op.outputs[0], op.outputs[1]


class TFRecordReader(ReaderBase):
    """Reads the records of TFRecord files (key ``b'<file>:<byte offset>'``)::

        reader = tf.TFRecordReader()
        key, serialized_example = reader.read(filename_queue)

    ``options``: a ``tf.python_io.TFRecordOptions`` or its compression name.
    """

    def __init__(self, name=None, options=None):
        from ..api.python_io import TFRecordOptions
        compression = TFRecordOptions.get_compression_type_string(options)
        super().__init__("TFRecordReaderV2", {"compression_type": compression}, name)


class TextLineReader(ReaderBase):
    """Reads the lines of text files, without their newline (key
    ``b'<file>:<line number>'``), after ``skip_header_lines`` of each file::

        key, line = tf.TextLineReader(skip_header_lines=1).read(filename_queue)
    """

    def __init__(self, skip_header_lines=None, name=None):
        lines = skip_header_lines or 0
        if isinstance(lines, bool) or not isinstance(lines, int) or lines < 0:
            raise ValueError(f"skip_header_lines must be an int >= 0, got "
                             f"{skip_header_lines!r}")
        super().__init__("TextLineReaderV2", {"skip_header_lines": lines}, name)


class WholeFileReader(ReaderBase):
    """Reads each file whole: key the file name, value its content::

        file_name, content = tf.WholeFileReader().read(filename_queue)
    """

    def __init__(self, name=None):
        super().__init__("WholeFileReaderV2", {}, name)


class FixedLengthRecordReader(ReaderBase):
    """Reads records of ``record_bytes`` bytes from the files a queue names,
    skipping ``header_bytes`` at the start and ``footer_bytes`` at the end of
    each file; each Session keeps its own position::

        reader = tf.FixedLengthRecordReader(record_bytes=3073)
        key, value = reader.read(filename_queue)
    """

    def __init__(self, record_bytes, header_bytes=None, footer_bytes=None, hop_bytes=None,
                 name=None, encoding=None):
        sizes = {"record_bytes": record_bytes, "header_bytes": header_bytes or 0,
                 "footer_bytes": footer_bytes or 0}
        for what, size in sizes.items():
            smallest = 1 if what == "record_bytes" else 0
            if isinstance(size, bool) or not isinstance(size, int) or size < smallest:
                raise ValueError(f"{what} must be an int >= {smallest}, got {size!r}")
        if hop_bytes or encoding:
            raise NotImplementedError("FixedLengthRecordReader: hop_bytes and encoding are "
                                      "not supported")
        super().__init__("FixedLengthRecordReaderV2", sizes, name)


def decode_raw(input_bytes=None, out_type=None, little_endian=True, name=None, bytes=None):
    """Reinterpret each string of ``input_bytes`` as a vector of ``out_type``
    (all strings the same length): ``tf.decode_raw(value, tf.uint8)``."""
    if input_bytes is None:
        input_bytes = bytes
    if input_bytes is None or out_type is None:
        raise ValueError("decode_raw needs input_bytes and out_type")
    out_type = dtypes.as_dtype(out_type)
    if not (out_type.is_floating or out_type.is_integer) or out_type is dtypes.bfloat16:
        raise TypeError(f"decode_raw out_type must be a float or int type, got {out_type!r}")
    data = convert_to_tensor(input_bytes, dtype=dtypes.string)
    return data.graph.create_op("DecodeRaw", [data], {"out_type": out_type,
                                                      "little_endian": bool(little_endian)},
                                name=name or "DecodeRaw").outputs[0]


def read_file(filename, name=None):
    """The content of the file named by the string scalar ``filename``:
    ``png = tf.read_file('/data/cat.png')``; NotFoundError if it is missing."""
    filename = convert_to_tensor(filename, dtype=dtypes.string)
    return filename.graph.create_op("ReadFile", [filename], {},
                                    name=name or "ReadFile").outputs[0]


def write_file(filename, contents, name=None):
    """An op writing the string scalar ``contents`` to the file ``filename``
    (its folders made as needed): ``sess.run(tf.io.write_file(path, png))``."""
    filename = convert_to_tensor(filename, dtype=dtypes.string)
    contents = convert_to_tensor(contents, dtype=dtypes.string)
    return filename.graph.create_op("WriteFile", [filename, contents], {},
                                    name=name or "WriteFile")
