"""--resume over damaged checkpoints (issue 32, item 8): a checkpoint without
its pipeline state, or with one that does not fit the data, a state file of
binary bytes, a file that is no .npz, and weights that hold NaN. Each is named
in one line, never a traceback; a damaged newest checkpoint is skipped with a
warning naming it and the run goes on from the previous good one, as for a
corrupt file; NaN weights are refused, naming the variable."""

import json
import shutil

import numpy as np
import pytest

import towerflow as tf
from towerflow import cli
from towerflow.train import checkpoint_format
from towerflow.train.checkpoint_format import get_checkpoint_state, read_checkpoint

pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
# 6 of the 12 steps a schedule of its own spans, a checkpoint every 3: model-3 and
# model-6, resumed to --steps 12 without --extend.
RUN = ["train", "digits", "--devices", "/cpu:0", "--batch-size", "64", "--seed", "5",
       "--schedule-steps", "12", "--checkpoint-every", "3", "--quiet"]


def train(directory, *options):
    return cli.main([*RUN, "--checkpoint-dir", str(directory),
                     "--json-out", str(directory) + ".json", *options])


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory):
    directory = tmp_path_factory.mktemp("six") / "ck"
    assert train(directory, "--steps", "6") == 0
    return directory


@pytest.fixture
def run_dir(tmp_path, six_steps, no_gpu):
    """A copy of the six steps' directory, to damage."""
    directory = tmp_path / "ck"
    shutil.copytree(six_steps, directory)
    return directory


def resume(directory, capsys):
    """(exit status, stderr's lines) of --resume to step 12."""
    status = train(directory, "--steps", "12", "--resume")
    return status, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def rewrite(path, change_state=None, change_variables=None):
    """Write the checkpoint ``path`` again with its extra state and/or variables changed."""
    saved = read_checkpoint(str(path))
    variables, state = dict(saved.variables), dict(saved.extra_state)
    if change_state:
        change_state(state)
    if change_variables:
        change_variables(variables)
    checkpoint_format.write_checkpoint(str(path), variables, saved.global_step,
                                       *checkpoint_format._encode_extra_state(state))


def finished_at(directory):
    return json.loads(open(str(directory) + ".json").read())["steps"]


def drop_pipeline(state):
    del state["pipeline"]


def other_data(state):
    state["pipeline"] = dict(state["pipeline"], num_examples=5)


def not_a_dict(state):
    state["pipeline"] = "somewhere"


@pytest.mark.parametrize("damage, problem", [
    (drop_pipeline, ("it holds no pipeline state (the data order's position), which "
                     "--resume needs")),
    (other_data, ("its pipeline state does not fit this run: Pipeline state is for "
                  "num_examples=5, but this Pipeline has num_examples=")),
    (not_a_dict, ("its pipeline state does not fit this run: Pipeline state is a str; "
                  "expected the dict of seed, epoch, position, batch_size, num_examples")),
], ids=["missing", "other-data", "not-a-dict"])
def test_a_newest_checkpoint_without_good_pipeline_state_is_named_and_skipped(
        run_dir, capsys, damage, problem):
    rewrite(run_dir / "model-6.npz", change_state=damage)
    status, lines = resume(run_dir, capsys)
    assert status == 0, lines
    assert len(lines) == 1 and lines[0].startswith(
        f"towerflow: skipping checkpoint {run_dir}/model-6: {problem}"), lines
    assert finished_at(run_dir) == 12                  # went on from model-3


def test_no_checkpoint_with_pipeline_state_is_one_line_naming_each(run_dir, capsys):
    (run_dir / "model-3.npz").unlink()              # still listed in the state file
    rewrite(run_dir / "model-6.npz", change_state=drop_pipeline)
    status, lines = resume(run_dir, capsys)
    assert status == 2
    assert lines == [(
        f"towerflow: error: --resume: no checkpoint in {str(run_dir)!r} can be resumed "
        f"from: {run_dir}/model-6: it holds no pipeline state (the data order's position), "
        f"which --resume needs; {run_dir}/model-3: Checkpoint {run_dir}/model-3 not found "
        f"(no file {run_dir}/model-3 or {run_dir}/model-3.npz)")]


def test_a_state_file_of_binary_bytes_is_named_and_the_checkpoints_found(run_dir, capsys):
    (run_dir / "checkpoint").write_bytes(bytes(range(256)))
    with pytest.raises(tf.errors.DataLossError,
                       match=f"Checkpoint state file {run_dir}/checkpoint is not UTF-8 text"):
        get_checkpoint_state(str(run_dir))
    status, lines = resume(run_dir, capsys)
    assert status == 0, lines
    assert lines[0].startswith(f"towerflow: ignoring the state file {run_dir}/checkpoint "
                                "(Checkpoint state file"), lines
    assert finished_at(run_dir) == 12


def test_a_file_that_is_no_npz_is_named_without_numpys_unsafe_loading_hint(run_dir, capsys):
    for junk in (b"hello, world\n", b"\x80\x04\x95 pickled", np.zeros(3).tobytes()):
        (run_dir / "model-6.npz").write_bytes(junk)
        with pytest.raises(tf.errors.DataLossError) as raised:
            read_checkpoint(str(run_dir / "model-6.npz"))
        assert str(raised.value) == (f"Checkpoint {run_dir}/model-6.npz is truncated or "
                                     "corrupt: not an .npz file (a zip archive)")
    status, lines = resume(run_dir, capsys)
    assert status == 0, lines
    assert not any("unsafely" in line or "allow_pickle" in line for line in lines), lines
    assert "not an .npz file" in lines[0] and finished_at(run_dir) == 12


def test_resuming_weights_that_hold_nan_is_refused_naming_the_variable(run_dir, capsys):
    def poison(variables):
        name = next(name for name, value in sorted(variables.items())
                    if value.dtype == np.float32 and value.ndim == 2)
        value = variables[name].copy()
        value[0, :3] = np.nan
        variables[name] = value
        poison.name = name
    rewrite(run_dir / "model-6.npz", change_variables=poison)
    status, lines = resume(run_dir, capsys)
    assert status == 2
    assert lines == [(
        f"towerflow: error: --resume: checkpoint {run_dir}/model-6 holds 3 NaN or infinite "
        f"values in variable '{poison.name}': the run had diverged by step 6, and would "
        "train on to NaN losses")]
