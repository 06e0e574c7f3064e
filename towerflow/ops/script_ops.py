"""``tf.py_func`` and ``tf.numpy_function``: a Python function as an op.

The function runs on the CPU, in this process, each time the op runs (its
kernel: towerflow/backends/script_kernels.py). The op is built on the CPU
even inside a GPU scope (a tower's), as TensorFlow's PyFunc has a CPU kernel
only; the plan copies its inputs and outputs across. Its outputs have
unknown shapes (``set_shape`` them) and no gradient: ``tf.gradients`` gives
None for an input reached only through it, as TensorFlow does.
"""

import itertools

from .. import dtypes
from ..graph import core
from ..graph.registry import register_not_differentiable, register_op
from ..graph.shapes import unknown_shape
from .constant_ops import convert_to_tensor

_TOKENS = itertools.count()   # TensorFlow's FuncRegistry names: pyfunc_0, pyfunc_1, ...


def _py_func_shape(inputs, attrs):
    return [(unknown_shape(), dtype) for dtype in attrs["Tout"]]


# PyFunc may keep state between calls, so it is never merged or skipped.
register_op("PyFunc", _py_func_shape, stateful=True, variadic_outputs=True)
register_op("PyFuncStateless", _py_func_shape, variadic_outputs=True)
register_not_differentiable("PyFunc", "PyFuncStateless")
# tf.py_function's op. NOTE: no gradient here, where TF 1.15 records the
# function's eager ops on a tape and differentiates them.
register_op("EagerPyFunc", _py_func_shape, stateful=True, variadic_outputs=True)
register_not_differentiable("EagerPyFunc")


def py_func(func, inp, Tout, stateful=True, name=None):
    """An op that calls ``func`` on the NumPy values of ``inp`` each run::

        def clip_outliers(x):
            return np.clip(x, -3, 3).astype(np.float32)
        y = tf.py_func(clip_outliers, [x], tf.float32)
        y.set_shape(x.shape)

    ``Tout``: one dtype (returns a Tensor) or a list (returns a list of
    Tensors, one per value ``func`` returns, each of exactly that dtype).
    An exception in ``func`` is raised by ``Session.run`` as a
    ``tf.errors`` error holding its type, text and traceback.
    """
    if not callable(func):
        raise TypeError(f"tf.py_func: func must be callable, got {func!r}")
    is_list = isinstance(Tout, (list, tuple))
    out_dtypes = tuple(dtypes.as_dtype(dtype) for dtype in (Tout if is_list else [Tout]))
    inputs = [convert_to_tensor(value) for value in _as_input_list(inp)]
    attrs = {"func": func, "token": f"pyfunc_{next(_TOKENS)}", "Tout": out_dtypes}
    op = core.get_default_graph().create_op(
        "PyFunc" if stateful else "PyFuncStateless", inputs, attrs, name=name or "PyFunc")
    keep_on_host(op)
    if not is_list:
        return op.outputs[0]
    return list(op.outputs) if op.outputs else op


def py_function(func, inp, Tout, name=None):
    """TF 2's ``tf.py_function`` in a graph: ``func`` gets each input as an
    array with TF's EagerTensor ``.numpy()`` (towerflow has no eager
    tensors: an ``ndarray`` subclass, see towerflow/backends/script_kernels.py)
    and may return Python numbers or arrays, converted to ``Tout`` as
    ``tf.convert_to_tensor`` would::

        def count_words(line):
            return len(line.numpy().split())
        words = tf.py_function(count_words, [line], tf.int32)
    """
    if not callable(func):
        raise TypeError(f"tf.py_function: func must be callable, got {func!r}")
    is_list = isinstance(Tout, (list, tuple))
    out_dtypes = tuple(dtypes.as_dtype(dtype) for dtype in (Tout if is_list else [Tout]))
    inputs = [convert_to_tensor(value) for value in _as_input_list(inp)]
    attrs = {"func": func, "token": f"pyfunc_{next(_TOKENS)}", "Tout": out_dtypes}
    op = keep_on_host(core.get_default_graph().create_op(
        "EagerPyFunc", inputs, attrs, name=name or "EagerPyFunc"))
    if not is_list:
        return op.outputs[0] if op.outputs else op
    return list(op.outputs) if op.outputs else op


def numpy_function(func, inp, Tout, name=None):
    """``tf.py_func`` with ``stateful=True``: ``tf.numpy_function(f, [x], tf.int64)``."""
    return py_func(func, inp, Tout, stateful=True, name=name)


def _as_input_list(inp):
    if isinstance(inp, (list, tuple)):
        return list(inp)
    raise TypeError(f"tf.py_func: inp must be a list of tensors or values, got {inp!r}")


def keep_on_host(op):
    """Move ``op`` to the CPU if its device scope asks for another type: for
    ops whose kernel exists on the CPU only (Python calls, string data), as
    TensorFlow keeps them in host memory. Returns ``op``.

    Example: ``keep_on_host(op)`` inside ``tf.device('/gpu:1')`` -> '/device:CPU:0'.
    """
    spec = op.device_spec
    if spec.device_type not in (None, "CPU"):
        op.device_spec = spec.replace(device_type="CPU", device_index=0)
    return op


def data_tensor(value):
    """``value`` as a tensor for a host op's data (tf.Print, tf.Assert): a
    string made into a constant here is built on the CPU, where strings live,
    even inside a GPU scope.

    Example: under ``tf.device('/gpu:0')``, ``data_tensor('x =').device`` is
    '/device:CPU:0'.
    """
    if isinstance(value, core.Tensor) or hasattr(value, "_as_graph_element"):
        return convert_to_tensor(value)
    tensor = convert_to_tensor(value)
    if tensor.dtype is dtypes.string:
        keep_on_host(tensor.op)
    return tensor
