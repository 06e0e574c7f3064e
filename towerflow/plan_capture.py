"""Stage 5, on GPUs: a step plan captured once into a CUDA graph, then replayed.

A plan whose steps all run on logical GPUs of one physical GPU is run as
usual the first time it is given a signature of fed shapes (that run makes
the kernels' lazy state for those shapes: compiled kernels, cached vectors
as long as the batch, NCCL communicators; a capture runs nothing, so state
made while capturing would hold memory nobody wrote). On its next run with
that signature its steps are *captured*: the device backend records every
kernel, copy and collective they queue into one CUDA graph, and from then on
each ``Session.run`` is

1. the fed values checked and copied into the graph's own input buffers,
2. one graph launch (instead of a Python call and a kernel launch per op),
3. the fetched values copied back from the graph's own output buffers.

A graph replays fixed buffers, so a plan is captured once per signature of
fed shapes and dtypes (at most :data:`MAX_GRAPHS_PER_PLAN`), and captured
again if a variable the plan uses was given a new buffer (an ``Assign`` of
a new shape). A capture that runs out of memory leaves only its signature
op by op. Where capture is impossible the plan runs op by op, and the
reason is logged once::

    CUDA graphs: not capturing the plan of 3 fetches: op 'lr' (LearningRateSchedule)
    calls a Python function on each step's value

Capture is on by default (``ConfigProto(cuda_graphs=True)``); pass
``cuda_graphs=False``, or set ``TOWERFLOW_CUDA_GRAPHS=0``, to run every step
op by op.

The backend side is a runtime's ``capture_steps(runtimes, run)`` (see
``CupyDevice``): it returns an object with ``replay()`` and ``stage(buffer,
host_value)``, or raises with the reason capture failed.
"""


from . import errors, switches
from .backends.kernels import VariableCell
from .log import logger

MAX_GRAPHS_PER_PLAN = 4
WARMUP_RUNS = 1

# Ops whose kernels read a device value on the host: a graph cannot replay
# that (capture would fail at the read), so plans with them run op by op.
# NOTE: every other kernel of a training step computes on the device (the
# built-in schedules, loss scaling's gate, a fed batch-norm flag or dropout
# rate, the towers' weights): tests/test_host_reads.py traps any host read.
# NcclAllReduceStart is not listed: its fork to a communication stream and
# its wait's join are captured as CUDA captures across streams (one GPU per
# process, NCCL between processes); towers on several GPUs of one process are
# never captured (static_reason: their steps span several physical GPUs).
_HOST_READS = {
    "Assert": "reads its condition on the host",
    "CheckNumerics": "reads on the host whether its input is all finite",
    "LearningRateSchedule": "calls a Python function on each step's value",
    "MpiAllReduce": "exchanges host arrays over MPI",
    "MpiAllReduceStart": "exchanges host arrays over MPI",
    "MpiAllReduceWait": "exchanges host arrays over MPI",
    "MpiBroadcast": "exchanges host arrays over MPI",
    "MpiAllGather": "exchanges host arrays over MPI",
    "TruncatedNormal": "redraws its tails until the host sees none left",
    # tf.unique and tf.boolean_mask (and its gradient): value-sized outputs
    "Unique": "reads its output's size on the host",
    "BooleanMask": "reads its output's size on the host",
    "BooleanMaskGrad": "reads the mask's count on the host",
    "While": "reads its loop condition on the host each iteration",
    "WhileGrad": "runs its backward loop from the host",
    "If": "reads its predicate on the host",
    "DynamicReshape": "reads its target shape on the host",
    "DynamicFill": "reads its dims on the host",
    "DynamicTile": "reads its multiples on the host",
    "DynamicTileGrad": "reads its multiples on the host",
    **{op_type + "Dims": "reads its shape on the host" for op_type in (
        "RandomStandardNormal", "TruncatedNormal", "RandomUniform", "RandomUniformInt")},
}


def enabled(config):
    """Whether a Session with ``config`` captures its GPU plans."""
    if not switches.on("TOWERFLOW_CUDA_GRAPHS"):
        return False
    return bool(getattr(config, "cuda_graphs", True))


def can_capture(plan):
    """Whether any runtime of ``plan`` captures graphs (else leave it alone)."""
    return any(_captures(runtime) for _, runtimes in plan.step_ops() for runtime in runtimes)


class CapturingPlan:
    """``plan`` run op by op for its first runs, then replayed as CUDA graphs
    (one per signature of fed shapes); ``state_cells()`` lists the Session's
    variable cells. Same interface as the Plan it wraps: ``run``, ``ops``."""

    def __init__(self, plan, state_cells, description):
        self._plan = plan
        self._state_cells = state_cells
        self._description = description
        self._runtimes = _plan_runtimes(plan)
        self._graphs = {}
        self._eager_runs = {}       # signature -> runs op by op so far
        self._out_of_memory = set()     # signatures whose capture ran out of memory
        self.reason = static_reason(plan, self._runtimes)
        if self.reason is not None:
            self._log(self.reason)

    @property
    def ops(self):
        return self._plan.ops

    @property
    def captured(self):
        """How many graphs this plan holds (one per fed signature)."""
        return len(self._graphs)

    def run(self, feed_values):
        plan = self._plan
        if self.reason is not None:
            return plan.run(feed_values)
        host_values = plan.check_feeds(feed_values)
        key = tuple((value.shape, value.dtype.str) for value in host_values)
        if key in self._out_of_memory:
            return self._eager(host_values, key)
        if self._eager_runs.get(key, 0) < WARMUP_RUNS:     # every signature warms up
            self._eager_runs[key] = self._eager_runs.get(key, 0) + 1
            return plan.fetch(self._run_steps(host_values))
        graph = self._graphs.get(key)
        if graph is not None and graph.stale():
            del self._graphs[key]
            graph = None
        if graph is None:
            if len(self._graphs) >= MAX_GRAPHS_PER_PLAN:
                return self._give_up(f"more than {MAX_GRAPHS_PER_PLAN} signatures of fed "
                                     f"shapes (the latest: {[list(s) for s, _ in key]})",
                                     host_values)
            graph = self._capture(host_values, key)
            if graph is None:
                return self._eager(host_values, key)
            self._graphs[key] = graph
        else:
            graph.stage(host_values)
        graph.replay()
        return plan.fetch(graph.slots)

    # -- capturing -------------------------------------------------------------------

    def _capture(self, host_values, key):
        """A _CapturedStep for these fed values (signature ``key``), or None
        (the reason logged) if this plan, or this signature, cannot be captured."""
        plan = self._plan
        slots = plan.place_feeds(host_values)     # the graph's own input buffers
        cells = [cell for cell in self._state_cells() if cell.value is not None]
        before = [cell.value for cell in cells]
        try:
            replayer = self._runtimes[0].capture_steps(self._runtimes,
                                                       lambda: plan.run_steps(slots))
        except Exception as err:  # noqa: BLE001  (any failure: run op by op, say why)
            _restore(cells, before)   # nothing ran: undo any cell a kernel rebound
            self._failed(err, key)
            return None
        rebound = [cell for cell, value in zip(cells, before) if cell.value is not value]
        if rebound:
            _restore(cells, before)
            self._set_reason(f"{len(rebound)} variable(s) got a new buffer while the step "
                             "was captured (an Assign of a new shape?)")
            return None
        return _CapturedStep(replayer, slots, plan.feed_slots, cells)

    def _failed(self, err, key):
        """A capture out of memory leaves this signature op by op (the graphs of
        the others replay on); any other failure, the whole plan."""
        reason = f"capture failed: {_one_line(err)}"
        if isinstance(err, errors.ResourceExhaustedError):
            self._out_of_memory.add(key)
            self._log(f"{reason} (fed shapes {[list(shape) for shape, _ in key]} run "
                      "op by op)")
        else:
            self._set_reason(reason)

    def _eager(self, host_values, key=None):
        """Run op by op after a failed capture (which ran nothing). If this run
        fails too, the error was the step's own: capture may be tried again."""
        try:
            slots = self._run_steps(host_values)
        except Exception:
            self.reason = None
            self._eager_runs.clear()
            self._out_of_memory.discard(key)
            raise
        return self._plan.fetch(slots)

    def _run_steps(self, host_values):
        slots = self._plan.place_feeds(host_values)
        self._plan.run_steps(slots)
        return slots

    def _give_up(self, reason, host_values):
        self._set_reason(reason)
        self._graphs.clear()
        return self._eager(host_values)

    def _set_reason(self, reason):
        self.reason = reason
        self._log(reason)

    def _log(self, reason):
        logger.info("CUDA graphs: not capturing the plan of %s: %s", self._description, reason)


class _CapturedStep:
    """One captured graph: its slots (inputs, outputs, intermediates), and the
    variable buffers it was captured on."""

    def __init__(self, replayer, slots, feed_slots, cells):
        self._replayer = replayer
        self.slots = slots
        self._feed_buffers = [slots[slot] for slot in feed_slots]
        self._cells = [(cell, cell.value) for cell in cells]

    def stale(self):
        """Whether a variable now lives in another buffer than the graph's."""
        return any(cell.value is not value for cell, value in self._cells)

    def stage(self, host_values):
        for buffer, value in zip(self._feed_buffers, host_values):
            self._replayer.stage(buffer, value)

    def replay(self):
        self._replayer.replay()


def static_reason(plan, runtimes):
    """Why ``plan`` cannot be captured, judged before trying (None: try)."""
    for op, step_runtimes in plan.step_ops():
        outside = [runtime for runtime in step_runtimes if not _captures(runtime)]
        if outside:
            return f"op '{op.name}' ({op.type}) runs on {outside[0].name}, outside the GPU"
        if op.type in _HOST_READS:
            return f"op '{op.name}' ({op.type}) {_HOST_READS[op.type]}"
    for runtime in plan.feed_runtimes:
        if not _captures(runtime):
            return f"a fed value is placed on {runtime.name}, outside the GPU"
    groups = sorted({runtime.capture_group for runtime in runtimes})
    if len(groups) > 1:
        return f"its steps span {len(groups)} physical GPUs ({groups})"
    return None


def _captures(runtime):
    return getattr(runtime, "capture_group", None) is not None


def _plan_runtimes(plan):
    """The plan's distinct runtimes, in the order its steps first use them."""
    seen = {}
    for _, runtimes in plan.step_ops():
        for runtime in runtimes:
            seen.setdefault(id(runtime), runtime)
    for runtime in plan.feed_runtimes:
        seen.setdefault(id(runtime), runtime)
    return list(seen.values())


def session_cells(state):
    """The VariableCells among a Session's state values."""
    return lambda: [value for value in state.values() if isinstance(value, VariableCell)]


def _restore(cells, values):
    for cell, value in zip(cells, values):
        cell.value = value


def _one_line(err):
    text = " ".join(str(getattr(err, "message", err)).split())
    if not isinstance(err, errors.OpError):     # an OpError's text names the op
        text = f"{type(err).__name__}: {text}"
    return text[:300]
