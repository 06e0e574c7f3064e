"""Progress of a training run: a tqdm bar per epoch on a terminal (the training
curve beside the checkpoints is towerflow/curves.py)."""

import sys


class EpochBar:
    """A tqdm bar for one epoch (the epoch's running mean loss and accuracy,
    samples/s, ETA), shown only on a terminal and when not ``quiet``; otherwise
    it does nothing.

    >>> with EpochBar(0, 8, 23, quiet=False) as bar:
    ...     bar.update(means.loss, means.accuracy, 5000.0)
    """

    def __init__(self, epoch, epochs, total, quiet):
        self._bar = None
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=f"epoch {epoch + 1}/{epochs}", unit="step",
                             leave=False, dynamic_ncols=True)

    def update(self, loss, accuracy, samples_per_sec):
        if self._bar is not None:
            self._bar.set_postfix(epoch_loss=f"{loss:.4f}", epoch_acc=f"{accuracy:.3f}",
                                  samples_s=f"{samples_per_sec:.0f}", refresh=False)
            self._bar.update(1)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        if self._bar is not None:
            self._bar.close()

