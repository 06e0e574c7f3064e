"""Device memory on the simulated GPUs: blocks, pools with limits, pointers,
pinned host buffers.

A :class:`Block` is one allocation: a NumPy byte buffer, its device, a fake
device address, and its access history (the last write, and the reads
since, each as (stream key, seq)). Pools hand blocks out per stream as
CuPy's do; a freed block goes back to its pool and is handed out again to
the same stream, *with its history*, so reusing memory that another stream
may still be reading is caught as a race like any other.
"""

import bisect
import weakref

import numpy as np

from . import clock as clocks
from . import state

_ALIGN = 512


class OutOfMemoryError(MemoryError):
    """cupy.cuda.memory.OutOfMemoryError (same message)."""

    def __init__(self, size, total, limit=0):
        message = (f"Out of memory allocating {size:,} bytes (allocated so far: "
                   f"{total:,} bytes")
        message += f", limit set to: {limit:,} bytes)." if limit else ")."
        super().__init__(message)


class Block:
    """One device allocation and who touched it when."""

    def __init__(self, device_id, nbytes, pool, stream_key):
        self.device_id, self.nbytes = device_id, nbytes
        # NOTE: weak, as CuPy's pooled memory holds its pool: a pool dropped with
        # blocks cached frees them at once (a cycle would wait for the collector).
        self._pool = weakref.ref(pool)
        self.stream_key = stream_key
        self.buffer = np.empty(max(nbytes, 1), dtype=np.uint8)
        self.ptr = _ADDRESSES.assign(self, device_id, nbytes)
        self.last_write = None          # (stream key, seq) or None: never written
        self.reads = {}                 # stream key -> seq, since the last write
        self.generation = 0             # counts hand-outs and frees (see arrays.replayable)
        self.handouts = 0               # how often a pool handed it out
        self.poison()

    @property
    def pool(self):
        """The pool that handed the block out (None once that pool is gone)."""
        return self._pool()

    def poison(self):
        # NOTE: fresh memory reads as NaN (all bits set): a read of memory that
        # nothing wrote shows up in the values.
        self.buffer.fill(0xFF)

    def check_read(self, reader_clock, reader, what):
        if self.last_write is not None and not _visible(self.last_write, reader_clock):
            raise _race(self, what, reader, self.last_write, "written")

    def check_write(self, writer_clock, writer, what):
        self.check_read(writer_clock, writer, what)
        for key, seq in self.reads.items():
            if not _visible((key, seq), writer_clock):
                raise _race(self, what, writer, (key, seq), "read")

    def note_read(self, key, seq):
        self.reads[key] = max(seq, self.reads.get(key, -1))

    def note_write(self, key, seq):
        self.last_write, self.reads = (key, seq), {}


def _visible(access, reader_clock):
    key, seq = access
    return reader_clock.covers(key, seq)


def _race(block, what, who, access, verb):
    return clocks.RaceError(
        f"race on GPU {block.device_id} memory at {block.ptr:#x} ({block.nbytes} bytes): "
        f"{what} on {who} is not ordered after it was {verb} on {access[0]} "
        f"(step {access[1]}): add a synchronize, or record an event there and wait on it")


class _AddressSpace:
    """Fake device addresses, so ``x.data.ptr`` can be passed around (NCCL takes
    pointers) and mapped back to its block."""

    def __init__(self):
        self._next = {}
        self._starts, self._blocks = [], []

    def assign(self, block, device_id, nbytes):
        base = self._next.get(device_id, (device_id + 1) << 40)
        self._next[device_id] = base + (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN + _ALIGN
        index = bisect.bisect(self._starts, base)
        self._starts.insert(index, base)
        self._blocks.insert(index, weakref.ref(block))
        return base

    def find(self, ptr):
        """(block, byte offset) of a device address; raises for a wild pointer."""
        index = bisect.bisect(self._starts, ptr) - 1
        block = self._blocks[index]() if index >= 0 else None
        if block is None or not block.ptr <= ptr < block.ptr + max(block.nbytes, 1):
            raise clocks.CUDARuntimeError(
                clocks.ERROR_INVALID_VALUE,
                f"cudaErrorIllegalAddress: {ptr:#x} is not in any live allocation")
        return block, ptr - block.ptr


_ADDRESSES = _AddressSpace()


def find_pointer(ptr):
    return _ADDRESSES.find(ptr)


class MemoryPointer:
    """cupy.cuda.MemoryPointer: ``ptr``, ``device_id``, ``mem`` (the lease of
    the block: while any pointer holds it, the block stays allocated)."""

    def __init__(self, mem, offset=0):
        self.mem, self.offset = mem, offset   # mem: the block's lease
        self.block = mem.block
        self.ptr = self.block.ptr + offset
        self.device_id = self.block.device_id

    def __int__(self):
        return self.ptr


class MemoryPool:
    """cupy.cuda.MemoryPool: like CuPy's, one sub-pool per device, and every
    call (malloc, the byte counts, set_limit) acts on the current device's;
    blocks are cached per stream; a limit counts cached blocks too."""

    def __init__(self, allocator=None):
        del allocator
        self._world = state.world()
        self._per_device = {}
        self.ever_allocated = False
        self.graph_owner = None         # the capture whose graph allocates from it
        state.track_pool(self)

    def _sub(self, device_id=None):
        device_id = self._world.current_device if device_id is None else device_id
        if device_id not in self._per_device:
            self._per_device[device_id] = _DevicePool(device_id)
        return self._per_device[device_id]

    def set_limit(self, size=None, fraction=None):
        if fraction is not None:
            size = int(self._world.memory_bytes * fraction)
        self._sub().limit = int(size or 0)

    def get_limit(self):
        return self._sub().limit

    def used_bytes(self):
        return self._sub().used

    def total_bytes(self):
        return self._sub().total()

    def free_bytes(self):
        return self._sub().free_bytes

    def free_all_blocks(self, stream=None):
        self._sub().drop_cache()

    def malloc(self, size):
        """A MemoryPointer to ``size`` bytes for the current stream."""
        world = state.world()
        stream = world.current_stream()
        _check_capture_allocation(world, stream, self)
        nbytes = (int(size) + _ALIGN - 1) // _ALIGN * _ALIGN
        sub = self._sub(stream.device_id)
        block = sub.reuse(stream.key, nbytes) or self._new(sub, stream, nbytes)
        block.handouts += 1
        sub.used += nbytes
        self.ever_allocated = True
        return MemoryPointer(_Lease(block, self))

    def _new(self, sub, stream, nbytes):
        if sub.limit and sub.total() + nbytes > sub.limit:
            raise OutOfMemoryError(nbytes, sub.total(), sub.limit)
        if _device_used(sub.device_id) + nbytes > self._world.memory_bytes:
            for pool in state.pools_of(sub.device_id):     # as CuPy: free the caches, retry
                pool._sub(sub.device_id).drop_cache()
            if _device_used(sub.device_id) + nbytes > self._world.memory_bytes:
                raise OutOfMemoryError(nbytes, sub.total())
        return Block(stream.device_id, nbytes, self, stream.key)

    def _give_back(self, block):
        block.generation += 1
        self._sub(block.device_id).cache(block)


class _DevicePool:
    """One device's part of a MemoryPool."""

    def __init__(self, device_id):
        self.device_id, self.limit, self.used = device_id, 0, 0
        self.blocks = {}                # (stream key, nbytes) -> [cached Block]
        self.free_bytes = 0

    def total(self):
        return self.used + self.free_bytes

    def reuse(self, stream_key, nbytes):
        blocks = self.blocks.get((stream_key, nbytes))
        if not blocks:
            return None
        self.free_bytes -= nbytes
        block = blocks.pop()
        block.generation += 1
        return block

    def cache(self, block):
        self.used -= block.nbytes
        self.blocks.setdefault((block.stream_key, block.nbytes), []).append(block)
        self.free_bytes += block.nbytes

    def drop_cache(self):
        self.blocks.clear()
        self.free_bytes = 0


def _device_used(device_id):
    return sum(pool._sub(device_id).total() for pool in state.pools_of(device_id))


def device_bytes(device_id):
    """The bytes every live pool holds on GPU ``device_id``, in use or cached:
    what the process takes of that GPU (as nvidia-smi would show it). For tests."""
    return _device_used(device_id)


class _Lease:
    """Returns its block to the pool when the last array using it is gone
    (arrays hold it through their MemoryPointer)."""

    def __init__(self, block, pool):
        self.block = block
        weakref.finalize(self, pool._give_back, block)


def _check_capture_allocation(world, stream, pool):
    graph = world.capture_of(stream)
    if graph is None:
        return
    if pool.ever_allocated and pool.graph_owner is not graph:
        raise clocks.capture_error(
            "an allocation during stream capture from a memory pool that also serves work "
            "outside the graph: its blocks could be reused while the graph still uses "
            "them (allocate from a pool private to the graph)")
    pool.graph_owner = graph


# -- pinned host memory ----------------------------------------------------------------


class PinnedArray(np.ndarray):
    """A NumPy array in (simulated) page-locked memory. An asynchronous copy
    from it reads it later on the device, so the host may not write it until
    that copy is known to be done: such a write raises RaceError."""

    def __array_finalize__(self, obj):
        self._pinned_reads = getattr(obj, "_pinned_reads", None)

    def _reads(self):
        base = self
        while isinstance(base.base, PinnedArray):
            base = base.base
        if base._pinned_reads is None:
            base._pinned_reads = {}
        return base._pinned_reads

    def note_device_read(self, key, seq):
        reads = self._reads()
        reads[key] = max(seq, reads.get(key, -1))

    def __setitem__(self, index, value):
        host = state.world().host_clock
        for key, seq in self._reads().items():
            if not host.covers(key, seq):
                raise clocks.RaceError(
                    f"the host wrote a pinned buffer that an asynchronous copy on {key} "
                    f"(step {seq}) may still be reading: wait for that copy first")
        super().__setitem__(index, value)


def empty_pinned(shape, dtype=float, order="C"):
    return np.empty(shape, dtype=dtype, order=order).view(PinnedArray)


def zeros_pinned(shape, dtype=float, order="C"):
    out = empty_pinned(shape, dtype, order)
    np.ndarray.fill(out, 0)
    return out
