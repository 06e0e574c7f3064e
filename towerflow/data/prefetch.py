"""A background thread that makes the next batches while the caller trains.

``Prefetcher(make_batch, indices, depth)`` calls ``make_batch(index)`` for
each index in order on a daemon thread and keeps at most ``depth`` results
waiting in a bounded queue. Iterating it yields the results in order; an
exception raised by ``make_batch`` is raised again in the caller. ``close()``
(also run when the Prefetcher is garbage-collected, and at interpreter exit)
stops the thread and waits for it briefly.

# NOTE: the thread must hold no reference to the Prefetcher or its owner, or
# neither could ever be garbage-collected while it runs; it gets only the
# function, the queue and the stop event.
"""

import contextvars
import queue
import threading
import weakref

__all__ = ["Prefetcher"]

_POLL_SECONDS = 0.05
_JOIN_SECONDS = 5.0
_END = object()


class _Failure:
    def __init__(self, exception):
        self.exception = exception


def _put(out, item, stop):
    """Put ``item`` unless ``stop`` is set first; True when it was put."""
    while not stop.is_set():
        try:
            out.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False


def _produce(make_batch, indices, out, stop):
    try:
        for index in indices:
            if stop.is_set() or not _put(out, make_batch(index), stop):
                return
        _put(out, _END, stop)
    except BaseException as exc:     # noqa: B036, BLE001  (handed to the consumer, not dropped)
        _put(out, _Failure(exc), stop)


def _stop_thread(thread, out, stop):
    stop.set()
    while True:                       # free the producer if it waits on a full queue
        try:
            out.get_nowait()
        except queue.Empty:
            break
    if thread is not threading.current_thread():
        thread.join(_JOIN_SECONDS)


class Prefetcher:
    """``make_batch(i)`` for ``i`` in ``indices``, made ``depth`` ahead on a thread.

    >>> with Prefetcher(lambda i: i * i, range(4), depth=2) as batches:
    ...     list(batches)
    [0, 1, 4, 9]
    """

    def __init__(self, make_batch, indices, depth, name="towerflow-data-prefetch"):
        if depth < 1:
            raise ValueError(f"prefetch depth must be at least 1; received {depth}")
        self._queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        # NOTE: in a copy of the caller's context, as ``map(make_batch, indices)``
        # would run: NumPy's floating-point error state (np.errstate) is a
        # contextvar, which a new thread does not inherit.
        self._thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(_produce, make_batch, list(indices), self._queue, self._stop),
            name=name, daemon=True)
        self._thread.start()
        # Runs on close(), on garbage collection and at interpreter exit.
        self._finalizer = weakref.finalize(self, _stop_thread, self._thread,
                                           self._queue, self._stop)

    @property
    def closed(self):
        return self._stop.is_set()

    def close(self):
        """Stop the thread (a batch being made is finished first, then dropped)."""
        self._finalizer()

    def __iter__(self):
        return self

    def __next__(self):
        item = self._get()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.exception
        return item

    def _get(self):
        while True:
            if self._stop.is_set():
                raise RuntimeError("the prefetch thread was stopped by close(); start a "
                                   "new iteration to read more batches")
            try:
                return self._queue.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the prefetch thread ended without delivering a "
                                       "batch or an error") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
