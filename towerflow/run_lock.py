"""One run at a time per checkpoint directory (issue 32, item 2).

Two ``towerflow train --checkpoint-dir D`` started at once both trained and both
wrote, and the state file ended up naming a mix of the two. The run that
writes the checkpoints (the chief) now holds ``D/.lock`` while it runs: a file
made with O_EXCL holding its pid, host and start time. A second run refuses at
start, naming the first; a lock left by a process that is gone (a killed run,
on this host) is taken over::

    with held(checkpoint_dir):
        train()
"""

import contextlib
import json
import os
import socket
import time

from .train.checkpoint_format import process_alive

LOCK_NAME = ".lock"


@contextlib.contextmanager
def held(directory):
    """Hold ``directory``'s lock for the ``with`` block (made if missing);
    ValueError naming the holder when another live run holds it."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOCK_NAME)
    _take(path, directory)
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            if _holder(path).get("pid") == os.getpid():
                os.remove(path)


def check_free(directory):
    """ValueError naming the holder when another live run holds ``directory``'s
    lock: called before anything else reads the directory, so that a second run
    hears of the first rather than of its files."""
    holder = _holder(os.path.join(directory, LOCK_NAME))
    if os.path.exists(os.path.join(directory, LOCK_NAME)) and holder.get("pid") != \
            os.getpid() and not _stale(holder):
        raise ValueError(_in_use(directory, holder))


def _take(path, directory):
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
    for _ in range(3):          # a stale lock removed, then a race lost: try again
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if not _stale(holder):
                raise ValueError(_in_use(directory, holder)) from None
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            continue
        with os.fdopen(descriptor, "w") as stream:
            json.dump(mine, stream)
        return
    raise ValueError(_in_use(directory, _holder(path)))


def _holder(path):
    """The lock's contents ({} when unreadable: a lock being written)."""
    try:
        with open(path) as stream:
            found = json.load(stream)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _stale(holder):
    """Whether the holder is a process of this host that is gone."""
    pid = holder.get("pid")
    return holder.get("host") == socket.gethostname() and isinstance(pid, int) and \
        not process_alive(pid)


def _in_use(directory, holder):
    who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
    started = holder.get("started")
    if isinstance(started, (int, float)):
        who += f", started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}"
    return (f"--checkpoint-dir {directory!r} is in use by another run ({who}); wait for it "
            f"to end or choose another directory (remove {os.path.join(directory, LOCK_NAME)} "
            "only if that run is gone)")
