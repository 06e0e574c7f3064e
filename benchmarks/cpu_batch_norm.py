"""The cifar10 network's training step on /cpu:0 with and without the CPU's
compiled batch norm (backends/native_batch_norm.py), its ReLU and pool fusions and
glibc's mmap kept off, alternated in one process (rounds of steps, medians),
with page faults per step::

    python benchmarks/cpu_batch_norm.py [--batch 64 256] [--rounds 5] [--steps 5]
    python benchmarks/cpu_batch_norm.py --without _MaxPoolGradReluBatchNormGrad

"before" compiles its plan without the fused batch-norm kernels, runs the
NumPy batch norm, and lets glibc map big blocks (its default M_MMAP_MAX);
"after" is towerflow as it is. With ``--without``, "before" only compiles
its plan without the fused kernels named (their ops then run as the
separate kernels or smaller chains).
"""

import argparse
import contextlib
import ctypes
import resource
import statistics
import time

import gpu_peers

from towerflow.backends import native_batch_norm, numpy_backend

FUSED = ("_FusedBatchNormRelu", "_ReluGradBatchNormGrad", "_FusedBatchNormReluPool",
         "_MaxPoolGradReluBatchNormGrad")
M_MMAP_MAX, GLIBC_DEFAULT_MMAP_MAX = -4, 65536


@contextlib.contextmanager
def before():
    """The step as it was: NumPy batch norm, no CPU fusion, glibc maps big blocks."""
    libc = ctypes.CDLL("libc.so.6")
    takes = native_batch_norm.takes
    native_batch_norm.takes = lambda *arrays: False
    libc.mallopt(M_MMAP_MAX, GLIBC_DEFAULT_MMAP_MAX)
    try:
        yield
    finally:
        native_batch_norm.takes = takes
        libc.mallopt(M_MMAP_MAX, 0)


def step_without(batch, kernels, setting):
    """A step whose plan compiled without the fused ``kernels``, under ``setting``."""
    removed = {name: numpy_backend.KERNELS.pop(name) for name in kernels}
    try:
        step = gpu_peers.TowerflowStep(batch, "float32", "/cpu:0", cuda_graphs=False)
        batches = gpu_peers.make_batches(batch)
        with setting():
            step.run(batches[0])     # compiles the plan while the kernels are gone
    finally:
        numpy_backend.KERNELS.update(removed)
    return step


def timed(step, batches, steps):
    """(seconds per step, page faults per step) over ``steps`` steps."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    for index in range(steps):
        step.run(batches[index % len(batches)])
    seconds = (time.perf_counter() - start) / steps
    return seconds, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps


def compare(batch, rounds, steps, without=None):
    kernels, setting = (without, contextlib.nullcontext) if without else (FUSED, before)
    batches = gpu_peers.make_batches(batch)
    old = step_without(batch, kernels, setting)
    new = gpu_peers.TowerflowStep(batch, "float32", "/cpu:0", cuda_graphs=False)
    for _ in range(2):
        new.run(batches[0])
        with setting():
            old.run(batches[0])
    results = {"before": [], "after": []}
    for _ in range(rounds):
        with setting():
            results["before"].append(timed(old, batches, steps))
        results["after"].append(timed(new, batches, steps))
    for name, runs in results.items():
        ms = statistics.median(seconds for seconds, _ in runs) * 1e3
        faults = statistics.median(count for _, count in runs)
        print(f"batch {batch:4d} {name:6s}: {ms:7.1f} ms/step, {faults:6.0f} page faults/step, "
              f"{batch / ms * 1e3:6.0f} samples/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--without", nargs="+", metavar="KERNEL",
                        help="compare with a plan compiled without these fused kernels only")
    args = parser.parse_args()
    unknown = set(args.without or ()) - set(numpy_backend.KERNELS)
    if unknown:
        parser.error(f"--without: {sorted(unknown)} are not CPU kernels")
    for batch in args.batch:
        compare(batch, args.rounds, args.steps, args.without)


if __name__ == "__main__":
    main()
