"""The cifar10 recipe at the speed of its step: ``towerflow train cifar10``'s
training samples/s beside the bare step rate of the same graph.

Each round runs, one after the other on the same devices:

1. the recipe, ``towerflow train cifar10 --steps 60 --batch-size 256
   --cpu-towers 1`` on the real CIFAR-10 (built from ../shared/data once, or
   ``--data-dir``), as a user would, reading its ``--json-out``: the training
   samples/s (steps after the first; no evaluation, no checkpoint), the median
   step, the first step and the evaluation;
2. the bare step: the recipe's own graph (towerflow.training's ``_build``: the
   model, loss, metrics, optimizer and schedule the recipe trains) fed one fixed
   batch of real, augmented images, for the same number of steps after one
   warm-up step, with no input pipeline and no bookkeeping.

Each is a fresh process (the bare step: this script with ``--bare``), so
neither inherits the other's memory or threads. It prints the medians over the
rounds as a table (bare samples/s, recipe samples/s, and the median of the
rounds' ratios against the target 0.90) and writes JSON (default
benchmarks/results/recipe_rate.json)::

    python benchmarks/recipe_rate.py [--rounds 2] [--steps 60] [--batch 256]
        [--cpu-towers 1] [--data-dir DIR] [--json FILE]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from towerflow.training import write_json

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
TARGET_RATIO = 0.90


def cifar_directory(given):
    """``given``, or the real CIFAR-10 in the binary layout, built once from
    ../shared/data/make_cifar10.py into the temporary folder."""
    if given:
        return given
    built = Path(tempfile.gettempdir()) / "towerflow-recipe-rate-cifar10"
    if not (built / "cifar-10-batches-bin" / "test_batch.bin").is_file():
        script = SHARED_DATA / "make_cifar10.py"
        if not script.is_file():
            sys.exit(f"no --data-dir and no {script}: nothing to train on")
        subprocess.run([sys.executable, str(script), str(built), "--format", "bin"],
                       check=True, capture_output=True)
    return str(built)


def recipe_run(args, data_dir):
    """The recipe through the command line: its --json-out summary."""
    with tempfile.TemporaryDirectory(prefix="recipe-rate-") as scratch:
        summary = os.path.join(scratch, "run.json")
        _run_python(["-m", "towerflow", "train", "cifar10", "--steps", str(args.steps),
                     "--batch-size", str(args.batch), "--cpu-towers", str(args.cpu_towers),
                     "--data-dir", data_dir, "--json-out", summary, "--quiet"])
        with open(summary) as source:
            return json.load(source)


def bare_run(args, data_dir):
    """The bare step in a fresh process: (samples/s, median step in ms)."""
    done = _run_python([__file__, "--bare", "--steps", str(args.steps), "--batch",
                        str(args.batch), "--cpu-towers", str(args.cpu_towers),
                        "--data-dir", data_dir])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_python(arguments):
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, *arguments], check=True, capture_output=True,
                          text=True, env=environment)


class BareStep:
    """The recipe's graph and training fetches on the recipe's devices, fed one
    fixed batch: what the recipe's loop would run with nothing around it."""

    def __init__(self, args, data_dir):
        from towerflow import cli_train, data, training
        from towerflow.graph import core
        from towerflow.ops.state_ops import global_variables_initializer
        from towerflow.recipes import get
        from towerflow.session import Session
        recipe = get("cifar10")
        splits = recipe.load(data_dir)
        devices = cli_train._split_cpu(args.cpu_towers)
        with data.Pipeline(splits.train.images, splits.train.labels, args.batch, seed=0,
                           prefetch=0, **recipe.pipeline_options(splits.train)) as pipeline:
            images, labels = (array.copy() for array in next(pipeline.epoch()))
        graph = core.Graph()
        with graph.as_default():
            model = training._build(recipe, splits, devices, "auto",
                                    {"seed": 0, "precision": "float32"}, args.steps)
            self.sess = Session(graph=graph)
            self.sess.run(global_variables_initializer())
        self.fetches = [model.step.train_op, model.step.loss, model.step.metrics["accuracy"]]
        self.feed = {model.images: images, model.labels: labels, model.training: True}
        self.batch = len(labels)

    def run(self, steps):
        """(samples/s over ``steps`` steps after a warm-up one, median step in ms),
        timed by the recipe's own StepClock (which leaves the first step out)."""
        from towerflow import training_rate
        clock = training_rate.StepClock()
        clock.resume()
        for _ in range(steps + 1):
            self.sess.run(self.fetches, self.feed)
            clock.step_done(self.batch)
        summary = clock.summary()
        return summary["samples_per_sec"], summary["step_ms"]


def measure(args, data_dir):
    """Rounds of the recipe's run and the bare steps, in turn."""
    rounds = []
    for number in range(args.rounds):
        if number % 2:      # every other round the bare step goes first
            bare_rate, bare_step_ms = bare_run(args, data_dir)
            run = recipe_run(args, data_dir)
        else:
            run = recipe_run(args, data_dir)
            bare_rate, bare_step_ms = bare_run(args, data_dir)
        rounds.append({"recipe_samples_per_sec": run["samples_per_sec"],
                       "recipe_step_ms": run["step_ms"],
                       "first_step_seconds": run["first_step_seconds"],
                       "eval_seconds": run["eval_seconds"],
                       "wall_seconds": run["wall_seconds"],
                       "bare_samples_per_sec": bare_rate, "bare_step_ms": bare_step_ms,
                       "ratio": run["samples_per_sec"] / bare_rate})
        print(f"round {number + 1}: recipe {run['samples_per_sec']:.0f} samples/s, "
              f"bare step {bare_rate:.0f} samples/s", flush=True)
    return rounds


def medians(rounds):
    keys = rounds[0].keys()
    return {key: statistics.median(row[key] for row in rounds) for key in keys}


def print_table(args, summary):
    print(f"\ncifar10 recipe, batch {args.batch}, --cpu-towers {args.cpu_towers}, "
          f"--steps {args.steps} (median of {args.rounds} rounds)\n")
    print("| | samples/s | median step (ms) |")
    print("|---|---:|---:|")
    print(f"| bare step (the recipe's graph, fixed batch) | "
          f"{summary['bare_samples_per_sec']:.0f} | {summary['bare_step_ms']:.0f} |")
    print(f"| `towerflow train cifar10` training (--json-out) | "
          f"{summary['recipe_samples_per_sec']:.0f} | {summary['recipe_step_ms']:.0f} |")
    verdict = "meets" if summary["ratio"] >= TARGET_RATIO else "misses"
    print(f"| ratio recipe / bare (median of the rounds') | {summary['ratio']:.3f} | "
          f"({verdict} the target {TARGET_RATIO:.2f}) |")
    print(f"\nnot counted as training: first step {summary['first_step_seconds']:.2f} s, "
          f"evaluation {summary['eval_seconds']:.1f} s; the recipe's whole run "
          f"{summary['wall_seconds']:.1f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--cpu-towers", type=int, default=1)
    parser.add_argument("--data-dir")
    parser.add_argument("--bare", action="store_true",
                        help="only the bare step; print its (samples/s, median ms) as JSON")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" /
                                              "recipe_rate.json"))
    args = parser.parse_args()
    if args.steps < 2 or args.rounds < 1:
        parser.error("--steps must be at least 2 and --rounds at least 1")
    data_dir = cifar_directory(args.data_dir)
    if args.bare:
        print(json.dumps(BareStep(args, data_dir).run(args.steps - 1)))
        return
    rounds = measure(args, data_dir)
    summary = medians(rounds)
    print_table(args, summary)
    result = {"benchmark": "recipe_rate", "batch": args.batch, "steps": args.steps,
              "cpu_towers": args.cpu_towers, "target_ratio": TARGET_RATIO,
              "median": summary, "rounds": rounds, "numpy": np.__version__,
              "python": platform.python_version(), "cpu_count": os.cpu_count()}
    write_json(args.json, result)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
