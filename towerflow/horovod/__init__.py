"""Horovod's TensorFlow 1 API on towerflow: ``import towerflow.horovod as hvd``.

A Horovod TF1 program runs with two import lines changed (``import towerflow
as tf``, ``import towerflow.horovod as hvd``), started by ``towerflow launch
-n N python prog.py``; alone, it is rank 0 of 1::

    hvd.init()
    opt = hvd.DistributedOptimizer(tf.train.AdamOptimizer(0.001 * hvd.size()))
    train_op = opt.minimize(loss, global_step=tf.train.get_or_create_global_step())
    hooks = [hvd.BroadcastGlobalVariablesHook(0),
             tf.train.StopAtStepHook(last_step=10000 // hvd.size())]
    config = tf.ConfigProto()
    config.gpu_options.visible_device_list = str(hvd.local_rank())
    with tf.train.MonitoredTrainingSession(hooks=hooks, config=config) as sess:
        while not sess.should_stop():
            sess.run(train_op)

The collectives exchange host arrays through MPI (towerflow/parallel/mpi.py),
with towerflow's collective deadline. See docs/guides/horovod.md.
"""

from .alias import install_alias
from .basics import (
    cross_rank,
    cross_size,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    shutdown,
    size,
)
from .collectives import (
    Adasum,
    Average,
    Compression,
    Compressor,
    FP16Compressor,
    NoneCompressor,
    Sum,
    allgather,
    allreduce,
    broadcast,
    broadcast_global_variables,
    broadcast_variables,
)
from .hooks import BroadcastGlobalVariablesHook
from .optimizer import DistributedOptimizer

__all__ = [
    "Adasum", "Average", "BroadcastGlobalVariablesHook", "Compression", "Compressor",
    "DistributedOptimizer", "FP16Compressor", "NoneCompressor", "Sum", "allgather",
    "allreduce", "broadcast", "broadcast_global_variables", "broadcast_variables",
    "cross_rank", "cross_size", "gloo_built", "gloo_enabled", "init", "install_alias",
    "is_homogeneous", "is_initialized", "local_rank", "local_size", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "nccl_built", "rank", "shutdown", "size",
]
