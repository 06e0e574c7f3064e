"""The cifar10 recipe's network on the CPU: towerflow beside PyTorch eager and JAX jit.

One training step of the network of towerflow/recipes/cifar10.py (conv3x3 +
batch norm + ReLU blocks of widths 32, 64, 128, each with a 2x2 max pool and a
residual conv, a global max pool, a dense 128->10 without bias, times 0.125),
float32, channels-last, Nesterov momentum SGD, at each of ``--batches``:

- towerflow: benchmarks/gpu_peers.py's training step on /cpu:0;
- PyTorch eager, channels-last: gpu_peers.py's TorchStep on its CPU;
- JAX: ``jax.jit`` of the whole step (forward, loss, gradient, update), NHWC,
  batch norm in training mode keeping running averages, as below.

The three are measured in turn (round-robin: ``--rounds`` rounds of ``--steps``
steps each, after a warm-up; each turn starts with one untimed step, see
gpu_peers.steps_per_second), so they see the same machine state; the table
gives median samples/s and the ratios towerflow / PyTorch and towerflow / JAX.

FLOPs per step, counted on towerflow's forward graph (``step_flops``): every
Conv2D contributes 2 * OH * OW * KH * KW * C_in * C_out and every MatMul
2 * K * N per sample (a multiply-add is two FLOPs); batch norm, ReLU, pooling,
the residual adds, the loss and the update are not counted. The backward
pass is counted as twice the forward for every layer (the input gradient and
the filter gradient, each a GEMM of the forward's size) except the first
convolution, whose input (the fed images) depends on no variable: its input
gradient is not computed, so it counts once. The step's FLOPs are
3 x forward - that first conv's forward.
GFLOP/s = FLOPs per step x steps/s; each framework's fraction is against the
machine's float32 GEMM rate measured in the same run (np.matmul of two
2048x2048 float32 matrices, best of several), on all the BLAS threads.

NOTE: towerflow's weight decay is decoupled (``var *= 1 - lr * wd``; the JAX
step does the same) and PyTorch's SGD adds ``wd * var`` to the gradient: the
same work, not the same numbers; this benchmark compares speed only.

    python benchmarks/cifar_cpu.py [--batches 64,128,256] [--rounds 5] [--steps 10]
        [--isa avx2|avx512] [--json benchmarks/results/cifar_cpu.json]

``--isa avx2`` holds every framework to AVX2 kernels, as on an AVX2-only CPU
(see vector_path.py).

A framework that is not installed gets a "not installed" row.
"""

import argparse
import os
import platform
import time

import gpu_peers
import numpy as np
import vector_path

import towerflow as tf
from towerflow import training
from towerflow.device import host
from towerflow.recipes.cifar10 import RECIPE, WIDTHS

GEMM_SIZE = 2048
BATCH_NORM_EPSILON, BATCH_NORM_MOMENTUM = 1e-3, 0.9


# -- FLOPs and the machine's GEMM rate ------------------------------------------------


def step_flops(build_logits, input_shape):
    """FLOPs per sample of one training step of the network ``build_logits(x)``
    builds on an input of ``input_shape`` (per sample), counted as the module
    docstring says: (forward FLOPs, step FLOPs)."""
    graph = tf.Graph()
    with graph.as_default():
        build_logits(tf.placeholder(tf.float32, (1,) + tuple(input_shape)))
    forward, not_computed = 0, 0
    trained = set()                 # ops whose output depends on a variable
    for op in graph.get_operations():           # in creation order: inputs first
        if "Variable" in op.type or any(t.op in trained for t in op.inputs):
            trained.add(op)
        flops = _layer_flops(op)
        forward += flops
        if flops and op.inputs[0].op not in trained:
            not_computed += flops   # no gradient for an input computed from the images only
    return forward, 3 * forward - not_computed


def _layer_flops(op):
    """2 x the multiply-adds of a Conv2D or MatMul op of a batch-1 graph (else 0)."""
    if op.type == "Conv2D":
        _, out_h, out_w, out_channels = op.outputs[0].shape.as_list()
        kh, kw, in_channels, _ = op.inputs[1].shape.as_list()
        return 2 * out_h * out_w * kh * kw * in_channels * out_channels
    if op.type == "MatMul":
        rows, columns = op.outputs[0].shape.as_list()
        return 2 * rows * columns * op.inputs[0].shape.as_list()[-1]
    return 0


def gemm_gflops(size=GEMM_SIZE, repeats=7):
    """The best float32 GFLOP/s of np.matmul on two ``size`` x ``size`` matrices."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    out = np.empty_like(a)
    np.matmul(a, b, out=out)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


# -- JAX ------------------------------------------------------------------------------


class JaxStep:
    """The network and training step in JAX, the whole step one ``jax.jit``.

    NHWC activations and HWIO filters (XLA's CPU convolutions take both),
    training-mode batch norm (batch statistics, running averages updated with
    momentum 0.9 as tf.layers.batch_normalization does), Nesterov momentum
    SGD with decoupled weight decay (towerflow's convention)."""

    def __init__(self, jax, batch):
        self.jax = jax
        self.params, self.running = _jax_parameters(jax, jax.random.PRNGKey(0))
        self.velocity = jax.tree_util.tree_map(jax.numpy.zeros_like, self.params)
        self.step = jax.jit(_jax_training_step(jax), donate_argnums=(0, 1, 2))
        self.loss = None

    def run(self, batch):
        self.params, self.velocity, self.running, self.loss = self.step(
            self.params, self.velocity, self.running, batch[0], batch[1].astype(np.int32))

    def finish(self):
        self.jax.block_until_ready(self.params)

    def parameter_count(self):
        return sum(leaf.size for leaf in self.jax.tree_util.tree_leaves(self.params))


def _jax_parameters(jax, key):
    """(trainable parameters, batch-norm running averages) of the network."""
    jnp = jax.numpy
    shapes = [(3, WIDTHS[0])]
    for cin, width in zip((WIDTHS[0],) + WIDTHS, WIDTHS):
        shapes += [(cin, width), (width, width)]
    keys = jax.random.split(key, len(shapes) + 1)
    convs = [{"filter": _he_normal(jax, k, (3, 3, cin, cout)),
              "gamma": jnp.ones(cout), "beta": jnp.zeros(cout)}
             for k, (cin, cout) in zip(keys, shapes)]
    running = [{"mean": jnp.zeros(cout), "variance": jnp.ones(cout)} for _, cout in shapes]
    dense = _he_normal(jax, keys[-1], (WIDTHS[-1], 10))
    return {"convs": convs, "dense": dense}, running


def _he_normal(jax, key, shape):
    fan_in = int(np.prod(shape[:-1]))
    return jax.random.normal(key, shape, jax.numpy.float32) * np.sqrt(2.0 / fan_in)


def _jax_training_step(jax):
    jnp, lax = jax.numpy, jax.lax

    def conv_bn_relu(x, layer, running):
        y = lax.conv_general_dilated(x, layer["filter"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        mean, variance = jnp.mean(y, axis=(0, 1, 2)), jnp.var(y, axis=(0, 1, 2))
        y = (y - mean) * lax.rsqrt(variance + BATCH_NORM_EPSILON) * layer["gamma"] \
            + layer["beta"]
        decay = BATCH_NORM_MOMENTUM
        averages = {"mean": decay * running["mean"] + (1 - decay) * mean,
                    "variance": decay * running["variance"] + (1 - decay) * variance}
        return jax.nn.relu(y), averages

    def max_pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss_fn(params, running, images, labels):
        layers, averages = params["convs"], []
        y, new = conv_bn_relu(images, layers[0], running[0])
        averages.append(new)
        for index in range(1, len(layers), 2):
            y, new = conv_bn_relu(y, layers[index], running[index])
            y = max_pool(y)
            residual, new_residual = conv_bn_relu(y, layers[index + 1], running[index + 1])
            y = y + residual
            averages += [new, new_residual]
        logits = jnp.max(y, axis=(1, 2)) @ params["dense"] * 0.125
        log_probs = jax.nn.log_softmax(logits)
        loss = -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))
        return loss, averages

    def step(params, velocity, running, images, labels):
        (loss, averages), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, running, images, labels)
        rate, momentum, decay = gpu_peers.LEARNING_RATE, gpu_peers.MOMENTUM, \
            gpu_peers.WEIGHT_DECAY
        velocity = jax.tree_util.tree_map(lambda v, g: momentum * v + g, velocity, grads)
        params = jax.tree_util.tree_map(
            lambda p, g, v: p * (1 - rate * decay) - rate * (g + momentum * v),
            params, grads, velocity)
        averages = jax.lax.stop_gradient(averages)
        return params, velocity, averages, loss
    return step


def check_jax_trains(jax, batch, steps=8):
    """Assert that the JAX step lowers the loss on one fixed batch."""
    runner = JaxStep(jax, batch[0].shape[0])
    losses = []
    for _ in range(steps):
        runner.run(batch)
        losses.append(float(runner.loss))
    assert losses[-1] < 0.8 * losses[0], f"the JAX step does not train: losses {losses}"
    return losses


# -- the runs -------------------------------------------------------------------------


def import_optional(name):
    """The module ``name``, or None (with a message) where it is not installed."""
    try:
        module = __import__(name)
    except ImportError:
        print(f"{name} is not installed: its rows say so")
        return None
    if name == "torch":
        module.set_num_threads(os.cpu_count() or 1)
    return module


def towerflow_parameter_count(runner):
    with runner.sess.graph.as_default():
        return sum(int(np.prod(v.shape.as_list())) for v in tf.trainable_variables())


def make_runners(batch, torch, jax):
    """{name: runner} for the installed frameworks; asserts the same parameter count."""
    runners = {"towerflow": gpu_peers.TowerflowStep(batch, "float32", "/cpu:0", False)}
    expected = towerflow_parameter_count(runners["towerflow"])
    if torch is not None:
        runners["pytorch"] = gpu_peers.TorchStep(torch, batch, "float32", "cpu")
        count = sum(p.numel() for p in runners["pytorch"].model.parameters())
        assert count == expected, f"PyTorch has {count} parameters, towerflow {expected}"
    if jax is not None:
        runners["jax"] = JaxStep(jax, batch)
        count = runners["jax"].parameter_count()
        assert count == expected, f"JAX has {count} parameters, towerflow {expected}"
    return runners


FRAMEWORKS = ("towerflow", "pytorch", "jax")


def measure_batch(batch, torch, jax, args, flops_per_sample):
    rates = gpu_peers.alternate(make_runners(batch, torch, jax),
                                gpu_peers.make_batches(batch), args.rounds, args.steps)
    return rate_row(batch, rates, flops_per_sample)


def rate_row(batch, rates, flops_per_sample, frameworks=FRAMEWORKS):
    """The table row of one batch size from {framework: steps/s} (missing: None),
    towerflow first: samples/s, GFLOP/s, and towerflow over each peer."""
    row = {"batch": batch}
    for name in frameworks:
        samples = rates[name] * batch if name in rates else None
        row[name] = None if samples is None else \
            {"samples_per_s": samples, "gflops": samples * flops_per_sample / 1e9}
    for name in frameworks[1:]:
        row[f"towerflow_over_{name}"] = None if row[name] is None else \
            row["towerflow"]["samples_per_s"] / row[name]["samples_per_s"]
    return row


def add_gemm_fractions(rows, gemm_rate, frameworks):
    """Each measured framework's GFLOP/s as a fraction of the GEMM rate."""
    for row in rows:
        for name in frameworks:
            if row[name] is not None:
                row[name]["fraction_of_gemm"] = row[name]["gflops"] / gemm_rate


def print_table(rows, gemm_rate, flops_per_sample=None, frameworks=FRAMEWORKS):
    step = "" if flops_per_sample is None else \
        f"; step: {flops_per_sample / 1e6:.1f} MFLOP per sample"
    print(f"\nfloat32 GEMM ({GEMM_SIZE}^2, np.matmul, best): {gemm_rate:.0f} GFLOP/s "
          f"(OpenBLAS {openblas_core()} kernels){step}")
    print(f"{'batch':>5} {'framework':<10} {'samples/s':>10} {'GFLOP/s':>8} {'of GEMM':>8} "
          f"{'towerflow/it':>13}")
    for row in rows:
        for name in frameworks:
            print(_table_line(row, name))


def _table_line(row, name):
    result = row[name]
    if result is None:
        return f"{row['batch']:>5} {name:<10} {'not installed':>10}"
    ratio = row.get(f"towerflow_over_{name}")
    ratio_text = "" if ratio is None else f"{ratio:>13.2f}"
    return (f"{row['batch']:>5} {name:<10} {result['samples_per_s']:>10.0f} "
            f"{result['gflops']:>8.1f} {result['fraction_of_gemm']:>8.0%} {ratio_text}")


def write_json(path, result):
    """``result`` with the machine it was measured on (CPU model, vector
    extensions, cores, compiled kernels, switches set, date) as ``path``."""
    training.write_json(path, {**result, "machine": host.describe()})
    print(f"wrote {path}")


def versions(**modules):
    found = {name: getattr(module, "__version__", None) for name, module in modules.items()}
    return dict(found, numpy=np.__version__, python=platform.python_version(),
                cpus=os.cpu_count(), openblas_core=openblas_core(),
                openblas_coretype_env=os.environ.get("OPENBLAS_CORETYPE"),
                vector_path=vector_path.record(modules.get("torch")))


def openblas_core():
    """The kernel set NumPy's OpenBLAS runs (e.g. Haswell: AVX2; SkylakeX: AVX-512),
    or None: towerflow's GEMMs run at its speed (OPENBLAS_CORETYPE overrides it).
    threadpoolctl reads it from every OpenBLAS the process loaded, on any OS."""
    from threadpoolctl import threadpool_info
    for library in threadpool_info():
        if library.get("internal_api") == "openblas" and library.get("architecture"):
            return library["architecture"]
    return None


def peer_arguments(doc, name, batches, steps):
    """The command line of a peer benchmark (this one, mnist_cnn_cpu.py): --batches
    (comma-separated), --rounds, --steps per round and --json (default
    results/``name``.json beside this file)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--batches", default=batches)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                       f"{name}.json"))
    vector_path.add_argument(parser)
    args = parser.parse_args()
    vector_path.hold(args.isa)
    return args


def main():
    args = peer_arguments(__doc__, "cifar_cpu", batches="64,128,256", steps=10)
    torch, jax = import_optional("torch"), import_optional("jax")
    forward, flops_per_sample = step_flops(lambda x: RECIPE.logits(x, training=True),
                                           (32, 32, 3))
    print(f"FLOPs per sample: forward {forward / 1e6:.2f} M, training step "
          f"{flops_per_sample / 1e6:.2f} M (3 x forward - the stem conv's input gradient)")
    if jax is not None:
        losses = check_jax_trains(jax, gpu_peers.make_batches(64, count=1)[0])
        print(f"JAX step trains: loss {losses[0]:.3f} -> {losses[-1]:.3f} on one batch")
    gemm_rate = gemm_gflops()
    rows = [measure_batch(int(batch), torch, jax, args, flops_per_sample)
            for batch in args.batches.split(",")]
    gemm_rate = max(gemm_rate, gemm_gflops())       # before and after: the better
    add_gemm_fractions(rows, gemm_rate, FRAMEWORKS)
    print_table(rows, gemm_rate, flops_per_sample)
    write_json(args.json, {"benchmark": "cifar_cpu", "unit": "samples/s", "rows": rows,
                           "gemm_gflops": gemm_rate, "forward_flops_per_sample": forward,
                           "step_flops_per_sample": flops_per_sample,
                           "versions": versions(torch=torch, jax=jax)})


if __name__ == "__main__":
    main()
