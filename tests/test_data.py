"""towerflow.data: CIFAR-10 in both official layouts (and clear errors for bad or
missing files), the download helper without a network, scikit-learn's digits,
the MNIST re-export, augmentation, the input Pipeline (order, resume, prefetch
thread) and tower shard sizes.

The real CIFAR-10 files are built once per session from ../shared/data (beside
the project root) by its make_cifar10.py, which needs Pillow; those tests skip
when it is absent. The error tests write small stand-in files of their own.
"""

import gc
import hashlib
import io
import pickle
import subprocess
import sys
import tarfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from towerflow import data
from towerflow.data import Pipeline, augment, cifar10, digits, shard_sizes
from towerflow.examples.tutorials.mnist import input_data
from towerflow.parallel import sharding

BIN, PY = cifar10.BINARY, cifar10.PYTHON
RECORDS = cifar10.IMAGES_PER_BATCH
THREAD_NAME = "towerflow-data-prefetch"


# -- CIFAR-10: the real files ----------------------------------------------------


def test_cifar10_both_layouts_give_the_same_data(cifar_dir):
    binary = cifar10.load(cifar_dir, layout="bin")
    python = cifar10.load(cifar_dir / PY.folder)          # the layout folder itself
    for split, count in ((binary.train, 50000), (binary.test, 10000)):
        assert split.images.shape == (count, 32, 32, 3) and split.images.dtype == np.uint8
        assert split.labels.shape == (count,) and split.labels.dtype == np.int64
        assert np.bincount(split.labels).tolist() == [count // 10] * 10
    for mine, theirs in zip(binary[:2], python[:2]):
        np.testing.assert_array_equal(mine.images, theirs.images)
        np.testing.assert_array_equal(mine.labels, theirs.labels)
    assert binary.class_names == python.class_names == cifar10.CLASS_NAMES
    assert binary.class_names[0] == "airplane" and binary.class_names[9] == "truck"


# -- CIFAR-10: stand-in files and errors ------------------------------------------


def write_layout(root, layout):
    """A complete stand-in layout (no meta file): random pixels, labels 0..9 in turn."""
    rng = np.random.default_rng(0)                       # the same images in both layouts
    folder = Path(root) / layout.folder
    folder.mkdir(parents=True)
    for name in layout.batch_files:
        pixels = rng.integers(0, 256, (RECORDS, 3072), dtype=np.uint8)
        labels = np.arange(RECORDS, dtype=np.uint8) % 10
        if layout is BIN:
            np.concatenate([labels[:, None], pixels], axis=1).tofile(folder / name)
        else:
            entries = {b"data": pixels, b"labels": labels.tolist()}
            (folder / name).write_bytes(pickle.dumps(entries))
    return folder


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    root = tmp_path_factory.mktemp("stand_in")
    return write_layout(root, BIN), write_layout(root, PY)


def copy_with(tmp_path, folder, **replaced):
    """``folder`` linked file by file into tmp_path, with files replaced by bytes."""
    out = tmp_path / folder.name
    out.mkdir()
    for source in folder.iterdir():
        (out / source.name).symlink_to(source)
    for name, content in replaced.items():
        (out / name).unlink(missing_ok=True)
        if content is not None:
            (out / name).write_bytes(content)
    return out


def test_missing_files_say_what_to_put_where(tmp_path, stand_ins):
    with pytest.raises(FileNotFoundError) as info:
        cifar10.load(tmp_path / "nowhere")
    message = str(info.value)
    for expected in ("nowhere", "does not exist", "cifar-10-batches-bin", "data_batch_5.bin",
                     "cifar-10-batches-py", "cifar-10-binary.tar.gz", BIN.md5, PY.md5):
        assert expected in message
    copy_with(tmp_path, stand_ins[0], **{"test_batch.bin": None})
    with pytest.raises(FileNotFoundError, match=r"cifar-10-batches-bin lacks test_batch\.bin"):
        cifar10.load(tmp_path)


def test_pixels_are_hwc_in_record_order_and_meta_files_optional(stand_ins):
    binary, python = cifar10.load(stand_ins[0]), cifar10.load(stand_ins[1])
    np.testing.assert_equal(binary, python)
    assert binary.class_names == cifar10.CLASS_NAMES               # no meta file: standard
    record = np.fromfile(stand_ins[0] / "test_batch.bin", np.uint8, 2 * 3073)[3073:]
    assert binary.test.labels[1] == record[0] == 1
    np.testing.assert_array_equal(binary.test.images[1], record[1:].reshape(3, 32, 32)
                                  .transpose(1, 2, 0))
    np.testing.assert_array_equal(binary.test.images[1, :, :, 2], record[2049:].reshape(32, 32))


BATCH_BYTES = cifar10.RECORD_BYTES * RECORDS


@pytest.mark.parametrize("name, content, pattern", [
    ("data_batch_3.bin", b"\0" * 5000, r"data_batch_3\.bin is truncated: 5,000 bytes, "
                                       r"expected 30,730,000 bytes \(10,000 records of 3,073"),
    ("test_batch.bin", b"\0" * (BATCH_BYTES + 10), r"test_batch\.bin has 30,730,010 bytes, "
                                                    r"more than"),
    ("data_batch_1.bin", b"\x1f\x8b" + b"\0" * 100, r"data_batch_1\.bin .* it is gzipped"),
    ("data_batch_2.bin", b"\x0c" + b"\0" * (BATCH_BYTES - 1), r"data_batch_2\.bin holds the "
                                                              r"label 12 \(image 0\)"),
    (BIN.meta_file, b"cat\ndog\n", r"batches\.meta\.txt names 2 classes, expected 10"),
], ids=["truncated", "too-long", "gzipped", "bad-label", "bad-meta"])
def test_damaged_binary_files_are_named(tmp_path, stand_ins, name, content, pattern):
    folder = copy_with(tmp_path, stand_ins[0], **{name: content})
    with pytest.raises(ValueError, match=pattern):
        cifar10.load(folder)


class Exploit:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


@pytest.mark.parametrize("name, make, pattern", [
    ("data_batch_4", lambda good, tmp: good[:1000],
     r"data_batch_4 cannot be unpickled \(pickle data was truncated\)"),
    ("test_batch", lambda good, tmp: pickle.dumps({b"data": np.zeros((10, 3072), np.uint8),
                                                   b"labels": [0] * 10}),
     r"test_batch: b'data' is uint8 \[10, 3072\], expected uint8 \[10000, 3072\]"),
    ("data_batch_1", lambda good, tmp: pickle.dumps({b"pixels": 1}), r"has no b'data' entry"),
    ("data_batch_2", lambda good, tmp: pickle.dumps({b"data": Exploit(tmp / "ran")}),
     r"data_batch_2 cannot be unpickled \(it refers to pathlib.*never does\)"),
], ids=["truncated", "wrong-shape", "no-data", "runs-code"])
def test_damaged_python_files_are_named(tmp_path, stand_ins, name, make, pattern):
    good = (stand_ins[1] / name).read_bytes()
    folder = copy_with(tmp_path, stand_ins[1], **{name: make(good, tmp_path)})
    with pytest.raises(ValueError, match=pattern):
        cifar10.load(folder)
    assert not (tmp_path / "ran").exists()        # the pickle ran no code


# -- CIFAR-10: download, never touching the network ------------------------------


def archive_of(tmp_path, members):
    """A .tar.gz of {name: bytes}; returns (path, md5)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    path = tmp_path / "served.tar.gz"
    path.write_bytes(buffer.getvalue())
    return path, hashlib.md5(buffer.getvalue()).hexdigest()


@pytest.fixture
def offline(monkeypatch):
    def refuse(url, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_download_checks_md5_and_extracts_only_the_layout(tmp_path):
    files = {f"{BIN.folder}/{name}": name.encode() for name in BIN.batch_files}
    path, md5 = archive_of(tmp_path, {**files, "../escaped.txt": b"x"})
    folder = cifar10.download(tmp_path / "data", url=path.as_uri(), md5=md5)
    assert Path(folder) == tmp_path / "data" / BIN.folder
    assert (Path(folder) / "test_batch.bin").read_bytes() == b"test_batch.bin"
    assert not (tmp_path / "escaped.txt").exists()
    assert (tmp_path / "data" / BIN.archive).is_file()


def test_download_rejects_a_wrong_md5(tmp_path):
    path, md5 = archive_of(tmp_path, {f"{BIN.folder}/x": b"x"})
    with pytest.raises(ValueError, match=f"has md5 {md5}, expected {BIN.md5}"):
        cifar10.download(tmp_path / "data", url=path.as_uri())
    assert not (tmp_path / "data" / BIN.archive).exists()
    assert not (tmp_path / "data" / BIN.folder).exists()


def test_download_fails_fast_offline(tmp_path, offline):
    with pytest.raises(ConnectionError) as info:
        cifar10.download(tmp_path, layout="python")
    message = str(info.value)
    for expected in (cifar10.SOURCE_URL + PY.archive, "name resolution", "offline", PY.md5):
        assert expected in message
    assert list(tmp_path.iterdir()) == []                 # no partial file left


def test_download_skips_a_complete_folder(tmp_path, stand_ins, offline):
    folder = copy_with(tmp_path, stand_ins[0])
    assert cifar10.download(tmp_path) == str(folder)


# -- digits and MNIST -------------------------------------------------------------


def test_digits_are_scaled_and_split_deterministically():
    pytest.importorskip("sklearn", reason="digits need scikit-learn")
    train, test, names = digits.load(test_fraction=0.2, seed=0)
    assert train.images.shape == (1438, 8, 8, 1) and test.images.shape == (359, 8, 8, 1)
    assert train.images.dtype == np.float32 and train.labels.dtype == np.int64
    assert train.images.min() == 0.0 and train.images.max() == 1.0
    assert names == tuple("0123456789") and set(test.labels.tolist()) == set(range(10))
    again, other = digits.load(seed=0), digits.load(seed=1)
    np.testing.assert_array_equal(again.test.images, test.images)
    assert not np.array_equal(other.test.labels, test.labels)
    from sklearn.datasets import load_digits
    counts = np.bincount(np.concatenate([train.labels, test.labels]))
    np.testing.assert_array_equal(counts, np.bincount(load_digits().target))


def test_digits_without_scikit_learn_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match=r"pip install 'towerflow\[data\]'"):
        digits.load()


def test_mnist_is_the_tutorial_reader():
    assert data.mnist.read_data_sets is input_data.read_data_sets
    assert data.mnist.DataSet is input_data.DataSet


# -- augmentation -----------------------------------------------------------------


def test_flip_mirrors_exactly_the_chosen_images(rng):
    images = rng.integers(0, 256, (6, 5, 7, 3), dtype=np.uint8)
    mask = np.array([True, False, True, False, False, True])
    flipped = augment.flip_left_right(images, mask)
    np.testing.assert_array_equal(flipped[mask], images[mask][:, :, ::-1])
    np.testing.assert_array_equal(flipped[~mask], images[~mask])
    drawn = augment.random_flip_left_right(np.repeat(images[:1], 64, axis=0), rng)
    is_mirror = [np.array_equal(d, images[0, :, ::-1]) for d in drawn]
    is_same = [np.array_equal(d, images[0]) for d in drawn]
    assert all(np.logical_xor(is_mirror, is_same)) and 10 < sum(is_mirror) < 54


def test_crop_pads_with_zeros_and_cuts_the_chosen_window(rng):
    images = rng.integers(1, 256, (3, 6, 6, 2), dtype=np.uint8)
    np.testing.assert_array_equal(augment.crop(images, 2, [2] * 3, [2] * 3), images)
    shifted = augment.crop(images, 2, [0, 4, 2], [0, 2, 3])
    np.testing.assert_array_equal(shifted[0, 2:, 2:], images[0, :4, :4])   # moved down-right
    assert not shifted[0, :2].any() and not shifted[0, :, :2].any()       # zero padding
    np.testing.assert_array_equal(shifted[1, :4], images[1, 2:])           # moved up
    np.testing.assert_array_equal(shifted[2, :, :5], images[2, :, 1:])     # moved left


def windows_of(image, padding):
    padded, size = np.pad(image, ((padding, padding), (padding, padding), (0, 0))), len(image)
    return [padded[y:y + size, x:x + size] for y in range(2 * padding + 1)
            for x in range(2 * padding + 1)]


def test_random_crop_gives_windows_of_the_padded_image(rng):
    images = rng.integers(1, 256, (40, 8, 8, 3), dtype=np.uint8)
    cropped = augment.random_crop(images, 2, rng)
    assert cropped.shape == images.shape and cropped.dtype == np.uint8
    found = [next(k for k, w in enumerate(windows_of(img, 2)) if np.array_equal(w, out))
             for img, out in zip(images, cropped)]
    assert len(set(found)) > 8                                 # offsets vary per example


def test_normalize_per_channel(rng):
    images = rng.integers(0, 256, (4, 5, 6, 3), dtype=np.uint8)
    mean, std = np.array([0.4, 0.5, 0.6]), np.array([0.2, 0.25, 0.3])
    normalized = augment.normalize(images, mean, std)
    assert normalized.dtype == np.float32
    np.testing.assert_allclose(normalized, (images / 255.0 - mean) / std, rtol=1e-5, atol=1e-5)
    stats_mean, stats_std = augment.channel_stats(images)
    again = augment.normalize(images, stats_mean, stats_std)
    np.testing.assert_allclose(again.mean(axis=(0, 1, 2)), 0, atol=1e-5)
    np.testing.assert_allclose(again.std(axis=(0, 1, 2)), 1, atol=1e-5)


# -- Pipeline ----------------------------------------------------------------------


def examples(count=103, size=8):
    """Random uint8 images and labels that name them (label i <-> image i)."""
    images = np.random.default_rng(7).integers(1, 256, (count, size, size, 3), dtype=np.uint8)
    return images, np.arange(count, dtype=np.int64)


def collect(pipeline, epochs=1):
    return [batch for _ in range(epochs) for batch in pipeline.epoch()]


def labels_of(batches):
    return np.concatenate([labels for _, labels in batches])


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_every_example_once_per_epoch_with_a_partial_last_batch():
    images, labels = examples()
    pipeline = Pipeline(images, labels, batch_size=10, seed=0)
    assert pipeline.batches_per_epoch == 11
    for _ in range(2):
        batches = collect(pipeline)
        assert [len(y) for _, y in batches] == [10] * 10 + [3]
        assert sorted(labels_of(batches)) == list(range(103))
        for x, y in batches:
            np.testing.assert_array_equal(x, images[y])               # pairs stay together
    dropped = Pipeline(images, labels, batch_size=10, seed=0, drop_remainder=True)
    batches = collect(dropped)
    assert dropped.batches_per_epoch == 10 and [len(y) for _, y in batches] == [10] * 10
    assert len(set(labels_of(batches))) == 100


def test_order_is_seeded_and_new_each_epoch():
    images, labels = examples()
    first = labels_of(collect(Pipeline(images, labels, 10, seed=3), epochs=2))
    again = labels_of(collect(Pipeline(images, labels, 10, seed=3), epochs=2))
    other = labels_of(collect(Pipeline(images, labels, 10, seed=4), epochs=1))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first[:103], first[103:]) and not np.array_equal(first[:103], other)
    in_order = labels_of(collect(Pipeline(images, labels, 10, shuffle=False)))
    np.testing.assert_array_equal(in_order, labels)


def augmented(images, labels, **options):
    return Pipeline(images, labels, batch_size=16, seed=5, crop_padding=2, flip=True,
                    mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.25), **options)


def test_state_and_restore_resume_the_exact_batches(tmp_path):
    images, labels = examples()
    pipeline = augmented(images, labels)
    collect(pipeline)                                  # epoch 0
    iterator = pipeline.epoch()
    for _ in range(3):
        next(iterator)
    state = pipeline.state()
    assert state == {"seed": 5, "epoch": 1, "position": 48, "batch_size": 16,
                     "num_examples": 103}
    expected = list(iterator) + collect(pipeline)      # rest of epoch 1, all of epoch 2
    np.savez(tmp_path / "state.npz", **state)
    resumed = augmented(images, labels)
    resumed.restore(dict(np.load(tmp_path / "state.npz")))
    np.testing.assert_equal(collect(resumed, epochs=2), expected)
    with pytest.raises(ValueError, match="batch_size=16, but this Pipeline has batch_size=8"):
        Pipeline(images, labels, batch_size=8).restore(state)


def test_augmented_batches_are_crops_and_flips_of_their_examples():
    images, labels = examples(count=40)
    mean, std = np.array([0.5, 0.4, 0.3]), np.array([0.2, 0.3, 0.25])
    for x, y in augmented(images, labels).epoch():
        assert x.dtype == np.float32 and x.shape == (len(y), 8, 8, 3)
        pixels = np.rint((x * std + mean) * 255).astype(np.uint8)
        for out, label in zip(pixels, y):
            candidates = windows_of(images[label], 2)
            assert any(np.array_equal(out, w) or np.array_equal(out, w[:, ::-1])
                       for w in candidates)


def test_prefetch_delivers_the_same_batches():
    images, labels = examples()
    on_demand = collect(augmented(images, labels, prefetch=0), epochs=2)
    with augmented(images, labels, prefetch=3) as pipeline:
        np.testing.assert_equal(collect(pipeline, epochs=2), on_demand)


def test_an_error_in_the_prefetch_thread_reaches_the_caller(monkeypatch):
    calls = []

    normalize_into = augment.normalize_into

    def normalize_then_fail(*args):
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError("no room for batch 2")
        return normalize_into(*args)
    monkeypatch.setattr(augment, "normalize_into", normalize_then_fail)
    images, labels = examples()
    iterator = augmented(images, labels).epoch()
    next(iterator), next(iterator)
    with pytest.raises(MemoryError, match="no room for batch 2"):
        next(iterator)
    assert not prefetch_threads()


def test_close_stops_the_thread_and_iteration_can_start_again():
    images, labels = examples()
    pipeline = Pipeline(images, labels, batch_size=10, seed=0, prefetch=2)
    iterator = pipeline.epoch()
    next(iterator)
    assert len(prefetch_threads()) == 1
    pipeline.close()
    assert not prefetch_threads()
    with pytest.raises(RuntimeError, match="close"):
        next(iterator)
    rest = collect(pipeline)                            # resumes after the batch delivered
    assert len(rest) == 10 and not prefetch_threads()
    with Pipeline(images, labels, batch_size=10) as pipeline:
        iterator = pipeline.epoch()
        next(iterator)
    assert not prefetch_threads()


def test_garbage_collection_stops_the_thread():
    images, labels = examples()
    pipeline = Pipeline(images, labels, batch_size=10)
    iterator = pipeline.epoch()
    next(iterator)
    del pipeline, iterator
    gc.collect()
    assert not prefetch_threads()


def test_an_open_pipeline_does_not_hang_the_interpreter_at_exit():
    program = ("import numpy as np; from towerflow.data import Pipeline\n"
               "p = Pipeline(np.zeros((1000, 4, 4, 3), np.uint8), np.arange(1000), 10,"
               " prefetch=2)\n"
               "it = p.epoch(); next(it); print('started', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "started" in done.stdout


# -- tower shards -----------------------------------------------------------------


@pytest.mark.parametrize("batch, towers", [(10, 4), (3, 4), (0, 2), (128, 3), (7, 1)])
def test_shard_sizes_follow_data_parallel(batch, towers):
    sizes = shard_sizes(batch, towers)
    assert sizes == [len(s) for s in np.array_split(np.arange(batch), towers)]
    assert sizes == [end - start for start, end in
                     (sharding.shard_bounds(batch, towers, i) for i in range(towers))]


def test_tower_shards_of_an_epoch_cover_every_example_once():
    images, labels = examples()
    batches = [y for _, y in collect(Pipeline(images, labels, batch_size=10, seed=0))]
    assert shard_sizes(len(batches[-1]), 4) == [1, 1, 1, 0]          # the ragged last batch
    shards = [shard for y in batches for shard in np.split(y, np.cumsum(shard_sizes(len(y), 4)))]
    assert sorted(np.concatenate(shards)) == list(range(103))
