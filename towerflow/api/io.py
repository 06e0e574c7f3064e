"""``tf.io``: the file API ``tf.io.gfile`` (see :mod:`.gfile`), TFRecord
files, Example and CSV parsing, image codecs, and ``tf.io.decode_raw`` (the
same ops as their ``tf.`` names)::

    tf.io.gfile.makedirs('/tmp/run1')
    pixels = tf.io.decode_raw(record, tf.uint8)
    with tf.io.TFRecordWriter('/tmp/run1/train.tfrecord') as writer:
        writer.write(example.SerializeToString())
"""

from ..ops.image_codec_ops import (decode_image, decode_jpeg, decode_png, encode_jpeg,
                                   encode_png)
from ..ops.io_ops import decode_raw, read_file, write_file
from ..ops.parsing_ops import (FixedLenFeature, FixedLenSequenceFeature, VarLenFeature,
                               decode_csv, parse_example, parse_single_example)
from . import gfile
from .python_io import (TFRecordCompressionType, TFRecordOptions, TFRecordWriter,
                        tf_record_iterator)

__all__ = ["FixedLenFeature", "FixedLenSequenceFeature", "TFRecordCompressionType",
           "TFRecordOptions", "TFRecordWriter", "VarLenFeature", "decode_csv", "decode_image",
           "decode_jpeg", "decode_png", "decode_raw", "encode_jpeg", "encode_png", "gfile",
           "parse_example", "parse_single_example", "read_file", "tf_record_iterator",
           "write_file"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.io")
