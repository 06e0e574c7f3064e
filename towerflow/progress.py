"""Progress of a training run: a tqdm bar per epoch on a terminal, and a
training curve (CSV, plus a PNG when matplotlib is installed) beside the
checkpoints."""

import csv
import os
import sys


class EpochBar:
    """A tqdm bar for one epoch (loss, accuracy, samples/s, ETA), shown only on
    a terminal and when not ``quiet``; otherwise it does nothing."""

    def __init__(self, epoch, epochs, total, quiet):
        self._bar = None
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=f"epoch {epoch + 1}/{epochs}", unit="step",
                             leave=False, dynamic_ncols=True)

    def update(self, loss, accuracy, samples_per_sec):
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss:.4f}", acc=f"{accuracy:.3f}",
                                  samples_s=f"{samples_per_sec:.0f}", refresh=False)
            self._bar.update(1)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        if self._bar is not None:
            self._bar.close()


class Curve:
    """Appends one row per epoch to ``directory/training_curve.csv`` and redraws
    ``training_curve.png`` (if matplotlib imports)."""

    COLUMNS = ("epoch", "step", "loss", "train_accuracy", "test_accuracy")

    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        self.csv_path = os.path.join(directory, "training_curve.csv")
        self.png_path = os.path.join(directory, "training_curve.png")

    def add(self, epoch, step, loss, train_accuracy, test_accuracy):
        new = not os.path.exists(self.csv_path)
        with open(self.csv_path, "a", newline="") as out:
            writer = csv.writer(out)
            if new:
                writer.writerow(self.COLUMNS)
            writer.writerow([epoch, step, f"{loss:.6f}", f"{train_accuracy:.6f}",
                             f"{test_accuracy:.6f}"])
        self._plot()

    def rows(self):
        with open(self.csv_path, newline="") as source:
            return [{key: float(value) for key, value in row.items()}
                    for row in csv.DictReader(source)]

    def _plot(self):
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return  # the CSV is the record; the plot needs the 'plot' extra
        rows = self.rows()
        epochs = [row["epoch"] for row in rows]
        figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
        left.plot(epochs, [row["loss"] for row in rows], "o-")
        left.set(xlabel="epoch", ylabel="training loss")
        right.plot(epochs, [row["train_accuracy"] for row in rows], "o-", label="train")
        right.plot(epochs, [row["test_accuracy"] for row in rows], "o-", label="test")
        right.set(xlabel="epoch", ylabel="accuracy", ylim=(0, 1))
        right.legend()
        figure.tight_layout()
        figure.savefig(self.png_path, dpi=100)
        plt.close(figure)
