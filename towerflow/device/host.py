"""The machine towerflow runs on, as a user or a benchmark's JSON needs to
name it: the CPU model, the vector extensions it offers, the cores this
process may use, which compiled kernels run and why not, and every
``TOWERFLOW_*`` switch that is set.

    >>> describe()["cpu"]["vector_extensions"]
    ['avx2', 'fma', 'avx512f']          # on an AVX-512 machine
"""

import datetime
import os
import platform

# The extensions the compiled kernels care about, in /proc/cpuinfo's names.
VECTOR_EXTENSIONS = ("avx2", "fma", "avx512f")


def _cpuinfo():
    """(model name, flags) from /proc/cpuinfo; (platform's name, set()) elsewhere."""
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), flags


# cgroup v2's "quota period" (or "max"), and v1's two files: a container's CPU limit.
CGROUP_V2_MAX = "/sys/fs/cgroup/cpu.max"
CGROUP_V1 = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def _read(path):
    try:
        with open(path) as file:
            return file.read().split()
    except OSError:
        return None


def cgroup_cores():
    """The cores a cgroup CPU quota allows this process (rounded up), or None
    without a quota: a container given 2 CPUs of a 64-core host gets 2."""
    fields = _read(CGROUP_V2_MAX)
    if fields and len(fields) == 2 and fields[0] != "max":
        quota, period = fields
    else:
        quota, period = ((_read(path) or ["-1"])[0] for path in CGROUP_V1)
    try:
        quota, period = int(quota), int(period)
    except ValueError:
        return None
    return -(-quota // period) if quota > 0 and period > 0 else None


def usable_cores():
    """The cores this process may run on: its affinity, within a cgroup
    CPU quota; else the machine's."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = cgroup_cores()
    return max(1, min(cores, quota)) if quota else cores


def cpu():
    model, flags = _cpuinfo()
    return {"model": model, "vector_extensions": [e for e in VECTOR_EXTENSIONS if e in flags],
            "usable_cores": usable_cores(), "online_cores": os.cpu_count()}


def switches():
    """Every TOWERFLOW_* environment variable that is set, with its value."""
    return {name: value for name, value in sorted(os.environ.items())
            if name.startswith("TOWERFLOW_")}


def describe():
    """The CPU, the compiled kernels' state (backends.native.status), the
    switches set, and today's date: what a speed figure must name."""
    from ..backends import native
    return {"cpu": cpu(), "compiled_kernels": native.status(), "switches": switches(),
            "date": datetime.date.today().isoformat()}
