"""Run by tests/test_mpi.py under `towerflow launch -n 2`: every rank trains the
MLP of test_parallel.py with 2 logical-CPU towers on the same global batches;
with --nccl (tests/test_mpi_nccl.py), one tower on the rank's GPU with
all_reduce='nccl'.

    python train_ranks.py OUT_DIR [--die-at STEP] [--hidden-on-rank-1 N] [--steps N]
                          [--nccl] [--data-seed-per-rank]

Writes OUT_DIR/rank_<r>.npz (final variables, losses, device names; with
--nccl the physical GPU of /gpu:0 and the bytes in use on each GPU).
"""

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared model
from conftest import split_cpu
from test_parallel import CLASSES, FEATURES, batches

import towerflow as tf
from towerflow.device import runtime
from towerflow.parallel.mpi import rank_from_environment


def model(hidden_units):
    def tower_fn(inputs):
        x, labels = inputs
        init = tf.glorot_uniform_initializer
        hidden = tf.layers.dense(x, hidden_units, activation=tf.nn.relu,
                                 kernel_initializer=init(seed=1))
        logits = tf.layers.dense(hidden, CLASSES, kernel_initializer=init(seed=2))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
    return tower_fn


def make_strategy(args):
    if args.nccl:
        return tf.parallel.DataParallel(all_reduce="nccl", timeout=args.timeout)
    split_cpu(2)
    return tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], all_reduce="mpi",
                                    timeout=args.timeout)


def gpu_facts(strategy):
    """The tower devices, the physical GPU behind /gpu:0, and the bytes in use on
    every GPU of the host (CuPy's memGetInfo, current device)."""
    import cupy
    used = []
    for index in range(cupy.cuda.runtime.getDeviceCount()):
        with cupy.cuda.Device(index):
            free, total = cupy.cuda.runtime.memGetInfo()
        used.append(total - free)
    gpu = next(d for d in runtime.logical_devices() if d.device_type == "GPU")
    return {"towers": np.array(strategy.devices), "physical_gpu": gpu.gpu.index,
            "bytes_used_per_gpu": np.array(used)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--die-at", type=int, default=None)
    parser.add_argument("--hidden-on-rank-1", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--unseeded-on-rank-1", action="store_true",
                        help="rank 1 draws different initial values: the broadcast must win")
    parser.add_argument("--nccl", action="store_true",
                        help="one tower on this rank's GPU (the default devices), NCCL")
    parser.add_argument("--data-seed-per-rank", action="store_true",
                        help="rank r feeds the global batches of seed r")
    args = parser.parse_args()
    rank = rank_from_environment()
    x = tf.placeholder(tf.float32, [None, FEATURES])
    labels = tf.placeholder(tf.int64, [None])
    strategy = make_strategy(args)
    hidden = args.hidden_on_rank_1 if rank == 1 else 8
    if args.unseeded_on_rank_1 and rank == 1:
        tf.set_random_seed(12345)   # other initial values than rank 0's seeds give
    step = strategy.minimize(model(hidden), (x, labels), tf.train.MomentumOptimizer(0.1, 0.9))
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    losses = []
    seed = rank if args.data_seed_per_rank else 0
    for index, (images, classes) in enumerate(batches(args.batch, args.steps, seed)):
        if args.die_at is not None and rank == 1 and index == args.die_at:
            os.kill(os.getpid(), 9)
        losses.append(sess.run([step.train_op, step.loss], {x: images, labels: classes})[1])
    values = sess.run(step.variables)
    names = [device.name for device in runtime.logical_devices()]
    gpus = gpu_facts(strategy) if args.nccl else {}
    np.savez(Path(args.out_dir) / f"rank_{rank}.npz", *values, losses=np.array(losses),
             devices=np.array(names), **gpus)
    print(f"rank {rank} finished {len(losses)} steps", flush=True)


if __name__ == "__main__":
    main()
