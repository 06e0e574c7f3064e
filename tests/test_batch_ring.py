"""The input pipeline's batches made in place (towerflow/data/batch_ring.py): bit
for bit the reference augmentation with the same draws, a ring of buffers that a
training loop reuses, never a buffer the caller still holds, and batches made
ahead on the prefetch thread while the caller works."""

import threading
import time

import numpy as np
import pytest
from conftest import split_cpu

from towerflow.data import Pipeline, augment
from towerflow.data.batch_ring import BatchRing, ring_size

THREAD_NAME = "towerflow-data-prefetch"
MEAN, STD = np.array([0.5, 0.4, 0.3]), np.array([0.2, 0.3, 0.25])


def reference(images, padding, flip, normalization, rng):
    """What the pipeline made before the ring: the augment functions in turn."""
    if padding:
        images = augment.random_crop(images, padding, rng)
    if flip:
        images = augment.random_flip_left_right(images, rng)
    if normalization is not None:
        images = augment.normalize(images, *normalization)
    return images


def examples(count, shape, dtype):
    """Images (non-square, so height and width cannot be swapped) and labels
    that name them."""
    pixels = np.random.default_rng(3).integers(0, 256, (count, *shape))
    return pixels.astype(dtype), np.arange(count, dtype=np.int64)


@pytest.mark.parametrize("padding, flip, normalization, dtype, channels", [
    (4, True, (MEAN, STD, None), np.uint8, 3),          # the cifar10 recipe's
    (2, False, (MEAN, STD, None), np.uint8, 3),
    (0, True, None, np.uint8, 3),
    (0, False, (0.5, 0.25, None), np.uint8, 1),
    (3, True, None, np.float32, 3),
    (1, True, (0.5, 0.25, 2.0), np.float64, 2),
])
def test_ring_batches_are_the_reference_augmentation_bit_for_bit(padding, flip, normalization,
                                                                dtype, channels):
    images, labels = examples(53, (9, 7, channels), dtype)
    order = np.random.default_rng(0).permutation(53)
    ring = BatchRing(images, labels, 16, ring_size(0), padding, flip, normalization)
    for index, start in enumerate(range(0, 53, 16)):     # the last batch holds 5
        chosen = order[start:start + 16]
        made_images, made_labels = ring.make(chosen, np.random.default_rng(index))
        expected = reference(images[chosen], padding, flip, normalization,
                             np.random.default_rng(index))
        assert made_images.dtype == expected.dtype
        np.testing.assert_array_equal(made_images, expected)
        np.testing.assert_array_equal(made_labels, chosen)


def recipe_like(images, labels, prefetch=2, batch_size=16):
    return Pipeline(images, labels, batch_size=batch_size, seed=5, crop_padding=2, flip=True,
                    mean=MEAN, std=STD, prefetch=prefetch)


def test_kept_batches_are_drawn_from_seed_epoch_and_index_and_never_overwritten():
    images, labels = examples(103, (8, 8, 3), np.uint8)
    with recipe_like(images, labels) as pipeline:
        epochs = [list(pipeline.epoch()) for _ in range(2)]     # every batch kept
    for epoch, batches in enumerate(epochs):
        for index, (batch_images, batch_labels) in enumerate(batches):
            rng = np.random.default_rng([5, epoch, 1, index])   # (seed, epoch, stream, b)
            np.testing.assert_array_equal(
                batch_images, reference(images[batch_labels], 2, True, (MEAN, STD, None), rng))


def test_a_loop_that_lets_go_of_its_batches_reuses_the_ring():
    # The consumer is slower than the thread, so the prefetch queue is full
    # whenever the thread starts a batch: the most buffers a loop ever holds.
    images, labels = examples(103, (8, 8, 3), np.uint8)
    with recipe_like(images, labels, prefetch=2) as pipeline:
        for _ in range(3):
            for batch_images, _labels in pipeline.epoch():
                batch_images.sum()
                time.sleep(0.002)
        ring = pipeline._ring
    assert ring.size == ring_size(2) == 5
    assert ring.buffers_made == ring.size         # no spare buffer was ever needed
    assert ring.most_in_use <= ring.size


def test_batches_are_made_ahead_on_the_prefetch_thread(monkeypatch):
    made, changed = [], threading.Condition()
    make = BatchRing.make

    def recording_make(self, indices, rng):
        batch = make(self, indices, rng)
        with changed:
            made.append(threading.current_thread().name)
            changed.notify_all()
        return batch
    monkeypatch.setattr(BatchRing, "make", recording_make)
    images, labels = examples(103, (8, 8, 3), np.uint8)
    with recipe_like(images, labels, prefetch=2) as pipeline:
        batches = pipeline.epoch()
        next(batches)
        # While the caller works on batch 0, the thread makes batches 1 and 2 (the
        # queue's) and 3 (waiting for room), without being asked.
        with changed:
            assert changed.wait_for(lambda: len(made) >= 4, timeout=60)
        next(batches)
    assert set(made) == {THREAD_NAME}


def test_the_switch_off_makes_the_same_batches_into_new_arrays(monkeypatch):
    images, labels = examples(103, (8, 8, 3), np.uint8)
    with recipe_like(images, labels) as pipeline:
        assert isinstance(pipeline._ring, BatchRing)
        in_ring = [(x.copy(), y.copy()) for _ in range(2) for x, y in pipeline.epoch()]
    monkeypatch.setenv("TOWERFLOW_DATA_RING", "0")
    with recipe_like(images, labels) as pipeline:
        assert not isinstance(pipeline._ring, BatchRing)
        fresh = [batch for _ in range(2) for batch in pipeline.epoch()]
    assert len(fresh) == 2 * 7
    np.testing.assert_equal(fresh, in_ring)


def test_a_training_run_gets_the_ring_buffers_back(monkeypatch, no_gpu):
    # fit's loop, its Session and its two towers keep no batch past its step: the
    # pipeline never needs a buffer beyond its ring of five
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
    from towerflow import training
    from towerflow.recipes import get
    pipelines = []

    class RecordedPipeline(Pipeline):
        def __init__(self, *args, **options):
            super().__init__(*args, **options)
            pipelines.append(self)
    monkeypatch.setattr(training.data_module, "Pipeline", RecordedPipeline)
    split_cpu(2)
    training.fit(get("digits"), ["/cpu:0", "/cpu:1"], batch_size=64, steps=40, quiet=True)
    ring = pipelines[0]._ring
    assert ring.size == 5 and ring.buffers_made == 5
