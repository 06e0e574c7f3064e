"""Training-step throughput on one GPU: towerflow beside PyTorch eager.

The network is the cifar10 recipe's (towerflow/recipes/cifar10.py): conv3x3-
batch-norm-ReLU blocks of widths 32, 64 and 128, each with a 2x2 max pool and
a residual conv, a global max pool and a dense layer to 10 classes. Both
frameworks get the same batch (512 by default) of host images each step, in
the same precision, channels-last, with Nesterov momentum SGD at a constant
learning rate, and are measured alternately in one run (towerflow with CUDA
graphs, towerflow op by op, PyTorch, then again), so they see the same GPU.

Three tables:

1. samples/s at ``--batch`` (median over rounds), and towerflow / PyTorch;
2. time per step (µs) at batch 32 (``--host-batch``), where the host bounds
   the step, with and without CUDA graphs (and PyTorch's, for reference);
3. SEED_PROGRAMS.md P6 (MNIST softmax regression, 10 epochs of batch 100) on
   /cpu:0 and on /gpu:0: seconds and test accuracy, on ../shared/data/mnist-small
   or the folder TOWERFLOW_MNIST_DIR names (skipped when neither is there).

TF32 is on for both: towerflow's default (TOWERFLOW_TF32), and PyTorch's
``allow_tf32`` switches for cuBLAS and cuDNN.

    python benchmarks/gpu_peers.py [--batch 512] [--rounds 5] [--steps 20]
        [--precision float32|mixed_float16] [--json FILE] [--device /gpu:0]
        [--host-batch 32] [--skip-p6] [--tables throughput,host,p6]

Writes JSON (default benchmarks/results/gpu_peers.json). ``--device /cpu:0``
runs the same tables on the CPU (a smoke test of the script; PyTorch on its
CPU). PyTorch is skipped with a message when it is not installed.

NOTE: towerflow's weight decay is decoupled (SGDW, ``var *= 1 - lr * wd``) and
PyTorch's SGD adds ``wd * var`` to the gradient: the same work, not the same
numbers; this benchmark compares speed only.
"""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import towerflow as tf
from towerflow.device import host, physical
from towerflow.recipes.cifar10 import RECIPE, WIDTHS

LEARNING_RATE, MOMENTUM, WEIGHT_DECAY = 0.05, 0.9, 5e-4
HOST_BOUND_BATCH = 32
# The data does not travel to a lent GPU machine: gpu_check.sh names a carried copy.
MNIST_SMALL = Path(os.environ.get("TOWERFLOW_MNIST_DIR") or Path(__file__).resolve().parents[1]
                   .parent / "shared" / "data" / "mnist-small")


def make_batches(batch, count=4, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, 32, 32, 3), dtype=np.float32),
             rng.integers(0, 10, batch).astype(np.int64)) for _ in range(count)]


# -- towerflow -----------------------------------------------------------------------


def build_training_step(batch, precision, device):
    """The recipe's network and training step in a new graph, on ``device``,
    its batch norms' training flag a tensor as in the recipe: (graph, images
    placeholder, labels placeholder, loss, train op, first weights,
    initializer). benchmarks/gpu_traffic.py counts this graph."""
    graph = tf.Graph()
    previous = tf.mixed_precision.global_policy()
    tf.mixed_precision.set_global_policy(precision)
    try:
        with graph.as_default(), tf.device(device):
            tf.set_random_seed(0)
            x = tf.placeholder(tf.float32, [batch, 32, 32, 3])
            labels = tf.placeholder(tf.int64, [batch])
            # NOTE: a flag tensor, as the recipe's (towerflow/training.py feeds one):
            # its batch norms take the path that selects on the device
            training = tf.placeholder_with_default(True, [], name="training")
            logits = tf.cast(RECIPE.logits(x, training=training), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits))
            optimizer = tf.train.MomentumOptimizer(
                LEARNING_RATE, MOMENTUM, use_nesterov=True, weight_decay=WEIGHT_DECAY)
            if precision == "mixed_float16":
                optimizer = tf.mixed_precision.LossScaleOptimizer(optimizer)
            with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
                train_op = optimizer.minimize(loss)
            weights = tf.trainable_variables()[0]
            init = tf.global_variables_initializer()
    finally:
        tf.mixed_precision.set_global_policy(previous)
    return graph, x, labels, loss, train_op, weights, init


class TowerflowStep:
    """One training step of the recipe's network on ``device``: ``run(batch)``
    queues it, ``finish()`` waits for the device to finish."""

    def __init__(self, batch, precision, device, cuda_graphs):
        graph, self.x, self.labels, _, self.train_op, self.weights, init = \
            build_training_step(batch, precision, device)
        self.sess = tf.Session(graph=graph, config=tf.ConfigProto(cuda_graphs=cuda_graphs))
        self.sess.run(init)

    def run(self, batch):
        self.sess.run(self.train_op, {self.x: batch[0], self.labels: batch[1]})

    def finish(self):
        self.sess.run(self.weights)         # a copy to the host: waits for the step


# -- PyTorch -------------------------------------------------------------------------


class TorchStep:
    """The same network and step in PyTorch eager, channels-last."""

    def __init__(self, torch, batch, precision, device):
        nn = torch.nn
        torch.manual_seed(0)
        self.torch, self.device = torch, device
        torch.backends.cuda.matmul.allow_tf32 = True    # as towerflow's default
        torch.backends.cudnn.allow_tf32 = True
        self.model = _torch_network(nn).to(device, memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LEARNING_RATE,
                                         momentum=MOMENTUM, nesterov=True,
                                         weight_decay=WEIGHT_DECAY)
        self.mixed = precision == "mixed_float16"
        self.scaler = torch.amp.GradScaler("cuda") if self.mixed else None
        self.loss_fn = nn.CrossEntropyLoss()

    def run(self, batch):
        torch = self.torch
        images = torch.from_numpy(batch[0]).permute(0, 3, 1, 2)       # NHWC in memory
        images = images.to(self.device, non_blocking=True,
                           memory_format=torch.channels_last)
        labels = torch.from_numpy(batch[1]).to(self.device, non_blocking=True)
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=self.device.split(":")[0], dtype=torch.float16,
                            enabled=self.mixed):
            loss = self.loss_fn(self.model(images).float(), labels)
        if self.mixed:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()

    def finish(self):
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()


def _torch_network(nn):
    def conv_bn(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                             nn.BatchNorm2d(cout, eps=1e-3, momentum=0.1), nn.ReLU())

    class Block(nn.Module):
        def __init__(self, cin, width):
            super().__init__()
            self.conv, self.pool, self.residual = conv_bn(cin, width), nn.MaxPool2d(2), \
                conv_bn(width, width)

        def forward(self, x):
            y = self.pool(self.conv(x))
            return y + self.residual(y)

    class Network(nn.Module):
        def __init__(self):
            super().__init__()
            widths = (WIDTHS[0],) + WIDTHS
            self.stem = conv_bn(3, WIDTHS[0])
            self.blocks = nn.Sequential(*[Block(cin, w) for cin, w in zip(widths, WIDTHS)])
            self.dense = nn.Linear(WIDTHS[-1], 10, bias=False)

        def forward(self, x):
            y = self.blocks(self.stem(x)).amax(dim=(2, 3))            # global max pool
            return self.dense(y) * 0.125

    return Network()


# -- timing --------------------------------------------------------------------------


def steps_per_second(runner, batches, steps):
    """Steps/s over ``steps`` timed steps, after one untimed step: the first
    step of a turn pays for the previous framework's threads still spinning
    (after a JAX turn, towerflow's first cifar10 step at batch 64 took 40-70 ms
    against 27, and towerflow measured 10 % slower with JAX in the rotation
    than without it); every framework gets the same settling step."""
    runner.run(batches[-1])
    runner.finish()
    start = time.perf_counter()
    for i in range(steps):
        runner.run(batches[i % len(batches)])
    runner.finish()
    return steps / (time.perf_counter() - start)


def alternate(runners, batches, rounds, steps):
    """Median steps/s of each runner, measured in turn, round after round."""
    for runner in runners.values():      # warm-up: plans, capture, cuDNN/cuBLAS choices
        for batch in batches[:3]:
            runner.run(batch)
        runner.finish()
    rates = {name: [] for name in runners}
    for _ in range(rounds):
        for name, runner in runners.items():
            rates[name].append(steps_per_second(runner, batches, steps))
    return {name: statistics.median(values) for name, values in rates.items()}


def make_runners(torch, batch, precision, device):
    runners = {"towerflow_graphs": TowerflowStep(batch, precision, device, True),
               "towerflow_op_by_op": TowerflowStep(batch, precision, device, False)}
    if torch is not None:
        runners["pytorch"] = TorchStep(torch, batch, precision, _torch_device(device))
    return runners


def _torch_device(device):
    spec = tf.DeviceSpec.from_string(device)
    return f"cuda:{spec.device_index or 0}" if spec.device_type == "GPU" else "cpu"


def throughput_table(torch, args):
    rates = alternate(make_runners(torch, args.batch, args.precision, args.device),
                      make_batches(args.batch), args.rounds, args.steps)
    best = max(rates["towerflow_graphs"], rates["towerflow_op_by_op"])
    row = {name: rate * args.batch for name, rate in rates.items()}
    row["ratio"] = best / rates["pytorch"] if "pytorch" in rates else None
    print(f"\nsamples/s, batch {args.batch}, {args.precision}, {args.device}")
    for name, value in rates.items():
        print(f"  {name:<20} {value * args.batch:>10.0f}")
    ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
    print(f"  {'ratio':<20} {ratio:>10}   (the better towerflow / pytorch)")
    return row


def host_time_table(torch, args):
    rates = alternate(make_runners(torch, args.host_batch, args.precision, args.device),
                      make_batches(args.host_batch), args.rounds, 4 * args.steps)
    row = {name: 1e6 / rate for name, rate in rates.items()}
    print(f"\nµs per step, batch {args.host_batch} (host-bound), {args.precision}")
    for name, value in row.items():
        print(f"  {name:<20} {value:>10.0f}")
    return row


def p6_table(args):
    """P6 on /cpu:0 and on ``args.device``: the mnist_softmax recipe's run."""
    if not MNIST_SMALL.is_dir():
        print(f"\nP6 skipped: {MNIST_SMALL} not found")
        return None
    from towerflow.recipes.mnist_softmax import MnistSoftmaxRecipe
    options = argparse.Namespace(
        data_dir=str(MNIST_SMALL), devices=",".join(dict.fromkeys(["/cpu:0", args.device])),
        epochs=10, steps=None, batch_size=100, seed=0, log_device_placement=False)
    run = MnistSoftmaxRecipe().run(options)
    rows = {device: {"seconds": run["timings"][device], "accuracy": run["accuracies"][device]}
            for device in run["devices"]}
    print("\nP6 (MNIST softmax regression, 10 epochs, batch 100)")
    for device, row in rows.items():
        print(f"  {device:<8} {row['seconds']:>7.2f} s   accuracy {row['accuracy']:.4f}")
    return rows


def import_torch():
    """PyTorch where it can run on a CUDA GPU here, else None (and why)."""
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: measuring towerflow alone")
        return None
    if not torch.cuda.is_available():       # a CPU build, or no driver / GPU
        print(f"PyTorch {torch.__version__} has no CUDA GPU here: measuring towerflow alone")
        return None
    return torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_float16"])
    parser.add_argument("--device", default="/gpu:0")
    parser.add_argument("--host-batch", type=int, default=HOST_BOUND_BATCH)
    parser.add_argument("--skip-p6", action="store_true")
    parser.add_argument("--tables", default="throughput,host,p6",
                        help="which tables, comma-separated (default all three)")
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                       "gpu_peers.json"))
    args = parser.parse_args()
    torch = import_torch()
    result = {"benchmark": "gpu_peers", "device": args.device, "batch": args.batch,
              "precision": args.precision, "host_batch": args.host_batch,
              "gpu": [gpu.name for gpu in physical.probe_gpus()[0]],
              "torch": getattr(torch, "__version__", None), "numpy": np.__version__,
              "python": platform.python_version(), "machine": host.describe()}
    tables = {"throughput": ("throughput_samples_per_s", lambda: throughput_table(torch, args)),
              "host": ("host_us_per_step", lambda: host_time_table(torch, args)),
              "p6": ("p6", lambda: None if args.skip_p6 else p6_table(args))}
    chosen = args.tables.split(",")
    if not set(chosen) <= set(tables):
        parser.error(f"--tables {args.tables!r}: choose among {', '.join(tables)}")
    result["gpu_conv"] = os.environ.get("TOWERFLOW_GPU_CONV") or "im2col (default)"
    for key, table in (tables[name] for name in chosen):
        result[key] = table()
        # After each table: a run cut short (gpu_check.sh's timeout) keeps what it measured.
        write_json(args.json, result)
    print(f"wrote {args.json}")


def write_json(path, result):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".part", "w") as out:
        json.dump(result, out, indent=2)
    os.replace(path + ".part", path)


if __name__ == "__main__":
    main()
