"""``tf.io.gfile``: TensorFlow's file API, on local files only::

    if not tf.io.gfile.exists(logdir):
        tf.io.gfile.makedirs(logdir)
    with tf.io.gfile.GFile(os.path.join(logdir, 'notes.txt'), 'w') as f:
        f.write('hello')

Failures raise TensorFlow's errors: ``tf.errors.NotFoundError`` for a missing
file or directory, ``AlreadyExistsError`` for a copy or rename onto an
existing file without ``overwrite=True``, ``PermissionDeniedError``, and
``UnimplementedError`` for a remote file system (``gs://``, ``hdfs://``).
TF1's CamelCase names (``tf.gfile.Exists``) are in :mod:`.gfile_v1`.
"""

import collections
import contextlib
import glob as _glob
import os
import shutil

from .. import errors

FileStatistics = collections.namedtuple("FileStatistics", "length mtime_nsec is_directory")

_ERRORS_BY_OS_ERROR = (
    (FileNotFoundError, errors.NotFoundError),
    (FileExistsError, errors.AlreadyExistsError),
    (PermissionError, errors.PermissionDeniedError),
    ((IsADirectoryError, NotADirectoryError), errors.FailedPreconditionError),
)


@contextlib.contextmanager
def _tf_errors(path):
    """Turn an OSError about ``path`` into TensorFlow's error for it."""
    try:
        yield
    except OSError as err:
        raise _tf_error(err, path) from None


def _tf_error(err, path):
    reason = err.strerror or str(err)
    for os_error, tf_error in _ERRORS_BY_OS_ERROR:
        if isinstance(err, os_error):
            return tf_error(None, None, f"{path}; {reason}")
    return errors.UnknownError(None, None, f"{path}; {reason}")


def _local(path):
    """``path`` as a local path (``file://`` stripped); remote schemes refused."""
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = path.decode()
    if path.startswith("file://"):
        return path[len("file://"):]
    if "://" in path:
        raise errors.UnimplementedError(
            None, None, f"File system scheme '{path.split('://')[0]}' not implemented "
            f"(file: '{path}'): towerflow reads and writes local files only")
    return path


def exists(path):
    """Whether ``path`` exists: ``tf.io.gfile.exists('/tmp/model')``."""
    return os.path.exists(_local(path))


def isdir(path):
    """Whether ``path`` is a directory (False when it does not exist)."""
    return os.path.isdir(_local(path))


def makedirs(path):
    """Create ``path`` and its missing parents; an existing directory is fine."""
    path = _local(path)
    with _tf_errors(path):
        os.makedirs(path, exist_ok=True)


def mkdir(path):
    """Create one directory (AlreadyExistsError if it exists, NotFoundError if
    its parent does not)."""
    path = _local(path)
    with _tf_errors(path):
        os.mkdir(path)


def listdir(path):
    """The names (not paths) in directory ``path``, sorted: ``['a.txt', 'sub']``."""
    path = _local(path)
    if not os.path.isdir(path):
        raise errors.NotFoundError(None, None, f"Could not find directory {path}")
    with _tf_errors(path):
        return sorted(os.listdir(path))


def glob(pattern):
    """The paths matching ``pattern``, sorted: ``tf.io.gfile.glob('/data/*.bin')``."""
    if isinstance(pattern, (list, tuple)):
        return sorted({match for one in pattern for match in glob(one)})
    return sorted(_glob.glob(_local(pattern)))


def remove(path):
    """Delete the file ``path`` (NotFoundError if it does not exist)."""
    path = _local(path)
    with _tf_errors(path):
        os.remove(path)


def rmtree(path):
    """Delete the directory ``path`` and everything under it."""
    path = _local(path)
    if not os.path.exists(path):
        raise errors.NotFoundError(None, None, f"{path}; No such file or directory")
    with _tf_errors(path):
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)


def _refuse_existing(path, overwrite):
    if not overwrite and os.path.exists(path):
        raise errors.AlreadyExistsError(None, None, f"{path}; File already exists")


def copy(src, dst, overwrite=False):
    """Copy the file ``src`` to ``dst`` (AlreadyExistsError if ``dst`` exists
    and ``overwrite`` is False)."""
    src, dst = _local(src), _local(dst)
    _refuse_existing(dst, overwrite)
    with _tf_errors(src):
        shutil.copyfile(src, dst)


def rename(src, dst, overwrite=False):
    """Move ``src`` to ``dst`` (AlreadyExistsError if ``dst`` exists and
    ``overwrite`` is False)."""
    src, dst = _local(src), _local(dst)
    _refuse_existing(dst, overwrite)
    with _tf_errors(src):
        os.replace(src, dst)


def stat(path):
    """``FileStatistics(length, mtime_nsec, is_directory)`` of ``path``."""
    path = _local(path)
    with _tf_errors(path):
        info = os.stat(path)
    return FileStatistics(info.st_size, info.st_mtime_ns, os.path.isdir(path))


def walk(top, topdown=True, onerror=None):
    """``(dirname, subdirs, files)`` for ``top`` and every directory under it,
    parents first unless ``topdown`` is False; a missing ``top`` yields nothing."""
    for dirname, subdirs, files in os.walk(_local(top), topdown=topdown, onerror=onerror):
        subdirs.sort()
        yield dirname, subdirs, sorted(files)


class GFile:
    """A file: ``with tf.io.gfile.GFile(path, 'rb') as f: data = f.read()``.

    Modes as Python's ``open`` ('r', 'rb', 'w', 'wb', 'a', 'ab'); text modes
    read and write str, binary modes bytes. As TensorFlow's, the file opens at
    the first read or write, so a missing file raises NotFoundError there.
    """

    def __init__(self, name, mode="r"):
        if mode.replace("b", "").replace("+", "") not in ("r", "w", "a"):
            raise errors.InvalidArgumentError(
                None, None, f"Bad file mode {mode!r}: expected 'r', 'w' or 'a', "
                "optionally with 'b' and '+'")
        self.name = os.fspath(name)
        self.mode = mode
        self._path = _local(name)
        self._file = None

    def _opened(self):
        if self._file is None:
            with _tf_errors(self._path):
                # NOTE: kept open across calls (closed by close() / __exit__).
                self._file = open(self._path, self.mode)
        return self._file

    def read(self, n=-1):
        with _tf_errors(self._path):
            return self._opened().read(n)

    def readline(self):
        return self._opened().readline()

    def readlines(self):
        return self._opened().readlines()

    def write(self, file_content):
        with _tf_errors(self._path):
            self._opened().write(file_content)

    def seek(self, offset=0, whence=0):
        return self._opened().seek(offset, whence)

    def tell(self):
        return self._opened().tell()

    def size(self):
        """The file's length in bytes."""
        return stat(self._path).length

    def flush(self):
        if self._file is not None:
            self._file.flush()

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    def __iter__(self):
        return iter(self._opened())

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.io.gfile")
