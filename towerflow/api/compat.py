"""``tf.compat``: TF1's switches for programs ported to TensorFlow 2, and the
bytes/text helpers string tensors need.

``tf.compat.v1`` is towerflow itself, so programs written for TensorFlow 2's
compatibility layer run after the rename::

    import towerflow.compat.v1 as tf        # was: import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()                 # a no-op: towerflow is TF1 already
    x = tf.placeholder(tf.float32, [None, 3])

The ``disable_*`` / ``enable_resource_variables`` functions change nothing:
towerflow always has TF1's behaviour (graphs and sessions, no eager mode).
"""

import sys

from ..dtypes import as_bytes  # noqa: F401  (tf.compat.as_bytes)
from ..graph.dimension import dimension_at_index, dimension_value  # noqa: F401

v1 = sys.modules["towerflow"]   # set up by towerflow/__init__.py before importing this


def disable_v2_behavior():
    """A no-op: towerflow always behaves as TensorFlow 1.x (graph mode,
    sessions, TF1 shapes and control flow). ``tf.disable_v2_behavior()``."""


def disable_eager_execution():
    """A no-op: towerflow has no eager mode; ops build a graph and a
    Session runs it. ``tf.disable_eager_execution()``."""


def executing_eagerly():
    """Always False: ``tf.executing_eagerly()`` in a towerflow program."""
    return False


def enable_eager_execution(*args, **kwargs):
    """Refused: towerflow runs graphs in sessions only (TensorFlow 1.x's model)."""
    raise NotImplementedError(
        "enable_eager_execution: towerflow has no eager mode; build a graph and run "
        "it with tf.Session (TensorFlow 1.x's model)")


enable_v2_behavior = enable_eager_execution


def enable_resource_variables():
    """A no-op: towerflow's variables already behave as TF1's resource
    variables do (each read sees every assignment that ran before it)."""


def disable_resource_variables():
    """A no-op, as :func:`enable_resource_variables`."""


def resource_variables_enabled():
    """True: see :func:`enable_resource_variables`."""
    return True


def disable_v2_tensorshape():
    """A no-op: towerflow has only TF1's ``TensorShape``."""


def as_text(bytes_or_text, encoding="utf-8"):
    """``tf.compat.as_text(b'Hello') == 'Hello'``; str passes through."""
    if isinstance(bytes_or_text, str):
        return bytes_or_text
    if isinstance(bytes_or_text, (bytes, bytearray)):
        return bytes(bytes_or_text).decode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


as_str = as_text


def as_str_any(value):
    """``str(value)``, decoding bytes: ``tf.compat.as_str_any(b'a') == 'a'``."""
    return as_text(value) if isinstance(value, bytes) else str(value)

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.compat")
