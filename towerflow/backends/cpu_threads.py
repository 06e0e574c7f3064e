"""Parallel work for the NumPy backend: one persistent pool of CPU threads.

Kernels are written against ``xp`` and split their big loops into parts
(image blocks of a batch, rows of a GEMM, ranges of an elementwise op)
through a *parallel* object; the GPU backend and directly built kernel tables
get :data:`SERIAL`, which runs the parts one after another::

    parallel = cpu_pool()                         # the NumPy backend's pool
    parallel.run(lambda part: work(part), 4)     # parts 0..3 on all CPUs

NumPy releases the GIL inside ufunc loops, copies and BLAS calls, so the
threads really run side by side. A part's work never depends on which thread
runs it or when, so results are bit-identical run after run.

Kernels whose parts each only prepare compiled calls (the convolutions and
GEMMs on the compiled kernels, Winograd's filter transforms, batch norm, max
pool gradients) use ``run_compiled`` instead:
the calling thread runs every part's Python, the compiled calls are recorded,
and they run on C threads that never take the GIL (native.run_parts): a
hand-off to a Python thread cost about 50 us on a 2-core VM, one to a
spinning C thread under 1 us.

NOTE: one threading layer at a time. Once the pool runs, the BLAS NumPy
uses (OpenBLAS, MKL, BLIS: whichever threadpoolctl finds) is held to one
thread: OpenBLAS's worker threads spin for ~0.1 s after every GEMM they
share, and on a machine with few cores they steal the cores that the next
kernel splits across. GEMMs over long batches of rows (convolutions) are
split across the pool instead; the others, where OpenBLAS's threads share
packed operands and start at once, get them back for their duration
(:meth:`WorkerPool.blas_threads`), but only while the cores are free: beside
other busy processes a thread of that GEMM waits for a core while the others
spin (an MLP step ran up to 30 times slower, on twice the CPU seconds), so
while this process's threads wait on the run queues (:class:`Contention`)
BLAS keeps one thread. TOWERFLOW_CPU_THREADS=N sizes the pool; =1 turns it
off and holds BLAS to one thread too.
"""

import contextlib
import contextvars
import os
import queue
import threading
import time
import weakref

from .. import switches
from . import native

# Below this many elements a part is not worth handing to another thread: a
# hand-off to a sleeping thread costs tens of microseconds (more in a VM).
MIN_PARALLEL_ELEMENTS = 1 << 17
# GEMMs of this many multiply-adds or more run on all CPUs: split by the pool
# along a dimension of at least MIN_SPLIT_ROWS (a batch of rows: the parts share
# nothing), else inside OpenBLAS, whose threads share their packed operands
# and spin between calls (MLP layers: short GEMMs back to back). The pool makes
# more parts than threads only where each has MIN_PART_FLOPS or more.
MIN_PARALLEL_FLOPS = 1 << 22
MIN_SPLIT_ROWS = 2048
MIN_PART_FLOPS = 1 << 25


class Serial:
    """Runs the parts in order on the calling thread (GPUs, tests, fallback)."""

    workers = 1
    host = False     # True: arrays are NumPy's, in host memory (NumPy-only tricks pay)

    def run(self, work, count):
        """``work(part)`` for every part in ``range(count)``."""
        for part in range(count):
            work(part)

    def run_compiled(self, work, count):
        """``work(part)`` for every part, where each part only *prepares*
        compiled kernels: it calls the native kernels that record (see
        native.run_parts) and allocates arrays, and reads nothing those calls
        write; no NumPy work on the arrays, and no call of a function that
        runs parts and then reads their results (nested, their calls record
        into this part too). On the pool the kernels then run on C threads
        without the GIL; here, at once."""
        self.run(work, count)

    def for_ranges(self, size, work, align=1):
        """``work(start, stop)`` over flat ranges covering ``range(size)``, one or
        a few per thread (starts and stops multiples of ``align``).

        NOTE: one NumPy call per part, not a loop of cache-sized blocks: with
        many short calls the threads mostly wait for each other's GIL."""
        units = size // align
        parts = self.parts(units, size)
        if parts == 1:
            work(0, size)
            return
        ranges = [(start * align, stop * align) for start, stop in split(units, parts)]
        self.run(lambda index: work(*ranges[index]), parts)

    def parts(self, size, elements):
        """How many parts to split ``size`` items totalling ``elements`` into."""
        return 1

    def gemm_parts(self, size, flops, rows=None):
        """How many parts to split a GEMM of ``flops`` multiply-adds into along a
        dimension of ``size`` items of ``rows // size`` rows (default 1)."""
        return 1

    def compiled_parts(self, size, flops):
        """How many parts to split ``size`` items (images) of a compiled
        kernel's work of ``flops`` multiply-adds into."""
        return 1

    def blas_threads(self, flops):
        """A context for one unsplit GEMM of ``flops`` multiply-adds."""
        return _NO_CONTEXT


SERIAL = Serial()
_NO_CONTEXT = contextlib.nullcontext()


class _BlasThreads:
    """BLAS at ``count`` threads inside the ``with`` block, one after it."""

    def __init__(self, count):
        self.count = count

    def __enter__(self):
        set_blas_threads(self.count)

    def __exit__(self, *exc_info):
        set_blas_threads(1)


class WorkerPool(Serial):
    """``workers`` threads: the caller and ``workers - 1`` daemon threads.

    ``run(work, count)`` hands the parts out in order to whichever thread is
    free (a thread the hypervisor stalls holds up one part, not a fixed
    share) and returns when every part is done, raising the error of the
    lowest failing part. A call made while the pool is busy (from a worker,
    or from a second Python thread) runs serially on its own thread instead.
    """

    # One part per worker. Two (for balance, should the hypervisor stall a
    # thread) cost more than they saved on the 2-core machine: the cifar10
    # step at batch 64 / 256 ran 2 % / 5 % faster with one (each part of a
    # Winograd convolution reads the whole transformed filter, 2.4 MB at 128
    # channels, and every part is a hand-off).
    parts_per_worker = 1
    host = True

    def __init__(self, workers):
        self.workers = workers
        self._busy = threading.Lock()
        self._starting = threading.Lock()
        self._inboxes = []
        self._done = queue.SimpleQueue()
        self._pid = None
        self._blas_threads = None     # BLAS's own count, once held to one thread
        self.contention = Contention()
        self._cap = threading.local()  # this thread's limit (a Session's intra-op threads)
        _POOLS.add(self)

    @property
    def active_workers(self):
        """The workers this thread's work may use: ``workers``, or fewer
        inside :func:`intra_op_threads`."""
        cap = getattr(self._cap, "workers", 0)
        return min(self.workers, cap) if cap else self.workers

    @contextlib.contextmanager
    def capped(self, workers):
        """Work of this thread uses at most ``workers`` workers inside the block."""
        saved = getattr(self._cap, "workers", 0)
        self._cap.workers = workers
        try:
            yield
        finally:
            self._cap.workers = saved

    def parts(self, size, elements):
        if elements < MIN_PARALLEL_ELEMENTS or self.active_workers == 1:
            return 1
        return min(size, self.active_workers * self.parts_per_worker)

    def gemm_parts(self, size, flops, rows=None):
        if (size if rows is None else rows) < MIN_SPLIT_ROWS:
            return 1
        parts = self.compiled_parts(size, flops)      # starts the pool where it splits
        if self._blas_threads is None:   # NOTE: BLAS threads itself: splitting oversubscribes
            return 1
        return parts

    def compiled_parts(self, size, flops):
        # NOTE: no row minimum, unlike gemm_parts: the compiled kernels (the
        # convolutions' GEMM and transforms) are single-threaded, so OpenBLAS's
        # own threads are no alternative; a 4x4 layer of 128 channels at batch
        # 64 (1,024 rows) ran on one core.
        if flops < MIN_PARALLEL_FLOPS or size < 2 or self.active_workers == 1:
            return 1
        self._start()
        parts = self.active_workers * self.parts_per_worker
        if flops < parts * MIN_PART_FLOPS:
            parts = self.active_workers
        return min(size, parts)

    def blas_threads(self, flops):
        """BLAS's threads for an unsplit GEMM of MIN_PARALLEL_FLOPS or more
        while the cores are free (:class:`Contention`); one thread otherwise.

        NOTE: the first call starts the pool, which holds BLAS to one thread:
        even a graph of small GEMMs only, which never splits work, must not
        leave OpenBLAS's threads spinning between its calls (on a busy 2-core
        machine that made small GEMMs up to 50x slower). A pool of one worker
        (TOWERFLOW_CPU_THREADS=1) never gives them back."""
        self._start()
        if (flops < MIN_PARALLEL_FLOPS or self.active_workers == 1 or not self._blas_threads
                or self.contention.contended()):
            return _NO_CONTEXT
        return _BlasThreads(min(self._blas_threads, self.active_workers))

    def run(self, work, count):
        self._holding_the_pool(self._run, work, count)

    def run_compiled(self, work, count):
        # NOTE: the parts' Python runs here, their kernels on native.run_parts's C
        # threads: a hand-off to a Python thread (which must take the GIL) cost
        # about 50 us on the 2-core VM, one to a spinning C thread under 1 us.
        if not native.available() or not switches.on("TOWERFLOW_C_THREADS"):
            return self.run(work, count)
        self._holding_the_pool(self._run_on_c_threads, work, count)

    def _holding_the_pool(self, runner, work, count):
        """``runner(work, count)`` with the pool held and started; serially
        instead for one part, one worker, or a pool already busy (a call from a
        part, or from a second Python thread)."""
        if count <= 1 or self.active_workers == 1 or not self._busy.acquire(blocking=False):
            return Serial.run(self, work, count)
        try:
            self._start()
            runner(work, count)
        finally:
            self._busy.release()

    def _run_on_c_threads(self, work, count):
        native.run_parts(work, count, self.active_workers)

    def _run(self, work, count):
        job = _Job(work, count)
        # NOTE: never more helpers than threads were started (a pool whose
        # ``workers`` was raised after it started would wait for ever).
        helpers = min(count, self.active_workers, len(self._inboxes) + 1) - 1
        for inbox in self._inboxes[:helpers]:
            inbox.put(job)
        try:
            job.drain()
        finally:
            for _ in range(helpers):
                self._done.get()
        if job.errors:
            raise job.errors[min(job.errors)]

    def _start(self):
        """Start the threads (again in a forked child: threads do not survive
        fork) and hold BLAS to one thread."""
        if self._pid == os.getpid():
            return
        with self._starting:
            if self._pid == os.getpid():
                return
            self._inboxes = [queue.SimpleQueue() for _ in range(self.workers - 1)]
            self._done = queue.SimpleQueue()
            for index, inbox in enumerate(self._inboxes, start=1):
                thread = threading.Thread(target=_serve, args=(inbox, self._done),
                                          name=f"towerflow-cpu-{index}", daemon=True)
                thread.start()
            threads = get_blas_threads()
            self._blas_threads = threads if threads and set_blas_threads(1) else None
            self._pid = os.getpid()

    def _after_fork(self):
        self._busy, self._starting = threading.Lock(), threading.Lock()
        self._pid = None
        self.contention = Contention()


def _serve(inbox, done):
    while True:
        job = inbox.get()
        job.drain_elsewhere()
        done.put(None)


class _Job:
    """The parts of one ``run``, handed out in order to the threads that ask."""

    def __init__(self, work, count):
        self.work, self.errors = work, {}
        self._next, self._lock = iter(range(count)), threading.Lock()
        # NOTE: a part runs in its caller's context wherever it runs: NumPy's
        # floating-point error state is a contextvar, which a thread does not
        # inherit (Python 3.11), and a Session.run turns its reports off
        # (towerflow/float_errors.py); a part on a worker would warn where it did not.
        self._context = contextvars.copy_context()

    def drain_elsewhere(self):
        """``drain`` on another thread, in a copy of the caller's context (a
        context is entered by one thread at a time)."""
        self._context.copy().run(self.drain)

    def drain(self):
        while True:
            with self._lock:
                part = next(self._next, None)
            if part is None:
                return
            try:
                self.work(part)
            except BaseException as err:  # noqa: B036, BLE001 - re-raised by the caller
                self.errors[part] = err


_POOLS = weakref.WeakSet()


@contextlib.contextmanager
def intra_op_threads(count):
    """Inside the block, this thread's kernels split their work across at most
    ``count`` threads of every CPU pool (and BLAS's): a Session's
    ``ConfigProto(intra_op_parallelism_threads=count)``; 0 leaves the pools'
    own counts (TOWERFLOW_CPU_THREADS, else the usable cores)."""
    if not count:
        yield
        return
    with contextlib.ExitStack() as stack:
        for pool in list(_POOLS):
            stack.enter_context(pool.capped(count))
        yield


def _forget_threads_after_fork():
    for pool in list(_POOLS):
        pool._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads_after_fork)


def split(size, count):
    """``count`` contiguous (start, stop) ranges covering ``range(size)``."""
    return [(size * i // count, size * (i + 1) // count) for i in range(count)]


# -- how busy the cores are ------------------------------------------------------------


class Contention:
    """Whether other threads compete for this process's cores: the time its
    threads waited on the run queues (Linux's /proc/self/task/*/schedstat,
    second field) over the last :attr:`WINDOW_S` seconds or more, as a
    fraction of those seconds, above :attr:`THRESHOLD`. A contended finding
    holds for :attr:`HOLD_S` seconds before the next look.

    The threads that wait may be this process's own (more runnable threads
    than cores: two threading layers at once) or other processes' (a busy
    machine); either way BLAS's threads would make it worse. Where there is
    no schedstat (not Linux, no CONFIG_SCHEDSTATS) the cores count as free.

        >>> Contention().contended()      # on a quiet machine
        False
    """

    WINDOW_S = 0.05
    THRESHOLD = 0.05     # of one core: 2.5 ms waited in a 50 ms window
    HOLD_S = 1.0

    def __init__(self):
        self._lock = threading.Lock()
        self._since, self._waited = None, None
        self._held_until = 0.0
        self._state = False

    def contended(self):
        now = time.monotonic()
        if now < self._held_until or (self._since is not None
                                      and now - self._since < self.WINDOW_S):
            return self._state
        if not self._lock.acquire(blocking=False):
            return self._state
        try:
            waited = run_queue_wait_s()
            if waited is None:
                return False
            if self._since is not None:
                self._state = (waited - self._waited) / (now - self._since) > self.THRESHOLD
                if self._state:
                    self._held_until = now + self.HOLD_S
            self._since, self._waited = now, waited
            return self._state
        finally:
            self._lock.release()


def run_queue_wait_s():
    """Seconds this process's live threads have waited on run queues, runnable
    but not running (their schedstat's run_delay summed); None without
    /proc/self/task/*/schedstat."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    total, found = 0, False
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat", "rb") as stat:
                total += int(stat.read().split()[1])
                found = True
        except (OSError, IndexError, ValueError):
            pass        # a thread that ended meanwhile
    return total / 1e9 if found else None


# -- BLAS ------------------------------------------------------------------------------

# threadpoolctl: a well-kept library (scikit-learn's) that knows every BLAS
# vendor's thread API (OpenBLAS with either threading layer, MKL, BLIS,
# FlexiBLAS) and finds the copies a process has loaded on Linux, macOS and
# Windows; the ctypes code it replaces knew OpenBLAS on Linux only.
_blas_libraries = None


def _blas_controllers():
    """threadpoolctl's controllers of every BLAS this process has loaded (found
    once; [] without threadpoolctl)."""
    global _blas_libraries
    if _blas_libraries is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _blas_libraries = []
        else:
            _blas_libraries = ThreadpoolController().select(user_api="blas").lib_controllers
    return _blas_libraries


def set_blas_threads(count):
    """Set the thread count of every BLAS loaded; False if none was found:
    kernels stay correct, only slower.

    NOTE: threadpoolctl lets one Python thread at a time set OpenBLAS's
    (process-wide) count: from another, while that one lives, this changes
    nothing."""
    libraries = _blas_controllers()
    for library in libraries:
        library.set_num_threads(count)
    return bool(libraries)


def get_blas_threads():
    """The thread count of the first BLAS loaded, or None."""
    libraries = _blas_controllers()
    return libraries[0].get_num_threads() if libraries else None


def cpu_pool():
    """The NumPy backend's pool: TOWERFLOW_CPU_THREADS threads, by default as
    many as the CPUs this process may run on (affinity and cgroup quota)."""
    from ..device import host
    try:
        count = switches.cpu_threads()
    except ValueError:      # made at import: switches.check() reports it at the Session
        count = None
    return WorkerPool(count or host.usable_cores())
