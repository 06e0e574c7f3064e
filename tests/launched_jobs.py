"""Jobs of `towerflow launch -n 2` that a test starts and must leave nothing
of. Each is marked by a variable in the environment that every process of it
inherits (launcher, reaper, mpiexec, ranks, their watchdogs), so a test can
find any of them still there, and kill them at the end whatever happened::

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

JOB_MARK = "TOWERFLOW_TEST_JOB_MARK"


def launch_marked(mark, command, log, timeout=20, env=None):
    """Popen of `towerflow launch -n 2 --timeout T -- command`, marked with
    ``mark``, its stdout and stderr in the file ``log``.

    A file, not a pipe: mpiexec and the ranks inherit the launcher's output, so
    a pipe would not end while one of them is left."""
    line = [sys.executable, "-m", "towerflow", "launch", "-n", "2", "--timeout", str(timeout),
            "--", *command]
    with open(log, "w") as output:
        return subprocess.Popen(line, env=dict(env or os.environ, **{JOB_MARK: mark}),
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
