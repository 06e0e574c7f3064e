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
import signal
from pathlib import Path

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


@pytest.mark.parametrize("point", ["checkpoint-renamed", "state-temporary"])
def test_a_kill_in_the_first_write_after_its_rename_resumes_from_that_checkpoint(
        run, straight, tmp_path, point):
    """Killed after the first checkpoint got its name but before the state file
    listed it (issue 32, item 5): the directory used to be wedged, --resume
    refused (no state file) and so did a new run (a model-*.npz is there).
    --resume now finds the file and loses none of its steps; a new run is
    still refused, pointing at --resume, so nothing is overwritten."""
    directory = tmp_path / "ck"
    assert run.once(directory, InWrite(point, 1)).returncode == -signal.SIGKILL
    assert [path.name for path in directory.glob("model-*.npz")] == ["model-4.npz"]
    assert not (directory / "checkpoint").exists()
    fresh = run.once(directory, resume=False)
    assert fresh.returncode == 2 and "add --resume to continue that run" in fresh.stderr
    # a run from step 0 would stop at step 3; one from model-4 never meets it
    resumed = run.once(directory, AtStep(3, "SIGTERM"), resume=True)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(directory, straight)


def test_a_kill_in_the_first_write_before_its_rename_leaves_a_new_start(run, straight,
                                                                        tmp_path):
    """Killed before the first checkpoint got its name: there is nothing to
    resume (--resume says so in one line) and a new run starts over it."""
    directory = tmp_path / "ck"
    died = run.once(directory, InWrite("checkpoint-temporary", 1))
    assert died.returncode == -signal.SIGKILL
    assert not list(directory.glob("model-*.npz")) and list(directory.glob(".model-4.npz.*"))
    refused = run.once(directory, resume=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert run.once(directory).returncode == 0
    assert_same_run(directory, straight)


def test_a_kill_after_the_final_checkpoint_loses_no_summary(run, straight, tmp_path):
    """Killed after the final checkpoint, before --json-out was written (issue
    32, item 6): the summary used to be lost for good, --resume saying only
    'nothing to do'. The final checkpoint holds the summary; --resume of the
    finished run writes it to --json-out and removes the killed run's lock."""
    directory = tmp_path / "ck"
    assert run.once(directory, InWrite("state-renamed", None)).returncode == -signal.SIGKILL
    assert (directory / "model-30.npz").exists() and not Path(f"{directory}.json").exists()
    again = run.once(directory)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (
        f"towerflow: the run in {directory} already reached its end (step 30 of 30); "
        f"nothing to do but write its summary, saved in model-30, to {directory}.json")
    assert_same_run(directory, straight)            # and no .lock left
