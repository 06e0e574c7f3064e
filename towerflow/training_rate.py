"""How fast a run trains: the wall time of each training step, kept apart from
evaluation and checkpoints, for ``--json-out``'s ``samples_per_sec``,
``step_ms``, ``first_step_seconds`` and ``eval_seconds``.

A step's time runs from the end of the previous step (or from the moment the
loop starts asking for batches again after an evaluation or a checkpoint) to
the end of its bookkeeping: waiting for its batch, feeding it, the step
itself, fetching its loss. The run's first step also compiles the plan and
touches every buffer for the first time (1.5 s against 0.25 s for the next
steps of the cifar10 recipe at batch 256), so the rate leaves it out and
reports it apart; a run of one step counts that step.

::

    steps = StepClock()
    steps.resume()                   # before the loop asks for a batch
    for images, labels in pipeline.epoch():
        sess.run(train_op, ...)
        steps.step_done(len(labels))
    steps.summary()     # {'samples_per_sec': ..., 'step_ms': ..., 'first_step_seconds': ...}
"""

import statistics
import time

__all__ = ["StepClock", "clock"]

# The clock every training figure reads (tests replace it with a fake one).
clock = time.perf_counter


class StepClock:
    """Per-step wall times and samples of one run (this process's steps).

    >>> steps = StepClock(); steps.resume(); ...; steps.step_done(256)
    >>> steps.summary()["step_ms"]
    """

    def __init__(self):
        self._seconds, self._samples = [], []
        self._mark = None
        self._total_seconds, self._total_samples = 0.0, 0   # for running_rate, per step

    def resume(self):
        """Start timing the next step now (after time that is not training's)."""
        self._mark = clock()

    def step_done(self, samples):
        """A step of ``samples`` examples ended now."""
        now = clock()
        self._seconds.append(now - self._mark)
        self._samples.append(samples)
        self._total_seconds += now - self._mark
        self._total_samples += samples
        self._mark = now

    def training_seconds(self):
        """The seconds of every step so far (training time only)."""
        return self._total_seconds

    def running_rate(self):
        """Samples per second of training over every step so far (for the bar)."""
        seconds = self._total_seconds
        return self._total_samples / seconds if seconds > 0 else 0.0

    def summary(self):
        """samples_per_sec and step_ms (the median) over the steps after the first
        (the only one, in a run of one step); first_step_seconds."""
        if not self._seconds:
            return {"samples_per_sec": 0.0, "step_ms": None, "first_step_seconds": None}
        first = 1 if len(self._seconds) > 1 else 0
        seconds, samples = self._seconds[first:], self._samples[first:]
        total = sum(seconds)
        return {"samples_per_sec": sum(samples) / total if total > 0 else 0.0,
                "step_ms": 1000.0 * statistics.median(seconds),
                "first_step_seconds": self._seconds[0]}
