"""CUDA graphs of the CuPy backend: a plan's steps captured into one graph
(``CupyDevice.capture_steps``, driven by towerflow/plan_capture.py) and
replayed on the primary logical GPU's stream.

The graph allocates from a pool of its own, capped at what the logical GPUs'
memory limits leave, and replays into the same buffers every step; fed values
are staged into its input buffers through pinned memory.
"""

import contextlib

import cupy
import cupyx


def untimed_event(stream):
    """An event recorded on ``stream`` (a stream of the current device) to
    order other work after, or to wait on: made without timing, which
    would cost a timestamp at every record (only cupy_backend._StreamTimer
    times)."""
    return stream.record(cupy.cuda.Event(disable_timing=True))


def capture(primary, runtimes, run):
    """See cupy_backend.CupyDevice.capture_steps. Every runtime queues on
    ``primary``'s stream while captured (the graph is one sequence in plan
    order), and allocates from the graph's own pool: the graph replays into
    the same buffers, which nothing else may then reuse. A kernel may fork
    work to a stream of its own (NCCL's communication stream between
    processes): that stream waits on an event recorded on ``primary``'s
    stream and so joins the capture (CUDA's cross-stream capture), and must
    be joined back (``primary``'s stream waits on an event recorded on it
    after its work) before the capture ends, which fails otherwise
    (cudaErrorStreamCaptureUnjoined). The graph replays such work on a branch
    beside the rest. NOTE: CUDA does not document whether a failed end leaves
    the joined streams capturing; the simulated GPU takes them all out, and
    towerflow ends only ``primary``'s capture (_abandon_capture)."""
    others = [runtime for runtime in runtimes if runtime is not primary]
    stream = primary.stream
    saved = [(runtime.stream, runtime.malloc) for runtime in runtimes]
    for runtime in runtimes:
        # NOTE: the blocks the runtimes' pools cache (the first run's
        # temporaries) count against their limits, yet the graph's own pool
        # cannot use them: free them, or the graph gets only what is left.
        runtime.release_memory()
    with primary.device:
        graph_pool, backing = _graph_pools(_headroom(runtimes))
        _wait_for_streams(stream, others)   # their queued work (fed values) comes first
        for runtime in runtimes:
            runtime.stream, runtime.malloc = stream, graph_pool.malloc
        try:
            stream.begin_capture()
            try:
                run()
                # NOTE: inside the try: an end that fails (a fork never joined
                # back, a capture a step invalidated) frees the pools too.
                graph = stream.end_capture()
            except BaseException:
                _abandon_capture(stream, (graph_pool, backing))
                raise
        finally:
            for runtime, (own_stream, malloc) in zip(runtimes, saved):
                runtime.stream, runtime.malloc = own_stream, malloc
    replayer = GraphReplayer(graph, (graph_pool, backing), primary, others)
    for runtime in runtimes:
        runtime.graphs.add(replayer)
    return replayer


def _headroom(runtimes):
    """What the logical GPUs ``runtimes`` have left for a new graph: their
    limits less their pools' bytes and the live graphs' captured over them.
    NOTE: run inside their GPU: a pool's byte counts are the current GPU's."""
    graphs = {id(graph): graph for runtime in runtimes for graph in runtime.graphs}
    left = sum(runtime.memory_limit - runtime.pool.total_bytes() for runtime in runtimes)
    return max(0, left - sum(graph.total_bytes() for graph in graphs.values()))


def _graph_pools(headroom):
    """A captured graph's own pool, taking at most ``headroom`` bytes of the
    current GPU. NOTE: the limit is on a second pool it takes its memory from,
    not on itself: a CuPy pool past its limit (or with the GPU full) frees its
    cached blocks and tries again, and the graph's cached blocks are memory
    the graph already uses (temporaries freed while it was captured). The
    second pool has none cached, so a capture out of memory fails instead."""
    backing = cupy.cuda.MemoryPool()
    backing.set_limit(size=max(headroom, 1))        # 0 would mean no limit
    return cupy.cuda.MemoryPool(backing.malloc), backing


def _wait_for_streams(stream, runtimes):
    """Order ``stream``'s next work after the work queued so far on the
    streams of ``runtimes`` (logical GPUs of ``stream``'s physical GPU)."""
    for runtime in runtimes:
        with runtime.device:
            stream.wait_event(untimed_event(runtime.stream))


def _abandon_capture(stream, graph_pools):
    """End a failed capture; the graph is dropped unlaunched, so the blocks
    its pools cache go back to the GPU now, for the step to run op by op
    (blocks of arrays still alive stay theirs). NOTE: the graph's pool
    first, which gives its blocks back to the pool it took them from."""
    with contextlib.suppress(Exception):     # a capture a failed step invalidated
        stream.end_capture()
    for pool in graph_pools:
        pool.free_all_blocks()


class GraphReplayer:
    """Replays one captured graph on its primary runtime's stream."""

    def __init__(self, graph, graph_pools, primary, others):
        self._graph = graph
        self._graph_pools = graph_pools     # the graph's buffers live here
        self._primary, self._others = primary, others
        self._staging = {}                  # input buffer id -> (pinned, copied event)

    def stage(self, buffer, host_value):
        """Copy ``host_value`` into the graph's input ``buffer`` (through a
        pinned buffer kept per input), queued before the next replay."""
        pinned, copied = self._staging.get(id(buffer), (None, None))
        if pinned is None:
            pinned = cupyx.empty_pinned(buffer.shape, buffer.dtype)
        elif copied is not None:
            copied.synchronize()            # the last copy out of it is done
        pinned[...] = host_value
        stream = self._primary.stream
        with self._primary.device:
            buffer.set(pinned, stream=stream)
            self._staging[id(buffer)] = (pinned, untimed_event(stream))

    def total_bytes(self):
        """The GPU memory this graph holds (call inside its GPU)."""
        _, backing = self._graph_pools      # the pool its memory comes from
        return backing.total_bytes()

    def replay(self):
        stream = self._primary.stream
        with self._primary.device:
            # NOTE: every replay, not only at capture: the other logical GPUs'
            # streams may have queued work since (a fed value, another plan's
            # update of a variable the graph reads).
            _wait_for_streams(stream, self._others)
            self._graph.launch(stream)
            if self._others:                # their fetches wait on their own streams
                done = untimed_event(stream)
                for runtime in self._others:
                    runtime.stream.wait_event(done)
