"""``tf.contrib.rnn``: the cells and wrappers that TF 1.15 also has in
``tf.nn.rnn_cell``, and ``static_rnn``: the same objects as there::

    cell = tf.contrib.rnn.MultiRNNCell([tf.contrib.rnn.LSTMCell(64) for _ in range(2)])
    outputs, state = tf.nn.dynamic_rnn(cell, inputs, dtype=tf.float32)
"""

from .. import missing as _missing
from ..rnn import static_rnn
from ..rnn_cell import (
                        BasicLSTMCell,
                        BasicRNNCell,
                        DropoutWrapper,
                        GRUCell,
                        LSTMCell,
                        LSTMStateTuple,
                        MultiRNNCell,
                        RNNCell,
)

__all__ = ["BasicLSTMCell", "BasicRNNCell", "DropoutWrapper", "GRUCell", "LSTMCell",
           "LSTMStateTuple", "MultiRNNCell", "RNNCell", "static_rnn"]

__getattr__ = _missing.module_getattr("tf.contrib.rnn")
