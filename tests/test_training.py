"""`towerflow train` end to end on the digits recipe: accuracy, exact resume,
resume on another tower count, the JSON summary, and one-line CLI errors."""

import csv
import json
import math
import os
import subprocess
import sys

import pytest

import towerflow as tf
from towerflow import cli, run_control, training, training_evaluation
from towerflow.recipes import get

pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn "
                                      "(pip install 'towerflow[data]')")
JSON_KEYS = {"recipe", "devices", "towers", "all_reduce", "steps", "final_loss",
             "train_loss", "train_accuracy", "test_accuracy", "samples_per_sec",
             "step_ms", "first_step_seconds", "eval_seconds", "wall_seconds", "precision",
             "world_size", "total_towers", "sync_batch_norm", "accumulate"}


def towers(count):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
    return [f"/cpu:{i}" for i in range(count)]


def curve(directory):
    with open(directory / "training_curve.csv", newline="") as source:
        return list(csv.DictReader(source))


def test_digits_trains_to_095_on_two_cpu_towers(tmp_path, no_gpu):
    result = training.fit(get("digits"), towers(2), epochs=4, quiet=True,
                          json_out=str(tmp_path / "result.json"))
    assert result["test_accuracy"] >= 0.95
    written = json.loads((tmp_path / "result.json").read_text())
    assert set(written) == JSON_KEYS
    assert written["towers"] == 2 and written["recipe"] == "digits"


def test_resume_reproduces_the_losses_of_an_uninterrupted_run(tmp_path, monkeypatch, no_gpu):
    devices = towers(2)
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    training.fit(get("digits"), devices, epochs=4, quiet=True, checkpoint_dir=str(straight),
                 log_every=4)
    # a SIGINT in the middle of epoch 2 (23 steps an epoch) and of a step row's 4
    # steps, then resumed: the epoch means and the step rows continue their sums,
    # and the cadence comes from the checkpoint
    monkeypatch.setenv(run_control.SELF_SIGNAL_ENV, "30:SIGINT")
    with pytest.raises(run_control.Interrupted, match=r"at step 30 \(epoch 2\)"):
        training.fit(get("digits"), devices, epochs=4, quiet=True,
                     checkpoint_dir=str(interrupted), log_every=4)
    monkeypatch.delenv(run_control.SELF_SIGNAL_ENV)
    training.fit(get("digits"), devices, quiet=True, checkpoint_dir=str(interrupted),
                 resume=True)
    assert curve(interrupted) == curve(straight)


def test_resume_with_another_tower_count(tmp_path, no_gpu):
    devices = towers(4)
    training.fit(get("digits"), devices[:3], epochs=2, quiet=True, checkpoint_dir=str(tmp_path))
    result = training.fit(get("digits"), devices[:1], epochs=3, quiet=True,
                          checkpoint_dir=str(tmp_path), resume=True, extend=True)
    rows = [row for row in curve(tmp_path) if row["kind"] == "epoch"]
    assert [row["epoch"] for row in rows] == ["1", "2", "3"]
    assert result["test_accuracy"] >= 0.9


def test_mixed_precision_training_learns_and_restores_the_policy(no_gpu):
    # NOTE: one epoch (23 steps), whose accuracy is 0.46-0.80 over seeds 0-11 (chance
    # is 0.1); after 12 steps it was 0.26-0.60, too close to any threshold: the initial
    # weights' seeds follow the ops built before the model, the schedule's included.
    result = training.fit(get("digits"), towers(1), epochs=1, quiet=True,
                          precision="mixed_float16")
    assert result["precision"] == "mixed_float16" and math.isfinite(result["final_loss"])
    assert result["test_accuracy"] >= 0.4
    assert tf.mixed_precision.global_policy().name == "float32"    # restored afterwards


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "towerflow", *args], capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize("args, message", [
    (["train", "mystery"], "unknown recipe 'mystery'; the recipes are: digits"),
    (["train", "digits", "--devices", "/gpu:7"], "device '/gpu:7' does not exist"),
    (["train", "digits", "--data-dir", "/no/such/dir"], "is not a directory"),
    (["train", "digits", "--devices", ""], "--devices '': expected comma-separated devices"),
])
def test_cli_errors_are_one_line_and_exit_non_zero(args, message):
    done = run_cli(*args)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [f"towerflow: error: {lines[0].split('error: ', 1)[1]}"]
    assert message in lines[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("seconds", ["nan", "0", "-1", "inf"])
def test_checkpoint_secs_takes_a_positive_finite_number_only(seconds):
    # nan used to turn clock checkpoints off; 0 and -1 to checkpoint every step
    done = run_cli("train", "digits", "--checkpoint-secs", seconds)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"--checkpoint-secs: invalid value '{seconds}'" in lines[0]


def test_a_batch_larger_than_the_data_is_the_whole_set_not_a_memory_error(tmp_path):
    # buffers of 10**11 examples ran out of memory; a batch holds at most every example
    done = run_cli("train", "digits", "--epochs", "1", "--batch-size", str(10 ** 11),
                   "--cpu-towers", "1", "--json-out", str(tmp_path / "run.json"))
    assert done.returncode == 0, done.stderr[-1000:]
    assert json.loads((tmp_path / "run.json").read_text())["steps"] == 1


def test_devices_json_lists_the_cpu_and_says_why_no_gpu(capsys, no_gpu):
    assert cli.main(["devices", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["devices"][0]["device_type"] == "CPU"
    assert report["gpu_unavailable_reason"]
    assert "numpy" in report["versions"]


def test_devices_says_which_cpu_which_compiled_kernels_run_and_the_switches_set(
        capsys, monkeypatch, no_gpu):
    """The CPU model, its vector extensions and usable cores, whether the
    compiled kernels and the compiled GEMM run (and why not), every
    TOWERFLOW_* switch set: what a speed figure has to name."""
    from towerflow.backends import native
    monkeypatch.setenv("TOWERFLOW_GPU_CONV", "implicit")
    assert cli.main(["devices", "--json"]) == 0
    host = json.loads(capsys.readouterr().out)["host"]
    assert host["cpu"]["model"] and 1 <= host["cpu"]["usable_cores"] <= os.cpu_count()
    assert set(host["cpu"]["vector_extensions"]) <= {"avx2", "fma", "avx512f"}
    assert host["switches"]["TOWERFLOW_GPU_CONV"] == "implicit"
    assert host["compiled_kernels"]["running"] == native.available()
    assert host["compiled_kernels"]["vector_gemm"] == (native.VECTOR_GEMM and
                                                       native.available())
    assert host["compiled_kernels"]["gemm_path"] == (native.GEMM_PATH if native.available()
                                                     else None)
    monkeypatch.setattr(native, "VECTOR_GEMM", False)       # a CPU with no vector path
    assert cli.main(["devices"]) == 0
    text = capsys.readouterr().out
    if native.available():
        assert "compiled GEMM: not running: " in text and "OpenBLAS runs them" in text
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    assert cli.main(["devices"]) == 0
    switch = "TOWERFLOW_ISA=generic" if native.FORCED_ISA == "generic" else \
        "TOWERFLOW_NATIVE=0"
    assert f"compiled kernels: not running: {switch} turns them off" in \
        capsys.readouterr().out
    monkeypatch.setattr(native, "_compiled", None)
    monkeypatch.setattr(native, "_IMPORT_ERROR", ImportError("no module named _native"))
    assert native.status()["reason"].startswith("the _native extension is not built "
                                                "(no module named _native)")


class LinearDigits(type(get("digits"))):
    """digits with a linear model: logits(x) + logits(mirror x) = logits(x + mirror x)."""

    test_time_flip = True

    def logits(self, images, training):
        return tf.layers.dense(tf.layers.flatten(images), 10, use_bias=False)


@pytest.mark.parametrize("count", [1, 3])
def test_flip_test_time_augmentation_adds_each_images_mirror(monkeypatch, no_gpu, count):
    from towerflow import data
    monkeypatch.setattr(training_evaluation, "EVAL_BATCH", 100)  # 360 test images: ragged shards
    recipe = LinearDigits()
    splits = recipe.load()
    pipeline = data.Pipeline(splits.train.images, splits.train.labels, 64, seed=0)
    with tf.Graph().as_default() as graph:
        model = training._build(recipe, splits, towers(count), "auto",
                                {"seed": 0, "precision": "float32"},
                                pipeline.batches_per_epoch)
        model.normalisation = {}
        sess = tf.Session(graph=graph)
        sess.run(tf.global_variables_initializer())
        with_flips = training_evaluation.evaluate(sess, model, splits.test)
        model.test_time_flip = False
        images = splits.test.images
        symmetric = data.Split(images + images[:, :, ::-1], splits.test.labels)
        # the same correct predictions: the accuracy metric is a float32 mean of the
        # towers' accuracies weighted by their shares, exact to far less than one image
        assert training_evaluation.evaluate(sess, model, symmetric) == pytest.approx(
            with_flips, abs=0.5 / len(splits.test.labels))
        assert training_evaluation.evaluate(sess, model, splits.test) != with_flips
    pipeline.close()


def test_cifar10_recipe_trains_and_evaluates_with_flips(monkeypatch, cifar_dir, no_gpu):
    # The real recipe (model, optimizer, augmentation, flip TTA) on a slice of
    # the real data: a few steps on 2 logical CPUs, then a test accuracy.
    from towerflow import data
    recipe = get("cifar10")
    full = recipe.load(str(cifar_dir))
    subset = data.Splits(data.Split(full.train.images[:512], full.train.labels[:512]),
                         data.Split(full.test.images[:300], full.test.labels[:300]),
                         full.class_names)
    monkeypatch.setattr(recipe, "load", lambda data_dir=None: subset)
    result = training.fit(recipe, towers(2), batch_size=128, steps=3, quiet=True)
    assert result["steps"] == 3 and result["towers"] == 2
    assert 0.0 <= result["test_accuracy"] <= 1.0
    assert result["test_accuracy"] * 300 == pytest.approx(round(result["test_accuracy"] * 300))


@pytest.mark.parametrize("v2, v1, cores", [
    ("150000 100000", None, 2),             # 1.5 CPUs: two threads, each partly used
    ("max 100000", ("400000", "100000"), 4),
    (None, ("-1", "100000"), None),         # v1 without a quota
    (None, None, None)])                    # no cgroup files
def test_a_cgroup_cpu_quota_bounds_the_usable_cores(tmp_path, monkeypatch, v2, v1, cores):
    """A container given 2 CPUs of a larger host runs 2 threads, not one per
    host core (the CPU pool and `towerflow devices` use usable_cores)."""
    from towerflow.device import host

    def written(name, text):
        path = tmp_path / name
        if text is not None:
            path.write_text(text + "\n")
        return str(path)
    monkeypatch.setattr(host, "CGROUP_V2_MAX", written("cpu.max", v2))
    monkeypatch.setattr(host, "CGROUP_V1", (written("quota", v1 and v1[0]),
                                            written("period", v1 and v1[1])))
    assert host.cgroup_cores() == cores
    affinity = len(os.sched_getaffinity(0))
    assert host.usable_cores() == (min(affinity, cores) if cores else affinity)
