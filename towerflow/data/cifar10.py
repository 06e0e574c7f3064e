"""CIFAR-10 from the official files, in either of the layouts it ships in.

::

    from towerflow.data import cifar10
    data = cifar10.load('~/data')     # finds cifar-10-batches-bin/ or cifar-10-batches-py/
    data.train.images, data.train.labels    # uint8 [50000, 32, 32, 3], int64 [50000]
    data.test.images, data.test.labels      # uint8 [10000, 32, 32, 3], int64 [10000]
    data.class_names                        # ('airplane', 'automobile', ..., 'truck')

The "binary version" (cifar-10-binary.tar.gz) extracts to cifar-10-batches-bin/:
data_batch_1.bin .. data_batch_5.bin and test_batch.bin, each 10,000 records of
one label byte and 3,072 pixel bytes (1024 red, 1024 green, 1024 blue, rows in
order), and batches.meta.txt (a class name per line). The "python version"
(cifar-10-python.tar.gz) extracts to cifar-10-batches-py/: data_batch_1 ..
data_batch_5 and test_batch, pickled dicts with b'data' (uint8 [10000, 3072],
same pixel order) and b'labels', and batches.meta (b'label_names').

``load`` never downloads: when files are missing it raises FileNotFoundError
naming the directory, the files to put there and the archive they come from.
Batches are unpickled with only the NumPy classes an array needs, so a
doctored file cannot run code. ``download(data_dir)`` fetches and checks an
official archive for machines that are online.
"""

import collections
import hashlib
import http.client
import logging
import os
import pickle
import shlex
import tarfile
import urllib.error
import urllib.request
import zlib

import numpy as np

from .splits import Split, Splits, unusable_directory

__all__ = ["load", "download", "CLASS_NAMES", "SOURCE_URL", "BINARY", "PYTHON", "LAYOUTS"]

CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer",
               "dog", "frog", "horse", "ship", "truck")
SOURCE_URL = "https://www.cs.toronto.edu/~kriz/"
_PAGE = SOURCE_URL + "cifar.html"
IMAGES_PER_BATCH = 10000
PIXELS = 3 * 32 * 32
RECORD_BYTES = 1 + PIXELS
_GZIP_MAGIC = b"\x1f\x8b"

Layout = collections.namedtuple(
    "Layout", ["name", "folder", "archive", "md5", "batch_files", "meta_file"])
# md5s as listed on https://www.cs.toronto.edu/~kriz/cifar.html (the python one is
# also torchvision's); batch_files: five train batches, then the test batch.
BINARY = Layout("bin", "cifar-10-batches-bin", "cifar-10-binary.tar.gz",
                "c32a1d4ab5d03f1284b67883e8d87530",
                tuple(f"data_batch_{k}.bin" for k in range(1, 6)) + ("test_batch.bin",),
                "batches.meta.txt")
PYTHON = Layout("python", "cifar-10-batches-py", "cifar-10-python.tar.gz",
                "c58f30108f718f92721af3b95e74349a",
                tuple(f"data_batch_{k}" for k in range(1, 6)) + ("test_batch",),
                "batches.meta")
LAYOUTS = {"bin": BINARY, "python": PYTHON}

_logger = logging.getLogger("towerflow")


# -- finding the files ---------------------------------------------------------


def _layouts(layout):
    if layout is None:
        return (BINARY, PYTHON)      # binary first: no unpickling, faster
    if layout not in LAYOUTS:
        raise ValueError(f"Unknown CIFAR-10 layout {layout!r}; expected 'bin', 'python' "
                         f"or None (either, binary first)")
    return (LAYOUTS[layout],)


def _missing(folder, layout):
    return [name for name in layout.batch_files
            if not os.path.isfile(os.path.join(folder, name))]


def _locate(directory, layouts):
    """(layout, folder) of the first complete layout in or at ``directory``."""
    partial = []
    for layout in layouts:
        for folder in (os.path.join(directory, layout.folder), directory):
            missing = _missing(folder, layout)
            if not missing:
                return layout, folder
            if os.path.isdir(folder) and (folder != directory
                                          or len(missing) < len(layout.batch_files)):
                partial.append(f"{folder} lacks {', '.join(missing)}")
    raise _not_found_error(directory, layouts, partial)


def _not_found_error(directory, layouts, partial):
    state = unusable_directory(directory) or "; ".join(partial) or "it holds no " + \
        " or ".join(f"{layout.folder}/" for layout in layouts)
    wanted = "\n".join(
        f"  {os.path.join(directory, layout.folder)}/: {', '.join(layout.batch_files)} "
        f"and {layout.meta_file}\n    (from {layout.archive}, md5 {layout.md5})"
        for layout in layouts)
    archive, quoted = layouts[0].archive, shlex.quote(directory)
    return FileNotFoundError(
        f"CIFAR-10 not found in {directory!r} ({state}). towerflow never downloads data "
        f"at run time; put {'one of these' if len(layouts) > 1 else 'this'} there:\n"
        f"{wanted}\nThe official archives are at {_PAGE}, for example:\n"
        f"  mkdir -p {quoted} && cd {quoted} && curl -O {SOURCE_URL}{archive} && "
        f"md5sum {archive} && tar xzf {archive}\n"
        f"or, on a machine that is online: "
        f"python -c \"from towerflow.data import cifar10; cifar10.download({directory!r})\"")


# -- reading batches -----------------------------------------------------------


def _read_binary_batch(path):
    """(pixels uint8 [10000, 3072], labels uint8 [10000]) of a .bin batch."""
    size, expected = os.path.getsize(path), IMAGES_PER_BATCH * RECORD_BYTES
    if size != expected:
        raise ValueError(_binary_size_message(path, size, expected))
    records = np.fromfile(path, dtype=np.uint8).reshape(IMAGES_PER_BATCH, RECORD_BYTES)
    return records[:, 1:], records[:, 0]


def _binary_size_message(path, size, expected):
    what = (f"{expected:,} bytes ({IMAGES_PER_BATCH:,} records of {RECORD_BYTES:,} bytes: "
            f"1 label byte, then {PIXELS:,} pixel bytes)")
    if size < expected:
        message = f"CIFAR-10 binary batch {path} is truncated: {size:,} bytes, expected {what}"
    else:
        message = f"CIFAR-10 binary batch {path} has {size:,} bytes, more than the {what}"
    with open(path, "rb") as f:
        head = f.read(2)
    if head == _GZIP_MAGIC:
        message += "; it is gzipped: extract the archive with 'tar xzf'"
    elif head[:1] == b"\x80":
        message += "; it looks like a pickle: the python version belongs in cifar-10-batches-py/"
    elif size % (RECORD_BYTES + 1) == 0:
        message += "; it looks like CIFAR-100 (2 label bytes per record)"
    return message


# A batch holds a dict of bytes, ints and one uint8 array: these are all the
# globals such a pickle needs (NumPy 1 and 2 names, any protocol).
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy._core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "scalar"),
    ("numpy._core.numeric", "_frombuffer"), ("_codecs", "encode"),
}


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module.startswith("numpy.core"):         # NumPy 1 names of the same objects
            module = "numpy._core" + module[len("numpy.core"):]
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(
                f"it refers to {module}.{name}, which a CIFAR-10 batch never does")
        if module.startswith("numpy._core") and not hasattr(np, "_core"):
            module = "numpy.core" + module[len("numpy._core"):]     # NumPy 1
        return super().find_class(module, name)


def _unpickle(path):
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        try:
            return _BatchUnpickler(f, encoding="bytes").load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
                IndexError, KeyError, UnicodeDecodeError, zlib.error) as exc:
            hint = "; it is gzipped: extract the archive with 'tar xzf'" \
                if head == _GZIP_MAGIC else ""
            raise ValueError(f"CIFAR-10 python batch {path} cannot be unpickled ({exc}): it "
                             f"is damaged or truncated, or not a batch of "
                             f"{PYTHON.archive}{hint}") from None


def _entry(entries, key, path):
    if not isinstance(entries, dict):
        raise ValueError(f"CIFAR-10 python batch {path} holds a {type(entries).__name__}, "
                         f"expected a dict with b'data' and b'labels'")
    for candidate in (key.encode(), key):
        if candidate in entries:
            return entries[candidate]
    raise ValueError(f"CIFAR-10 python batch {path} has no b'{key}' entry (it has "
                     f"{sorted(map(repr, entries))})")


def _read_python_batch(path):
    """(pixels uint8 [10000, 3072], labels [10000]) of a pickled batch."""
    entries = _unpickle(path)
    pixels = np.asarray(_entry(entries, "data", path))
    labels = np.asarray(_entry(entries, "labels", path))
    if pixels.dtype != np.uint8 or pixels.shape != (IMAGES_PER_BATCH, PIXELS):
        raise ValueError(f"CIFAR-10 python batch {path}: b'data' is {pixels.dtype} "
                         f"{list(pixels.shape)}, expected uint8 [{IMAGES_PER_BATCH}, {PIXELS}]")
    if labels.shape != (IMAGES_PER_BATCH,) or labels.dtype.kind not in "ui":
        raise ValueError(f"CIFAR-10 python batch {path}: b'labels' is {labels.dtype} "
                         f"{list(labels.shape)}, expected {IMAGES_PER_BATCH} integers")
    return pixels, labels


def _check_labels(labels, path):
    bad = np.flatnonzero((labels < 0) | (labels >= len(CLASS_NAMES)))
    if bad.size:
        raise ValueError(f"CIFAR-10 batch {path} holds the label {int(labels[bad[0]])} "
                         f"(image {int(bad[0])}); labels must be 0..{len(CLASS_NAMES) - 1}")


def _read_split(folder, names, read_batch):
    count = len(names) * IMAGES_PER_BATCH
    images = np.empty((count, 32, 32, 3), dtype=np.uint8)
    labels = np.empty(count, dtype=np.int64)
    for index, name in enumerate(names):
        path = os.path.join(folder, name)
        _logger.info("Reading %s", path)
        pixels, batch_labels = read_batch(path)
        _check_labels(batch_labels, path)
        rows = slice(index * IMAGES_PER_BATCH, (index + 1) * IMAGES_PER_BATCH)
        images[rows] = pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)   # CHW -> HWC
        labels[rows] = batch_labels
    return Split(images, labels)


def _class_names(folder, layout):
    """The names in the meta file; the standard ones when it is absent."""
    path = os.path.join(folder, layout.meta_file)
    if not os.path.isfile(path):
        _logger.info("%s not found; using the standard CIFAR-10 class names", path)
        return CLASS_NAMES
    if layout is BINARY:
        with open(path, "rb") as f:
            names = [line.strip().decode("ascii", "replace") for line in f]
    else:
        names = _entry(_unpickle(path), "label_names", path)
        names = [n.decode("ascii", "replace") if isinstance(n, bytes) else str(n)
                 for n in names]
    names = tuple(name for name in names if name)
    if len(names) != len(CLASS_NAMES):
        raise ValueError(f"CIFAR-10 meta file {path} names {len(names)} classes, "
                         f"expected {len(CLASS_NAMES)}")
    return names


def load(data_dir, layout=None):
    """Read CIFAR-10 from ``data_dir`` into ``Splits(train, test, class_names)``.

    ``data_dir`` holds ``cifar-10-batches-bin/`` or ``cifar-10-batches-py/``, or
    is one of them. ``layout`` picks one ('bin' or 'python'); by default the
    binary layout is read when both are there. Images are uint8 NHWC
    [N, 32, 32, 3], labels int64 0..9, in file order.

    >>> train, test, class_names = cifar10.load('~/data')
    >>> train.images.shape, test.labels.dtype
    ((50000, 32, 32, 3), dtype('int64'))
    """
    directory = os.path.expanduser(os.fspath(data_dir))
    found, folder = _locate(directory, _layouts(layout))
    read_batch = _read_binary_batch if found is BINARY else _read_python_batch
    train = _read_split(folder, found.batch_files[:-1], read_batch)
    test = _read_split(folder, found.batch_files[-1:], read_batch)
    return Splits(train, test, _class_names(folder, found))


# -- downloading ---------------------------------------------------------------


def _md5(path):
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fetch(url, path, timeout, layout, directory):
    partial = path + ".part"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, \
                open(partial, "wb") as out:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                out.write(chunk)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        if os.path.exists(partial):
            os.remove(partial)
        reason = getattr(exc, "reason", exc)
        raise ConnectionError(
            f"Could not download {url} ({reason}). If this machine is offline, fetch "
            f"{layout.archive} on one that is online, check that its md5 is {layout.md5}, "
            f"and extract it in {directory} ('tar xzf {layout.archive}')") from None
    os.replace(partial, path)


def _safe_members(tar, layout):
    """The archive's regular files under ``layout.folder``, nothing outside it."""
    members = []
    for member in tar.getmembers():
        parts = member.name.replace("\\", "/").split("/")
        if member.isfile() and parts[0] == layout.folder and ".." not in parts:
            members.append(member)
    names = {m.name.split("/", 1)[-1] for m in members}
    absent = [name for name in layout.batch_files if name not in names]
    if absent:
        raise ValueError(f"{tar.name} is not {layout.archive}: it has no "
                         f"{layout.folder}/{', '.join(absent)}")
    return members


def _extract(archive, directory, layout):
    options = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in _safe_members(tar, layout):
                tar.extract(member, directory, **options)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ValueError(f"{archive} is damaged ({exc}); delete it and download "
                         f"it again") from None


def download(data_dir, layout="bin", url=None, md5=None, timeout=30):
    """Fetch an official CIFAR-10 archive into ``data_dir``, check its md5 and
    extract it; returns the extracted folder (which ``load`` then reads).

    Nothing is fetched when the folder is already complete, nor when the
    archive is already there with the right md5. ``url`` and ``md5`` default to
    the official archive of ``layout`` ('bin' or 'python'). Offline, raises
    ConnectionError within ``timeout`` seconds, saying what to fetch by hand.

    >>> cifar10.download('~/data')           # ~/data/cifar-10-batches-bin
    """
    (chosen,) = _layouts(layout)
    directory = os.path.expanduser(os.fspath(data_dir))
    folder = os.path.join(directory, chosen.folder)
    if not _missing(folder, chosen):
        return folder
    os.makedirs(directory, exist_ok=True)
    archive, expected = os.path.join(directory, chosen.archive), md5 or chosen.md5
    if not (os.path.isfile(archive) and _md5(archive) == expected):
        source = url or SOURCE_URL + chosen.archive
        _logger.info("Downloading %s to %s", source, archive)
        _fetch(source, archive, timeout, chosen, directory)
        actual = _md5(archive)
        if actual != expected:
            os.remove(archive)
            raise ValueError(f"{source} has md5 {actual}, expected {expected}: the "
                             f"download is damaged or not {chosen.archive}; it was deleted")
    _extract(archive, directory, chosen)
    return folder
