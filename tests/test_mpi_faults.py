"""Ranks that disagree, under real MPI (``towerflow launch -n 2``): one error
naming the difference, never MPI_ERR_TRUNCATE, a segfault or a hang
(issue 14). A rank 1 with its own options runs through tests/mpi_programs/
rank_options.sh."""

import gc
import os
import re
import signal
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

import towerflow as tf

pytest.importorskip("mpi4py", reason="multi-process tests need pip install 'towerflow[mpi]'")
PROGRAMS = Path(__file__).parent / "mpi_programs"
CRASH_SIGNS = ("MPI_ERR", "double free", "Segmentation", "corrupted", "Traceback")


def launch(*command, env=None, timeout=120):
    line = [sys.executable, "-m", "towerflow", "launch", "-n", "2", "--timeout", "20", "--",
            *command]
    return subprocess.run(line, capture_output=True, text=True, timeout=timeout, env=env,
                           check=False)


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
    """Launch late_start.py; the launcher's stderr once rank 0 reported (None if it
    never did: it hung) and the launcher's status."""
    command = [sys.executable, "-m", "towerflow", "launch", "-n", "2", "--timeout", "5",
               "--", sys.executable, str(PROGRAMS / "late_start.py"), str(tmp_path),
               "--rank-1", what]
    launcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    lines, reported = [], threading.Event()
    threading.Thread(target=_collect, args=(launcher.stderr, lines, reported),
                     daemon=True).start()
    if not reported.wait(timeout=60):
        os.killpg(launcher.pid, signal.SIGKILL)
    # a stopped rank outlives rank 0 and keeps mpiexec waiting: end it
    stopped = tmp_path / "stopped.pid"
    if stopped.exists():
        _kill_quietly(int(stopped.read_text()))
    try:
        status = launcher.wait(timeout=60)
    except subprocess.TimeoutExpired:   # hung: end the launcher, mpiexec and the ranks
        os.killpg(launcher.pid, signal.SIGKILL)
        status = None
    return ("".join(lines) if reported.is_set() else None), status


def _collect(stream, lines, reported):
    for line in stream:
        lines.append(line)
        if "MPI start-up did not complete" in line:
            reported.set()


def _kill_quietly(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("what, state", [("die", r"\(pid \d+\) died"),
                                         ("stop", r"\(pid \d+\) is stopped")])
def test_a_rank_lost_while_mpi_starts_is_named_within_the_timeout(tmp_path, what, state):
    stderr, status = start_with_late_rank_1(tmp_path, what)
    assert stderr is not None, "rank 0 hung in MPI start-up"
    assert status != 0
    assert re.search(r"towerflow: error: MPI start-up did not complete within 5 s on rank 0 "
                     rf"of 2: rank 1 {state} \(TOWERFLOW_COLLECTIVE_TIMEOUT sets the limit\)",
                     stderr), stderr
