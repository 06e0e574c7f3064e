"""NumPy's floating-point error reports while a Session runs.

TF 1.15's kernels follow IEEE without a word: log(0) is -inf, 0/0 is nan, a
float16 GEMM past 65504 is inf (an overflow loss scaling expects); only
CheckNumerics reports a non-finite value, as an error. So towerflow's
kernels run with NumPy's reports off (no RuntimeWarning, no
FloatingPointError whatever the user set), once per plan run
(towerflow/plan.py)::

    token = float_errors.ignore()
    try: ...                                # the plan's steps
    finally: float_errors.restore(token)    # the caller's state again

The user's own Python that a run calls (py_func, from_generator's generator)
runs under :func:`users_python`, NumPy's defaults, as it did in TF on TF's
threads (NumPy 1.x kept the state per thread, and those threads had the
defaults).

NOTE: the state is a contextvar (NumPy 2): a thread does not inherit it, so
towerflow's own threads that run a caller's work run it in a copy of the
caller's context (backends/cpu_threads.py, data/prefetch.py, tf.data's
prefetch); a plan run on any other thread turns the reports off itself.
(NumPy 1.x keeps the state per thread, outside the context: there the
pool's threads keep their own, and may warn.)
"""

import functools

import numpy as np

_NUMPY_DEFAULTS = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}

# NOTE: NumPy's private names, so any failure (NumPy 1.x has neither; a later
# NumPy may change them) falls back to the public np.seterr, a little slower.
try:    # NumPy 2: the state is a contextvar holding an "extobj"
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
    _IGNORE_ALL = _make_extobj(all="ignore")
except Exception:  # noqa: BLE001
    _extobj_contextvar = None


def _ignore_numpy1():
    return np.seterr(all="ignore")


def _restore_numpy1(old):
    np.seterr(**old)


if _extobj_contextvar is not None:
    # NOTE: set directly, once per plan run: np.errstate costs ~0.9 us a run and
    # added ~2 us to a Session.run of a 3-op plan; this ~1 us (benchmarks/
    # session_overhead.py). A user's np.setbufsize or error callback is not
    # kept inside a run (neither changes a result).
    ignore = functools.partial(_extobj_contextvar.set, _IGNORE_ALL)
    restore = _extobj_contextvar.reset
else:
    ignore, restore = _ignore_numpy1, _restore_numpy1


def users_python():
    """A context with NumPy's default reports, for the user's Python in a run."""
    return np.errstate(**_NUMPY_DEFAULTS)
