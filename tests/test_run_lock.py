"""The lock of a checkpoint directory (towerflow/run_lock.py): a lock whose
holder was killed is taken over, also while the killed process is a zombie
that nobody has reaped yet (under a killed `towerflow launch`, mpiexec dies
too and init reaps the ranks late: seconds in a container, or never)."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from towerflow import run_lock


def a_zombie():
    """The pid of a child that has exited and is not waited for."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while _state(child.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _state(child.pid) == "Z"
    return child


def _state(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="zombies are found through /proc")
def test_a_lock_held_by_a_zombie_is_taken_over(tmp_path):
    zombie = a_zombie()
    try:
        holder = {"pid": zombie.pid, "host": socket.gethostname(), "started": time.time()}
        (tmp_path / run_lock.LOCK_NAME).write_text(json.dumps(holder))
        run_lock.check_free(str(tmp_path))
        with run_lock.held(str(tmp_path)):
            mine = json.loads((tmp_path / run_lock.LOCK_NAME).read_text())
            assert mine["pid"] == os.getpid()
    finally:
        zombie.wait()
