"""Captures across streams, as CUDA's (the CUDA programming guide, "Cross-
stream Dependencies and Events"): a stream that waits on an event recorded in
a capture joins it (a fork), must be joined back to the origin stream before
end_capture, and leaves capture mode with it; the graph replays the forked
work after its fork point, before what joins it.

The rule checks run on the real GPU where CuPy sees one (as tests/conftest.py's
real_gpu_present chooses), else on the simulated GPU (towerflow.simgpu);
errors are matched by CUDA's error name, which both put first in the message.
What CUDA does not document (the state a failed call leaves) is asserted on the
simulator only, in the section at the end, with the simulator's own
bookkeeping (the replay's branch streams and clock).

NOTE: not asserted on a real GPU, as CUDA does not document them: which
streams a failed end_capture (unjoined, or on a joined stream) leaves
capturing; whether a refused end_capture on a joined stream or a refused
merge invalidates the captures; whether a stream that joined and queued
nothing counts as unjoined (asserted nowhere: towerflow always joins back).
"""

import contextlib
import pickle

import numpy as np
import pytest
from conftest import real_gpu_present

from towerflow import simgpu


@pytest.fixture
def simulated():
    with simgpu.installed(gpus=1, memory_bytes=2**30) as module:
        yield module


@pytest.fixture
def cp(request):
    """The real CuPy on a real GPU, else the simulated one."""
    if real_gpu_present():
        import cupy
        yield cupy
    else:
        yield request.getfixturevalue("simulated")


def new_stream(cp):
    return cp.cuda.Stream(non_blocking=True)


def fork(cp, origin, side):
    """``side`` joins the capture of ``origin`` (waits on an event it recorded)."""
    side.wait_event(origin.record(cp.cuda.Event(disable_timing=True)))


def end_quietly(cp, *streams):
    """End what captures a failed call may have left on ``streams`` (on a real
    GPU CUDA does not document whether it leaves them capturing)."""
    for stream in streams:
        with contextlib.suppress(cp.cuda.runtime.CUDARuntimeError):
            if stream.is_capturing():
                stream.end_capture()


def warm_up(cp):
    """The kernels of captured_fork run once outside capture: CuPy compiles a
    kernel on first use, which a capture should not have to record."""
    x = cp.arange(4.0)
    x += 1
    (x * 2) + (x * 3) + x * 4
    cp.cuda.get_current_stream().synchronize()


@contextlib.contextmanager
def captured_fork(cp, join=True):
    """origin captures x += 1, then x * 2 forked to ``side`` beside x * 3 on
    the origin, and (when ``join``) joins ``side`` back and adds the two.
    Yields the streams and arrays; the capture is left for the test to end
    (one a failed call leaves open is ended on the way out)."""
    warm_up(cp)
    origin, side = new_stream(cp), new_stream(cp)
    x = cp.arange(4.0)
    cp.cuda.get_current_stream().synchronize()
    with cp.cuda.using_allocator(cp.cuda.MemoryPool().malloc):
        with origin:
            origin.begin_capture()
            x += 1                                  # before the fork
            fork(cp, origin, side)
        with side:
            doubled = x * 2                         # the forked work
        joined = side.record(cp.cuda.Event(disable_timing=True))
        with origin:
            between = x * 3                         # beside the forked work
            if join:
                origin.wait_event(joined)
            out = doubled + between if join else between
        try:
            yield origin, side, x, out
        finally:
            end_quietly(cp, origin, side)


def raises_cuda(cp, name):
    """pytest.raises for CuPy's CUDARuntimeError named ``name`` (CUDA's name)."""
    return pytest.raises(cp.cuda.runtime.CUDARuntimeError, match=name)


# -- CUDA's rules: on the real GPU where present, else on the simulated one --------------


def test_a_stream_waiting_on_a_captured_event_joins_the_capture(cp):
    with captured_fork(cp) as (origin, side, _, out):
        assert side.is_capturing()                  # it joined through the event
        graph = origin.end_capture()
        assert not side.is_capturing() and not origin.is_capturing()
        if simgpu.is_installed():
            with pytest.raises(simgpu.UninitializedReadError):
                out.get(stream=origin)              # recorded, not run
        for _ in range(2):
            graph.launch(origin)
        # two replays: x = arange + 2, out = 2x + 3x
        np.testing.assert_array_equal(out.get(stream=origin), 5 * (np.arange(4.0) + 2))


def test_end_capture_refuses_an_unjoined_fork(cp):
    with captured_fork(cp, join=False) as (origin, *_), \
            raises_cuda(cp, "cudaErrorStreamCaptureUnjoined"):
        origin.end_capture()


def test_work_after_the_join_event_is_unjoined(cp):
    with captured_fork(cp) as (origin, side, x, _):
        with side:
            x * 4                                   # after the event origin waited on
        with raises_cuda(cp, "cudaErrorStreamCaptureUnjoined"):
            origin.end_capture()


def test_only_the_origin_stream_ends_the_capture(cp):
    with captured_fork(cp) as (_, side, *_), \
            raises_cuda(cp, "cudaErrorStreamCaptureUnmatched"):
        side.end_capture()


def test_synchronizing_a_joined_stream_invalidates_the_capture(cp):
    # The guide: an invalid operation invalidates the capture; end_capture then
    # fails and takes every stream of the capture out of capture mode.
    with captured_fork(cp) as (origin, side, *_):
        with raises_cuda(cp, "cudaErrorStreamCaptureUnsupported"):
            side.synchronize()
        with raises_cuda(cp, "cudaErrorStreamCaptureInvalidated"):
            origin.end_capture()
        assert not side.is_capturing() and not origin.is_capturing()


def test_two_captures_cannot_be_merged_through_an_event(cp):
    first, second = new_stream(cp), new_stream(cp)
    first.begin_capture()
    second.begin_capture()
    try:
        with raises_cuda(cp, "cudaErrorStreamCaptureMerge"):
            fork(cp, first, second)
    finally:
        end_quietly(cp, first, second)


class OneRankWorld:
    """What nccl.py's kernel makers ask of a kernel's context (its attrs and
    the Session's resources), for a world of one process whose communicator
    is given (made by initAll instead of over MPI)."""

    def __init__(self, communicator):
        self.attrs = {"world_size": 1, "timeout": 60.0}
        self._resources = {("nccl world", 1): communicator}

    def resource(self, key, make):
        if key not in self._resources:
            self._resources[key] = make()
        return self._resources[key]


def test_an_nccl_all_reduce_forked_in_a_capture_replays_between_fork_and_join(cp):
    """towerflow's start and wait kernels across processes (nccl.py's
    _world_start_kernel, make_wait_kernel), driven in a world of one GPU: the
    start forks the compute stream's capture to the communication stream and
    issues allReduce there, the wait joins it back; each replay of the graph
    sums the newly staged input, and a kernel after the join reads the sum."""
    import importlib

    from towerflow.parallel import nccl as towerflow_nccl
    nccl = importlib.import_module("cupy.cuda.nccl")
    if not getattr(nccl, "available", True):
        pytest.skip("CuPy found no NCCL library on this GPU machine")
    world = OneRankWorld(nccl.NcclCommunicator.initAll([0])[0])
    start = towerflow_nccl._world_start_kernel(world, nccl, cp)
    wait = towerflow_nccl.make_wait_kernel(world, cp)
    compute, staged = new_stream(cp), cp.zeros(4, dtype=np.float32)
    cp.cuda.get_current_stream().synchronize()     # staged's zeros, before compute reads

    def step():
        handle = start(staged * 2)          # a gradient's all-reduce, forked
        beside = staged + 1                 # the backward goes on beside it
        summed = wait(handle)               # joined back
        return summed, summed * 10 + beside     # reads the sum: after the join
    graph_pool = cp.cuda.MemoryPool()       # alive while the graph replays
    with compute:
        step()                  # uncaptured first: CuPy compiles, NCCL sets up
        compute.synchronize()
        with cp.cuda.using_allocator(graph_pool.malloc):
            compute.begin_capture()
            summed, after = step()
            graph = compute.end_capture()
    for values in (np.arange(4, dtype=np.float32), np.float32([5.0, -1.0, 0.5, 7.0])):
        staged.set(values, stream=compute)
        graph.launch(compute)
        # one rank: the sum is its own gradient (small integers and halves: exact)
        np.testing.assert_array_equal(summed.get(stream=compute), values * 2)
        np.testing.assert_array_equal(after.get(stream=compute), values * 20 + values + 1)


# -- the simulator only: what CUDA leaves undocumented, and its own bookkeeping ----------


def test_a_failed_end_capture_ends_every_streams_capture(simulated):
    # NOTE: CUDA does not document which streams an unjoined end_capture leaves
    # capturing; the simulator takes them all out, as for an invalidated one.
    with captured_fork(simulated, join=False) as (origin, side, *_):
        with raises_cuda(simulated, "cudaErrorStreamCaptureUnjoined"):
            origin.end_capture()
        assert not side.is_capturing() and not origin.is_capturing()


def test_the_simulators_cuda_errors_are_cupys_class_and_pickle_whole(simulated):
    runtime = pytest.importorskip("cupy_backends.cuda.api.runtime")  # CuPy's, no GPU needed
    with captured_fork(simulated, join=False) as (origin, *_), pytest.raises(
            runtime.CUDARuntimeError, match="cudaErrorStreamCaptureUnjoined") as refused:
        origin.end_capture()
    copied = pickle.loads(pickle.dumps(refused.value))
    assert (copied.status, copied.args) == (refused.value.status, refused.value.args)


def test_a_refused_end_capture_on_a_joined_stream_leaves_the_capture_whole(simulated):
    # NOTE: whether CUDA invalidates the capture then is not documented.
    with captured_fork(simulated) as (origin, side, *_):
        with raises_cuda(simulated, "cudaErrorStreamCaptureUnmatched"):
            side.end_capture()
        assert side.is_capturing()
        origin.end_capture()


def test_a_merge_invalidates_both_captures(simulated):
    first, second = new_stream(simulated), new_stream(simulated)
    first.begin_capture()
    second.begin_capture()
    with raises_cuda(simulated, "cudaErrorStreamCaptureMerge"):
        fork(simulated, first, second)
    for stream in (first, second):
        with raises_cuda(simulated, "cudaErrorStreamCaptureInvalidated"):
            stream.end_capture()


def test_the_replay_runs_the_fork_on_a_branch_in_order_and_beside_the_origin(
        simulated, monkeypatch):
    from towerflow.simgpu import work
    from towerflow.simgpu.clock import WORK_MICROS
    ran = []
    execute = work.Work.execute

    def logged(self, stream):
        result = execute(self, stream)
        ran.append((self.name, stream.key, stream.clock.micros - WORK_MICROS,
                    stream.clock.micros))
        return result
    with captured_fork(simulated) as (origin, *_):
        graph = origin.end_capture()
        monkeypatch.setattr(work.Work, "execute", logged)
        graph.launch(origin)
    before, forked, between, after = ran
    assert before[1] == between[1] == after[1] == origin.key
    assert forked[1] != origin.key and "graph branch" in forked[1]
    assert forked[2] >= before[3]                   # after its fork point
    assert after[2] >= forked[3]                    # the join: after the forked work
    assert forked[2] < between[3] and between[2] < forked[3]    # beside each other


def test_a_fork_to_another_gpus_stream_is_refused():
    # NOTE: CUDA lets a capture cross devices; the simulator does not model
    # multi-device graphs, so it refuses the fork (before the replay would run
    # GPU 1's work on a stream of GPU 0).
    with simgpu.installed(gpus=2, memory_bytes=2**30) as cp:
        origin = new_stream(cp)
        with cp.cuda.Device(1):
            other = new_stream(cp)
        origin.begin_capture()
        forked = origin.record(cp.cuda.Event(disable_timing=True))
        with cp.cuda.Device(1), pytest.raises(
                NotImplementedError, match="multi-device graphs.*GPU 1.*GPU 0"):
            other.wait_event(forked)
        assert not other.is_capturing()
        origin.end_capture()                        # the capture is left whole


def test_replayed_forking_graphs_leave_no_streams_behind(simulated):
    """A graph's branch streams are its own: dropped with it, not kept by the world."""
    warm_up(simulated)
    origin, side = new_stream(simulated), new_stream(simulated)
    x = simulated.arange(4.0)
    simulated.cuda.get_current_stream().synchronize()
    pool = simulated.cuda.MemoryPool()

    def capture_and_replay(x):
        with simulated.cuda.using_allocator(pool.malloc):
            with origin:
                origin.begin_capture()
                fork(simulated, origin, side)
            with side:
                x *= 2                                  # forked
            with origin:
                origin.wait_event(side.record(simulated.cuda.Event(disable_timing=True)))
                graph = origin.end_capture()
        graph.launch(origin)
    capture_and_replay(x)
    streams = simgpu.state.world().streams
    before = len(streams)
    for _ in range(5):
        capture_and_replay(x)
    assert len(streams) == before
    np.testing.assert_array_equal(x.get(stream=origin), np.arange(4.0) * 2**6)
