"""Devices: parsing device strings, discovering GPUs, configuring logical devices.

Example::

    >>> from towerflow.device import DeviceSpec, canonical
    >>> str(canonical(DeviceSpec.from_string('/gpu:1')))
    '/job:localhost/replica:0/task:0/device:GPU:1'
"""

from towerflow.device.physical import (
    GpuInfo,
    PhysicalDevice,
    host_memory_bytes,
    probe_gpus,
    set_gpu_probe,
)
from towerflow.device.runtime import (
    LogicalDevice,
    LogicalDeviceConfiguration,
    VirtualDeviceConfiguration,
    device_mapping_lines,
    gpu_unavailable_reason,
    local_task,
    logical_devices,
    peek_logical_devices,
    reset,
    set_local_task,
)
from towerflow.device.spec import DeviceSpec, canonical, merge_device_scopes

__all__ = [
    "DeviceSpec",
    "GpuInfo",
    "LogicalDevice",
    "LogicalDeviceConfiguration",
    "PhysicalDevice",
    "VirtualDeviceConfiguration",
    "canonical",
    "device_mapping_lines",
    "gpu_unavailable_reason",
    "host_memory_bytes",
    "local_task",
    "logical_devices",
    "merge_device_scopes",
    "peek_logical_devices",
    "probe_gpus",
    "reset",
    "set_gpu_probe",
    "set_local_task",
]
