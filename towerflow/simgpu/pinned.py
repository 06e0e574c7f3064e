"""Pinned host memory on the simulated GPUs: cupyx.empty_pinned's arrays and
the pinned memory pool they come from (as CuPy's: a freed buffer handed out
again at once), which make a buffer released before its asynchronous copy
ran a RaceError at the host's next write."""

import weakref

import numpy as np

from . import clock as clocks
from . import state
from .memory import rounded


class PinnedArray(np.ndarray):
    """A NumPy array in (simulated) page-locked memory. An asynchronous copy
    from it reads it later on the device, so the host may not write it until
    that copy is known to be done: such a write raises RaceError. The reads
    stay with the memory, which CuPy's pinned pool hands out again as soon
    as the array is freed (see PinnedMemoryPool)."""

    def __array_finalize__(self, obj):
        self._pinned = getattr(obj, "_pinned", None)    # (block, lease)

    def _reads(self):
        if self._pinned is None:            # not from a pool: history of its own
            self._pinned = (_PinnedBlock(0), None)
        return self._pinned[0].reads

    def note_device_read(self, key, seq):
        reads = self._reads()
        reads[key] = max(seq, reads.get(key, -1))

    def __setitem__(self, index, value):
        host = state.world().host_clock
        for key, seq in self._reads().items():
            if not host.covers(key, seq):
                raise clocks.RaceError(_pinned_race(self._pinned[0], key, seq))
        super().__setitem__(index, value)


def _pinned_race(block, key, seq):
    reused = (" (its memory was freed and handed out again by the pinned memory pool: "
              "the buffer of that copy was released before the copy ran; keep it alive "
              "until then, e.g. through stream.launch_host_func)") if block.handouts > 1 else ""
    return (f"the host wrote a pinned buffer that an asynchronous copy on {key} (step "
            f"{seq}) may still be reading{reused}: wait for that copy first")


class _PinnedBlock:
    """One cudaHostAlloc: its bytes and the device reads of them."""

    def __init__(self, nbytes):
        self.buffer = np.empty(max(nbytes, 1), dtype=np.uint8)
        self.reads = {}                 # stream key -> seq of asynchronous copies
        self.handouts = 0


class PinnedMemoryPool:
    """cupy.cuda.PinnedMemoryPool, which cupyx.empty_pinned allocates from:
    sizes rounded up to 512 bytes, and a freed buffer kept for, and handed out
    at once to, the next request of that size, whatever still reads it."""

    def __init__(self):
        self._free_blocks = {}          # nbytes -> [_PinnedBlock]

    def malloc(self, size):
        nbytes = rounded(size)
        free = self._free_blocks.get(nbytes)
        block = free.pop() if free else _PinnedBlock(nbytes)
        block.handouts += 1
        return block, _PinnedLease(self, nbytes, block)

    def _give_back(self, nbytes, block):
        # NOTE: private: the simulator offers only names the installed CuPy has
        # (tests/test_cupy_conformance.py)
        self._free_blocks.setdefault(nbytes, []).append(block)

    def n_free_blocks(self):
        return sum(len(blocks) for blocks in self._free_blocks.values())

    def free_all_blocks(self):
        self._free_blocks.clear()


class _PinnedLease:
    """Gives its block back to the pool once no array uses it."""

    def __init__(self, pool, nbytes, block):
        weakref.finalize(self, pool._give_back, nbytes, block)


def pinned_pool():
    """The process's pinned memory pool (cupy.get_default_pinned_memory_pool())."""
    world = state.world()
    if getattr(world, "pinned_pool", None) is None:
        world.pinned_pool = PinnedMemoryPool()
    return world.pinned_pool


def empty_pinned(shape, dtype=float, order="C"):
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype=dtype, order=order).view(PinnedArray)
    block, lease = pinned_pool().malloc(nbytes)
    out = block.buffer[:nbytes].view(dtype).reshape(shape, order=order).view(PinnedArray)
    out._pinned = (block, lease)
    return out


def zeros_pinned(shape, dtype=float, order="C"):
    out = empty_pinned(shape, dtype, order)
    np.ndarray.fill(out, 0)
    return out
