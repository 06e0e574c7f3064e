"""The MNIST tutorial reader (towerflow.examples.tutorials.mnist.input_data):
sizes, pixel and label formats, the official bytes, gzipped and plain files,
TensorFlow's next_batch semantics, and clear errors for bad or missing files.

Tests marked with ``needs_data`` read ``../shared/data`` (beside the project
root) and are skipped when it is absent; the others build their own files.
"""

import gzip
import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import towerflow as tf
from towerflow.examples.tutorials.mnist import input_data

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SMALL = DATA / "mnist-small"
OFFICIAL = DATA / "mnist"
# md5 of the official gz files, from shared/data/README.md.
T10K_IMAGES_MD5 = "9fb629c4189551a2d022fa330f9573f3"
T10K_LABELS_MD5 = "ec29112dd5afa0611ce80d1b7f02629c"
FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
         "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]

needs_data = pytest.mark.skipif(
    not SMALL.is_dir(),
    reason=f"MNIST test data not found at {SMALL} (shared/data beside the project root)")
needs_official = pytest.mark.skipif(
    not OFFICIAL.is_dir(), reason=f"official MNIST t10k files not found at {OFFICIAL}")


def read_small(**kwargs):
    return input_data.read_data_sets(str(SMALL), **kwargs)


@pytest.fixture(scope="module")
def small_uint8():
    """The mnist-small files in file order: (train images, train labels,
    test images, test labels), uint8, images [N, 28, 28, 1]."""
    if not SMALL.is_dir():
        pytest.skip(f"MNIST test data not found at {SMALL}")
    m = read_small(dtype=np.uint8, reshape=False, validation_size=0)
    return m.train.images, m.train.labels, m.test.images, m.test.labels


def write_idx_images(path, images, magic=2051, gz=False):
    n, rows, cols = images.shape[:3]
    data = b"".join(v.to_bytes(4, "big") for v in (magic, n, rows, cols))
    data += images.astype(np.uint8).tobytes()
    Path(path).write_bytes(gzip.compress(data) if gz else data)


def write_idx_labels(path, labels, magic=2049, gz=False):
    data = magic.to_bytes(4, "big") + len(labels).to_bytes(4, "big")
    data += np.asarray(labels, dtype=np.uint8).tobytes()
    Path(path).write_bytes(gzip.compress(data) if gz else data)


@pytest.fixture
def tiny_dir(tmp_path):
    """A directory of valid uncompressed MNIST-format files: 12 train, 6 test
    images of 28x28, the pixel values encoding the example's index."""
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, size=(12, 28, 28), dtype=np.uint8)
    test = rng.integers(0, 256, size=(6, 28, 28), dtype=np.uint8)
    write_idx_images(tmp_path / "train-images-idx3-ubyte", train)
    write_idx_labels(tmp_path / "train-labels-idx1-ubyte", np.arange(12) % 10)
    write_idx_images(tmp_path / "t10k-images-idx3-ubyte", test)
    write_idx_labels(tmp_path / "t10k-labels-idx1-ubyte", np.arange(6))
    return tmp_path


def indexed(n, **kwargs):
    """A DataSet whose image i is [i] and label i is i: batches show which
    examples they hold."""
    return input_data.DataSet(np.arange(n).reshape(n, 1), np.arange(n),
                              dtype=np.uint8, **kwargs)


def served(ds, batch_size, calls):
    """Call next_batch ``calls`` times; check images and labels stay paired;
    return the batches' example indices."""
    batches = []
    for _ in range(calls):
        x, y = ds.next_batch(batch_size)
        assert x.shape == (batch_size, 1)
        np.testing.assert_array_equal(x[:, 0], y)
        batches.append(y.copy())
    return batches


# -- sizes and formats --------------------------------------------------------------


@needs_data
def test_tutorial_call_gives_tf_sizes_and_types():
    mnist = read_small(one_hot=True)
    assert isinstance(mnist, input_data.Datasets)
    assert mnist._fields == ("train", "validation", "test")
    # 8,000 training images: the default validation_size=5000 leaves 3,000.
    assert (mnist.train.num_examples, mnist.validation.num_examples,
            mnist.test.num_examples) == (3000, 5000, 2000)
    batch_xs, batch_ys = mnist.train.next_batch(100)
    assert batch_xs.shape == (100, 784) and batch_xs.dtype == np.float32
    assert batch_ys.shape == (100, 10) and batch_ys.dtype == np.float32
    assert mnist.test.images.shape == (2000, 784)
    assert mnist.test.labels.shape == (2000, 10)
    assert mnist.train.epochs_completed == 0


@needs_data
@pytest.mark.parametrize("validation_size", [0, 1, 1000, 8000])
def test_validation_is_the_first_training_examples(small_uint8, validation_size):
    train_x, train_y, _, _ = small_uint8
    m = read_small(dtype=tf.uint8, reshape=False, validation_size=validation_size)
    assert m.validation.num_examples == validation_size
    assert m.train.num_examples == 8000 - validation_size
    np.testing.assert_array_equal(m.validation.images, train_x[:validation_size])
    np.testing.assert_array_equal(m.validation.labels, train_y[:validation_size])
    np.testing.assert_array_equal(m.train.images, train_x[validation_size:])
    np.testing.assert_array_equal(m.train.labels, train_y[validation_size:])
    assert m.test.num_examples == 2000


@needs_data
@pytest.mark.parametrize("validation_size", [-1, 8001])
def test_validation_size_out_of_range_is_tfs_value_error(validation_size):
    with pytest.raises(ValueError) as err:
        read_small(validation_size=validation_size)
    assert str(err.value) == (f"Validation size should be between 0 and 8000. "
                              f"Received: {validation_size}.")


@needs_data
@pytest.mark.parametrize("dtype", [tf.float32, np.float32, "float32"])
def test_float32_pixels_are_scaled_to_unit_range(small_uint8, dtype):
    m = read_small(dtype=dtype, validation_size=0)
    images = m.train.images
    assert images.dtype == np.float32 and images.shape == (8000, 784)
    assert images.min() == 0.0 and images.max() == 1.0
    expected = small_uint8[0].reshape(8000, 784).astype(np.float32) * (1.0 / 255.0)
    np.testing.assert_array_equal(images, expected)
    assert m.test.images.dtype == np.float32 and m.test.images.max() <= 1.0


@needs_data
def test_uint8_keeps_bytes_and_reshape_false_keeps_28x28x1(small_uint8):
    flat = read_small(dtype=tf.uint8, validation_size=0)
    assert flat.train.images.dtype == np.uint8 and flat.train.images.shape == (8000, 784)
    assert flat.train.images.max() == 255
    assert small_uint8[0].shape == (8000, 28, 28, 1)
    np.testing.assert_array_equal(flat.train.images, small_uint8[0].reshape(8000, 784))


@needs_data
@pytest.mark.parametrize("dtype", [tf.float64, np.int32, "int64"])
def test_other_image_dtypes_are_refused(dtype):
    with pytest.raises(TypeError, match="expected uint8 or float32"):
        read_small(dtype=dtype)


@needs_data
def test_one_hot_rows_sum_to_one_and_match_integer_labels():
    dense = read_small(validation_size=0)
    hot = read_small(one_hot=True, validation_size=0)
    for d, h, n in [(dense.train, hot.train, 8000), (dense.test, hot.test, 2000)]:
        assert d.labels.dtype == np.uint8 and d.labels.shape == (n,)
        assert d.labels.min() == 0 and d.labels.max() == 9
        assert set(np.unique(d.labels)) == set(range(10))
        assert h.labels.dtype == np.float32 and h.labels.shape == (n, 10)
        assert set(np.unique(h.labels)) == {0.0, 1.0}
        np.testing.assert_array_equal(h.labels.sum(axis=1), np.ones(n))
        np.testing.assert_array_equal(h.labels.argmax(axis=1), d.labels)


# -- the official bytes ----------------------------------------------------------------


@needs_official
def test_official_t10k_md5_and_bytes_read(small_uint8):
    # The README's md5s are of the .gz files themselves (byte-identical to the
    # original release); the reader's arrays must be exactly their contents.
    images_gz = (OFFICIAL / "t10k-images-idx3-ubyte.gz").read_bytes()
    labels_gz = (OFFICIAL / "t10k-labels-idx1-ubyte.gz").read_bytes()
    assert hashlib.md5(images_gz).hexdigest() == T10K_IMAGES_MD5
    assert hashlib.md5(labels_gz).hexdigest() == T10K_LABELS_MD5

    with open(OFFICIAL / "t10k-images-idx3-ubyte.gz", "rb") as f:
        images = input_data.extract_images(f)
    with open(OFFICIAL / "t10k-labels-idx1-ubyte.gz", "rb") as f:
        labels = input_data.extract_labels(f)
    assert images.shape == (10000, 28, 28, 1) and images.dtype == np.uint8
    assert labels.shape == (10000,) and labels.dtype == np.uint8
    raw_images = gzip.decompress(images_gz)
    assert images.tobytes() == raw_images[16:]
    assert gzip.decompress(labels_gz)[8:] == labels.tobytes()
    assert labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]   # the well-known first ten

    # mnist-small is the same 10,000 images: train = first 8,000, t10k = last 2,000.
    train_x, train_y, test_x, test_y = small_uint8
    np.testing.assert_array_equal(train_x, images[:8000])
    np.testing.assert_array_equal(test_x, images[8000:])
    np.testing.assert_array_equal(train_y, labels[:8000])
    np.testing.assert_array_equal(test_y, labels[8000:])


@needs_official
def test_extract_labels_one_hot():
    with open(OFFICIAL / "t10k-labels-idx1-ubyte.gz", "rb") as f:
        hot = input_data.extract_labels(f, one_hot=True)
    assert hot.shape == (10000, 10) and hot.dtype == np.float32
    assert hot[0].tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 0, 0]


# -- gzipped or not ----------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("spelling", ["plain", "dotted", "dotted.gz"])
def test_gz_and_uncompressed_files_give_identical_arrays(tmp_path, spelling):
    for name in FILES:
        data = gzip.decompress((SMALL / name).read_bytes())
        plain = name[:-3]                                  # train-images-idx3-ubyte
        dotted = plain.replace("-idx", ".idx")             # train-images.idx3-ubyte
        if spelling == "plain":
            (tmp_path / plain).write_bytes(data)
        elif spelling == "dotted":
            (tmp_path / dotted).write_bytes(data)
        else:
            (tmp_path / (dotted + ".gz")).write_bytes(gzip.compress(data))
    for kwargs in [dict(one_hot=True), dict(dtype=np.uint8, reshape=False)]:
        from_gz = read_small(**kwargs)
        from_copy = input_data.read_data_sets(tmp_path, **kwargs)   # a Path works too
        for split in ("train", "validation", "test"):
            a, b = getattr(from_gz, split), getattr(from_copy, split)
            assert a.images.dtype == b.images.dtype and a.labels.dtype == b.labels.dtype
            np.testing.assert_array_equal(a.images, b.images)
            np.testing.assert_array_equal(a.labels, b.labels)


def test_gzip_is_detected_by_content_not_name(tiny_dir):
    path = tiny_dir / "train-images-idx3-ubyte"
    expected = input_data.read_data_sets(tiny_dir, validation_size=0).train.images
    path.write_bytes(gzip.compress(path.read_bytes()))     # gzipped, but no .gz
    got = input_data.read_data_sets(tiny_dir, validation_size=0).train.images
    np.testing.assert_array_equal(got, expected)


# -- next_batch --------------------------------------------------------------------------


def test_next_batch_serves_every_example_once_per_epoch():
    ds = indexed(1000, seed=1)
    for epoch in range(3):
        batches = served(ds, 100, 10)
        order = np.concatenate(batches)
        assert sorted(order.tolist()) == list(range(1000))
        assert ds.epochs_completed == epoch      # counted when the next epoch starts


@needs_data
def test_next_batch_on_mnist_covers_each_image_once_with_its_label():
    mnist = read_small(dtype=np.uint8, seed=0)
    train = mnist.train
    original_x, original_y = train.images.copy(), train.labels.copy()
    key = {row.tobytes(): [] for row in original_x}
    for row, label in zip(original_x, original_y):
        key[row.tobytes()].append(int(label))
    for _ in range(2):
        xs, ys = zip(*(train.next_batch(100) for _ in range(30)))
        xs, ys = np.concatenate(xs), np.concatenate(ys)
        # the epoch is a permutation of the training set, labels still paired
        np.testing.assert_array_equal(np.sort(xs.view(f"V{xs.shape[1]}").ravel()),
                                      np.sort(original_x.view("V784").ravel()))
        assert all(int(y) in key[x.tobytes()] for x, y in zip(xs, ys))
        assert not np.array_equal(xs, original_x)


def test_first_epoch_is_shuffled_and_images_property_follows():
    ds = indexed(50, seed=2)
    np.testing.assert_array_equal(ds.images[:, 0], np.arange(50))   # file order until used
    x, _ = ds.next_batch(50)
    assert x[:, 0].tolist() != list(range(50))
    np.testing.assert_array_equal(ds.images, x)                      # TF: the shuffled copy


def test_next_batch_reshuffles_between_epochs():
    ds = indexed(100, seed=3)
    epochs = [np.concatenate(served(ds, 10, 10)) for _ in range(4)]
    for a, b in zip(epochs, epochs[1:]):
        assert sorted(a.tolist()) == sorted(b.tolist()) == list(range(100))
        assert a.tolist() != b.tolist()


def test_batches_cross_epoch_boundaries_like_tf():
    # TF: the served indices are epoch permutations laid end to end; each batch
    # is the next window of that stream, so a batch crossing a boundary is the
    # rest of the old epoch and the start of the newly shuffled one.
    n, batch = 10, 4
    ds = indexed(n, seed=4)
    counts, batches = [], []
    for _ in range(15):                                  # 60 indices: 6 epochs
        batches += served(ds, batch, 1)
        counts.append(ds.epochs_completed)
    stream = np.concatenate(batches)
    epochs = stream.reshape(6, n)
    for order in epochs:
        assert sorted(order.tolist()) == list(range(n))
    assert len({tuple(order) for order in epochs}) > 1
    # batch 3 holds epoch 1's last two and epoch 2's first two
    np.testing.assert_array_equal(batches[2], np.concatenate([epochs[0][8:], epochs[1][:2]]))
    # epochs_completed goes up on the call that starts the next epoch (TF's
    # `start + batch_size > num_examples`): calls 3, 6 (a window 20..23), 8, 11, 13.
    assert counts == [0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 5]


def test_exact_fit_epoch_is_counted_on_the_next_call():
    ds = indexed(10, seed=5)
    served(ds, 5, 2)
    assert ds.epochs_completed == 0                      # exactly used up, not crossed
    served(ds, 5, 1)
    assert ds.epochs_completed == 1


def test_shuffle_false_serves_file_order_and_wraps():
    ds = indexed(10)
    batches = [ds.next_batch(4, shuffle=False)[1].tolist() for _ in range(4)]
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5]]
    assert ds.epochs_completed == 1


def test_batch_larger_than_the_dataset_is_refused():
    ds = indexed(10)
    with pytest.raises(ValueError, match="between 0 and the 10 examples"):
        ds.next_batch(11)


def test_seed_makes_the_order_reproducible():
    def stream(**kwargs):
        return np.concatenate(served(indexed(100, **kwargs), 30, 12)).tolist()

    assert stream(seed=7) == stream(seed=7)
    assert stream(seed=7) != stream(seed=8)
    assert stream() != stream()                          # unseeded: fresh entropy


@needs_data
def test_read_data_sets_seed_is_reproducible():
    a, b, c = read_small(seed=11), read_small(seed=11), read_small(seed=12)
    for _ in range(35):                                  # past the end of the first epoch
        xa, ya = a.train.next_batch(100)
        xb, yb = b.train.next_batch(100)
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    first_11 = read_small(seed=11).train.next_batch(100)[1]
    first_12 = c.train.next_batch(100)[1]
    assert not np.array_equal(first_11, first_12)


def test_graph_level_seed_is_used_when_no_seed_is_given():
    tf.set_random_seed(42)
    first = np.concatenate(served(indexed(100), 30, 5)).tolist()
    second = np.concatenate(served(indexed(100), 30, 5)).tolist()
    assert first == second


def test_shuffling_leaves_numpys_global_rng_alone():
    np.random.seed(123)
    state = np.random.get_state()
    served(indexed(100, seed=1), 30, 10)
    after = np.random.get_state()
    assert state[0] == after[0] and np.array_equal(state[1], after[1])
    assert state[2:] == after[2:]


def test_dataset_from_arrays_matches_tf_conversions():
    images = np.full((3, 28, 28, 1), 255, dtype=np.uint8)
    ds = input_data.DataSet(images, np.array([1, 2, 3]))
    assert ds.images.shape == (3, 784) and ds.images.dtype == np.float32
    assert ds.images.max() == 1.0 and ds.num_examples == 3
    with pytest.raises(ValueError, match="differ in count"):
        input_data.DataSet(images, np.array([1, 2]))


def test_fake_data_needs_no_files():
    m = input_data.read_data_sets("/nonexistent/MNIST_data", fake_data=True, one_hot=True)
    assert m.train.num_examples == 10000
    x, y = m.train.next_batch(5, fake_data=True)
    assert x.shape == (5, 784) and np.all(x == 1)
    assert y.tolist() == [[1.0] + [0.0] * 9] * 5
    x, y = input_data.read_data_sets("x", fake_data=True).test.next_batch(3)
    assert y.tolist() == [0, 0, 0]


def test_dense_to_one_hot():
    hot = input_data.dense_to_one_hot(np.array([0, 3, 9], dtype=np.uint8), 10)
    assert hot.dtype == np.float32
    np.testing.assert_array_equal(hot.argmax(1), [0, 3, 9])
    np.testing.assert_array_equal(hot.sum(1), [1, 1, 1])


# -- clear errors ------------------------------------------------------------------------


def test_corrupt_image_magic_number_names_the_file(tiny_dir):
    path = tiny_dir / "train-images-idx3-ubyte"
    data = bytearray(path.read_bytes())
    data[0:4] = (1234).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError) as err:
        input_data.read_data_sets(tiny_dir)
    message = str(err.value)
    assert "Invalid magic number 1234 in MNIST image file" in message
    assert str(path) in message and "expected 2051" in message


def test_label_file_in_place_of_images_says_so(tiny_dir):
    images = tiny_dir / "t10k-images-idx3-ubyte"
    images.write_bytes((tiny_dir / "t10k-labels-idx1-ubyte").read_bytes())
    with pytest.raises(ValueError, match=r"Invalid magic number 2049 .*label file"):
        input_data.read_data_sets(tiny_dir, validation_size=0)


def test_corrupt_label_magic_number_names_the_file(tiny_dir):
    path = tiny_dir / "train-labels-idx1-ubyte"
    data = bytearray(path.read_bytes())
    data[3] = 0
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError) as err:
        input_data.read_data_sets(tiny_dir, validation_size=0)
    assert "Invalid magic number 2048 in MNIST label file" in str(err.value)
    assert str(path) in str(err.value) and "expected 2049" in str(err.value)


def test_truncated_image_file_says_what_was_expected(tiny_dir):
    path = tiny_dir / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError) as err:
        input_data.read_data_sets(tiny_dir, validation_size=0)
    message = str(err.value)
    assert str(path) in message and "truncated" in message
    assert "12 images of 28x28 pixels (9408 bytes" in message and "9308 bytes follow" in message


def test_truncated_header_and_label_file(tiny_dir):
    images = tiny_dir / "t10k-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:10])
    with pytest.raises(ValueError, match="truncated: 10 bytes, less than the 16-byte"):
        input_data.read_data_sets(tiny_dir, validation_size=0)
    labels = tiny_dir / "train-labels-idx1-ubyte"
    labels.write_bytes(labels.read_bytes()[:-1])
    with pytest.raises(ValueError, match=r"label file .* truncated: .*12 labels"):
        input_data.read_data_sets(tiny_dir, validation_size=0)


def test_truncated_gzip_file_is_a_clear_error(tiny_dir):
    plain = tiny_dir / "train-images-idx3-ubyte"
    gz = tiny_dir / "train-images-idx3-ubyte.gz"          # preferred over the plain one
    gz.write_bytes(gzip.compress(plain.read_bytes())[:-20])
    with pytest.raises(ValueError) as err:
        input_data.read_data_sets(tiny_dir, validation_size=0)
    assert str(gz) in str(err.value) and "damaged gzip" in str(err.value)


def test_image_and_label_counts_must_match(tiny_dir):
    write_idx_labels(tiny_dir / "train-labels-idx1-ubyte", np.arange(11) % 10)
    with pytest.raises(ValueError) as err:
        input_data.read_data_sets(tiny_dir, validation_size=0)
    message = str(err.value)
    assert "holds 12 images" in message and "holds 11 labels" in message
    assert "train-images-idx3-ubyte" in message and "train-labels-idx1-ubyte" in message


def test_labels_out_of_range_are_refused(tiny_dir):
    write_idx_labels(tiny_dir / "t10k-labels-idx1-ubyte", [0, 1, 2, 3, 4, 10])
    with pytest.raises(ValueError, match="holds the label 10; labels must be 0..9"):
        input_data.read_data_sets(tiny_dir, validation_size=0, one_hot=True)


def test_missing_directory_lists_the_files_to_put_there(tmp_path):
    missing = tmp_path / "MNIST_data"
    with pytest.raises(FileNotFoundError) as err:
        input_data.read_data_sets(str(missing), one_hot=True)
    message = str(err.value)
    assert str(missing) in message and "does not exist" in message
    for name in FILES:
        assert name in message
    assert input_data.DEFAULT_SOURCE_URL in message and "never downloads" in message
    assert not missing.exists()                          # nothing created or fetched


def test_partly_missing_directory_names_the_missing_files(tiny_dir):
    (tiny_dir / "t10k-labels-idx1-ubyte").unlink()
    (tiny_dir / "train-images-idx3-ubyte").unlink()
    with pytest.raises(FileNotFoundError) as err:
        input_data.read_data_sets(tiny_dir, source_url="https://example.org/mnist/")
    message = str(err.value)
    assert "missing train-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz" in message
    assert "https://example.org/mnist/" in message


def test_tiny_files_read_back(tiny_dir):
    m = input_data.read_data_sets(tiny_dir, validation_size=2, dtype=np.uint8)
    assert (m.train.num_examples, m.validation.num_examples, m.test.num_examples) == (10, 2, 6)
    assert m.test.labels.tolist() == [0, 1, 2, 3, 4, 5]


# -- import cost ------------------------------------------------------------------------


def test_importing_the_reader_loads_nothing_heavy():
    code = ("import sys, towerflow; before = set(sys.modules); "
            "from towerflow.examples.tutorials.mnist import input_data; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    heavy = ("urllib", "http", "requests", "ssl", "socket", "tensorflow", "scipy",
             "pandas", "PIL", "matplotlib", "cupy", "tqdm")
    assert not [m for m in out if m.split(".")[0] in heavy], out
