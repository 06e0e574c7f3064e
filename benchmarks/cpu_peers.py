"""Training-step throughput on the CPU: towerflow beside PyTorch (CPU build).

Three models, same batch, dtype (float32), data and optimizer, measured
alternately in one run (towerflow, PyTorch, towerflow, ...) so both see the
same machine state:

  (a) softmax regression 784→10, batch 100, SGD
  (b) MLP 784-512-512-10 (ReLU), batch 128, momentum SGD
  (c) CNN conv3x3(3→32) relu maxpool2 conv3x3(32→64) relu maxpool2
      dense(4096→10), batch 64, input 32×32×3, momentum SGD

    python benchmarks/cpu_peers.py [--rounds 7] [--steps 30] [--isa avx2|avx512] [--json FILE]

Prints a table (samples/s, median over rounds; ratio towerflow / PyTorch) and
writes JSON (default benchmarks/results/cpu_peers.json). PyTorch is skipped
with a message when it is not installed.
"""

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np
import vector_path

import towerflow as tf
from towerflow.device import host

MODELS = {
    "softmax": {"batch": 100, "input": (784,), "optimizer": "sgd"},
    "mlp": {"batch": 128, "input": (784,), "optimizer": "momentum"},
    "cnn": {"batch": 64, "input": (32, 32, 3), "optimizer": "momentum"},
}
LEARNING_RATE, MOMENTUM = 0.01, 0.9


def make_batches(spec, count=8, seed=0):
    rng = np.random.default_rng(seed)
    shape = (spec["batch"],) + spec["input"]
    return [(rng.standard_normal(shape, dtype=np.float32),
             rng.integers(0, 10, spec["batch"]).astype(np.int64)) for _ in range(count)]


# -- towerflow -----------------------------------------------------------------------


def towerflow_logits(name, x):
    if name == "softmax":
        return tf.layers.dense(x, 10)
    if name == "mlp":
        hidden = tf.layers.dense(x, 512, activation=tf.nn.relu)
        hidden = tf.layers.dense(hidden, 512, activation=tf.nn.relu)
        return tf.layers.dense(hidden, 10)
    y = tf.layers.conv2d(x, 32, 3, padding="same", activation=tf.nn.relu)
    y = tf.layers.max_pooling2d(y, 2, 2)
    y = tf.layers.conv2d(y, 64, 3, padding="same", activation=tf.nn.relu)
    y = tf.layers.max_pooling2d(y, 2, 2)
    return tf.layers.dense(tf.layers.flatten(y), 10)


def towerflow_step(name, spec):
    """A function running one training step on a batch."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(0)
        x = tf.placeholder(tf.float32, (None,) + spec["input"])
        labels = tf.placeholder(tf.int64, [None])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=towerflow_logits(name, x)))
        optimizer = tf.train.GradientDescentOptimizer(LEARNING_RATE) \
            if spec["optimizer"] == "sgd" else \
            tf.train.MomentumOptimizer(LEARNING_RATE, MOMENTUM)
        train_op = optimizer.minimize(loss)
        sess = tf.Session(graph=graph)
        sess.run(tf.global_variables_initializer())
    return lambda batch: sess.run(train_op, feed_dict={x: batch[0], labels: batch[1]})


# -- PyTorch -------------------------------------------------------------------------


def torch_step(name, spec, torch):
    nn = torch.nn
    torch.manual_seed(0)
    if name == "softmax":
        model = nn.Linear(784, 10)
    elif name == "mlp":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10))
    else:
        model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(4096, 10))
    momentum = 0.0 if spec["optimizer"] == "sgd" else MOMENTUM
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=momentum)
    loss_fn = nn.CrossEntropyLoss()

    def step(batch):
        images = torch.from_numpy(batch[0])
        if name == "cnn":  # NHWC data, as towerflow gets it; PyTorch wants NCHW
            images = images.permute(0, 3, 1, 2)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), torch.from_numpy(batch[1]))
        loss.backward()
        optimizer.step()
    return step


# -- timing --------------------------------------------------------------------------


def samples_per_second(step, batches, steps, batch_size):
    start = time.perf_counter()
    for i in range(steps):
        step(batches[i % len(batches)])
    return steps * batch_size / (time.perf_counter() - start)


def measure(name, spec, torch, rounds, steps):
    batches = make_batches(spec)
    runners = {"towerflow": towerflow_step(name, spec)}
    if torch is not None:
        runners["pytorch"] = torch_step(name, spec, torch)
    for run in runners.values():  # warm-up: plan compilation, allocator, caches
        for batch in batches[:3]:
            run(batch)
    samples = {key: [] for key in runners}
    for _ in range(rounds):
        for key, run in runners.items():
            samples[key].append(samples_per_second(run, batches, steps, spec["batch"]))
    return {key: statistics.median(values) for key, values in samples.items()}


def import_torch():
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: measuring towerflow alone "
              "(pip install torch --index-url https://download.pytorch.org/whl/cpu)")
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    return torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                       "cpu_peers.json"))
    vector_path.add_argument(parser)
    args = parser.parse_args()
    vector_path.hold(args.isa)
    torch = import_torch()
    rows = []
    for name in args.models.split(","):
        result = measure(name, MODELS[name], torch, args.rounds, args.steps)
        ratio = result["towerflow"] / result["pytorch"] if "pytorch" in result else None
        rows.append({"model": name, "batch": MODELS[name]["batch"], **result, "ratio": ratio})
        print_row(rows[-1])
    write_json(args.json, rows, torch)


def print_row(row):
    if not hasattr(print_row, "header"):
        print(f"{'model':<8} {'batch':>5} {'towerflow/s':>12} {'pytorch/s':>10} {'ratio':>6}")
        print_row.header = True
    torch_rate = f"{row['pytorch']:>10.0f}" if "pytorch" in row else f"{'-':>10}"
    ratio = f"{row['ratio']:>6.2f}" if row["ratio"] else f"{'-':>6}"
    print(f"{row['model']:<8} {row['batch']:>5} {row['towerflow']:>12.0f} {torch_rate} {ratio}")


def write_json(path, rows, torch):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as out:
        json.dump({"benchmark": "cpu_peers", "unit": "samples/s", "rows": rows,
                   "numpy": np.__version__, "torch": getattr(torch, "__version__", None),
                   "python": platform.python_version(), "cpus": os.cpu_count(),
                   "vector_path": vector_path.record(torch),
                   "machine": host.describe()}, out, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
