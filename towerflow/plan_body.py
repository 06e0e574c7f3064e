"""Stage 5, for control flow: a function body compiled into a plan.

The kernel of a While or If op (towerflow/backends/control_flow_kernels.py)
asks, while the outer plan compiles, for each of its bodies as a
:class:`BodyPlan`: an ordinary :class:`~towerflow.plan.Plan` whose feeds
are the body's BodyArgs and whose targets are its outputs, placed by the
same placer (copies inserted as in any plan) and sharing the Session's
state. ``run(values)`` is the plan's flat loop of steps on a fresh copy of
its slots, the values already on the device of the op that runs the body::

    cond = BodyPlan(cond_body, runtime, placer, runtime_of, resource)
    while cond.run(values)[0]: ...

With ``saved`` (forward values a gradient reads, see
towerflow/graph/function_body.py; a list, maybe empty, when the caller keeps
what ``run`` returns for a gradient) the plan also fetches those: ``run``
returns the body's outputs followed by their values. NOTE: kept values are
references, so any of them that may share a variable's buffer (an assign's
result, a variable returned as a loop value) is copied: a later assign
changes that buffer in place.
"""

from . import dtypes
from .plan import Plan


class BodyPlan:
    """``body`` (a FunctionBody) compiled for an op running on ``runtime``."""

    def __init__(self, body, runtime, placer, runtime_of, resource, saved=None):
        targets = list(body.outputs) + list(saved or ())
        plan = Plan(targets, body.feed_tensors(), placer, runtime_of, resource)
        self.plan = plan
        self._initial = plan._initial
        self._run_steps = plan.run_steps_nested     # run from a step: see there
        self._feed_slots = plan.feed_slots
        moves = [_mover(runtime, target) for target in plan.feed_runtimes]
        self._feed_moves = None if all(move is None for move in moves) else moves
        self._output_slots = [_output_slot(plan, tensor, placer) for tensor in targets]
        moves = [_mover(runtime_of(placer.place(tensor.op)), runtime) for tensor in targets]
        self._output_moves = None if all(move is None for move in moves) else moves
        self._kept_copies = None if saved is None else \
            [_state_copier(runtime, tensor, move) for tensor, move in zip(targets, moves)]
        if self._kept_copies is not None and all(copy is None for copy in self._kept_copies):
            self._kept_copies = None

    def run(self, values):
        """The body's outputs (on the op's device) for args ``values``, then
        the saved values."""
        slots = self._initial.copy()
        if self._feed_moves is not None:    # a body arg placed on another device
            values = [value if move is None else move(value)
                      for move, value in zip(self._feed_moves, values)]
        for slot, value in zip(self._feed_slots, values):
            slots[slot] = value
        self._run_steps(slots)
        outputs = [slots[slot] for slot in self._output_slots]
        if self._output_moves is not None:
            outputs = [value if move is None else move(value)
                       for move, value in zip(self._output_moves, outputs)]
        if self._kept_copies is not None:
            outputs = [value if copy is None else copy(value)
                       for copy, value in zip(self._kept_copies, outputs)]
        return outputs


def _mover(source, target):
    """None when no copy is needed, else a copy from ``source`` to ``target``."""
    if source is target:
        return None
    return lambda value: target.copy_from(value, source)


def _state_copier(runtime, tensor, move):
    """A copy of a kept value that may be a variable's buffer, else None (also
    when the value moves to ``runtime``: the move copies it)."""
    if move is not None or not _may_alias_state(tensor):
        return None
    return lambda value: runtime.copy_from(value, runtime)


def _may_alias_state(tensor):
    """Whether ``tensor``'s value may be Session state (a variable's buffer):
    made by an op that returns state, through views and identities, and
    through captures to the outer tensor they stand for."""
    while True:
        op = tensor.op
        if tensor.dtype is dtypes.variant:      # a loop's saved iterations: a list
            return False
        if op.op_def.aliases_state:
            return True
        if op.type == "BodyArg":
            outer = _captured(op)
            if outer is None:
                return False    # a loop variable: last iteration's output, copied there
            tensor = outer
        elif op.op_def.aliases_input and op.inputs:
            tensor = op.inputs[0]
        else:
            return False


def _captured(arg_op):
    """The outer tensor a capture BodyArg stands for (None for a loop arg)."""
    body = arg_op._body
    for outer, arg in body.captures.items():
        if arg.op is arg_op:
            return outer
    return None


def _output_slot(plan, tensor, placer):
    return plan._slots[(tensor, placer.place(tensor.op))]
