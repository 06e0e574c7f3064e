"""Datasets of the records of files: ``tf.data.TFRecordDataset``,
``TextLineDataset`` and ``FixedLengthRecordDataset`` (one string scalar per
record, the files read in order; see towerflow/api/dataset.py)::

    dataset = tf.data.TFRecordDataset(['train-0.tfrecord', 'train-1.tfrecord'])
    dataset = dataset.map(lambda record: tf.parse_single_example(record, features))
"""

import numpy as np

from .. import dtypes
from ..backends import reader_kernels, tfrecord_format
from ..graph.shapes import TensorShape
from ..ops.constant_ops import convert_to_tensor
from .dataset import Dataset


class _FileDataset(Dataset):
    """The records of the files ``filenames`` names (a string, a list of them
    or a string tensor of rank 0 or 1, fed when the iterator starts)."""

    def __init__(self, filenames, compression_type):
        names = convert_to_tensor(filenames, dtype=dtypes.string, name="filenames")
        if names.shape.ndims not in (None, 0, 1):
            raise ValueError(f"filenames must be a string scalar or vector, got shape "
                             f"{names.shape}")
        self._compression = tfrecord_format.compression_name(compression_type)
        super().__init__(dtypes.string, TensorShape([]), captures=[names])
        self._names = names

    def _elements(self, env):
        for name in np.asarray(env.value(self._names), dtype=object).reshape(-1):
            for _, record in self._records(bytes(name), env.op):
                yield (np.array(record, dtype=object),)

    def _records(self, file_name, op):
        raise NotImplementedError


class TFRecordDataset(_FileDataset):
    """The records of TFRecord files: ``tf.data.TFRecordDataset(files, 'GZIP')``.
    ``buffer_size`` and ``num_parallel_reads`` are accepted; files are read in
    order, one at a time."""

    def __init__(self, filenames, compression_type=None, buffer_size=None,
                 num_parallel_reads=None):
        super().__init__(filenames, compression_type)

    def _records(self, file_name, op):
        return reader_kernels.tfrecords(file_name, self._compression, op)


class TextLineDataset(_FileDataset):
    """The lines of text files, without their newline:
    ``tf.data.TextLineDataset('train.csv').skip(1)``."""

    def __init__(self, filenames, compression_type=None, buffer_size=None):
        super().__init__(filenames, compression_type)

    def _records(self, file_name, op):
        return reader_kernels.text_lines(file_name, 0, self._compression, op)


class FixedLengthRecordDataset(_FileDataset):
    """Records of ``record_bytes`` bytes between a header and a footer:
    ``tf.data.FixedLengthRecordDataset(files, 3073)`` (CIFAR-10's binaries)."""

    def __init__(self, filenames, record_bytes, header_bytes=None, footer_bytes=None,
                 buffer_size=None, compression_type=None):
        sizes = [record_bytes, header_bytes or 0, footer_bytes or 0]
        for what, size, smallest in zip(("record_bytes", "header_bytes", "footer_bytes"),
                                        sizes, (1, 0, 0)):
            if isinstance(size, bool) or not isinstance(size, int) or size < smallest:
                raise ValueError(f"{what} must be an int >= {smallest}, got {size!r}")
        super().__init__(filenames, compression_type)
        self._sizes = sizes

    def _records(self, file_name, op):
        return reader_kernels.fixed_length_records(file_name, *self._sizes,
                                                   compression=self._compression, op=op)
