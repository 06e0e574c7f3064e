"""Stage 7: towers and collectives (``tf.parallel``): split the global batch,
build one tower per device, all-reduce gradients, apply one update per replica."""

from .communicators import (ALL_REDUCE_CHOICES, Communicator, CpuCommunicator,  # noqa: F401
                            LocalCommunicator, choose)
from .replication import DataParallel, TrainStep, default_devices  # noqa: F401
