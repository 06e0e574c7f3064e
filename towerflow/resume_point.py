"""Which checkpoint ``--resume`` continues from (issue 32, items 5 and 8).

The candidates are the checkpoints the state file ``checkpoint`` lists and the
directory's ``model-<step>.npz`` files (a run killed between writing a
checkpoint and listing it, its first one say, left one unlisted), newest step
first. A candidate that does not verify, or that the caller finds unfit (no
pipeline state, say), is skipped, and the run goes on from the next; a
warning names each one skipped. None left: one line naming every one and
why. Weights that hold NaN are refused: the run had diverged::

    candidates = Candidates("ck")
    for saved in candidates:            # verified Checkpoints, newest first
        if not fits(saved):
            candidates.skip(saved.path, "why")
            continue
        candidates.chosen(saved)        # warns of the ones skipped; checks for NaN
        return saved
    raise candidates.none_usable()
"""

import glob
import os
import re

import numpy as np

from . import errors
from .dtypes import is_bfloat16
from .log import logger
from .train.checkpoint_format import (
    checkpoint_exists,
    checkpoint_prefix,
    get_checkpoint_state,
    read_checkpoint,
)


class Candidates:
    """The checkpoints of ``checkpoint_dir`` to resume from, newest first, as
    verified ``Checkpoint``s (see the module docstring)."""

    def __init__(self, checkpoint_dir):
        if not checkpoint_dir:
            raise ValueError("--resume needs --checkpoint-dir")
        if not os.path.isdir(checkpoint_dir):
            raise FileNotFoundError(f"--resume: --checkpoint-dir {checkpoint_dir!r} does "
                                    "not exist; drop --resume to start a new run")
        self.directory, self.skipped = checkpoint_dir, []
        self.paths = _candidates(checkpoint_dir, _listed_or_warn(checkpoint_dir))
        if not self.paths:
            raise FileNotFoundError(f"--resume: {checkpoint_dir!r} has no checkpoint index "
                                    "file 'checkpoint' listing a checkpoint, and no "
                                    "model-*.npz")

    def __iter__(self):
        for path in self.paths:
            try:
                yield read_checkpoint(path)
            except (errors.DataLossError, errors.NotFoundError) as err:
                self.skip(path, err)

    def skip(self, path, why):
        """Pass over the checkpoint ``path`` (a prefix or its file) for ``why``."""
        self.skipped.append(f"{checkpoint_prefix(path)}: {why}")

    def chosen(self, saved):
        """``saved`` is the one: warn of those skipped; ValueError if it holds NaN."""
        for line in self.skipped:
            logger.warning("towerflow: skipping checkpoint %s", line)
        check_finite(saved)

    def none_usable(self):
        """The one-line error when every candidate was skipped."""
        return FileNotFoundError(f"--resume: no checkpoint in {self.directory!r} can be "
                                 f"resumed from: {'; '.join(self.skipped)}")


def check_finite(saved):
    """ValueError naming the first variable of ``saved`` that holds NaN or an
    infinity: training on from it gives NaN losses, silently."""
    for name, value in sorted(saved.variables.items()):
        if value.dtype.kind == "f" or is_bfloat16(value.dtype):
            bad = int(np.size(value) - np.count_nonzero(np.isfinite(value.astype(np.float32))))
            if bad:
                raise ValueError(
                    f"--resume: checkpoint {checkpoint_prefix(saved.path)} holds {bad} NaN "
                    f"or infinite values in variable '{name}': the run had diverged by step "
                    f"{saved.global_step}, and would train on to NaN losses")


def kept_checkpoints(checkpoint_dir, resumed):
    """The checkpoints (prefixes, oldest first) a run resumed from ``resumed``
    goes on pruning: the listed ones and the unlisted files a killed write left,
    up to ``resumed`` (later ones it writes again)."""
    try:
        listed = _listed(checkpoint_dir)
    except errors.DataLossError:        # Candidates warned of it; the next save rewrites it
        listed = []
    last = _step_of(resumed)
    return [path for path in reversed(_candidates(checkpoint_dir, listed))
            if _step_of(path) <= last and checkpoint_exists(path)]


def model_files(directory):
    """The names of the ``model-*.npz`` files in ``directory``, sorted."""
    return sorted(os.path.basename(path)
                  for path in glob.glob(os.path.join(glob.escape(directory), "model-*.npz")))


def inside(directory, path):
    """Whether ``path`` lies in ``directory`` (links resolved)."""
    directory = os.path.realpath(directory)
    return os.path.commonpath([directory, os.path.realpath(path)]) == directory


def _listed(checkpoint_dir):
    """The checkpoints the state file lists, newest first ([] without one);
    ValueError if one lies outside ``checkpoint_dir``, DataLossError if the
    state file cannot be read."""
    state = get_checkpoint_state(checkpoint_dir)
    if state is None or not state.model_checkpoint_path:
        return []
    listed = [state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)]
    _check_inside(checkpoint_dir, listed)
    return listed


def _listed_or_warn(checkpoint_dir):
    """``_listed``, or [] with a warning when the state file is unreadable: the
    checkpoints are found without it."""
    try:
        return _listed(checkpoint_dir)
    except errors.DataLossError as err:
        logger.warning("towerflow: ignoring the state file %s (%s); looking for "
                       "model-*.npz instead", os.path.join(checkpoint_dir, "checkpoint"),
                       err.message)
        return []


def _candidates(checkpoint_dir, listed):
    """``listed`` and the directory's model-<step>.npz files, as prefixes, newest
    step first (the listed first on a tie)."""
    found = [os.path.join(checkpoint_dir, name) for name in model_files(checkpoint_dir)]
    unique = dict.fromkeys(os.path.normpath(checkpoint_prefix(path)) for path in listed + found)
    return sorted(unique, key=_step_of, reverse=True)     # a stable sort


def _step_of(path):
    """The step in a checkpoint's name (``ck/model-300`` -> 300), -1 if none."""
    match = re.search(r"-(\d+)$", checkpoint_prefix(path))
    return int(match.group(1)) if match else -1


def _check_inside(checkpoint_dir, paths):
    """A run reads, and later prunes, only checkpoints inside its own directory: a
    state file naming one elsewhere (another run's) is refused, not followed."""
    outside = [path for path in paths if not inside(checkpoint_dir, path)]
    if outside:
        raise ValueError(f"--resume: {os.path.join(checkpoint_dir, 'checkpoint')} names "
                         f"{outside[0]!r}, outside --checkpoint-dir {checkpoint_dir!r}; a run "
                         "reads and deletes checkpoints only in its own directory")
