"""Fault injection (issue 32): `towerflow train` killed at random points and
at every fault point of its first and final checkpoint writes, resumed as a
user would (--resume, or a new start when nothing was written), ends bit for
bit where the run never killed ends: summary, every checkpoint both kept,
training curve (the harness: tests/fault_injection.py).

The random trials are seeded: TOWERFLOW_FAULT_SEED (default 32) and
TOWERFLOW_FAULT_TRIALS (default 3, two kills each) run more of them. The kill
from outside after a random delay lands wherever the run is then, so a
failure prints each process's kill, the step it started from and its exit."""

import os
import random

import pytest
from fault_injection import AfterSeconds, AtStep, InWrite, Run, assert_same_run

from towerflow.train.checkpoint_format import KILL_POINTS

pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
# 30 steps over two epochs (23 a epoch), a checkpoint every 4 steps and at the
# end: 8 checkpoints, mid-epoch ones and the final one; curve rows every 3.
OPTIONS = ["digits", "--cpu-towers", "2", "--batch-size", "64", "--seed", "3",
           "--steps", "30", "--checkpoint-every", "4", "--log-every", "3", "--quiet"]
SEED = int(os.environ.get("TOWERFLOW_FAULT_SEED", "32"))
TRIALS = int(os.environ.get("TOWERFLOW_FAULT_TRIALS", "3"))


@pytest.fixture(scope="module")
def run():
    return Run(OPTIONS)


@pytest.fixture(scope="module")
def straight(run, tmp_path_factory):
    return run.straight(tmp_path_factory.mktemp("straight") / "ck")


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_kill_in_the_first_then_the_final_checkpoint_write_loses_nothing(
        run, straight, tmp_path, point):
    trial = run.trial(tmp_path / "ck", [InWrite(point, 1), InWrite(point, None)])
    assert_same_run(trial, straight)


@pytest.mark.parametrize("index", range(TRIALS))
def test_kills_at_random_points_then_resume_is_the_straight_run(run, straight, tmp_path,
                                                                index):
    rng = random.Random(f"{SEED}-{index}")
    kills = [AfterSeconds(rng.uniform(0.3, 0.9) * run.wall), random_kill(rng)]
    trial = run.trial(tmp_path / "ck", kills)
    assert_same_run(trial, straight)


def random_kill(rng):
    """A SIGKILL or SIGTERM 1 to 12 steps after the process's first, or a
    SIGKILL at a random fault point of one of its first 3 writes. (Each trial
    first kills from outside, after a random share of the straight run's time,
    its start-up included.)"""
    kind = rng.choice(["SIGKILL", "SIGTERM", "write"])
    if kind == "write":
        return InWrite(rng.choice(KILL_POINTS), rng.randint(1, 3))
    return AtStep(rng.randint(1, 12), kind, relative=True)


def test_the_comparison_sees_a_run_that_differs(run, straight, tmp_path):
    other = Run([word if word != "3" else "4" for word in OPTIONS])     # --seed 4
    with pytest.raises(AssertionError):
        assert_same_run(other.straight(tmp_path / "ck"), straight)
