"""TensorFlow's ``tensorflow.python.*`` import paths, with ``tensorflow``
renamed ``towerflow`` as the only edit::

    from towerflow.python.framework import ops       # was: from tensorflow.python...
    from towerflow.python.ops import math_ops, rnn_cell_impl
    ops.reset_default_graph()
    y = math_ops.matmul(x, w)

Each path in ``IMPORT_PATHS`` is a thin module object (no file of its own)
whose names are looked up, in order, in the towerflow namespaces listed for
it (``"nn"`` is ``tf.nn``, ``""`` is ``tf`` itself); a name none of them has
raises ``AttributeError: towerflow has no tensorflow.python.ops.math_ops.foo
(not implemented; ...)``. The modules re-export public names only, and may
hold more names than TF's module of that path did (``math_ops.Session``):
what TF's module has, the mapped namespace has under the same name.

To map a new path, add a line to ``IMPORT_PATHS``. A path whose namespaces do
not exist yet (``tf.sparse`` before it is written) is left out until one does.
"""

import importlib
import sys
import types

from ..api import missing

# TF's path under tensorflow.python -> the towerflow namespaces that hold its names.
IMPORT_PATHS = {
    "client.device_lib": ("device_lib",),
    "client.session": ("",),
    "client.timeline": ("client.timeline",),
    "data.ops.dataset_ops": ("data",),
    "data.ops.iterator_ops": ("data",),
    "framework.constant_op": ("",),
    "framework.dtypes": ("dtypes",),
    "framework.errors": ("errors",),
    "framework.errors_impl": ("errors",),
    "framework.graph_util": ("graph_util",),
    "framework.graph_util_impl": ("graph_util",),
    "framework.ops": ("",),
    "framework.random_seed": ("random", ""),
    "framework.tensor_shape": ("",),
    "layers.base": ("layers",),
    "layers.convolutional": ("layers",),
    "layers.core": ("layers",),
    "layers.layers": ("layers",),
    "layers.normalization": ("layers",),
    "layers.pooling": ("layers",),
    "ops.array_ops": ("",),
    "ops.check_ops": ("debugging", ""),
    "ops.clip_ops": ("",),
    "ops.control_flow_ops": ("",),
    "ops.data_flow_ops": ("",),
    "ops.embedding_ops": ("nn",),
    "ops.functional_ops": ("",),
    "ops.gradients": ("",),
    "ops.gradients_impl": ("",),
    "ops.image_ops": ("image",),
    "ops.init_ops": ("initializers", ""),
    "ops.io_ops": ("io", ""),
    "ops.linalg_ops": ("linalg",),
    "ops.logging_ops": ("",),
    "ops.lookup_ops": ("lookup",),
    "ops.losses.losses": ("losses",),
    "ops.math_ops": ("", "math"),
    "ops.metrics": ("metrics",),
    "ops.nn": ("nn",),
    "ops.nn_impl": ("nn",),
    "ops.nn_ops": ("nn",),
    "ops.random_ops": ("", "random"),
    "ops.rnn": ("nn",),
    "ops.rnn_cell": ("nn.rnn_cell",),
    "ops.rnn_cell_impl": ("nn.rnn_cell",),
    "ops.script_ops": ("",),
    "ops.sparse_ops": ("sparse",),
    "ops.standard_ops": ("",),
    "ops.state_ops": ("",),
    "ops.variable_scope": ("",),
    "ops.variables": ("",),
    "platform.app": ("app",),
    "platform.flags": ("flags",),
    "platform.gfile": ("gfile",),
    "platform.test": ("test",),
    "platform.tf_logging": ("logging",),
    "summary.summary": ("summary",),
    "training.adadelta": ("train",),
    "training.adagrad": ("train",),
    "training.adam": ("train",),
    "training.basic_session_run_hooks": ("train",),
    "training.checkpoint_management": ("train",),
    "training.checkpoint_utils": ("train",),
    "training.coordinator": ("train",),
    "training.gradient_descent": ("train",),
    "training.input": ("train",),
    "training.learning_rate_decay": ("train",),
    "training.momentum": ("train",),
    "training.monitored_session": ("train",),
    "training.moving_averages": ("train",),
    "training.optimizer": ("train",),
    "training.queue_runner": ("train",),
    "training.queue_runner_impl": ("train",),
    "training.rmsprop": ("train",),
    "training.saver": ("train",),
    "training.session_run_hook": ("train",),
    "training.training": ("train",),
    "training.training_util": ("train",),
    "util.nest": ("ops.nest",),
}


def _namespace(dotted):
    """towerflow's namespace at ``dotted`` ('nn.rnn_cell'; '' is towerflow),
    or None where it does not exist (yet)."""
    namespace = sys.modules["towerflow"]
    for part in filter(None, dotted.split(".")):
        try:
            namespace = getattr(namespace, part)
        except AttributeError:
            try:
                namespace = importlib.import_module(f"{namespace.__name__}.{part}")
            except ImportError:
                return None
    return namespace


class _ImportPath(types.ModuleType):
    """``towerflow.python.<path>``: TF's module of that path, its names looked
    up in ``_sources`` (towerflow namespaces) on each access."""

    def __getattr__(self, name):
        if not name.startswith("_"):
            for source in self.__dict__["_sources"]:
                namespace = _namespace(source)
                if namespace is not None and hasattr(namespace, name):
                    return getattr(namespace, name)
        raise missing.no_such_name(f"tensorflow.python.{self.__dict__['_path']}.{name}")

    def __dir__(self):
        names = set(self.__dict__) - {"_sources", "_path"}
        for source in self.__dict__["_sources"]:
            namespace = _namespace(source)
            names.update(n for n in dir(namespace or ()) if not n.startswith("_"))
        return sorted(names)


def _module(path, sources=()):
    """The module object for ``towerflow.python.<path>``, made once and kept in sys.modules."""
    fullname = f"{__name__}.{path}"
    if fullname not in sys.modules:
        module = _ImportPath(fullname, f"tensorflow.python.{path}, mapped onto towerflow")
        module.__dict__.update(_sources=sources, _path=path)
        if not sources:
            module.__path__ = []        # a package: its children are modules too
        parent_path, _, child = path.rpartition(".")
        parent = _module(parent_path) if parent_path else sys.modules[__name__]
        sys.modules[fullname] = module
        setattr(parent, child, module)
    return sys.modules[fullname]


def _install(import_paths):
    for path, sources in import_paths.items():
        if any(_namespace(source) is not None for source in sources):
            _module(path, sources)


_install(IMPORT_PATHS)

__getattr__ = missing.module_getattr("tensorflow.python")
