"""Script recipes (``towerflow train linear_regression | mnist_softmax |
text_sample``: programs that are not a classifier trained by training.fit)
and ``towerflow bench``, through the command line as users run them."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import fake_gpu, gpu_registration_kept
from towerflow import backends, cli, recipes
from towerflow.backends import numpy_backend
from towerflow.device import physical
from towerflow.graph import registry
from towerflow.recipes import text_sample

MNIST_SMALL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist-small"
needs_mnist = pytest.mark.skipif(not MNIST_SMALL.is_dir(),
                                 reason=f"MNIST data not found at {MNIST_SMALL}")
SCRIPT_RECIPES = ("linear_regression", "mnist_softmax", "text_sample")
COMMON_KEYS = {"recipe", "devices", "steps", "final_loss", "wall_seconds"}
# SEED_PROGRAMS P5's data
P5_X = [1, 23, 4, 5, 7, 5, 7]
P5_Y = [3, 5, 7, 9, 11, 13, 15]


def train(tmp_path, *options):
    """``towerflow train ...`` in this process; the --json-out summary."""
    out = tmp_path / "result.json"
    assert cli.main(["train", *options, "--quiet", "--json-out", str(out)]) == 0
    return json.loads(out.read_text())


def error_line(capsys, argv):
    """The one stderr line of a failing ``towerflow`` command (exit status 2)."""
    assert cli.main(argv) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("towerflow: error: ")
    return lines[0]


# -- linear_regression (P5) ---------------------------------------------------------


def test_linear_regression_summary_keys_and_the_loss_decreases(tmp_path):
    result = train(tmp_path, "linear_regression", "--steps", "2000")
    assert COMMON_KEYS | {"w", "b"} <= set(result)
    assert result["recipe"] == "linear_regression" and result["steps"] == 2000
    assert result["devices"] == ["/cpu:0"]
    assert result["final_loss"] < result["first_loss"]


def test_linear_regression_default_run_reaches_the_least_squares_fit(tmp_path):
    result = train(tmp_path, "linear_regression")
    assert result["steps"] == 100_000
    slope, intercept = np.polyfit(P5_X, P5_Y, 1)
    residual = np.mean((slope * np.array(P5_X) + intercept - np.array(P5_Y)) ** 2)
    # P5's stated fit, within float32 tolerance
    assert result["w"] == pytest.approx(slope, abs=2e-5) == pytest.approx(-0.09749, abs=2e-5)
    assert result["b"] == pytest.approx(intercept, abs=2e-4) == pytest.approx(9.72423, abs=2e-4)
    assert result["final_loss"] == pytest.approx(residual, rel=1e-5)
    print(f"\nlinear_regression: 100000 steps in {result['wall_seconds']:.2f} s")


def test_a_script_recipe_refuses_options_it_would_ignore(capsys):
    line = error_line(capsys, ["train", "linear_regression", "--cpu-towers", "2"])
    assert "does not use --cpu-towers" in line and "--steps" in line
    with pytest.raises(SystemExit) as exited:      # refused as it is parsed (issue 14)
        cli.main(["train", "text_sample", "--steps", "0"])
    assert exited.value.code == 2
    assert "argument --steps: invalid value 0: expected a whole number >= 1" in \
        capsys.readouterr().err


# -- mnist_softmax (P6) -------------------------------------------------------------


@needs_mnist
def test_mnist_softmax_reaches_090_and_reports_the_gpu_skipped(tmp_path, no_gpu):
    result = train(tmp_path, "mnist_softmax", "--data-dir", str(MNIST_SMALL))
    assert COMMON_KEYS | {"test_accuracy", "timings", "gpu_skipped_reason"} <= set(result)
    assert result["test_accuracy"] >= 0.90
    assert list(result["timings"]) == ["/cpu:0"] and result["timings"]["/cpu:0"] > 0
    assert isinstance(result["gpu_skipped_reason"], str) and result["gpu_skipped_reason"]
    print(f"\nmnist_softmax: accuracy {result['test_accuracy']:.4f}, "
          f"CPU {result['timings']['/cpu:0']:.2f} s")


@needs_mnist
def test_mnist_softmax_keeps_the_cpu_run_when_a_listed_gpu_fails(tmp_path, monkeypatch):
    def broken_gpu(device):
        raise RuntimeError("CUDA driver version is insufficient (test)")
    # a GPU that is listed and has kernels, but whose runtime fails to start
    physical.set_gpu_probe(lambda: ([fake_gpu(0)], None))
    monkeypatch.setenv("TOWERFLOW_MNIST_DIR", str(MNIST_SMALL))    # instead of --data-dir
    with gpu_registration_kept():
        registry.register_kernels("GPU", numpy_backend.KERNELS)
        backends.register_backend("GPU", broken_gpu)
        result = train(tmp_path, "mnist_softmax", "--steps", "3")
    assert list(result["timings"]) == ["/cpu:0"] and result["steps"] == 3
    assert "/gpu:0" in result["gpu_skipped_reason"]
    assert "driver version is insufficient" in result["gpu_skipped_reason"]


def test_mnist_softmax_without_a_data_directory_says_how_to_give_one(capsys, monkeypatch):
    monkeypatch.delenv("TOWERFLOW_MNIST_DIR", raising=False)
    line = error_line(capsys, ["train", "mnist_softmax"])
    assert "--data-dir" in line and "TOWERFLOW_MNIST_DIR" in line


# -- text_sample (P8) ---------------------------------------------------------------


def test_text_sample_draws_from_the_training_text_and_repeats_with_the_seed(tmp_path):
    first = train(tmp_path, "text_sample", "--steps", "60", "--seed", "3")
    again = train(tmp_path, "text_sample", "--steps", "60", "--seed", "3")
    assert COMMON_KEYS | {"samples"} <= set(first) and first["steps"] == 60
    assert set(first["samples"]) == {"0.2", "0.6", "1.0"}
    characters = set(text_sample.zen_of_python())
    for sample in first["samples"].values():
        assert len(sample) == text_sample.SAMPLE_LENGTH
        assert set(sample) <= characters
    assert again["samples"] == first["samples"]
    assert np.isfinite(first["final_loss"])


def test_text_sample_prints_its_samples_unless_quiet(capsys):
    assert cli.main(["train", "text_sample", "--steps", "5"]) == 0
    out = capsys.readouterr().out
    assert all(f"temperature {t}" in out for t in ("0.2", "0.6", "1.0"))
    assert "text_sample: loss" in out


# -- the recipe list ----------------------------------------------------------------


def test_an_unknown_recipe_lists_the_script_recipes(capsys):
    line = error_line(capsys, ["train", "mystery"])
    assert "unknown recipe 'mystery'" in line
    assert all(name in line for name in SCRIPT_RECIPES)
    assert all(recipes.get(name).kind == "script" for name in SCRIPT_RECIPES)


@pytest.mark.parametrize("name", SCRIPT_RECIPES)
def test_the_recipes_scripts_run_the_recipe(name, tmp_path):
    if name == "mnist_softmax" and not MNIST_SMALL.is_dir():
        pytest.skip(f"MNIST data not found at {MNIST_SMALL}")
    script = Path(__file__).resolve().parents[1] / "recipes" / f"{name}.py"
    data = ["--data-dir", str(MNIST_SMALL)] if name == "mnist_softmax" else []
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, str(script), "--steps", "1", "--quiet", *data,
                           "--json-out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["recipe"] == name


# -- towerflow bench ----------------------------------------------------------------


def test_bench_list_names_the_benchmarks(capsys):
    assert cli.main(["bench", "--list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"cpu_peers", "session_overhead", "scaling"} <= set(names)


def test_bench_forwards_options_to_the_script():
    done = subprocess.run([sys.executable, "-m", "towerflow", "bench", "session_overhead",
                           "--", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "session_overhead.py" in done.stdout and "--repeats" in done.stdout


def test_bench_failures_and_unknown_names(capsys):
    assert cli.main(["bench", "session_overhead", "--", "--no-such-option"]) == 1
    assert "session_overhead failed" in capsys.readouterr().err
    line = error_line(capsys, ["bench", "nope"])
    assert "unknown benchmark 'nope'" in line and "cpu_peers" in line


def test_bench_outside_a_source_checkout_says_so(capsys, monkeypatch, tmp_path):
    from towerflow import cli_bench
    # where an installed wheel puts the module: no benchmarks/ beside the package
    monkeypatch.setattr(cli_bench, "__file__", str(tmp_path / "towerflow" / "cli_bench.py"))
    line = error_line(capsys, ["bench"])
    assert "source checkout" in line
