"""Stage 2 of the pipeline: the graph (ops, tensors, shapes, the op registry)."""

from .core import (Graph, GraphKeys, Operation, Tensor, get_default_graph,
                   reset_default_graph)
from .registry import register_op, get_op_def
from .shapes import TensorShape

__all__ = ["Graph", "GraphKeys", "Operation", "Tensor", "TensorShape", "get_default_graph",
           "reset_default_graph", "register_op", "get_op_def"]
