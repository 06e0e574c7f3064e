"""The classic TF1 MNIST CNN on the CPU: towerflow beside TensorFlow compat.v1 and PyTorch.

The network of TensorFlow 1's "Deep MNIST for experts" tutorial: 28x28x1
images, conv 5x5 (1->32, SAME) + bias + ReLU, 2x2 max pool, conv 5x5 (32->64,
SAME) + bias + ReLU, 2x2 max pool, dense 3136->1024 + ReLU, dropout (keep 0.5),
dense 1024->10, softmax cross-entropy on one-hot labels, Adam (1e-4).

- towerflow and TensorFlow (``tf.compat.v1``, graph mode, one Session) build the
  very same graph: ``build_graph(api)`` takes either module as ``tf``;
- PyTorch eager runs the same layers (NCHW, its default; with one channel the
  images are the same bytes in NHWC and NCHW).

One training step per ``run``; the frameworks are measured in turn (round-robin,
``--rounds`` rounds of ``--steps`` steps, after a warm-up), median samples/s,
the ratios towerflow / TensorFlow and towerflow / PyTorch, and GFLOP/s counted
as benchmarks/cifar_cpu.py counts them (the convolutions and dense layers'
multiply-adds; the first conv's input gradient is not computed).

    python benchmarks/mnist_cnn_cpu.py [--batches 50,100] [--rounds 5] [--steps 20]
        [--json benchmarks/results/mnist_cnn_cpu.json]

A framework that is not installed gets a "not installed" row.
"""

import os

import cifar_cpu
import gpu_peers
import numpy as np

import towerflow

LEARNING_RATE, KEEP_PROB = 1e-4, 0.5
FRAMEWORKS = ("towerflow", "tensorflow", "pytorch")


def make_batches(batch, count=4, seed=0):
    """Random (images [B, 784], one-hot labels [B, 10]) float32 batches."""
    rng = np.random.default_rng(seed)
    return [(rng.random((batch, 784), dtype=np.float32),
             np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]) for _ in range(count)]


def logits(tf, images, keep_prob):
    """The tutorial's network on ``images`` [B, 784], written against the TF1 API
    module ``tf`` (towerflow or tensorflow.compat.v1)."""
    def weight(shape):
        return tf.Variable(tf.truncated_normal(shape, stddev=0.1))

    def bias(size):
        return tf.Variable(tf.constant(0.1, shape=[size]))

    def conv_relu_pool(x, in_channels, out_channels):
        y = tf.nn.conv2d(x, weight([5, 5, in_channels, out_channels]), strides=[1, 1, 1, 1],
                         padding="SAME")
        y = tf.nn.relu(y + bias(out_channels))
        return tf.nn.max_pool(y, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="SAME")

    y = conv_relu_pool(tf.reshape(images, [-1, 28, 28, 1]), 1, 32)
    y = tf.reshape(conv_relu_pool(y, 32, 64), [-1, 7 * 7 * 64])
    y = tf.nn.relu(tf.matmul(y, weight([7 * 7 * 64, 1024])) + bias(1024))
    y = tf.nn.dropout(y, rate=1 - keep_prob)
    return tf.matmul(y, weight([1024, 10])) + bias(10)


def build_graph(tf):
    """(graph, images, labels, keep_prob, train op, parameter count) for module ``tf``."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(0)
        images = tf.placeholder(tf.float32, [None, 784])
        labels = tf.placeholder(tf.float32, [None, 10])
        keep_prob = tf.placeholder(tf.float32)
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
            labels=labels, logits=logits(tf, images, keep_prob)))
        train_op = tf.train.AdamOptimizer(LEARNING_RATE).minimize(loss)
        count = sum(int(np.prod(v.shape.as_list())) for v in tf.trainable_variables())
    return graph, images, labels, keep_prob, train_op, count


class GraphStep:
    """A training step of ``build_graph(tf)`` in a Session of module ``tf``."""

    def __init__(self, tf):
        graph, self.images, self.labels, self.keep_prob, self.train_op, self.parameters = \
            build_graph(tf)
        self.sess = tf.Session(graph=graph)
        with graph.as_default():
            self.sess.run(tf.global_variables_initializer())

    def run(self, batch):
        self.sess.run(self.train_op, {self.images: batch[0], self.labels: batch[1],
                                      self.keep_prob: KEEP_PROB})

    def finish(self):
        pass                        # Session.run returns when the step is done


class TorchStep:
    """The same network and step in PyTorch eager."""

    def __init__(self, torch):
        nn = torch.nn
        torch.manual_seed(0)
        self.torch = torch
        self.model = nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(7 * 7 * 64, 1024), nn.ReLU(), nn.Dropout(1 - KEEP_PROB),
            nn.Linear(1024, 10))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=LEARNING_RATE)
        self.loss_fn = nn.CrossEntropyLoss()        # takes one-hot (probability) targets
        self.parameters = sum(p.numel() for p in self.model.parameters())

    def run(self, batch):
        images = self.torch.from_numpy(batch[0]).reshape(-1, 1, 28, 28)
        self.optimizer.zero_grad(set_to_none=True)
        self.loss_fn(self.model(images), self.torch.from_numpy(batch[1])).backward()
        self.optimizer.step()

    def finish(self):
        pass


def import_tensorflow():
    """tensorflow.compat.v1, or None (with a message) where it is not installed."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")    # no start-up log lines
    try:
        import tensorflow
    except ImportError:
        print("tensorflow is not installed: its rows say so")
        return None
    tensorflow.get_logger().setLevel("ERROR")     # compat.v1's deprecation notes
    return tensorflow.compat.v1


def make_runners(tensorflow, torch):
    """{name: runner} of the installed frameworks; asserts the same parameter count."""
    runners = {"towerflow": GraphStep(towerflow)}
    if tensorflow is not None:
        runners["tensorflow"] = GraphStep(tensorflow)
    if torch is not None:
        runners["pytorch"] = TorchStep(torch)
    expected = runners["towerflow"].parameters
    for name, runner in runners.items():
        assert runner.parameters == expected, \
            f"{name} has {runner.parameters} parameters, towerflow {expected}"
    return runners


def measure_batch(batch, runners, args, flops_per_sample):
    rates = gpu_peers.alternate(runners, make_batches(batch), args.rounds, args.steps)
    return cifar_cpu.rate_row(batch, rates, flops_per_sample, FRAMEWORKS)


def main():
    args = cifar_cpu.peer_arguments(__doc__, "mnist_cnn_cpu", batches="50,100", steps=20)
    tensorflow, torch = import_tensorflow(), cifar_cpu.import_optional("torch")
    forward, flops_per_sample = cifar_cpu.step_flops(
        lambda x: logits(towerflow, x, 1.0), (784,))
    print(f"FLOPs per sample: forward {forward / 1e6:.2f} M, training step "
          f"{flops_per_sample / 1e6:.2f} M")
    runners = make_runners(tensorflow, torch)
    gemm_rate = cifar_cpu.gemm_gflops()
    rows = [measure_batch(int(batch), runners, args, flops_per_sample)
            for batch in args.batches.split(",")]
    gemm_rate = max(gemm_rate, cifar_cpu.gemm_gflops())     # before and after: the better
    cifar_cpu.add_gemm_fractions(rows, gemm_rate, FRAMEWORKS)
    cifar_cpu.print_table(rows, gemm_rate, frameworks=FRAMEWORKS)
    cifar_cpu.write_json(args.json, {
        "benchmark": "mnist_cnn_cpu", "unit": "samples/s", "rows": rows,
        "gemm_gflops": gemm_rate, "forward_flops_per_sample": forward,
        "step_flops_per_sample": flops_per_sample,
        "versions": cifar_cpu.versions(tensorflow=tensorflow, torch=torch)})


if __name__ == "__main__":
    main()
