"""The NumPy backend: kernels for every op on (logical) CPUs."""

import numpy as np

from ..graph import registry
from . import register_backend
from .kernels import build_kernels

KERNELS = build_kernels(np)
registry.register_kernels("CPU", KERNELS)


class NumpyDevice:
    """One logical CPU. Arrays are host NumPy arrays; a copy between two
    logical CPUs is a real copy, so towers never share buffers."""

    kernels = KERNELS

    def __init__(self, logical_device):
        self.logical_device = logical_device
        self.name = logical_device.name

    @staticmethod
    def to_device(host_value):
        return np.asarray(host_value)

    @staticmethod
    def to_host(value):
        return value

    @staticmethod
    def copy_from(value, source_device):
        return np.array(value, copy=True)

    def __repr__(self):
        return f"NumpyDevice({self.name})"


register_backend("CPU", NumpyDevice)
