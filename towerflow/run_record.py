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

from .resume_point import Candidates, model_files
from .train.checkpoint_format import checkpoint_prefix

# The options that define the model and the data order (besides the length).
# --accumulate: the micro-batches of an update (its batch, K x --batch-size).
DEFINING = ("recipe", "batch_size", "seed", "precision", "schedule_steps", "accumulate")


# The value of a defining option that a run recorded before it existed had.
_BEFORE_RECORDED = {"accumulate": 1}


class RunAlreadyFinished(Exception):
    """``--resume`` of a run whose checkpoint is at (or past) the run's end."""


def resolve(recipe, options, checkpoint_dir, resume, extend=False, check_pipeline=None):
    """The run's record: ``options`` (recipe, batch_size, seed, precision,
    schedule_steps, steps, epochs; None where not given) completed from the checkpoint on
    resume, or from the recipe's defaults on a fresh start; and the checkpoint
    to restore (a ``Checkpoint`` without its variables; None on a fresh start):
    the newest that verifies and whose pipeline state
    ``check_pipeline(state, batch_size)`` accepts (it raises if not;
    see towerflow/resume_point.py).

    >>> resolve(digits.RECIPE, {"steps": 60, ...}, "ck", resume=False)
    ({'recipe': 'digits', 'batch_size': 64, 'seed': 0, ..., 'steps': 60}, None)
    """
    if not resume:
        _check_fresh_directory(checkpoint_dir)
        return _fresh(recipe, options), None
    candidates = Candidates(checkpoint_dir)
    for saved in candidates:
        record = _record_of(saved, recipe, options, extend)
        problem = _pipeline_problem(saved, record, check_pipeline)
        if problem:
            candidates.skip(saved.path, problem)
            continue
        candidates.chosen(saved)
        return record, saved._replace(variables={})
    raise candidates.none_usable()


def _record_of(saved, recipe, options, extend):
    """The record of a run resumed from ``saved``: its own, with ``options``."""
    record = saved.extra_state.get("run")
    if record is None:      # written before run records: the options as given
        return _fresh(recipe, options)
    return _merged(dict(record), options, checkpoint_prefix(saved.path), extend)


def _pipeline_problem(saved, record, check_pipeline):
    """Why ``saved``'s pipeline state cannot be resumed from, or None."""
    state = saved.extra_state.get("pipeline")
    if state is None:
        return "it holds no pipeline state (the data order's position), which --resume needs"
    try:
        if check_pipeline is not None:
            check_pipeline(state, record["batch_size"])
    except (TypeError, ValueError) as err:
        return f"its pipeline state does not fit this run: {err}"
    return None


def _fresh(recipe, options):
    record = dict(options, recipe=recipe.name)
    record["batch_size"] = int(record.get("batch_size") or recipe.defaults["batch_size"])
    record["seed"] = int(record.get("seed") or 0)
    record["precision"] = record.get("precision") or "float32"
    record["accumulate"] = int(record.get("accumulate") or 1)
    if not record.get("steps") and not record.get("epochs"):
        record["epochs"] = int(recipe.defaults["epochs"])
    return record


def _merged(record, options, path, extend):
    for name in DEFINING:
        given, saved = options.get(name), record.get(name, _BEFORE_RECORDED.get(name))
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


def accumulation(record):
    """The run's micro-batches per update: --accumulate, 1 for a run recorded
    before the option existed."""
    return int(record.get("accumulate") or 1)


def total_steps(record, batches_per_epoch):
    """The run's length in steps: --steps, --epochs, or the smaller of both
    (``batches_per_epoch``: steps an epoch, updates with --accumulate)."""
    bounds = [int(record["steps"])] if record.get("steps") else []
    if record.get("epochs"):
        bounds.append(int(record["epochs"]) * batches_per_epoch)
    return min(bounds)


def schedule_span(record, total):
    """The steps the learning-rate schedule spans: --schedule-steps, else the
    run's length ``total``."""
    return int(record.get("schedule_steps") or total)


def _check_fresh_directory(checkpoint_dir):
    """A new run must not write over (and later delete) another run's files."""
    if checkpoint_dir and model_files(checkpoint_dir):
        raise ValueError(f"--checkpoint-dir {checkpoint_dir!r} already holds checkpoints "
                         f"({', '.join(model_files(checkpoint_dir)[:3])}); add --resume to "
                         "continue that run, or choose another directory")


def _describe(length):
    parts = [f"{option_flag(name)} {length[name]}" for name in ("steps", "epochs")
             if length.get(name)]
    return " ".join(parts)


def option_flag(name):
    """The command-line flag of an option: option_flag("batch_size") is "--batch-size"."""
    return "--" + name.replace("_", "-")
