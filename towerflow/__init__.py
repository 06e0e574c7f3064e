"""towerflow: TensorFlow 1.x's graph and device model, on NumPy (CPU) and
CuPy (GPU), built for data-parallel training over many devices.

::

    import towerflow as tf
    a = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3], name='a')
    b = tf.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2], name='b')
    with tf.Session() as sess:
        print(sess.run(tf.matmul(a, b)))       # [[22. 28.] [49. 64.]]
"""

from . import backends as _backends  # noqa: F401
from . import simgpu as _simgpu
from .backends import numpy_backend as _numpy_backend  # noqa: F401  (CPU kernels)
from . import (config, data, device_lib, errors, mixed_precision,
               parallel, train)
from .api import layers, losses, nn
from .api import missing as _missing
from . import testing as test
from .autodiff import gradients, hessians, stop_gradient
from .device import DeviceSpec
from .dtypes import (DType, as_dtype, bfloat16, bool, double, float16, float32,  # noqa: A004
                     float64, half, int8, int16, int32, int64, uint8, uint16)
from .graph import Graph, GraphKeys, Operation, Tensor, TensorShape
from .graph.dimension import Dimension, dimension_at_index, dimension_value
from .graph.core import get_default_graph, reset_default_graph
from .log import get_logger
from .ops.array_ops import (concat, expand_dims, group, identity, no_op, reshape, shape,
                            split, squeeze, stack, transpose, unstack)
from .ops.clip_ops import clip_by_global_norm, clip_by_norm, clip_by_value, global_norm
from .ops.init_ops import (constant_initializer, glorot_normal_initializer,
                           glorot_uniform_initializer, ones_initializer,
                           random_normal_initializer, random_uniform_initializer,
                           truncated_normal_initializer, variance_scaling_initializer,
                           zeros_initializer)
from .ops.constant_ops import (constant, convert_to_tensor, fill, ones, ones_like,
                               placeholder, placeholder_with_default,
                               register_tensor_conversion_function, zeros, zeros_like)
from .ops.math_ops import (abs, add, add_n, argmax, argmin, cast, ceil, cos, div,  # noqa: A004
                           divide, equal, exp, floor, floordiv, floormod, greater,
                           greater_equal, is_finite, is_inf, is_nan, less, less_equal, log,
                           log1p, logical_and,
                           logical_not, logical_or, matmul, maximum, minimum, mod, multiply,
                           negative, not_equal, pow, reciprocal, reduce_all, reduce_any,
                           reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_sum,
                           round, rsqrt, sigmoid, sign, sin, sqrt, square,
                           squared_difference, subtract, tanh, truediv, where)
from .api import initializers
from .ops.random_ops import (categorical, multinomial, random_normal, random_uniform,
                             set_random_seed, truncated_normal)
from .ops.state_ops import (Variable, assign, assign_add, assign_sub, global_variables,
                            global_variables_initializer, initialize_all_variables,
                            trainable_variables, variables_initializer)
# tf.train's everyday API (optimizers, ExponentialMovingAverage): its collection
from .ops.state_ops import moving_average_variables
# -- TF1 op vocabulary: slicing, indexing, ranking, tf.image (issue 15/16) --
from .api import image
from .ops.image_ops import random_crop
from .ops.index_ops import gather, one_hot, range, reverse  # noqa: A004
from .ops.select_ops import arg_max, arg_min
from .ops.slice_ops import slice, strided_slice  # noqa: A004
newaxis = None
# Variable scopes and shared variables (issue 15)
from .ops.variable_scope import (AUTO_REUSE, VariableScope, get_variable,
                                 get_variable_scope, no_regularizer, variable_scope)
# Traces: RunOptions/RunMetadata step stats and the Chrome-trace Timeline (issue 15)
from . import client
from .step_stats import RunMetadata, RunOptions
# Queue input pipelines and metrics (tf.FIFOQueue, tf.decode_raw, tf.metrics)
from .api import metrics
from .dtypes import string
from .ops.data_flow_ops import FIFOQueue, QueueBase, RandomShuffleQueue
from .ops.io_ops import FixedLengthRecordReader, decode_raw
# TFRecords, tf.train.Example parsing, CSV, text and whole-file readers (issue 34)
from .ops.io_ops import (ReaderBase, TextLineReader, TFRecordReader, WholeFileReader,
                         read_file, write_file)
from .ops.parsing_ops import (FixedLenFeature, FixedLenSequenceFeature, VarLenFeature,
                              decode_csv, parse_example, parse_single_example)
from .api import python_io
from .ops.random_ops import random_shuffle
from .ops.state_ops import count_up_to, local_variables, local_variables_initializer
# TF1 compatibility: flags and tf.app.run, tf.gfile / tf.io.gfile, tf.logging,
# tf.compat.v1 (towerflow itself), string tensors.
import sys as _sys
from .api import app, flags, gfile_v1 as gfile, io, tf_logging as logging
from .api import compat
from .api.compat import (disable_eager_execution, disable_resource_variables,  # noqa: F401
                         disable_v2_behavior, disable_v2_tensorshape, enable_eager_execution,
                         enable_resource_variables, enable_v2_behavior, executing_eagerly,
                         resource_variables_enabled)
from .ops.logging_ops import print  # noqa: A004  (TensorFlow's tf.print)
# ``import towerflow.compat.v1 as tf`` (was ``import tensorflow.compat.v1 as tf``).
_sys.modules[__name__ + ".compat"] = compat
_sys.modules[__name__ + ".compat.v1"] = _sys.modules[__name__]
# -- summaries and TensorBoard; MonitoredTrainingSession (issue 15) --
from .api import summary
from .api.summary import Event, SessionLog, Summary
# -- TF1 array, math and loss ops: gather_nd, scatter_nd, pad, tile, cumsum,
# reduce_logsumexp, sort, unique, boolean_mask, sequence_mask (issue 16) --
from .ops.mask_ops import boolean_mask, sequence_mask
from .ops.pad_ops import pad, tile
from .ops.scan_ops import cumprod, cumsum, reduce_logsumexp
from .ops.scatter_ops import gather_nd, scatter_nd
from .ops.sort_ops import argsort, sort, unique
# -- debugging and Python ops: tf.py_func, tf.Print, asserts, numerics checks (issue 16) --
from .api import debugging
from .ops.check_ops import (Assert, assert_equal, assert_greater, assert_greater_equal,
                            assert_less, assert_less_equal, assert_negative,
                            assert_non_negative, assert_non_positive, assert_none_equal,
                            assert_positive, assert_rank, assert_type)
from .ops.logging_ops import Print
from .ops.numerics_ops import add_check_numerics_ops, check_numerics, verify_tensor_all_finite
from .ops.script_ops import numpy_function, py_func
# -- control flow: tf.cond, tf.while_loop, tf.map_fn (issue 16) --
from .ops import control_flow_grad as _control_flow_grad  # noqa: F401  (gradients)
from .ops import second_order_grad as _second_order_grad  # noqa: F401  (gradients)
from .ops.control_flow_ops import case, cond, map_fn, switch_case, while_loop
# -- TF1's deprecated casts, still in classic programs --
from .ops.math_ops import to_double, to_float, to_int32, to_int64
# -- graph-level names TF1 programs use: GraphDef protos, import_graph_def,
# tf.graph_util, custom gradients, tf.lookup (issue 34) --
from tensorboard.compat.proto.attr_value_pb2 import AttrValue, NameAttrList
from tensorboard.compat.proto.graph_pb2 import GraphDef
from tensorboard.compat.proto.meta_graph_pb2 import MetaGraphDef
from tensorboard.compat.proto.node_def_pb2 import NodeDef
from .api import graph_util
from .api.graph_def import import_graph_def
from .ops.gradient_ops import (NotDifferentiable, RegisterGradient, custom_gradient,
                               identity_n, no_gradient)
from .ops.script_ops import py_function
from .api import lookup
from .ops.lookup_ops import tables_initializer
# -- TF 1.15's einsum, tensordot, linspace, meshgrid, reverse_sequence, the
# matrix ops and the tf.math / tf.linalg namespaces (issue 34) --
from .api import linalg, math
from .ops.einsum_ops import einsum, tensordot
from .ops.linalg_ops import (cholesky, eye, matrix_band_part, matrix_determinant,
                             matrix_diag, matrix_diag_part, matrix_inverse, matrix_solve,
                             matrix_transpose, norm, trace)
from .ops.sequence_ops import lin_space, linspace, meshgrid, reverse_sequence
from .api.linalg import cholesky_solve
from .api.math import log_sigmoid
# -- sparse updates: IndexedSlices gradients, scatter ops on variables (issue 34) --
from .ops.indexed_slices import IndexedSlices, IndexedSlicesValue
from .api import sparse
from .ops.sparse_ops import (SparseTensor, SparseTensorValue, sparse_placeholder,
                             sparse_reorder, sparse_tensor_dense_matmul,
                             sparse_tensor_to_dense, sparse_to_dense)
from .ops.state_scatter_ops import (scatter_add, scatter_div, scatter_max, scatter_min,
                                    scatter_mul, scatter_nd_add, scatter_nd_sub,
                                    scatter_nd_update, scatter_sub, scatter_update)
from .session import ConfigProto, GPUOptions, InteractiveSession, Session, get_default_session
from .graph.core import get_default_graph as _get_default_graph


def device(device_name_or_function):
    """Request a device for the ops built inside the block::

        with tf.device('/cpu:0'):
            a = tf.constant(1.0)          # a.device == '/device:CPU:0'

    Nested scopes merge field by field, the inner one winning;
    ``tf.device(None)`` clears the scope.
    """
    return _get_default_graph().device(device_name_or_function)


def name_scope(name, default_name=None, values=None):
    """Prefix the names of ops built inside: ``with tf.name_scope('layer1'):``."""
    return _get_default_graph().name_scope(name or default_name)


def control_dependencies(control_inputs):
    """Ops built inside run only after ``control_inputs`` have run."""
    return _get_default_graph().control_dependencies(control_inputs)


def colocate_with(op, ignore_existing=False):
    """Place ops built inside on the device of ``op``."""
    return _get_default_graph().colocate_with(op)


def get_collection(key, scope=None):
    return _get_default_graph().get_collection(key, scope)


def add_to_collection(name, value):
    _get_default_graph().add_to_collection(name, value)


sub = subtract
mul = multiply
random = _missing.namespace(
    "tf.random",
    categorical=categorical, multinomial=multinomial, normal=random_normal,
    uniform=random_uniform, truncated_normal=truncated_normal,
    set_random_seed=set_random_seed, set_seed=set_random_seed, shuffle=random_shuffle)
__version__ = "0.1.0"

# -- tf.contrib's thin aliases of core, importable as towerflow.contrib.layers too --
from .api import contrib
for _name in ("", ".framework", ".layers", ".rnn"):
    _sys.modules[__name__ + ".contrib" + _name] = _sys.modules[contrib.__name__ + _name]
# A missing name, or a module TF 1.15 has and towerflow lacks (towerflow.contrib.slim,
# towerflow.python.ops.sparse_ops), says so (towerflow/api/missing.py).
_sys.meta_path.append(_missing.MissingModuleFinder())


def __getattr__(name):
    """``tf.python`` (TF's import paths, towerflow/python) loads on first use;
    any other name towerflow lacks raises ``AttributeError: towerflow has no tf.<name>``."""
    if name == "python":
        import importlib
        return importlib.import_module(__name__ + ".python")
    raise _missing.no_such_name(f"tf.{name}")

# A process started with TOWERFLOW_SIMULATED_GPUS=N (a test's subprocess, or each
# rank under `towerflow launch`) sees N simulated GPUs instead of CuPy's.
_simgpu.install_from_environment()
