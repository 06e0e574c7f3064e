"""``tf.sparse``: the SparseTensor ops of TensorFlow 1.15 that towerflow has
(towerflow/ops/sparse_ops.py)::

    sp = tf.SparseTensor([[0, 1], [2, 0]], [5.0, 7.0], [3, 2])
    tf.sparse.to_dense(tf.sparse.reorder(sp))
"""

from ..ops.sparse_ops import SparseTensor, SparseTensorValue
from ..ops.sparse_ops import sparse_placeholder as placeholder
from ..ops.sparse_ops import sparse_reorder as reorder
from ..ops.sparse_ops import sparse_tensor_dense_matmul as matmul
from ..ops.sparse_ops import sparse_tensor_dense_matmul as sparse_dense_matmul
from ..ops.sparse_ops import sparse_tensor_to_dense as to_dense

__all__ = ["SparseTensor", "SparseTensorValue", "matmul", "placeholder", "reorder",
           "sparse_dense_matmul", "to_dense"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.sparse")
