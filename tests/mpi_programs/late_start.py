"""Run by tests/test_mpi_faults.py under `towerflow launch -n 2`: rank 1 dies
(--rank-1 die) or stops itself (--rank-1 stop, its pid written to
OUT_DIR/stopped.pid) before it starts MPI; rank 0 then starts MPI.

    python late_start.py OUT_DIR --rank-1 die|stop
"""

import os
import signal
import sys
from pathlib import Path

from towerflow.parallel import mpi
from towerflow.parallel.mpi_startup import _leave_marker, rendezvous_dir

out_dir, what = Path(sys.argv[1]), sys.argv[3]
if mpi.rank_from_environment() == 1:
    _leave_marker(rendezvous_dir(), 1)     # as if it were inside MPI_Init
    if what == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    (out_dir / "stopped.pid").write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
mpi.world()
print("rank 0 started MPI", flush=True)
