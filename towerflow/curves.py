"""Honest training curves: what a run reports about its training loss and accuracy.

Each step's loss and accuracy are means over that step's global batch. A
figure for an epoch (the epoch line, the JSON summary, the progress bar) is the
mean over the epoch's *samples*: each step weighs its batch size, so a ragged
last batch of 30 samples counts for 30, not for a whole batch. Every
``log_every`` steps a step row (the mean over the samples of the steps since the
previous step row) goes to ``training_curve.csv`` beside the checkpoints; every
epoch an epoch row, and ``training_curve.png`` is redrawn::

    recorder = Recorder(Curve("ckpt"), log_every=4, batches_per_epoch=23)
    recorder.add_step(loss, accuracy, len(labels))      # after every step
    means = recorder.end_epoch(epoch, True, test_accuracy)
    means.loss, means.accuracy

The running sums are part of a checkpoint (``state()``), so a run resumed
mid-epoch reports the same epoch means as one never interrupted.
"""

import csv
import math
import os
import typing

POINTS_PER_RUN = 50     # the step rows a run gets when --log-every is not given
FEW_POINTS = 20         # fewer step rows than this are drawn as dots too


class PartialEpoch(typing.NamedTuple):
    """The epoch a run stopped in: its start (whole epochs), the position the
    run reached (in epochs), its means so far and the test accuracy then."""
    epoch: int
    reached: float
    means: object
    test_accuracy: float | None


def default_log_every(total_steps):
    """The step-row cadence giving about POINTS_PER_RUN rows over ``total_steps``.

    >>> default_log_every(184)      # 8 epochs of digits at batch 64
    4
    """
    return max(1, round(total_steps / POINTS_PER_RUN))


def choose_log_every(given, state, total_steps):
    """The step-row cadence: ``given`` (--log-every), else a resumed run's (from
    its checkpoint's ``state``, so its rows keep the spacing they began with),
    else the default for ``total_steps``.

    >>> choose_log_every(None, {"log_every": 2}, 60)
    2
    """
    if given is not None:
        return check_log_every(given)
    return (state or {}).get("log_every") or default_log_every(total_steps)


def check_log_every(value):
    """``value`` as a positive int, or a ValueError naming it.

    >>> check_log_every(10)
    10
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"--log-every needs a whole number of steps >= 1, got {value!r}")
    return value


class Means:
    """Sample-weighted means of per-batch loss and accuracy.

    >>> means = Means()
    >>> means.add(0.5, 1.0, 64); means.add(2.0, 0.5, 32)
    >>> means.loss, means.accuracy        # (0.5*64 + 2*32) / 96, (64 + 16) / 96
    (1.0, 0.8333333333333334)
    """

    def __init__(self, samples=0, loss_sum=0.0, correct_sum=0.0):
        self.samples, self.loss_sum, self.correct_sum = samples, loss_sum, correct_sum

    def add(self, loss, accuracy, samples):
        # NOTE: float64 sums of float32 values: exact enough for any run length,
        # and the same sums whatever the tower count or interruption.
        self.samples += int(samples)
        self.loss_sum += float(loss) * samples
        self.correct_sum += float(accuracy) * samples

    @property
    def loss(self):
        return self.loss_sum / self.samples if self.samples else math.nan

    @property
    def accuracy(self):
        return self.correct_sum / self.samples if self.samples else math.nan

    def state(self):
        return {"samples": self.samples, "loss_sum": self.loss_sum,
                "correct_sum": self.correct_sum}


class Recorder:
    """The running means of a run: the epoch's and the current step row's.

    ``curve``: a Curve, or None to keep the means without writing rows (ranks
    other than 0, runs without --checkpoint-dir). ``batches_done``: the steps
    already run (a resumed run's); ``state``: from ``state()`` in its checkpoint.
    """

    def __init__(self, curve, log_every, batches_per_epoch, batches_done=0, state=None,
                 board=None):
        self.curve, self.log_every = curve, check_log_every(log_every)
        self.board = board          # a TensorBoardCurve given the same rows, or None
        self.batches_per_epoch, self.batches_done = batches_per_epoch, batches_done
        state = state or {}
        self.epoch = Means(**state.get("epoch", {}))
        self.last_epoch = self.epoch       # the Means end_epoch last reported
        self.window = Means(**state.get("window", {}))
        if curve is not None:
            curve.drop_after(batches_done)     # rows of steps a resumed run repeats

    def add_step(self, loss, accuracy, samples):
        """Count one step; write a step row on the cadence. Returns the epoch's Means."""
        self.batches_done += 1
        self.epoch.add(loss, accuracy, samples)
        self.window.add(loss, accuracy, samples)
        if self.batches_done % self.log_every == 0:
            self._write("step", round(self.batches_done / self.batches_per_epoch, 4),
                        self.window)
            self.window = Means()
        return self.epoch

    def end_epoch(self, epoch, finished, test_accuracy):
        """The epoch's Means; with ``finished``, its row is written and the means
        start again (else the epoch continues after a resume). Redraws the PNG."""
        means = self.last_epoch = self.epoch
        if finished:
            self._write("epoch", epoch + 1, means, test_accuracy)
            self.epoch = Means()
        if self.curve is not None:
            # A run that stops mid-epoch draws that epoch so far (not a CSV row:
            # a resumed run continues the epoch).
            partial = None if finished else PartialEpoch(
                epoch, self.batches_done / self.batches_per_epoch, means, test_accuracy)
            self.curve.plot(self.log_every, partial)
        return means

    def summary(self):
        """The JSON summary's means: over the last epoch reported (so far, when
        the run stopped mid-epoch); None when no step ran."""
        means = self.last_epoch
        return {"train_loss": means.loss if means.samples else None,
                "train_accuracy": means.accuracy if means.samples else None}

    def state(self):
        """The running sums, for a checkpoint's extra state."""
        return {"epoch": self.epoch.state(), "window": self.window.state(),
                "log_every": self.log_every}

    def _write(self, kind, epoch, means, test_accuracy=None):
        if self.curve is not None:
            self.curve.add(kind, epoch, self.batches_done, means, test_accuracy)
        if self.board is not None:
            self.board.add(kind, self.batches_done, means, test_accuracy)

    def close(self):
        """Write out and close the TensorBoard files, if any."""
        if self.board is not None:
            self.board.close()


class TensorBoardCurve:
    """The curve's rows as TensorBoard scalars in ``directory``, at their global
    step: per step row ``train/loss``, ``train/accuracy`` (means over the
    row's samples), ``train/learning_rate`` (``learning_rate()``: the
    schedule's value at that step) and ``train/samples_per_sec`` (the row's
    samples over the training time since the previous row: ``training_seconds()``
    counts the steps' time only, not evaluation's or checkpoints'); per epoch
    ``epoch/loss``, ``epoch/train_accuracy`` and ``epoch/test_accuracy``.

    >>> board = TensorBoardCurve("tb", lambda: 0.05, step_clock.training_seconds)
    >>> board.add("step", 4, means)         # means: a Means of the last 4 steps
    """

    def __init__(self, directory, learning_rate, training_seconds):
        from .api.file_writer import FileWriter
        self.writer = FileWriter(directory)
        self.learning_rate, self.training_seconds = learning_rate, training_seconds
        self.row_started = training_seconds()

    def add(self, kind, step, means, test_accuracy=None):
        if kind == "step":
            now = self.training_seconds()
            rate = means.samples / (now - self.row_started) if now > self.row_started else 0.0
            self.row_started = now
            self._scalars(step, {"train/loss": means.loss, "train/accuracy": means.accuracy,
                                 "train/learning_rate": self.learning_rate(),
                                 "train/samples_per_sec": rate})
            return
        values = {"epoch/loss": means.loss, "epoch/train_accuracy": means.accuracy}
        if test_accuracy is not None:
            values["epoch/test_accuracy"] = test_accuracy
        self._scalars(step, values)
        self.writer.flush()

    def _scalars(self, step, values):
        from .api.summary import Summary
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))
                                 for tag, value in values.items() if value is not None])
        self.writer.add_summary(summary, global_step=step)

    def close(self):
        self.writer.close()


class Curve:
    """``directory/training_curve.csv`` (one row per logged step and per epoch,
    told apart by the ``kind`` column) and ``training_curve.png`` (if matplotlib
    imports).

    >>> Curve("ckpt").rows()[-1]["kind"]
    'epoch'
    """

    COLUMNS = ("kind", "epoch", "step", "samples", "loss", "train_accuracy", "test_accuracy")

    def __init__(self, directory, title=None):
        os.makedirs(directory, exist_ok=True)
        self.title = title          # the PNG's (the run: recipe, towers, batch, date)
        self.csv_path = os.path.join(directory, "training_curve.csv")
        self.png_path = os.path.join(directory, "training_curve.png")

    def add(self, kind, epoch, step, means, test_accuracy=None):
        new = not os.path.exists(self.csv_path)
        with open(self.csv_path, "a", newline="") as out:
            writer = csv.writer(out)
            if new:
                writer.writerow(self.COLUMNS)
            writer.writerow([kind, epoch, step, means.samples, f"{means.loss:.6f}",
                             f"{means.accuracy:.6f}",
                             "" if test_accuracy is None else f"{test_accuracy:.6f}"])

    def rows(self):
        """The rows as dicts: ``kind`` a string, the rest floats (None where empty)."""
        if not os.path.exists(self.csv_path):
            return []
        with open(self.csv_path, newline="") as source:
            return [{key: value if key == "kind" else (float(value) if value else None)
                     for key, value in row.items()} for row in csv.DictReader(source)]

    def drop_after(self, step):
        """Forget the rows past ``step``: written after the checkpoint a run resumes
        from, they are written again as the run repeats those steps."""
        if not os.path.exists(self.csv_path):
            return
        with open(self.csv_path, newline="") as source:
            lines = list(csv.reader(source))
        if not lines or tuple(lines[0]) != self.COLUMNS:
            lines = [self.COLUMNS] + _epoch_rows_of_old_format(self.csv_path)
        kept = [lines[0]] + [line for line in lines[1:] if int(line[2]) <= step]
        if len(kept) < len(lines) or lines[0] is self.COLUMNS:
            with open(self.csv_path, "w", newline="") as out:
                csv.writer(out).writerows(kept)

    def plot(self, log_every, partial=None):
        """Redraw the PNG (``partial``: the PartialEpoch a run stopped in, or
        None); without matplotlib, the CSV alone is the record."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return
        figure = draw(self.rows(), log_every, partial, self.title)
        figure.savefig(self.png_path, dpi=100)
        plt.close(figure)


def _epoch_rows_of_old_format(path):
    """The rows of a curve written before step rows existed (columns epoch, step,
    loss, train_accuracy, test_accuracy) in today's columns."""
    with open(path, newline="") as source:
        return [["epoch", row["epoch"], row["step"], "", row["loss"], row["train_accuracy"],
                 row["test_accuracy"]] for row in csv.DictReader(source)]


def draw(rows, log_every, partial=None, title=None):
    """A matplotlib Figure of the curve ``rows`` (Curve.rows()): loss on the left,
    accuracy on the right, against epochs (integer ticks). The step rows are a
    thin line (with dots when there are few); each epoch's mean is a bar
    across that epoch with a dot at its middle (the mean covers the whole
    epoch); test accuracy is a dot at each epoch's end. ``partial`` (a
    PartialEpoch) adds the epoch a run stopped in, up to where it stopped.

    >>> draw(Curve("ckpt").rows(), 4, title="digits, 2 towers").savefig("curve.png")
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    steps = [row for row in rows if row["kind"] == "step"]
    epochs = [_EpochSpan(row["epoch"] - 1, row["epoch"], row["loss"], row["train_accuracy"],
                         row["test_accuracy"]) for row in rows if row["kind"] == "epoch"]
    if partial is not None and partial.means.samples:
        epochs.append(_EpochSpan(partial.epoch, partial.reached, partial.means.loss,
                                 partial.means.accuracy, partial.test_accuracy))
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(10, 4))
    dots = "." if len(steps) < FEW_POINTS else ""
    for axes, column in ((loss_axes, "loss"), (accuracy_axes, "train_accuracy")):
        axes.plot([row["epoch"] for row in steps], [row[column] for row in steps], dots + "-",
                  color="tab:blue", linewidth=0.8, alpha=0.6, label=_every(log_every))
        _draw_epoch_means(axes, epochs, column)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlim(left=0)
    _at_least_a_percent(loss_axes)
    tested = [span for span in epochs if span.test_accuracy is not None]
    accuracy_axes.plot([span.end for span in tested], [span.test_accuracy for span in tested],
                       "s-", color="tab:orange", label="test, end of epoch or run")
    loss_axes.set(xlabel="epoch", ylabel="training loss")
    accuracy_axes.set(xlabel="epoch", ylabel="accuracy", ylim=(0, 1.02))
    for axes in (loss_axes, accuracy_axes):
        axes.legend(fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


class _EpochSpan(typing.NamedTuple):   # an epoch's means, drawn from start to end
    start: float
    end: float
    loss: float
    train_accuracy: float
    test_accuracy: float | None


def _at_least_a_percent(axes):
    """Widen a y axis spanning under 1 % of its values to 4 % around them: a
    flat curve (one step) is a flat line, not float32 rounding magnified."""
    low, high = axes.get_ylim()
    middle = (low + high) / 2
    if high - low < 0.01 * abs(middle):
        axes.set_ylim(middle * 0.98, middle * 1.02) if middle > 0 else \
            axes.set_ylim(middle * 1.02, middle * 0.98)


def _every(log_every):
    return "train, every step" if log_every == 1 else f"train, every {log_every} steps"


def _draw_epoch_means(axes, spans, column):
    means = [getattr(span, column) for span in spans]
    axes.hlines(means, [span.start for span in spans], [span.end for span in spans],
                color="tab:green", linewidth=2)
    axes.plot([(span.start + span.end) / 2 for span in spans], means, "o", color="tab:green",
              label="train, epoch mean")
