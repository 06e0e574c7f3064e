"""Kernels of einsum, the dense linear algebra ops, reverse_sequence and
linspace (towerflow/ops/einsum_ops.py, linalg_ops.py, sequence_ops.py),
written once against ``xp``, with TF 1.15's run-time errors."""

import numpy as np

from .. import errors


def build_linalg_kernels(xp):
    def fixed(fn):
        return lambda ctx: fn

    return {
        "Einsum": lambda ctx: _einsum(xp, ctx.attrs),
        "EinsumGrad": lambda ctx: _einsum_grad(xp, ctx.attrs),
        "MatrixInverse": fixed(lambda x: _inverse(xp, x)),
        "Cholesky": fixed(lambda x: _cholesky(xp, x)),
        "CholeskyGrad": fixed(lambda lower, grad: _cholesky_grad(xp, lower, grad)),
        "MatrixDeterminant": fixed(lambda x: _on_matrices(xp, xp.linalg.det, x, x.shape[:-2])),
        "MatrixSolve": lambda ctx: _solve(xp, ctx.attrs["adjoint"]),
        "MatrixBandPart": lambda ctx: _band_part(xp, ctx.attrs),
        "MatrixDiag": fixed(lambda v: _diag(xp, v)),
        "MatrixDiagPart": fixed(lambda x: xp.diagonal(x, axis1=-2, axis2=-1).copy()),
        "MatrixDiagPartGrad": fixed(lambda grad, x: _diag_part_grad(xp, grad, x)),
        "ReverseSequence": lambda ctx: _reverse_sequence(xp, ctx.attrs),
        "LinSpace": lambda ctx: _linspace(xp, ctx.output_dtypes[0]),
    }


def _subscripts(in_labels, out_labels):
    return ",".join(in_labels) + "->" + out_labels


def _einsum(xp, attrs):
    equation = _subscripts(attrs["inputs"], attrs["output"])

    def einsum(*operands):
        _check_label_sizes(attrs, operands)
        return xp.einsum(equation, *operands)
    return einsum


def _check_label_sizes(attrs, operands):
    """Each label one size across the operands (the graph may not have known)."""
    sizes = {}
    for labels, operand in zip(attrs["inputs"], operands):
        if operand.ndim != len(labels):
            raise errors.InvalidArgumentError(
                None, None, f"Input of rank {operand.ndim} does not match einsum subscripts "
                f"'{labels}'")
        for label, size in zip(labels, operand.shape):
            if sizes.setdefault(label, size) != size:
                raise errors.InvalidArgumentError(
                    None, None, f"Expected dimension {sizes[label]} at axis of label "
                    f"'{label}' in einsum '{attrs['equation']}', got {size}")


def _einsum_grad(xp, attrs):
    """(grad, *operands) -> d/d operands[index]: the einsum of the output's
    gradient with the other operands onto the labels the operand shares with
    them, broadcast over labels only it has, written on the diagonal of a
    repeated label (the trace 'ii')."""
    in_labels, out_labels, index = attrs["inputs"], attrs["output"], attrs["index"]
    mine = in_labels[index]
    others = [labels for k, labels in enumerate(in_labels) if k != index]
    known = set(out_labels).union(*others)
    unique = "".join(dict.fromkeys(mine))
    reached = "".join(label for label in unique if label in known)
    equation = _subscripts([out_labels, *others], reached)

    def gradient(grad, *operands):
        target = operands[index]
        rest = [operand for k, operand in enumerate(operands) if k != index]
        partial = xp.einsum(equation, grad, *rest)
        sizes = dict(zip(mine, target.shape))
        shape = [sizes[label] if label in reached else 1 for label in unique]
        full = xp.broadcast_to(partial.reshape(shape), [sizes[label] for label in unique])
        if unique == mine:
            return xp.ascontiguousarray(full).astype(target.dtype, copy=False)
        out = xp.zeros(target.shape, target.dtype)
        xp.einsum(f"{mine}->{unique}", out)[...] = full     # a writable diagonal view
        return out
    return gradient


def _singular(message):
    def run(fn, *arrays):
        try:
            return fn(*arrays)
        except np.linalg.LinAlgError:
            raise errors.InvalidArgumentError(None, None, message) from None
    return run


_not_invertible = _singular("Input is not invertible.")
_solve_not_invertible = _singular("Input matrix is not invertible.")
_cholesky_failed = _singular("Cholesky decomposition was not successful. The input might "
                             "not be valid.")


def _on_matrices(xp, fn, x, empty_shape):
    """``fn`` of a [..., n, n] batch; an empty batch or 0x0 matrices give
    ones of ``empty_shape`` without calling it (empty, or 0x0 determinants: 1)."""
    if x.size == 0:
        return xp.ones(empty_shape, x.dtype)
    return fn(x).astype(x.dtype, copy=False)


def _inverse(xp, x):
    return _on_matrices(xp, lambda a: _not_invertible(xp.linalg.inv, a), x, x.shape)


def _cholesky(xp, x):
    lower = _on_matrices(xp, lambda a: _cholesky_failed(xp.linalg.cholesky, a), x, x.shape)
    # NOTE: NumPy reads only the lower triangle, as TF's kernel
    return lower


def _cholesky_grad(xp, lower, grad):
    """TF's _CholeskyGrad (linalg_grad.py): Phi(L^T grad) between L^-1's."""
    if lower.size == 0:
        return xp.zeros_like(grad)
    inverse = _not_invertible(xp.linalg.inv, lower)
    middle = xp.matmul(xp.swapaxes(lower, -1, -2), grad)
    middle = xp.tril(middle) - 0.5 * _diag(xp, xp.diagonal(middle, axis1=-2, axis2=-1))
    grad_a = xp.matmul(xp.matmul(xp.swapaxes(inverse, -1, -2), middle), inverse)
    return (0.5 * (grad_a + xp.swapaxes(grad_a, -1, -2))).astype(grad.dtype, copy=False)


def _solve(xp, adjoint):
    def solve(matrix, rhs):
        if matrix.shape[:-1] != rhs.shape[:-1]:
            raise errors.InvalidArgumentError(
                None, None, f"Input matrix and right-hand side must have the same number "
                f"of rows: {list(matrix.shape)} vs. {list(rhs.shape)}")
        if rhs.size == 0 or matrix.size == 0:
            return xp.zeros(rhs.shape, rhs.dtype)
        lhs = xp.swapaxes(matrix, -1, -2) if adjoint else matrix
        return _solve_not_invertible(xp.linalg.solve, lhs, rhs).astype(rhs.dtype, copy=False)
    return solve


def _band_part(xp, attrs):
    lower, upper = attrs["num_lower"], attrs["num_upper"]

    def band_part(x):
        rows, columns = x.shape[-2:]
        if lower > rows or upper > columns:
            raise errors.InvalidArgumentError(
                None, None, f"num_lower must be negative or less or equal to number of "
                f"rows ({rows}) got: {lower}" if lower > rows else
                f"num_upper must be negative or less or equal to number of columns "
                f"({columns}) got: {upper}")
        offset = xp.arange(columns).reshape(1, -1) - xp.arange(rows).reshape(-1, 1)
        keep = ((lower < 0) | (-offset <= lower)) & ((upper < 0) | (offset <= upper))
        return xp.where(keep, x, xp.zeros((), x.dtype))
    return band_part


def _diag(xp, diagonal):
    size = diagonal.shape[-1]
    out = xp.zeros(diagonal.shape + (size,), diagonal.dtype)
    xp.einsum("...ii->...i", out)[...] = diagonal
    return out


def _diag_part_grad(xp, grad, x):
    out = xp.zeros(x.shape, grad.dtype)
    size = min(x.shape[-2:])
    xp.einsum("...ii->...i", out[..., :size, :size])[...] = grad
    return out


def _reverse_sequence(xp, attrs):
    seq_axis, batch_axis = attrs["seq_dim"], attrs["batch_dim"]

    def reverse_sequence(x, lengths):
        _check_sequence_axes(x, lengths, seq_axis, batch_axis)
        steps = x.shape[seq_axis]
        time = xp.arange(steps).reshape(1, -1)
        lengths = xp.asarray(lengths).reshape(-1, 1).astype(np.int64)
        source = xp.where(time < lengths, lengths - 1 - time, time)      # [batch, time]
        moved = xp.moveaxis(x, (batch_axis, seq_axis), (0, 1))
        source = source.reshape(source.shape + (1,) * (moved.ndim - 2))
        gathered = xp.take_along_axis(moved, source, axis=1)
        return xp.ascontiguousarray(xp.moveaxis(gathered, (0, 1), (batch_axis, seq_axis)))
    return reverse_sequence


def _check_sequence_axes(x, lengths, seq_axis, batch_axis):
    """tensorflow/core/kernels/reverse_sequence_op.cc's checks."""
    def refuse(message):
        raise errors.InvalidArgumentError(None, None, message)
    if seq_axis >= x.ndim or seq_axis < 0:
        refuse(f"seq_dim must be < input rank( {seq_axis} vs. {x.ndim})")
    if batch_axis >= x.ndim or batch_axis < 0:
        refuse(f"batch_dim must be < input rank( {batch_axis} vs. {x.ndim})")
    if lengths.ndim != 1 or lengths.shape[0] != x.shape[batch_axis]:
        count = lengths.shape[0] if lengths.ndim else lengths.size
        refuse(f"Length of seq_lengths != input.dims({batch_axis}), ({count} vs. "
               f"{x.shape[batch_axis]})")
    host = np.asarray(lengths.get() if hasattr(lengths, "get") else lengths)
    for batch, length in enumerate(host):
        if length < 0:
            refuse(f"seq_lens({batch}) < 0")
        if length > x.shape[seq_axis]:
            refuse(f"seq_lens({batch}) > input.dims({seq_axis})")


def _linspace(xp, dtype):
    dtype = np.dtype(dtype)

    def linspace(start, stop, num):
        count = int(num)
        if count <= 0:
            raise errors.InvalidArgumentError(None, None, f"Requires num > 0: {count}")
        # NOTE: in the dtype, as TF's kernel: start + i * ((stop - start) / (num - 1))
        start, stop = dtype.type(start), dtype.type(stop)
        if count == 1:
            return xp.full((1,), start, dtype)
        step = (stop - start) / dtype.type(count - 1)
        return start + step * xp.arange(count, dtype=dtype)
    return linspace
