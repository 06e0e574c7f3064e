"""The ``TOWERFLOW_*`` environment switches, read and checked in one place.

An on/off switch takes 1 or 0 (or true/false, on/off, yes/no, in any case);
unset or empty, it is on. Any other value is an error naming it: a typo
such as ``TOWERFLOW_NATIVE=banana`` used to mean "on" without a word.
``TOWERFLOW_CPU_THREADS`` takes a whole number of threads from 1 to
:data:`MOST_CPU_THREADS` (it used to ignore ``abc``, ``-1`` and ``0``, and
``100000`` failed inside the first op that split its work).
``TOWERFLOW_LOG_LEVEL`` takes debug, info, warning or error (the logger's
level at import; the command line's ``--log-level`` overrides it).

:func:`check` runs when a Session is made and when the command line starts,
so a bad value stops the run before any work, in one line::

    >>> check({"TOWERFLOW_NATIVE": "banana"})     # the environment, by default
    Traceback (most recent call last):
    ...
    ValueError: TOWERFLOW_NATIVE='banana': expected 1 (on) or 0 (off)
"""

import os

# The on/off switches (each module reads its own with on()).
ON_OFF = ("TOWERFLOW_ALIGNED_ARRAYS", "TOWERFLOW_C_THREADS", "TOWERFLOW_CUDA_EMULATION",
          "TOWERFLOW_CUDA_GRAPHS", "TOWERFLOW_DATA_RING", "TOWERFLOW_FUSION",
          "TOWERFLOW_NATIVE", "TOWERFLOW_RETAIN_FREED_MEMORY", "TOWERFLOW_TF32",
          "TOWERFLOW_WINOGRAD")
CPU_THREADS = "TOWERFLOW_CPU_THREADS"
# More threads than this is a typo, not a machine: each thread costs a stack.
MOST_CPU_THREADS = 1024

_ON, _OFF = {"1", "true", "on", "yes"}, {"0", "false", "off", "no"}


def on(name, environ=None):
    """Whether the on/off switch ``name`` is on (the default); ValueError for a
    value it does not take."""
    environ = os.environ if environ is None else environ
    value = environ.get(name, "").strip().lower()
    if not value or value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"{name}={environ[name]!r}: expected 1 (on) or 0 (off)")


def cpu_threads(environ=None):
    """TOWERFLOW_CPU_THREADS as a count of threads, or None when unset (then one
    per core the process may use); ValueError for anything else."""
    environ = os.environ if environ is None else environ
    value = environ.get(CPU_THREADS, "").strip()
    if not value:
        return None
    count = int(value) if value.isdigit() else 0
    if not 1 <= count <= MOST_CPU_THREADS:
        raise ValueError(f"{CPU_THREADS}={environ[CPU_THREADS]!r}: expected a whole "
                         f"number of threads from 1 to {MOST_CPU_THREADS}")
    return count


LOG_LEVEL = "TOWERFLOW_LOG_LEVEL"
LOG_LEVELS = ("debug", "info", "warning", "error")


def log_level(environ=None):
    """TOWERFLOW_LOG_LEVEL (debug, info, warning or error, in any case) in
    lower case, or None when unset; ValueError for anything else."""
    environ = os.environ if environ is None else environ
    value = environ.get(LOG_LEVEL, "").strip().lower()
    if not value:
        return None
    if value not in LOG_LEVELS:
        raise ValueError(f"{LOG_LEVEL}={environ[LOG_LEVEL]!r}: expected one of "
                         f"{', '.join(LOG_LEVELS)}")
    return value


def check(environ=None):
    """Raise ValueError naming the first switch set to a value it does not take."""
    for name in ON_OFF:
        on(name, environ)
    cpu_threads(environ)
    log_level(environ)
