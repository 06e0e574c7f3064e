"""Run by tests/test_mpi_faults.py under `towerflow launch -n 2`: rank 1 dies
(--rank-1 die) or stops itself (--rank-1 stop) before it starts MPI, or
stops itself inside the start-up its watchdog guards (--rank-1
stop-in-init); rank 0 then starts MPI.

    python late_start.py OUT_DIR --rank-1 die|stop|stop-in-init
"""

import os
import signal
import sys
import types

from towerflow.parallel import mpi
from towerflow.parallel.mpi_startup import _leave_marker, rendezvous_dir


def stop_inside_mpi_init():
    """Make ``from mpi4py import MPI`` stop this process, as a SIGSTOP that
    lands while MPI_Init runs would (the watchdog is running by then)."""
    def stop(name):
        os.kill(os.getpid(), signal.SIGSTOP)
        raise AttributeError(name)
    sys.modules["mpi4py"] = types.ModuleType("mpi4py")
    sys.modules["mpi4py"].__getattr__ = stop


what = sys.argv[3]
if mpi.rank_from_environment() == 1 and what == "stop-in-init":
    stop_inside_mpi_init()
elif mpi.rank_from_environment() == 1:
    _leave_marker(rendezvous_dir(), 1)     # as if it were inside MPI_Init
    if what == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
mpi.world()
print("rank 0 started MPI", flush=True)
