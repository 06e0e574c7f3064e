"""The steps of benchmarks/gpu_check.sh that need a little Python.

    python benchmarks/gpu_check_steps.py install full|tiny RECORD.json
    python benchmarks/gpu_check_steps.py cifar10-data DIR RECORD.json full|tiny SHARED_DATA
    python benchmarks/gpu_check_steps.py synthetic-cifar10 DIR
    python benchmarks/gpu_check_steps.py train [--logical-gpus N] [--test-images K]
        RECIPE [towerflow train options]

``install`` runs ``pip install --no-build-isolation --no-deps --no-index -e .``
(a lent machine has no package index; ``--dry-run`` in tiny mode, which
compiles nothing) and records whether it worked, else that the tree on
PYTHONPATH (set by gpu_check.sh) serves, and whether the compiled CPU
kernels are there. ``cifar10-data`` builds the CIFAR-10 files with
SHARED_DATA/make_cifar10.py, else (no script, no Pillow, tiny mode) a
synthetic set, and records which.

``synthetic-cifar10`` writes DIR/cifar-10-batches-bin/ (the binary layout,
60,000 random 32x32 images of random labels) where the shared JPEG archive
or Pillow is missing: the recipe's samples/s do not depend on the pixels.

``train`` runs ``towerflow train``, with GPU 0 split into N logical GPUs
(each 0.8/N of its memory) where asked: the CLI has no option for that, and
``--towers N`` then takes the N logical GPUs. ``--test-images K`` evaluates
on the first K test images only: the check's tiny mode (CI, on the simulated
GPU, where the 10,000 images' evaluation takes minutes). Example::

    python benchmarks/gpu_check_steps.py train --logical-gpus 2 cifar10 --towers 2 \\
        --data-dir /tmp/cifar10 --steps 100 --json-out run.json
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np

IMAGES_PER_BATCH, RECORD_BYTES = 10_000, 1 + 3072      # towerflow/data/cifar10.py
BATCH_FILES = [f"data_batch_{k}.bin" for k in range(1, 6)] + ["test_batch.bin"]
CLASSES = ["airplane", "automobile", "bird", "cat", "deer",
           "dog", "frog", "horse", "ship", "truck"]


def synthetic_cifar10(directory):
    """Write the binary CIFAR-10 layout, every batch full size (the loader
    insists on 10,000 records a file), from a fixed seed."""
    folder = os.path.join(directory, "cifar-10-batches-bin")
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in BATCH_FILES:
        records = rng.integers(0, 256, (IMAGES_PER_BATCH, RECORD_BYTES), dtype=np.uint8)
        records[:, 0] = rng.integers(0, len(CLASSES), IMAGES_PER_BATCH)
        records.tofile(os.path.join(folder, name))
    with open(os.path.join(folder, "batches.meta.txt"), "w") as meta:
        meta.write("\n".join(CLASSES) + "\n")
    print(f"wrote a synthetic CIFAR-10 set in {folder}")
    return 0


def install(size, record):
    """pip, else the tree on PYTHONPATH; exit 0 when towerflow imports."""
    command = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
               "--no-index", "-e", "."] + (["--dry-run"] if size == "tiny" else [])
    print("$", " ".join(command), flush=True)
    pip_exit = subprocess.run(command, check=False).returncode
    probe = subprocess.run([sys.executable, "-c", IMPORT_PROBE], check=False,
                           capture_output=True, text=True)
    print(probe.stdout + probe.stderr)
    found = json.loads(probe.stdout) if probe.returncode == 0 else {}
    method = "pip" if pip_exit == 0 else f"PYTHONPATH (pip exited {pip_exit})"
    write_json(record, {"method": method, "pip_dry_run": size == "tiny",
                        "importable": probe.returncode == 0, **found})
    return probe.returncode


IMPORT_PROBE = """import json, towerflow
from towerflow.backends import native
print(json.dumps({"towerflow_from": towerflow.__file__,
                  "compiled_cpu_kernels": native.available()}))"""


def cifar10_data(directory, record, size, shared):
    """The shared JPEGs made into the binary layout, else a synthetic set."""
    script = os.path.join(shared, "make_cifar10.py")
    if size == "tiny":
        reason = "tiny mode"
    elif not os.path.isfile(script):
        reason = f"{script} not found"
    elif importlib.util.find_spec("PIL") is None:
        reason = "Pillow is not installed"
    else:
        made = subprocess.run([sys.executable, script, directory, "--format", "bin"],
                              check=False)
        reason = None if made.returncode == 0 else f"make_cifar10.py exited {made.returncode}"
    if reason:
        synthetic_cifar10(directory)
    write_json(record, {"cifar10": f"synthetic ({reason})" if reason else script})
    return 0


def write_json(path, value):
    with open(path, "w") as out:
        json.dump(value, out, indent=2)


def split_gpu(count):
    """GPU 0 as ``count`` logical GPUs; False (and why, on stderr) if no GPU."""
    import towerflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        from towerflow.device import runtime
        print(f"no GPU: {runtime.gpu_unavailable_reason()}", file=sys.stderr)
        return False
    share = tf.config.LogicalDeviceConfiguration(memory_fraction=0.8 / count)
    tf.config.set_logical_device_configuration(gpus[0], [share] * count)
    return True


def keep_test_images(count):
    """Make the cifar10 recipe evaluate on its first ``count`` test images."""
    from towerflow.data import Split
    from towerflow.recipes.cifar10 import Cifar10Recipe
    load = Cifar10Recipe.load

    def load_fewer(recipe, data_dir=None):
        splits = load(recipe, data_dir)
        test = Split(splits.test.images[:count], splits.test.labels[:count])
        return splits._replace(test=test)
    Cifar10Recipe.load = load_fewer


def train(argv):
    parser = argparse.ArgumentParser(prog="gpu_check_steps.py train", allow_abbrev=False)
    parser.add_argument("--logical-gpus", type=int, default=None)
    parser.add_argument("--test-images", type=int, default=None)
    options, train_args = parser.parse_known_args(argv)
    if options.logical_gpus and not split_gpu(options.logical_gpus):
        return 2
    if options.test_images:
        keep_test_images(options.test_images)
    from towerflow import cli
    return cli.main(["train", *train_args])


def main(argv):
    if len(argv) == 3 and argv[0] == "install":
        return install(argv[1], argv[2])
    if len(argv) == 5 and argv[0] == "cifar10-data":
        return cifar10_data(*argv[1:])
    if len(argv) == 2 and argv[0] == "synthetic-cifar10":
        return synthetic_cifar10(argv[1])
    if argv[:1] == ["train"]:
        return train(argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
