"""The optimizers' in-place updates on the CPU as one compiled pass over each
variable (``native_updates.c``, the ``_native`` extension's optimizer updates),
threaded over the CPU
pool for big variables.

training_kernels.py's NumPy kernels update a variable in a chain of ufuncs,
each a whole-array pass (eleven for Adam); these read the variable, its slots
and the gradient once and write them once, computing the chain's expressions
in the same order (no FMA contraction), so they give the NumPy kernels'
values bit for bit, in float32 and float64. They serve the kernels through
their ``fused_updates`` hook (the GPU's is cupy_backend.FusedUpdates); each
method returns False, having done nothing, where the compiled kernels do not
take the arrays (TOWERFLOW_NATIVE=0, not built, not C-contiguous NumPy
arrays of one shape, a dtype other than float32/float64, or mixed dtypes
among the arrays and scalars), or where the variable is so small that the
chain costs less (MIN_COMPILED_ELEMENTS), and the NumPy chain runs instead::

    updates = CompiledUpdates(CPU_POOL)                  # numpy_backend.py
    updates.adam(var, m, v, grad, alpha, beta1, beta2, epsilon)   # True: done

ApplyCenteredRMSProp and ApplyAdadelta have no compiled kernel (NumPy only).
"""

from . import native
from .cpu_threads import SERIAL

# Variables of fewer elements are updated on the calling thread: a hand-off to
# the pool costs tens of microseconds, and an update of 2^18 float32 elements
# (in cache) takes about 40 us on one core. Measured on the 2-core machine
# under load, one and two threads alternated in one process (Adam, Nesterov):
# two threads ran at 0.73-0.84x of one at 2^18 elements, 1.04-1.06x at 2^19,
# 1.06-1.33x at 2^20, 1.6-1.8x at the MNIST CNN's 3.2M.
MIN_PARALLEL_ELEMENTS = 1 << 19
_PADDING = [0.0] * 5     # apply_update takes five scalars; unused ones are 0
# The kinds of native_updates.c's apply_update.
GRADIENT_DESCENT, MOMENTUM, NESTEROV, ADAM, RMS_PROP, ADAGRAD = range(6)
# Per kind, the variables of fewer elements are left to the NumPy chain: a
# compiled update costs ~2 us before its pass, a chain ~0.4 us per ufunc call
# and pass (2 for gradient descent, 4 for momentum, 6 for Nesterov, 5 for
# Adagrad, 9 and 11 for RMSProp and Adam). Measured on one core (thread time,
# float32): gradient descent broke even at 2^15 elements, momentum at 2^13,
# Nesterov at ~2^10; Adam was faster compiled from one element on.
MIN_COMPILED_ELEMENTS = (1 << 15, 1 << 13, 1 << 10, 0, 0, 1 << 10)


class CompiledUpdates:
    """The compiled updates, split into parts (whole cache lines) across
    ``parallel``'s threads where a variable has MIN_PARALLEL_ELEMENTS or more
    elements: any split gives the same bits, each element's update
    reading only that element."""

    def __init__(self, parallel=SERIAL):
        self.parallel = parallel

    def gradient_descent(self, var, grad, learning_rate, decay=None):
        """var = var * decay - grad * learning_rate (decay None: 1)."""
        return self._apply(GRADIENT_DESCENT, (var, None, None, grad),
                           (learning_rate, decay))

    def momentum(self, var, accum, grad, learning_rate, momentum, nesterov, decay=None):
        """accum = accum * momentum + grad; var = var * decay - learning_rate *
        (accum, or with ``nesterov`` accum * momentum + grad)."""
        return self._apply(NESTEROV if nesterov else MOMENTUM, (var, accum, None, grad),
                           (learning_rate, momentum, decay))

    def adam(self, var, m, v, grad, alpha, beta1, beta2, epsilon, decay=None):
        """m += (grad - m) * (1 - beta1); v += (grad^2 - v) * (1 - beta2);
        var = var * decay - m / (sqrt(v) + epsilon) * alpha."""
        if not _scalars_of(var, (beta1, beta2)):
            return False
        return self._apply(ADAM, (var, m, v, grad),
                           (alpha, 1 - beta1, 1 - beta2, epsilon, decay))

    def rms_prop(self, var, ms, mom, grad, learning_rate, rho, momentum, epsilon):
        """ms += (grad^2 - ms) * (1 - rho); mom = mom * momentum + grad /
        sqrt(ms + epsilon) * learning_rate; var -= mom."""
        if not _scalars_of(var, (rho,)):
            return False
        return self._apply(RMS_PROP, (var, ms, mom, grad),
                           (learning_rate, 1 - rho, momentum, epsilon))

    def adagrad(self, var, accum, grad, learning_rate):
        """accum += grad^2; var -= grad / sqrt(accum) * learning_rate."""
        return self._apply(ADAGRAD, (var, accum, None, grad), (learning_rate,))

    def _apply(self, kind, arrays, scalars):
        # NOTE: the compiled call checks the arrays itself (False if it does
        # not take them): Python checks cost more than a small variable's update.
        size = getattr(arrays[0], "size", 0)
        if size < MIN_COMPILED_ELEMENTS[kind] or not (
                native.available() and _scalars_of(arrays[0], scalars)):
            return False
        # NOTE: no decay (None) multiplies by 1: x * 1 is x, bit for bit.
        values = [1.0 if scalar is None else float(scalar) for scalar in scalars]
        values += _PADDING[len(values):]
        parts = self.parallel.parts(size, size) if size >= MIN_PARALLEL_ELEMENTS else 1
        if parts == 1:
            return native.apply_update(kind, values, *arrays, 0, 1)
        taken = [False] * parts

        def update(part):
            taken[part] = native.apply_update(kind, values, *arrays, part, parts)
        self.parallel.run(update, parts)
        return taken[0]     # NOTE: every part sees the same arrays: all or none taken


def _scalars_of(var, scalars):
    """Whether every scalar (but None) is a NumPy scalar of var's dtype (a
    Python float, or another dtype, would round differently from the chain)."""
    dtype = getattr(var, "dtype", None)
    for scalar in scalars:
        if scalar is not None and (getattr(scalar, "dtype", None) != dtype or scalar.ndim):
            return False
    return True
