"""What stops a training run and when it writes checkpoints: SIGINT/SIGTERM
(finish the step, checkpoint, stop; a second signal stops at once), a stop
agreed by every MPI rank, and the checkpoint clock (every N steps, every N
seconds, or at each epoch's end). Used by towerflow/training.py::

    with StopSignals() as signals:
        for step in ...:
            if agreed_stop(signals, strategy):
                break
"""

import os
import signal
import threading
import time

import numpy as np

# A hidden test hook: "STEP:SIGNAL[:RANK]" (e.g. "7:SIGTERM") makes the process
# (only MPI rank RANK, if given) send itself SIGNAL after global step STEP, so
# tests interrupt at a known step through the real handler.
SELF_SIGNAL_ENV = "TOWERFLOW_TEST_SIGNAL_AFTER_STEP"
# Set by `towerflow launch`: a file whose appearance asks the ranks to stop
# (the launcher creates it when it receives SIGINT or SIGTERM).
STOP_FILE_ENV = "TOWERFLOW_STOP_FILE"
_HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """Training stopped on a signal after step ``step`` (in epoch ``epoch``,
    counted from 1); ``checkpoint`` is the file written then (None without a
    checkpoint directory). ``exit_code``: 128 + the signal's number."""

    def __init__(self, signum, step, epoch, checkpoint):
        self.signum, self.step, self.epoch, self.checkpoint = signum, step, epoch, checkpoint
        super().__init__(f"interrupted at step {step} (epoch {epoch})")

    @property
    def exit_code(self):
        return 128 + self.signum


class StopNow(BaseException):
    """A second signal: stop at once, without finishing the step."""

    def __init__(self, signum):
        self.signum = signum
        super().__init__(f"stopped at once by a second {signal.Signals(signum).name}")


class StopSignals:
    """Catches SIGINT and SIGTERM while active (main thread only; elsewhere
    it catches nothing; one the process ignores stays ignored): the first is
    recorded in ``requested``, the second raises StopNow. The previous
    handlers come back on exit.

    >>> with StopSignals() as signals:
    ...     train_one_step()
    ...     if signals.requested: save_and_stop()
    """

    def __init__(self):
        self.requested = 0
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            # NOTE: a signal the process inherited as ignored (nohup, or `cmd &` in a
            # non-interactive shell ignoring SIGINT) stays ignored: the user chose that
            self._previous = {sig: signal.signal(sig, self._handle) for sig in _HANDLED
                              if signal.getsignal(sig) is not signal.SIG_IGN}
        return self

    def __exit__(self, *exc_info):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum, frame):
        if self.requested:
            raise StopNow(signum)
        self.requested = signum

    def local_request(self):
        """The signal asking this process to stop (0: none): a caught one, or
        SIGTERM when the launcher's stop file exists."""
        if self.requested:
            return self.requested
        stop_file = os.environ.get(STOP_FILE_ENV)
        if stop_file and os.path.exists(stop_file):
            self.requested = _launcher_signal(stop_file)
        return self.requested


def _launcher_signal(stop_file):
    try:
        with open(stop_file) as source:
            return int(source.read().strip() or signal.SIGTERM)
    except (OSError, ValueError):
        return int(signal.SIGTERM)


def agreed_stop(signals, strategy):
    """The signal every rank stops on after this step (0: go on). With several
    MPI ranks this is a collective: all ranks call it after every step, so
    they all stop after the same one (SIGTERM wins over SIGINT)."""
    local = signals.local_request()
    if strategy.num_ranks == 1:
        return local
    from .parallel import mpi
    votes = np.array([local == signal.SIGINT, local == signal.SIGTERM], np.int64)
    votes = mpi.world().all_reduce(votes, "the agreement to stop", strategy.timeout)
    return int(signal.SIGTERM) if votes[1] else int(signal.SIGINT) if votes[0] else 0


def self_signal_hook():
    """(step, signum) of the test hook, or None when it is not set."""
    value = os.environ.get(SELF_SIGNAL_ENV)
    if not value:
        return None
    step, name, *rank = value.split(":")
    if rank:
        from .parallel import mpi
        if int(rank[0]) != mpi.rank_from_environment():
            return None
    return int(step), int(getattr(signal, name))


def maybe_signal_self(hook, step):
    if hook is not None and hook[0] == step:
        os.kill(os.getpid(), hook[1])


class CheckpointClock:
    """When to write a checkpoint: every ``every_steps`` steps and/or every
    ``every_secs`` seconds; with neither, at the end of each epoch. The end
    of the run and an interrupt always write one (training.py does that).

    >>> clock = CheckpointClock(every_steps=100)
    >>> clock.due(step=200, epoch_ended=False)
    True
    """

    def __init__(self, every_steps=None, every_secs=None):
        self.every_steps, self.every_secs = every_steps, every_secs
        self._last_time = time.monotonic()

    def due(self, step, epoch_ended):
        if not self.every_steps and not self.every_secs:
            return epoch_ended
        if self.every_steps and step % self.every_steps == 0:
            return True
        return bool(self.every_secs) and time.monotonic() - self._last_time >= self.every_secs

    def saved(self):
        self._last_time = time.monotonic()
