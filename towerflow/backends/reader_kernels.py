"""Host kernels that read files: the TFRecord, text-line and whole-file
readers (``ReaderReadV2`` on them, towerflow/backends/queue_kernels.py),
``ReadFile`` and ``WriteFile``. The record generators of one file are shared
with the file datasets (towerflow/api/dataset_files.py)::

    for key, value in text_lines(b'a.csv', skip_header_lines=1):
        ...            # key b'a.csv:2', value the second line without its newline
"""

import os
import threading

import numpy as np

from .. import errors
from . import tfrecord_format


def tfrecords(file_name, compression="", op=None):
    """(key, record) of each record: the key is ``b'<file>:<byte offset>'``."""
    for offset, record in tfrecord_format.read_records(file_name, compression, op):
        yield file_name + b":" + str(offset).encode(), record


def text_lines(file_name, skip_header_lines=0, compression="", op=None):
    """(key, line) of each line after the first ``skip_header_lines``, without
    its '\\n' (or '\\r\\n'); the key is ``b'<file>:<line number from 1>'``."""
    content = tfrecord_format.read_all(file_name, compression, op)
    lines = content.split(b"\n")
    if lines and lines[-1] == b"":      # a final newline ends a line, starts none
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if number > skip_header_lines:
            yield file_name + b":" + str(number).encode(), line.removesuffix(b"\r")


def whole_file(file_name, op=None):
    """One (file name, content) pair."""
    yield file_name, tfrecord_format.read_all(file_name, "", op)


def fixed_length_records(file_name, record_bytes, header_bytes=0, footer_bytes=0,
                         compression="", op=None):
    """(key, record) of each whole record between the header and the footer."""
    content = tfrecord_format.read_all(file_name, compression, op)
    body = len(content) - header_bytes - footer_bytes
    for index in range(max(0, body) // record_bytes):
        start = header_bytes + index * record_bytes
        yield file_name + b":" + str(index).encode(), content[start:start + record_bytes]


class FileReader:
    """One reader's position in one Session: the records of the file being
    read, the next file name taken from the queue when they run out. A lock
    keeps reads from several threads whole."""

    def __init__(self, records_of_file):
        self._records_of_file = records_of_file     # (file name, op) -> (key, value)s
        self._records = iter(())
        self._lock = threading.Lock()

    def read(self, queue, op):
        with self._lock:
            for key, value in self._records:
                return np.array(key, dtype=object), np.array(value, dtype=object)
            while True:
                (name,) = queue.dequeue_many(1, op)[0]
                self._records = self._records_of_file(bytes(name[()]), op)
                for key, value in self._records:
                    return np.array(key, dtype=object), np.array(value, dtype=object)


def make_reader(reader_op):
    """The FileReader of a TFRecord, text-line or whole-file reader op."""
    attrs = reader_op.attrs
    if reader_op.type == "TFRecordReaderV2":
        return FileReader(lambda name, op: tfrecords(name, attrs["compression_type"], op))
    if reader_op.type == "TextLineReaderV2":
        return FileReader(lambda name, op: text_lines(name, attrs["skip_header_lines"],
                                                      op=op))
    return FileReader(whole_file)


READER_OPS = ("TFRecordReaderV2", "TextLineReaderV2", "WholeFileReaderV2")


def build_reader_kernels(reader_handle):
    """The kernels of this module; ``reader_handle``: the kernel of a reader op."""
    table = dict.fromkeys(READER_OPS, reader_handle)
    table.update({"ReadFile": _read_file, "WriteFile": _write_file})
    return table


def _read_file(ctx):
    op = ctx.op

    def read(file_name):
        return np.array(tfrecord_format.read_all(_scalar_bytes(file_name), "", op), dtype=object)
    return read


def _write_file(ctx):
    op = ctx.op

    def write(file_name, contents):
        path = _scalar_bytes(file_name).decode()
        try:
            if os.path.dirname(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as file:
                file.write(_scalar_bytes(contents))
        except OSError as err:
            raise errors.PermissionDeniedError(
                None, op, f"{path}; {err.strerror}") from None
    return write


def _scalar_bytes(value):
    """The bytes of a string scalar (a 0-d object array, or bytes as they are)."""
    return bytes(np.asarray(value, dtype=object)[()])
