"""Dataset sources that hold no tensors: ``Dataset.range`` and
``Dataset.from_generator`` (see towerflow/api/dataset.py)::

    tf.data.Dataset.range(5)                         # 0, 1, 2, 3, 4 (int64)
    tf.data.Dataset.from_generator(lambda: iter([[1., 2.]]), tf.float32, [2])
"""

import numpy as np

from .. import dtypes, float_errors
from ..backends import script_kernels
from ..graph.shapes import TensorShape
from . import data_structure as nest
from .dataset import Dataset, as_component_tensor, normalize_types_and_shapes
from .dataset_args import ScalarArg, captured


class RangeDataset(Dataset):
    """``Dataset.range(stop)``, ``range(start, stop)``, ``range(start, stop, step)``."""

    def __init__(self, *args):
        if not 1 <= len(args) <= 3:
            raise ValueError(f"Dataset.range takes 1 to 3 ints (stop; start, stop; "
                             f"start, stop, step), got {args!r}")
        names = ("stop",) if len(args) == 1 else ("start", "stop", "step")[:len(args)]
        self._bounds = [ScalarArg(arg, name, _non_zero if name == "step" else None)
                        for arg, name in zip(args, names)]
        super().__init__(dtypes.int64, TensorShape([]), captures=captured(*self._bounds))

    def _elements(self, env):
        for number in range(*[bound.value(env) for bound in self._bounds]):
            yield (np.array(number, np.int64),)


def _non_zero(step):
    return None if step != 0 else "step must be a non-zero integer."


class GeneratorDataset(Dataset):
    """Elements of ``generator(*args)``, checked against the declared types and
    shapes as each arrives."""

    def __init__(self, generator, output_types, output_shapes=None, args=None):
        if not callable(generator):
            raise TypeError(f"from_generator: `generator` must be callable, got "
                            f"{generator!r}")
        types, shapes = normalize_types_and_shapes(output_types, output_shapes)
        arg_tensors = [as_component_tensor(arg, index)
                       for index, arg in enumerate(args or ())]
        super().__init__(types, shapes, captures=arg_tensors)
        self._generator, self._arg_tensors = generator, arg_tensors

    def _elements(self, env):
        arg_values = [env.value(tensor) for tensor in self._arg_tensors]
        flat_types, flat_shapes = self._flat_types(), self._flat_shapes()
        with float_errors.users_python():    # the user's code: NumPy warns as in TF
            elements = self._generator(*arg_values)
        for element in _reported_as_tf(elements, env):
            leaves = self._leaves(element, env)
            yield tuple(_checked_component(leaf, dtype, shape, env)
                        for leaf, dtype, shape in zip(leaves, flat_types, flat_shapes))

    def _leaves(self, element, env):
        """The components of a yielded element, read against output_types (where
        it has a tuple, the generator may yield a tuple or a list)."""
        try:
            return _flatten_up_to(self._output_types, element)
        except (TypeError, KeyError, ValueError):
            env.invalid_argument(
                f"`generator` yielded an element that did not match the expected "
                f"structure. The expected structure was {self._output_types}, but the "
                f"yielded element was {element!r}.")


def _reported_as_tf(elements, env):
    """``elements``, an exception from the generator raised as TF 1.15's
    from_generator (a py_func) reports it: ValueError an InvalidArgumentError,
    anything else an UnknownError (see backends/script_kernels.py)."""
    elements = iter(elements)
    while True:
        try:
            with float_errors.users_python():    # the user's code: NumPy warns as in TF
                element = next(elements)
        except StopIteration:
            return
        except Exception as err:    # the user's generator failed: TF's error code
            raise script_kernels.error_from_python(err, env.op) from err
        yield element


def _flatten_up_to(types, element):
    if not nest.is_structure(types):
        return [element]
    if isinstance(types, dict):
        if sorted(types) != sorted(element):
            raise KeyError(sorted(element))
        return [leaf for key in sorted(types) for leaf in _flatten_up_to(types[key],
                                                                          element[key])]
    if not isinstance(element, (tuple, list)) or len(element) != len(types):
        raise ValueError(element)
    return [leaf for sub_types, item in zip(types, element)
            for leaf in _flatten_up_to(sub_types, item)]


def _checked_component(value, dtype, shape, env):
    try:
        array = dtypes.to_string_array(value) if dtype is dtypes.string else \
            np.asarray(value, dtype=dtype.as_numpy_dtype)
    except (TypeError, ValueError):
        env.invalid_argument(
            f"TypeError: `generator` yielded an element that could not be converted to "
            f"the expected type. The expected type was {dtype.name}, but the yielded "
            f"element was {value!r}.")
    if not shape.is_compatible_with(TensorShape(array.shape)):
        env.invalid_argument(
            f"`generator` yielded an element of shape {array.shape} where an element of "
            f"shape {shape} was expected.")
    return array
