"""``tf.config``: list, hide and split devices, with TensorFlow 2's names.

Configuration must come before the devices are first used (the first Session
or :func:`list_logical_devices`); afterwards changes raise RuntimeError::

    import towerflow as tf
    gpus = tf.config.list_physical_devices('GPU')
    tf.config.set_visible_devices(gpus[0], 'GPU')
    tf.config.set_logical_device_configuration(
        gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=1024)] * 4)
    tf.config.list_logical_devices('GPU')   # /device:GPU:0 .. /device:GPU:3
"""

import collections

from towerflow.api import missing as _missing
from towerflow.device import runtime
from towerflow.device.physical import PhysicalDevice
from towerflow.device.runtime import (
    LogicalDeviceConfiguration,
    VirtualDeviceConfiguration,
    get_logical_device_configuration,
    get_memory_growth,
    set_logical_device_configuration,
    set_memory_growth,
)

__all__ = [
    "LogicalDevice",
    "LogicalDeviceConfiguration",
    "PhysicalDevice",
    "experimental",
    "get_logical_device_configuration",
    "get_visible_devices",
    "list_logical_devices",
    "list_physical_devices",
    "set_logical_device_configuration",
    "set_visible_devices",
]

LogicalDevice = collections.namedtuple("LogicalDevice", ["name", "device_type"])
LogicalDevice.__doc__ = """A logical device as tf.config lists it.

    Example::

        >>> LogicalDevice('/device:GPU:0', 'GPU')
        LogicalDevice(name='/device:GPU:0', device_type='GPU')
    """


def list_physical_devices(device_type=None):
    """The physical devices of this process ('CPU', 'GPU' or None for all).

    Example::

        >>> list_physical_devices('GPU')   # on a machine without a usable GPU
        []
    """
    return runtime.physical_devices(device_type)


def set_visible_devices(devices, device_type=None):
    """Make only ``devices`` (one PhysicalDevice or a list) visible.

    With ``device_type='GPU'`` only GPUs are affected; the CPU cannot be hidden.

    Example::

        >>> gpus = list_physical_devices('GPU')
        >>> set_visible_devices(gpus[0], 'GPU')
    """
    runtime.set_visible_devices(devices, device_type)


def get_visible_devices(device_type=None):
    """The visible physical devices, optionally of one type.

    Example::

        >>> get_visible_devices('CPU')
        [PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU')]
    """
    return runtime.get_visible_devices(device_type)


def list_logical_devices(device_type=None):
    """The logical devices; initialises the devices, freezing the configuration.

    Example::

        >>> list_logical_devices('CPU')
        [LogicalDevice(name='/device:CPU:0', device_type='CPU')]
    """
    device_type = runtime.normalize_device_type(device_type)
    return [LogicalDevice(device.short_name, device.device_type)
            for device in runtime.logical_devices()
            if device_type in (None, device.device_type)]


experimental = _missing.namespace(
    "tf.config.experimental",
    "tf.config.experimental: the TF 2.0/2.1 names of the same calls.",
    list_physical_devices=list_physical_devices,
    set_visible_devices=set_visible_devices,
    get_visible_devices=get_visible_devices,
    set_virtual_device_configuration=set_logical_device_configuration,
    get_virtual_device_configuration=get_logical_device_configuration,
    set_logical_device_configuration=set_logical_device_configuration,
    get_logical_device_configuration=get_logical_device_configuration,
    VirtualDeviceConfiguration=VirtualDeviceConfiguration,
    LogicalDeviceConfiguration=LogicalDeviceConfiguration,
    set_memory_growth=set_memory_growth,
    get_memory_growth=get_memory_growth,
    list_logical_devices=list_logical_devices,
)

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
__getattr__ = _missing.module_getattr("tf.config")
