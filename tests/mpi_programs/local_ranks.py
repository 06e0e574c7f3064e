"""Run by tests/test_launch_hosts.py under `towerflow launch -H ...`: each rank
starts MPI and writes OUT_DIR/rank-<rank>.json with what it learnt of its
place: its rank, the launcher's local rank and size on its host, the host
mpiexec started it on (FAKE_HOST: the fake ssh's host name), and the GPUs
towerflow binds it to out of a host of two.

    python local_ranks.py OUT_DIR
"""

import json
import os
import sys
from pathlib import Path

from towerflow.device.launcher_env import bound_to_local_rank, launcher_local_rank
from towerflow.parallel import mpi

world = mpi.world()
place = {"rank": world.rank, "size": world.size,
         "local_rank": launcher_local_rank(),
         "local_size": int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"]),
         "node": int(os.environ["OMPI_COMM_WORLD_NODE_RANK"]),
         "bound_of_two_gpus": list(bound_to_local_rank((0, 1))),
         "forwarded": os.environ.get("VIRTUAL_ENV")}
Path(sys.argv[1], f"rank-{world.rank}.json").write_text(json.dumps(place))
