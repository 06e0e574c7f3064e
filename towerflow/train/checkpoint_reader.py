"""Reading checkpoints without a graph: ``tf.train.NewCheckpointReader``,
``tf.train.load_checkpoint``, ``tf.train.list_variables`` and
``tf.train.load_variable``, for TensorFlow's format and towerflow's ``.npz``::

    reader = tf.train.NewCheckpointReader("ckpt/model.ckpt-300")
    reader.get_variable_to_shape_map()     # {'dense/kernel': [4, 8], ...}
    kernel = reader.get_tensor("dense/kernel")
    tf.train.list_variables("ckpt")        # the directory's latest checkpoint
"""

import os

import numpy as np

from .. import dtypes, errors
from ..ops import constant_ops, state_ops
from . import tensor_bundle
from .checkpoint_format import (
    checkpoint_file,
    latest_checkpoint,
    logical_name,
    read_checkpoint,
)


class CheckpointReader:
    """The tensors of one checkpoint (TF1's ``CheckpointReader``); a checkpoint
    in TF's format is read tensor by tensor, each verified against its CRC-32C.
    NotFoundError when ``prefix`` names no checkpoint."""

    def __init__(self, prefix):
        self._prefix = prefix
        self._bundle, self._arrays = None, None
        if tensor_bundle.is_bundle(prefix):
            self._bundle = tensor_bundle.BundleReader(prefix)
        elif checkpoint_file(prefix) is not None:
            self._arrays = read_checkpoint(prefix).variables
        else:
            raise errors.NotFoundError(None, None, "Unsuccessful TensorSliceReader "
                                       "constructor: Failed to find any matching files "
                                       f"for {prefix}")

    def get_tensor(self, tensor_str):
        """The saved value of ``tensor_str``, a NumPy array. Example:
        ``reader.get_tensor('dense/kernel')``."""
        if self._bundle is not None:
            return self._bundle.tensor(tensor_str)
        if tensor_str not in self._arrays:
            raise errors.NotFoundError(None, None, f"Key {tensor_str} not found in checkpoint")
        return self._arrays[tensor_str].copy()

    def has_tensor(self, tensor_str):
        return tensor_str in self.get_variable_to_shape_map()

    def get_variable_to_shape_map(self):
        """``{name: [dims]}``; a scalar's shape is ``[]``."""
        if self._bundle is not None:
            return self._bundle.shapes()
        return {name: list(value.shape) for name, value in self._arrays.items()}

    def get_variable_to_dtype_map(self):
        """``{name: tf.DType}``."""
        if self._bundle is not None:
            return {name: dtypes.as_dtype(numpy_dtype)
                    for name, numpy_dtype in self._bundle.numpy_dtypes().items()}
        return {name: dtypes.as_dtype(value.dtype) for name, value in self._arrays.items()}

    def debug_string(self):
        """One line per tensor, as TF's: ``b'dense/kernel (DT_FLOAT) [4,8]\\n'``."""
        dtype_map = self.get_variable_to_dtype_map()
        lines = [f"{name} (DT_{_tf_enum_name(dtype_map[name])}) "
                 f"[{','.join(str(size) for size in shape)}]\n"
                 for name, shape in sorted(self.get_variable_to_shape_map().items())]
        return "".join(lines).encode("utf-8")


def _tf_enum_name(dtype):
    return {"float32": "FLOAT", "float64": "DOUBLE", "float16": "HALF"}.get(
        dtype.name, dtype.name.upper())


def NewCheckpointReader(filepattern):
    """A :class:`CheckpointReader` of the checkpoint prefix ``filepattern``.
    Example: ``tf.train.NewCheckpointReader('ckpt/model.ckpt-300').get_tensor('w')``."""
    return CheckpointReader(filepattern)


def load_checkpoint(ckpt_dir_or_file):
    """A :class:`CheckpointReader` of a checkpoint, or of a directory's latest
    one. Example: ``tf.train.load_checkpoint('ckpt').get_tensor('global_step')``."""
    return CheckpointReader(_prefix_of(ckpt_dir_or_file))


def list_variables(ckpt_dir_or_file):
    """``[(name, shape), ...]`` of a checkpoint or of a directory's latest one,
    sorted by name. Example: ``tf.train.list_variables('ckpt')``."""
    shapes = load_checkpoint(ckpt_dir_or_file).get_variable_to_shape_map()
    return [(name, shapes[name]) for name in sorted(shapes)]


def load_variable(ckpt_dir_or_file, name):
    """The saved value of the variable ``name`` (a ``:0`` suffix and a
    ``tower_<i>/`` prefix are dropped). Example:
    ``tf.train.load_variable('ckpt', 'dense/kernel')``."""
    name = logical_name(name.removesuffix(":0"))
    return np.asarray(load_checkpoint(ckpt_dir_or_file).get_tensor(name))


def _prefix_of(ckpt_dir_or_file):
    if not os.path.isdir(ckpt_dir_or_file):
        return ckpt_dir_or_file
    prefix = latest_checkpoint(ckpt_dir_or_file)
    if prefix is None:
        raise errors.NotFoundError(None, None, f"No checkpoint in {ckpt_dir_or_file}")
    return prefix


def init_from_checkpoint(ckpt_dir_or_file, assignment_map):
    """Make variables' initializers load values from a checkpoint (TF1's
    ``tf.train.init_from_checkpoint``). ``assignment_map`` maps checkpoint names
    to variables: ``{'ckpt_scope/w': 'scope/w'}`` or ``{'ckpt_scope/w': var}``
    for one variable, ``{'ckpt_scope/': 'scope/'}`` for every variable in a
    scope, ``{'/': 'scope/'}`` for the whole checkpoint. The values are read
    now (TF reads them when the initializer runs). Example::

        tf.train.init_from_checkpoint('pretrained', {'encoder/': 'encoder/'})
        sess.run(tf.global_variables_initializer())   # encoder/ from the checkpoint
    """
    reader = load_checkpoint(ckpt_dir_or_file)
    shapes = reader.get_variable_to_shape_map()
    by_name = {var.op.name: var for var in state_ops.global_variables()}
    for tensor_name, current in assignment_map.items():
        var = current if isinstance(current, state_ops.Variable) else by_name.get(current)
        pairs = [(tensor_name, var)] if var is not None else \
            _scope_pairs(tensor_name, current, by_name)
        for name, variable in pairs:
            if name not in shapes:
                raise ValueError(f"Tensor {name} is not found in {ckpt_dir_or_file} "
                                 "checkpoint")
            _initialize_from(variable, name, reader.get_tensor(name))


def _scope_pairs(tensor_name, scope_name, by_name):
    """``[(checkpoint name, variable)]`` for a scope-to-scope mapping."""
    scope = scope_name[:scope_name.rindex("/")] if "/" in scope_name else ""
    if not tensor_name.endswith("/"):
        raise ValueError(f"Assignment map with scope only name {scope} should map to scope "
                         f"only {tensor_name}. Should be 'scope/'.")
    pairs = []
    for var_name in sorted(by_name):
        if scope and not var_name.startswith(scope + "/"):
            continue
        relative = var_name[len(scope) + 1:] if scope else var_name
        pairs.append(((tensor_name if tensor_name != "/" else "") + relative,
                      by_name[var_name]))
    return pairs


def _initialize_from(var, name, value):
    if value.dtype != np.dtype(var.dtype.as_numpy_dtype):
        raise ValueError(f"Tensor {name} is {value.dtype} in the checkpoint but variable "
                         f"{var.name} is {var.dtype.name}")
    if not var.shape.is_compatible_with(value.shape):
        raise ValueError(f"Shape of variable {var.name} ({var.shape}) doesn't match with "
                         f"shape of tensor {name} ({list(value.shape)}) from checkpoint "
                         "reader.")
    graph = var.graph
    with graph.as_default(), graph.name_scope(var.op.name + "/"):
        restored = constant_ops.constant(value, dtype=var.dtype, name="checkpoint_initializer")
        var._initializer = var._assign_op("Assign", restored, True, "Assign_checkpoint").op
        var._initial_value = restored
