"""Device memory on the simulated GPUs: blocks, pools with limits, pointers,
pinned host buffers.

A :class:`Block` is one chunk of an allocation (a NumPy byte buffer with a
fake device address), on its device, with its access history (the last
writes, and the reads since, each as stream key -> seq). Pools hand chunks
out per stream as CuPy's do: sizes rounded up to 512 bytes, the smallest
free chunk that fits split to serve a request, free neighbours merged; a
freed chunk keeps its history, so reusing memory that another stream may
still be reading is caught as a race like any other, and a read of memory
nothing wrote since its hand-out raises UninitializedReadError.
"""

import bisect
import gc
import threading
import weakref

import numpy as np

from . import clock as clocks
from . import state

_ALIGN = 512


def rounded(nbytes):
    """``nbytes`` rounded up to the pools' 512-byte unit, as CuPy's pools round."""
    return (int(nbytes) + _ALIGN - 1) // _ALIGN * _ALIGN


class OutOfMemoryError(MemoryError):
    """cupy.cuda.memory.OutOfMemoryError (same message)."""

    def __init__(self, size, total, limit=0):
        message = (f"Out of memory allocating {size:,} bytes (allocated so far: "
                   f"{total:,} bytes")
        message += f", limit set to: {limit:,} bytes)." if limit else ")."
        super().__init__(message)


class _Memory:
    """One cudaMalloc: the bytes and their address; the pool carves it into
    chunks (Blocks). ``released``: given back to the driver (cudaFree)."""

    def __init__(self, device_id, nbytes):
        self.device_id, self.nbytes = device_id, nbytes
        self.buffer = np.empty(max(nbytes, 1), dtype=np.uint8)
        # NOTE: fresh memory reads as NaN (all bits set): a read of memory that
        # nothing wrote shows up in the values.
        self.buffer.fill(0xFF)
        self.ptr = _ADDRESSES.assign(self, device_id, nbytes)
        self.head = None                # the chunk at offset 0 (chunks are linked)
        self.released = False
        self.backing = None             # a MemoryPointer of the pool's allocator, if any
        self.handout_log = None         # [(offset, end)] of a graph pool's hand-outs

    def chunk_at(self, ptr):
        chunk = self.head
        while chunk is not None and not chunk.ptr <= ptr < chunk.ptr + max(chunk.nbytes, 1):
            chunk = chunk.next
        return chunk


class Block:
    """One chunk of device memory as CuPy's pool hands it out (a whole
    allocation, or part of a larger one it split), and who touched it when.
    History (the last writes, the reads since) stays with the bytes: a chunk
    split off, or merged with its free neighbour, inherits it."""

    def __init__(self, memory, offset, nbytes, pool, stream_key):
        self.memory, self.offset, self.nbytes = memory, offset, nbytes
        self.device_id = memory.device_id
        # NOTE: weak, as CuPy's pooled memory holds its pool: a pool dropped with
        # blocks cached frees them at once (a cycle would wait for the collector).
        self._pool = weakref.ref(pool)
        self.stream_key = stream_key
        self.prev = self.next = None
        self.in_use = False
        self.writes = {}                # stream key -> seq: the last writes
        self.reads = {}                 # stream key -> seq, since the last write
        self.written = False            # written since the pool handed it out
        self.generation = 0             # counts hand-outs and frees (see work.replayable)
        self.handouts = 0               # how often a pool handed it out

    buffer = property(lambda self: self.memory.buffer[self.offset:self.offset + self.nbytes]
                      if self.nbytes else self.memory.buffer[:1])
    ptr = property(lambda self: self.memory.ptr + self.offset)

    @property
    def pool(self):
        """The pool that handed the block out (None once that pool is gone)."""
        return self._pool()

    @property
    def last_write(self):
        return next(iter(self.writes.items()), None)

    def check_read(self, reader_clock, reader, what):
        for access in self.writes.items():
            if not _visible(access, reader_clock):
                raise _race(self, what, reader, access, "written")

    def check_initialized(self, reader, what):
        """A read of memory no work wrote since its allocation: its contents are
        whatever the last user left (per chunk: a write to any part counts)."""
        if not self.written and self.nbytes:
            raise clocks.UninitializedReadError(
                f"read of uninitialized GPU {self.device_id} memory at {self.ptr:#x} "
                f"({self.nbytes} bytes): {what} on {reader} reads memory that no kernel "
                "or copy wrote since it was allocated (cupy.empty memory holds garbage: "
                "fill it first, or allocate it with cupy.zeros)")

    def check_write(self, writer_clock, writer, what):
        self.check_read(writer_clock, writer, what)
        for access in self.reads.items():
            if not _visible(access, writer_clock):
                raise _race(self, what, writer, access, "read")

    def note_read(self, key, seq):
        self.reads[key] = max(seq, self.reads.get(key, -1))

    def note_write(self, key, seq):
        self.writes, self.reads, self.written = {key: seq}, {}, True

    def split(self, nbytes):
        """Cut this free chunk at ``nbytes``: returns the free rest (CuPy's split)."""
        rest = Block(self.memory, self.offset + nbytes, self.nbytes - nbytes, self.pool,
                     self.stream_key)
        rest.writes, rest.reads = dict(self.writes), dict(self.reads)
        rest.prev, rest.next = self, self.next
        if self.next is not None:
            self.next.prev = rest
        self.next, self.nbytes = rest, nbytes
        return rest

    def merge(self, following):
        """Absorb ``following``, the free chunk after this one, and its history."""
        self.nbytes += following.nbytes
        self.next = following.next
        if self.next is not None:
            self.next.prev = self
        _union(self.writes, following.writes)
        _union(self.reads, following.reads)
        following.generation += 1


def _union(accesses, more):
    for key, seq in more.items():
        accesses[key] = max(seq, accesses.get(key, -1))


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
        self._next[device_id] = base + rounded(nbytes) + _ALIGN
        index = bisect.bisect(self._starts, base)
        self._starts.insert(index, base)
        self._blocks.insert(index, weakref.ref(block))
        return base

    def find(self, ptr):
        """(block, byte offset) of a device address; raises for a wild pointer
        (outside any allocation, or in a chunk the pool holds free)."""
        index = bisect.bisect(self._starts, ptr) - 1
        memory = self._blocks[index]() if index >= 0 else None
        block = None if memory is None or memory.released else memory.chunk_at(ptr)
        if block is None or not block.in_use:
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
        self._allocator = allocator     # None: cudaMalloc; else size -> MemoryPointer
        self._world = state.world()
        self._per_device = {}
        self.ever_allocated = False
        self.graph_owner = None         # the capture whose graph allocates from it
        # NOTE: as CuPy's pool, safe across threads (Sessions run from several);
        # reentrant: a block's finalizer can give it back inside a malloc.
        self._lock = threading.RLock()
        state.track_pool(self)
        weakref.finalize(self, _drop_all, self._per_device)

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
        """A MemoryPointer to ``size`` bytes (rounded up to 512, as CuPy's
        _round_size) for the current stream: the smallest free chunk of that
        stream that fits, split if larger (CuPy's _get_chunk), else new memory."""
        with self._lock:
            return self._malloc(size)

    def _malloc(self, size):
        world = state.world()
        stream = world.current_stream()
        _check_capture_allocation(world, stream, self)
        nbytes = rounded(size)
        sub = self._sub(stream.device_id)
        if nbytes == 0:                     # CuPy: MemoryPointer(Memory(0), 0), no pool
            return MemoryPointer(_Lease(self._empty(stream), None))
        block = sub.reuse(stream.key, nbytes) or self._new(sub, stream, nbytes)
        block.handouts += 1
        block.in_use, block.written = True, False
        sub.used += block.nbytes
        if block.memory.handout_log is not None:    # a graph pool's (work.check_seal)
            block.memory.handout_log.append((block.offset, block.offset + block.nbytes))
        self.ever_allocated = True
        return MemoryPointer(_Lease(block, self))

    def _new(self, sub, stream, nbytes):
        """New memory, as CuPy 14.2's _try_malloc: past the limit, or with the
        GPU full, this pool frees its own cached chunks (not split; after a
        gc.collect the second time) and tries again; other pools keep theirs."""
        _retry_freeing_cache(sub, lambda: sub.limit and sub.total() + nbytes > sub.limit,
                             lambda: OutOfMemoryError(nbytes, sub.total(), sub.limit))
        backing = None
        if self._allocator is None:
            _retry_freeing_cache(sub, lambda: _device_full(sub.device_id, nbytes),
                                 lambda: OutOfMemoryError(nbytes, sub.total(), sub.limit))
        else:   # NOTE: what the allocator raises passes through (only a CUDA error retries)
            backing = self._allocator(nbytes)
        memory = _Memory(stream.device_id, nbytes)
        memory.backing = backing        # the allocator's memory: held while this is
        memory.handout_log = [] if self.graph_owner is not None else None
        memory.head = Block(memory, 0, nbytes, self, stream.key)
        sub.allocated += nbytes
        return memory.head

    def _empty(self, stream):
        memory = _Memory(stream.device_id, 0)
        memory.head = Block(memory, 0, 0, self, stream.key)
        memory.head.in_use = True
        return memory.head

    def _give_back(self, block):
        with self._lock:
            block.generation += 1
            self._sub(block.device_id).cache(block)


class _DevicePool:
    """One device's part of a MemoryPool: free chunks per stream (an arena),
    by size."""

    def __init__(self, device_id):
        self.device_id, self.limit, self.used = device_id, 0, 0
        self.allocated = 0              # bytes of memory taken from the GPU
        self.arenas = {}                # stream key -> {nbytes: [free Block]}

    def total(self):
        return self.allocated

    @property
    def free_bytes(self):
        return self.allocated - self.used

    def reuse(self, stream_key, nbytes):
        arena = self.arenas.get(stream_key, {})
        # NOTE: a snapshot: a finalizer giving a block back can run mid-loop
        sizes = [size for size, blocks in list(arena.items()) if size >= nbytes and blocks]
        if not sizes:
            return None
        size = min(sizes)
        block = arena[size].pop()
        if not arena[size]:
            del arena[size]
        if block.nbytes > nbytes:
            rest = block.split(nbytes)
            arena.setdefault(rest.nbytes, []).append(rest)
        block.generation += 1
        return block

    def cache(self, block):
        """A chunk given back: merged with free neighbours (CuPy's free)."""
        self.used -= block.nbytes
        block.in_use = False
        arena = self.arenas.setdefault(block.stream_key, {})
        following = block.next
        if following is not None and self._take(arena, following):
            block.merge(following)
        previous = block.prev
        if previous is not None and self._take(arena, previous):
            previous.merge(block)
            block = previous
        arena.setdefault(block.nbytes, []).append(block)

    @staticmethod
    def _take(arena, block):
        blocks = arena.get(block.nbytes, ())
        if block.in_use or block not in blocks:
            return False
        blocks.remove(block)
        if not blocks:
            del arena[block.nbytes]
        return True

    def drop_cache(self):
        """Free every cached chunk not split (CuPy's free_all_blocks)."""
        for arena in self.arenas.values():
            for blocks in arena.values():
                kept = [block for block in blocks if block.prev or block.next]
                for block in blocks:
                    if not (block.prev or block.next):
                        _release(block)
                        self.allocated -= block.nbytes
                blocks[:] = kept


def _release(block):
    """Memory given back to the GPU: what still points into it is stale."""
    block.memory.released = True
    block.memory.backing = None         # back to the allocator's pool
    block.generation += 1


def _drop_all(per_device):
    """A pool gone: its cached chunks are freed (an allocation some of whose
    chunks are still in use lives on until they are freed)."""
    for sub in per_device.values():
        for arena in sub.arenas.values():
            for blocks in arena.values():
                for block in blocks:
                    _release_if_unused(block)
        sub.arenas.clear()


def _release_if_unused(block):
    chunk = block.memory.head
    while chunk is not None and not chunk.in_use:
        chunk = chunk.next
    if chunk is None:
        _release(block)


def _device_used(device_id):
    """Bytes taken from the GPU: a pool given an allocator takes none itself."""
    return sum(pool._sub(device_id).total() for pool in state.pools_of(device_id)
               if pool._allocator is None)


def _device_full(device_id, nbytes):
    return _device_used(device_id) + nbytes > state.world().memory_bytes


def _retry_freeing_cache(sub, short, error):
    """While ``short()``: free ``sub``'s cache, then collect garbage and free it
    again (CuPy 14.2's order); still short: raise ``error()``."""
    for collect in (False, True):
        if not short():
            return
        if collect:
            gc.collect()
        sub.drop_cache()
    if short():
        raise error()


def device_bytes(device_id):
    """The bytes every live pool holds on GPU ``device_id``, in use or cached:
    what the process takes of that GPU (as nvidia-smi would show it). For tests."""
    return _device_used(device_id)


class _Lease:
    """Returns its block to the pool when the last array using it is gone
    (arrays hold it through their MemoryPointer). NOTE: the pool is held
    weakly, as CuPy's PooledMemory holds it: a pool dropped while its blocks
    are in use frees each at its release, not into a cache."""

    def __init__(self, block, pool):
        self.block = block
        if pool is not None:
            weakref.finalize(self, _give_back, weakref.ref(pool), block)


def _give_back(pool_ref, block):
    pool = pool_ref()
    if pool is None:
        block.in_use = False
        _release_if_unused(block)
    else:
        pool._give_back(block)


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
