"""Dataset transformations: map, filter, batch, shuffle, repeat, prefetch,
take, skip, zip, concatenate (the methods of towerflow/api/dataset.py)::

    dataset = tf.data.Dataset.range(10).map(lambda x: x * 2).batch(4)
    # elements: [0 2 4 6], [8 10 12 14], [16 18]
"""

import collections
import concurrent.futures
import contextvars
import os
import queue
import threading

import numpy as np

from .. import dtypes
from ..graph import core
from ..graph.shapes import TensorShape
from ..ops.constant_ops import placeholder
from ..ops.random_ops import get_seed
from . import data_structure as nest
from .dataset import AUTOTUNE, Dataset, as_component_tensor
from .dataset_args import ScalarArg, captured, positive

# How many elements PrefetchDataset keeps ready when told AUTOTUNE.
AUTOTUNE_PREFETCH = 2


# -- functions traced once ------------------------------------------------------------


class DatasetFunction:
    """A user function traced ONCE into the graph on stand-in placeholders of an
    element; the iterator runs it per element by feeding them (a prebuilt plan
    of the Session: towerflow/backends/dataset_kernels.py)."""

    def __init__(self, function, input_dataset, what):
        graph = core.get_default_graph()
        first_traced_op = len(graph.get_operations())
        name = getattr(function, "__name__", "fn").strip("<>")
        # NOTE: on the CPU, as TF runs dataset functions next to the iterator.
        with graph.name_scope(f"{what}_{name}"), graph.device("/cpu:0"):
            stand_ins = [placeholder(dtype, shape, name=f"element_{index}")
                         for index, (dtype, shape) in enumerate(zip(
                             input_dataset._flat_types(), input_dataset._flat_shapes()))]
            element = nest.as_sparse_tensors(nest.pack_as(input_dataset._output_types,
                                                          stand_ins))
            result = function(*element) if isinstance(element, tuple) and \
                not hasattr(element, "_fields") else function(element)
            result = tuple(result) if isinstance(result, list) else result  # as TF 1.15
            result = nest.as_components(result)
            self.outputs = [as_component_tensor(leaf, index)
                            for index, leaf in enumerate(nest.flatten(result))]
        self.structure = nest.pack_as(result, self.outputs)
        self.inputs = stand_ins
        # Outer tensors that need a feed are captured as TF captures them: their
        # values are taken when the iterator starts and fed to every call.
        self.captured = _outer_fed_tensors(self.outputs, first_traced_op)

    def feeds(self):
        """The tensors each call feeds: an element's stand-ins, then the captures."""
        return self.inputs + self.captured

    def output_types(self):
        return nest.map_structure(lambda tensor: tensor.dtype, self.structure)

    def output_shapes(self):
        return nest.map_structure(lambda tensor: tensor.shape, self.structure)


def _outer_fed_tensors(outputs, first_traced_op):
    """The tensors made before the trace (op id < ``first_traced_op``) that the
    traced ops read and that depend on a placeholder, in the order first read."""
    captured, seen, pending = [], set(), [tensor.op for tensor in outputs]
    needs_feed = _FeedDependence()
    while pending:
        op = pending.pop()
        if op in seen or op._id < first_traced_op:
            continue
        seen.add(op)
        for tensor in op.inputs:
            if tensor.op._id >= first_traced_op:
                pending.append(tensor.op)
            elif needs_feed(tensor.op) and tensor not in captured:
                captured.append(tensor)
        pending.extend(op.control_inputs)
    return captured


class _FeedDependence:
    """Whether an op's value depends on a Placeholder (memoized per op)."""

    def __init__(self):
        self._known = {}

    def __call__(self, op):
        pending = [op]
        while pending:
            current = pending[-1]
            if current in self._known:
                pending.pop()
                continue
            unknown = [t.op for t in current.inputs if t.op not in self._known]
            if unknown and current.type != "Placeholder":
                pending.extend(unknown)
                continue
            pending.pop()
            self._known[current] = current.type == "Placeholder" or any(
                self._known[t.op] for t in current.inputs)
        return self._known[op]


class MapDataset(Dataset):
    """Each element through a traced function; with ``num_parallel_calls``,
    that many elements at once (in threads), still in order."""

    def __init__(self, input_dataset, map_func, num_parallel_calls=None):
        self._function = DatasetFunction(map_func, input_dataset, "Dataset_map")
        super().__init__(self._function.output_types(), self._function.output_shapes(),
                         inputs=[input_dataset], captures=self._function.captured)
        self._input = input_dataset
        self._parallel = _parallel_calls(num_parallel_calls)

    def _elements(self, env):
        run = env.run_function
        if self._parallel <= 1:
            for element in self._input._elements(env):
                yield tuple(run(self._function, element))
            return
        yield from _ordered_parallel_map(lambda element: tuple(run(self._function, element)),
                                         self._input._elements(env), self._parallel)


def _parallel_calls(num_parallel_calls):
    if num_parallel_calls is None:
        return 1
    if num_parallel_calls == AUTOTUNE:
        return os.cpu_count() or 1
    if not isinstance(num_parallel_calls, int) or num_parallel_calls < 1:
        raise ValueError(f"num_parallel_calls must be a positive int or "
                         f"tf.data.experimental.AUTOTUNE, got {num_parallel_calls!r}")
    return num_parallel_calls


def _ordered_parallel_map(function, elements, workers):
    """``map(function, elements)`` with up to ``workers`` calls in flight."""
    pool = concurrent.futures.ThreadPoolExecutor(workers, "tf_data_map")
    pending = collections.deque()
    try:
        for element in elements:
            pending.append(pool.submit(function, element))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class FilterDataset(Dataset):
    """The elements whose traced ``predicate`` gives True."""

    def __init__(self, input_dataset, predicate):
        self._function = DatasetFunction(predicate, input_dataset, "Dataset_filter")
        outputs = self._function.outputs
        if len(outputs) != 1 or outputs[0].dtype is not dtypes.bool or \
                not outputs[0].shape.is_compatible_with(TensorShape([])):
            raise ValueError(f"`predicate` must return a scalar boolean tensor, got "
                             f"{self._function.structure!r}")
        super().__init__(input_dataset._output_types, input_dataset._output_shapes,
                         inputs=[input_dataset], captures=self._function.captured)
        self._input = input_dataset

    def _elements(self, env):
        for element in self._input._elements(env):
            if env.run_function(self._function, element)[0]:
                yield element


# -- regrouping ------------------------------------------------------------------------


class BatchDataset(Dataset):
    """Consecutive elements stacked along a new dimension 0; a SparseTensor
    component batched as TF batches one (its rank one higher)."""

    def __init__(self, input_dataset, batch_size, drop_remainder=False):
        self._batch_size = ScalarArg(batch_size, "batch_size", positive("batch_size"))
        leading = self._batch_size.static if drop_remainder else None
        super().__init__(input_dataset._output_types, nest.map_components(
            input_dataset._output_shapes, lambda shape: _batched_shape(shape, leading),
            _batched_sparse_shapes), inputs=[input_dataset],
            captures=captured(self._batch_size))
        self._input, self._drop_remainder = input_dataset, bool(drop_remainder)
        self._sparse_starts = nest.sparse_starts(input_dataset._output_types)

    def _elements(self, env):
        batch, batch_size = [], self._batch_size.value(env)
        for element in self._input._elements(env):
            batch.append(element)
            if len(batch) == batch_size:
                yield _stacked(batch, env, self._sparse_starts)
                batch = []
        if batch and not self._drop_remainder:
            yield _stacked(batch, env, self._sparse_starts)


def _batched_shape(shape, leading):
    return TensorShape(None) if shape.dims is None else TensorShape([leading, *shape.dims])


def _batched_sparse_shapes(shapes):
    rank = shapes.dense_shape.dims[0] if shapes.dense_shape.dims else None
    wider = None if rank is None else rank + 1
    return nest.SparseComponents(TensorShape([None, wider]), TensorShape([None]),
                                 TensorShape([wider]))


def _stacked(elements, env, sparse_starts=()):
    columns, components, index = list(zip(*elements)), [], 0
    while index < len(columns):
        if index in sparse_starts:
            components += _sparse_batch(columns[index:index + 3], index, env)
            index += 3
            continue
        values = columns[index]
        shapes = [value.shape for value in values]
        for position, shape in enumerate(shapes):
            if shape != shapes[0]:
                env.invalid_argument(
                    f"Cannot batch tensors with different shapes in component {index}. "
                    f"First element had shape {list(shapes[0])} and element {position} "
                    f"had shape {list(shape)}.")
        components.append(np.stack(values))
        index += 1
    return tuple(components)


def _sparse_batch(columns, index, env):
    """TF's batch of SparseTensors: each one's indices behind its position in
    the batch, the dense shape each dimension's largest."""
    indices, values, dense_shapes = columns
    ranks = {len(shape) for shape in dense_shapes}
    if len(ranks) != 1:
        env.invalid_argument(f"Cannot batch SparseTensors of different ranks in component "
                             f"{index}: {sorted(ranks)}")
    rows = [np.concatenate([np.full((len(part), 1), row, np.int64), part], axis=1)
            for row, part in enumerate(indices)]
    dense_shape = np.concatenate([[len(indices)], np.max(np.stack(dense_shapes), axis=0)])
    return [np.concatenate(rows), np.concatenate(values), dense_shape.astype(np.int64)]


class ShuffleDataset(Dataset):
    """Elements drawn at random from a buffer of the next ``buffer_size``; seeded
    as TF1 ops are (graph seed + op seed); each epoch (each pass a ``repeat``
    starts) gets a new order unless ``reshuffle_each_iteration=False``."""

    def __init__(self, input_dataset, buffer_size, seed=None, reshuffle_each_iteration=True):
        self._buffer_size = ScalarArg(buffer_size, "buffer_size", positive("buffer_size"))
        super().__init__(input_dataset._output_types, input_dataset._output_shapes,
                         inputs=[input_dataset], captures=captured(self._buffer_size))
        self._input = input_dataset
        seeds = get_seed(seed)
        self._seed = None if seeds[0] is None else list(seeds)
        self._reshuffle = bool(reshuffle_each_iteration)

    def _epoch_rng(self, env):
        """The generator of this epoch's order: from a stream that restarts with
        the iterator (so the same seeds give the same orders)."""
        state = env.state_for(self, lambda: {"stream": np.random.default_rng(self._seed)})
        if self._reshuffle or "epoch_seed" not in state:
            state["epoch_seed"] = int(state["stream"].integers(2 ** 63))
        return np.random.default_rng(state["epoch_seed"])

    def _elements(self, env):
        buffer_size = self._buffer_size.value(env)
        rng, buffer = self._epoch_rng(env), []
        for element in self._input._elements(env):
            if len(buffer) < buffer_size:
                buffer.append(element)
                continue
            index = int(rng.integers(len(buffer)))
            yield buffer[index]
            buffer[index] = element
        while buffer:
            index = int(rng.integers(len(buffer)))
            buffer[index], buffer[-1] = buffer[-1], buffer[index]
            yield buffer.pop()


class _CountedDataset(Dataset):
    """The input's element structure, cut or repeated by a scalar ``count``
    (an int or a scalar int tensor, read when the iterator starts)."""

    def __init__(self, input_dataset, count):
        self._count = ScalarArg(count, "count")
        super().__init__(input_dataset._output_types, input_dataset._output_shapes,
                         inputs=[input_dataset], captures=captured(self._count))
        self._input = input_dataset


class RepeatDataset(_CountedDataset):
    """The input's elements ``count`` times (None or -1: forever)."""

    def __init__(self, input_dataset, count=None):
        super().__init__(input_dataset, -1 if count is None else count)

    def _elements(self, env):
        epoch, count = 0, self._count.value(env)
        while count < 0 or epoch < count:
            produced = False
            for element in self._input._elements(env):
                produced = True
                yield element
            epoch += 1
            if not produced:        # an empty input repeated forever is empty (TF)
                return


class TakeDataset(_CountedDataset):
    def _elements(self, env):
        count = self._count.value(env)
        if count == 0:
            return
        for taken, element in enumerate(self._input._elements(env), 1):
            yield element
            if taken == count:
                return


class SkipDataset(_CountedDataset):
    def _elements(self, env):
        count = self._count.value(env)
        for index, element in enumerate(self._input._elements(env)):
            if 0 <= count <= index:
                yield element


class ZipDataset(Dataset):
    """Elements of several datasets side by side, until the shortest ends."""

    def __init__(self, datasets):
        members = nest.flatten(datasets)
        if not members or not all(isinstance(member, Dataset) for member in members):
            raise TypeError(f"Dataset.zip takes a (nested) tuple or dict of Datasets, "
                            f"got {datasets!r}")
        super().__init__(nest.map_structure(lambda d: d._output_types, datasets),
                         nest.map_structure(lambda d: d._output_shapes, datasets),
                         inputs=members)
        self._members = members

    def _elements(self, env):
        for parts in zip(*[member._elements(env) for member in self._members]):
            yield tuple(component for part in parts for component in part)


class ConcatenateDataset(Dataset):
    """One dataset's elements, then another's (same structure and dtypes)."""

    def __init__(self, first, second):
        if not nest.same_structure(first._output_types, second._output_types) or \
                first._flat_types() != second._flat_types():
            raise TypeError(f"Datasets to concatenate must have the same types: "
                            f"{first._output_types!r} and {second._output_types!r}")
        shapes = [_common_shape(a, b)
                  for a, b in zip(first._flat_shapes(), second._flat_shapes())]
        super().__init__(first._output_types, nest.pack_as(first._output_types, shapes),
                         inputs=[first, second])
        self._first, self._second = first, second

    def _elements(self, env):
        yield from self._first._elements(env)
        yield from self._second._elements(env)


def _common_shape(first, second):
    if first.dims is None or second.dims is None or len(first.dims) != len(second.dims):
        return TensorShape(None)
    return TensorShape([a if a == b else None for a, b in zip(first.dims, second.dims)])


# -- prefetching -----------------------------------------------------------------------


class PrefetchDataset(Dataset):
    """The input's elements, produced ahead by a background thread into a
    buffer of ``buffer_size``; the thread stops when the iterator is
    re-initialised, its Session closes, or the input ends."""

    def __init__(self, input_dataset, buffer_size):
        if isinstance(buffer_size, int) and buffer_size == AUTOTUNE:
            buffer_size = AUTOTUNE_PREFETCH
        self._buffer_size = ScalarArg(buffer_size, "buffer_size", positive("buffer_size"))
        super().__init__(input_dataset._output_types, input_dataset._output_shapes,
                         inputs=[input_dataset], captures=captured(self._buffer_size))
        self._input = input_dataset

    def _elements(self, env):
        buffer = queue.Queue(self._buffer_size.value(env))
        stop = threading.Event()
        # NOTE: in the iterator's context (a Session.run's: NumPy's floating-point
        # reports off, see towerflow/plan.py), which a new thread does not inherit.
        thread = threading.Thread(target=contextvars.copy_context().run, name="tf_data_prefetch",
                                  daemon=True,
                                  args=(_fill, self._input._elements(env), buffer, stop, env))
        thread.start()
        env.threads.append(thread)
        try:
            while True:
                kind, value = _next_buffered(buffer, env)
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            stop.set()
            thread.join()


def _fill(elements, buffer, stop, env):
    """The prefetch thread: move elements into ``buffer`` until told to stop."""
    try:
        for element in elements:
            if not _put_unless_stopped(buffer, ("element", element), stop, env):
                return
        _put_unless_stopped(buffer, ("end", None), stop, env)
    except BaseException as err:  # noqa: BLE001  (handed to the reading thread)
        _put_unless_stopped(buffer, ("error", err), stop, env)
    finally:
        elements.close()


def _put_unless_stopped(buffer, item, stop, env):
    while not (stop.is_set() or env.stopped.is_set()):
        try:
            buffer.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def _next_buffered(buffer, env):
    while True:
        try:
            return buffer.get(timeout=0.05)
        except queue.Empty:
            env.check_not_stopped()
