"""The optimizers' in-place updates on the CPU as one compiled pass over each
variable (``_native.c``'s "optimizer updates" section), threaded over the CPU
pool for big variables.

training_kernels.py's NumPy kernels update a variable in a chain of ufuncs,
each a whole-array pass (eleven for Adam); these read the variable, its slots
and the gradient once and write them once, computing the chain's expressions
in the same order (no FMA contraction), so they give the NumPy kernels'
values bit for bit, in float32 and float64. They serve the kernels through
their ``fused_updates`` hook (the GPU's is cupy_backend.FusedUpdates); each
method returns False, having done nothing, where the compiled kernels do not
take the arrays (TOWERFLOW_NATIVE=0, not built, not C-contiguous NumPy
arrays, a dtype other than float32/float64, or mixed dtypes among the arrays
and scalars), and the NumPy chain runs instead::

    updates = CompiledUpdates(CPU_POOL)                  # numpy_backend.py
    updates.adam(var, m, v, grad, alpha, beta1, beta2, epsilon)   # True: done

ApplyCenteredRMSProp and ApplyAdadelta have no compiled kernel (NumPy only).
"""

from . import native
from .cpu_threads import SERIAL

# The kinds of _native.c's apply_update.
GRADIENT_DESCENT, MOMENTUM, NESTEROV, ADAM, RMS_PROP, ADAGRAD = range(6)
# Parts start at multiples of this many elements: 64 bytes or more, a whole
# cache line, so no two threads write the same line.
ALIGN = 16


class CompiledUpdates:
    """The compiled updates, split across ``parallel``'s threads where a
    variable has cpu_threads.MIN_PARALLEL_ELEMENTS or more elements (any split
    gives the same bits: each element's update reads only that element)."""

    def __init__(self, parallel=SERIAL):
        self.parallel = parallel

    def gradient_descent(self, var, grad, learning_rate, decay=None):
        """var = var * decay - grad * learning_rate (decay None: 1)."""
        return self._apply(GRADIENT_DESCENT, (var, None, None, grad),
                           (learning_rate, _one(var, decay)))

    def momentum(self, var, accum, grad, learning_rate, momentum, nesterov, decay=None):
        """accum = accum * momentum + grad; var = var * decay - learning_rate *
        (accum, or with ``nesterov`` accum * momentum + grad)."""
        return self._apply(NESTEROV if nesterov else MOMENTUM, (var, accum, None, grad),
                           (learning_rate, momentum, _one(var, decay)))

    def adam(self, var, m, v, grad, alpha, beta1, beta2, epsilon, decay=None):
        """m += (grad - m) * (1 - beta1); v += (grad^2 - v) * (1 - beta2);
        var = var * decay - m / (sqrt(v) + epsilon) * alpha."""
        if not _scalars_of(var, beta1, beta2):
            return False
        return self._apply(ADAM, (var, m, v, grad),
                           (alpha, 1 - beta1, 1 - beta2, epsilon, _one(var, decay)))

    def rms_prop(self, var, ms, mom, grad, learning_rate, rho, momentum, epsilon):
        """ms += (grad^2 - ms) * (1 - rho); mom = mom * momentum + grad /
        sqrt(ms + epsilon) * learning_rate; var -= mom."""
        if not _scalars_of(var, rho):
            return False
        return self._apply(RMS_PROP, (var, ms, mom, grad),
                           (learning_rate, 1 - rho, momentum, epsilon))

    def adagrad(self, var, accum, grad, learning_rate):
        """accum += grad^2; var -= grad / sqrt(accum) * learning_rate."""
        return self._apply(ADAGRAD, (var, accum, None, grad), (learning_rate,))

    def _apply(self, kind, arrays, scalars):
        var = arrays[0]
        if not (native.float_arrays(*arrays) and _scalars_of(var, *scalars)
                and all(array is None or array.shape == var.shape for array in arrays)):
            return False
        values = tuple(float(scalar) for scalar in scalars) + (0.0,) * (5 - len(scalars))
        size = var.size
        self.parallel.for_ranges(size, lambda first, stop: native.apply_update(
            kind, (size, first, stop), values, *arrays), align=ALIGN)
        return True


def _one(var, decay):
    """``decay``, or 1 in var's dtype (x * 1 is x, bit for bit)."""
    return var.dtype.type(1) if decay is None else decay


def _scalars_of(var, *scalars):
    """Whether every scalar is a NumPy value of var's dtype (a Python float, or
    another dtype, would round differently from the NumPy chain)."""
    dtype = var.dtype
    return all(getattr(scalar, "dtype", None) == dtype and scalar.ndim == 0
               for scalar in scalars)
