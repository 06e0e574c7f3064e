"""TF1's queue-based input pipeline (``tf.train.string_input_producer``,
``batch``, ``shuffle_batch``): each stage is a queue filled by a QueueRunner,
so reading and decoding run in threads ahead of the training step::

    files = tf.train.string_input_producer(names, num_epochs=2)
    key, value = tf.FixedLengthRecordReader(record_bytes=3073).read(files)
    record = tf.decode_raw(value, tf.uint8)
    images, labels = tf.train.shuffle_batch([image, label], batch_size=128,
                                            capacity=2000, min_after_dequeue=1000)

``num_epochs`` counts in a local variable: run
``tf.local_variables_initializer()`` first; after the last epoch the
pipeline drains and the step's dequeue raises OutOfRangeError.
"""

import numpy as np

from .. import dtypes
from ..graph import core
from ..graph.core import GraphKeys
from ..graph.shapes import TensorShape, as_shape
from ..ops import (
    array_ops,
    constant_ops,
    data_flow_ops,
    index_ops,
    random_ops,
    state_ops,
)
from .queue_runner import QueueRunner, add_queue_runner


def limit_epochs(tensor, num_epochs=None, name=None):
    """``tensor``, yielded ``num_epochs`` times, then OutOfRangeError (None:
    for ever). The count is a local variable ('<scope>/epochs')."""
    if num_epochs is None:
        return tensor
    if isinstance(num_epochs, bool) or not isinstance(num_epochs, int) or num_epochs <= 0:
        raise ValueError(f"num_epochs must be > 0 not {num_epochs!r}.")
    graph = core.get_default_graph()
    with graph.name_scope(name or "limit_epochs") as scope:
        epochs = state_ops.Variable(np.int64(0), name="epochs", trainable=False,
                                    collections=[GraphKeys.LOCAL_VARIABLES])
        counter = epochs.count_up_to(num_epochs)
        with graph.control_dependencies([counter]):
            return array_ops.identity(tensor, name=scope[:-1].split("/")[-1])


def input_producer(input_tensor, element_shape=None, num_epochs=None, shuffle=True,
                   seed=None, capacity=32, shared_name=None, summary_name=None, name=None,
                   cancel_op=None):
    """A FIFOQueue fed with the rows of ``input_tensor`` (shuffled each epoch
    if ``shuffle``) by a QueueRunner; returns the queue.

    Example: ``queue = tf.train.input_producer(tf.constant([[1, 2], [3, 4]]))``.
    """
    graph = core.get_default_graph()
    with graph.name_scope(name or "input_producer") as scope:
        input_tensor = constant_ops.convert_to_tensor(input_tensor, name="input_tensor")
        shape = _element_shape(input_tensor, element_shape)
        if shuffle:
            input_tensor = random_ops.random_shuffle(input_tensor, seed=seed)
        input_tensor = limit_epochs(input_tensor, num_epochs)
        queue = data_flow_ops.FIFOQueue(capacity=capacity, dtypes=[input_tensor.dtype],
                                        shapes=[shape], shared_name=shared_name, name=scope)
        enqueue = queue.enqueue_many([input_tensor])
        add_queue_runner(QueueRunner(queue, [enqueue], cancel_op=cancel_op))
        return queue


def _element_shape(input_tensor, element_shape):
    shape = input_tensor.shape
    if shape.ndims == 0:
        raise ValueError(f"input_producer needs a tensor of rank >= 1, got {shape}")
    rows = TensorShape(None if shape.dims is None else shape.dims[1:])
    if element_shape is not None:
        rows = rows.merge_with(as_shape(element_shape))
    if not rows.is_fully_defined():
        raise ValueError("Either `input_tensor` must have a fully defined shape or "
                         "`element_shape` must be specified")
    return rows


def string_input_producer(string_tensor, num_epochs=None, shuffle=True, seed=None,
                          capacity=32, shared_name=None, name=None, cancel_op=None):
    """A queue of file names (each epoch in a new order if ``shuffle``)::

        files = tf.train.string_input_producer(['a.bin', 'b.bin'], num_epochs=1)
    """
    if not isinstance(string_tensor, core.Tensor) and not len(string_tensor):
        raise ValueError("string_input_producer requires a non-null input tensor")
    graph = core.get_default_graph()
    with graph.name_scope(name or "input_producer") as scope:
        string_tensor = constant_ops.convert_to_tensor(string_tensor, dtype=dtypes.string)
        return input_producer(string_tensor, element_shape=[], num_epochs=num_epochs,
                              shuffle=shuffle, seed=seed, capacity=capacity,
                              shared_name=shared_name, name=scope, cancel_op=cancel_op)


def range_input_producer(limit, num_epochs=None, shuffle=True, seed=None, capacity=32,
                         shared_name=None, name=None):
    """A queue of the int32 indices 0 .. limit-1 (``limit`` a Python int);
    returns the dequeued index: ``i = tf.train.range_input_producer(10).dequeue()``
    is what TF returns it as, a queue."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"range_input_producer limit must be a positive Python int, "
                         f"got {limit!r}")
    graph = core.get_default_graph()
    with graph.name_scope(name or "input_producer") as scope:
        indices = constant_ops.constant(np.arange(limit, dtype=np.int32), name="range")
        return input_producer(indices, [], num_epochs, shuffle, seed, capacity,
                              shared_name, name=scope)


def slice_input_producer(tensor_list, num_epochs=None, shuffle=True, seed=None,
                         capacity=32, shared_name=None, name=None):
    """One row of every tensor of ``tensor_list`` at a time (the same row of
    each), the rows in a new order each epoch if ``shuffle``; a list of tensors::

        image, label = tf.train.slice_input_producer([images, labels], num_epochs=2)
    """
    if not isinstance(tensor_list, (list, tuple)) or not tensor_list:
        raise ValueError("Expected at least one tensor in slice_input_producer().")
    graph = core.get_default_graph()
    with graph.name_scope(name or "input_producer") as scope:
        tensors = [constant_ops.convert_to_tensor(tensor) for tensor in tensor_list]
        rows = _common_rows(tensors)
        queue = range_input_producer(rows, num_epochs, shuffle, seed, capacity, shared_name,
                                     name=scope)
        row = queue.dequeue()
        return [index_ops.gather(tensor, row) for tensor in tensors]


def _common_rows(tensors):
    sizes = {None if tensor.shape.ndims in (None, 0) else tensor.shape.dims[0]
             for tensor in tensors}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(f"slice_input_producer needs tensors with the same known size in "
                         f"dimension 0, got shapes {[str(t.shape) for t in tensors]}")
    return sizes.pop()


def batch(tensors, batch_size, num_threads=1, capacity=32, enqueue_many=False,
          shapes=None, dynamic_pad=False, allow_smaller_final_batch=False,
          shared_name=None, name=None):
    """Batches of ``batch_size`` from a FIFOQueue filled by ``num_threads``
    threads; the same structure as ``tensors`` (a list, or a dict), each tensor
    with a leading batch dimension::

        images, labels = tf.train.batch([image, label], batch_size=32)
    """
    if dynamic_pad:
        raise NotImplementedError("tf.train.batch(dynamic_pad=True) is not supported")
    return _batch("batch", tensors, batch_size, num_threads, capacity, enqueue_many, shapes,
                  allow_smaller_final_batch, name,
                  lambda types, shapes_: data_flow_ops.FIFOQueue(
                      capacity, types, shapes_, shared_name=shared_name))


def shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, num_threads=1,
                  seed=None, enqueue_many=False, shapes=None,
                  allow_smaller_final_batch=False, shared_name=None, name=None):
    """Like :func:`batch`, from a RandomShuffleQueue that keeps
    ``min_after_dequeue`` elements to draw from::

        images, labels = tf.train.shuffle_batch([image, label], batch_size=128,
                                                capacity=2000, min_after_dequeue=1000)
    """
    return _batch("shuffle_batch", tensors, batch_size, num_threads, capacity, enqueue_many,
                  shapes, allow_smaller_final_batch, name,
                  lambda types, shapes_: data_flow_ops.RandomShuffleQueue(
                      capacity, min_after_dequeue, types, shapes_, seed=seed,
                      shared_name=shared_name))


def _batch(default_name, tensors, batch_size, num_threads, capacity, enqueue_many, shapes,
           allow_smaller_final_batch, name, make_queue):
    tensor_list = _as_tensor_list(tensors)
    graph = core.get_default_graph()
    with graph.name_scope(name or default_name) as scope:
        shapes = _batch_shapes(tensor_list, shapes, enqueue_many)
        queue = make_queue([tensor.dtype for tensor in tensor_list], shapes)
        enqueue = queue.enqueue_many if enqueue_many else queue.enqueue
        # As TF: the same enqueue op, run by ``num_threads`` threads.
        add_queue_runner(QueueRunner(queue, [enqueue(tensor_list)] * int(num_threads)))
        dequeue = queue.dequeue_up_to if allow_smaller_final_batch else queue.dequeue_many
        dequeued = dequeue(batch_size, name=scope)
    return _as_original_type(tensors, dequeued)


def _as_tensor_list(tensors):
    if isinstance(tensors, dict):
        return [constant_ops.convert_to_tensor(tensors[key]) for key in sorted(tensors)]
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise TypeError(f"Expected a non-empty list or dict of tensors to batch, got "
                        f"{tensors!r}")
    return [constant_ops.convert_to_tensor(tensor) for tensor in tensors]


def _batch_shapes(tensor_list, shapes, enqueue_many):
    if shapes is not None:
        return [as_shape(shape) for shape in shapes]
    result = []
    for tensor in tensor_list:
        shape = tensor.shape
        if enqueue_many:
            shape = TensorShape(None if shape.dims is None else shape.dims[1:])
        if not shape.is_fully_defined():
            raise ValueError(f"All shapes must be fully defined: tensor '{tensor.name}' "
                             f"has shape {tensor.shape}; give shapes= or set_shape first")
        result.append(shape)
    return result


def _as_original_type(tensors, dequeued):
    """As TF: a dict comes back as a dict; a list of one tensor as that tensor."""
    if isinstance(tensors, dict):
        values = [dequeued] if len(tensors) == 1 else dequeued
        return {key: value for key, value in zip(sorted(tensors), values)}
    return dequeued
