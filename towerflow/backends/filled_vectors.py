"""Vectors of one value (ones, zeros) that kernels keep between calls and
slice: a BLAS ones-vector product sums columns faster than ``sum(axis=0)``,
and NumPy's maximum against an array of zeros beats one against a scalar.

On a GPU such a cache meets CUDA graphs (towerflow/plan_capture.py), which
hold raw pointers, not arrays:

- a vector replaced by a longer one is kept, not freed: a graph captured on
  the shorter one still reads it at every replay;
- a vector first needed during a capture is not kept: a capture runs
  nothing, so its fill only happens at a replay, and a later eager call
  would read memory nobody wrote.
"""


class FilledVectors:
    """Vectors filled with ``fill``, one per dtype, grown on demand.

    Example::

        >>> ones = FilledVectors(numpy, 1)
        >>> ones.get(3, numpy.float32)
        array([1., 1., 1.], dtype=float32)
    """

    def __init__(self, xp, fill):
        self.xp, self.fill = xp, fill
        self._vectors = {}
        self._replaced = []     # kept alive: a captured graph may still read them

    def get(self, size, dtype):
        """The first ``size`` values of the ``dtype`` vector (a view)."""
        vector = self._vectors.get(dtype)
        if vector is not None and vector.shape[0] >= size:
            return vector[:size]
        if _capturing(self.xp):
            return self.xp.full(size, self.fill, dtype)    # this graph's own
        length = size
        if vector is not None:
            self._replaced.append(vector)
            length = max(size, 2 * vector.shape[0])     # what is kept stays under 2x
        vector = self._vectors[dtype] = self.xp.full(length, self.fill, dtype)
        return vector[:size]


def column_sums(ones, rows):
    """The sum of each column of the [R, C] ``rows`` as ``ones`` (a
    FilledVectors of ones) @ rows, a BLAS GEMV, several times faster than
    NumPy's sum(axis=0), which adds row after row in a loop as short as the
    columns; sum(axis=0) for other dtypes than floats of 4 bytes or more and
    for no rows."""
    if rows.dtype.kind != "f" or rows.dtype.itemsize < 4 or rows.shape[0] == 0:
        return rows.sum(axis=0)
    return ones.xp.matmul(ones.get(rows.shape[0], rows.dtype), rows)


def _capturing(xp):
    """Whether ``xp``'s current stream is being captured into a CUDA graph."""
    cuda = getattr(xp, "cuda", None)
    return cuda is not None and cuda.get_current_stream().is_capturing()
