"""MPI start-up with a deadline. ``from mpi4py import MPI`` runs MPI_Init,
which waits for every rank: a rank killed or stopped meanwhile would leave
the others waiting for ever, inside C, where no Python timer can fire. So a
watchdog process (mpi_watchdog.py) guards the import, and each rank leaves a
marker (its pid and host) in a rendezvous directory first, so the watchdog
can name the peer that never arrived. Under ``towerflow launch`` each rank
also leaves a marker when it exits, so the launcher can tell a rank that was
killed.
"""

import atexit
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from ..launch_reaper import JOB_VARIABLE

RENDEZVOUS_VARIABLE = "TOWERFLOW_RENDEZVOUS_DIR"
# set by towerflow launch -H/--hostfile: the launcher cannot read other hosts' directories
HOSTS_VARIABLE = "TOWERFLOW_LAUNCH_HOSTS"


def rendezvous_dir():
    """Where the ranks of this job leave their markers: the directory
    ``towerflow launch`` made, else one per MPI job under the temp directory.

    Example::

        >>> rendezvous_dir()      # under towerflow launch
        '/tmp/towerflow-launch-x1y2z3'
    """
    if os.environ.get(RENDEZVOUS_VARIABLE):
        return os.environ[RENDEZVOUS_VARIABLE]
    job = os.environ.get("PMIX_NAMESPACE") or os.environ.get("OMPI_MCA_orte_ess_jobid", "job")
    return os.path.join(tempfile.gettempdir(), f"towerflow-mpi-{job}".replace("/", "_"))


def import_mpi(timeout, rank, size):
    """mpi4py's MPI module, started within ``timeout`` seconds, else this
    process is killed after one line naming the peers that never arrived.

    Example::

        >>> MPI = import_mpi(60.0, rank=0, size=2)
    """
    if size < 2:
        from mpi4py import MPI
        return MPI
    directory = rendezvous_dir()
    _leave_marker(directory, rank)
    if JOB_VARIABLE in os.environ:
        # NOTE: not run when the rank is killed: towerflow launch takes a rank gone
        # without this marker for killed; its peers may then wait in MPI_Finalize for ever
        atexit.register(_leave_marker, directory, rank, "ended-rank")
    # under towerflow launch the launcher prints the watchdog's line (it ends the job);
    # on several hosts the line reaches it through the rank's stderr
    reporter = ("stream" if HOSTS_VARIABLE in os.environ else
                "launcher" if JOB_VARIABLE in os.environ else "stderr")
    watchdog = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("mpi_watchdog.py")), str(os.getpid()),
         repr(float(timeout)), str(rank), str(size), directory, reporter],
        stdin=subprocess.PIPE)
    try:
        from mpi4py import MPI
    finally:
        watchdog.stdin.close()      # end of file: the watchdog stands down
        watchdog.wait()
    return MPI


def _leave_marker(directory, rank, kind="rank"):
    """DIRECTORY/KIND-RANK holding '<pid> <host>': 'rank' when the rank starts
    MPI, 'ended-rank' when it exits (not when it is killed)."""
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{kind}-{rank}.{os.getpid()}")
    with open(temporary, "w") as marker:
        marker.write(f"{os.getpid()} {socket.gethostname()}\n")
    os.replace(temporary, os.path.join(directory, f"{kind}-{rank}"))   # whole or absent
