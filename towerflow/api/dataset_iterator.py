"""``tf.data.Iterator``: a dataset read by the graph. ``get_next()`` is a
stateful op on the CPU whose outputs are the next element; the iterator's
position lives in each Session (a Session resource, see
towerflow/backends/dataset_kernels.py), and at the end ``get_next()`` raises
``tf.errors.OutOfRangeError`` ("End of sequence")::

    features = tf.placeholder(tf.float32, [None, 2])
    iterator = tf.data.Dataset.from_tensor_slices(features).batch(2) \\
        .make_initializable_iterator()
    batch = iterator.get_next()
    with tf.Session() as sess:
        sess.run(iterator.initializer, feed_dict={features: data})
        sess.run(batch)
"""

import contextlib

from ..graph import core
from ..graph.registry import register_not_differentiable, register_op
from . import data_structure as nest
from .dataset import normalize_types_and_shapes


def _no_outputs(inputs, attrs):
    return []


def _element_specs(inputs, attrs):
    iterator_op = attrs["iterator"]
    return list(zip(iterator_op.attrs["output_shapes"], iterator_op.attrs["output_types"]))


# IteratorV2: the iterator itself (its state is the Session's); MakeIterator:
# (re)start it on a dataset, its inputs the tensors the dataset captures.
register_op("IteratorV2", _no_outputs, stateful=True)
register_op("MakeIterator", _no_outputs, stateful=True)
# NOTE: an element may be a view of a captured constant: fetches copy it.
register_op("IteratorGetNext", _element_specs, stateful=True, variadic_outputs=True,
            aliases_state=True)
register_not_differentiable("IteratorV2", "MakeIterator", "IteratorGetNext")


class Iterator:
    """The state of iterating over a dataset; ``get_next()`` gives its elements."""

    def __init__(self, iterator_op, initializer, output_types, output_shapes):
        self._iterator_op = iterator_op
        self._initializer = initializer
        self._output_types, self._output_shapes = output_types, output_shapes

    output_types = property(lambda self: nest.public_types(self._output_types))
    output_shapes = property(lambda self: nest.public_shapes(self._output_shapes))
    output_classes = property(lambda self: nest.public_classes(self._output_types))

    @staticmethod
    def from_structure(output_types, output_shapes=None, shared_name=None,
                       output_classes=None):
        """An iterator not bound to a dataset: start it on one with the op
        ``make_initializer(dataset)``::

            iterator = tf.data.Iterator.from_structure(tf.int64, tf.TensorShape([]))
            init_evens = iterator.make_initializer(tf.data.Dataset.range(0, 10, 2))
        """
        types, shapes = normalize_types_and_shapes(output_types, output_shapes)
        return Iterator(_iterator_op(types, shapes, shared_name), None, types, shapes)

    @property
    def initializer(self):
        """The op that (re)starts this iterator on its dataset:
        ``sess.run(iterator.initializer, feed_dict={features: data})``."""
        if self._initializer is None:
            raise ValueError("Iterator does not have an initializer.")
        return self._initializer

    def make_initializer(self, dataset, name=None):
        """An op that (re)starts this iterator on ``dataset``, whose element
        structure, types and shapes must fit the iterator's::

            sess.run(iterator.make_initializer(training_data))
        """
        self._check_fits(dataset)
        graph = self._iterator_op.graph
        captures = dataset._all_captures()
        with graph.colocate_with(self._iterator_op):
            return graph.create_op("MakeIterator", captures,
                                   {"iterator": self._iterator_op, "dataset": dataset},
                                   name=name or "make_initializer")

    def _check_fits(self, dataset):
        if not nest.same_structure(self._output_types, dataset._output_types) or \
                nest.flatten(self._output_types) != dataset._flat_types():
            raise TypeError(f"Expected output types {self._output_types!r} but got dataset "
                            f"with output types {dataset.output_types!r}.")
        for mine, theirs in zip(nest.flatten(self._output_shapes), dataset._flat_shapes()):
            if not mine.is_compatible_with(theirs):
                raise TypeError(f"Expected output shapes compatible with "
                                f"{self._output_shapes!r} but got dataset with output "
                                f"shapes {dataset.output_shapes!r}.")

    def get_next(self, name=None):
        """The next element, as tensors nested as the dataset's elements; running
        them after the last element raises tf.errors.OutOfRangeError::

            images, labels = iterator.get_next()     # one op: both from one element
        """
        graph = self._iterator_op.graph
        with graph.colocate_with(self._iterator_op):
            op = graph.create_op("IteratorGetNext", [], {"iterator": self._iterator_op},
                                 name=name or "IteratorGetNext")
        return nest.as_sparse_tensors(nest.pack_as(self._output_types, op.outputs))


def _iterator_op(types, shapes, shared_name=None, one_shot_dataset=None):
    graph = core.get_default_graph()
    attrs = {"output_types": nest.flatten(types), "output_shapes": nest.flatten(shapes),
             "shared_name": shared_name or "", "one_shot_dataset": one_shot_dataset}
    # NOTE: TF puts an iterator made outside any device scope on the CPU; its
    # ops have CPU kernels only, so the placer keeps them there in any case.
    scope = contextlib.nullcontext() if graph._device_stack else graph.device("/cpu:0")
    with scope:
        return graph.create_op("IteratorV2", [], attrs,
                               name="OneShotIterator" if one_shot_dataset else "Iterator")


def make_initializable_iterator(dataset, shared_name=None):
    """``tf.data.make_initializable_iterator(dataset)``: an iterator started
    by running its ``initializer`` (again to restart)::

        iterator = tf.data.make_initializable_iterator(dataset)
        sess.run(iterator.initializer)
    """
    iterator_op = _iterator_op(dataset._output_types, dataset._output_shapes, shared_name)
    iterator = Iterator(iterator_op, None, dataset._output_types, dataset._output_shapes)
    iterator._initializer = iterator.make_initializer(dataset)
    return iterator


def make_one_shot_iterator(dataset):
    """``tf.data.make_one_shot_iterator(dataset)``: an iterator that starts on
    its first ``get_next()`` in each Session; the dataset may capture only
    constants (use make_initializable_iterator to feed placeholders)::

        element = tf.data.make_one_shot_iterator(dataset).get_next()
    """
    for tensor in dataset._all_captures():
        refused = _not_capturable_by_value(tensor.op)
        if refused is not None:
            what = "a placeholder" if refused.type == "Placeholder" else "a stateful node"
            raise ValueError(
                "Failed to create a one-shot iterator for a dataset. "
                "`Dataset.make_one_shot_iterator()` does not support datasets that capture "
                "stateful objects, such as a `Variable` or `LookupTable`. In these cases, "
                "use `Dataset.make_initializable_iterator()`. (Original error: Cannot "
                f"capture {what} (name:{refused.name}, type:{refused.type}) by value.)")
    iterator_op = _iterator_op(dataset._output_types, dataset._output_shapes,
                               one_shot_dataset=dataset)
    return Iterator(iterator_op, None, dataset._output_types, dataset._output_shapes)


def _not_capturable_by_value(op):
    """The first placeholder or stateful op ``op`` depends on (None if it is a
    stateless computation from constants, which TF captures by value)."""
    pending, seen = [op], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        if current.type == "Placeholder" or current.op_def.stateful:
            return current
        pending.extend(tensor.op for tensor in current.inputs)
        pending.extend(current.control_inputs)
    return None
