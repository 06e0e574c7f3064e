"""cupy.cuda.graph.Graph on the simulated GPUs: the work a capture recorded
(of its origin stream and of the streams that joined it through events, see
clock.py), the join check at the end of the capture, and the replay.
"""

from .clock import ERROR_INVALID_RESOURCE_HANDLE, CUDARuntimeError, Stream


class Graph:
    """cupy.cuda.graph.Graph: the work a capture recorded, replayed by
    :meth:`launch` on a stream of the capturing device. ``steps`` hold, in
    capture order, (kind, lane, payload): 'run' a node, 'record' a mark (an
    event's position), 'wait' on a mark; lane 0 is the origin stream, lane i
    the i-th stream that joined. ``lane_clocks`` are vector clocks over the
    lanes' node counts, for the join check at the end of the capture."""

    def __init__(self, stream):
        self.device_id, self.origin, self.world = stream.device_id, stream, stream.world
        self.nodes, self.steps, self.marks = [], [], []
        self.lanes = {stream.key: 0}
        self.lane_clocks = [{}]
        self.invalidated, self.ended = None, False
        self._branches = []             # the replay's streams of lanes 1.. (made once)

    def _lane(self, stream):
        return self.lanes[stream.key]

    def _add(self, node, stream):
        lane = self._lane(stream)
        self.lane_clocks[lane][lane] = self.lane_clocks[lane].get(lane, 0) + 1
        self.nodes.append(node)
        self.steps.append(("run", lane, node))

    def _record(self, stream):
        lane = self._lane(stream)
        self.marks.append(dict(self.lane_clocks[lane]))
        self.steps.append(("record", lane, len(self.marks) - 1))
        return len(self.marks) - 1

    def _wait(self, stream, mark):
        lane = self._lane(stream)
        clock = self.lane_clocks[lane]
        for other, count in self.marks[mark].items():
            clock[other] = max(clock.get(other, 0), count)
        self.steps.append(("wait", lane, mark))

    def _join(self, stream):
        self.world.capturing[stream.key] = self
        self.lanes[stream.key] = len(self.lane_clocks)
        self.lane_clocks.append({})

    def _end(self):
        for key in self.lanes:
            self.world.capturing.pop(key, None)
        self.ended = True

    def _unjoined(self):
        """The joined streams with work the origin does not wait on. NOTE:
        a stream that joined and queued nothing counts as joined here; CUDA
        documents only that every joined stream must be joined back, so a
        real GPU may refuse that case too (towerflow always joins back)."""
        origin = self.lane_clocks[0]
        return [key for key, lane in self.lanes.items()
                if lane and origin.get(lane, 0) < self.lane_clocks[lane].get(lane, 0)]

    def _close(self):
        from . import work
        work.seal(self)

    def launch(self, stream=None):
        from . import state
        world = state.world()
        stream = world.current_stream() if stream is None else stream
        if stream.device_id != self.device_id:
            raise CUDARuntimeError(ERROR_INVALID_RESOURCE_HANDLE,
                                   "cudaErrorInvalidResourceHandle: a graph of GPU "
                                   f"{self.device_id} launched on GPU {stream.device_id}")
        if world.current_device != self.device_id:
            # NOTE: cudaGraphLaunch acts in the current device's context, where
            # another GPU's graph and stream are foreign handles.
            raise CUDARuntimeError(ERROR_INVALID_RESOURCE_HANDLE,
                                   "cudaErrorInvalidResourceHandle: a graph of GPU "
                                   f"{self.device_id} launched while GPU "
                                   f"{world.current_device} is current (launch it inside "
                                   "its device's context)")
        world.refuse_during_capture("cudaGraphLaunch inside a capture", stream=stream)
        from . import work
        work.check_seal(self, stream)
        self._replay([stream, *self._branch_streams(world)])

    def _replay(self, streams):
        """The steps in capture order, each lane on its stream: a branch runs
        after its fork point and before what joins it, beside the rest."""
        marks = {}
        for kind, lane, payload in self.steps:
            if kind == "run":
                payload(streams[lane])
            elif kind == "record":
                marks[payload] = streams[lane]._done_clock()
            else:
                streams[lane].clock.merge(marks[payload])
        for branch in streams[1:]:          # the launch ends when every node has
            streams[0].clock.merge(branch._done_clock())

    def _branch_streams(self, world):
        while len(self._branches) < len(self.lanes) - 1:
            branch = Stream(non_blocking=True, _world=world, _device=self.device_id,
                            _registered=False)
            branch.key = f"graph branch {len(self._branches) + 1} ({branch.key})"
            self._branches.append(branch)
        return self._branches

    def upload(self, stream=None):
        del stream
