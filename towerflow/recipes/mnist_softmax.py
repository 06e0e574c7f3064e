"""SEED_PROGRAMS P6: softmax regression on MNIST, the same program timed on
the CPU and on the GPU (when one is usable). About 0.92 test accuracy after
10 epochs on ../shared/data/mnist-small and on the full MNIST.

    towerflow train mnist_softmax --data-dir MNIST_data [--epochs 10] [--devices /cpu:0]

The directory holds the four standard IDX files; without ``--data-dir`` the
environment variable TOWERFLOW_MNIST_DIR names it. Nothing is downloaded.
"""

import os
import time

import towerflow as tf
from towerflow.device import runtime
from towerflow.examples.tutorials.mnist import input_data

LEARNING_RATE, EPOCHS, BATCH_SIZE = 0.1, 10, 100


class MnistSoftmaxRecipe:
    name = "mnist_softmax"
    kind = "script"
    flags = ("epochs", "steps", "batch_size", "data_dir", "devices", "log_device_placement")

    def run(self, args):
        """Train once per device; returns test_accuracy (of the first device),
        timings {device: seconds}, accuracies, gpu_skipped_reason, ..."""
        directory = self._data_dir(args)
        devices, gpu_skipped_reason = self._devices(args)
        runs = {}
        for device in devices:
            try:
                runs[device] = self._train(directory, device, args)
            except Exception as err:    # NOTE: a listed but broken GPU must not lose the CPU run
                if args.devices or device == devices[0]:
                    raise           # asked for by name, or the CPU: a real failure
                gpu_skipped_reason = f"{device} is listed but failed: {_one_line(err)}"
        first = runs[devices[0]]
        return {"devices": list(runs), "steps": first["steps"],
                "batch_size": args.batch_size or BATCH_SIZE,
                "final_loss": first["final_loss"], "test_accuracy": first["test_accuracy"],
                "accuracies": {device: run["test_accuracy"] for device, run in runs.items()},
                "timings": {device: run["seconds"] for device, run in runs.items()},
                "gpu_skipped_reason": gpu_skipped_reason}

    def _data_dir(self, args):
        directory = args.data_dir or os.environ.get("TOWERFLOW_MNIST_DIR")
        if not directory:
            raise ValueError("mnist_softmax needs the MNIST files: pass --data-dir DIR or set "
                             "TOWERFLOW_MNIST_DIR (the four IDX files; nothing is downloaded)")
        return directory

    def _devices(self, args):
        """The devices to time and, when no GPU is among them, why."""
        if args.devices:
            names = [name.strip() for name in args.devices.split(",") if name.strip()]
            skipped = None if any("gpu" in n.lower() for n in names) else "not requested"
            return names, skipped
        if not tf.config.list_physical_devices("GPU"):
            return ["/cpu:0"], runtime.gpu_unavailable_reason() or "no GPU is visible"
        return ["/cpu:0", "/gpu:0"], None

    def _train(self, directory, device, args):
        """P6 with everything (the initializer too) under ``tf.device(device)``."""
        # each device reads afresh, so every device sees the same batches
        mnist = input_data.read_data_sets(directory, one_hot=True, seed=args.seed)
        batch_size = args.batch_size or BATCH_SIZE
        steps = args.steps or (args.epochs or EPOCHS) * (mnist.train.num_examples // batch_size)
        with tf.Graph().as_default(), tf.device(device):
            x = tf.placeholder(tf.float32, [None, 784])
            W = tf.Variable(tf.zeros([784, 10]))
            b = tf.Variable(tf.zeros([10]))
            y = tf.nn.softmax(tf.matmul(x, W) + b)
            y_ = tf.placeholder(tf.float32, [None, 10])
            cross_entropy = tf.reduce_mean(-tf.reduce_sum(y_ * tf.log(y), reduction_indices=[1]))
            train_step = tf.train.GradientDescentOptimizer(LEARNING_RATE).minimize(cross_entropy)
            correct_prediction = tf.equal(tf.argmax(y, 1), tf.argmax(y_, 1))
            accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))
            init = tf.global_variables_initializer()
            config = tf.ConfigProto(log_device_placement=args.log_device_placement)
            with tf.Session(config=config) as sess:
                sess.run(init)
                start = time.perf_counter()
                for _ in range(steps):
                    batch_xs, batch_ys = mnist.train.next_batch(batch_size)
                    _, loss = sess.run([train_step, cross_entropy],
                                       feed_dict={x: batch_xs, y_: batch_ys})
                acc = sess.run(accuracy, feed_dict={x: mnist.test.images,
                                                    y_: mnist.test.labels})
                seconds = time.perf_counter() - start
        return {"steps": steps, "final_loss": float(loss), "test_accuracy": float(acc),
                "seconds": seconds}

    def summary(self, result):
        timings = ", ".join(f"{device} {seconds:.2f} s"
                            for device, seconds in result["timings"].items())
        skipped = result["gpu_skipped_reason"]
        return (f"mnist_softmax: test accuracy {result['test_accuracy']:.4f} after "
                f"{result['steps']} steps; time {timings}"
                + (f"; GPU skipped: {skipped}" if skipped else ""))


def _one_line(err):
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


RECIPE = MnistSoftmaxRecipe()
