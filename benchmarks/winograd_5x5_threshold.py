"""Where Winograd F(2x2, 5x5) starts to beat im2col: a stride-1 5x5 SAME
convolution's forward, input gradient and filter gradient on one thread,
Winograd against im2col, alternated in one process, for a range of input
channel counts (winograd.ALGORITHMS[5].min_channels is set from this)::

    python benchmarks/winograd_5x5_threshold.py [--batch 50] [--size 14] [--out 64]

Times are the median thread CPU time of several rounds (time.thread_time,
robust on a shared machine for single-threaded kernels).
"""

import argparse
import os
import statistics
import time
import types

import numpy as np

from towerflow.backends import cpu_threads
from towerflow.backends.nn_kernels import build_nn_kernels


def conv_step(x, w, grad):
    """Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter on one thread."""
    table = build_nn_kernels(np, cpu_threads.SERIAL)

    def kernel(name, attrs):
        ctx = types.SimpleNamespace(attrs=attrs, op=None, resource=lambda key, make: make(),
                                    output_dtypes=[x.dtype] * 5)
        return table[name](ctx)
    attrs = {"strides": (1, 1), "padding": "SAME"}
    forward, backward = kernel("Conv2D", attrs), kernel("Conv2DBackpropInput", attrs)
    filter_grad = kernel("Conv2DBackpropFilter", {"filter_shape": w.shape})

    def run():
        _, patches = forward(x, w)
        backward(x, w, grad)
        filter_grad(patches, grad)
    return run


def cpu_ms(run, winograd):
    os.environ["TOWERFLOW_WINOGRAD"] = winograd
    start = time.thread_time()
    run()
    return (time.thread_time() - start) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--size", type=int, default=14)
    parser.add_argument("--out", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{args.batch} images {args.size}x{args.size}, 5x5 SAME, {args.out} outputs, "
          "one thread: ms per forward + both gradients")
    print(f"{'channels':>8} {'im2col':>8} {'winograd':>9} {'ratio':>6}")
    for channels in (1, 4, 8, 12, 16, 20, 24, 32, 64):
        x = rng.standard_normal((args.batch, args.size, args.size, channels), np.float32)
        w = rng.standard_normal((5, 5, channels, args.out), np.float32)
        grad = rng.standard_normal((args.batch, args.size, args.size, args.out), np.float32)
        run = conv_step(x, w, grad)
        times = {"0": [], "1": []}
        for _ in range(args.rounds):
            for flag, samples in times.items():
                samples.append(cpu_ms(run, flag))
        plain, fast = (statistics.median(times[flag]) for flag in "01")
        print(f"{channels:>8} {plain:>8.2f} {fast:>9.2f} {plain / fast:>6.2f}")


if __name__ == "__main__":
    main()
