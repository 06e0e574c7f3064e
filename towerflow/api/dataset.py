"""``tf.data.Dataset``: TF1's input pipelines, built in the graph and read
through an iterator's ``get_next()``::

    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    dataset = dataset.shuffle(1000, seed=1).repeat().batch(32)
    images_batch, labels_batch = dataset.make_one_shot_iterator().get_next()

A Dataset is a description: each node knows its element structure (dtypes
and static shapes), the graph tensors it captures (made into the inputs of
the iterator's initializer op), and how to produce its elements once the
iterator runs (``_elements(env)``: a generator of flat tuples of host arrays;
``env`` is the iterator's run-time state, towerflow/backends/dataset_kernels.py).
Transformations live in towerflow/api/dataset_ops.py, imported where a
method needs them (they import this module).

NOTE: elements are made by the dataset objects themselves, host-side Python
generators over NumPy arrays (TF too runs datasets on the host CPU); the
engine sees three ops (IteratorV2, MakeIterator, IteratorGetNext) and the
plans of the traced dataset functions.
"""

from .. import dtypes
from ..graph import core
from ..graph.shapes import TensorShape, as_shape
from ..ops.constant_ops import convert_to_tensor
from . import data_structure as nest

AUTOTUNE = -1


class Dataset:
    """A sequence of elements, each a nested structure of tensors."""

    def __init__(self, output_types, output_shapes, inputs=(), captures=()):
        self._output_types = output_types
        self._output_shapes = output_shapes
        self._input_datasets = list(inputs)
        self._captured = list(captures)

    output_types = property(lambda self: nest.public_types(self._output_types),
                            doc="The nested tf.DType of each component of an element.")
    output_shapes = property(lambda self: nest.public_shapes(self._output_shapes),
                             doc="The nested static TensorShape of each component.")
    output_classes = property(lambda self: nest.public_classes(self._output_types),
                              doc="The nested class (tf.Tensor, tf.SparseTensor) of each "
                                  "component.")

    def _flat_types(self):
        return nest.flatten(self._output_types)

    def _flat_shapes(self):
        return nest.flatten(self._output_shapes)

    def _all_captures(self):
        """Every graph tensor this pipeline reads, once each, in a fixed order."""
        seen, ordered = set(), []
        for dataset in self._walk():
            for tensor in dataset._captured:
                if tensor not in seen:
                    seen.add(tensor)
                    ordered.append(tensor)
        return ordered

    def _walk(self):
        yield self
        for dataset in self._input_datasets:
            yield from dataset._walk()

    def _elements(self, env):
        raise NotImplementedError

    # -- sources -------------------------------------------------------------------

    @staticmethod
    def from_tensor_slices(tensors):
        """One element per slice along dimension 0 of every component::

            dataset = tf.data.Dataset.from_tensor_slices(({'x': [[1.], [2.]]}, [0, 1]))
            # elements: ({'x': [1.]}, 0), ({'x': [2.]}, 1)
        """
        return TensorSliceDataset(tensors)

    @staticmethod
    def from_tensors(tensors):
        """A dataset of one element, ``tensors`` itself:
        ``tf.data.Dataset.from_tensors([1, 2, 3])`` gives one int32 [3] element."""
        return TensorDataset(tensors)

    @staticmethod
    def from_generator(generator, output_types, output_shapes=None, args=None):
        """Elements yielded by ``generator(*args)`` (called anew each time the
        iterator starts)::

            def gen():
                yield 1, [1.0]
            dataset = tf.data.Dataset.from_generator(
                gen, (tf.int64, tf.float32), (tf.TensorShape([]), tf.TensorShape([1])))
        """
        from .dataset_sources import GeneratorDataset
        return GeneratorDataset(generator, output_types, output_shapes, args)

    @staticmethod
    def range(*args):
        """int64 elements as Python's range: ``Dataset.range(2, 8, 2)`` gives 2, 4, 6."""
        from .dataset_sources import RangeDataset
        return RangeDataset(*args)

    @staticmethod
    def zip(datasets):
        """Elements of several datasets side by side, as a (nested) tuple or
        dict of their elements: ``Dataset.zip((numbers, letters))``."""
        from .dataset_ops import ZipDataset
        return ZipDataset(datasets)

    # -- transformations (towerflow/api/dataset_ops.py) ------------------------------

    def map(self, map_func, num_parallel_calls=None):
        """Elements passed through ``map_func`` (traced once into the graph)::

            dataset.map(lambda image, label: (image / 255.0, label))
        """
        from .dataset_ops import MapDataset
        return MapDataset(self, map_func, num_parallel_calls)

    def filter(self, predicate):
        """Only the elements for which ``predicate`` (a scalar tf.bool) is True:
        ``Dataset.range(10).filter(lambda x: x % 2 == 0)``."""
        from .dataset_ops import FilterDataset
        return FilterDataset(self, predicate)

    def batch(self, batch_size, drop_remainder=False):
        """Consecutive elements stacked into batches: ``dataset.batch(32)``; the
        last batch is smaller unless ``drop_remainder``."""
        from .dataset_ops import BatchDataset
        return BatchDataset(self, batch_size, drop_remainder)

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True):
        """Elements in random order, drawn from a buffer of ``buffer_size``:
        ``dataset.shuffle(10000, seed=1)``."""
        from .dataset_ops import ShuffleDataset
        return ShuffleDataset(self, buffer_size, seed, reshuffle_each_iteration)

    def repeat(self, count=None):
        """The elements ``count`` times over (None or -1: forever): ``dataset.repeat(2)``."""
        from .dataset_ops import RepeatDataset
        return RepeatDataset(self, count)

    def prefetch(self, buffer_size):
        """Elements prepared ahead by a background thread: ``dataset.prefetch(1)``."""
        from .dataset_ops import PrefetchDataset
        return PrefetchDataset(self, buffer_size)

    def take(self, count):
        """At most the first ``count`` elements (-1: all): ``dataset.take(5)``."""
        from .dataset_ops import TakeDataset
        return TakeDataset(self, count)

    def skip(self, count):
        """All but the first ``count`` elements (-1: none left): ``dataset.skip(5)``."""
        from .dataset_ops import SkipDataset
        return SkipDataset(self, count)

    def concatenate(self, dataset):
        """This dataset's elements, then ``dataset``'s: ``a.concatenate(b)``."""
        from .dataset_ops import ConcatenateDataset
        return ConcatenateDataset(self, dataset)

    # -- iterators (towerflow/api/dataset_iterator.py) -------------------------------

    def make_one_shot_iterator(self):
        """An iterator that starts by itself; its dataset may capture only
        constants: ``next_element = dataset.make_one_shot_iterator().get_next()``."""
        from .dataset_iterator import make_one_shot_iterator
        return make_one_shot_iterator(self)

    def make_initializable_iterator(self, shared_name=None):
        """An iterator started (and restarted) by running its ``initializer``::

            iterator = dataset.make_initializable_iterator()
            sess.run(iterator.initializer, feed_dict={features: data})
        """
        from .dataset_iterator import make_initializable_iterator
        return make_initializable_iterator(self, shared_name)


def as_component_tensor(value, index):
    """A component of an element as a graph tensor (lists are one component;
    a list holding tensors is stacked, as TF packs it)."""
    if isinstance(value, list) and any(isinstance(item, core.Tensor) for item in value):
        from ..ops.array_ops import stack
        return stack([as_component_tensor(item, index) for item in value])
    try:
        return convert_to_tensor(value, name=f"component_{index}")
    except (TypeError, ValueError) as err:
        raise TypeError(f"Component {index} of a dataset element could not be made a "
                        f"tensor: {value!r} ({err})") from None


def _component_tensors(tensors):
    """(structure, flat list of tensors) of a nested element."""
    leaves = nest.flatten(tensors)
    flat = [as_component_tensor(leaf, index) for index, leaf in enumerate(leaves)]
    return nest.pack_as(tensors, flat), flat


class TensorDataset(Dataset):
    """``from_tensors``: one element, the captured tensors' values."""

    def __init__(self, tensors):
        structure, flat = _component_tensors(tensors)
        super().__init__(nest.map_structure(lambda t: t.dtype, structure),
                         nest.map_structure(lambda t: t.shape, structure), captures=flat)
        self._tensors = flat

    def _elements(self, env):
        yield tuple(env.value(tensor) for tensor in self._tensors)


class TensorSliceDataset(Dataset):
    """``from_tensor_slices``: the rows of the captured tensors."""

    def __init__(self, tensors):
        structure, flat = _component_tensors(tensors)
        _check_sliceable(flat)
        super().__init__(nest.map_structure(lambda t: t.dtype, structure),
                         nest.map_structure(lambda t: _row_shape(t.shape), structure),
                         captures=flat)
        self._tensors = flat

    def _elements(self, env):
        values = [env.value(tensor) for tensor in self._tensors]
        rows = {len(value) for value in values}
        if len(rows) != 1:
            env.invalid_argument(
                f"from_tensor_slices: every component needs the same size in dimension 0, "
                f"got {[len(value) for value in values]}")
        for row in range(rows.pop()):
            # NOTE: value[row] of an object (string) array is not an array: slice.
            yield tuple(value[row:row + 1].reshape(value.shape[1:]) for value in values)


def _row_shape(shape):
    return TensorShape(None) if shape.dims is None else TensorShape(shape.dims[1:])


def _check_sliceable(flat):
    if not flat:
        raise ValueError("from_tensor_slices needs at least one component")
    sizes = set()
    for tensor in flat:
        if tensor.shape.ndims == 0:
            raise ValueError(f"from_tensor_slices: component {tensor.name} is a scalar; "
                             "every component needs rank >= 1 (slices along dimension 0)")
        if tensor.shape.dims is not None and tensor.shape.dims[0] is not None:
            sizes.add(tensor.shape.dims[0])
    if len(sizes) > 1:
        raise ValueError(f"from_tensor_slices: every component needs the same size in "
                         f"dimension 0, got sizes {sorted(sizes)}")


def normalize_types_and_shapes(output_types, output_shapes):
    """(nested DTypes, nested TensorShapes) of ``from_generator`` / ``from_structure``."""
    types = nest.map_structure(dtypes.as_dtype, output_types)
    if output_shapes is None:
        shapes = nest.map_structure(lambda _: TensorShape(None), types)
    else:
        shapes = _shapes_up_to(types, output_shapes)
    return types, shapes


def _shapes_up_to(types, shapes):
    """``shapes`` read against the structure of ``types``: where ``types`` has
    a leaf, a list is one shape (``[None, 3]``), not a structure."""
    if not nest.is_structure(types):
        return as_shape(shapes)
    if isinstance(types, dict):
        if not isinstance(shapes, dict) or sorted(shapes) != sorted(types):
            raise ValueError(f"output_shapes {shapes!r} do not match the structure of "
                             f"output_types {types!r}")
        return {key: _shapes_up_to(types[key], shapes[key]) for key in types}
    if not isinstance(shapes, (tuple, list)) or len(shapes) != len(types):
        raise ValueError(f"output_shapes {shapes!r} do not match the structure of "
                         f"output_types {types!r}")
    values = [_shapes_up_to(t, s) for t, s in zip(types, shapes)]
    return type(types)(*values) if hasattr(types, "_fields") else tuple(values)
