"""Ending every process of one ``towerflow launch`` job, and the reaper that
does it when the launcher itself dies. Standard library only: run as a
script, it starts in milliseconds.

    python launch_reaper.py JOB_TOKEN

The launcher marks each process of the job (``mpiexec``, the ranks, their
children) with ``TOWERFLOW_LAUNCH_JOB=JOB_TOKEN`` in the environment they
inherit. Open MPI's ``mpiexec`` sits between the launcher and the ranks and
puts each rank in a process group of its own, so neither a process group nor
a pipe the ranks inherit (mpiexec closes them) reaches them all; the mark
does, through /proc (Linux).

The reaper runs in a session of its own with a pipe from the launcher as
stdin: the launcher writes ``done`` before it returns. End of file without
``done`` means the launcher died (SIGKILL, a crash), and then the reaper
ends the job, which ``mpiexec`` would otherwise leave running, orphaned.
"""

import os
import signal
import sys
import time

JOB_VARIABLE = "TOWERFLOW_LAUNCH_JOB"
DONE = "done"
_ROUNDS = 40            # a process may fork while the job is ended: look again
_ROUND_PAUSE = 0.05


def job_processes(token):
    """The pids of the processes marked with ``token`` (this one excluded).

    Example::

        >>> job_processes("4242-1f2e3d")
        [4250, 4251, 4252]
    """
    mark = f"{JOB_VARIABLE}={token}".encode() + b"\0"
    found = []
    for entry in _proc_entries():
        if int(entry) != os.getpid() and mark in _environment_of(entry):
            found.append(int(entry))
    return found


def _proc_entries():
    try:
        return [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:     # no /proc (not Linux): nothing can be found
        return []


def _environment_of(pid_text):
    # NOTE: starts with a NUL so that the mark matches a whole variable only;
    # a zombie's (or another user's) environment reads as empty.
    try:
        with open(f"/proc/{pid_text}/environ", "rb") as environ:
            return b"\0" + environ.read()
    except OSError:
        return b""


def end_job(token):
    """SIGKILL every process marked with ``token`` until none is left (a
    bounded number of rounds); the number of processes killed.

    SIGKILL because the job cannot go on: a rank stuck inside MPI_Init runs no
    handler, and a stopped rank gets SIGTERM only once continued.

    Example::

        >>> end_job("4242-1f2e3d")
        3
    """
    killed = set()
    for _ in range(_ROUNDS):
        alive = job_processes(token)
        if not alive:
            break
        for pid in alive:
            _kill_quietly(pid)
        killed.update(alive)
        time.sleep(_ROUND_PAUSE)
    return len(killed)


def _kill_quietly(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:     # gone meanwhile
        pass


def main(token):
    """Wait for the launcher's ``done``; without it, end the job."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # only the launcher's end counts
    if sys.stdin.read().strip() != DONE:
        end_job(token)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
