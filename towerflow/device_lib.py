"""``device_lib``: the local devices with their memory and description.

Example::

    >>> from towerflow import device_lib
    >>> [device.name for device in device_lib.list_local_devices()]
    ['/device:CPU:0', '/device:GPU:0']
"""

import secrets
import threading

from towerflow.device import physical, runtime

__all__ = ["DeviceAttributes", "list_local_devices"]

_incarnations = {}
_lock = threading.Lock()


class DeviceAttributes:
    """One local device, with the fields of TensorFlow's DeviceAttributes.

    ``memory_limit`` is in bytes; ``physical_device_desc`` describes the GPU
    behind a logical GPU ('' for CPUs); ``incarnation`` is a random id,
    stable for the life of the process.

    Example::

        >>> device = list_local_devices()[0]
        >>> device.name, device.device_type, device.physical_device_desc
        ('/device:CPU:0', 'CPU', '')
    """

    __slots__ = ("name", "device_type", "memory_limit", "physical_device_desc",
                 "incarnation")

    def __init__(self, name, device_type, memory_limit, physical_device_desc, incarnation):
        self.name = name
        self.device_type = device_type
        self.memory_limit = memory_limit
        self.physical_device_desc = physical_device_desc
        self.incarnation = incarnation

    def __repr__(self):
        # TensorFlow prints these as protobuf text; users know that layout.
        lines = [f'name: "{self.name}"', f'device_type: "{self.device_type}"',
                 f"memory_limit: {self.memory_limit}", f"incarnation: {self.incarnation}"]
        if self.physical_device_desc:
            lines.append(f'physical_device_desc: "{self.physical_device_desc}"')
        return "\n".join(lines) + "\n"

    def __eq__(self, other):
        if not isinstance(other, DeviceAttributes):
            return NotImplemented
        return all(getattr(self, field) == getattr(other, field) for field in self.__slots__)

    __hash__ = None


def _incarnation(name):
    """A random 63-bit id per device name, drawn once per process."""
    with _lock:
        return _incarnations.setdefault(name, secrets.randbits(63) or 1)


def list_local_devices():
    """The logical devices of this process, CPUs first.

    Does not freeze the device configuration, so it may be called before
    ``tf.config`` calls.

    Example::

        >>> print(list_local_devices()[1])
        name: "/device:GPU:0"
        device_type: "GPU"
        memory_limit: 1073741824
        incarnation: 4263357914425380123
        physical_device_desc: "device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: ..."
    """
    return [DeviceAttributes(
        name=device.short_name,
        device_type=device.device_type,
        memory_limit=device.memory_limit,
        physical_device_desc=physical.describe_gpu(device.gpu) if device.gpu else "",
        incarnation=_incarnation(device.short_name),
    ) for device in runtime.peek_logical_devices()]
