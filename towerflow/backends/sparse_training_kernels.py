"""Kernels of the sparse training ops (towerflow/train/sparse_training_ops.py)
and of dense FTRL, written once against the array module ``xp``.

A sparse kernel sums the gradient rows of a repeated index, reads the named
rows of the variable and its slots, updates them with TensorFlow 1.15's
per-row formula and writes them back: rows no index names are untouched
(except Adam's, whose TF sparse update decays every row of m and v and moves
every row of var).

NOTE: the index check reads the indices on the host (gather's does too), and
FTRL reads its hyperparameters there (its formula branches on them), so on a
GPU these steps wait for the device and are not captured into a CUDA graph.
"""

import numpy as np

from .. import errors
from . import kernels as _kernels


def build_sparse_training_kernels(xp):
    rows = {"SparseApplyMomentum": _momentum_rows, "SparseApplyAdagrad": _adagrad_rows,
            "SparseApplyRMSProp": _rms_prop_rows,
            "SparseApplyCenteredRMSProp": _centered_rms_prop_rows,
            "SparseApplyAdadelta": _adadelta_rows, "SparseApplyFtrl": _ftrl_rows}
    table = {op_type: _row_kernel(xp, update) for op_type, update in rows.items()}
    table["SparseApplyAdam"] = lambda ctx: _sparse_adam(xp, ctx)
    return table


def _cells(ctx):
    """The variable's cell, then its slots' cells."""
    cell_of = _kernels.VariableCell
    state_ops = (ctx.attrs["variable"],) + tuple(ctx.attrs["slots"])
    return state_ops, [ctx.resource(("variable", op), cell_of) for op in state_ops]


def _values_of(ctx, state_ops, cells):
    values = [cell.value for cell in cells]
    for state_op, value in zip(state_ops, values):
        if value is None:
            raise errors.FailedPreconditionError(
                None, ctx.op, f"Attempting to use uninitialized value {state_op.name} in "
                f"'{ctx.op.name}': run its initializer first "
                "(sess.run(tf.global_variables_initializer()))")
    return values


def summed_rows(xp, ctx, var, values, indices):
    """(unique indices, the gradient rows of each summed), after TF's checks."""
    if values.shape[1:] != var.shape[1:] or values.shape[0] != indices.shape[0]:
        raise errors.InvalidArgumentError(
            None, ctx.op, f"var and grad do not have the same shape: {list(var.shape)} "
            f"and {list(values.shape)} (indices {list(indices.shape)})")
    outside = (indices < 0) | (indices >= var.shape[0])
    if indices.size and bool(outside.any()):        # NOTE: a host read on a GPU
        offset = int(xp.argmax(outside))
        raise errors.InvalidArgumentError(          # training_ops.cc's words
            None, ctx.op, f"Index {int(indices[offset])} at offset {offset} in indices "
            "is out of range")
    unique, position = _sorted_unique(xp, indices)
    summed = xp.zeros((unique.shape[0],) + tuple(values.shape[1:]), values.dtype)
    xp.add.at(summed, position, values)
    return unique, summed


def _sorted_unique(xp, indices):
    """(the distinct indices in increasing order, where each index is among
    them): np.unique(return_inverse=True) from one stable sort."""
    if indices.shape[0] == 0:
        return indices, indices
    order = xp.argsort(indices, kind="stable")
    ordered = indices[order]
    starts = xp.concatenate([xp.ones(1, bool), ordered[1:] != ordered[:-1]])
    position = xp.empty(indices.shape[0], np.int64)
    position[order] = xp.cumsum(starts) - 1
    return ordered[starts], position    # NOTE: a size read on the host (a mask index)


def _row_kernel(xp, update):
    """A kernel that applies ``update(xp, attrs, hypers, grad, var_rows, *slot_rows)``
    (which changes the row arrays it is given) to the gradient's rows."""
    def make(ctx):
        state_ops, cells = _cells(ctx)
        attrs = ctx.attrs

        def apply(*inputs):
            *hypers, values, indices = inputs
            state = _values_of(ctx, state_ops, cells)
            unique, grad = summed_rows(xp, ctx, state[0], values, indices)
            rows = [value[unique] for value in state]
            update(xp, attrs, [h.item() if hasattr(h, "item") else h for h in hypers],
                   grad, *rows)
            for value, row in zip(state, rows):
                value[unique] = row
            return state[0]
        return apply
    return make


def _momentum_rows(xp, attrs, hypers, grad, var, accum):
    learning_rate, momentum = hypers
    accum *= momentum
    accum += grad
    if attrs["use_nesterov"]:
        var -= grad * learning_rate + accum * (learning_rate * momentum)
    else:
        var -= accum * learning_rate


def _adagrad_rows(xp, attrs, hypers, grad, var, accum):
    (learning_rate,) = hypers
    accum += grad * grad
    var -= grad * learning_rate / xp.sqrt(accum)


def _rms_prop_rows(xp, attrs, hypers, grad, var, ms, mom):
    learning_rate, rho, momentum, epsilon = hypers
    ms *= rho
    ms += grad * grad * (1 - rho)
    mom *= momentum
    mom += learning_rate * grad / xp.sqrt(ms + epsilon)
    var -= mom


def _centered_rms_prop_rows(xp, attrs, hypers, grad, var, mg, ms, mom):
    learning_rate, rho, momentum, epsilon = hypers
    ms *= rho
    ms += grad * grad * (1 - rho)
    mg *= rho
    mg += grad * (1 - rho)
    mom *= momentum
    mom += learning_rate * grad / xp.sqrt(ms + epsilon - mg * mg)
    var -= mom


def _adadelta_rows(xp, attrs, hypers, grad, var, accum, accum_update):
    learning_rate, rho, epsilon = hypers
    accum *= rho
    accum += grad * grad * (1 - rho)
    update = xp.sqrt(accum_update + epsilon) / xp.sqrt(accum + epsilon) * grad
    var -= update * learning_rate
    accum_update *= rho
    accum_update += update * update * (1 - rho)


def ftrl_update(xp, hypers, grad, var, accum, linear):
    """TF's FTRL(-V2) on arrays, in place (training_ops.cc, ApplyFtrlV2)."""
    learning_rate, l1, l2, l2_shrinkage, power = hypers
    shrunk = grad + 2 * l2_shrinkage * var if l2_shrinkage > 0 else grad
    new_accum = accum + grad * grad
    if power == -0.5:       # TF's special case: square roots, not powers
        new_scale, old_scale = xp.sqrt(new_accum), xp.sqrt(accum)
    else:
        new_scale, old_scale = new_accum ** -power, accum ** -power
    linear += shrunk - (new_scale - old_scale) / learning_rate * var
    quadratic = new_scale / learning_rate + 2 * l2
    var[...] = xp.where(xp.abs(linear) > l1, (xp.sign(linear) * l1 - linear) / quadratic, 0)
    accum[...] = new_accum


def _ftrl_rows(xp, attrs, hypers, grad, var, accum, linear):
    ftrl_update(xp, hypers, grad, var, accum, linear)


def _sparse_adam(xp, ctx):
    """TF 1.15's AdamOptimizer._apply_sparse: every row of m, v and var changes."""
    state_ops, cells = _cells(ctx)

    def apply(beta1_power, beta2_power, learning_rate, beta1, beta2, epsilon, values,
              indices):
        var, m, v = _values_of(ctx, state_ops, cells)
        unique, grad = summed_rows(xp, ctx, var, values, indices)
        alpha = learning_rate * xp.sqrt(1 - beta2_power) / (1 - beta1_power)
        xp.multiply(m, beta1, out=m)
        m[unique] += grad * (1 - beta1)
        xp.multiply(v, beta2, out=v)
        v[unique] += grad * grad * (1 - beta2)
        var -= alpha * m / (xp.sqrt(v) + epsilon)
        return var
    return apply
