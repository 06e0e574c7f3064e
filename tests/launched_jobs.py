"""Jobs of `towerflow launch -n 2` that a test starts.

A program run on the 2 ranks to its end, its output captured, failing the test
(with that output) where it fails::

    done = run_on_ranks(PROGRAM, tmp_path, "--steps", 3)

And jobs a test must leave nothing of. Each is marked by a variable in the
environment that every process of it inherits (launcher, reaper, mpiexec, ranks,
their watchdogs), so a test can find any of them still there, and kill them at
the end whatever happened::

    launcher = launch_marked(mark, ["python", "t.py"], tmp / "launcher.err")
    try:
        ...
        assert left_after(mark, 10) == []
    finally:
        kill_marked(mark)
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from towerflow import simgpu

JOB_MARK = "TOWERFLOW_TEST_JOB_MARK"
MPI_MISSING = "multi-process tests need pip install 'towerflow[mpi]'"
ROOT = Path(__file__).resolve().parents[1]


def launch_line(command, *options):
    """`towerflow launch -n 2 [options] -- command` as a list for subprocess."""
    return [sys.executable, "-m", "towerflow", "launch", "-n", "2", *options, "--", *command]


def run_on_ranks(program, *args, timeout=180, env=None, expect_success=True):
    """The CompletedProcess (text stdout and stderr) of `python program args` on
    2 ranks, asserted to have exited 0 unless ``expect_success`` is False. Skips
    the test where mpi4py is missing."""
    pytest.importorskip("mpi4py", reason=MPI_MISSING)
    command = [sys.executable, str(program), *map(str, args)]
    done = subprocess.run(launch_line(command), capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    if expect_success:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def with_simulated_gpus(gpus):
    """os.environ with ``gpus`` simulated GPUs (simgpu.ENV_VARIABLE), and this
    checkout first on PYTHONPATH so the ranks import its towerflow."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, simgpu.ENV_VARIABLE: str(gpus), "PYTHONPATH": path}


def launch_marked(mark, command, log, timeout=20, env=None):
    """Popen of `towerflow launch -n 2 --timeout T -- command`, marked with
    ``mark``, its stdout and stderr in the file ``log``.

    A file, not a pipe: mpiexec and the ranks inherit the launcher's output, so
    a pipe would not end while one of them is left."""
    with open(log, "w") as output:
        return subprocess.Popen(launch_line(command, "--timeout", str(timeout)),
                                env=dict(env or os.environ, **{JOB_MARK: mark}),
                                stdout=output, stderr=subprocess.STDOUT)


def marked_processes(mark):
    """The pids of live processes whose environment holds JOB_MARK=mark."""
    wanted = f"\0{JOB_MARK}={mark}\0".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()   # a zombie's is empty
        except OSError:
            continue
        if wanted in b"\0" + environ:
            found.append(int(entry))
    return found


def left_after(mark, seconds):
    """The marked processes still there after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill_marked(mark):
    for pid in marked_processes(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
