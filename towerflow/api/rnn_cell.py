"""``tf.nn.rnn_cell``: the recurrent cells (rnn_cell_impl.py, rnn_cell_wrappers.py)."""

from .rnn_cell_impl import (
    BasicLSTMCell,
    BasicRNNCell,
    GRUCell,
    LSTMCell,
    LSTMStateTuple,
    RNNCell,
)
from .rnn_cell_wrappers import DropoutWrapper, MultiRNNCell

__all__ = ["BasicLSTMCell", "BasicRNNCell", "DropoutWrapper", "GRUCell", "LSTMCell",
           "LSTMStateTuple", "MultiRNNCell", "RNNCell"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.nn.rnn_cell")
