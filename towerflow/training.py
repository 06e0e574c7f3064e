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
import os
import time

import numpy as np

from . import (
    curves,
    mixed_precision,
    progress,
    resume_point,
    run_control,
    run_lock,
    run_record,
    training_rate,
)
from . import data as data_module
from .api import losses
from .data.pipeline import check_state
from .graph import core
from .ops import array_ops, constant_ops, math_ops, nn_ops
from .parallel import DataParallel
from .parallel.agreement import check_ranks_agree
from .run_outputs import check_output_paths, naming_path, write_json
from .session import ConfigProto, Session
from .train import Saver, get_or_create_global_step
from .train.checkpoint_format import checkpoint_prefix, remove_stale_temporaries
from .training_evaluation import Evaluation
from .training_trace import StepTraces
from .training_updates import UpdateMeans, Updates, run_micro_batch


def fit(recipe, devices, all_reduce="auto", batch_size=None, epochs=None, steps=None,
        seed=None, data_dir=None, checkpoint_dir=None, resume=False,
        log_device_placement=False, quiet=False, json_out=None, precision=None,
        checkpoint_every=None, checkpoint_secs=None, keep_checkpoints=3, extend=False,
        log_every=None, schedule_steps=None, trace=None, trace_steps=None,
        tensorboard=None, sync_batch_norm=False, accumulate=None):
    """Train ``recipe`` on ``devices`` (one tower each); returns the summary dict
    (the keys of ``--json-out``). ``steps`` and ``epochs`` are the run's total
    length (the smaller when both are given; default: the recipe's epochs) and
    the learning-rate schedule spans it, or ``schedule_steps`` steps when given
    (a run that can later be resumed to another length on the same schedule,
    as TF1's ``decay_steps`` is independent of the steps run). ``resume`` continues the run of
    ``checkpoint_dir`` to its end, with its options (see towerflow/run_record.py;
    ``extend``: to a new length); a run already at its end raises
    ``run_record.RunAlreadyFinished``, having written the summary its final
    checkpoint holds to ``json_out``. ``precision``: 'float32', 'mixed_float16' or
    'mixed_bfloat16' (see towerflow.mixed_precision). Checkpoints: every
    ``checkpoint_every`` steps and/or ``checkpoint_secs`` seconds (default:
    each epoch's end), at the end, and on SIGINT/SIGTERM, which raise
    ``run_control.Interrupted`` after that checkpoint. ``log_every``: steps per
    row of the training curve (default: about 50 rows a run; towerflow.curves).
    ``trace``: a Chrome-trace file of ``trace_steps`` steps (default 3) from the
    run's second (towerflow/training_trace.py).
    ``tensorboard``: a directory where rank 0 writes the curve's rows, the
    learning rate and samples/s as TensorBoard event files.
    ``sync_batch_norm``: every batch norm normalises with the global batch's
    statistics across towers and ranks (DataParallel's option; with
    ``accumulate``, each global micro-batch's).
    ``accumulate``: K micro-batches of ``batch_size`` per update, one update
    equal to one on a batch K times larger (towerflow/training_updates.py);
    steps count updates.

    >>> fit(digits.RECIPE, ['/cpu:0'], steps=60, checkpoint_dir='ck')['steps']
    60
    """
    from .parallel.mpi import rank_from_environment
    if checkpoint_dir and rank_from_environment() == 0:    # rank 0 holds the lock
        run_lock.check_free(checkpoint_dir)
    splits = recipe.load(data_dir)
    options = {"batch_size": batch_size, "seed": seed, "precision": precision,
               "schedule_steps": schedule_steps, "steps": steps, "epochs": epochs,
               "accumulate": accumulate}
    pipeline_options = recipe.pipeline_options(splits.train)
    record, saved = run_record.resolve(recipe, options, checkpoint_dir, resume, extend,
                                       _pipeline_check(splits.train, pipeline_options))
    check_output_paths(checkpoint_dir=checkpoint_dir, json_out=json_out, trace=trace,
                       tensorboard=tensorboard)
    pipeline = data_module.Pipeline(splits.train.images, splits.train.labels,
                                    record["batch_size"], seed=record["seed"],
                                    **pipeline_options)
    updates = Updates(run_record.accumulation(record), pipeline.batches_per_epoch)
    total = run_record.total_steps(record, updates.per_epoch)
    if saved is not None and saved.global_step >= total:
        pipeline.close()
        _tidy_finished(checkpoint_dir)
        raise run_record.RunAlreadyFinished(
            f"the run in {checkpoint_dir} already reached its end (step "
            f"{saved.global_step} of {total}); nothing to do"
            f"{_write_saved_summary(saved, json_out)}")
    graph = core.Graph()
    with graph.as_default():
        with _policy(record["precision"]):
            model = _build(recipe, splits, devices, all_reduce, record,
                           run_record.schedule_span(record, total), keep_checkpoints,
                           sync_batch_norm)
        model.normalisation = {key: pipeline_options[key] for key in ("mean", "std", "scale")
                               if key in pipeline_options}
        check_ranks_agree(model.strategy, graph, {
            "the recipe": recipe.name, "--batch-size": record["batch_size"],
            "--epochs": record["epochs"], "--steps": record["steps"], "--seed": record["seed"],
            "--precision": record["precision"], "--resume": resume,
            "--schedule-steps": record.get("schedule_steps"),
            "--sync-batch-norm": sync_batch_norm,
            "--accumulate": updates.accumulate,
            "the training samples": len(splits.train.labels)})
        # the chief writes the checkpoints: one run at a time in their directory
        lock = run_lock.held(checkpoint_dir) if checkpoint_dir and model.is_chief else \
            contextlib.nullcontext()
        with _closing(pipeline), lock:
            sess = Session(graph=graph,
                           config=ConfigProto(log_device_placement=log_device_placement))
            curve_state = _start(sess, model, pipeline, saved)
            steps = training_rate.StepClock()
            board_dir = new_tensorboard_run(tensorboard, recipe.name) \
                if tensorboard and model.is_chief else None
            plan = _Model(total=total, record=record, checkpoint_dir=checkpoint_dir,
                          clock=run_control.CheckpointClock(checkpoint_every, checkpoint_secs),
                          quiet=quiet or not model.is_chief,
                          saved_path=checkpoint_prefix(saved.path) if saved is not None
                          else None,
                          updates=updates,
                          recorder=_recorder(model, pipeline, updates, checkpoint_dir,
                                             log_every, total, curve_state,
                                             _board(sess, model, board_dir, steps),
                                             run_title(recipe.name, model.strategy,
                                                       record["batch_size"],
                                                       updates.accumulate)),
                          trace=(trace, trace_steps), steps=steps,
                          describe=_describe(recipe, devices, model, record, board_dir))
            try:
                result = _train(sess, model, pipeline, splits, plan)
            finally:
                plan.recorder.close()
    if json_out and model.is_chief:
        with naming_path(json_out):
            write_json(json_out, result)
    if checkpoint_dir and model.is_chief:       # a killed write's leftovers (.*.tmp-PID-*)
        remove_stale_temporaries(checkpoint_dir)
    return result


def _describe(recipe, devices, model, record, board_dir):
    """The summary's keys that say what ran, and where its TensorBoard files are."""
    strategy = model.strategy
    described = {"recipe": recipe.name, "devices": list(devices), "towers": len(devices),
                 "world_size": strategy.num_ranks, "total_towers": strategy.num_shards,
                 "all_reduce": strategy.communicator.name, "precision": record["precision"],
                 "sync_batch_norm": strategy.sync_batch_norm,
                 "accumulate": strategy.accumulation_steps}
    if board_dir:
        described["tensorboard_run"] = board_dir
    return described


def _pipeline_check(train, pipeline_options):
    """``check(state, batch_size)``: ValueError unless a Pipeline over ``train``
    can continue from a checkpoint's pipeline ``state``."""
    drop_remainder = pipeline_options.get("drop_remainder", False)
    return lambda state, batch_size: check_state(state, batch_size, len(train.labels),
                                                 drop_remainder)


def _tidy_finished(checkpoint_dir):
    """Remove what a run killed after its final checkpoint left (its lock, the
    temporaries of its writes), as the run would have at its end; rank 0."""
    from .parallel.mpi import rank_from_environment
    if rank_from_environment() == 0:
        with run_lock.held(checkpoint_dir):
            remove_stale_temporaries(checkpoint_dir)


def _write_saved_summary(saved, json_out):
    """Write the summary a finished run saved in its final checkpoint ``saved``
    to ``json_out`` (rank 0), so a run killed before it wrote --json-out loses
    nothing; what was done, for the 'nothing to do' line."""
    from .parallel.mpi import rank_from_environment
    summary, name = saved.extra_state.get("summary"), os.path.basename(
        checkpoint_prefix(saved.path))
    if not json_out:
        return ""
    if summary is None:
        return (f"; --json-out {json_out} not written: {name} holds no summary (an older "
                "towerflow wrote it)")
    if rank_from_environment() == 0:
        with naming_path(json_out):
            write_json(json_out, summary)
    return f" but write its summary, saved in {name}, to {json_out}"


@contextlib.contextmanager
def _closing(pipeline):
    """Close the pipeline after the block, however it ends."""
    try:
        yield
    finally:
        pipeline.close()


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


def _build(recipe, splits, devices, all_reduce, record, schedule_steps, keep_checkpoints=3,
           sync_batch_norm=False):
    """The towers, the step and the Saver; ``record`` gives the seed and precision."""
    from .ops.random_ops import set_random_seed
    set_random_seed(record["seed"])
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
    optimizer = recipe.optimizer(global_step, schedule_steps)
    if mixed_precision.Policy(record["precision"]).loss_scale == "dynamic":
        optimizer = mixed_precision.LossScaleOptimizer(optimizer)
    strategy = DataParallel(devices, all_reduce=all_reduce, sync_batch_norm=sync_batch_norm,
                            accumulation_steps=run_record.accumulation(record))
    step = strategy.minimize(tower_fn, (images, labels), optimizer, global_step=global_step)
    saver = Saver(max_to_keep=keep_checkpoints)
    return _Model(images=images, labels=labels, training=training, step=step,
                  strategy=strategy, saver=saver, global_step=global_step,
                  learning_rate=_learning_rate(optimizer),
                  is_chief=strategy.rank == 0, tower_logits=tower_logits,
                  test_time_flip=bool(getattr(recipe, "test_time_flip", False)))


def _learning_rate(optimizer):
    """The optimizer's learning rate (a float or a scalar tensor), or None."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)   # loss scaling's
    return optimizer._hyper_values().get("learning_rate")


def new_tensorboard_run(parent, recipe_name):
    """A new directory for this run's TensorBoard files in ``parent``:
    ``parent/<recipe>-<UTC time>`` (``-2``, ``-3``... if taken), so that runs
    logged to one ``--tensorboard DIR`` are TensorBoard's separate runs, not
    one run with every step twice."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    for attempt in range(1, 1000):
        name = f"{recipe_name}-{stamp}" + ("" if attempt == 1 else f"-{attempt}")
        path = os.path.join(parent, name)
        try:
            os.makedirs(path)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{parent!r}: no free run directory for {recipe_name}-{stamp}")


def _board(sess, model, directory, steps):
    """Rank 0's TensorBoard curve in ``directory``, or None; its samples/s are
    of the training time ``steps`` (a training_rate.StepClock) counts."""
    if not directory or not model.is_chief:
        return None
    rate = model.learning_rate
    constant = rate is None or isinstance(rate, (int, float))
    learning_rate = (lambda: rate) if constant else (lambda: float(sess.run(rate)))
    return curves.TensorBoardCurve(directory, learning_rate, steps.training_seconds)


def _loss(logits, labels, classes, label_smoothing):
    if not label_smoothing:
        return math_ops.reduce_mean(nn_ops.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
    one_hot = math_ops.cast(math_ops.equal(array_ops.expand_dims(labels, -1),
                                           np.arange(classes, dtype=np.int64)), logits.dtype)
    return losses.softmax_cross_entropy(one_hot, logits, label_smoothing=label_smoothing)


def _start(sess, model, pipeline, saved):
    """Restore ``saved`` (a checkpoint, on resume) or initialise the variables;
    returns the saved curves' state (None for a fresh run)."""
    from .ops.state_ops import global_variables_initializer, local_variables
    if local_variables():       # gradient accumulators: zero, never saved
        sess.run([var.initializer for var in local_variables()])
    if saved is None:
        sess.run(global_variables_initializer())
        return None
    extra_state = model.saver.restore(sess, saved.path)
    pipeline.restore(extra_state["pipeline"])
    # pruned later: only this run's own directory (resume_point refused the others)
    model.saver.recover_last_checkpoints(
        resume_point.kept_checkpoints(os.path.dirname(saved.path), saved.path))
    return extra_state.get("curves")


def _recorder(model, pipeline, updates, checkpoint_dir, log_every, total, state, board=None,
              title=None):
    """The run's curves.Recorder (a row's steps are updates), continuing a
    resumed run's running means; ``board``: a curves.TensorBoardCurve also
    given its rows, or None; ``title``: the curve PNG's."""
    done = updates.done(pipeline.state())
    curve = curves.Curve(checkpoint_dir, title) if checkpoint_dir and model.is_chief else None
    cadence = curves.choose_log_every(log_every, state, total)
    return curves.Recorder(curve, cadence, updates.per_epoch, done, state, board)


def run_title(recipe_name, strategy, batch_size, accumulate=1):
    """What a run is, for its plots: ``'digits: 2 towers, batch 64, 2026-11-29
    13:40 UTC'`` (under ``launch -n 2``: ``2 ranks x 1 tower``; with
    ``--accumulate 2``: ``batch 2 x 64``)."""
    towers = _count(strategy.num_towers, "tower")
    if strategy.num_ranks > 1:
        towers = f"{strategy.num_ranks} ranks x {towers}"
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    batch = f"{accumulate} x {batch_size}" if accumulate > 1 else f"{batch_size}"
    return f"{recipe_name}: {towers}, batch {batch}, {date}"


def _count(number, noun):
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _train(sess, model, pipeline, splits, plan):
    """Steps (updates) to ``plan.total``, checkpointing on ``plan.clock``; on a
    signal agreed by every rank, a checkpoint and ``run_control.Interrupted``."""
    recorder, updates = plan.recorder, plan.updates
    step = first_step = int(sess.run(model.global_step))
    traces = StepTraces(*plan.trace, first_step, model.strategy)
    start, last_loss, test_accuracy, summary = training_rate.clock(), None, None, None
    steps, evaluation = plan.steps, Evaluation(sess, model, splits.test)
    hook, plan.saved_step = run_control.self_signal_hook(), first_step
    # NOTE: an OSError without a file name (the curve files' disk full, say)
    # names the checkpoint folder, which holds them; one context, not one a step.
    with run_control.StopSignals() as signals, _writing_curve(plan):
        while step < plan.total:
            epoch = pipeline.epochs_completed
            stop = 0
            micro_batch = pipeline.state()["position"] // pipeline.batch_size
            update = UpdateMeans()
            with progress.EpochBar(epoch, _epochs(plan, updates), updates.per_epoch,
                                   plan.quiet) as bar:
                steps.resume()
                for images, labels in pipeline.epoch():
                    ends_update = updates.ends_update(micro_batch)
                    update.add(*run_micro_batch(sess, model, images, labels, ends_update,
                                                 traces.run_options(step)), len(labels))
                    micro_batch += 1
                    if not ends_update:     # no stop, no checkpoint inside an update
                        continue
                    (last_loss, accuracy), samples = update.means(), update.samples
                    update = UpdateMeans()
                    step += 1
                    steps.step_done(samples)     # before the curve reads the time
                    means = recorder.add_step(last_loss, accuracy, samples)
                    bar.update(means.loss, means.accuracy, steps.running_rate())
                    run_control.maybe_signal_self(hook, step)
                    stop = run_control.agreed_stop(signals, model.strategy)
                    if stop or step >= plan.total:
                        break
                    if plan.clock.due(step, epoch_ended=False):
                        _save(sess, model, pipeline, plan, step)
                        steps.resume()      # the checkpoint is not training time
            ended = pipeline.epochs_completed > epoch
            if ended or step >= plan.total:      # a run may end mid-epoch (--steps)
                test_accuracy = evaluation.run()
                means = recorder.end_epoch(epoch, ended, test_accuracy)
                _end_of_epoch(plan, epoch, ended, (means.loss, means.accuracy, test_accuracy))
            if step >= plan.total:      # saved with the final checkpoint (--resume reads it)
                summary = _summary(plan, step, last_loss, test_accuracy, evaluation, start)
            if stop or step >= plan.total or plan.clock.due(step, ended):
                _save(sess, model, pipeline, plan, step, summary)
            if stop:
                raise run_control.Interrupted(stop, step, epoch + 1, plan.saved_path)
    traces.finish()
    return summary


def _summary(plan, step, last_loss, test_accuracy, evaluation, start):
    """The run's summary (the keys of --json-out), at its end."""
    return {"steps": step, "final_loss": _float(last_loss), **plan.recorder.summary(),
            "test_accuracy": _float(test_accuracy), **plan.steps.summary(),
            "eval_seconds": evaluation.seconds,
            "wall_seconds": training_rate.clock() - start, **plan.describe}


def _writing_curve(plan):
    """Where an OSError while the recorder writes the curve files comes from."""
    if plan.checkpoint_dir:
        return naming_path(plan.checkpoint_dir)
    return contextlib.nullcontext()


def _epochs(plan, updates):
    """The run's length in epochs, for the progress bar (the last may be partial)."""
    return -(-plan.total // updates.per_epoch)



def _end_of_epoch(plan, epoch, finished, figures):
    """Report a finished epoch: its means over the epoch's samples (the
    recorder wrote its curve row)."""
    loss, accuracy, test_accuracy = figures
    if finished and not plan.quiet:
        print(f"epoch {epoch + 1}: loss {loss:.4f}  train accuracy {accuracy:.4f}  "
              f"test accuracy {test_accuracy:.4f}", flush=True)


def _save(sess, model, pipeline, plan, step, summary=None):
    """A checkpoint at ``step`` (once per step; rank 0 only): the variables, the
    data order's position (a mid-epoch resume replays the rest of the epoch),
    the run's record and, at the run's end, its ``summary``."""
    plan.clock.saved()
    if not plan.checkpoint_dir or not model.is_chief or step == plan.saved_step:
        return
    os.makedirs(plan.checkpoint_dir, exist_ok=True)
    state = {"epoch": pipeline.epochs_completed, "pipeline": pipeline.state(),
             "run": plan.record, "curves": plan.recorder.state()}
    if summary is not None:
        state["summary"] = summary
    with naming_path(plan.checkpoint_dir):
        # NOTE: no meta graph: a resume rebuilds the graph from the recipe, and the
        # towers' graph holds ops that do not round-trip (Python schedules).
        plan.saved_path = model.saver.save(sess, os.path.join(plan.checkpoint_dir, "model"),
                                           global_step=step, write_meta_graph=False,
                                           extra_state=state)
    plan.saved_step = step


def _float(value):
    return None if value is None else float(value)
