"""Fault injection for `towerflow train` (issue 32): kill a run at random points,
inside its checkpoint writes too, resume it as a user would, and compare what
it ends with, bit for bit, with the run never killed: the JSON summary (but its
timings), every checkpoint both runs kept (variables and extra state), and the
training curve. Used by tests/test_fault_injection.py; a launcher variant
passes its command as ``prefix`` (the whole process group is killed)::

    run = Run(["digits", "--cpu-towers", "2", "--steps", "30"])
    straight = run.straight(tmp / "straight")
    trial = run.trial(tmp / "trial", [AtStep(7), InWrite("checkpoint-renamed")])
    assert_same_run(trial, straight)

Kills: ``AtStep(step, signal)`` (the run signals itself after that step, through
run_control's test hook), ``InWrite(point, nth)`` (SIGKILL at a fault point of
the nth checkpoint or state-file write, checkpoint_format's hook; ``nth=None``:
the process's final write), ``AfterSeconds(seconds)`` (SIGKILL from outside).
After each kill the next process resumes with --resume when a checkpoint was
written, else starts again; the last runs to the end.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from towerflow import run_control
from towerflow.train import checkpoint_format

ROOT = str(Path(__file__).resolve().parents[1])
TIMINGS = {"samples_per_sec", "step_ms", "first_step_seconds", "eval_seconds", "wall_seconds"}
# What a process of a trial may end with: done, killed, or stopped by a signal.
ENDINGS = {0, -signal.SIGKILL, 128 + signal.SIGTERM, 128 + signal.SIGINT}


class AtStep:
    """The run sends itself ``signal_name`` after global step ``step`` (with
    ``relative``: ``step`` steps after the step the process starts from; only
    MPI rank ``rank``, if given)."""

    def __init__(self, step, signal_name="SIGKILL", relative=False, rank=None):
        self.step, self.signal_name, self.relative, self.rank = step, signal_name, relative, rank

    def environment(self, run, start):
        step = start + self.step if self.relative else self.step
        rank = "" if self.rank is None else f":{self.rank}"
        return {run_control.SELF_SIGNAL_ENV: f"{step}:{self.signal_name}{rank}"}

    def __repr__(self):
        return f"AtStep({self.step}, {self.signal_name!r}, relative={self.relative})"


class InWrite:
    """SIGKILL at ``point`` (checkpoint_format.KILL_POINTS) of the process's
    ``nth`` write of that kind; None: of its last (the run's final checkpoint)."""

    def __init__(self, point, nth=1):
        self.point, self.nth = point, nth

    def environment(self, run, start):
        nth = self.nth or len(run.writes_after(start))
        return {checkpoint_format.KILL_AT_ENV: f"{self.point}@{nth}"}

    def __repr__(self):
        return f"InWrite({self.point!r}, {self.nth})"


class AfterSeconds:
    """SIGKILL to the process group ``seconds`` after it starts."""

    def __init__(self, seconds):
        self.seconds = seconds

    def environment(self, run, start):
        return {}

    def __repr__(self):
        return f"AfterSeconds({self.seconds:.2f})"


class Run:
    """How to start `towerflow train` with ``options`` (the recipe first; they
    must hold --steps STEPS and --checkpoint-every N, which the trials' kill
    points count on) under ``prefix`` (e.g. a launcher's words)."""

    endings = ENDINGS   # the exit statuses a killed process may have

    def __init__(self, options, prefix=(), timeout=300):
        self.options, self.prefix, self.timeout = list(options), list(prefix), timeout
        self.total = int(_value_of(self.options, "--steps"))
        self.every = int(_value_of(self.options, "--checkpoint-every"))
        self.wall = None            # the straight run's seconds, for AfterSeconds

    def writes_after(self, start):
        """The steps a process resumed at ``start`` writes checkpoints at."""
        return [step for step in range(start + 1, self.total) if step % self.every == 0] + \
            [self.total]

    def straight(self, directory):
        """The run never killed, keeping every checkpoint; its directory."""
        began = time.monotonic()
        ended = self._start(directory, ["--keep-checkpoints", "1000"], {}, None)
        self.wall = time.monotonic() - began
        assert ended.returncode == 0, ended.stderr
        return Path(directory)

    def trial(self, directory, kills):
        """Kill a run with each of ``kills`` in turn (each process resuming the
        last), then run it to its end; its directory."""
        log = []
        for kill in [*kills, None]:
            start = newest_step(directory)
            ended = self.once(directory, kill)
            log.append(f"{kill!r} from step {start}: exit {ended.returncode}")
            print(f"{directory}: {log[-1]}")            # pytest shows it on a failure
            assert ended.returncode in self.endings and "Traceback" not in ended.stderr, \
                "\n".join(log) + "\n" + ended.stderr
        assert ended.returncode == 0, "\n".join(log) + "\n" + ended.stderr
        return Path(directory)

    def once(self, directory, kill=None, resume=None):
        """One process, killed by ``kill`` (None: not killed); with ``--resume``
        when ``resume`` or (None) when a checkpoint was written, else a new start."""
        start = newest_step(directory)
        resume = bool(start) if resume is None else resume
        env = kill.environment(self, start) if kill else {}
        delay = kill.seconds if isinstance(kill, AfterSeconds) else None
        extra = ["--resume"] if resume else []
        return self._start(directory, [*extra, "--keep-checkpoints", "2"], env, delay)

    def _start(self, directory, extra, env, delay):
        """Run one process (SIGKILLed after ``delay`` seconds, if given)."""
        line = [*self.prefix, sys.executable, "-m", "towerflow", "train",
                *self._options(extra), "--checkpoint-dir", str(directory),
                "--json-out", f"{directory}.json"]
        process = subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=_environment(env), start_new_session=True)
        try:
            out, err = process.communicate(timeout=delay or self.timeout)
        except subprocess.TimeoutExpired:
            if delay is None:
                raise
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate(timeout=self.timeout)
        return subprocess.CompletedProcess(line, process.returncode, out, err)

    def _options(self, extra):
        """The options of a fresh start, or (``--resume`` in ``extra``) those a
        resume takes again: the rest comes from the checkpoint."""
        if "--resume" not in extra:
            return [*self.options, *extra]
        again = [word for flag in _RESUMED if flag in self.options
                 for word in (flag, _value_of(self.options, flag))]
        quiet = ["--quiet"] if "--quiet" in self.options else []
        return [self.options[0], *again, *quiet, *extra]


def newest_step(directory):
    """The step of the newest model-<step>.npz in ``directory`` (0: none)."""
    steps = [int(path.stem.split("-")[1]) for path in Path(directory).glob("model-*.npz")]
    return max(steps, default=0)


def assert_same_run(got, want):
    """The trial ``got`` ended bit for bit where the straight run ``want`` did."""
    assert _figures(got) == _figures(want)
    assert newest_step(got) == newest_step(want)
    # the straight run kept all its checkpoints; a SIGTERM wrote one at its own step
    kept = [path for path in Path(got).glob("model-*.npz") if (Path(want) / path.name).exists()]
    for path in kept:
        _assert_same_checkpoint(path, Path(want) / path.name)
    curve = "training_curve.csv"
    assert (Path(got) / curve).read_bytes() == (Path(want) / curve).read_bytes()
    leftovers = [path.name for path in Path(got).iterdir() if path.name.startswith(".")]
    assert not leftovers, f"a finished run left {leftovers}"


def _figures(directory):
    summary = json.loads(Path(f"{directory}.json").read_text())
    return {key: value for key, value in summary.items() if key not in TIMINGS}


def _assert_same_checkpoint(path, straight_path):
    got = checkpoint_format.read_checkpoint(str(path))
    want = checkpoint_format.read_checkpoint(str(straight_path))
    assert got.global_step == want.global_step and sorted(got.variables) == \
        sorted(want.variables), path.name
    for name, value in want.variables.items():
        mine = got.variables[name]
        assert (mine.dtype, mine.shape) == (value.dtype, value.shape), f"{path.name}: {name}"
        assert mine.tobytes() == value.tobytes(), f"{path.name}: {name} differs"
    assert _comparable(got.extra_state) == _comparable(want.extra_state), path.name


def _comparable(extra_state):
    """``extra_state`` without the summary's timings, arrays as bytes."""
    state = dict(extra_state)
    if "summary" in state:
        state["summary"] = {key: value for key, value in state["summary"].items()
                            if key not in TIMINGS}
    return json.loads(json.dumps(state, default=lambda array: np.asarray(array).tolist()))


def _value_of(options, flag):
    return options[options.index(flag) + 1]


# What --resume takes again (the rest comes from the checkpoint).
_RESUMED = ("--cpu-towers", "--devices", "--towers", "--checkpoint-every", "--log-every")


def _environment(extra):
    env = dict(os.environ, PYTHONPATH=ROOT)
    for name in (run_control.SELF_SIGNAL_ENV, checkpoint_format.KILL_AT_ENV):
        env.pop(name, None)
    return dict(env, **extra)
