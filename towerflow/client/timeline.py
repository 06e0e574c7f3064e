"""TensorFlow 1.15's ``timeline``: step stats as a Chrome trace (the Trace
Event Format), which Perfetto (ui.perfetto.dev, "Open trace file") and
chrome://tracing ("Load") open::

    from towerflow.client import timeline
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    metadata = tf.RunMetadata()
    sess.run(train_op, options=options, run_metadata=metadata)
    trace = timeline.Timeline(metadata.step_stats).generate_chrome_trace_format()
    with open("timeline.json", "w") as out:
        out.write(trace)

As TensorFlow's: a process per device named ``<device> Compute``, one
complete ('X') event per op with ``ts``/``dur`` in microseconds, its op type
as the name and ``args`` {name, op, input0, ...}; with ``show_dataflow``,
flow events ('s'/'t') from a tensor's producer to each consumer on another
device or lane; with ``show_memory``, TensorFlow's ``<device> Tensors`` and
``Allocators`` processes (tensor snapshots and an allocation counter per
allocator). Unlike TensorFlow, those two are left out when ``show_memory``
is off, where they would be empty rows; and an op that starts when the
previous one on its lane ends stays on that lane.

:meth:`Timeline.of_runs` draws several traced runs (steps, ranks) in one
trace: a flow joins a tensor's producer to its consumers of the same run
only; across ranks, the spans of one collective (an MPI or NCCL all-reduce
of the same name and step) are joined from the rank that joined it last
(it released the others) to the end of every other rank's span; the members
of one NCCL all-reduce on the GPUs of one process, from each to the one that
ran last (it issued every GPU's call).

An all-reduce that overlaps the backward pass runs as a start op and a wait
op per tower or rank (``MpiAllReduceStart``/``Wait``,
``NcclAllReduceStart``/``Wait``): each start gets an arrow to its own wait,
even on one lane (the sum is in flight between them, beside the ops the
lane runs meanwhile), and the starts of one bucket (of one step) on other
devices or ranks get an arrow each to the start of the one that started it
last: in one process that start issues every GPU's call; across ranks each
rank issues its own, and the sum completes only once the last has.
"""

import collections
import json
import re
import typing

AllocationMaximum = collections.namedtuple("AllocationMaximum",
                                           ("timestamp", "num_bytes", "tensors"))
StepStatsAnalysis = collections.namedtuple("StepStatsAnalysis",
                                           ("chrome_trace", "allocator_maximums"))
_LABEL = re.compile(r"(.*) = (.*)\((.*)\)")
# Ops that every rank of a step runs together, exchanging data between processes.
COLLECTIVE_OPS = frozenset({"MpiAllReduce", "MpiBroadcast", "MpiAllGather", "NcclAllReduce"})
# The suffix a collective member's node name adds to its collective's, where
# the members' names differ: an NCCL bucket's members on the GPUs of one
# process (``<bucket>_<tower>``) or of several (``<bucket>_rank_<rank>``).
MEMBER_SUFFIXES = {"NcclAllReduce": re.compile(r"(_rank)?_\d+$")}
# The halves of an all-reduce that overlaps the backward pass (parallel/mpi_ops.py,
# parallel/nccl.py): a start op hands a handle to its wait op, the sum runs
# between them. By start op: the suffix its node name adds to its bucket's (an
# NCCL bucket has a start per tower, ``<bucket>_<tower>_start``, or per process,
# ``<bucket>_rank_<rank>_start``; an MPI bucket one per rank, all of one name).
STARTED_COLLECTIVE_OPS = {"MpiAllReduceStart": re.compile(r"_start$"),
                          "NcclAllReduceStart": re.compile(r"(_rank)?_\d+_start$")}
COLLECTIVE_WAIT_OPS = frozenset({"MpiAllReduceWait", "NcclAllReduceWait"})


class TracedRun(typing.NamedTuple):
    """One traced ``Session.run`` of a trace of several: its step stats, the
    step it was and the rank (process) that ran it."""
    step_stats: object
    step: int = 0
    rank: int = 0


class _Span(typing.NamedTuple):     # a collective op of one rank, on its row
    rank: int
    start: int
    end: int
    pid: int
    tid: int


class _ChromeTrace:
    """Collects Trace Event Format events: metadata first, then the rest."""

    def __init__(self):
        self.metadata, self.events = [], []

    def process(self, name, pid):
        self.metadata.append({"name": "process_name", "ph": "M", "pid": pid,
                              "args": {"name": name}})

    def event(self, ph, category, name, pid, tid, timestamp, **extra):
        self.events.append({"ph": ph, "cat": category, "name": name, "pid": pid,
                            "tid": tid, "ts": timestamp, **extra})

    def to_json(self, pretty=False):
        trace = {"traceEvents": self.metadata + self.events}
        if pretty:
            return json.dumps(trace, indent=4, separators=(",", ": "))
        return json.dumps(trace, separators=(",", ":"))


class _Tensor:
    """One produced tensor: where, when, how big, and when it was last read."""

    def __init__(self, name, object_id, created, pid, allocator, num_bytes):
        self.name, self.object_id, self.pid = name, object_id, pid
        self.create_time, self.allocator, self.num_bytes = created, allocator, num_bytes
        self.unref_times = []

    @property
    def last_unref(self):
        return max(self.unref_times)


class Timeline:
    """The ops of ``step_stats`` (a RunMetadata's) as a Chrome trace.

    Example::

        >>> trace = Timeline(run_metadata.step_stats).generate_chrome_trace_format()
        >>> json.loads(trace)["traceEvents"][0]["name"]
        'process_name'
    """

    def __init__(self, step_stats, graph=None):
        self._runs = [TracedRun(step_stats)]
        self._graph = graph
        self._trace = _ChromeTrace()
        self._next_pid = 0
        self._device_pids, self._tensor_pids, self._lanes = {}, {}, {}
        self._tensors, self._flow_starts = {}, {}
        self._next_flow_id = 0
        self._allocator_maximums = {}
        self._collectives = collections.defaultdict(list)   # (step, node) -> [_Span]
        self._started = collections.defaultdict(list)   # (step, op, bucket) -> [_Span]

    @classmethod
    def of_runs(cls, runs, graph=None):
        """A timeline of several traced runs (:class:`TracedRun`), in order.

        Example::

            >>> runs = [TracedRun(metadata.step_stats, step) for step, metadata in traced]
            >>> trace = Timeline.of_runs(runs).generate_chrome_trace_format()
        """
        timeline = cls(None, graph)
        timeline._runs = list(runs)
        return timeline

    def _dev_stats(self):
        """(run index, device step stats) of every run, in order."""
        for index, run in enumerate(self._runs):
            for dev_stats in run.step_stats.dev_stats:
                yield index, dev_stats

    def generate_chrome_trace_format(self, show_dataflow=True, show_memory=False):
        """The trace as a JSON string (``{"traceEvents": [...]}``)."""
        analysis = self.analyze_step_stats(show_dataflow, show_memory)
        return analysis.chrome_trace.to_json(pretty=True)

    def analyze_step_stats(self, show_dataflow=True, show_memory=True):
        """A StepStatsAnalysis: the trace and, per allocator, its peak use."""
        self._allocate_pids(show_memory)
        self._assign_lanes()
        self._analyze_tensors(show_memory)
        self._show_compute(show_dataflow)
        if show_memory:
            self._show_memory_counters()
        return StepStatsAnalysis(self._trace, self._allocator_maximums)

    # -- processes and lanes ---------------------------------------------------------

    def _new_pid(self, name):
        pid, self._next_pid = self._next_pid, self._next_pid + 1
        self._trace.process(name, pid)
        return pid

    def _allocate_pids(self, show_memory):
        if show_memory:
            self._allocators_pid = self._new_pid("Allocators")
        for _, dev_stats in self._dev_stats():
            device = dev_stats.device
            if device in self._device_pids:     # seen in an earlier run
                continue
            self._device_pids[device] = self._new_pid(device + " Compute")
            self._tensor_pids[device] = self._new_pid(device + " Tensors") \
                if show_memory else None

    def _assign_lanes(self):
        """Each op on the first lane free at its start (lanes never overlap)."""
        lanes_of_devices = collections.defaultdict(list)   # device -> each lane's end
        for run, dev_stats in self._dev_stats():
            lane_ends = lanes_of_devices[dev_stats.device]
            for index, node in enumerate(dev_stats.node_stats):
                free = [i for i, end in enumerate(lane_ends) if node.all_start_micros >= end]
                lane = free[0] if free else len(lane_ends)
                if not free:
                    lane_ends.append(0)
                lane_ends[lane] = node.all_start_micros + node.all_end_rel_micros
                # NOTE: by place, not id(node): a protobuf's sub-message
                # objects may be made afresh on each access.
                self._lanes[run, dev_stats.device, index] = lane

    # -- tensors and ops ---------------------------------------------------------------

    def _analyze_tensors(self, show_memory):
        """Each output of each op, by (run index, tensor name): a tensor is only
        ever consumed in the run that produced it."""
        for run, dev_stats in self._dev_stats():
            device_pid = self._device_pids[dev_stats.device]
            tensors_pid = self._tensor_pids[dev_stats.device]
            for index, node in enumerate(dev_stats.node_stats):
                tid = self._lanes[run, dev_stats.device, index]
                start = node.all_start_micros
                end = start + node.all_end_rel_micros
                for slot, output in enumerate(node.output):
                    name = node.node_name if slot == 0 else f"{node.node_name}:{slot}"
                    allocation = output.tensor_description.allocation_description
                    tensor = _Tensor(name, len(self._tensors), start, tensors_pid,
                                     allocation.allocator_name, allocation.requested_bytes)
                    tensor.unref_times.append(end)
                    self._tensors[run, name] = tensor
                    self._flow_starts[run, name] = (end, device_pid, tid)
                    if show_memory:
                        self._snapshot(tensor, tid, end, output)

    def _snapshot(self, tensor, tid, end, output):
        self._trace.event("N", "Tensor", tensor.name, tensor.pid, tid, tensor.create_time,
                          id=tensor.object_id)
        description = str(output.tensor_description).replace('"', "")
        self._trace.event("O", "Tensor", tensor.name, tensor.pid, tid, end - 1,
                          id=tensor.object_id,
                          args={"snapshot": {"tensor_description": description}})

    def _show_compute(self, show_dataflow):
        for run, dev_stats in self._dev_stats():
            pid = self._device_pids[dev_stats.device]
            for index, node in enumerate(dev_stats.node_stats):
                tid = self._lanes[run, dev_stats.device, index]
                start = node.all_start_micros
                end = start + node.all_end_rel_micros
                _, op, inputs = _parse_label(node.timeline_label)
                args = {"name": node.node_name, "op": op}
                args.update({f"input{i}": name for i, name in enumerate(inputs)})
                self._trace.event("X", "Op", op, pid, tid, start,
                                  dur=node.all_end_rel_micros, args=args)
                # A wait's arrow from its start, even on one lane: it spans
                # the all-reduce in flight beside the ops between them.
                same_lane_arrow = op in COLLECTIVE_WAIT_OPS
                for name in inputs:
                    self._consume((run, name), start, end, (pid, tid), show_dataflow,
                                  same_lane_arrow)
                self._note_collective(run, node.node_name, op, _Span(
                    self._runs[run].rank, start, end, pid, tid))
        if show_dataflow:
            self._show_collectives()
            self._show_started_collectives()

    def _note_collective(self, run, node_name, op, span):
        step = self._runs[run].step
        if op in COLLECTIVE_OPS:
            suffix = MEMBER_SUFFIXES.get(op)
            collective = suffix.sub("", node_name) if suffix else node_name
            self._collectives[step, collective].append(span)
        elif op in STARTED_COLLECTIVE_OPS:
            bucket = STARTED_COLLECTIVE_OPS[op].sub("", node_name)
            self._started[step, op, bucket].append(span)

    def _consume(self, key, start, end, lane, show_dataflow, same_lane_arrow=False):
        """The consumer on ``lane`` (pid, tid) of tensor ``key``; its arrow
        from the producer, unless both are on one lane (``same_lane_arrow``:
        even then)."""
        pid, tid = lane
        tensor = self._tensors.get(key)
        if tensor is None:          # a control input, or produced outside the trace
            return
        tensor.unref_times.append(end - 1)
        created, create_pid, create_tid = self._flow_starts[key]
        # Same device and lane: no arrow (horizontal arrows only clutter).
        if show_dataflow and (same_lane_arrow or (create_pid, create_tid) != lane):
            self._flow(key[1], (create_pid, create_tid, created), (pid, tid, start))

    def _show_collectives(self):
        """Across ranks, each collective's span of the rank that joined it last
        to the end of each other rank's span: its joining released them. The
        members on several GPUs of one process (NCCL), joined as started ones."""
        for (_, name), spans in self._collectives.items():
            if len({span.rank for span in spans}) < 2:
                self._join_to_last_start(name, spans)
                continue
            last = max(spans, key=lambda span: span.start)
            for span in spans:
                # NOTE: the ranks' clocks agree only as well as the trace's
                # barriers align them: a span seen ending before the last rank
                # joined gets no arrow rather than one pointing backwards.
                if span.rank != last.rank and span.end >= last.start:
                    self._flow(name, (last.pid, last.tid, last.start),
                               (span.pid, span.tid, span.end))

    def _show_started_collectives(self):
        """Each overlapping bucket's start ops, on several devices (towers or
        ranks), joined to the one that started last: the bucket's sum can
        complete only once its last member has started (in one process, that
        start issues every GPU's call), so every arrow points forward."""
        for (_, _, name), spans in self._started.items():
            self._join_to_last_start(name, spans)

    def _join_to_last_start(self, name, spans):
        """An arrow from the start of each member on another device to that of
        the member that started last (the collective waited for it)."""
        last = max(spans, key=lambda span: span.start)
        for span in spans:
            if span.pid != last.pid:
                self._flow(name, (span.pid, span.tid, span.start),
                           (last.pid, last.tid, last.start))

    def _flow(self, name, source, target):
        """A flow (arrow) from ``source`` to ``target``, each (pid, tid, µs)."""
        flow_id, self._next_flow_id = self._next_flow_id, self._next_flow_id + 1
        self._trace.event("s", "DataFlow", name, *source, id=flow_id)
        self._trace.event("t", "DataFlow", name, *target, id=flow_id)

    # -- memory ---------------------------------------------------------------------------

    def _show_memory_counters(self):
        """Per allocator, a counter of the bytes its live tensors hold."""
        changes = collections.defaultdict(list)
        for tensor in self._tensors.values():
            self._trace.event("D", "Tensor", tensor.name, tensor.pid, 0, tensor.last_unref,
                              id=tensor.object_id)
            changes[tensor.allocator].append((tensor.create_time, tensor.num_bytes,
                                              tensor.name))
            changes[tensor.allocator].append((tensor.last_unref, -tensor.num_bytes,
                                              tensor.name))
        for allocator, allocator_changes in changes.items():
            self._allocator_maximums[allocator] = self._count(allocator,
                                                              sorted(allocator_changes))

    def _count(self, allocator, changes):
        total, live, peak = 0, set(), AllocationMaximum(0, 0, set())
        for timestamp, num_bytes, name in changes:
            total += num_bytes
            if num_bytes < 0:
                live.discard(name)
            else:
                live.add(name)
            if total > peak.num_bytes:
                peak = AllocationMaximum(timestamp, total, set(live))
            self._trace.event("C", "Memory", allocator, self._allocators_pid, 0, timestamp,
                              args={allocator: total})
        return peak


def _parse_label(label):
    """(name, op, inputs) of a label 'name = Op(input, input)'."""
    match = _LABEL.match(label)
    if match is None:
        return "unknown", "unknown", []
    name, op, inputs = match.groups()
    return name, op, inputs.split(", ") if inputs else []

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from ..api import missing as _missing

__getattr__ = _missing.module_getattr("tf.client.timeline")
