"""A training run's defining options and its length, saved in every checkpoint
so that ``--resume`` continues the same run: the same model, data order and
learning-rate schedule, to the same end.

``--steps N`` and ``--epochs N`` are the run's *total* length (the smaller
when both are given); the schedule spans it, or ``--schedule-steps`` steps
when that is given. On resume, options not given come from the checkpoint; a
given one that differs is refused, except the length: a run whose schedule
has its own length (``--schedule-steps``) may be resumed to any length, since
the steps it already took stay those of the same schedule; a run whose
schedule spans its length only with ``extend=True`` (the schedule is then
stretched to the new length)::

    record = resolve(recipe, options, checkpoint_dir, resume)   # a dict
    total = total_steps(record, batches_per_epoch)
    span = schedule_span(record, total)
"""

import glob
import os
import re

from . import errors
from .train.checkpoint_format import (_skip_warning, checkpoint_exists, checkpoint_prefix,
                                      get_checkpoint_state, read_checkpoint)

# The options that define the model and the data order (besides the length).
DEFINING = ("recipe", "batch_size", "seed", "precision", "schedule_steps")


class RunAlreadyFinished(Exception):
    """``--resume`` of a run whose checkpoint is at (or past) the run's end."""


def resolve(recipe, options, checkpoint_dir, resume, extend=False):
    """The run's record: ``options`` (recipe, batch_size, seed, precision,
    schedule_steps, steps, epochs; None where not given) completed from the checkpoint on
    resume, or from the recipe's defaults on a fresh start; and the checkpoint
    to restore (a ``Checkpoint`` without its variables; None on a fresh start).

    >>> resolve(digits.RECIPE, {"steps": 60, ...}, "ck", resume=False)
    ({'recipe': 'digits', 'batch_size': 64, 'seed': 0, ..., 'steps': 60}, None)
    
    """
    if not resume:
        _check_fresh_directory(checkpoint_dir)
        return _fresh(recipe, options), None
    path = resume_checkpoint(checkpoint_dir)
    saved = read_checkpoint(path, with_variables=False)
    record = saved.extra_state.get("run")
    if record is None:      # written before run records: the options as given
        return _fresh(recipe, options), saved
    return _merged(dict(record), options, path, extend), saved


def _fresh(recipe, options):
    record = dict(options, recipe=recipe.name)
    record["batch_size"] = int(record.get("batch_size") or recipe.defaults["batch_size"])
    record["seed"] = int(record.get("seed") or 0)
    record["precision"] = record.get("precision") or "float32"
    if not record.get("steps") and not record.get("epochs"):
        record["epochs"] = int(recipe.defaults["epochs"])
    return record


def _merged(record, options, path, extend):
    for name in DEFINING:
        given, saved = options.get(name), record.get(name)
        if given is not None and given != saved:
            was = f"{option_flag(name)} {saved}" if saved is not None else "without it"
            raise ValueError(f"{option_flag(name)} {given} differs from the checkpoint {path} "
                             f"({was}); a resumed run keeps the options that define its "
                             "model, data and schedule")
    length = {name: options.get(name) for name in ("steps", "epochs")}
    if any(length.values()) and length != {name: record.get(name) for name in length}:
        if not (extend or record.get("schedule_steps")):
            raise ValueError(f"{_describe(length)} changes the length of the run in "
                             f"{path} ({_describe(record)}), and its learning-rate schedule "
                             "spans that length; resume without --steps and --epochs to "
                             "finish it, or add --extend to stretch its schedule to the new "
                             "length (start runs with --schedule-steps to resume them to "
                             "any length on one schedule)")
        record.update(length)
    return record


def total_steps(record, batches_per_epoch):
    """The run's length in steps: --steps, --epochs, or the smaller of both."""
    bounds = [int(record["steps"])] if record.get("steps") else []
    if record.get("epochs"):
        bounds.append(int(record["epochs"]) * batches_per_epoch)
    return min(bounds)


def schedule_span(record, total):
    """The steps the learning-rate schedule spans: --schedule-steps, else the
    run's length ``total``."""
    return int(record.get("schedule_steps") or total)


def resume_checkpoint(checkpoint_dir):
    """The newest good checkpoint of ``checkpoint_dir`` for --resume: of those
    its state file lists and of its ``model-<step>.npz`` files, so a run killed
    between writing a checkpoint and listing it (the first one, say) resumes
    from that file. FileNotFoundError (one line) when there is none to resume
    from, so a resumed run never starts again from step 0 over good files."""
    if not checkpoint_dir:
        raise ValueError("--resume needs --checkpoint-dir")
    if not os.path.isdir(checkpoint_dir):
        raise FileNotFoundError(f"--resume: --checkpoint-dir {checkpoint_dir!r} does not "
                                "exist; drop --resume to start a new run")
    candidates = _candidates(checkpoint_dir)
    if not candidates:
        raise FileNotFoundError(f"--resume: {checkpoint_dir!r} has no checkpoint index "
                                "file 'checkpoint' listing a checkpoint, and no model-*.npz")
    for path in candidates:
        try:
            return checkpoint_prefix(read_checkpoint(path).path)
        except (errors.DataLossError, errors.NotFoundError) as err:
            _skip_warning(path, err)
    raise FileNotFoundError(f"--resume: no checkpoint in {checkpoint_dir!r} is readable "
                            f"(tried {', '.join(map(os.path.basename, candidates))})")


def _candidates(checkpoint_dir):
    """The checkpoints to resume from, newest step first: those the state file
    lists (refused if one lies outside ``checkpoint_dir``) and the directory's
    model-<step>.npz files (a killed run may have written one it never listed)."""
    state = get_checkpoint_state(checkpoint_dir)
    listed = []
    if state is not None and state.model_checkpoint_path:
        listed = [state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)]
        _check_inside(checkpoint_dir, listed)
    found = [os.path.join(checkpoint_dir, name) for name in _model_files(checkpoint_dir)]
    unique = dict.fromkeys(os.path.normpath(checkpoint_prefix(path)) for path in listed + found)
    return sorted(unique, key=_step_of, reverse=True)     # stable: the listed first on a tie


def kept_checkpoints(checkpoint_dir, resumed):
    """The checkpoints (prefixes, oldest first) a run resumed from ``resumed``
    goes on pruning: the listed ones and the unlisted files a killed write left,
    up to ``resumed`` (later ones it writes again)."""
    last = _step_of(resumed)
    return [path for path in reversed(_candidates(checkpoint_dir))
            if _step_of(path) <= last and checkpoint_exists(path)]


def _step_of(path):
    """The step in a checkpoint's name (``ck/model-300`` -> 300), -1 if none."""
    match = re.search(r"-(\d+)$", checkpoint_prefix(path))
    return int(match.group(1)) if match else -1


def inside(directory, path):
    """Whether ``path`` lies in ``directory`` (links resolved)."""
    directory = os.path.realpath(directory)
    return os.path.commonpath([directory, os.path.realpath(path)]) == directory


def _check_inside(checkpoint_dir, paths):
    """A run reads, and later prunes, only checkpoints inside its own directory: a
    state file naming one elsewhere (another run's) is refused, not followed."""
    outside = [path for path in paths if not inside(checkpoint_dir, path)]
    if outside:
        raise ValueError(f"--resume: {os.path.join(checkpoint_dir, 'checkpoint')} names "
                         f"{outside[0]!r}, outside --checkpoint-dir {checkpoint_dir!r}; a run "
                         "reads and deletes checkpoints only in its own directory")


def _check_fresh_directory(checkpoint_dir):
    """A new run must not write over (and later delete) another run's files."""
    if checkpoint_dir and _model_files(checkpoint_dir):
        raise ValueError(f"--checkpoint-dir {checkpoint_dir!r} already holds checkpoints "
                         f"({', '.join(_model_files(checkpoint_dir)[:3])}); add --resume to "
                         "continue that run, or choose another directory")


def _model_files(directory):
    return sorted(os.path.basename(path)
                  for path in glob.glob(os.path.join(glob.escape(directory), "model-*.npz")))


def _describe(length):
    parts = [f"{option_flag(name)} {length[name]}" for name in ("steps", "epochs")
             if length.get(name)]
    return " ".join(parts)


def option_flag(name):
    """The command-line flag of an option: option_flag("batch_size") is "--batch-size"."""
    return "--" + name.replace("_", "-")
