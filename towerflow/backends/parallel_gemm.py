"""GEMMs split across the workers of a *parallel* object (see
:mod:`.cpu_threads`), written against ``xp``. Where the parallel object says
one part (GPUs, small or mid-sized products) each is one plain ``xp.matmul``.
The split depends only on the shapes, so results are bit-identical run after
run::

    y = matmul_by_rows(np, pool, patches, w2d)        # patches @ w2d
    dw = matmul_over_rows(np, pool, patches, grad2d)   # patches.T @ grad2d

2-D MatMuls (dense layers and their gradients) run on the compiled GEMM
where it applies and wins (:func:`compiled_matmul`).
"""

import numpy as np

from . import cpu_threads, native
from .cpu_threads import split


def matmul(xp, parallel, a, b):
    """a @ b for 2-D a and b, split by rows of a, or by columns of b when a has
    fewer rows than b has columns (each part then packs less of b)."""
    rows, columns = a.shape[0], b.shape[1]
    flops = rows * a.shape[1] * columns
    if flops < cpu_threads.MIN_PARALLEL_FLOPS:
        with parallel.blas_threads(flops):      # one OpenBLAS thread
            return xp.matmul(a, b)
    if rows >= columns:
        return matmul_by_rows(xp, parallel, a, b)
    parts = parallel.gemm_parts(columns, flops)
    if parts == 1:
        with parallel.blas_threads(flops):
            return xp.matmul(a, b)
    out = xp.empty((rows, columns), xp.result_type(a, b))
    ranges = split(columns, parts)

    def part(index):
        cut = slice(*ranges[index])
        xp.matmul(a, b[:, cut], out=out[:, cut])
    parallel.run(part, parts)
    return out


def matmul_by_rows(xp, parallel, a, b):
    """a @ b (2-D), the rows of a (and of the result) split across the workers."""
    rows = a.shape[0]
    flops = rows * a.shape[1] * b.shape[1]
    parts = parallel.gemm_parts(rows, flops)
    if parts == 1:
        with parallel.blas_threads(flops):
            return xp.matmul(a, b)
    out = xp.empty((rows, b.shape[1]), xp.result_type(a, b))
    ranges = split(rows, parts)

    def part(index):
        start, stop = ranges[index]
        xp.matmul(a[start:stop], b, out=out[start:stop])
    parallel.run(part, parts)
    return out


# Parts of a split compiled product: whole panels of columns (32 float32 or 16
# float64 values) or whole 6-row tiles, so no part computes a padded tile inside
# the product. Each element sums in the same order whatever the split.
_PANEL_COLUMNS, _TILE_ROWS = 32, 6


def compiled_matmul(parallel, a, b, transpose_a=False, transpose_b=False):
    """op(a) @ op(b) (op: transposed where asked) for 2-D NumPy arrays by the
    compiled GEMM (native.gemm), its rows or columns split across the pool;
    None where it does not apply (not float32/float64 NumPy arrays of one
    dtype, neither layout contiguous, TOWERFLOW_NATIVE=0) or does not win
    (:func:`native.gemm_wins`).

    Example::

        >>> a, w = np.ones((50, 3136), np.float32), np.ones((3136, 1024), np.float32)
        >>> compiled_matmul(cpu_threads.SERIAL, a, w).shape
        (50, 1024)
    """
    columns = b.shape[0] if transpose_b else b.shape[1]
    if not native.gemm_wins(columns, b.dtype):     # first: the cheapest test
        return None
    a, transpose_a = _row_major(a, transpose_a)
    b, transpose_b = _row_major(b, transpose_b)
    if a is None or b is None or not native.float_arrays(a, b):
        return None
    rows, inner = a.shape[::-1] if transpose_a else a.shape
    out = np.empty((rows, columns), a.dtype)
    _split_gemm(parallel, a, b, out, transpose_a, transpose_b, inner)
    return out


def _split_gemm(parallel, a, b, out, transpose_a, transpose_b, inner):
    """out = op(a) @ op(b) by native.gemm in parts across the pool: whole
    panels of columns where the product is wider than tall, else whole tiles
    of rows (the parts depend on the shapes and the pool's size only)."""
    rows, columns = out.shape
    by_columns = columns >= rows
    units = -(-columns // _PANEL_COLUMNS) if by_columns else -(-rows // _TILE_ROWS)
    ranges = split(units, parallel.compiled_parts(units, rows * inner * columns))

    def part(index):
        first, stop = ranges[index]
        if by_columns:
            block = {"columns": (first * _PANEL_COLUMNS, min(stop * _PANEL_COLUMNS, columns))}
        else:
            block = {"rows": (first * _TILE_ROWS, min(stop * _TILE_ROWS, rows))}
        native.gemm(a, b, out, transpose_a, transpose_b, **block)
    parallel.run_compiled(part, len(ranges))


def _row_major(matrix, transposed):
    """(matrix, transposed) as a C-contiguous array: a Fortran-ordered one (a
    transposed view) is its transpose read transposed; (None, _) for others."""
    if matrix.flags.c_contiguous:
        return matrix, transposed
    if matrix.T.flags.c_contiguous:
        return matrix.T, not transposed
    return None, transposed


def _transposed_product(xp, a, b):
    """a.T @ b, by the compiled GEMM where it applies and wins (see native.py)."""
    if native.gemm_takes(b.shape[1], a, b):
        out = xp.empty((a.shape[1], b.shape[1]), xp.result_type(a, b))
        if native.gemm(a, b, out, transpose_a=True):
            return out
    return xp.matmul(a.T, b)


def matmul_over_rows(xp, parallel, a, b):
    """a.T @ b for tall a and b: their shared rows are split across the workers
    and the partial products added in part order (a fixed order)."""
    rows = a.shape[0]
    flops = rows * a.shape[1] * b.shape[1]
    parts = parallel.gemm_parts(rows, flops)
    if parts == 1:
        with parallel.blas_threads(flops):
            return xp.matmul(a.T, b)
    ranges, partial = split(rows, parts), [None] * parts

    def part(index):
        start, stop = ranges[index]
        partial[index] = _transposed_product(xp, a[start:stop], b[start:stop])
    # each part one compiled GEMM where it applies (it records: see run_compiled)
    run = parallel.run_compiled if native.gemm_takes(b.shape[1], a, b) else parallel.run
    run(part, parts)
    total = partial[0]
    for value in partial[1:]:
        total += value
    return total
