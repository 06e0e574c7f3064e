"""Fault injection under `towerflow launch -n 2` (issue 32, item 4): the
harness of tests/fault_injection.py, each process a launch of two ranks.
Each trial kills twice, then resumes to the end, and must end bit for bit
where the straight launch ends (summary, every checkpoint both kept, curve):

- once inside a checkpoint write, at a random point of a random write: the
  launcher by SIGKILL (rank 0 frozen at that point until the job is ended),
  or rank 0, the writer, itself;
- once at a random time: SIGKILL to the launcher alone from outside, after a
  random share of the straight run's time; or one rank after a random step.

The kinds take turns with the trial's index (two trials make all four);
points, writes, steps, delays and ranks come from TOWERFLOW_FAULT_SEED
(default 32), and TOWERFLOW_LAUNCH_FAULT_TRIALS (default 2) runs more. After
every process nothing of its job may be left (tests/launched_jobs.py)."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_injection import (
    ENDINGS,
    AfterSeconds,
    AtStep,
    InWrite,
    Run,
    _environment,
    assert_same_run,
)
from launched_jobs import kill_marked, launch_marked, left_after

from towerflow.train.checkpoint_format import KILL_POINTS

pytest.importorskip("mpi4py", reason="multi-process tests need pip install 'towerflow[mpi]'")
pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
RANK_PROGRAM = Path(__file__).parent / "mpi_programs" / "kill_in_write.py"
# 30 steps over two epochs, a checkpoint every 4 steps and at the end, curve rows every 3
OPTIONS = ["digits", "--cpu-towers", "1", "--batch-size", "64", "--seed", "3",
           "--steps", "30", "--checkpoint-every", "4", "--log-every", "3", "--quiet"]
COLLECTIVE_TIMEOUT = 10     # a killed rank's peer gives up after this; start-up too
SEED = int(os.environ.get("TOWERFLOW_FAULT_SEED", "32"))
TRIALS = int(os.environ.get("TOWERFLOW_LAUNCH_FAULT_TRIALS", "2"))


class LaunchedRun(Run):
    """Each process is `towerflow launch -n 2 -- python kill_in_write.py train
    ...`; a kill from outside (AfterSeconds) SIGKILLs the launcher alone, and
    no process of the job may be left 5 s after the launcher ended."""

    # a rank killed: the other finds it missing and exits 1, or the launcher says it
    endings = ENDINGS | {1}

    def _start(self, directory, extra, env, delay):
        line = [sys.executable, str(RANK_PROGRAM), "train", *self._options(extra),
                "--checkpoint-dir", str(directory), "--json-out", f"{directory}.json"]
        mark = f"{directory}@{time.monotonic_ns()}"
        log = Path(f"{directory}-{mark.rsplit('@', 1)[1]}.log")     # one a process
        launcher = launch_marked(mark, line, log, timeout=COLLECTIVE_TIMEOUT,
                                 env=_environment(env))
        try:
            status = _wait_killing_after(launcher, delay, self.timeout)
            # NOTE: well within COLLECTIVE_TIMEOUT: orphaned ranks end by themselves once
            # they find their peer missing, which must not pass for the job ending with them
            left = left_after(mark, 5)
        finally:
            launcher.kill()
            kill_marked(mark)
        output = log.read_text()
        assert left == [], f"processes of the job are left: {left}\n{output}"
        return subprocess.CompletedProcess(line, status, output, output)


def _wait_killing_after(launcher, delay, timeout):
    """The launcher's exit status; SIGKILLed (it alone) after ``delay`` s if given."""
    try:
        return launcher.wait(timeout=delay or timeout)
    except subprocess.TimeoutExpired:
        if delay is None:
            raise
        launcher.send_signal(signal.SIGKILL)
        return launcher.wait(timeout=timeout)


class LauncherInWrite(InWrite):
    """SIGKILL to the launcher at ``point`` of rank 0's ``nth`` write."""

    def environment(self, run, start):
        return {**super().environment(run, start), "TOWERFLOW_TEST_KILL_LAUNCHER": "1"}

    def __repr__(self):
        return "Launcher" + super().__repr__()


@pytest.fixture(scope="module")
def run():
    return LaunchedRun(OPTIONS, timeout=240)


@pytest.fixture(scope="module")
def straight(run, tmp_path_factory):
    return run.straight(tmp_path_factory.mktemp("straight") / "ck")


@pytest.mark.parametrize("index", range(TRIALS))
def test_kills_under_launch_then_resume_is_the_straight_launch(run, straight, tmp_path,
                                                               index):
    trial = run.trial(tmp_path / "ck", kills_of_trial(index, run))
    assert_same_run(trial, straight)


def kills_of_trial(index, run):
    """A kill inside a checkpoint write (one of the first 3, or the final one),
    then one at a random time; the kinds take turns with ``index``."""
    rng = random.Random(f"{SEED}-{index}")
    in_write = (LauncherInWrite, InWrite)[index % 2]
    point, nth = rng.choice(KILL_POINTS), rng.choice([1, 2, 3, None])
    if index % 2:
        return [in_write(point, nth), AfterSeconds(rng.uniform(0.3, 1.0) * run.wall)]
    return [in_write(point, nth), AtStep(rng.randint(1, run.total - 1), "SIGKILL",
                                         rank=rng.choice([0, 1]))]
