"""``tf.io``: the file API ``tf.io.gfile`` (see :mod:`.gfile`) and
``tf.io.decode_raw`` (the same op as ``tf.decode_raw``)::

    tf.io.gfile.makedirs('/tmp/run1')
    pixels = tf.io.decode_raw(record, tf.uint8)
"""

from ..ops.io_ops import decode_raw
from . import gfile

__all__ = ["decode_raw", "gfile"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.io")
