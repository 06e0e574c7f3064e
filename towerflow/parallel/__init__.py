"""Stage 7: towers and collectives (``tf.parallel``): split the global batch,
build one tower per device, all-reduce gradients, apply one update per replica."""

from .communicators import (ALL_REDUCE_CHOICES, Communicator, CpuCommunicator,  # noqa: F401
                            LocalCommunicator, choose)
from .replication import DataParallel, TrainStep, default_devices  # noqa: F401

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from ..api import missing as _missing

__getattr__ = _missing.module_getattr("tf.parallel")
