"""The one simulated machine of this process (see towerflow.simgpu.install)
and what is current on it: the allocator, the default memory pools."""

import threading
import weakref

_STATE = {"world": None}
_POOLS = weakref.WeakSet()
_LOCAL = threading.local()


def world():
    found = _STATE["world"]
    if found is None:
        raise RuntimeError("the simulated GPUs are not installed "
                           "(towerflow.simgpu.install())")
    return found


def set_world(new_world):
    _STATE["world"] = new_world
    _DEFAULT_POOLS.clear()
    _LOCAL.__dict__.clear()


def track_pool(pool):
    _POOLS.add(pool)


def pools_of(device_id):
    """The pools of this install's world that hold memory on ``device_id``."""
    current = world()
    return [pool for pool in list(_POOLS)
            if pool._world is current and device_id in pool._per_device]


_DEFAULT_POOLS = {}


def default_pool():
    """cupy.get_default_memory_pool(): one per device."""
    from .memory import MemoryPool
    device = world().current_device
    if device not in _DEFAULT_POOLS:
        _DEFAULT_POOLS[device] = MemoryPool()
    return _DEFAULT_POOLS[device]


def allocator():
    """The current allocator: ``size -> MemoryPointer`` (cupy.cuda.using_allocator)."""
    stack = getattr(_LOCAL, "allocators", None)
    if stack:
        return stack[-1]
    return default_pool().malloc


def push_allocator(malloc):
    if not hasattr(_LOCAL, "allocators"):
        _LOCAL.allocators = []
    _LOCAL.allocators.append(malloc)


def pop_allocator():
    _LOCAL.allocators.pop()
