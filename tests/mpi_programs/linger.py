"""Run by tests/test_mpi_faults.py under `towerflow launch -n 2`: every rank
starts MPI, writes OUT_DIR/started-<rank> and then waits for ever (rank 1
stopped by SIGSTOP with --stop-rank-1), so that only ending the job ends it.

    python linger.py OUT_DIR [--stop-rank-1]
"""

import os
import signal
import sys
import time
from pathlib import Path

from towerflow.parallel import mpi

out_dir = Path(sys.argv[1])
rank = mpi.world().rank
(out_dir / f"started-{rank}").write_text(str(os.getpid()))
if rank == 1 and "--stop-rank-1" in sys.argv:
    os.kill(os.getpid(), signal.SIGSTOP)
while True:
    time.sleep(60)
