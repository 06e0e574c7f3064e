"""Run by tests/test_mpi_faults.py under `towerflow launch -n 2`: both ranks
start MPI and meet in one all-reduce; then rank 0 SIGKILLs itself, and rank 1
exits (--rank-1 exit: its MPI_Finalize may wait for rank 0) or waits for ever
(--rank-1 wait, as a rank stuck in MPI_Finalize does).

    python rank_0_killed.py --rank-1 exit|wait
"""

import os
import signal
import sys
import time

import numpy as np

from towerflow.parallel import mpi

world = mpi.world()
world.all_reduce(np.ones(2, np.float32), "all-reduce 'the last'", 20.0)
if world.rank == 0:
    os.kill(os.getpid(), signal.SIGKILL)
while sys.argv[2] == "wait":
    time.sleep(60)
