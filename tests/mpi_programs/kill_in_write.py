"""The ranks' program in tests/test_launch_fault_injection.py, under
`towerflow launch -n 2`: `towerflow train ARGS`. With
TOWERFLOW_TEST_KILL_LAUNCHER=1, the SIGKILL that checkpoint_format's hook
(TOWERFLOW_TEST_KILL_AT=POINT@N) sends the writing rank goes to the launcher
instead, and the rank stops at that point of its write, to be ended with
the job.

    python kill_in_write.py train ARGS...
"""

import os
import signal
import sys

from towerflow import cli
from towerflow.train import checkpoint_format

KILL_LAUNCHER_ENV = "TOWERFLOW_TEST_KILL_LAUNCHER"
own_fault_point = checkpoint_format.fault_point


def launcher_pid():
    """The launcher: the parent of mpiexec, which is this rank's parent."""
    with open(f"/proc/{os.getppid()}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def fault_point_on_the_launcher(point):
    """checkpoint_format.fault_point, its SIGKILL aimed at the launcher."""
    real_kill = os.kill

    def kill_the_launcher_and_stop(pid, signum):
        real_kill(launcher_pid(), signum)
        real_kill(os.getpid(), signal.SIGSTOP)      # frozen mid-write until the job ends
    os.kill = kill_the_launcher_and_stop
    try:
        own_fault_point(point)
    finally:
        os.kill = real_kill


if os.environ.get(KILL_LAUNCHER_ENV) == "1":
    checkpoint_format.fault_point = fault_point_on_the_launcher
sys.exit(cli.main(sys.argv[1:]))
