"""GEMMs split across the workers of a *parallel* object (see
:mod:`.cpu_threads`), written against ``xp``. Where the parallel object says
one part (GPUs, small or mid-sized products) each is one plain ``xp.matmul``.
The split depends only on the shapes, so results are bit-identical run after
run::

    y = matmul_by_rows(np, pool, patches, w2d)        # patches @ w2d
    dw = matmul_over_rows(np, pool, patches, grad2d)   # patches.T @ grad2d
"""

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


def _transposed_product(xp, a, b):
    """a.T @ b, by the compiled GEMM where it applies and wins (see native.py)."""
    if a.shape[1] <= native.GEMM_MAX_TRANSPOSED_ROWS and \
            native.vector_columns(b.shape[1], b.dtype):
        out = xp.empty((a.shape[1], b.shape[1]), xp.result_type(a, b))
        if native.gemm(a, b, out, transposed=True):
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
    parallel.run(part, parts)
    total = partial[0]
    for value in partial[1:]:
        total += value
    return total
