"""Captures across streams on the simulated GPU, as CUDA's (the CUDA
programming guide, "Cross-stream Dependencies and Events"): a stream that
waits on an event recorded in a capture joins it (a fork), must be joined
back to the origin stream before end_capture, and leaves capture mode with
it; the graph replays the forked work on a branch of its own, after its fork
point, before what joins it, beside the origin's work in between."""

import contextlib

import numpy as np
import pytest

from towerflow import simgpu


@pytest.fixture
def cp():
    with simgpu.installed(gpus=1, memory_bytes=2**30) as module:
        yield module


@contextlib.contextmanager
def captured_fork(cp, join=True):
    """origin captures x * 2 forked to ``side`` (joined back when ``join``),
    then adds 1 to the result on the origin. Yields the streams and arrays;
    the capture is left for the test to end."""
    origin, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    x = cp.arange(4.0)
    cp.cuda.get_current_stream().synchronize()
    with cp.cuda.using_allocator(cp.cuda.MemoryPool().malloc):
        with origin:
            origin.begin_capture()
            x += 1                                  # before the fork
            side.wait_event(origin.record(cp.cuda.Event(disable_timing=True)))
        with side:
            doubled = x * 2                         # the forked work
        joined = side.record(cp.cuda.Event(disable_timing=True))
        with origin:
            between = x * 3                         # beside the forked work
            if join:
                origin.wait_event(joined)
            out = doubled + between if join else between
        yield origin, side, x, out


def test_a_stream_waiting_on_a_captured_event_joins_the_capture(cp):
    with captured_fork(cp) as (origin, side, _, out):
        assert side.is_capturing()                  # it joined through the event
        graph = origin.end_capture()
        assert not side.is_capturing() and not origin.is_capturing()
        with pytest.raises(simgpu.UninitializedReadError):
            out.get(stream=origin)                  # recorded, not run
        for _ in range(2):
            graph.launch(origin)
        # two replays: x = arange + 2, out = 2x + 3x
        np.testing.assert_array_equal(out.get(stream=origin), 5 * (np.arange(4.0) + 2))


def test_end_capture_refuses_an_unjoined_fork_and_ends_every_streams_capture(cp):
    with captured_fork(cp, join=False) as (origin, side, *_):
        with pytest.raises(simgpu.CUDARuntimeError, match="cudaErrorStreamCaptureUnjoined"):
            origin.end_capture()
        assert not side.is_capturing() and not origin.is_capturing()


def test_work_after_the_join_event_is_unjoined(cp):
    with captured_fork(cp) as (origin, side, x, _):
        with side:
            x * 4                                   # after the event origin waited on
        with pytest.raises(simgpu.CUDARuntimeError, match="cudaErrorStreamCaptureUnjoined"):
            origin.end_capture()


def test_only_the_origin_stream_ends_the_capture(cp):
    with captured_fork(cp) as (origin, side, *_):
        with pytest.raises(simgpu.CUDARuntimeError, match="cudaErrorStreamCaptureUnmatched"):
            side.end_capture()
        assert side.is_capturing()
        origin.end_capture()


def test_synchronizing_a_joined_stream_invalidates_the_capture(cp):
    with captured_fork(cp) as (origin, side, *_):
        with pytest.raises(simgpu.CUDARuntimeError, match="capturing"):
            side.synchronize()
        with pytest.raises(simgpu.CUDARuntimeError, match="Invalidated"):
            origin.end_capture()
        assert not side.is_capturing()


def test_two_captures_cannot_be_merged_through_an_event(cp):
    first, second = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    first.begin_capture()
    second.begin_capture()
    with pytest.raises(simgpu.CUDARuntimeError, match="cudaErrorStreamCaptureMerge"):
        second.wait_event(first.record(cp.cuda.Event(disable_timing=True)))
    for stream in (first, second):
        with pytest.raises(simgpu.CUDARuntimeError, match="Invalidated"):
            stream.end_capture()


def test_the_replay_runs_the_fork_on_a_branch_in_order_and_beside_the_origin(
        cp, monkeypatch):
    from towerflow.simgpu import work
    from towerflow.simgpu.clock import WORK_MICROS
    ran = []
    execute = work.Work.execute

    def logged(self, stream):
        result = execute(self, stream)
        ran.append((self.name, stream.key, stream.clock.micros - WORK_MICROS,
                    stream.clock.micros))
        return result
    with captured_fork(cp) as (origin, *_):
        graph = origin.end_capture()
        monkeypatch.setattr(work.Work, "execute", logged)
        graph.launch(origin)
    before, forked, between, after = ran
    assert before[1] == between[1] == after[1] == origin.key
    assert forked[1] != origin.key and "graph branch" in forked[1]
    assert forked[2] >= before[3]                   # after its fork point
    assert after[2] >= forked[3]                    # the join: after the forked work
    assert forked[2] < between[3] and between[2] < forked[3]    # beside each other
