"""Fault injection under `towerflow launch -n 2` (issue 32, item 4): a
`towerflow train` run on two ranks is killed at seeded random points, resumed
as a user would (--resume once a checkpoint is there), and ends on the
weights of the run never killed, bit for bit. Each trial kills twice: once
inside a checkpoint write (the launcher by SIGKILL, rank 0 frozen at that
point until the job is ended; or rank 0 itself), once at a random time (one
rank after a random step; or the launcher by SIGKILL from outside). After
every process, nothing of its job may be left (tests/launched_jobs.py).

TOWERFLOW_FAULT_SEED (default 32) and TOWERFLOW_LAUNCH_FAULT_TRIALS (default
2) run other or more trials; a failure prints the kills it made."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from launched_jobs import kill_marked, launch_marked, left_after

from towerflow import run_control
from towerflow.train.checkpoint_format import latest_checkpoint, read_checkpoint

pytest.importorskip("mpi4py", reason="multi-process tests need pip install 'towerflow[mpi]'")
pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
KILL_IN_WRITE = Path(__file__).parent / "mpi_programs" / "kill_in_write.py"
TOTAL, EVERY = 30, 4        # 23 steps an epoch: checkpoints mid-epoch, in epoch 2, at 30
OPTIONS = ["digits", "--cpu-towers", "1", "--batch-size", "64", "--seed", "3", "--steps",
           str(TOTAL), "--checkpoint-every", str(EVERY), "--quiet"]
WRITE_POINTS = ("checkpoint-temporary", "checkpoint-renamed", "state-temporary",
                "state-renamed")
COLLECTIVE_TIMEOUT = 10     # a killed rank's peer gives up after this; start-up too
SEED = int(os.environ.get("TOWERFLOW_FAULT_SEED", "32"))
TRIALS = int(os.environ.get("TOWERFLOW_LAUNCH_FAULT_TRIALS", "2"))


def writes_after(start):
    """How many checkpoints a process resumed at step ``start`` writes."""
    return len([step for step in range(start + 1, TOTAL) if step % EVERY == 0]) + 1


class NoKill:
    """A process left to run to its end; the base of the kills below."""

    def program(self, start):
        return [sys.executable, "-m", "towerflow"]

    def environment(self, start):
        return {}

    def from_outside(self, launcher, straight_seconds):
        pass

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(map(_shown, vars(self).values()))})"


def _shown(value):
    return f"{value:.2f}" if isinstance(value, float) else repr(value)


class InWrite(NoKill):
    """SIGKILL to ``who`` ('launcher' or 'rank' 0) at ``point`` of a checkpoint
    write, the one ``share`` of the way through the process's writes."""

    def __init__(self, who, point, share):
        self.who, self.point, self.share = who, point, share

    def program(self, start):
        # NOTE: not the first write of a fresh run: a kill there leaves a checkpoint the
        # state file does not list, which --resume on main does not find (issue 32, item 5)
        first = 2 if start == 0 else 1
        nth = first + int(self.share * (writes_after(start) - first + 1))
        return [sys.executable, str(KILL_IN_WRITE), self.who, self.point, str(nth)]


class LauncherAfter(NoKill):
    """SIGKILL to the launcher alone, ``share`` of a straight run's time after
    it starts (start-up included)."""

    def __init__(self, share):
        self.share = share

    def from_outside(self, launcher, straight_seconds):
        try:
            launcher.wait(timeout=self.share * straight_seconds)
        except subprocess.TimeoutExpired:   # running: the kill lands wherever the job is
            launcher.send_signal(signal.SIGKILL)


class RankAtStep(NoKill):
    """Rank ``rank`` SIGKILLs itself after a step ``share`` of the way to the end."""

    def __init__(self, rank, share):
        self.rank, self.share = rank, share

    def environment(self, start):
        step = start + 1 + int(self.share * (TOTAL - start - 1))
        return {run_control.SELF_SIGNAL_ENV: f"{step}:SIGKILL:{self.rank}"}


def kills_of_trial(index):
    """A kill inside a checkpoint write, then one at a random time. The kinds
    take turns with the trial's index, so that two trials make all four; the
    point, the write, the step, the time and the rank come from the seed."""
    rng = random.Random(f"{SEED}-{index}")
    in_write = InWrite(("launcher", "rank")[index % 2], rng.choice(WRITE_POINTS), rng.random())
    if index % 2:
        return [in_write, LauncherAfter(rng.uniform(0.3, 1.0))]
    return [in_write, RankAtStep(rng.choice([0, 1]), rng.random())]


def run_once(directory, kill, straight_seconds):
    """One `towerflow launch -n 2 -- towerflow train` in ``directory``, ended by
    ``kill`` or not; (its exit status, its output, the job's processes left)."""
    start = checkpointed_step(directory)
    # as a user would: the error of a new run in a directory with checkpoints says so
    resume = ["--resume"] if any(directory.glob("model-*.npz")) else []
    command = [*kill.program(start), "train", *OPTIONS, *resume,
               "--checkpoint-dir", str(directory)]
    mark, log = f"{directory}@{time.monotonic_ns()}", directory.with_suffix(".log")
    env = dict(os.environ, **kill.environment(start))
    launcher = launch_marked(mark, command, log, timeout=COLLECTIVE_TIMEOUT, env=env)
    try:
        kill.from_outside(launcher, straight_seconds)
        status = launcher.wait(timeout=240)
        # NOTE: well within COLLECTIVE_TIMEOUT: orphaned ranks end by themselves once
        # their peer is found missing, which must not pass for the job ending with them
        return status, log.read_text(), left_after(mark, 5)
    finally:
        launcher.kill()
        kill_marked(mark)


def checkpointed_step(directory):
    """The global step of the newest checkpoint the state file lists; 0 if none."""
    newest = latest_checkpoint(str(directory)) if directory.exists() else None
    return read_checkpoint(newest, with_variables=False).global_step if newest else 0


def final_weights(directory):
    checkpoint = read_checkpoint(latest_checkpoint(str(directory)))
    return checkpoint.global_step, checkpoint.variables


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """(the run never killed: global step and variables, its seconds)."""
    directory = tmp_path_factory.mktemp("straight") / "ck"
    began = time.monotonic()
    status, output, left = run_once(directory, NoKill(), None)
    assert status == 0 and left == [], output
    return final_weights(directory), time.monotonic() - began


@pytest.mark.parametrize("index", range(TRIALS))
def test_kills_under_launch_then_resume_end_on_the_straight_runs_weights(straight, tmp_path,
                                                                         index):
    (want_step, want), seconds = straight
    directory, history = tmp_path / "ck", []
    for kill in kills_of_trial(index):
        if checkpointed_step(directory) < TOTAL:    # a kill late in a write may end the run
            run_logged(directory, kill, seconds, history)
    status, output = run_logged(directory, NoKill(), seconds, history)
    assert status == 0 and "Traceback" not in output, f"{history}\n{output}"
    got_step, got = final_weights(directory)
    assert got_step == want_step == TOTAL
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=f"{name} after {history}")


def run_logged(directory, kill, seconds, history):
    """run_once, its kill and exit status added to ``history``; checks that no
    process of the job is left. (exit status, output)."""
    history.append(f"{kill!r} from step {checkpointed_step(directory)}")
    status, output, left = run_once(directory, kill, seconds)
    history[-1] += f": exit {status}"
    print(history[-1])                              # pytest shows it on a failure
    assert left == [], f"{history}: processes of the job are left: {left}\n{output}"
    return status, output
