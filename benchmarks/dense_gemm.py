"""The dense layers' GEMMs: the compiled blocked GEMM against NumPy's OpenBLAS.

Three tables, each alternating its contenders in one process over several
rounds and printing medians (so machine load hits both alike):

1. one thread, CPU time (``time.thread_time``, robust on a shared machine):
   ``native.gemm`` against ``np.matmul`` with OpenBLAS held to one thread, on
   the MNIST CNN's dense layer (3136 -> 1024 at batch 50: forward, dx = g @ W^T,
   dW = x^T @ g), the cpu_peers MLP's layers and the convolutions' GEMMs;
2. two threads, wall time: ``parallel_gemm.compiled_matmul`` on the CPU pool
   against ``parallel_gemm.matmul`` (OpenBLAS: its own threads, or split across
   the pool, as MatMul ran before the compiled path; NOTE: OpenBLAS's threads
   are woken for every lone call here, which can cost milliseconds on a busy
   machine, where a step's back-to-back GEMMs find them spinning: table 3 is
   the fair comparison);
3. training steps (wall time): the MNIST CNN at batch 50 and the cpu_peers
   MLP with the compiled dense path on and off (off: every MatMul on OpenBLAS)::

    python benchmarks/dense_gemm.py [--rounds 7] [--tables 1,2,3]
"""

import argparse
import functools
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from towerflow.backends import cpu_threads, native, numpy_backend, parallel_gemm

# (m, k, n, transpose_a, transpose_b, what)
SHAPES = [
    (50, 3136, 1024, False, False, "MNIST CNN dense forward"),
    (50, 1024, 3136, False, True, "MNIST CNN dense dx = g @ W^T"),
    (3136, 50, 1024, True, False, "MNIST CNN dense dW = x^T @ g"),
    (128, 784, 512, False, False, "MLP layer 1 forward"),
    (784, 128, 512, True, False, "MLP layer 1 dW"),
    (128, 512, 512, False, True, "MLP layer 2 dx"),
    (4900, 800, 64, False, False, "5x5 conv 32->64 (im2col)"),
    (4096, 288, 32, False, False, "3x3 conv 32->32 (im2col)"),
    (65536, 27, 32, False, False, "3x3 stem 3->32 (im2col)"),
    (288, 4096, 32, True, False, "3x3 conv filter gradient"),
    (800, 4900, 64, True, False, "5x5 conv filter gradient"),
]


def operands(m, k, n, transpose_a, transpose_b, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    return a, b


def alternate(contenders, rounds, clock, settle=0.0, span=0.02):
    """{name: median seconds per call}: each contender timed once per round, in
    turn, over enough calls to take ``span`` seconds, after ``settle`` seconds of
    untimed calls (OpenBLAS's threads spin ~0.1 s after their last GEMM and
    steal the cores of whatever runs next)."""
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, call in contenders.items():
            call()
            start = time.perf_counter()
            while time.perf_counter() - start < settle:
                call()
            start, calls = clock(), 0
            while calls < 3 or clock() - start < span:
                call()
                calls += 1
            times[name].append((clock() - start) / calls)
    return {name: statistics.median(values) for name, values in times.items()}


def single_thread_table(rounds):
    print("1. one thread, CPU time (thread_time), GFLOP/s")
    cpu_threads.set_blas_threads(1)
    for shape in SHAPES:
        _print_row(shape, alternate(_single_thread_contenders(*shape[:5]), rounds,
                                    time.thread_time))


def _single_thread_contenders(m, k, n, transpose_a, transpose_b):
    a, b = operands(m, k, n, transpose_a, transpose_b)
    out = np.empty((m, n), np.float32)
    left, right = (a.T if transpose_a else a), (b.T if transpose_b else b)
    return {"compiled": lambda: native.gemm(a, b, out, transpose_a, transpose_b),
            "numpy": lambda: np.matmul(left, right, out=out)}


def two_thread_table(rounds):
    pool = numpy_backend.CPU_POOL
    print(f"2. {pool.workers} threads, wall time, GFLOP/s")
    for shape in SHAPES[:6]:
        _print_row(shape, alternate(_pool_contenders(pool, *shape[:5]), rounds,
                                    time.perf_counter, settle=0.2, span=0.1))


def _pool_contenders(pool, m, k, n, transpose_a, transpose_b):
    a, b = operands(m, k, n, transpose_a, transpose_b)
    left, right = (a.T if transpose_a else a), (b.T if transpose_b else b)
    return {"compiled": lambda: parallel_gemm.compiled_matmul(pool, a, b, transpose_a,
                                                              transpose_b),
            "numpy": lambda: parallel_gemm.matmul(np, pool, left, right)}


def _print_row(shape, medians):
    m, k, n, transpose_a, transpose_b, what = shape
    shape = f"{m}x{k}{'^T' if transpose_a else ''} @ {k}x{n}{'^T' if transpose_b else ''}"
    rates = {name: 2 * m * k * n / seconds / 1e9 for name, seconds in medians.items()}
    print(f"  {what:32s} {shape:24s} compiled {rates['compiled']:5.0f}  "
          f"numpy {rates['numpy']:5.0f}  ratio {rates['compiled'] / rates['numpy']:.2f}")


def step_table(rounds):
    import cpu_peers
    import mnist_cnn_cpu

    import towerflow as tf
    print("3. training steps, wall time, ms per step (compiled dense path on / off)")
    mnist = mnist_cnn_cpu.GraphStep(tf)
    mnist_batches = mnist_cnn_cpu.make_batches(50)
    spec = cpu_peers.MODELS["mlp"]
    mlp, mlp_batches = cpu_peers.towerflow_step("mlp", spec), cpu_peers.make_batches(spec)
    for name, run, batches in [("MNIST CNN, batch 50", mnist.run, mnist_batches),
                               ("MLP 784-512-512-10, batch 128", mlp, mlp_batches)]:
        contenders = {"on": functools.partial(_dense_path, True, run, batches),
                      "off": functools.partial(_dense_path, False, run, batches)}
        medians = alternate(contenders, rounds, time.perf_counter, settle=0.3, span=0.3)
        on, off = (medians[key] / len(batches) * 1e3 for key in ("on", "off"))
        print(f"  {name:32s} on {on:6.2f}  off {off:6.2f}  speed-up {off / on:.2f}")


def _dense_path(on, run, batches):
    original = parallel_gemm.compiled_matmul
    if not on:
        parallel_gemm.compiled_matmul = lambda *args: None    # every MatMul on OpenBLAS
    try:
        for batch in batches:
            run(batch)
    finally:
        parallel_gemm.compiled_matmul = original


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tables", default="1,2,3")
    args = parser.parse_args()
    if not native.available():
        sys.exit("the compiled kernels are not built (or TOWERFLOW_NATIVE=0)")
    tables = {"1": single_thread_table, "2": two_thread_table, "3": step_table}
    for key in args.tables.split(","):
        tables[key](args.rounds)


if __name__ == "__main__":
    main()
