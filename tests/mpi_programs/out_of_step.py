"""Run by tests/test_mpi_faults.py under `towerflow launch -n 2`: the ranks run
different collectives at the same point (rank 0 all-reduces 5 floats, rank 1
one float, as ranks whose runs differ in length would). Prints the error."""

import sys

import numpy as np

from towerflow.errors import InvalidArgumentError
from towerflow.parallel import mpi

world = mpi.world()
world.all_reduce(np.ones(3, np.float32), "all-reduce 'warm-up'", 20.0)   # in step
size = 5 if world.rank == 0 else 1
try:
    world.all_reduce(np.ones(size, np.float32), f"all-reduce 'rank {world.rank}'", 20.0)
except InvalidArgumentError as err:
    print(f"rank {world.rank}: {err.message}", flush=True)
    sys.exit(3)
print(f"rank {world.rank}: no error", flush=True)
