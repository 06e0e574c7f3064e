"""The training driver behind ``towerflow train RECIPE``: towers over the
chosen devices, the input pipeline, progress, evaluation, checkpoints (with
exact resume), a CSV and PNG training curve, and a JSON summary.

A recipe (see towerflow/recipes/) says what to train: the data, the model's
logits, the optimizer and its defaults. ``fit`` does the rest::

    from towerflow import training
    from towerflow.recipes import digits
    result = training.fit(digits.RECIPE, devices=['/cpu:0', '/cpu:1'], epochs=20)
    result['test_accuracy']
"""

import contextlib
import errno
import json
import os
import tempfile
import time

import numpy as np

from . import data as data_module
from . import losses, mixed_precision, progress
from .graph import core
from .ops import array_ops, constant_ops, math_ops, nn_ops
from .parallel import DataParallel
from .parallel.agreement import check_ranks_agree
from .session import ConfigProto, Session
from .train import Saver, get_or_create_global_step

EVAL_BATCH = 1000


def fit(recipe, devices, all_reduce="auto", batch_size=None, epochs=None, steps=None,
        seed=0, data_dir=None, checkpoint_dir=None, resume=False,
        log_device_placement=False, quiet=False, json_out=None, precision="float32"):
    """Train ``recipe`` on ``devices`` (one tower each); returns the summary dict
    (the keys of ``--json-out``). ``precision``: 'float32', 'mixed_float16'
    or 'mixed_bfloat16': the mixed-precision policy while the model is built,
    and the policy's loss scaling (dynamic for float16, none for bfloat16;
    see towerflow.mixed_precision)."""
    check_output_paths(checkpoint_dir=checkpoint_dir, json_out=json_out)
    splits = recipe.load(data_dir)
    batch_size = int(batch_size or recipe.defaults["batch_size"])
    epochs = int(epochs or recipe.defaults["epochs"])
    options = recipe.pipeline_options(splits.train)
    pipeline = data_module.Pipeline(splits.train.images, splits.train.labels, batch_size,
                                    seed=seed, **options)
    normalisation = {key: options[key] for key in ("mean", "std", "scale") if key in options}
    graph = core.Graph()
    with graph.as_default():
        with _policy(precision):
            model = _build(recipe, splits, devices, all_reduce, seed, pipeline, epochs,
                           precision)
        model.normalisation = normalisation
        check_ranks_agree(model.strategy, graph, {
            "the recipe": recipe.name, "--batch-size": batch_size, "--epochs": epochs,
            "--steps": steps, "--seed": seed, "--precision": precision, "--resume": resume,
            "the training samples": len(splits.train.labels)})
        sess = Session(graph=graph, config=ConfigProto(log_device_placement=log_device_placement))
        first_epoch = _start(sess, model, pipeline, checkpoint_dir, resume)
        result = _train(recipe, sess, model, pipeline, splits, first_epoch, epochs, steps,
                        checkpoint_dir, quiet or not model.is_chief)
    result.update(recipe=recipe.name, devices=list(devices), towers=len(devices),
                  all_reduce=model.strategy.communicator.name, precision=precision)
    if json_out and model.is_chief:
        with naming_path(json_out):
            write_json(json_out, result)
    pipeline.close()
    return result


class _Model:
    """The graph pieces the loop feeds and fetches."""

    def __init__(self, **pieces):
        self.__dict__.update(pieces)


@contextlib.contextmanager
def _policy(precision):
    """The global mixed-precision policy ``precision`` while the model is built."""
    previous = mixed_precision.global_policy()
    mixed_precision.set_global_policy(precision)
    try:
        yield
    finally:
        mixed_precision.set_global_policy(previous)


def _build(recipe, splits, devices, all_reduce, seed, pipeline, epochs, precision="float32"):
    from .ops.random_ops import set_random_seed
    set_random_seed(seed)
    images = constant_ops.placeholder("float32", [None] + list(splits.train.images.shape[1:]),
                                      name="images")
    labels = constant_ops.placeholder("int64", [None], name="labels")
    training = constant_ops.placeholder_with_default(False, [], name="training")
    classes = len(splits.class_names)
    tower_logits = []       # per tower, for flip test-time augmentation

    def tower_fn(inputs):
        shard_images, shard_labels = inputs
        logits = recipe.logits(shard_images, training)
        if logits.dtype.name != "float32":      # float16/bfloat16 under mixed precision
            logits = math_ops.cast(logits, "float32")
        tower_logits.append(logits)
        loss = _loss(logits, shard_labels, classes, recipe.label_smoothing)
        correct = math_ops.equal(math_ops.argmax(logits, 1), shard_labels)
        return loss, {"accuracy": math_ops.reduce_mean(math_ops.cast(correct, "float32"))}

    global_step = get_or_create_global_step()
    optimizer = recipe.optimizer(global_step, pipeline.batches_per_epoch, epochs)
    if mixed_precision.Policy(precision).loss_scale == "dynamic":
        optimizer = mixed_precision.LossScaleOptimizer(optimizer)
    strategy = DataParallel(devices, all_reduce=all_reduce)
    step = strategy.minimize(tower_fn, (images, labels), optimizer, global_step=global_step)
    saver = Saver(max_to_keep=3)
    return _Model(images=images, labels=labels, training=training, step=step,
                  strategy=strategy, saver=saver, global_step=global_step,
                  is_chief=strategy.rank == 0, tower_logits=tower_logits,
                  test_time_flip=bool(getattr(recipe, "test_time_flip", False)))


def _loss(logits, labels, classes, label_smoothing):
    if not label_smoothing:
        return math_ops.reduce_mean(nn_ops.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
    one_hot = math_ops.cast(math_ops.equal(array_ops.expand_dims(labels, -1),
                                           np.arange(classes, dtype=np.int64)), logits.dtype)
    return losses.softmax_cross_entropy(one_hot, logits, label_smoothing=label_smoothing)


def _start(sess, model, pipeline, checkpoint_dir, resume):
    """Restore the latest checkpoint (resume) or initialise; the first epoch to run."""
    if resume and checkpoint_dir:
        restored = model.saver.restore_latest(sess, checkpoint_dir)
        if restored.path is not None:
            pipeline.restore(restored.extra_state["pipeline"])
            return int(restored.extra_state["epoch"])
    elif resume:
        raise ValueError("--resume needs --checkpoint-dir")
    from .ops.state_ops import global_variables_initializer
    sess.run(global_variables_initializer())
    return 0


def _train(recipe, sess, model, pipeline, splits, first_epoch, epochs, max_steps,
           checkpoint_dir, quiet):
    step_fetches = [model.step.train_op, model.step.loss, model.step.metrics["accuracy"]]
    curve = progress.Curve(checkpoint_dir) if checkpoint_dir and model.is_chief else None
    start, examples, steps_done, last_loss = time.perf_counter(), 0, 0, None
    test_accuracy = None   # evaluated after each epoch; after the loop only if none ran
    for epoch in range(first_epoch, epochs):
        with progress.EpochBar(epoch, epochs, pipeline.batches_per_epoch, quiet) as bar:
            for images, labels in pipeline.epoch():
                feed = {model.images: images, model.labels: labels, model.training: True}
                _, last_loss, accuracy = sess.run(step_fetches, feed_dict=feed)
                examples += len(labels)
                steps_done += 1
                bar.update(last_loss, accuracy, examples / (time.perf_counter() - start))
                if max_steps and steps_done >= max_steps:
                    break
        stopped = bool(max_steps) and steps_done >= max_steps
        finished = pipeline.epochs_completed > epoch
        test_accuracy = evaluate(sess, model, splits.test)
        _end_of_epoch(sess, model, pipeline, curve, epoch, finished,
                      (last_loss, accuracy, test_accuracy), checkpoint_dir, quiet)
        if stopped:
            break
    wall = time.perf_counter() - start
    return {"steps": int(sess.run(model.global_step)), "final_loss": _float(last_loss),
            "test_accuracy": _float(test_accuracy if test_accuracy is not None
                                    else evaluate(sess, model, splits.test)),
            "samples_per_sec": examples / wall if wall else 0.0, "wall_seconds": wall}


def _end_of_epoch(sess, model, pipeline, curve, epoch, finished, figures, checkpoint_dir,
                  quiet):
    """Report and record a finished epoch; checkpoint (mid-epoch too, when --steps
    stopped the run there: the pipeline state resumes the rest of the epoch)."""
    loss, accuracy, test_accuracy = figures
    if finished and not quiet:
        print(f"epoch {epoch + 1}: loss {loss:.4f}  train accuracy {accuracy:.4f}  "
              f"test accuracy {test_accuracy:.4f}", flush=True)
    if finished and curve is not None:
        with naming_path(curve.csv_path):
            curve.add(epoch + 1, int(sess.run(model.global_step)), loss, accuracy, test_accuracy)
    if checkpoint_dir and model.is_chief:
        os.makedirs(checkpoint_dir, exist_ok=True)
        state = {"epoch": epoch + 1 if finished else epoch, "pipeline": pipeline.state()}
        with naming_path(checkpoint_dir):
            model.saver.save(sess, os.path.join(checkpoint_dir, "model"),
                             global_step=model.global_step, extra_state=state)


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


def _float(value):
    return None if value is None else float(value)


def check_output_paths(checkpoint_dir=None, json_out=None):
    """OSError naming the path unless ``checkpoint_dir`` is (or can be made) a
    writable directory and ``json_out`` a writable file: checked before
    training, so a run never fails only at its end.

    Example::

        >>> check_output_paths(checkpoint_dir="ckpt", json_out="run.json")
    """
    if checkpoint_dir:
        _probe_directory(checkpoint_dir, "--checkpoint-dir")
    if json_out:
        if os.path.isdir(json_out):
            raise IsADirectoryError(errno.EISDIR, "--json-out is a directory, not a file",
                                    json_out)
        _probe_directory(os.path.dirname(os.path.abspath(json_out)), "--json-out's folder")
        if os.path.exists(json_out) and not os.access(json_out, os.W_OK):
            raise PermissionError(errno.EACCES, "--json-out is not writable", json_out)


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

