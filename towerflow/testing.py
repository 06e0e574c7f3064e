"""``tf.test``: whether this build and this machine can use a GPU.

None of these calls freezes the device configuration, so a program may ask
before configuring devices::

    import towerflow as tf
    print('GPU available' if tf.test.gpu_device_name() else 'GPU not available')
"""

import importlib

from towerflow.device import runtime

__all__ = [
    "gpu_device_name",
    "is_built_with_cuda",
    "is_built_with_gpu_support",
    "is_gpu_available",
]


def gpu_device_name():
    """The name of the first logical GPU, '/device:GPU:0', or '' without one.

    Example::

        >>> gpu_device_name()   # on a machine without a usable GPU
        ''
    """
    gpus = _logical_gpus()
    return gpus[0].short_name if gpus else ""


def is_gpu_available(cuda_only=False, min_cuda_compute_capability=None):
    """Whether a logical GPU exists (of at least the given compute capability).

    ``cuda_only`` is accepted for TensorFlow compatibility: every GPU
    towerflow uses is a CUDA GPU.

    Example::

        >>> is_gpu_available(min_cuda_compute_capability=(7, 0))
        True
    """
    del cuda_only  # towerflow only ever uses CUDA GPUs
    minimum = _check_capability(min_cuda_compute_capability)
    return any(minimum is None or tuple(device.gpu.compute_capability) >= minimum
               for device in _logical_gpus())


def _check_capability(capability):
    if capability is None:
        return None
    if (isinstance(capability, (tuple, list)) and len(capability) == 2
            and all(isinstance(part, int) for part in capability)):
        return tuple(capability)
    raise ValueError(
        f"min_cuda_compute_capability must be None or a (major, minor) pair of ints "
        f"such as (7, 0); got {capability!r}")


def is_built_with_cuda():
    """Whether CuPy (towerflow's CUDA backend) can be imported.

    Example::

        >>> is_built_with_cuda()   # after `pip install towerflow[cuda12]`
        True
    """
    try:
        importlib.import_module("cupy")
    except Exception:  # a broken CuPy install means no CUDA support either
        return False
    return True


def is_built_with_gpu_support():
    """Same as :func:`is_built_with_cuda`: CUDA is the only GPU backend.

    Example::

        >>> is_built_with_gpu_support() == is_built_with_cuda()
        True
    """
    return is_built_with_cuda()


def _logical_gpus():
    return [device for device in runtime.peek_logical_devices()
            if device.device_type == "GPU"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from .api import missing as _missing

__getattr__ = _missing.module_getattr("tf.test")
