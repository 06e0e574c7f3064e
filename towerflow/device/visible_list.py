"""``ConfigProto.gpu_options.visible_device_list``: which of the process's GPUs
a Session uses, and in which order it numbers them, as in TensorFlow 1.15:
``"1"`` makes the process's GPU 1 the Session's ``/gpu:0`` (Horovod's
``visible_device_list = str(hvd.local_rank())``); ``"1,0"`` swaps two.

The ids are the process's physical GPU indices (after CUDA_VISIBLE_DEVICES);
a GPU split into logical GPUs brings all of them, in order.
"""

import dataclasses

from .. import errors
from . import physical
from .spec import DeviceSpec


def gpus_in_listed_order(devices, visible_device_list):
    """``devices`` (the process's logical devices) with the GPUs limited to
    and renumbered in the order of ``visible_device_list``; all of them when
    it is empty or the process has no GPU. InvalidArgumentError (TensorFlow's messages) for an entry
    that is not a number, not a GPU, or repeated.

    Example::

        >>> [d.short_name for d in gpus_in_listed_order(devices, "1")]
        ['/device:CPU:0', '/device:GPU:0']        # the process's GPU 1
    """
    gpu_count = len(physical.probe_gpus()[0])
    # NOTE: as in TF, a process without GPUs ignores the list: Horovod programs set
    # it to str(local_rank) unconditionally, and run on CPU-only hosts too
    if not visible_device_list or gpu_count == 0:
        return list(devices)
    order = parse_visible_device_list(visible_device_list, gpu_count)
    gpus = [device for device in devices if device.device_type == "GPU"]
    used = sorted({device.gpu.index for device in gpus})
    listed = []
    for gpu_id in order:
        if gpu_id not in used:
            raise errors.InvalidArgumentError(
                None, None, f"'visible_device_list' lists GPU {gpu_id}, which this process "
                f"does not use: it uses GPU(s) {used} (tf.config.set_visible_devices, or "
                "towerflow launch, which gives each rank the GPU of its local rank)")
        listed += [_renumbered(device, len(listed) + offset) for offset, device in
                   enumerate(d for d in gpus if d.gpu.index == gpu_id)]
    return [device for device in devices if device.device_type != "GPU"] + listed


def parse_visible_device_list(text, gpu_count):
    """The GPU ids of ``text`` ('0,2'), each checked against ``gpu_count``.

    Example::

        >>> parse_visible_device_list("1,0", 2)
        [1, 0]
    """
    if not isinstance(text, str):
        raise TypeError(f"visible_device_list must be a str such as '0' or '0,1'; got "
                        f"{text!r}")
    order = []
    for entry in text.split(","):
        entry = entry.strip()
        if not entry.isdigit():
            raise errors.InvalidArgumentError(
                None, None, f"Could not parse entry in 'visible_device_list': '{entry}'. "
                f"visible_device_list = {text}")
        if int(entry) >= gpu_count:
            raise errors.InvalidArgumentError(
                None, None, f"'visible_device_list' listed an invalid GPU id '{int(entry)}' "
                f"but visible device count is {gpu_count}")
        order.append(int(entry))
    if len(set(order)) != len(order):
        raise errors.InvalidArgumentError(
            None, None, f"visible_device_list contained a duplicate entry: {text}")
    return order


def _renumbered(device, index):
    spec = DeviceSpec(device.spec.job, device.spec.replica, device.spec.task, "GPU", index)
    return dataclasses.replace(device, name=spec.to_string(), spec=spec, index=index,
                               short_name=f"/device:GPU:{index}")
