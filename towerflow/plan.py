"""Stage 5: execution plans.

``Session.run`` compiles, once per (fetches, feed keys) signature, a
:class:`Plan`: the subgraph the fetches need (pruned at fed tensors), in
topological order, chains of ops merged into one fused kernel where that
changes nothing but speed (:mod:`.fusion`), each op bound to its device's
kernel, with a real copy
step wherever a value crosses devices. Running a plan is a flat loop over
prebuilt closures on a list of value slots: no graph walking, no name
lookups, no shape inference.
"""

from typing import Any, NamedTuple

import numpy as np

from . import dtypes, errors, float_errors, fusion, kernel_errors, plan_order
from .backends import KernelContext, aligned_memory
from .graph.core import Operation


class StepDetail(NamedTuple):
    """What one step of a plan runs, for tracing (towerflow/tracing.py)."""

    op: Any             # the graph Operation (or FusedOp); a copy's: the copied op
    runtimes: tuple     # (runtime,) of a kernel; (target, source) of a copy
    copied: Any         # the copied Tensor of a copy step, else None
    outputs: list       # (Tensor, slot) of every value the step writes
    inputs: tuple = ()  # the slots the step reads (what a failed kernel was given)


class Plan:
    """A compiled subgraph; ``run(feed_values)`` returns the fetched values."""

    def __init__(self, targets, feeds, placer, runtime_of, resource, fuse=True):
        """``targets``: Tensors and Operations to fetch or run; ``feeds``: the fed
        Tensors in the order their values will be given; ``placer``: a
        placement.Placer; ``runtime_of(device)``: the backend runtime of a
        logical device; ``resource(key, factory)``: per-Session state;
        ``fuse``: merge chains of ops into fused kernels where fusion is on
        (a traced plan does not, so that every op shows)."""
        self._placer = placer
        self._runtime_of = runtime_of
        self._resource = resource
        self._slots = {}          # (tensor, device) -> slot index
        self._initial = []        # slot values known at compile time (constants)
        self._aliases_state = set()
        self._steps = []
        self._step_details = {}   # step -> its StepDetail
        # (tensor, source device, target device) of every cross-device copy:
        # TF's Send/Recv pair, made once per tensor and reading device.
        self.copies = []
        ops = _needed_ops(targets, feeds)
        plan_order.check_run_together(ops)
        self.ops = ops
        self.body_ops = []        # the ops of control-flow bodies, in their own plans
        self._feed_slots, self._feed_checks, self.feed_runtimes = self._bind_feeds(feeds)
        self._feed_placers = [getattr(runtime, "stage_to_device", runtime.to_device)
                              for runtime in self.feed_runtimes]
        self._feeds_placed = _staging_ends(self.feed_runtimes)
        self.units = fusion.fuse(ops, targets, feeds, placer.place,
                                 lambda device: runtime_of(device).kernels) \
            if fuse and fusion.enabled() else ops
        self._read = {tensor for unit in self.units for tensor in unit.inputs} | \
            {target for target in targets if not isinstance(target, Operation)}
        for unit in self.units:
            self._bind_op(unit)
        self._fetchers = [self._fetcher(target) for target in targets]

    # -- running -------------------------------------------------------------------

    def run(self, feed_values):
        slots = self.place_feeds(self.check_feeds(feed_values))
        self.run_steps(slots)
        return self.fetch(slots)

    # The pieces of ``run``, for plan_capture (which captures ``run_steps`` once
    # into a CUDA graph and replays it on the same slots).

    def check_feeds(self, feed_values):
        """The fed values as host arrays of the fed tensors' dtypes, each checked
        against its tensor's static shape (InvalidArgumentError if it differs)."""
        return [check(value) for check, value in zip(self._feed_checks, feed_values)]

    def place_feeds(self, host_values):
        """A new list of value slots holding the plan's constants and the fed
        values, each on its tensor's device."""
        slots = self._initial.copy()
        try:
            for slot, to_device, value in zip(self._feed_slots, self._feed_placers,
                                              host_values):
                slots[slot] = to_device(value)
        finally:    # also after a failed placement: copies before it are queued
            for end_staging in self._feeds_placed:
                end_staging()
        return slots

    @property
    def feed_slots(self):
        return list(self._feed_slots)

    def run_steps(self, slots):
        """Run every step of the plan on ``slots``, NumPy's floating-point
        error reports off as TF's kernels give none (towerflow/float_errors.py);
        the caller's own state is back when this returns."""
        token = float_errors.ignore()
        try:
            self.run_steps_nested(slots)
        finally:
            float_errors.restore(token)

    def run_steps_nested(self, slots):
        """``run_steps`` for a plan run from a step of another plan on the same
        thread (a control-flow body, towerflow/plan_body.py), whose floating-point
        state already holds: entering it again would cost ~1 us per loop turn."""
        step = None
        try:
            with aligned_memory.arrays():
                for step in self._steps:
                    step(slots)
        except Exception as err:  # noqa: BLE001  (a kernel failed: TF's error, naming the op)
            self._raise_step_error(step, err, slots)

    def run_steps_observed(self, slots, observe):
        """Run every step as ``run_steps`` does, each as ``observe(index, step,
        slots)`` (which calls ``step(slots)``): a traced run times them there,
        leaving ``run_steps``, the untraced loop, as it is."""
        step, token = None, float_errors.ignore()
        try:
            with aligned_memory.arrays():
                for index, step in enumerate(self._steps):
                    observe(index, step, slots)
        except Exception as err:  # noqa: BLE001  (re-raised as run_steps does)
            self._raise_step_error(step, err, slots)
        finally:
            float_errors.restore(token)

    def _raise_step_error(self, step, err, slots):
        """Raise the tf.errors exception for ``err``, raised by ``step`` (see
        towerflow/kernel_errors.py), the original as its cause; an OpError
        (named after its op if it named none) as it is."""
        detail = self._step_details.get(step)
        if detail is None:      # not a step's own failure (entering the loop)
            if isinstance(err, errors.OpError):
                raise err
            raise errors.InternalError(None, None, f"{type(err).__name__}: {err}") from err
        # a copy's op is the copied value's producer: not the inputs it explains
        inputs = None if detail.copied is not None else [slots[i] for i in detail.inputs]
        error = kernel_errors.op_error(detail.op, inputs, err, detail.runtimes[0].name)
        if error is err:
            raise err
        raise error from err

    def fetch(self, slots):
        """The fetched values (on the host) from ``slots`` after ``run_steps``."""
        return [fetch(slots) for fetch in self._fetchers]

    def step_ops(self):
        """(op, runtimes) of every step, in order: a kernel step has its device's
        runtime, a copy step (target, source); a copy names the copied op."""
        return [(detail.op, detail.runtimes) for detail in self.step_details()]

    def step_details(self):
        """A StepDetail per step, in order."""
        return [self._step_details[step] for step in self._steps]

    # -- compiling -----------------------------------------------------------------

    def _new_slot(self, value=None):
        self._initial.append(value)
        return len(self._initial) - 1

    def _bind_feeds(self, feeds):
        """(slots, checks, runtimes) of the fed tensors."""
        slots, checks, runtimes = [], [], []
        for tensor in feeds:
            device = self._placer.place(tensor.op)
            slot = self._new_slot()
            self._slots[(tensor, device)] = slot
            self._aliases_state.add(slot)  # the caller's array: fetch a copy
            slots.append(slot)
            checks.append(_feed_check(tensor))
            runtimes.append(self._runtime_of(device))
        return slots, checks, runtimes

    def _bind_op(self, op):
        """Bind a graph op, or a fusion.FusedOp (which knows its device)."""
        device = op.device if isinstance(op, fusion.FusedOp) else self._placer.place(op)
        runtime = self._runtime_of(device)
        in_slots = [self._slot_on(tensor, device) for tensor in op.inputs]
        if self._forwards_without_a_step(op, device, in_slots):
            return
        out_slots = [self._output_slot(tensor, device) for tensor in op.outputs]
        if isinstance(op, fusion.FusedOp):
            for inner, stand_in in op.stand_ins.items():
                self._slots.setdefault((inner, device), self._slots[(stand_in, device)])
        kernel = self._make_kernel(op, runtime)
        self._track_state_aliases(op, in_slots, out_slots)
        if op.type == "Const":
            self._initial[out_slots[0]] = kernel()  # folded: made once, reused every run
            return
        self._add_step(_make_step(kernel, in_slots, out_slots, op.op_def.variadic_outputs), op,
                       runtime, outputs=list(zip(op.outputs, out_slots)), inputs=in_slots)

    def _forwards_without_a_step(self, op, device, in_slots):
        """Identity-like ops share their input's slot and NoOps order nothing in
        a sequential plan: neither needs a step."""
        if op.type == "NoOp":
            return True
        if op.op_def.forwards_input and (op.outputs[0], device) not in self._slots:
            self._slots[(op.outputs[0], device)] = in_slots[0]
            return True
        return False

    def _output_slot(self, tensor, device):
        slot = self._new_slot()
        # NOTE: a fed output keeps its fed value; the op's own result for it
        # (the op runs for its other outputs) goes to a scratch slot.
        self._slots.setdefault((tensor, device), slot)
        return slot

    def _make_kernel(self, op, runtime):
        make = runtime.kernels.get(op.op_def.kernel)
        if make is None:
            raise errors.UnimplementedError(
                None, op, f"No {runtime.name} kernel for op '{op.name}' of type {op.type}")
        ctx = KernelContext(op=op, attrs=op.attrs,
                            output_dtypes=[np.dtype(t.dtype.as_numpy_dtype) for t in op.outputs],
                            device=runtime, resource=self._resource,
                            outputs_used=tuple(tensor in self._read for tensor in op.outputs),
                            compile_body=self._body_compiler(runtime),
                            compile_plan=self._compile_sub_plan)
        return make(ctx)

    def _body_compiler(self, runtime):
        """How a control-flow kernel compiles its bodies: into plans of their
        own, on this plan's placer, runtimes and Session state."""
        def compile_body(body, saved=None):
            from .plan_body import BodyPlan  # plan_body builds on this module
            compiled = BodyPlan(body, runtime, self._placer, self._runtime_of, self._resource,
                                saved)
            self.body_ops.extend(compiled.plan.ops + compiled.plan.body_ops)
            return compiled
        return compile_body

    def _compile_sub_plan(self, targets, feeds):
        """A plan of the same Session: ``run(values of feeds)`` -> values of targets
        (tf.data's map and filter functions, traced on placeholders)."""
        return Plan(targets, feeds, self._placer, self._runtime_of, self._resource)

    def _slot_on(self, tensor, device):
        """The slot holding ``tensor`` on ``device``, adding a copy step if it
        is produced elsewhere."""
        slot = self._slots.get((tensor, device))
        if slot is not None:
            return slot
        source_device = self._placer.place(tensor.op)
        source = self._slots[(tensor, source_device)]
        target = self._new_slot()
        self._slots[(tensor, device)] = target
        target_runtime, source_runtime = self._runtime_of(device), self._runtime_of(source_device)
        copy = _copy_step(target_runtime, source_runtime, source, target)
        self.copies.append((tensor, source_device, device))
        if self._initial[source] is not None:
            copy(self._initial)  # a constant: copy it once, at compile time
        else:
            self._add_step(copy, tensor.op, (target_runtime, source_runtime), copied=tensor,
                           outputs=[(tensor, target)], inputs=[source])
        return target

    def _track_state_aliases(self, op, in_slots, out_slots):
        """Remember which slots may share memory with Session state or with
        folded constants, so fetching them returns a copy."""
        if op.op_def.aliases_state or \
                op.op_def.aliases_input and in_slots and in_slots[0] in self._aliases_state:
            self._aliases_state.update(out_slots)

    def _add_step(self, step, op, runtimes, copied=None, outputs=(), inputs=()):
        """``runtimes``: the step's device runtime, or (target, source) of a copy."""
        self._steps.append(step)
        runtimes = runtimes if isinstance(runtimes, tuple) else (runtimes,)
        self._step_details[step] = StepDetail(op, runtimes, copied, list(outputs),
                                              tuple(inputs))

    def _fetcher(self, target):
        if isinstance(target, Operation):  # run it, fetch None
            return _fetch_none
        device = self._placer.place(target.op)
        slot = self._slots[(target, device)]
        runtime = self._runtime_of(device)
        copy = slot in self._aliases_state
        return _fetch_value(slot, runtime, copy, target.shape.ndims == 0)


def _staging_ends(runtimes):
    """Each distinct runtime's ``end_staging`` (a GPU's: one host callback keeps
    the pinned buffers of all the values staged since alive until copied)."""
    ends = {id(runtime): getattr(runtime, "end_staging", None) for runtime in runtimes}
    return [end for end in ends.values() if end is not None]


def _needed_ops(targets, feeds):
    """The ops the targets depend on (data and control edges), stopping at fed
    tensors, in creation order (a topological order: inputs exist before users)."""
    fed = set(feeds)
    needed = set()
    stack = [target if isinstance(target, Operation) else target.op
             for target in targets if target not in fed]
    while stack:
        op = stack.pop()
        if op in needed:
            continue
        needed.add(op)
        stack.extend(tensor.op for tensor in op.inputs if tensor not in fed)
        stack.extend(op.control_inputs)
    unfed = sorted((op for op in needed if op.type == "Placeholder"), key=lambda op: op._id)
    if unfed:
        raise errors.InvalidArgumentError(None, unfed[0], _unfed_message(unfed[0]))
    return plan_order.overlapping_order(sorted(needed, key=lambda op: op._id))


def _unfed_message(op):
    tensor = op.outputs[0]
    shape = tensor.shape
    dims = "<unknown>" if shape.dims is None else \
        "[" + ",".join("?" if d is None else str(d) for d in shape.dims) + "]"
    return (f"You must feed a value for placeholder tensor '{op.name}' with dtype "
            f"{tensor.dtype.name} and shape {dims}")


def _feed_check(tensor):
    """A function that checks a fed value against ``tensor``'s dtype and static
    shape and returns it as a host array of that dtype."""
    dtype = np.dtype(tensor.dtype.as_numpy_dtype)
    dims = tensor.shape.dims
    known = None if dims is None else [(i, d) for i, d in enumerate(dims) if d is not None]
    rank = None if dims is None else len(dims)

    def check(value):
        array = value if type(value) is np.ndarray and value.dtype == dtype and \
            dtype != object else _coerce_feed(value, dtype, tensor)
        if rank is not None and (array.ndim != rank or
                                 any(array.shape[i] != d for i, d in known)):
            raise errors.InvalidArgumentError(
                None, tensor.op, f"Cannot feed value of shape {array.shape} for Tensor "
                f"'{tensor.name}', which has shape '{tensor.shape}'")
        return array
    return check


def _coerce_feed(value, dtype, tensor):
    if tensor.dtype is dtypes.string:
        return _coerce_string_feed(value, tensor)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise errors.InvalidArgumentError(
            None, tensor.op, f"Cannot feed {value!r} to Tensor '{tensor.name}': {err}") from None
    if array.dtype == dtype:
        return array
    int_bounds = dtypes.python_int_bounds(value, array)
    if int_bounds is not None and tensor.dtype.is_integer:
        _check_fed_ints_fit(value, int_bounds, tensor)
        return array.astype(dtype)
    # 'same_kind' allows int -> float and float64 -> float32, refuses float -> int.
    if dtypes.numpy_kind(array.dtype) not in "biuf" or \
            not np.can_cast(array.dtype, dtype, "same_kind"):
        raise errors.InvalidArgumentError(
            None, tensor.op, f"Cannot feed value of dtype {array.dtype} to Tensor "
            f"'{tensor.name}' of dtype {tensor.dtype.name}: not castable without losing "
            "information (cast the value first)")
    return array.astype(dtype)


class FedIntOutOfRangeError(errors.InvalidArgumentError, TypeError):
    """TensorFlow 1.x raises TypeError for a fed Python int its placeholder
    cannot hold; towerflow's feed errors are InvalidArgumentErrors: this is both."""


def _check_fed_ints_fit(value, int_bounds, tensor):
    """Refuse fed Python ints that the tensor's dtype cannot hold, which NumPy
    would wrap around; Python ints that fit cast even to a narrower dtype."""
    outside = dtypes.int_outside(int_bounds, tensor.dtype)
    if outside is not None:
        raise FedIntOutOfRangeError(
            None, tensor.op, f"Cannot feed value {dtypes.short_repr(value)} to Tensor "
            f"'{tensor.name}' of dtype {tensor.dtype.name}: {outside} is outside its range "
            f"{dtypes.int_range_text(tensor.dtype)}. Try explicitly setting the type of the "
            "feed tensor to a larger type (e.g. int64).")


def _coerce_string_feed(value, tensor):
    """A fed value as a string tensor holds it: an object array of bytes."""
    try:
        return dtypes.to_string_array(value)
    except TypeError as err:
        raise errors.InvalidArgumentError(
            None, tensor.op, f"Cannot feed {value!r} to Tensor '{tensor.name}' of dtype "
            f"string: {err}") from None


def _make_step(kernel, in_slots, out_slots, returns_sequence=False):
    """A closure running ``kernel`` on the slots; specialised by arity because
    this is the innermost loop of every ``Session.run``."""
    if len(out_slots) == 1 and not returns_sequence:
        out = out_slots[0]
        if not in_slots:
            def step(slots):
                slots[out] = kernel()
        elif len(in_slots) == 1:
            (a,) = in_slots

            def step(slots):
                slots[out] = kernel(slots[a])
        elif len(in_slots) == 2:
            a, b = in_slots

            def step(slots):
                slots[out] = kernel(slots[a], slots[b])
        else:
            def step(slots):
                slots[out] = kernel(*[slots[i] for i in in_slots])
        return step
    if not out_slots:
        def step(slots):
            kernel(*[slots[i] for i in in_slots])
        return step

    def step(slots):
        for slot, value in zip(out_slots, kernel(*[slots[i] for i in in_slots])):
            slots[slot] = value
    return step


def _copy_step(target_runtime, source_runtime, source, target):
    copy_from = target_runtime.copy_from

    def step(slots):
        slots[target] = copy_from(slots[source], source_runtime)
    return step


def _fetch_none(slots):
    return None


def _fetch_value(slot, runtime, copy, is_scalar):
    to_host = runtime.to_host
    if is_scalar:  # NumPy scalars are immutable: no copy needed
        return lambda slots: to_host(slots[slot])[()]
    if copy:
        return lambda slots: np.array(to_host(slots[slot]), copy=True)
    return lambda slots: to_host(slots[slot])
