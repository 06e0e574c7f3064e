"""The watchdog of MPI start-up, run as a script (standard library only, so it
starts in milliseconds) by towerflow/parallel/mpi_startup.py:

    python mpi_watchdog.py PARENT_PID TIMEOUT RANK SIZE RENDEZVOUS_DIR stderr|launcher|stream

It waits on stdin: the parent closes it once ``from mpi4py import MPI`` has
returned. If that takes longer than TIMEOUT seconds, it writes one line
naming the peers that never arrived (from their markers in RENDEZVOUS_DIR:
never started, died, stopped; or its own rank, if that is the one stopped)
to RENDEZVOUS_DIR/failed-rank-RANK, prints it too unless ``towerflow
launch`` does (``launcher``), and kills the parent, which is stuck inside
MPI_Init where no Python code (no timer, no signal handler) can run.

In a launch on several hosts (``stream``) the launcher cannot read this
host's RENDEZVOUS_DIR: the line goes to stderr behind FAILURE_PREFIX instead,
and mpiexec carries it to the launcher, which takes it out of the output.
"""

import os
import select
import signal
import socket
import sys

STOPPED_GRACE = 3.0     # seconds a stopped rank's watchdog leaves its peers to name it
# what starts a failure line meant for towerflow launch in a rank's stderr (several hosts)
FAILURE_PREFIX = "towerflow-launch-failure: "


def peer_state(rendezvous_dir, peer, reporter_of_launch="launcher"):
    """How rank ``peer`` stands, from its marker '<pid> <host>' (if any)."""
    try:
        with open(os.path.join(rendezvous_dir, f"rank-{peer}")) as marker:
            pid_text, host = marker.read().split()
    except (OSError, ValueError):
        # NOTE: a rank on another host leaves its marker there, out of this one's sight
        return "never started" if reporter_of_launch != "stream" else \
            "did not finish starting MPI (no marker on this host: it may run on another)"
    if host != socket.gethostname():
        return f"started on host {host} but did not finish starting MPI"
    state = process_state(pid_text)
    if state == "running":
        return f"(pid {pid_text}) is running but did not finish starting MPI"
    return f"(pid {pid_text}) {state}"


def process_state(pid):
    """'running', 'is stopped' or 'died', from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "died"
    if state in ("T", "t"):
        return "is stopped"
    if state in ("Z", "X"):
        return "died"
    return "running"


def missing_peers_line(timeout, rank, size, rendezvous_dir, reporter="launcher"):
    """The one line printed when start-up ran out of time."""
    states = {peer: peer_state(rendezvous_dir, peer, reporter)
              for peer in range(size) if peer != rank}
    unusual = {peer: state for peer, state in states.items() if "did not finish" not in state}
    named = unusual or states
    described = "; ".join(f"rank {peer} {state}" for peer, state in named.items())
    return _failure_line(timeout, rank, size, described)


def stopped_self_line(timeout, rank, size, pid):
    """The line when this watchdog's own rank is the one stopped."""
    return _failure_line(timeout, rank, size, f"rank {rank} (pid {pid}) is stopped")


def _failure_line(timeout, rank, size, described):
    return (f"towerflow: error: MPI start-up did not complete within {timeout:g} s on rank "
            f"{rank} of {size}: {described} (TOWERFLOW_COLLECTIVE_TIMEOUT sets the limit)")


def main(parent_pid, timeout, rank, size, rendezvous_dir, reporter):
    if _parent_done_within(timeout):
        return 0
    # NOTE: a stopped rank's peers name it as stopped, and towerflow launch ends the
    # job on their word; killing it at once would make them say it died.
    if process_state(parent_pid) == "is stopped" and _parent_done_within(STOPPED_GRACE):
        return 0
    if process_state(parent_pid) == "is stopped":
        line = stopped_self_line(timeout, rank, size, parent_pid)
    else:
        line = missing_peers_line(timeout, rank, size, rendezvous_dir, reporter)
    if reporter in ("stderr", "stream"):
        sys.stderr.write((FAILURE_PREFIX if reporter == "stream" else "") + line + "\n")
        sys.stderr.flush()
    if reporter != "stream":
        _leave_failure(rendezvous_dir, rank, line)
    os.kill(parent_pid, signal.SIGKILL)
    return 1


def _parent_done_within(seconds):
    ready, _, _ = select.select([sys.stdin], [], [], seconds)
    return bool(ready)      # end of file: the parent finished starting MPI (or exited)


def _leave_failure(rendezvous_dir, rank, line):
    # NOTE: towerflow launch reads this file to end the job and exit non-zero:
    # mpiexec --enable-recovery exits 0 when a rank is killed by a signal, and
    # waits for ever on a peer that is stopped. Written whole or not at all.
    temporary = os.path.join(rendezvous_dir, f".failed-rank-{rank}.{os.getpid()}")
    with open(temporary, "w") as failed:
        failed.write(line + "\n")
    os.replace(temporary, os.path.join(rendezvous_dir, f"failed-rank-{rank}"))


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                  sys.argv[5], sys.argv[6]))
