"""Kernels of the training ops, written once against an array module ``xp``.

``build_training_kernels(xp)`` returns ``{kernel name: make_kernel}`` in the
protocol of :mod:`towerflow.backends.kernels`. The optimizer kernels update a
variable (and its slots) **in place** in the Session's ``VariableCell``: the
buffer a read returns is the one the update writes, so a training step
allocates nothing but one scratch buffer per op (and, for an update gated by
loss scaling, copies of the old values), made on the first step::

    kernel = table["ApplyGradientDescent"](ctx)
    kernel(learning_rate, grad)        # var -= learning_rate * grad, in place
"""

import math

import numpy as np

from .. import errors
# NOTE: a module import, not `from .kernels import VariableCell`: kernels.py
# imports this module while it is itself still being imported.
from . import kernels as _kernels


def build_training_kernels(xp, fused_updates=None):
    """The training kernel table for array module ``xp``. ``fused_updates``
    (the GPU's, see cupy_backend.FusedUpdates; the CPU's,
    native_updates.CompiledUpdates) replaces an update's arithmetic, a chain of
    ufuncs here, with one elementwise kernel: each of its methods returns
    False where it does not take the arrays, and the chain runs."""
    return {
        "ApplyGradientDescent": lambda ctx: _gated(
            xp, ctx, _gradient_descent_kernel(xp, ctx, fused_updates)),
        "ApplyMomentum": lambda ctx: _gated(xp, ctx, _momentum_kernel(xp, ctx, fused_updates)),
        "ApplyAdam": lambda ctx: _gated(xp, ctx, _adam_kernel(xp, ctx, fused_updates)),
        "ApplyRMSProp": lambda ctx: _gated(xp, ctx, _rms_prop_kernel(xp, ctx, fused_updates)),
        "ApplyCenteredRMSProp": lambda ctx: _gated(xp, ctx, _centered_rms_prop_kernel(xp, ctx)),
        "ApplyAdagrad": lambda ctx: _gated(xp, ctx, _adagrad_kernel(xp, ctx, fused_updates)),
        "ApplyAdadelta": lambda ctx: _gated(xp, ctx, _adadelta_kernel(xp, ctx)),
        "ApplyFtrl": lambda ctx: _gated(xp, ctx, _ftrl_kernel(xp, ctx)),
        "LearningRateSchedule": lambda ctx: _schedule_kernel(xp, ctx),
    }


def _gated(xp, ctx, apply):
    """``apply`` for an ungated op; for a gated one (its last input a bool
    scalar, see training_ops._apply), an update that changes nothing (the
    variable and its slots) where the gate is false.

    On a GPU the gate is never read on the host (the GPU would wait for it,
    and a CUDA graph cannot hold the read): the update always runs, on copies
    kept of the old values, which are then put back where the gate is false.
    On the CPU the gate is already on the host, and is read."""
    if not ctx.attrs.get("gated"):
        return apply
    cell_of = _kernels.VariableCell
    cells = [ctx.resource(("variable", state_op), cell_of)
             for state_op in (ctx.attrs["variable"],) + tuple(ctx.attrs["slots"])]
    kept = ctx.resource(("gate_kept", ctx.op), _Kept)

    def gated(*inputs):
        if any(cell.value is None for cell in cells):
            return apply(*inputs[:-1])     # raises the uninitialized-variable error
        if xp is np:    # NOTE: on the CPU the gate is a host value: no copies needed
            return apply(*inputs[:-1]) if bool(inputs[-1]) else cells[0].value
        olds = kept.save(xp, cells)
        # NOTE: a skipped step's gradients are inf or NaN (loss scaling):
        # the arithmetic on them is thrown away, so NumPy need not warn.
        with np.errstate(all="ignore"):
            result = apply(*inputs[:-1])
        skip = xp.logical_not(inputs[-1])
        for cell, old in zip(cells, olds):
            xp.copyto(cell.value, old, where=skip)
        return result
    return gated


class _Kept:
    """Copies of a gated update's variable and slots, taken before each step
    into buffers made once (again only if a variable changes shape)."""

    __slots__ = ("buffers",)

    def __init__(self):
        self.buffers = []

    def save(self, xp, cells):
        values = [cell.value for cell in cells]
        if [b.shape for b in self.buffers] != [v.shape for v in values]:
            self.buffers = [xp.empty_like(value) for value in values]
        for buffer, value in zip(self.buffers, values):
            xp.copyto(buffer, value)
        return self.buffers


class Scratch:
    """One temporary buffer per op and Session, shaped like the variable; made
    again only if the variable changes shape (its dtype never changes)."""

    __slots__ = ("buffer",)

    def __init__(self):
        self.buffer = None

    def renew(self, xp, like):
        self.buffer = xp.empty_like(like)
        return self.buffer


def _setup(ctx):
    """(variable cell, [slot cell ...], scratch, fail) for one apply op, where
    ``fail(var, grad, *slots)`` raises the error that explains a bad step."""
    cell_of = _kernels.VariableCell
    variable_op, slot_ops = ctx.attrs["variable"], ctx.attrs["slots"]
    var_cell = ctx.resource(("variable", variable_op), cell_of)
    slot_cells = [ctx.resource(("variable", slot_op), cell_of) for slot_op in slot_ops]
    scratch = ctx.resource(("train_scratch", ctx.op), Scratch)
    op = ctx.op

    def fail(var, grad, *slots):
        for state_op, value in zip((variable_op,) + tuple(slot_ops), (var,) + slots):
            if value is None:
                raise errors.FailedPreconditionError(
                    None, op, f"Attempting to use uninitialized value {state_op.name} in "
                    f"'{op.name}': run its initializer first "
                    "(sess.run(tf.global_variables_initializer()))")
        raise errors.InvalidArgumentError(
            None, op, f"'{op.name}': var and grad do not have the same shape: "
            f"{tuple(var.shape)} and {tuple(grad.shape)}")
    return var_cell, slot_cells, scratch, fail


# NOTE: the kernels below inline their checks (no helper calls): they run once
# per variable per step, and on small variables Python calls cost more than
# the arithmetic.

def _decay_factor(learning_rate, weight_decay):
    """Decoupled weight decay (SGDW / AdamW) multiplies var by this before the
    update: 1 - lr * weight_decay; None without weight decay."""
    return 1 - learning_rate * weight_decay if weight_decay else None


def _gradient_descent_kernel(xp, ctx, fused_updates=None):
    var_cell, _, scratch, fail = _setup(ctx)
    weight_decay = ctx.attrs["weight_decay"]
    multiply, subtract = xp.multiply, xp.subtract

    def apply(learning_rate, grad):
        var = var_cell.value
        if var is None or grad.shape != var.shape:
            fail(var, grad)
        decay = _decay_factor(learning_rate, weight_decay)
        if fused_updates is not None and fused_updates.gradient_descent(
                var, grad, learning_rate, decay):
            return var
        if decay is not None:
            multiply(var, decay, out=var)
        step = scratch.buffer
        if step is None or step.shape != var.shape:
            step = scratch.renew(xp, var)
        multiply(grad, learning_rate, out=step)
        return subtract(var, step, out=var)
    return apply


def _momentum_kernel(xp, ctx, fused_updates=None):
    var_cell, (accum_cell,), scratch, fail = _setup(ctx)
    weight_decay, nesterov = ctx.attrs["weight_decay"], ctx.attrs["use_nesterov"]

    def apply(learning_rate, grad, momentum):
        var, accum = var_cell.value, accum_cell.value
        if var is None or accum is None or grad.shape != var.shape:
            fail(var, grad, accum)
        decay = _decay_factor(learning_rate, weight_decay)
        if fused_updates is not None and fused_updates.momentum(
                var, accum, grad, learning_rate, momentum, nesterov, decay):
            return var
        if decay is not None:
            xp.multiply(var, decay, out=var)
        xp.multiply(accum, momentum, out=accum)       # accum = momentum * accum + grad
        xp.add(accum, grad, out=accum)
        step = scratch.buffer
        if step is None or step.shape != var.shape:
            step = scratch.renew(xp, var)
        if nesterov:                                  # lr * (grad + momentum * accum)
            xp.multiply(accum, momentum, out=step)
            xp.add(step, grad, out=step)
            xp.multiply(step, learning_rate, out=step)
        else:                                         # lr * accum
            xp.multiply(accum, learning_rate, out=step)
        return xp.subtract(var, step, out=var)
    return apply


def _adam_kernel(xp, ctx, fused_updates=None):
    var_cell, (m_cell, v_cell), scratch, fail = _setup(ctx)
    weight_decay = ctx.attrs["weight_decay"]

    def apply(beta1_power, beta2_power, learning_rate, beta1, beta2, epsilon, grad):
        var, m, v = var_cell.value, m_cell.value, v_cell.value
        if var is None or m is None or v is None or grad.shape != var.shape:
            fail(var, grad, m, v)
        decay = _decay_factor(learning_rate, weight_decay)
        alpha = learning_rate * xp.sqrt(1 - beta2_power) / (1 - beta1_power)
        if fused_updates is not None and fused_updates.adam(
                var, m, v, grad, alpha, beta1, beta2, epsilon, decay):
            return var
        if decay is not None:
            xp.multiply(var, decay, out=var)
        step = scratch.buffer
        if step is None or step.shape != var.shape:
            step = scratch.renew(xp, var)
        xp.subtract(grad, m, out=step)                # m += (grad - m) * (1 - beta1)
        xp.multiply(step, 1 - beta1, out=step)
        xp.add(m, step, out=m)
        xp.multiply(grad, grad, out=step)             # v += (grad^2 - v) * (1 - beta2)
        xp.subtract(step, v, out=step)
        xp.multiply(step, 1 - beta2, out=step)
        xp.add(v, step, out=v)
        xp.sqrt(v, out=step)                          # var -= alpha * m / (sqrt(v) + eps)
        xp.add(step, epsilon, out=step)
        xp.divide(m, step, out=step)
        xp.multiply(step, alpha, out=step)
        return xp.subtract(var, step, out=var)
    return apply


def _scratch_like(xp, scratch, var):
    """The op's scratch buffer, (re)made to ``var``'s shape."""
    step = scratch.buffer
    if step is None or step.shape != var.shape:
        step = scratch.renew(xp, var)
    return step


def _running_mean_square(xp, mean_square, grad, rho, step):
    """``mean_square += (grad^2 - mean_square) * (1 - rho)``, through ``step``."""
    xp.multiply(grad, grad, out=step)
    xp.subtract(step, mean_square, out=step)
    xp.multiply(step, 1 - rho, out=step)
    xp.add(mean_square, step, out=mean_square)


def _momentum_step(xp, var, mom, momentum, step):
    """``mom = momentum * mom + step; var -= mom`` (``step``: lr * grad / sqrt(...))."""
    xp.multiply(mom, momentum, out=mom)
    xp.add(mom, step, out=mom)
    return xp.subtract(var, mom, out=var)


def _rms_prop_kernel(xp, ctx, fused_updates=None):
    var_cell, (ms_cell, mom_cell), scratch, fail = _setup(ctx)

    def apply(learning_rate, rho, momentum, epsilon, grad):
        var, ms, mom = var_cell.value, ms_cell.value, mom_cell.value
        if var is None or ms is None or mom is None or grad.shape != var.shape:
            fail(var, grad, ms, mom)
        if fused_updates is not None and fused_updates.rms_prop(
                var, ms, mom, grad, learning_rate, rho, momentum, epsilon):
            return var
        step = _scratch_like(xp, scratch, var)
        _running_mean_square(xp, ms, grad, rho, step)
        xp.add(ms, epsilon, out=step)                 # lr * grad / sqrt(ms + epsilon)
        _root_scaled(xp, step, step, grad, learning_rate)
        return _momentum_step(xp, var, mom, momentum, step)
    return apply


def _root_scaled(xp, step, square, grad, learning_rate):
    """``step = lr * grad / sqrt(square)`` (``square`` may be ``step`` itself)."""
    xp.sqrt(square, out=step)
    xp.divide(grad, step, out=step)
    xp.multiply(step, learning_rate, out=step)


def _centered_rms_prop_kernel(xp, ctx):
    var_cell, (mg_cell, ms_cell, mom_cell), scratch, fail = _setup(ctx)

    def apply(learning_rate, rho, momentum, epsilon, grad):
        var, mg, ms, mom = var_cell.value, mg_cell.value, ms_cell.value, mom_cell.value
        if var is None or mg is None or ms is None or mom is None or \
                grad.shape != var.shape:
            fail(var, grad, mg, ms, mom)
        step = _scratch_like(xp, scratch, var)
        _running_mean_square(xp, ms, grad, rho, step)
        xp.subtract(grad, mg, out=step)               # mg += (grad - mg) * (1 - rho)
        xp.multiply(step, 1 - rho, out=step)
        xp.add(mg, step, out=mg)
        xp.multiply(mg, mg, out=step)                 # lr * grad / sqrt(ms - mg^2 + eps)
        xp.subtract(ms, step, out=step)
        xp.add(step, epsilon, out=step)
        _root_scaled(xp, step, step, grad, learning_rate)
        return _momentum_step(xp, var, mom, momentum, step)
    return apply


def _adagrad_kernel(xp, ctx, fused_updates=None):
    var_cell, (accum_cell,), scratch, fail = _setup(ctx)

    def apply(learning_rate, grad):
        var, accum = var_cell.value, accum_cell.value
        if var is None or accum is None or grad.shape != var.shape:
            fail(var, grad, accum)
        if fused_updates is not None and fused_updates.adagrad(var, accum, grad, learning_rate):
            return var
        step = _scratch_like(xp, scratch, var)
        xp.multiply(grad, grad, out=step)             # accum += grad^2
        xp.add(accum, step, out=accum)
        _root_scaled(xp, step, accum, grad, learning_rate)   # var -= lr*grad/sqrt(accum)
        return xp.subtract(var, step, out=var)
    return apply


def _adadelta_kernel(xp, ctx):
    var_cell, (accum_cell, update_cell), scratch, fail = _setup(ctx)
    # NOTE: Adadelta needs two temporaries: the update and the denominator.
    scratch_2 = ctx.resource(("train_scratch_2", ctx.op), Scratch)

    def apply(learning_rate, rho, epsilon, grad):
        var, accum, accum_update = var_cell.value, accum_cell.value, update_cell.value
        if var is None or accum is None or accum_update is None or grad.shape != var.shape:
            fail(var, grad, accum, accum_update)
        update, other = _scratch_like(xp, scratch, var), _scratch_like(xp, scratch_2, var)
        _running_mean_square(xp, accum, grad, rho, other)
        xp.add(accum_update, epsilon, out=update)     # sqrt(accum_update + eps) * grad
        xp.sqrt(update, out=update)                   #   / sqrt(accum + eps)
        xp.add(accum, epsilon, out=other)
        xp.sqrt(other, out=other)
        xp.divide(update, other, out=update)
        xp.multiply(update, grad, out=update)
        _running_mean_square(xp, accum_update, update, rho, other)
        xp.multiply(update, learning_rate, out=update)
        return xp.subtract(var, update, out=var)
    return apply


def _ftrl_kernel(xp, ctx):
    from .sparse_training_kernels import ftrl_update
    var_cell, (accum_cell, linear_cell), _, fail = _setup(ctx)

    def apply(grad, *hypers):
        var, accum, linear = var_cell.value, accum_cell.value, linear_cell.value
        if var is None or accum is None or linear is None or grad.shape != var.shape:
            fail(var, grad, accum, linear)
        ftrl_update(xp, [hyper.item() for hyper in hypers], grad, var, accum, linear)
        return var
    return apply


def _schedule_kernel(xp, ctx):
    """Evaluates the op's pure Python ``step -> value`` function on the step."""
    schedule, dtype, op = ctx.attrs["schedule"], ctx.output_dtypes[0], ctx.op

    def evaluate(step):
        value = schedule(step.item())
        if not math.isfinite(value):
            raise errors.InvalidArgumentError(
                None, op, f"learning-rate schedule '{op.name}' gave {value} at step "
                f"{step.item()}")
        return xp.asarray(value, dtype=dtype)
    return evaluate
