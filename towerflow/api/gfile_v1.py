"""``tf.gfile``: TF1's CamelCase names for :mod:`tf.io.gfile <.gfile>`::

    if not tf.gfile.Exists(FLAGS.train_dir):
        tf.gfile.MakeDirs(FLAGS.train_dir)
    for path in tf.gfile.Glob('/data/*.bin'):
        with tf.gfile.GFile(path, 'rb') as f:
            data = f.read()
"""

# TensorFlow 1.15's CamelCase names.
from .gfile import GFile
from .gfile import copy as Copy
from .gfile import exists as Exists
from .gfile import glob as Glob
from .gfile import isdir as IsDirectory
from .gfile import listdir as ListDirectory
from .gfile import makedirs as MakeDirs
from .gfile import mkdir as MkDir
from .gfile import remove as Remove
from .gfile import rename as Rename
from .gfile import rmtree as DeleteRecursively
from .gfile import stat as Stat


def Walk(top, in_order=True):
    """``(dirname, subdirs, files)`` for ``top`` and below; parents first when
    ``in_order`` (TF1's name for ``topdown``)."""
    from .gfile import walk
    return walk(top, topdown=in_order)


Open = GFile
FastGFile = GFile   # TF1's "without thread locking" variant: the same file here

__all__ = ["Copy", "DeleteRecursively", "Exists", "FastGFile", "GFile", "Glob", "IsDirectory",
           "ListDirectory", "MakeDirs", "MkDir", "Open", "Remove", "Rename", "Stat", "Walk"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.gfile")
