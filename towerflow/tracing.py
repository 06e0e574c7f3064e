"""Traced runs: ``Session.run(..., options=RunOptions(trace_level=FULL_TRACE),
run_metadata=metadata)`` runs its plan step by step, timing each, and fills
``metadata.step_stats`` with one DeviceStepStats per device (see
towerflow/step_stats.py).

A traced plan is compiled apart from the untraced one (cached beside it), with
fusion off and never captured as a CUDA graph, so every op of the graph shows
as itself; the untraced loop (``Plan.run_steps``) has no timing in it.

Times: a CPU step is timed on the host (``time.perf_counter_ns``); a GPU step
by CUDA events recorded on its device's stream before and after it, read once
the run is over, so a kernel's time is its stream's time, not its launch's.
A copy between devices is a step of its own (``MEMCPYHtoD``, ``MEMCPYDtoH``,
``MEMCPYDtoD``, or ``MEMCPYHtoH`` between logical CPUs), on the GPU whose
stream runs it (else the receiving CPU); the towers' all-reduce ops are named
``allreduce/<op name>``::

    tracer = PlanTracer(plan)
    values, step_stats = tracer.run(feed_values)
"""

import time

from .step_stats import (
    AllocationDescription,
    DeviceStepStats,
    NodeExecStats,
    NodeOutput,
    StepStats,
    TensorDescription,
    data_type,
    shape_proto,
)

ALL_REDUCE_PREFIX = "allreduce/"
_ALL_REDUCE_SCOPE = "all_reduce_"        # towerflow.parallel's communicators' name scopes


class HostTimer:
    """Times steps that run on the host: marks are perf_counter nanoseconds."""

    def begin(self):
        pass

    mark = staticmethod(time.perf_counter_ns)

    def finish(self):
        pass

    @staticmethod
    def perf_ns(mark):
        return mark


_HOST_TIMER = HostTimer()


class PlanTracer:
    """Runs ``plan`` (a plan.Plan) with every step timed; see the module
    docstring."""

    def __init__(self, plan):
        self._plan = plan
        details = plan.step_details()
        names = _node_names(details)
        timers = {}         # runtime id -> its timer: one per device (one base event)

        def timer_of(runtime):
            if id(runtime) not in timers:
                make = getattr(runtime, "trace_timer", None)
                timers[id(runtime)] = make() if make is not None else _HOST_TIMER
            return timers[id(runtime)]
        self._records = [_StepRecord(detail, names, timer_of) for detail in details]
        self._timers = list({id(timer): timer for timer in timers.values()}.values())

    def run(self, feed_values):
        """(fetched values, StepStats) of one traced run."""
        plan = self._plan
        slots = plan.place_feeds(plan.check_feeds(feed_values))
        marks = [None] * len(self._records)
        for timer in self._timers:
            timer.begin()
        epoch_offset_ns = time.time_ns() - time.perf_counter_ns()
        records = self._records

        def observe(index, step, slots):
            timer = records[index].timer
            before = timer.mark()
            step(slots)
            marks[index] = (before, timer.mark(), _output_values(records[index], slots))
        plan.run_steps_observed(slots, observe)
        for timer in self._timers:
            timer.finish()
        values = plan.fetch(slots)
        return values, self._step_stats(marks, epoch_offset_ns)

    def _step_stats(self, marks, epoch_offset_ns):
        by_device = {}
        for record, (before, after, outputs) in zip(self._records, marks):
            start_ns = record.timer.perf_ns(before) + epoch_offset_ns
            end_ns = record.timer.perf_ns(after) + epoch_offset_ns
            stats = by_device.setdefault(record.device, DeviceStepStats(device=record.device))
            stats.node_stats.append(record.node_stats(start_ns, end_ns, outputs))
        return StepStats(dev_stats=by_device.values())


class _StepRecord:
    """How one step shows in the step stats: its name, label, device, timer."""

    def __init__(self, detail, names, timer_of):
        op, runtimes, copied = detail.op, detail.runtimes, detail.copied
        self.outputs = detail.outputs
        if copied is None:
            self.node_name = names.get(op, op.name)
            op_type = _all_reduce_type(op.type) if self.node_name.startswith(
                ALL_REDUCE_PREFIX) else op.type
            inputs = [_input_ref(tensor, names) for tensor in op.inputs] + \
                [f"^{names.get(control, control.name)}" for control in op.control_inputs]
            timed = runtimes[0]
        else:
            target, source = runtimes
            self.node_name = f"{_input_ref(copied, names)}/_copy_to_{_short(target)}"
            op_type = "MEMCPY" + _side(source) + "to" + _side(target)
            inputs = [_input_ref(copied, names)]
            timed = target if _side(target) == "D" or _side(source) == "H" else source
        self.timeline_label = f"{self.node_name} = {op_type}({', '.join(inputs)})"
        self.device = timed.name
        self.timer = timer_of(timed)
        self.allocator = _allocator_name(timed)

    def node_stats(self, start_ns, end_ns, outputs):
        start_us = start_ns // 1000
        duration_us = max(0, end_ns // 1000 - start_us)
        return NodeExecStats(node_name=self.node_name, all_start_micros=start_us,
                             op_start_rel_micros=0, op_end_rel_micros=duration_us,
                             all_end_rel_micros=duration_us, scheduled_micros=start_us,
                             timeline_label=self.timeline_label,
                             output=[self._output(slot, tensor, value)
                                     for slot, ((tensor, _), value)
                                     in enumerate(zip(self.outputs, outputs))])

    def _output(self, slot, tensor, value):
        shape = getattr(value, "shape", ())
        nbytes = int(getattr(value, "nbytes", 0))
        allocation = AllocationDescription(requested_bytes=nbytes, allocated_bytes=nbytes,
                                           allocator_name=self.allocator)
        # The graph tensor's dtype: a value's NumPy dtype would call strings "object".
        description = TensorDescription(
            dtype=data_type(tensor.dtype.name), shape=shape_proto(shape),
            allocation_description=allocation)
        return NodeOutput(slot=slot, tensor_description=description)


def _output_values(record, slots):
    return [slots[slot] for _, slot in record.outputs]


class _Names(dict):
    """{op: node name} of the all-reduce members; ``ran``: the ops with a step."""

    def __init__(self, names, ran):
        super().__init__(names)
        self.ran = ran


def _node_names(details):
    ran = {detail.op for detail in details if detail.copied is None}
    return _Names({op: ALL_REDUCE_PREFIX + op.name for op in ran if is_all_reduce(op)}, ran)


def is_all_reduce(op):
    """Whether ``op`` sums across towers: a collective, or an op of one of
    towerflow.parallel's all-reduce name scopes (``all_reduce_cpu/sum_0``)."""
    if "AllReduce" in op.type:
        return True
    return any(part.startswith(_ALL_REDUCE_SCOPE) for part in op.name.split("/")[:-1])


def _all_reduce_type(op_type):
    return op_type if "AllReduce" in op_type else f"AllReduce{op_type}"


def _input_ref(tensor, names):
    """A tensor as TF's labels write an input: 'name' for output 0, 'name:i'.
    An identity-like op that ran no step (the plan reads its input's value)
    stands for its input, so that the Timeline's dataflow finds the producer."""
    while tensor.op not in names.ran and tensor.op.op_def.forwards_input and tensor.op.inputs:
        tensor = tensor.op.inputs[0]
    name = names.get(tensor.op, tensor.op.name)
    index = tensor.value_index
    return name if index == 0 else f"{name}:{index}"


def _short(runtime):
    device = runtime.logical_device
    return f"{device.device_type.lower()}_{device.index}"


def _side(runtime):
    """'D' for a GPU (device memory), 'H' for a CPU (host memory)."""
    return "D" if runtime.logical_device.device_type == "GPU" else "H"


def _allocator_name(runtime):
    device = runtime.logical_device
    return "cpu" if device.device_type == "CPU" else f"GPU_{device.index}_pool"
