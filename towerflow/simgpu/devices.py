"""cupy.cuda.Device and the CUDA runtime calls towerflow's probe makes."""

import os

from . import clock as clocks
from . import state


class Device:
    """cupy.cuda.Device: a context that makes GPU ``id`` current."""

    def __init__(self, device=None):
        world = state.world()
        self.id = world.current_device if device is None else int(device)
        world.check_device(self.id)
        self._saved = []

    def __enter__(self):
        world = state.world()
        self._saved.append(world.current_device)
        world.current_device = self.id
        return self

    def __exit__(self, *exc):
        state.world().current_device = self._saved.pop()
        return False

    def use(self):
        state.world().current_device = self.id

    def synchronize(self):
        world = state.world()
        world.refuse_during_capture("cudaDeviceSynchronize", device=self.id)
        world.null_stream(self.id)          # (made if nothing used it yet)
        for stream in _streams_of(world, self.id):
            world.host_waits_for(stream._done_clock())

    @property
    def compute_capability(self):
        return "90"

    @property
    def pci_bus_id(self):
        return pci_bus_id(self.id)

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


def _streams_of(world, device_id):
    return [stream for (device, _), stream in world.streams.items() if device == device_id]


def pci_bus_id(index):
    return f"0000:{0x1E + index:02X}:00.0"


class Runtime:
    """cupy.cuda.runtime, as far as towerflow calls it."""

    CUDARuntimeError = clocks.CUDARuntimeError

    @staticmethod
    def _visible():
        world = state.world()
        value = os.environ.get("CUDA_VISIBLE_DEVICES")
        if value is None:
            return world.gpu_count
        wanted = [part for part in value.split(",") if part.strip()]
        count = 0
        for part in wanted:     # CUDA stops at the first invalid entry
            if not part.strip().isdigit() or int(part) >= world.gpu_count:
                break
            count += 1
        return count

    def driverGetVersion(self):
        return 12080

    def runtimeGetVersion(self):
        return 12080

    def getDeviceCount(self):
        return self._visible()

    def getDevice(self):
        return state.world().current_device

    def setDevice(self, device):
        state.world().check_device(device)
        state.world().current_device = device

    def getDeviceProperties(self, device):
        world = state.world()
        world.check_device(device)
        return {"name": world.name.encode(), "totalGlobalMem": world.memory_bytes,
                "major": 9, "minor": 0, "multiProcessorCount": 132}

    def deviceGetPCIBusId(self, device):
        return pci_bus_id(device)

    def memGetInfo(self):
        used = sum(pool.total_bytes() for pool in state.pools_of(self.getDevice()))
        total = state.world().memory_bytes
        return total - used, total

    def deviceSynchronize(self):
        Device().synchronize()
