"""The watchdog of MPI start-up, run as a script (standard library only, so it
starts in milliseconds) by towerflow/parallel/mpi_startup.py:

    python mpi_watchdog.py PARENT_PID TIMEOUT RANK SIZE RENDEZVOUS_DIR

It waits on stdin: the parent closes it once ``from mpi4py import MPI`` has
returned. If that takes longer than TIMEOUT seconds, it prints one line
naming the peers that never arrived (from their markers in RENDEZVOUS_DIR:
never started, died, stopped) and kills the parent, which is stuck inside
MPI_Init where no Python code (no timer, no signal handler) can run.
"""

import os
import select
import signal
import socket
import sys


def peer_state(rendezvous_dir, peer):
    """How rank ``peer`` stands, from its marker '<pid> <host>' (if any)."""
    try:
        with open(os.path.join(rendezvous_dir, f"rank-{peer}")) as marker:
            pid_text, host = marker.read().split()
    except (OSError, ValueError):
        return "never started"
    if host != socket.gethostname():
        return f"started on host {host} but did not finish starting MPI"
    try:
        with open(f"/proc/{pid_text}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return f"(pid {pid_text}) died"
    if state in ("T", "t"):
        return f"(pid {pid_text}) is stopped"
    if state in ("Z", "X"):
        return f"(pid {pid_text}) died"
    return f"(pid {pid_text}) is running but did not finish starting MPI"


def missing_peers_line(timeout, rank, size, rendezvous_dir):
    """The one line printed when start-up ran out of time."""
    states = {peer: peer_state(rendezvous_dir, peer) for peer in range(size) if peer != rank}
    unusual = {peer: state for peer, state in states.items() if "did not finish" not in state}
    named = unusual or states
    described = "; ".join(f"rank {peer} {state}" for peer, state in named.items())
    return (f"towerflow: error: MPI start-up did not complete within {timeout:g} s on rank "
            f"{rank} of {size}: {described} (TOWERFLOW_COLLECTIVE_TIMEOUT sets the limit)")


def main(parent_pid, timeout, rank, size, rendezvous_dir):
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if ready:       # end of file: the parent finished starting MPI (or exited)
        return 0
    line = missing_peers_line(timeout, rank, size, rendezvous_dir)
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    # NOTE: mpiexec --enable-recovery exits 0 when a rank is killed by a signal;
    # towerflow launch reads this file to exit non-zero.
    with open(os.path.join(rendezvous_dir, f"failed-rank-{rank}"), "w") as failed:
        failed.write(line + "\n")
    os.kill(parent_pid, signal.SIGKILL)
    return 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                  sys.argv[5]))
