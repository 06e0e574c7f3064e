"""Ranks that disagree, under real MPI (``towerflow launch -n 2``): one error
naming the difference, never MPI_ERR_TRUNCATE, a segfault or a hang
(issue 14). A rank 1 with its own options runs through tests/mpi_programs/
rank_options.sh. A rank lost while MPI starts, and a killed launcher, end
the whole job: no process of it is left (issue 32, item 4)."""

import gc
import os
import re
import subprocess
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
from launched_jobs import (
    MPI_MISSING,
    kill_marked,
    launch_line,
    launch_marked,
    left_after,
)

import towerflow as tf

pytest.importorskip("mpi4py", reason=MPI_MISSING)
PROGRAMS = Path(__file__).parent / "mpi_programs"
CRASH_SIGNS = ("MPI_ERR", "double free", "Segmentation", "corrupted", "Traceback")


def launch(*command, env=None, timeout=120):
    return subprocess.run(launch_line(command, "--timeout", "20"), capture_output=True,
                          text=True, timeout=timeout, env=env, check=False)


def train_with_rank_1_options(*rank_1_options):
    env = dict(os.environ, TOWERFLOW_RANK_1_OPTIONS=" ".join(rank_1_options))
    return launch("sh", str(PROGRAMS / "rank_options.sh"), sys.executable, "-m", "towerflow",
                  "train", "digits", "--cpu-towers", "1", "--all-reduce", "mpi", "--steps",
                  "3", "--quiet", env=env)


@pytest.mark.parametrize("rank_1_options, message", [
    (["--batch-size", "32"], "--batch-size: rank 0 has 64 but rank 1 has 32"),
    (["--steps", "6"], "--steps: rank 0 has 3 but rank 1 has 6"),
    (["--seed", "1"], "--seed: rank 0 has 0 but rank 1 has 1"),
    (["--precision", "mixed_float16"],
     "--precision: rank 0 has 'float32' but rank 1 has 'mixed_float16'"),
], ids=["batch-size", "steps", "seed", "precision"])
def test_ranks_with_different_options_stop_at_start_up_naming_the_first(rank_1_options,
                                                                        message):
    done = train_with_rank_1_options(*rank_1_options)
    lines = [line for line in done.stderr.splitlines() if line.startswith("towerflow")]
    assert done.returncode == 2, done.stdout + done.stderr
    expected = (f"towerflow: error: the ranks disagree on {message} (checked at start-up; "
                "every rank needs the same)")
    assert lines == [expected], done.stderr
    assert not any(sign in done.stderr for sign in CRASH_SIGNS), done.stderr


@pytest.mark.parametrize("attempt", range(3))
def test_ranks_at_different_collectives_get_a_named_error_not_an_mpi_crash(attempt):
    done = launch(sys.executable, str(PROGRAMS / "out_of_step.py"))
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert ("rank 0: all-reduce 'rank 0': rank 1 is at collective number 2, an all-reduce "
            "of 1 float32, but rank 0 is at number 2, an all-reduce of 5 float32") in output
    assert "rank 1: all-reduce 'rank 1': rank 0 is at collective number 2" in output
    assert not any(sign in output for sign in CRASH_SIGNS), output


class _Pending:
    def Test(self):
        return False


class _ArrivedPeerStuckCollective:
    """A 2-rank world whose peer arrives (echoing our token) but never completes
    the collective; records the buffers handed to MPI."""

    def __init__(self):
        self.handed_to_mpi = []

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 2

    def Isend(self, buffer, dest, tag):
        self.token = buffer
        return _Done()

    def Irecv(self, buffer, source, tag):
        buffer[:] = self.token
        return _Done()

    def Iallreduce(self, send, receive):
        self.handed_to_mpi += [weakref.ref(send), weakref.ref(receive)]
        return _Pending()


class _Done:
    def Test(self):
        return True


def test_buffers_of_a_timed_out_collective_outlive_it(monkeypatch):
    # MPI may still write into them after the timeout: freeing them corrupts the heap.
    from towerflow.parallel import mpi
    monkeypatch.setattr(mpi, "_exit_without_finalize", lambda: None)
    monkeypatch.setattr(mpi, "_abandoned", [])
    comm = _ArrivedPeerStuckCollective()
    with pytest.raises(tf.errors.UnavailableError, match="a peer rank did not join"):
        mpi.MpiWorld(comm).all_reduce(np.ones(4, np.float32) * 2, "all-reduce 'x'", 0.1)
    gc.collect()
    assert len(comm.handed_to_mpi) == 2
    assert all(reference() is not None for reference in comm.handed_to_mpi)


def start_with_late_rank_1(tmp_path, what):
    """Launch late_start.py; (the launcher's stderr, its status, the seconds it
    took, the job's processes left 5 s later); status None if it hung."""
    started = time.monotonic()
    launcher = launch_marked(str(tmp_path), [sys.executable, str(PROGRAMS / "late_start.py"),
                                             str(tmp_path), "--rank-1", what],
                             tmp_path / "launcher.err", timeout=5)
    try:
        status = launcher.wait(timeout=60)
    except subprocess.TimeoutExpired:   # hung
        status = None
    try:
        left = left_after(str(tmp_path), 5)
        return (tmp_path / "launcher.err").read_text(), status, time.monotonic() - started, left
    finally:
        launcher.kill()
        kill_marked(str(tmp_path))


@pytest.mark.parametrize("what, state", [("die", r"\(pid \d+\) died"),
                                         ("stop", r"\(pid \d+\) is stopped"),
                                         ("stop-in-init", r"\(pid \d+\) is stopped")])
def test_a_rank_lost_while_mpi_starts_is_named_and_ends_the_job(tmp_path, what, state):
    stderr, status, seconds, left = start_with_late_rank_1(tmp_path, what)
    assert status is not None, f"the launcher hung: {stderr}"
    assert status != 0
    assert seconds < 40     # the 5 s start-up deadline, the ranks' imports, the end
    lines = [line for line in stderr.splitlines() if line.startswith("towerflow")]
    assert len(lines) == 1, stderr
    # rank 0 names rank 1; or rank 1 names itself, when its watchdog ran out of time first
    assert re.fullmatch(r"towerflow: error: MPI start-up did not complete within 5 s on rank "
                        rf"[01] of 2: rank 1 {state} \(TOWERFLOW_COLLECTIVE_TIMEOUT sets the "
                        r"limit\)", lines[0]), stderr
    assert left == [], "processes of the job are left (mpiexec, a rank, the reaper)"


def wait_for_files(paths, seconds):
    deadline = time.monotonic() + seconds
    while not all(path.exists() for path in paths) and time.monotonic() < deadline:
        time.sleep(0.1)
    return all(path.exists() for path in paths)


@pytest.mark.parametrize("rank_1", [[], ["--stop-rank-1"]], ids=["running", "rank-1-stopped"])
def test_killing_the_launcher_ends_mpiexec_and_every_rank(tmp_path, rank_1):
    launcher = launch_marked(str(tmp_path), [sys.executable, str(PROGRAMS / "linger.py"),
                                             str(tmp_path), *rank_1], tmp_path / "launcher.err")
    try:
        started = [tmp_path / "started-0", tmp_path / "started-1"]
        assert wait_for_files(started, 60), (tmp_path / "launcher.err").read_text()
        launcher.kill()     # SIGKILL: the launcher can do nothing about it itself
        launcher.wait(timeout=10)
        assert left_after(str(tmp_path), 10) == [], "mpiexec or a rank outlived the launcher"
    finally:
        launcher.kill()
        kill_marked(str(tmp_path))


ENDED_BY_THE_LAUNCHER = " and the other ranks did not end within 12 s: ending them"


@pytest.mark.parametrize("rank_1, ending", [
    ("exit", f"(: the job is incomplete|{ENDED_BY_THE_LAUNCHER})"),
    ("wait", ENDED_BY_THE_LAUNCHER)], ids=["rank-1-exits", "rank-1-waits"])
def test_a_rank_killed_after_the_last_collective_fails_the_job_and_ends_it(tmp_path, rank_1,
                                                                           ending):
    # mpiexec --enable-recovery exits 0 when a rank is killed, and the others may wait
    # for it in MPI_Finalize for ever: the launcher gives them 2 + 10 s, then ends them
    mark, started = str(tmp_path), time.monotonic()
    launcher = launch_marked(mark, [sys.executable, str(PROGRAMS / "rank_0_killed.py"),
                                    "--rank-1", rank_1], tmp_path / "launcher.err", timeout=2)
    try:
        status = launcher.wait(timeout=90)
        seconds, left = time.monotonic() - started, left_after(mark, 5)
    finally:
        launcher.kill()
        kill_marked(mark)
    output = (tmp_path / "launcher.err").read_text()
    lines = [line for line in output.splitlines() if line.startswith("towerflow")]
    assert status == 1 and len(lines) == 1, output
    assert re.fullmatch(r"towerflow: error: rank 0 \(pid \d+\) ended without exiting \(killed "
                        rf"by a signal\?\){ending}", lines[0]), output
    assert seconds < 60 and left == [], (seconds, left)
