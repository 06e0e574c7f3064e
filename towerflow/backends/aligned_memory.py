"""Arrays on 64-byte boundaries while a plan runs (``_aligned_memory.c``).

NumPy's default allocator (glibc's malloc) aligns blocks to 16 bytes, so
three in four big arrays of a cifar10 step began inside a cache line and
each 64-byte vector of the compiled kernels straddled two lines. While a
plan's steps run, NumPy allocates its data through ``_aligned_memory``'s
allocator instead: blocks of 4 KiB or more on 64-byte boundaries. Measured
on the 2-core VM, the cifar10 step at batch 64 with the switch alternated
within one process (three processes): 25.17 / 25.63 / 25.39 ms a step
against 25.90 / 26.15 / 25.87 off.

The allocator is NumPy's per-context policy (NEP 49): set around the steps
only, so the user's own arrays keep NumPy's default. It changes where
values are stored, never how they are computed: the results are the same
bits. TOWERFLOW_ALIGNED_ARRAYS=0 turns it off (read per run); where the
module is not built it is off::

    with aligned_memory.arrays():          # plan.py, around a plan's steps
        ...
"""

import contextlib

from .. import switches

try:
    from . import _aligned_memory
except ImportError:     # not built (no C compiler, or NumPy's headers were missing)
    _aligned_memory = None

_HANDLER = _aligned_memory.handler() if _aligned_memory is not None else None
_NOTHING = contextlib.nullcontext()


def built():
    """Whether the aligned allocator's module is built."""
    return _HANDLER is not None


def enabled():
    """Whether plans allocate aligned: built, and TOWERFLOW_ALIGNED_ARRAYS is not 0."""
    return built() and switches.on("TOWERFLOW_ALIGNED_ARRAYS")


def arrays():
    """A context in which NumPy allocates with the aligned allocator (where
    :func:`enabled`), restoring the allocator it replaced after."""
    return _Aligned() if enabled() else _NOTHING


class _Aligned:
    def __enter__(self):
        self._replaced = _aligned_memory.set_handler(_HANDLER)

    def __exit__(self, *exc_info):
        _aligned_memory.set_handler(self._replaced)
