"""MNIST reader of TensorFlow 1.x's tutorials, for ``import towerflow as tf`` programs.

::

    from towerflow.examples.tutorials.mnist import input_data
    mnist = input_data.read_data_sets('MNIST_data', one_hot=True)
    batch_xs, batch_ys = mnist.train.next_batch(100)   # float32 [100, 784], float32 [100, 10]
    mnist.test.images, mnist.test.labels                # [10000, 784], [10000, 10]

``read_data_sets`` reads the four standard IDX files from a directory,
gzipped or not (``train-images-idx3-ubyte.gz``, ``train-images-idx3-ubyte`` or
``train-images.idx3-ubyte``). It never downloads: when files are missing it
raises ``FileNotFoundError`` naming the directory, the files to put there and
where the official ones come from.

The first ``validation_size`` (default 5,000) training images become
``mnist.validation``, the rest ``mnist.train``. ``DataSet.next_batch`` follows
TensorFlow: the examples are shuffled at the start of the first epoch and at
each epoch boundary, and a batch that crosses a boundary is the end of the old
epoch followed by the start of the newly shuffled one. Each DataSet shuffles
with its own ``numpy.random.Generator``, seeded by ``seed`` (or, when ``seed``
is None, by the graph-level seed of ``tf.set_random_seed`` if one is set).

Only the standard library and NumPy are imported here.
"""

import collections
import gzip
import logging
import operator
import os
import shlex
import zlib

import numpy as np

from ....data.splits import unusable_directory

__all__ = ["DataSet", "Datasets", "read_data_sets", "load_mnist", "extract_images",
           "extract_labels", "dense_to_one_hot", "DEFAULT_SOURCE_URL"]

# Where TensorFlow 1.x downloaded from (a mirror of Yann LeCun's page).
DEFAULT_SOURCE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
_ORIGINAL_PAGE = "http://yann.lecun.com/exdb/mnist/"

TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"
_ALL_FILES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)

IMAGE_MAGIC = 2051      # idx3-ubyte: unsigned bytes, 3 dimensions
LABEL_MAGIC = 2049      # idx1-ubyte: unsigned bytes, 1 dimension
NUM_CLASSES = 10
_FAKE_NUM_EXAMPLES = 10000
_GZIP_MAGIC = b"\x1f\x8b"

Datasets = collections.namedtuple("Datasets", ["train", "validation", "test"])

_logger = logging.getLogger("towerflow")


# -- IDX files ---------------------------------------------------------------------


def _candidates(gz_name):
    """The names one file may have: ``train-images-idx3-ubyte.gz``,
    ``train-images-idx3-ubyte``, ``train-images.idx3-ubyte(.gz)``."""
    plain = gz_name[:-len(".gz")]
    prefix, _, kind = plain.rpartition("-idx")          # 'train-images', '3-ubyte'
    dotted = f"{prefix}.idx{kind}"
    return (gz_name, plain, dotted, dotted + ".gz")


def _find(directory, gz_name):
    for name in _candidates(gz_name):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    return None


def _missing_files_error(directory, missing, source_url):
    state = unusable_directory(directory) or "missing " + ", ".join(missing)
    needed = "\n".join(f"  {name}" for name in _ALL_FILES)
    quoted = shlex.quote(directory)
    return FileNotFoundError(
        f"MNIST data not found in {directory!r} ({state}). towerflow never downloads "
        f"data at run time; put these four files in that directory:\n{needed}\n"
        f"(uncompressed copies also work, named without '.gz' or as "
        f"'train-images.idx3-ubyte'). The official files are at {source_url} "
        f"(a mirror of {_ORIGINAL_PAGE}), for example:\n"
        f"  mkdir -p {quoted} && cd {quoted} && "
        f"for f in {' '.join(_ALL_FILES)}; do curl -O {source_url}$f; done")


def _read_bytes(path):
    """The contents of ``path``, decompressed when it is gzipped (detected by
    its first bytes, not its name)."""
    with open(path, "rb") as f:
        return _decompress(f.read(), path)


def _decompress(data, name):
    if data[:2] != _GZIP_MAGIC:
        return data
    try:
        return gzip.decompress(data)
    except (EOFError, OSError, zlib.error) as exc:
        raise ValueError(f"MNIST file {name} is a damaged gzip file ({exc}); "
                         f"download it again") from None


def _header(data, name, what, magic, header_size):
    def check_header_length(length):
        if len(data) < length:
            raise ValueError(f"MNIST {what} file {name} is truncated: {len(data)} bytes, "
                             f"less than the {header_size}-byte IDX header")

    check_header_length(4)
    found = int.from_bytes(data[0:4], "big")
    if found != magic:
        hint = ""
        other = {IMAGE_MAGIC: "an image file (2051)", LABEL_MAGIC: "a label file (2049)"}
        if found in other:
            hint = f"; it looks like {other[found]}: are the file names swapped?"
        elif data[:2] == _GZIP_MAGIC:
            hint = "; it is gzipped twice"
        raise ValueError(f"Invalid magic number {found} in MNIST {what} file: {name} "
                         f"(expected {magic}, an idx{3 if magic == IMAGE_MAGIC else 1}"
                         f"-ubyte {what} file){hint}")
    check_header_length(header_size)
    return [int.from_bytes(data[i:i + 4], "big") for i in range(4, header_size, 4)]


def _check_size(data, name, what, header_size, expected, described):
    actual = len(data) - header_size
    if actual < expected:
        raise ValueError(f"MNIST {what} file {name} is truncated: its header says "
                         f"{described} ({expected} bytes after the header), but only "
                         f"{actual} bytes follow")
    if actual > expected:
        raise ValueError(f"MNIST {what} file {name} has {actual - expected} unexpected "
                         f"bytes after the {described} ({expected} bytes) that its "
                         f"header announces")


def _parse_images(data, name):
    count, rows, cols = _header(data, name, "image", IMAGE_MAGIC, 16)
    size = count * rows * cols
    _check_size(data, name, "image", 16, size, f"{count} images of {rows}x{cols} pixels")
    images = np.frombuffer(data, dtype=np.uint8, count=size, offset=16)
    return images.reshape(count, rows, cols, 1).copy()


def _parse_labels(data, name, num_classes=NUM_CLASSES):
    (count,) = _header(data, name, "label", LABEL_MAGIC, 8)
    _check_size(data, name, "label", 8, count, f"{count} labels")
    labels = np.frombuffer(data, dtype=np.uint8, count=count, offset=8).copy()
    if count and int(labels.max()) >= num_classes:
        raise ValueError(f"MNIST label file {name} holds the label {int(labels.max())}; "
                         f"labels must be 0..{num_classes - 1}")
    return labels


def _file_name(f):
    return getattr(f, "name", None) or repr(f)


def extract_images(f):
    """Read an idx3-ubyte image file object (gzipped or not) into a uint8
    array [count, rows, cols, 1]."""
    name = _file_name(f)
    _logger.info("Extracting %s", name)
    return _parse_images(_decompress(f.read(), name), name)


def dense_to_one_hot(labels_dense, num_classes):
    """Class indices [N] -> float32 one-hot rows [N, num_classes]."""
    labels_dense = np.asarray(labels_dense).ravel()
    one_hot = np.zeros((labels_dense.shape[0], num_classes), dtype=np.float32)
    one_hot[np.arange(labels_dense.shape[0]), labels_dense] = 1.0
    return one_hot


def extract_labels(f, one_hot=False, num_classes=NUM_CLASSES):
    """Read an idx1-ubyte label file object (gzipped or not): uint8 [count], or
    float32 one-hot [count, num_classes] with ``one_hot=True``."""
    name = _file_name(f)
    _logger.info("Extracting %s", name)
    labels = _parse_labels(_decompress(f.read(), name), name, num_classes)
    return dense_to_one_hot(labels, num_classes) if one_hot else labels


# -- DataSet -----------------------------------------------------------------------


def _image_dtype(dtype):
    """tf.float32 / np.float32 / 'float32' (or the uint8 forms) -> NumPy dtype."""
    try:
        resolved = np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    except TypeError:
        resolved = None
    if resolved not in (np.dtype(np.uint8), np.dtype(np.float32)):
        raise TypeError(f"Invalid image dtype {dtype!r}, expected uint8 or float32")
    return resolved


def _resolve_seed(seed):
    """An explicit seed wins; otherwise the graph-level seed, as in TensorFlow
    (whose DataSet seeded NumPy from ``random_seed.get_seed(seed)``)."""
    if seed is not None:
        return operator.index(seed)
    try:
        from ....graph import core     # towerflow is already imported by now
        return core.get_default_graph().seed
    except (ImportError, AttributeError):
        return None


class DataSet:
    """Images and labels of one split, served in shuffled mini-batches.

    ``images`` is [N, 784] (``reshape=True``) or [N, rows, cols, 1]; float32
    in [0, 1] for ``dtype=float32``, uint8 0..255 for ``dtype=uint8``.
    """

    def __init__(self, images, labels, fake_data=False, one_hot=False,
                 dtype=np.float32, reshape=True, seed=None):
        self._dtype = _image_dtype(dtype)
        self._rng = np.random.default_rng(_resolve_seed(seed))
        self._fake = bool(fake_data)
        if self._fake:
            self.one_hot = one_hot
            self._num_examples = _FAKE_NUM_EXAMPLES
            images = np.zeros((0, 784), dtype=self._dtype)
            labels = np.zeros((0, NUM_CLASSES) if one_hot else (0,),
                              dtype=np.float32 if one_hot else np.uint8)
        else:
            images, labels = np.asarray(images), np.asarray(labels)
            if images.shape[:1] != labels.shape[:1]:
                raise ValueError(f"images and labels differ in count: images.shape: "
                                 f"{images.shape} labels.shape: {labels.shape}")
            self._num_examples = images.shape[0]
            self.one_hot = bool(one_hot) or labels.ndim == 2
            if reshape and images.ndim == 4:
                # [examples, rows, columns, depth] -> [examples, rows*columns]
                if images.shape[3] != 1:
                    raise ValueError(f"reshape=True needs single-channel images "
                                     f"[N, rows, cols, 1]; got shape {images.shape}")
                images = images.reshape(images.shape[0], images.shape[1] * images.shape[2])
            if self._dtype == np.float32:
                if images.dtype.kind in "uib":
                    # [0, 255] -> [0.0, 1.0], computed exactly as TensorFlow did.
                    images = np.multiply(images.astype(np.float32), 1.0 / 255.0)
                else:
                    images = images.astype(np.float32, copy=False)
        self._images = images
        self._labels = labels
        self._epochs_completed = 0
        self._index_in_epoch = 0

    @property
    def images(self):
        return self._images

    @property
    def labels(self):
        return self._labels

    @property
    def num_examples(self):
        return self._num_examples

    @property
    def epochs_completed(self):
        return self._epochs_completed

    def _shuffle(self):
        perm = self._rng.permutation(self._num_examples)
        self._images = self._images[perm]
        self._labels = self._labels[perm]

    def _fake_batch(self, batch_size):
        images = np.ones((batch_size, 784), dtype=self._dtype)
        if self.one_hot:
            labels = np.zeros((batch_size, NUM_CLASSES), dtype=np.float32)
            labels[:, 0] = 1.0
        else:
            labels = np.zeros((batch_size,), dtype=np.uint8)
        return images, labels

    def next_batch(self, batch_size, fake_data=False, shuffle=True):
        """Return the next ``batch_size`` examples as (images, labels)."""
        batch_size = operator.index(batch_size)
        if fake_data or self._fake:
            return self._fake_batch(batch_size)
        num = self._num_examples
        if not 0 <= batch_size <= num:
            raise ValueError(f"batch_size must be between 0 and the {num} examples of "
                             f"this DataSet (one epoch at most); received {batch_size}")
        start = self._index_in_epoch
        # Shuffle for the first epoch.
        if self._epochs_completed == 0 and start == 0 and shuffle:
            self._shuffle()
        if start + batch_size > num:
            # Finished the epoch: the rest of it, then the start of the next one.
            self._epochs_completed += 1
            images_rest = self._images[start:num]
            labels_rest = self._labels[start:num]
            if shuffle:
                self._shuffle()
            self._index_in_epoch = end = batch_size - (num - start)
            return (np.concatenate((images_rest, self._images[:end]), axis=0),
                    np.concatenate((labels_rest, self._labels[:end]), axis=0))
        self._index_in_epoch = end = start + batch_size
        return self._images[start:end], self._labels[start:end]

    def __repr__(self):
        return (f"<DataSet num_examples={self._num_examples} "
                f"images={self._images.dtype}{list(self._images.shape)} "
                f"labels={self._labels.dtype}{list(self._labels.shape)}>")


# -- read_data_sets ----------------------------------------------------------------


def read_data_sets(train_dir, fake_data=False, one_hot=False, dtype=np.float32,
                   reshape=True, validation_size=5000, seed=None, source_url=None):
    """Read MNIST from ``train_dir`` into ``Datasets(train, validation, test)``.

    ``dtype`` is ``tf.float32`` (pixels scaled to [0, 1]) or ``tf.uint8``
    (0..255); NumPy types work too. ``one_hot=True`` gives float32 labels
    [N, 10], otherwise uint8 class indices [N]. The first ``validation_size``
    training examples form ``validation``. ``source_url`` only changes the
    address named when files are missing: nothing is downloaded.
    """
    if fake_data:
        def fake():
            return DataSet([], [], fake_data=True, one_hot=one_hot, dtype=dtype, seed=seed)
        return Datasets(train=fake(), validation=fake(), test=fake())

    _image_dtype(dtype)                     # fail before reading anything
    source_url = source_url or DEFAULT_SOURCE_URL
    directory = os.path.expanduser(os.fspath(train_dir))
    paths = {name: _find(directory, name) for name in _ALL_FILES}
    missing = [name for name, path in paths.items() if path is None]
    if missing:
        raise _missing_files_error(directory, missing, source_url)

    def images(name):
        _logger.info("Extracting %s", paths[name])
        return _parse_images(_read_bytes(paths[name]), paths[name])

    def labels(name):
        _logger.info("Extracting %s", paths[name])
        values = _parse_labels(_read_bytes(paths[name]), paths[name])
        return dense_to_one_hot(values, NUM_CLASSES) if one_hot else values

    def split(images_name, labels_name):
        x, y = images(images_name), labels(labels_name)
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"MNIST files do not match: {paths[images_name]} holds "
                             f"{x.shape[0]} images but {paths[labels_name]} holds "
                             f"{y.shape[0]} labels")
        return x, y

    train_images, train_labels = split(TRAIN_IMAGES, TRAIN_LABELS)
    test_images, test_labels = split(TEST_IMAGES, TEST_LABELS)

    validation_size = operator.index(validation_size)
    if not 0 <= validation_size <= len(train_images):
        raise ValueError(f"Validation size should be between 0 and {len(train_images)}. "
                         f"Received: {validation_size}.")
    validation_images = train_images[:validation_size]
    validation_labels = train_labels[:validation_size]
    train_images = train_images[validation_size:]
    train_labels = train_labels[validation_size:]

    options = dict(dtype=dtype, reshape=reshape, seed=seed)
    return Datasets(train=DataSet(train_images, train_labels, **options),
                    validation=DataSet(validation_images, validation_labels, **options),
                    test=DataSet(test_images, test_labels, **options))


def load_mnist(train_dir="MNIST-data"):
    """``read_data_sets(train_dir)``, as TensorFlow's ``load_mnist``."""
    return read_data_sets(train_dir)
