"""Evaluation for towerflow/training.py: accuracy on the test split, in
batches of EVAL_BATCH with training off, optionally with flip test-time
augmentation summed over the towers' shards and the ranks; and
``Evaluation``, which times it apart from the training steps::

    accuracy = training_evaluation.evaluate(sess, model, splits.test)

Apart from the training driver because it only reads the model the driver
built: it feeds the test images through the towers and never touches the
pipeline, the checkpoints or the curve.
"""

import numpy as np

from . import data as data_module
from . import training_rate

EVAL_BATCH = 1000


class Evaluation:
    """``evaluate`` on the test split, timed apart from training."""

    def __init__(self, sess, model, split):
        self.sess, self.model, self.split, self.seconds = sess, model, split, 0.0

    def run(self):
        start = training_rate.clock()
        try:
            return evaluate(self.sess, self.model, self.split)
        finally:
            self.seconds += training_rate.clock() - start


def evaluate(sess, model, split):
    """Accuracy over ``split`` (batches of EVAL_BATCH, in order, training off);
    with the recipe's ``test_time_flip``, of each image's logits plus its
    mirror image's."""
    if split is None or len(split.labels) == 0:
        return float("nan")
    if model.test_time_flip:
        return _evaluate_with_flips(sess, model, split)
    correct = 0.0
    for start in range(0, len(split.labels), EVAL_BATCH):
        images = split.images[start:start + EVAL_BATCH]
        labels = split.labels[start:start + EVAL_BATCH]
        accuracy = sess.run(model.step.metrics["accuracy"],
                            feed_dict={model.images: _prepare(model, images),
                                       model.labels: labels})
        correct += accuracy * len(labels)
    return correct / len(split.labels)


def _evaluate_with_flips(sess, model, split):
    """Flip test-time augmentation: each tower's logits for its shard of a batch
    and of the batch mirrored left to right, added. Each rank counts the
    correct predictions of its own shards; the ranks add their counts."""
    strategy = model.strategy
    first_shard = strategy.rank * strategy.num_towers
    correct = 0
    for start in range(0, len(split.labels), EVAL_BATCH):
        images = _prepare(model, split.images[start:start + EVAL_BATCH])
        labels = split.labels[start:start + EVAL_BATCH]
        plain = sess.run(model.tower_logits, feed_dict={model.images: images})
        mirrored = sess.run(model.tower_logits,
                            feed_dict={model.images: np.ascontiguousarray(images[:, :, ::-1])})
        bounds = np.cumsum([0] + data_module.shard_sizes(len(labels), strategy.num_shards))
        for tower, (logits, flipped) in enumerate(zip(plain, mirrored)):
            shard = first_shard + tower
            predicted = np.argmax(logits + flipped, axis=1)
            correct += int(np.sum(predicted == labels[bounds[shard]:bounds[shard + 1]]))
    if strategy.num_ranks > 1:
        from .parallel import mpi
        correct = int(mpi.world().all_reduce(np.array([correct], np.int64),
                                             "evaluate with flips", strategy.timeout)[0])
    return correct / len(split.labels)


def _prepare(model, images):
    """Test images go through the pipeline's normalisation, not its augmentation."""
    if model.normalisation:
        return data_module.augment.normalize(images, **model.normalisation)
    return images.astype(np.float32, copy=False)
