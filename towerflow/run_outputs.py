"""The files a training run writes besides its checkpoints, checked before it
trains (so a run never fails only at its end) and named in one-line errors::

    check_output_paths(checkpoint_dir="ck", json_out="run.json")
    with naming_path("ck"):
        saver.save(sess, "ck/model")
    write_json("run.json", summary)
"""

import contextlib
import errno
import json
import os
import tempfile


def check_output_paths(checkpoint_dir=None, json_out=None, trace=None, tensorboard=None):
    """OSError naming the path unless ``checkpoint_dir`` and ``tensorboard`` are
    (or can be made) writable directories and ``json_out`` and ``trace``
    writable files: checked before training, so a run never fails only at its
    end.

    Example::

        >>> check_output_paths(checkpoint_dir="ckpt", json_out="run.json")
    """
    if checkpoint_dir:
        _probe_directory(checkpoint_dir, "--checkpoint-dir")
    if tensorboard:
        _probe_directory(tensorboard, "--tensorboard")
    for path, option in ((json_out, "--json-out"), (trace, "--trace")):
        if path:
            _check_output_file(path, option)


def _check_output_file(path, option):
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, f"{option} is a directory, not a file", path)
    _probe_directory(os.path.dirname(os.path.abspath(path)), f"{option}'s folder")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, f"{option} is not writable", path)


def _probe_directory(directory, what):
    """Make ``directory`` if missing and write (then remove) a file in it."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(errno.ENOTDIR, f"{what} is a file, not a directory",
                                 directory)
    with naming_path(directory):
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass


@contextlib.contextmanager
def naming_path(path):
    """Re-raise an OSError without a file name (a write that found the disk
    full, say) with ``path``, so the one-line error says where.

    Example::

        >>> with naming_path("ckpt"):
        ...     saver.save(sess, "ckpt/model")
    """
    try:
        yield
    except OSError as err:
        if err.filename is not None or err.errno is None:
            raise
        raise type(err)(err.errno, err.strerror, path) from err


def write_json(path, result):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    with open(path, "w") as out:
        json.dump(result, out, indent=2)

