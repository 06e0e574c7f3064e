"""Order on the simulated GPUs: devices, streams, events, the host, capture.

Work runs at once (NumPy), but *when it may be seen* follows CUDA's rules.
Every stream counts the work queued on it (``seq``) and keeps a vector clock
of what it is known to follow: its own earlier work, whatever the host had
seen finish when the work was queued, and the events it waited on. A read or
write of device memory is legal only if the memory's last write (and, for a
write, its reads since) is in the reader's clock; otherwise the simulator
raises :class:`RaceError`, naming the memory and both streams. That is how a
missing ``synchronize``, ``record``/``wait_event`` or device context shows
up in a test: as an error at the access, instead of stale data some of the
time on a real GPU.

Clocks also carry a simulated time (``micros``), for CUDA events' elapsed
times: every piece of work takes :data:`WORK_MICROS` after whatever it
follows in the vector clock (its stream's earlier work, the events it
waited on, what the host had seen end), so ``get_elapsed_time`` between two
events of a stream counts the work queued between them, deterministically.

A stream that is capturing records its work into a :class:`Graph` instead
of running it, and refuses what CUDA refuses during capture: synchronising,
reading device memory on the host, allocating outside a graph-private pool.
Captures cross streams as CUDA's do (the CUDA programming guide, "Cross-stream
Dependencies and Events"): a stream that waits on an event recorded in a
capture joins that capture (a *fork*; only a stream of the capturing GPU: the
simulator does not model multi-device graphs), its later work becomes nodes of the
same graph, and it must be joined back (the capture's origin stream waits on
an event recorded on it after its last work) before ``end_capture`` on the
origin, which takes every stream of the capture out of capture mode. A graph
replays each joined stream's nodes on a stream of its own (a branch), in the
captured order of forks and joins.
"""

import collections
import itertools
import threading

HOST = "host"
# The simulated duration of one kernel or copy (no model of speed: a fixed
# step, so elapsed times count work and traces are deterministic).
WORK_MICROS = 10.0


def _cupys_error_class():
    """CuPy's CUDARuntimeError where CuPy is installed (its class needs no
    GPU), so that code catching CuPy's class catches the simulator's errors as
    a real GPU's; RuntimeError (its base in CuPy) where it is not."""
    try:
        from cupy_backends.cuda.api.runtime import CUDARuntimeError as cupys
    # NOTE: any failure, not only ImportError: towerflow imports the simulator
    # always, and a broken CuPy install must not stop CPU users importing it.
    except Exception:  # noqa: BLE001
        return RuntimeError
    return cupys


class CUDARuntimeError(_cupys_error_class()):
    """cupy.cuda.runtime.CUDARuntimeError: ``status``, and a message that
    starts with CUDA's error name (as CuPy's) and says what the simulator saw.
    NOTE: CuPy's __init__ asks the CUDA runtime for the message; the
    simulator writes its own, so it calls RuntimeError's."""

    def __init__(self, status, message=None):
        self.status = status
        RuntimeError.__init__(self, f"CUDA error {status}" if message is None else message)

    def __reduce__(self):
        return type(self), (self.status, str(self))


class RaceError(RuntimeError):
    """Device memory accessed without the ordering CUDA requires."""


class UninitializedReadError(RuntimeError):
    """Device memory read before any kernel or copy wrote it (a real GPU reads
    whatever the memory's last user left there)."""


ERROR_INVALID_RESOURCE_HANDLE = 400
ERROR_STREAM_CAPTURE_UNSUPPORTED = 900
ERROR_STREAM_CAPTURE_INVALIDATED = 901
ERROR_INVALID_VALUE = 1
ERROR_STREAM_CAPTURE_MERGE = 902
ERROR_STREAM_CAPTURE_UNMATCHED = 903
ERROR_STREAM_CAPTURE_UNJOINED = 904
ERROR_STREAM_CAPTURE_ISOLATION = 905
ERROR_NOT_READY = 600


def capture_error(what):
    return CUDARuntimeError(
        ERROR_STREAM_CAPTURE_UNSUPPORTED,
        f"cudaErrorStreamCaptureUnsupported: operation not permitted when stream is "
        f"capturing ({what})")


class Clock(dict):
    """A vector clock: stream key -> the last seq known to be finished; and
    ``micros``, the simulated time at which all that work has ended."""

    def __init__(self, *args, micros=0.0):
        super().__init__(*args)
        self.micros = micros

    def covers(self, key, seq):
        return self.get(key, -1) >= seq

    def merge(self, other):
        for key, seq in other.items():
            if self.get(key, -1) < seq:
                self[key] = seq
        self.micros = max(self.micros, other.micros)


class World:
    """The simulated machine: its GPUs, the host's clock, the current device
    and streams (per thread, as in CUDA), and the active captures."""

    def __init__(self, gpu_count, memory_bytes, name):
        self.gpu_count, self.memory_bytes, self.name = gpu_count, memory_bytes, name
        self.host_clock = Clock()
        self.stream_ids = itertools.count(1)
        self.capturing = {}             # stream key -> Graph being recorded
        self.streams = {}               # (device, ptr) -> Stream; ptr 0: the null stream
        # What a real GPU charges for, counted for tests: "timed events" (made
        # without disable_timing) and "host callbacks" (each stalls its stream).
        self.counts = collections.Counter()
        self._local = threading.local()

    # -- per-thread state ------------------------------------------------------------

    @property
    def current_device(self):
        return getattr(self._local, "device", 0)

    @current_device.setter
    def current_device(self, index):
        self._local.device = index

    def current_streams(self):
        if not hasattr(self._local, "streams"):
            self._local.streams = {}
        return self._local.streams

    def current_stream(self, device=None):
        device = self.current_device if device is None or device < 0 else device
        stream = self.current_streams().get(device)
        return stream if stream is not None else self.null_stream(device)

    def null_stream(self, device):
        stream = self.streams.get((device, 0))
        return stream if stream is not None else \
            Stream(null=True, _world=self, _device=device)

    def check_device(self, index):
        if not 0 <= index < self.gpu_count:
            raise CUDARuntimeError(101, f"cudaErrorInvalidDevice: invalid device ordinal "
                                        f"{index} (the simulator has {self.gpu_count} GPUs)")

    # -- capture ---------------------------------------------------------------------

    def capture_of(self, stream):
        return self.capturing.get(stream.key)

    def refuse_during_capture(self, what, stream=None, device=None):
        """A synchronisation or host read involving a capturing stream (by
        default the current stream; with ``device``, any stream of that GPU)
        invalidates its capture, as in CUDA (CuPy captures in relaxed mode:
        other streams may still synchronise)."""
        if device is not None:
            graphs = [graph for graph in self.capturing.values() if graph.device_id == device]
        else:
            graph = self.capture_of(stream or self.current_stream())
            graphs = [graph] if graph is not None else []
        for graph in graphs:
            graph.invalidated = what
        if graphs:
            raise capture_error(what)

    def host_waits_for(self, clock):
        self.host_clock.merge(clock)
        for stream in list(self.streams.values()):
            stream._release_callbacks()


class Stream:
    """cupy.cuda.Stream: a queue of work on one device."""

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None, *,
                 _world=None, _device=None, _registered=True):
        from . import state
        world = _world or state.world()
        device = world.current_device if _device is None else _device
        self.world, self.device_id, self.null = world, device, null
        self.non_blocking = non_blocking
        self.key = f"stream{next(world.stream_ids)}@gpu{device}"
        self.seq = 0
        self.clock = Clock()
        self.ptr = 0 if null else 0x7000_0000 + next(world.stream_ids)
        self._saved = []
        self._callbacks = []            # (seq, arg) of host functions the host has not seen run
        # NOTE: a graph's branch streams are not registered: nothing looks them
        # up by pointer, a device synchronize covers their work through the
        # launching stream (which waits on them), and the world would keep them
        # after the graph is gone.
        if _registered:
            world.streams[(device, self.ptr)] = self

    def _issue(self):
        """Queue one piece of work: returns its clock (what it follows, itself
        included). Work queued now follows everything the host has seen end."""
        self.clock.merge(self.world.host_clock)
        self.seq += 1
        self.clock[self.key] = self.seq
        self.clock.micros += WORK_MICROS
        return self.clock

    def _done_clock(self):
        clock = Clock(self.clock, micros=self.clock.micros)
        clock.merge(self.world.host_clock)
        clock[self.key] = self.seq
        return clock

    # -- cupy.cuda.Stream's interface ---------------------------------------------------

    def _check_device(self):
        """As CuPy's check_stream_device_match: a stream is made current only
        while its device is current (the null stream follows the device)."""
        current = self.world.current_device
        if not self.null and self.device_id != current:
            raise RuntimeError(f"the stream's device ({self.device_id}) is not the current "
                               f"device ({current}): use the stream inside its device's "
                               "context")

    def use(self):
        self._check_device()
        self.world.current_streams()[self.device_id] = self
        return self

    def __enter__(self):
        self._check_device()
        streams = self.world.current_streams()
        self._saved.append(streams.get(self.device_id))
        streams[self.device_id] = self
        return self

    def __exit__(self, *exc):
        streams = self.world.current_streams()
        previous = self._saved.pop()
        if previous is None:
            streams.pop(self.device_id, None)
        else:
            streams[self.device_id] = previous
        return False

    def record(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        graph = self.world.capture_of(self)
        if event.clock is None:
            return                              # a never-recorded event: no-op
        if event.captured_in is not None:
            self._wait_captured(event, graph)
            return
        if graph is not None:
            graph.invalidated = "a wait on an event recorded outside the capture"
            raise CUDARuntimeError(
                ERROR_STREAM_CAPTURE_ISOLATION,
                "cudaErrorStreamCaptureIsolation: a capturing stream waited on an event "
                "recorded outside the capture (wait before begin_capture)")
        self.clock.merge(event.clock)

    def _wait_captured(self, event, graph):
        """A wait on an event recorded in a capture: a dependency inside that
        graph; a stream not capturing joins the capture (a fork). NOTE: no
        clock merges: captured work has not run, and a stream leaving capture
        keeps no order on it (CUDA severs it at the mode change)."""
        captured = event.captured_in
        if captured.ended:
            raise NotImplementedError(
                "the simulated GPU does not model a wait on an event last recorded in a "
                "capture that has ended (record it again outside the capture)")
        if graph is not None and graph is not captured:
            graph.invalidated = captured.invalidated = "a merge of two captures"
            raise CUDARuntimeError(
                ERROR_STREAM_CAPTURE_MERGE,
                "cudaErrorStreamCaptureMerge: a capturing stream waited on an event "
                "recorded in another capture (two captures cannot be merged)")
        if graph is None and self.device_id != captured.device_id:
            # NOTE: CUDA lets a capture fork to another device's stream; the
            # simulator replays every lane on the capturing GPU, so it refuses.
            raise NotImplementedError(
                f"the simulated GPU does not model multi-device graphs: a stream of GPU "
                f"{self.device_id} waited on an event recorded in a capture on GPU "
                f"{captured.device_id} (fork only to streams of GPU {captured.device_id})")
        if graph is None:
            captured._join(self)
        captured._wait(self, event.capture_mark)

    def synchronize(self):
        self.world.refuse_during_capture("cudaStreamSynchronize on the capturing stream",
                                         stream=self)
        self.world.host_waits_for(self._done_clock())

    def launch_host_func(self, callback, arg):
        graph = self.world.capture_of(self)
        if graph is not None:                   # a host node: runs at each replay
            graph._add(lambda stream: (stream._issue(), callback(arg)), self)
            return
        self._issue()
        self.world.counts["host callbacks"] += 1
        callback(arg)
        # NOTE: as CuPy, the stream holds ``arg`` until the callback ran; the
        # simulator lets it go once the host knows that (a synchronize, an event).
        self._callbacks.append((self.seq, arg))

    def _release_callbacks(self):
        host = self.world.host_clock
        while self._callbacks and host.covers(self.key, self._callbacks[0][0]):
            del self._callbacks[0]

    def begin_capture(self, mode=None):
        del mode
        if self.null:
            raise CUDARuntimeError(ERROR_STREAM_CAPTURE_UNSUPPORTED,
                                   "cudaErrorStreamCaptureUnsupported: the legacy null "
                                   "stream cannot be captured")
        if self.world.capture_of(self) is not None:
            raise CUDARuntimeError(ERROR_INVALID_VALUE, "cudaErrorIllegalState: the stream "
                                                         "is already capturing")
        from .graphs import Graph
        self.world.capturing[self.key] = Graph(self)

    def end_capture(self):
        graph = self.world.capture_of(self)
        if graph is None:
            raise CUDARuntimeError(ERROR_INVALID_VALUE, "cudaErrorIllegalState: the stream "
                                                         "is not capturing")
        if graph.origin is not self:
            raise CUDARuntimeError(ERROR_STREAM_CAPTURE_UNMATCHED,
                                   "cudaErrorStreamCaptureUnmatched: the capture was not "
                                   f"begun on {self.key} (it joined the capture of "
                                   f"{graph.origin.key}: end it there)")
        graph._end()        # every stream of the capture leaves capture mode
        if graph.invalidated:
            raise CUDARuntimeError(ERROR_STREAM_CAPTURE_INVALIDATED,
                                   "cudaErrorStreamCaptureInvalidated: the capture was "
                                   f"invalidated by {graph.invalidated}")
        unjoined = graph._unjoined()
        if unjoined:
            raise CUDARuntimeError(ERROR_STREAM_CAPTURE_UNJOINED,
                                   "cudaErrorStreamCaptureUnjoined: the capture forked to "
                                   f"{', '.join(unjoined)}, whose work the origin stream "
                                   f"{self.key} never waited on (record an event on the "
                                   "forked stream after its work and wait on it on the "
                                   "origin before end_capture)")
        graph._close()
        return graph

    def is_capturing(self):
        return self.world.capture_of(self) is not None

    def __repr__(self):
        return f"<simulated Stream {self.key}>"


class Event:
    """cupy.cuda.Event: a position in one stream's queue."""

    def __init__(self, block=False, disable_timing=False, interprocess=False):
        from . import state
        self.world = state.world()
        self.device_id = self.world.current_device
        self.disable_timing = disable_timing
        if not disable_timing:
            self.world.counts["timed events"] += 1
        self.clock = None
        self.captured_in = None
        self.capture_mark = None        # its record's index in that capture's graph
        self.position = None            # (stream key, seq) of the work it follows

    def record(self, stream=None):
        stream = self.world.current_stream() if stream is None else stream
        if stream.device_id != self.device_id:
            raise CUDARuntimeError(
                ERROR_INVALID_RESOURCE_HANDLE,
                f"cudaErrorInvalidResourceHandle: an event of GPU {self.device_id} recorded "
                f"on a stream of GPU {stream.device_id} (the event is made on the current "
                "device: record it while the stream's device is current)")
        self.captured_in = self.world.capture_of(stream)
        if self.captured_in is not None:
            self.capture_mark = self.captured_in._record(stream)
        self.clock = stream._done_clock()
        self.position = (stream.key, stream.seq)

    def synchronize(self):
        if self.captured_in is not None:
            raise capture_error("cudaEventSynchronize on an event recorded in a capture")
        if self.clock is not None:
            self.world.host_waits_for(self.clock)

    @property
    def done(self):
        """cudaEventQuery: the simulated work is always done, and the host
        that asked now knows it."""
        self.synchronize()
        return True


def get_elapsed_time(start_event, end_event):
    """cupy.cuda.get_elapsed_time: milliseconds of simulated time between two
    events, with cudaEventElapsedTime's refusals: an event never recorded,
    made with ``disable_timing``, recorded in a capture, or of another GPU;
    or one the host has not yet seen complete (cudaErrorNotReady).

    Example::

        >>> start = stream.record(); x = x * 2; end = stream.record()
        >>> end.synchronize(); get_elapsed_time(start, end)
        0.01
    """
    for event in (start_event, end_event):
        _check_timing_event(event, start_event.device_id)
    return (end_event.clock.micros - start_event.clock.micros) / 1000.0


def _check_timing_event(event, device_id):
    if event.clock is None or event.disable_timing or event.device_id != device_id:
        why = "never recorded" if event.clock is None else \
            "made with disable_timing=True" if event.disable_timing else \
            f"of GPU {event.device_id}, the other of GPU {device_id}"
        raise CUDARuntimeError(ERROR_INVALID_RESOURCE_HANDLE,
                               f"cudaErrorInvalidResourceHandle: an event {why}")
    if event.captured_in is not None:
        raise capture_error("cudaEventElapsedTime on an event recorded in a capture")
    if not event.world.host_clock.covers(*event.position):
        raise CUDARuntimeError(ERROR_NOT_READY, "cudaErrorNotReady: the event's work may "
                               "not have completed (synchronize the event or its stream "
                               "before reading elapsed times)")
