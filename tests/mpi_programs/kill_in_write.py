"""Run by tests/test_launch_fault_injection.py as the ranks' program under
`towerflow launch -n 2`: `towerflow train ARGS`, whose rank 0 (the writer), at
POINT of its Nth checkpoint write, SIGKILLs WHO: ``rank`` (itself) or
``launcher`` (then it stops itself there, to be ended with the job).

    python kill_in_write.py WHO POINT N train ARGS...

POINT: checkpoint-temporary (the .npz written, not yet renamed),
checkpoint-renamed (the state file not yet updated), state-temporary (the
new state file written, not yet renamed), state-renamed (old files not yet
pruned). The points are the renames of checkpoint_format's atomic writes.
"""

import os
import signal
import sys

from towerflow import cli
from towerflow.parallel import mpi
from towerflow.train import checkpoint_format

who, point, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
writes = {"checkpoint": 0, "state": 0}
rename = os.replace


def launcher_pid():
    """The launcher: the parent of mpiexec, which is this rank's parent."""
    with open(f"/proc/{os.getppid()}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def kill_here():
    if who == "launcher":
        os.kill(launcher_pid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGSTOP)    # frozen mid-write until the job is ended
    os.kill(os.getpid(), signal.SIGKILL)


def replace_with_fault_points(source, target):
    name = os.path.basename(str(target))
    kind = "state" if name == checkpoint_format.STATE_FILENAME else \
        "checkpoint" if name.endswith(".npz") else None
    if kind is None:
        return rename(source, target)
    writes[kind] += 1
    at_this_write = writes[kind] == nth
    if at_this_write and point == f"{kind}-temporary":
        kill_here()
    rename(source, target)
    if at_this_write and point == f"{kind}-renamed":
        kill_here()
    return None


if mpi.rank_from_environment() == 0:
    # NOTE: os.replace of the whole process; every other rename passes through
    os.replace = replace_with_fault_points
sys.exit(cli.main(sys.argv[4:]))
