"""Host kernels of the input pipeline: queue ops, file readers, decode_raw,
random_shuffle (and, from their own modules, the other readers, Example and
CSV parsing, image codecs). They move NumPy arrays (strings are object arrays of bytes),
so only the CPU table has them, and the placer keeps their ops on a CPU, as
TensorFlow does.

Queues and readers are Session resources (``ctx.resource``), found by the op
that made them, so every plan of a Session (the training step, each queue
runner's enqueue) shares them::

    KERNELS["QueueDequeueV2"](ctx)()      # -> (component arrays of one element)
"""

import threading

import numpy as np

from .. import errors
from . import image_codec_kernels, parsing_kernels, queues, reader_kernels


def queue_of(ctx, queue_op):
    """The Session's queue made by ``queue_op`` (created on first use)."""
    attrs = queue_op.attrs

    def make():
        return queues.Queue(attrs["kind"], queues.resource_name(queue_op), attrs["capacity"],
                            attrs["shapes"], attrs.get("min_after_dequeue", 0),
                            attrs.get("seed"))
    return ctx.resource(("queue", queue_op), make)


def build_queue_kernels():
    """The host kernel table of this module."""
    table = {name: _queue_handle for name in ("FIFOQueueV2", "RandomShuffleQueueV2")}
    table.update({
        "QueueEnqueueV2": _enqueue(batched=False), "QueueEnqueueManyV2": _enqueue(batched=True),
        "QueueDequeueV2": _dequeue, "QueueDequeueManyV2": _dequeue,
        "QueueDequeueUpToV2": _dequeue, "QueueCloseV2": _close, "QueueSizeV2": _size,
        "QueueIsClosedV2": _is_closed, "FixedLengthRecordReaderV2": _reader_handle,
        "ReaderReadV2": _reader_read, "DecodeRaw": _decode_raw,
        "RandomShuffle": _random_shuffle})
    table.update(reader_kernels.build_reader_kernels(_reader_handle))
    table.update(parsing_kernels.build_parsing_kernels())
    table.update(image_codec_kernels.build_image_codec_kernels())
    return table


# -- queues ------------------------------------------------------------------------


def _queue_handle(ctx):
    queue_of(ctx, ctx.op)       # running the queue op only makes sure it exists
    return lambda: None


def _enqueue(batched):
    def make(ctx):
        queue, op = queue_of(ctx, ctx.attrs["queue"]), ctx.op
        dtypes = [np.dtype(dtype.as_numpy_dtype) for dtype in ctx.attrs["queue"].attrs["dtypes"]]

        def enqueue(*components):
            # NOTE: copies: a component may be a variable's buffer or a folded constant.
            components = [np.array(value, dtype=dtype, copy=True)
                          for value, dtype in zip(components, dtypes)]
            elements = _slices(components, op) if batched else [tuple(components)]
            for element in elements:
                _check_element_shapes(queue, element, op)
            queue.enqueue_many(elements, op)
        return enqueue
    return make


def _slices(components, op):
    sizes = {len(value) for value in components}
    if len(sizes) != 1:
        raise errors.InvalidArgumentError(
            None, op, f"enqueue_many: every component needs the same size in dimension "
            f"0, got {[len(value) for value in components]}")
    # NOTE: value[i] of an object array is the bytes object itself: slice instead.
    return [tuple(value[row:row + 1].reshape(value.shape[1:]) for value in components)
            for row in range(sizes.pop())]


def _check_element_shapes(queue, element, op):
    if queue.shapes is None:
        return
    for index, (value, shape) in enumerate(zip(element, queue.shapes)):
        if list(value.shape) != shape.as_list():
            raise errors.InvalidArgumentError(
                None, op, f"Shape mismatch in tuple component {index}. Expected "
                f"{shape.as_list()}, got {list(value.shape)}")


def _dequeue(ctx):
    queue, op = queue_of(ctx, ctx.attrs["queue"]), ctx.op
    count = ctx.attrs.get("requested")
    if count is None:           # QueueDequeueV2: one element, not stacked
        return lambda: queue.dequeue_many(1, op)[0]
    up_to = op.type == "QueueDequeueUpToV2"

    def dequeue_many():
        elements = queue.dequeue_many(count, op, up_to=up_to)
        return tuple(np.stack(component) for component in zip(*elements))
    return dequeue_many


def _close(ctx):
    queue, cancel = queue_of(ctx, ctx.attrs["queue"]), ctx.attrs["cancel_pending_enqueues"]
    return lambda: queue.close(cancel)


def _size(ctx):
    queue = queue_of(ctx, ctx.attrs["queue"])
    return lambda: np.array(queue.size(), np.int32)


def _is_closed(ctx):
    queue = queue_of(ctx, ctx.attrs["queue"])
    return lambda: np.array(queue.is_closed())


# -- readers -----------------------------------------------------------------------


class FixedLengthRecords:
    """One reader's position in one Session: the file being read and the next
    record in it. A lock keeps reads from several threads whole."""

    def __init__(self, record_bytes, header_bytes, footer_bytes):
        self.record_bytes, self.header_bytes = record_bytes, header_bytes
        self.footer_bytes = footer_bytes
        self.lock = threading.Lock()
        self.file_name, self.data, self.next_record, self.record_count = None, b"", 0, 0

    def read(self, queue, op):
        """(key, value) of the next record, taking file names from ``queue``."""
        with self.lock:
            while self.next_record >= self.record_count:
                (name,) = queue.dequeue_many(1, op)[0]
                self._open(name[()], op)
            start = self.header_bytes + self.next_record * self.record_bytes
            value = self.data[start:start + self.record_bytes]
            key = self.file_name + b":" + str(self.next_record).encode()
            self.next_record += 1
            return np.array(key, dtype=object), np.array(value, dtype=object)

    def _open(self, file_name, op):
        try:
            with open(file_name, "rb") as file:
                self.data = file.read()
        except OSError as err:
            raise errors.NotFoundError(
                None, op, f"{file_name.decode(errors='replace')}: {err.strerror}") from None
        body = len(self.data) - self.header_bytes - self.footer_bytes
        self.file_name, self.next_record = file_name, 0
        self.record_count = max(0, body) // self.record_bytes


def _reader_handle(ctx):
    _records_of(ctx, ctx.op)
    return lambda: None


def _records_of(ctx, reader_op):
    attrs = reader_op.attrs
    if reader_op.type in reader_kernels.READER_OPS:
        return ctx.resource(("reader", reader_op),
                            lambda: reader_kernels.make_reader(reader_op))
    return ctx.resource(("reader", reader_op), lambda: FixedLengthRecords(
        attrs["record_bytes"], attrs["header_bytes"], attrs["footer_bytes"]))


def _reader_read(ctx):
    records = _records_of(ctx, ctx.attrs["reader"])
    queue, op = queue_of(ctx, ctx.attrs["queue"]), ctx.op
    return lambda: records.read(queue, op)


# -- decoding and shuffling ------------------------------------------------------------


def _decode_raw(ctx):
    dtype = np.dtype(ctx.attrs["out_type"].as_numpy_dtype)
    dtype = dtype.newbyteorder("<" if ctx.attrs["little_endian"] else ">")
    op = ctx.op

    def decode(strings):
        flat = [bytes(item) for item in strings.reshape(-1)]
        lengths = {len(item) for item in flat}
        if len(lengths) > 1:
            raise errors.InvalidArgumentError(
                None, op, f"DecodeRaw requires input strings to all be the same size, got "
                f"sizes {sorted(lengths)}")
        if lengths and lengths.pop() % dtype.itemsize:
            raise errors.InvalidArgumentError(
                None, op, f"Input to DecodeRaw has length {len(flat[0])} that is not a "
                f"multiple of {dtype.itemsize}, the size of {ctx.attrs['out_type'].name}")
        values = np.frombuffer(b"".join(flat), dtype=dtype).astype(dtype.newbyteorder("="))
        return values.reshape(strings.shape + (-1,) if flat else strings.shape + (0,))
    return decode


def _random_shuffle(ctx):
    seed = ctx.attrs["seed"]
    seed = None if seed[0] is None else list(seed)
    rng = ctx.resource(("random", ctx.op), lambda: np.random.default_rng(seed))
    return lambda value: value[rng.permutation(len(value))]


# The kernels here, which have no CuPy version by design (host data).
HOST_ONLY_KERNELS = frozenset(build_queue_kernels())
