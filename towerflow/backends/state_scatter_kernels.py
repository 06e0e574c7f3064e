"""Kernels of the variable scatter ops (towerflow/ops/state_scatter_ops.py):
each updates the variable's buffer in the Session in place and returns it.

NOTE: the index check reads the indices on the host (as gather's does), so on
a GPU a step with a scatter waits for the device.
"""

import numpy as np

from .. import errors
from . import kernels as _kernels
from .index_kernels import _check_indices
from .scatter_kernels import _check_inside, _check_updates_shape, _linear_indices

# op type -> the ufunc that combines a row with its update ('update': a write)
ROW_SCATTERS = {"ScatterUpdate": "update", "ScatterAdd": "add", "ScatterSub": "subtract",
                "ScatterMul": "multiply", "ScatterDiv": "divide", "ScatterMax": "maximum",
                "ScatterMin": "minimum"}
ND_SCATTERS = {"ScatterNdUpdate": "update", "ScatterNdAdd": "add", "ScatterNdSub": "subtract"}


def build_state_scatter_kernels(xp):
    table = {op_type: _maker(xp, _row_scatter, how) for op_type, how in ROW_SCATTERS.items()}
    table.update({op_type: _maker(xp, _nd_scatter, how) for op_type, how in ND_SCATTERS.items()})
    return table


def _maker(xp, kernel, how):
    return lambda ctx: kernel(xp, ctx, how)


def _variable_value(ctx):
    """A function giving the variable's buffer, or raising TF's error if unset."""
    variable_op = ctx.attrs["variable"]
    cell = ctx.resource(("variable", variable_op), _kernels.VariableCell)

    def value():
        if cell.value is None:
            raise errors.FailedPreconditionError(
                None, ctx.op, f"Attempting to use uninitialized value {variable_op.name} "
                f"in '{ctx.op.name}': run its initializer first "
                "(sess.run(tf.global_variables_initializer()))")
        return cell.value
    return value


def _combine(xp, how, target, index, updates):
    """``target[index] = how(target[index], updates)``, a repeated index's
    updates applied one after another, in order ('update' writes: a repeated
    index keeps its last update, as NumPy's assignment does)."""
    if how == "update":
        target[index] = updates
    elif how in ("add", "subtract"):
        xp.add.at(target, index, updates if how == "add" else -updates)
    else:   # in rounds: the first occurrence of every index, then the second, ...
        flat_index = index.reshape(-1)
        rows = updates.reshape((flat_index.shape[0],) + tuple(target.shape[1:]))
        for positions in _occurrence_rounds(flat_index):
            positions = xp.asarray(positions)
            rows_at = flat_index[positions]
            target[rows_at] = _apply(xp, how, target[rows_at], rows[positions])


def _occurrence_rounds(index):
    """Positions in ``index`` grouped by how often their value came before:
    each group names every index at most once (a host read on a GPU)."""
    host = np.asarray(index.get() if hasattr(index, "get") else index)
    order = np.argsort(host, kind="stable")
    ordered = host[order]
    starts = np.r_[0, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1]
    rank = np.arange(host.size) - np.repeat(starts, np.diff(np.r_[starts, host.size]))
    by_rank = np.empty(host.size, np.int64)
    by_rank[order] = rank
    return [np.flatnonzero(by_rank == r) for r in range(int(rank.max(initial=-1)) + 1)]


def _apply(xp, how, old, new):
    if how == "divide" and not np.issubdtype(old.dtype, np.floating):
        quotient = xp.abs(old) // xp.abs(new)     # C++'s truncating integer division
        return xp.where((old < 0) != (new < 0), -quotient, quotient)
    return getattr(xp, how)(old, new)


def _row_scatter(xp, ctx, how):
    value_of = _variable_value(ctx)

    def scatter(indices, updates):
        var = value_of()
        expected = tuple(indices.shape) + tuple(var.shape[1:])
        if updates.ndim and tuple(updates.shape) != expected:
            text = _shape_text
            raise errors.InvalidArgumentError(      # scatter_op.cc's words
                None, ctx.op, "Must have updates.shape = indices.shape + params.shape[1:] "
                f"or updates.shape = [], got updates.shape {text(updates.shape)}, "
                f"indices.shape {text(indices.shape)}, params.shape {text(var.shape)}")
        _check_indices(xp, indices, var.shape[0])
        _combine(xp, how, var, indices, xp.broadcast_to(updates, expected))
        return var
    return scatter


def _shape_text(shape):
    return "[" + ",".join(str(dim) for dim in shape) + "]"


def _nd_scatter(xp, ctx, how):
    value_of = _variable_value(ctx)

    def scatter(indices, updates):
        var = value_of()
        depth = indices.shape[-1]
        _check_updates_shape(indices.shape, updates.shape, var.shape)
        _check_inside(xp, indices, var.shape[:depth], "shape", var.shape)
        outer, inner = var.shape[:depth], var.shape[depth:]
        rows = var.reshape((int(np.prod(outer, dtype=np.int64)),) + inner)
        linear = _linear_indices(xp, indices, outer)
        _combine(xp, how, rows, linear, updates.reshape(linear.shape + inner))
        return var
    return scatter
