"""``tf.contrib``: only the parts that are thin aliases of core TF1 --
``tf.contrib.layers`` (its layer functions, initializers, regularizers and
``optimize_loss``), ``tf.contrib.rnn`` (the cells of ``tf.nn.rnn_cell``) and
``tf.contrib.framework`` (``arg_scope``, the global step)::

    net = tf.contrib.layers.fully_connected(x, 64)                  # ReLU, as contrib
    cell = tf.contrib.rnn.LSTMCell(32)
    step = tf.contrib.framework.get_or_create_global_step()

Everything else of tf.contrib (``slim``, ``learn``, ``seq2seq``, ...) raises
an AttributeError (or, imported, a ModuleNotFoundError) that names it.
"""

from .. import missing as _missing
from . import framework, layers, rnn

SUPPORTED = ("tf.contrib.layers", "tf.contrib.rnn", "tf.contrib.framework")


def unsupported(dotted):
    """The error for ``dotted`` ('tf.contrib.slim'), a part of tf.contrib towerflow lacks."""
    reason = "tf.contrib is supported only for its thin aliases of core: " + ", ".join(SUPPORTED)
    return _missing.no_such_name(dotted, reason)


def __getattr__(name):
    raise unsupported(f"tf.contrib.{name}")


__all__ = ["framework", "layers", "rnn"]
