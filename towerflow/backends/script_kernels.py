"""The kernel of ``tf.py_func`` / ``tf.numpy_function``: a Python function
called in this process on NumPy arrays, each time the op runs. CPU only, as
TensorFlow's PyFunc: the plan copies GPU inputs to the host and the outputs
back where their consumers run.

As in TensorFlow 1.15, an exception raised by the function becomes the
session's error, with the Python error's type, text and traceback:
ValueError and TypeError an InvalidArgumentError, StopIteration an
OutOfRangeError, MemoryError a ResourceExhaustedError, NotImplementedError
an UnimplementedError, anything else an UnknownError. The values returned
are not cast: each must have its Tout dtype (a Python float is float64).
"""

import traceback

import numpy as np

from .. import dtypes, errors, float_errors
from ..ops.constant_ops import to_numpy

# TensorFlow's names for dtypes in its messages (DataTypeString).
_TF_TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "half",
                  "string": "string"}
_ERROR_FOR_EXCEPTION = ((ValueError, errors.InvalidArgumentError),
                        (TypeError, errors.InvalidArgumentError),
                        (StopIteration, errors.OutOfRangeError),
                        (MemoryError, errors.ResourceExhaustedError),
                        (NotImplementedError, errors.UnimplementedError))


def build_script_kernels():
    return {"PyFunc": _py_func_kernel, "PyFuncStateless": _py_func_kernel,
            "EagerPyFunc": _eager_py_func_kernel}


class EagerValue(np.ndarray):
    """What ``tf.py_function``'s function gets for each input: the value as a
    read-only NumPy array that also has TF's EagerTensor ``.numpy()``, so TF
    code calling ``x.numpy()`` works (TF's other EagerTensor methods do not
    exist here)."""

    def numpy(self):
        """The value as a plain ndarray (a bytes object for a string scalar)."""
        array = self.view(np.ndarray)
        return array.item() if array.dtype.kind == "O" and array.ndim == 0 else array


def _eager_py_func_kernel(ctx):
    func, token, op = ctx.attrs["func"], ctx.attrs["token"], ctx.op
    out_dtypes = ctx.attrs["Tout"]

    def call(*inputs):
        try:
            with float_errors.users_python():    # NumPy warns as it would in TF
                result = func(*[_read_only(value).view(EagerValue) for value in inputs])
            values = _returned_values(result, len(out_dtypes), token, op)
            return [to_numpy(value, dtype) for value, dtype in zip(values, out_dtypes)]
        except errors.OpError:
            raise
        except Exception as err:    # the function's own error, as TensorFlow reports it
            raise error_from_python(err, op) from err
    return call


def _returned_values(result, expected, token, op):
    """``result`` as a list of ``expected`` values (a tuple or list holds
    one per output; None is no output), else TF's InvalidArgumentError."""
    if isinstance(result, EagerValue):
        result = result.view(np.ndarray)
    values = list(result) if isinstance(result, (tuple, list)) else \
        [] if result is None else [result]
    if len(values) != expected:
        raise errors.InvalidArgumentError(
            None, op, f"{token} returns {len(values)} values, but expects to see "
            f"{expected} values.")
    return [value.view(np.ndarray) if isinstance(value, EagerValue) else value
            for value in values]


def _py_func_kernel(ctx):
    func, token = ctx.attrs["func"], ctx.attrs["token"]
    expected = [dtype.name for dtype in ctx.attrs["Tout"]]

    def call(*inputs):
        try:
            with float_errors.users_python():    # NumPy warns as it would in TF
                result = func(*[_read_only(value) for value in inputs])
        except Exception as err:    # the function's own error, as TensorFlow reports it
            raise error_from_python(err, ctx.op) from err
        return _checked_outputs(_as_arrays(result), expected, token, ctx.op)
    return call


def _read_only(value):
    # NOTE: a constant or variable buffer reaches the function as is: a view
    # it cannot write keeps the graph's state safe from the function.
    view = np.asarray(value).view()
    view.flags.writeable = False
    return view


def error_from_python(err, op):
    error_type = next((tf_error for python_error, tf_error in _ERROR_FOR_EXCEPTION
                       if isinstance(err, python_error)), errors.UnknownError)
    lines = traceback.format_exception(type(err), err, err.__traceback__)
    message = f"{type(err).__name__}: {err}\n" + "".join(line + "\n" for line in lines)
    return error_type(None, op, message)


def _as_arrays(result):
    """The function's values as a list of arrays (TensorFlow's FuncRegistry):
    a tuple or list is one value per output, None is no output."""
    if isinstance(result, bytes):
        result = [result]
    if isinstance(result, (tuple, list)):
        return [_as_array(value) for value in result]
    return [] if result is None else [_as_array(result)]


def _as_array(value):
    array = np.asarray(value)
    if array.dtype.kind in "SU" or array.dtype.kind == "O" and dtypes.is_string_value(array):
        return dtypes.to_string_array(array)
    return array


def _checked_outputs(arrays, expected, token, op):
    if len(arrays) != len(expected):
        raise errors.InvalidArgumentError(
            None, op, f"{token} returns {len(arrays)} values, but expects to see "
            f"{len(expected)} values.")
    for index, (array, want) in enumerate(zip(arrays, expected)):
        got = _dtype_name(array)
        if got != want:
            raise errors.InvalidArgumentError(
                None, op, f"{index}-th value returned by {token} is {_tf_name(got)}, "
                f"but expects {_tf_name(want)}")
    return arrays


def _dtype_name(array):
    if array.dtype.kind == "O":
        return "string"
    try:
        return dtypes.as_dtype(array.dtype).name
    except TypeError:
        return array.dtype.name


def _tf_name(name):
    return _TF_TYPE_NAMES.get(name, name)
