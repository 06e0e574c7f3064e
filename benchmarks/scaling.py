"""Data-parallel scaling: training throughput for 1..N towers, with the
efficiency of each against one tower, as a table, JSON and a PNG plot.

    python benchmarks/scaling.py [--device-type cpu|gpu] [--max-towers 4]
        [--model mlp|cnn] [--batch 256] [--steps 20] [--all-reduce auto]

Model: the MLP 784-512-512-10 (or the small CNN) of cpu_peers.py, momentum
SGD, float32, a fixed *global* batch split across the towers. On the CPU the
towers are logical CPUs (``--device-type cpu`` splits the CPU into
``--max-towers``), all run by one process, so this measures the overhead of
towers, sharding and all-reduce rather than a speed-up; on GPUs each tower is
a GPU (or a logical GPU). The plot needs matplotlib (``pip install
'towerflow[plot]'``); without it the table and JSON are still written.

``--overlap`` instead measures the all-reduce overlapping the backward pass,
on MPI ranks of one tower each, every all-reduce made slower by
``--latency-ms`` (TOWERFLOW_INJECT_ALLREDUCE_LATENCY_MS: a slow network,
slept inside the collective, off the main thread when it overlaps)::

    towerflow launch -n 2 -- python benchmarks/scaling.py --overlap --latency-ms 5

prints the median step time with overlap and without (rank 0).
"""

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import towerflow as tf
from towerflow.device import host, runtime

HERE = os.path.dirname(os.path.abspath(__file__))


def tower_model(name):
    def mlp(inputs):
        x, labels = inputs
        hidden = tf.layers.dense(x, 512, activation=tf.nn.relu)
        hidden = tf.layers.dense(hidden, 512, activation=tf.nn.relu)
        return _loss(tf.layers.dense(hidden, 10), labels)

    def cnn(inputs):
        x, labels = inputs
        y = tf.layers.conv2d(x, 32, 3, padding="same", activation=tf.nn.relu)
        y = tf.layers.max_pooling2d(y, 2, 2)
        y = tf.layers.conv2d(y, 64, 3, padding="same", activation=tf.nn.relu)
        y = tf.layers.max_pooling2d(y, 2, 2)
        return _loss(tf.layers.dense(tf.layers.flatten(y), 10), labels)
    return {"mlp": (mlp, (784,)), "cnn": (cnn, (32, 32, 3))}[name]


def _loss(logits, labels):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))


def measure(towers, args):
    """Samples/s of ``towers`` towers (median over rounds)."""
    devices = [f"/{args.device_type}:{i}" for i in range(towers)]
    seconds, _graph, strategy = _timed_steps(args, devices, all_reduce=args.all_reduce)
    return statistics.median(args.batch / s for s in seconds), strategy.communicator.name


def step_time(args, overlap):
    """Median seconds per step of one tower per rank, all_reduce='mpi'."""
    seconds, graph, strategy = _timed_steps(
        args, ["/cpu:0"], all_reduce="mpi", overlap=overlap,
        bucket_bytes=int(args.bucket_mb * (1 << 20)))
    buckets = sum(op.type in ("MpiAllReduce", "MpiAllReduceStart")
                  for op in graph.get_operations() if "all_reduce_mpi" in op.name)
    return statistics.median(seconds), buckets, strategy.num_ranks, strategy.rank


def _timed_steps(args, devices, **strategy_options):
    """Seconds per training step of ``args.model`` on ``devices``, one figure
    per round (after 3 warm-up steps); the graph and the DataParallel."""
    model, input_shape = tower_model(args.model)
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(0)
        x = tf.placeholder(tf.float32, (None,) + input_shape)
        labels = tf.placeholder(tf.int64, [None])
        strategy = tf.parallel.DataParallel(devices, **strategy_options)
        step = strategy.minimize(model, (x, labels), tf.train.MomentumOptimizer(0.01, 0.9))
        sess = tf.Session(graph=graph)
        sess.run(tf.global_variables_initializer())
    rng = np.random.default_rng(0)
    feed = {x: rng.standard_normal((args.batch,) + input_shape, dtype=np.float32),
            labels: rng.integers(0, 10, args.batch)}
    for _ in range(3):
        sess.run(step.train_op, feed)
    seconds = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.steps):
            sess.run(step.train_op, feed)
        seconds.append((time.perf_counter() - start) / args.steps)
    return seconds, graph, strategy


def overlap_main(args):
    """Step time with the all-reduce after the backward pass, then overlapping it."""
    from towerflow.parallel import mpi
    os.environ[mpi.LATENCY_VARIABLE] = str(args.latency_ms)
    rows = []
    for overlap in (False, True):
        seconds, buckets, ranks, rank = step_time(args, overlap)
        rows.append({"overlap": overlap, "step_ms": seconds * 1000, "buckets": buckets})
    if rank != 0:
        return
    print(f"{args.model}, batch {args.batch}, {ranks} ranks, {rows[0]['buckets']} buckets of "
          f"<= {args.bucket_mb} MB, {args.latency_ms} ms injected per all-reduce, "
          f"{machine(args)}, {time.strftime('%Y-%m-%d', time.gmtime())}")
    print("| all-reduce | step time (ms) |\n|---|---|")
    for row in rows:
        label = "overlapping the backward pass" if row["overlap"] else "after the backward pass"
        print(f"| {label} | {row['step_ms']:.1f} |")
    print(f"overlap saves {rows[0]['step_ms'] - rows[1]['step_ms']:.1f} ms per step")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + "_overlap.json", "w") as out:
        json.dump({"benchmark": "allreduce overlap", "model": args.model, "batch": args.batch,
                   "ranks": ranks, "latency_ms": args.latency_ms, "rows": rows}, out, indent=2)


def split_devices(args):
    kind = args.device_type.upper()
    physical = tf.config.list_physical_devices(kind)
    if not physical:
        raise SystemExit(f"no {kind} found: {runtime.gpu_unavailable_reason()}"
                         if kind == "GPU" else "no CPU found")
    if kind == "CPU" or len(physical) < args.max_towers:
        limit = None if kind == "CPU" else args.gpu_memory_mb
        tf.config.set_logical_device_configuration(
            physical[0], [tf.config.LogicalDeviceConfiguration(memory_limit=limit)]
            * args.max_towers)


def plot(rows, path, args):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'towerflow[plot]')")
        return
    towers = [row["towers"] for row in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    left.plot(towers, [row["samples_per_sec"] for row in rows], "o-")
    # from 0: a throughput axis starting at its lowest point magnifies noise
    left.set(xlabel=tower_label(args), ylabel="samples / s", title="throughput",
             ylim=(0, 1.1 * max(row["samples_per_sec"] for row in rows)))
    right.plot(towers, [row["efficiency"] for row in rows], "o-")
    right.axhline(1.0, color="grey", linewidth=0.5)
    right.set(xlabel=tower_label(args), ylabel="vs. one tower", title="efficiency",
              ylim=(0, max(1.2, 1.1 * max(row["efficiency"] for row in rows))))
    for axes in (left, right):
        axes.set_xticks(towers)
    figure.suptitle(f"{args.model}, global batch {args.batch}, {machine(args)}, "
                    f"{time.strftime('%Y-%m-%d', time.gmtime())}", fontsize="medium")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def tower_label(args):
    """What a tower is in this run: on the CPU, logical CPUs of one process
    sharing its cores (the towers' overhead, not a speed-up)."""
    if args.device_type == "cpu":
        return f"towers (logical CPUs sharing {host.usable_cores()} cores)"
    return "towers (GPUs or logical GPUs)"


def machine(args):
    if args.device_type == "gpu":
        return "GPU"
    cpu = host.cpu()
    return f"{cpu['model']}, {cpu['usable_cores']} cores"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device-type", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--max-towers", type=int, default=4)
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--all-reduce", default="auto")
    parser.add_argument("--gpu-memory-mb", type=int, default=8192)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "scaling"))
    parser.add_argument("--overlap", action="store_true",
                        help="under towerflow launch: step time with the all-reduce "
                             "overlapping the backward pass against without")
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--bucket-mb", type=float, default=1.0)
    args = parser.parse_args()
    if args.overlap:
        overlap_main(args)
        return
    split_devices(args)
    rows = []
    for towers in range(1, args.max_towers + 1):
        rate, communicator = measure(towers, args)
        rows.append({"towers": towers, "samples_per_sec": rate, "all_reduce": communicator,
                     "efficiency": rate / rows[0]["samples_per_sec"] if rows else 1.0})
        print(f"{towers:>6} towers {rate:>12.0f} samples/s  efficiency "
              f"{rows[-1]['efficiency']:.2f}  ({communicator})")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as out:
        json.dump({"benchmark": "scaling", "model": args.model, "batch": args.batch,
                   "device_type": args.device_type, "rows": rows,
                   "python": platform.python_version(), "cpus": os.cpu_count()}, out, indent=2)
    print(f"wrote {args.out}.json")
    plot(rows, args.out + ".png", args)


if __name__ == "__main__":
    main()
