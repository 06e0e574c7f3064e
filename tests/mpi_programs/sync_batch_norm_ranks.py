"""Run by tests/test_sync_batch_norm.py under `towerflow launch -n 2`: every rank
trains the small CNN of that test with synchronized batch norm, TOWERS logical-CPU
towers a rank, all_reduce='mpi', on the same global batches of 12, 7 and 3.

    python sync_batch_norm_ranks.py OUT_DIR TOWERS

Writes OUT_DIR/batch_<B>_rank_<r>.npz: the first step's batch-norm output of
this rank's towers, the losses, the first step's gradients and the final
variables (tower 0's), as test_sync_batch_norm.train returns them.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared model
from conftest import split_cpu
from test_sync_batch_norm import train

from towerflow.parallel.mpi import rank_from_environment
from towerflow.parallel.sharding import shard_bounds


def main():
    out_dir, towers = Path(sys.argv[1]), int(sys.argv[2])
    rank = rank_from_environment()
    split_cpu(towers)
    for batch in (12, 7, 3):
        result = train(towers, batch, all_reduce="mpi")
        # this rank's towers hold shards rank * towers .. (rank + 1) * towers - 1
        start = shard_bounds(batch, 2 * towers, rank * towers)[0]
        end = shard_bounds(batch, 2 * towers, (rank + 1) * towers - 1)[1]
        np.savez(out_dir / f"batch_{batch}_rank_{rank}.npz", outputs=result.outputs,
                 shard=np.array([start, end]), losses=result.losses,
                 **{f"gradient_{i}": g for i, g in enumerate(result.gradients)},
                 **{f"variable_{i}": v for i, v in enumerate(result.variables)})
    print(f"rank {rank} finished", flush=True)


if __name__ == "__main__":
    main()
