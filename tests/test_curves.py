"""Honest training curves (towerflow/curves.py): per-epoch means over the epoch's
samples (a ragged last batch weighs its samples only), step rows at the
--log-every cadence, the PNG's contents, and --log-every validation."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from test_training import curve as csv_rows
from test_training import towers

from towerflow import curves, progress, run_control, training
from towerflow.recipes import get

pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn "
                                      "(pip install 'towerflow[data]')")
STEPS_PER_EPOCH = 23        # digits: 1438 training images at batch 64
BATCH_SIZES = [64] * 22 + [30]


@pytest.fixture
def spied(monkeypatch):
    """What the loop hands the recorder (each step's loss, accuracy, batch size)
    and what the progress bar is told."""
    seen = {"steps": [], "bar": []}
    add_step = curves.Recorder.add_step

    def spy_step(self, loss, accuracy, samples):
        seen["steps"].append((float(loss), float(accuracy), samples))
        return add_step(self, loss, accuracy, samples)

    def spy_bar(self, loss, accuracy, samples_per_sec):
        seen["bar"].append((loss, accuracy))

    monkeypatch.setattr(curves.Recorder, "add_step", spy_step)
    monkeypatch.setattr(progress.EpochBar, "update", spy_bar)
    return seen


def test_epoch_means_weigh_each_sample_once(tmp_path, capsys, spied, no_gpu):
    result = training.fit(get("digits"), towers(2), epochs=1, checkpoint_dir=str(tmp_path),
                          json_out=str(tmp_path / "run.json"))
    losses, accuracies, sizes = (np.array(column, np.float64) for column in zip(*spied["steps"]))
    assert list(sizes) == BATCH_SIZES
    loss_mean = np.sum(losses * sizes) / np.sum(sizes)      # computed here, independently
    accuracy_mean = np.sum(accuracies * sizes) / np.sum(sizes)
    # NOTE: both sides sum the same float32 values in float64; only the order differs
    assert result["train_loss"] == pytest.approx(loss_mean, rel=1e-12)
    assert result["train_accuracy"] == pytest.approx(accuracy_mean, rel=1e-12)
    assert json.loads((tmp_path / "run.json").read_text())["train_loss"] == result["train_loss"]
    (epoch_row,) = [row for row in csv_rows(tmp_path) if row["kind"] == "epoch"]
    assert float(epoch_row["loss"]) == pytest.approx(loss_mean, abs=5e-7)     # 6 decimals
    assert float(epoch_row["train_accuracy"]) == pytest.approx(accuracy_mean, abs=5e-7)
    assert int(epoch_row["samples"]) == 1438
    printed = f"epoch 1: loss {loss_mean:.4f}  train accuracy {accuracy_mean:.4f}"
    assert printed in capsys.readouterr().out
    # the old report, the last (ragged) batch's figures, is not the epoch's
    assert abs(losses[-1] - loss_mean) > 0.05
    assert result["final_loss"] == losses[-1]        # final_loss stays the last step's


def test_progress_bar_shows_the_running_epoch_mean(spied, no_gpu):
    training.fit(get("digits"), towers(1), epochs=1, quiet=True)
    losses, accuracies, sizes = (np.array(column, np.float64) for column in zip(*spied["steps"]))
    running_loss = np.cumsum(losses * sizes) / np.cumsum(sizes)
    running_accuracy = np.cumsum(accuracies * sizes) / np.cumsum(sizes)
    shown = np.array(spied["bar"])
    np.testing.assert_allclose(shown[:, 0], running_loss, rtol=1e-12)
    np.testing.assert_allclose(shown[:, 1], running_accuracy, rtol=1e-12)


def test_step_rows_follow_log_every_and_epoch_rows_close_each_epoch(tmp_path, spied, no_gpu):
    training.fit(get("digits"), towers(2), epochs=2, quiet=True, checkpoint_dir=str(tmp_path),
                 log_every=5)
    rows = csv_rows(tmp_path)
    assert list(rows[0]) == list(curves.Curve.COLUMNS)
    steps = [row for row in rows if row["kind"] == "step"]
    epochs = [row for row in rows if row["kind"] == "epoch"]
    assert [int(row["step"]) for row in steps] == list(range(5, 46, 5))
    assert [(row["epoch"], row["step"]) for row in epochs] == [("1", "23"), ("2", "46")]
    assert {row["kind"] for row in rows} == {"step", "epoch"}
    # a step row: the mean over the samples of its 5 steps (steps 21-25 hold the
    # ragged batch), at its position in epochs
    losses, _, sizes = (np.array(column, np.float64) for column in zip(*spied["steps"]))
    window = slice(20, 25)
    row = steps[4]
    assert int(row["samples"]) == 4 * 64 + 30
    assert float(row["loss"]) == pytest.approx(
        np.sum(losses[window] * sizes[window]) / np.sum(sizes[window]), abs=5e-7)
    assert float(row["epoch"]) == pytest.approx(25 / STEPS_PER_EPOCH, abs=5e-5)
    assert all(row["test_accuracy"] == "" for row in steps)


def test_default_log_every_gives_about_50_rows_a_run():
    assert curves.default_log_every(184) == 4          # 8 digits epochs: 46 rows
    assert curves.default_log_every(10) == 1
    assert curves.default_log_every(10_000) == 200
    assert curves.choose_log_every(None, {"log_every": 7}, 184) == 7   # a resumed run's
    assert curves.choose_log_every(3, {"log_every": 7}, 184) == 3


def test_resume_drops_rows_written_after_its_checkpoint(tmp_path, monkeypatch, no_gpu):
    devices = towers(1)
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    training.fit(get("digits"), devices, epochs=2, quiet=True, checkpoint_dir=str(straight),
                 log_every=3)
    monkeypatch.setenv(run_control.SELF_SIGNAL_ENV, "30:SIGINT")   # stopped at step 30
    with pytest.raises(run_control.Interrupted):
        training.fit(get("digits"), devices, epochs=2, quiet=True,
                     checkpoint_dir=str(interrupted), log_every=3)
    monkeypatch.delenv(run_control.SELF_SIGNAL_ENV)
    # a run killed after step 33's row but before its next checkpoint left this row
    with open(interrupted / "training_curve.csv", "a", newline="") as out:
        csv.writer(out).writerow(["step", "1.4348", "33", "192", "9.9", "0.1", ""])
    training.fit(get("digits"), devices, epochs=2, quiet=True,
                 checkpoint_dir=str(interrupted), resume=True)
    assert csv_rows(interrupted) == csv_rows(straight)


def test_png_shows_step_curve_epoch_means_and_test_accuracy(tmp_path, no_gpu):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    training.fit(get("digits"), towers(1), epochs=3, quiet=True, checkpoint_dir=str(tmp_path),
                 log_every=4)
    png = tmp_path / "training_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.imread(str(png)).shape[:2] == (400, 1000)
    curve = curves.Curve(str(tmp_path))
    rows = curve.rows()
    figure = curves.draw(rows, 4)
    loss_axes, accuracy_axes = figure.axes
    assert (loss_axes.get_xlabel(), loss_axes.get_ylabel()) == ("epoch", "training loss")
    assert (accuracy_axes.get_xlabel(), accuracy_axes.get_ylabel()) == ("epoch", "accuracy")
    lines = {line.get_label(): line for line in accuracy_axes.get_lines()}
    assert set(lines) == {"train, every 4 steps", "train, epoch mean",
                          "test, end of epoch or run"}
    epoch_rows = [row for row in rows if row["kind"] == "epoch"]
    step_rows = [row for row in rows if row["kind"] == "step"]
    assert list(lines["test, end of epoch or run"].get_xdata()) == [1, 2, 3]
    assert list(lines["test, end of epoch or run"].get_ydata()) == [
        row["test_accuracy"] for row in epoch_rows]
    assert list(lines["train, epoch mean"].get_xdata()) == [0.5, 1.5, 2.5]
    assert list(lines["train, epoch mean"].get_ydata()) == [
        row["train_accuracy"] for row in epoch_rows]
    assert len(lines["train, every 4 steps"].get_xdata()) == len(step_rows) == 69 // 4
    loss_lines = {line.get_label(): line for line in loss_axes.get_lines()}
    assert list(loss_lines["train, epoch mean"].get_ydata()) == [
        row["loss"] for row in epoch_rows]
    for axes in figure.axes:
        figure.canvas.draw()
        ticks = [tick for tick in axes.get_xticks() if 0 <= tick <= 3]
        assert ticks == [0, 1, 2, 3]
    plt.close(figure)


@pytest.fixture
def drawn(monkeypatch):
    """The figures the run's Curve.plot draws (the last one is the PNG's)."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    figures, draw = [], curves.draw

    def keep(*args, **kwargs):
        figures.append(draw(*args, **kwargs))
        return figures[-1]
    monkeypatch.setattr(curves, "draw", keep)
    return figures


def labelled(axes):
    return {line.get_label(): line for line in axes.get_lines()}


def test_a_run_stopped_mid_epoch_plots_that_epoch_and_the_final_test_accuracy(
        tmp_path, drawn, no_gpu):
    """Issue 33, item 5: the PNG left out the final partial epoch and the test
    accuracy at the run's end, and named neither the run nor its date."""
    result = training.fit(get("digits"), towers(1), steps=30, quiet=True,
                          checkpoint_dir=str(tmp_path), log_every=5)
    loss_axes, accuracy_axes = drawn[-1].axes
    reached = 30 / STEPS_PER_EPOCH
    means = labelled(accuracy_axes)["train, epoch mean"]
    assert list(means.get_xdata()) == [0.5, (1 + reached) / 2]
    assert means.get_ydata()[-1] == pytest.approx(result["train_accuracy"], rel=1e-6)
    tested = labelled(accuracy_axes)["test, end of epoch or run"]
    assert list(tested.get_xdata())[-1] == pytest.approx(reached)
    assert tested.get_ydata()[-1] == pytest.approx(result["test_accuracy"], rel=1e-6)
    assert labelled(loss_axes)["train, epoch mean"].get_ydata()[-1] == pytest.approx(
        result["train_loss"], rel=1e-6)
    title = drawn[-1].get_suptitle()
    assert title.startswith("digits: 1 tower, batch 64, 20") and title.endswith(" UTC")


def test_a_one_step_run_plots_a_visible_point_and_says_every_step(tmp_path, drawn, no_gpu):
    training.fit(get("digits"), towers(2), steps=1, quiet=True, checkpoint_dir=str(tmp_path),
                 log_every=1)
    loss_axes = drawn[-1].axes[0]
    steps = labelled(loss_axes)["train, every step"]     # "every 1 steps" before
    assert len(steps.get_xdata()) == 1 and steps.get_marker() == "."
    low, high = loss_axes.get_ylim()
    assert high - low >= 0.01 * steps.get_ydata()[0]     # not float32 rounding magnified
    assert drawn[-1].get_suptitle().startswith("digits: 2 towers, batch 64, ")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "towerflow", *args], capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize("value", ["0", "-3"])
def test_log_every_below_one_is_refused_in_one_line(value):
    done = run_cli("train", "digits", "--log-every", value)
    assert done.returncode == 2
    assert done.stderr.strip() == ("towerflow: error: --log-every needs a whole number of "
                                   f"steps >= 1, got {value}")


def test_log_every_not_a_number_and_on_a_script_recipe_are_refused():
    done = run_cli("train", "digits", "--log-every", "often")
    assert done.returncode == 2 and "--log-every: invalid int value: 'often'" in done.stderr
    done = run_cli("train", "linear_regression", "--log-every", "5")
    assert done.returncode == 2 and "does not use --log-every" in done.stderr
    with pytest.raises(ValueError, match="--log-every needs .* got 2.5"):
        curves.check_log_every(2.5)


def test_a_curve_written_before_step_rows_is_carried_over_as_epoch_rows(tmp_path):
    (tmp_path / "training_curve.csv").write_text(
        "epoch,step,loss,train_accuracy,test_accuracy\n"
        "1,23,2.000000,0.400000,0.500000\n2,46,0.600000,0.800000,0.900000\n")
    curve = curves.Curve(str(tmp_path))
    curves.Recorder(curve, 5, STEPS_PER_EPOCH, batches_done=23)     # resuming at step 23
    assert curve.rows() == [{"kind": "epoch", "epoch": 1.0, "step": 23.0, "samples": None,
                             "loss": 2.0, "train_accuracy": 0.4, "test_accuracy": 0.5}]
