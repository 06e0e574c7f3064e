"""Interrupted runs, on a real `towerflow train` subprocess with real signals:
SIGINT/SIGTERM mid-epoch then --resume ends bit for bit where the straight run
ends (1 and 2 towers, and 2 MPI ranks under `towerflow launch`); --steps is
the run's total; clock checkpoints mid-epoch resume exactly; a SIGKILL while
a checkpoint is written leaves the previous one usable; --resume never starts
again from step 0."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from launched_jobs import MPI_MISSING, launch_line

from towerflow import run_control
from towerflow.train.checkpoint_format import latest_checkpoint, read_checkpoint

pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
ROOT = str(Path(__file__).resolve().parents[1])
PYTHON = [sys.executable, "-m", "towerflow"]
STEPS = 60            # 23 steps an epoch at --batch-size 64: ends in epoch 3
RUN = ["digits", "--batch-size", "64", "--seed", "3", "--quiet"]


def environment(**extra):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop(run_control.SELF_SIGNAL_ENV, None)
    return dict(env, **extra)


def train(directory, *args, env=None, launch=False):
    """`towerflow train` (under `towerflow launch -n 2` with ``launch``)."""
    line = [*PYTHON, "train", *args, "--checkpoint-dir", str(directory),
            "--json-out", str(directory) + ".json"]
    if launch:
        line = launch_line(line)
    return subprocess.run(line, check=False, capture_output=True, text=True, timeout=300,
                          env=env or environment())


def outcome(directory):
    """(final loss, {variable: array}) of the run whose checkpoints are in ``directory``."""
    summary = json.loads(Path(str(directory) + ".json").read_text())
    checkpoint = read_checkpoint(latest_checkpoint(str(directory)))
    return summary["final_loss"], summary["steps"], checkpoint.variables


def assert_same_run(got, want):
    assert got[:2] == want[:2]                          # final loss and step, exactly
    assert sorted(got[2]) == sorted(want[2])
    for name, value in want[2].items():
        np.testing.assert_array_equal(got[2][name], value, err_msg=name)


def resume_from(result):
    """The resume command printed on the interrupt line, as words to run."""
    lines = [line for line in result.stdout.splitlines() if "interrupted" in line]
    assert len(lines) == 1, result.stdout + result.stderr
    words = shlex.split(lines[0].split("resume with: ", 1)[1])
    assert words[:2] == ["towerflow", "train"] and words[-1] == "--resume"
    return words[2:]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The uninterrupted runs, by tower count."""
    runs = {}

    def run(towers, steps=STEPS):
        if (towers, steps) not in runs:
            directory = tmp_path_factory.mktemp(f"straight{towers}_{steps}") / "ck"
            done = train(directory, *RUN, "--cpu-towers", str(towers), "--steps", str(steps))
            assert done.returncode == 0, done.stderr
            runs[towers, steps] = outcome(directory)
        return runs[towers, steps]
    return run


@pytest.mark.parametrize("name, towers", [("SIGINT", 1), ("SIGTERM", 2)])
def test_a_signal_mid_epoch_then_resume_is_the_straight_run(tmp_path, straight, name, towers):
    directory = tmp_path / "ck"
    hooked = environment(**{run_control.SELF_SIGNAL_ENV: f"35:{name}"})
    stopped = train(directory, *RUN, "--cpu-towers", str(towers), "--steps", str(STEPS),
                    env=hooked)
    signum = getattr(signal, name)
    assert stopped.returncode == 128 + signum, stopped.stderr
    assert stopped.stdout.startswith("interrupted at step 35 (epoch 2); resume with: "
                                     "towerflow train digits ")
    assert "Traceback" not in stopped.stderr
    assert latest_checkpoint(str(directory)).endswith("model-35")
    resumed = subprocess.run([*PYTHON, "train", *resume_from(stopped)], check=False,
                             capture_output=True,
                             text=True, timeout=300, env=environment())
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(outcome(directory), straight(towers))


def test_resume_on_another_tower_count_is_the_straight_run_up_to_reordering(tmp_path,
                                                                             straight):
    """2 towers interrupted at step 55, resumed on 1: the same global batches
    (epoch 3's) and schedule, the gradient sums only ordered differently, so
    the run ends within the budget test_parallel allows towers against one
    device (1e-5 relative). NOTE: a few steps only: float32 reorderings grow
    through ReLU and max-pool ties over many steps (25 steps on 1 tower
    ended 1.3e-4 off 2 towers' run with the compiled GEMM summing in its own
    order); the float64 differential suite checks towers over whole runs."""
    directory = tmp_path / "ck"
    hooked = environment(**{run_control.SELF_SIGNAL_ENV: "55:SIGINT"})
    stopped = train(directory, *RUN, "--cpu-towers", "2", "--steps", str(STEPS), env=hooked)
    words = resume_from(stopped)
    at = words.index("--cpu-towers")
    words[at + 1] = "1"
    resumed = subprocess.run([*PYTHON, "train", *words], check=False, capture_output=True,
                             text=True, timeout=300, env=environment())
    assert resumed.returncode == 0, resumed.stderr
    loss, steps, values = outcome(directory)
    want_loss, want_steps, want_values = straight(2)
    assert steps == want_steps == STEPS
    assert abs(loss - want_loss) <= 1e-5 * abs(want_loss)
    for name, value in want_values.items():
        scale = max(np.max(np.abs(value)), 1e-12)
        assert np.max(np.abs(values[name] - value)) / scale <= 1e-5, name


def test_sigint_from_outside_then_resume_is_the_straight_run(tmp_path, straight):
    directory, steps = tmp_path / "ck", 200
    line = [*PYTHON, "train", *RUN, "--cpu-towers", "1", "--steps", str(steps),
            "--checkpoint-dir", str(directory), "--json-out", str(directory) + ".json"]
    process = subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment())
    wait_for(directory / "model-23.npz", process)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    step = int(out.split("interrupted at step ")[1].split()[0])
    assert 23 <= step < steps
    resumed = train(directory, "digits", "--cpu-towers", "1", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(outcome(directory), straight(1, steps))


def wait_for(path, process, seconds=120):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.02)


def test_steps_is_the_runs_total(tmp_path, straight):
    directory = tmp_path / "ck"
    assert train(directory, *RUN, "--cpu-towers", "1", "--steps", "30").returncode == 0
    again = train(directory, "digits", "--cpu-towers", "1", "--resume")
    assert again.returncode == 0
    assert again.stdout.strip() == (f"towerflow: the run in {directory} already reached its "
                                    "end (step 30 of 30); nothing to do but write its "
                                    f"summary, saved in model-30, to {directory}.json")
    longer = train(directory, "digits", "--cpu-towers", "1", "--steps", "60", "--resume")
    assert longer.returncode == 2
    assert longer.stderr.count("\n") == 1 and "add --extend" in longer.stderr
    extended = train(directory, "digits", "--cpu-towers", "1", "--steps", "60", "--resume",
                     "--extend")
    assert extended.returncode == 0, extended.stderr
    assert outcome(directory)[1] == 60                  # the total, not 30 more


def test_a_run_on_a_fixed_schedule_resumed_to_a_longer_length_is_the_straight_run(
        tmp_path, straight):
    """`--steps 30` of a run whose schedule spans 60 steps, then `--steps 60
    --resume`, is the straight `--steps 60` run (whose schedule spans its 60
    steps) bit for bit: no --extend needed, since no step changes schedule."""
    directory = tmp_path / "ck"
    first = train(directory, *RUN, "--cpu-towers", "2", "--steps", "30",
                  "--schedule-steps", str(STEPS))
    assert first.returncode == 0, first.stderr
    longer = train(directory, "digits", "--cpu-towers", "2", "--steps", str(STEPS),
                   "--resume")
    assert longer.returncode == 0, longer.stderr
    assert_same_run(outcome(directory), straight(2))
    changed = train(directory, "digits", "--cpu-towers", "2", "--steps", "90", "--resume",
                    "--schedule-steps", "90")
    assert changed.returncode == 2
    assert changed.stderr.strip().endswith(
        "--schedule-steps 90 differs from the checkpoint "
        f"{directory}/model-60 (--schedule-steps 60); a resumed run keeps the options "
        "that define its model, data and schedule")


def test_a_clock_checkpoint_mid_epoch_resumes_exactly(tmp_path, straight):
    directory = tmp_path / "ck"
    killed = environment(**{run_control.SELF_SIGNAL_ENV: "37:SIGKILL"})
    died = train(directory, *RUN, "--cpu-towers", "2", "--steps", str(STEPS),
                 "--checkpoint-every", "10", "--keep-checkpoints", "2", env=killed)
    assert died.returncode == -signal.SIGKILL
    kept = sorted(path.name for path in directory.glob("model-*.npz"))
    assert kept == ["model-20.npz", "model-30.npz"]      # mid-epoch 2; the last 2 kept
    resumed = train(directory, "digits", "--cpu-towers", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(outcome(directory), straight(2))


KILL_IN_SECOND_WRITE = """
import os, signal, sys
from towerflow import cli
from towerflow.train import checkpoint_format
renames = []
def replace(source, target):
    renames.append(target)
    if target.endswith('model-20.npz'):          # written in full, not yet renamed
        os.kill(os.getpid(), signal.SIGKILL)
    return os.rename(source, target)
checkpoint_format.os.replace = replace
sys.exit(cli.main(sys.argv[1:]))
"""


def test_sigkill_while_a_checkpoint_is_written_keeps_the_previous_one(tmp_path, straight):
    directory = tmp_path / "ck"
    line = [sys.executable, "-c", KILL_IN_SECOND_WRITE, "train", *RUN, "--cpu-towers", "2",
            "--steps", str(STEPS), "--checkpoint-every", "10",
            "--checkpoint-dir", str(directory), "--json-out", str(directory) + ".json"]
    died = subprocess.run(line, check=False, capture_output=True, text=True, timeout=300,
                          env=environment())
    assert died.returncode == -signal.SIGKILL
    assert latest_checkpoint(str(directory)).endswith("model-10")
    resumed = train(directory, "digits", "--cpu-towers", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(outcome(directory), straight(2))


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "does not exist"),
    (lambda d: d.mkdir(), "has no checkpoint index file"),
    (lambda d: (d.mkdir(), (d / "checkpoint").write_text("")), "has no checkpoint index"),
])
def test_resume_without_a_checkpoint_is_refused(tmp_path, setup, message):
    directory = tmp_path / "ck"
    setup(directory)
    refused = train(directory, "digits", "--cpu-towers", "1", "--resume")
    assert refused.returncode == 2
    assert refused.stderr.startswith("towerflow: error: --resume: ") and message in refused.stderr
    assert refused.stderr.count("\n") == 1


def test_a_new_run_never_writes_over_another_runs_checkpoints(tmp_path):
    directory = tmp_path / "ck"
    assert train(directory, *RUN, "--cpu-towers", "1", "--steps", "5").returncode == 0
    (directory / "checkpoint").unlink()                 # the index lost, the files kept
    before = (directory / "model-5.npz").read_bytes()
    refused = train(directory, *RUN, "--cpu-towers", "1", "--steps", "9")
    assert refused.returncode == 2 and "model-5.npz" in refused.stderr
    found = train(directory, "digits", "--cpu-towers", "1", "--resume")   # finds model-5
    assert found.returncode == 0 and "already reached its end (step 5 of 5)" in found.stdout
    assert (directory / "model-5.npz").read_bytes() == before


def test_resume_never_follows_the_state_file_out_of_its_directory(tmp_path):
    """A state file naming another run's checkpoint (an absolute path, or ../)
    is refused in one line; --resume used to restore it and then prune, deleting
    the other run's checkpoints (issue 32, item 3)."""
    other, mine = tmp_path / "other", tmp_path / "mine"
    for directory in (other, mine):
        assert train(directory, *RUN, "--cpu-towers", "1", "--steps", "5",
                     "--schedule-steps", "9", "--checkpoint-every", "1",
                     "--keep-checkpoints", "2").returncode == 0
    kept = sorted(path.name for path in other.glob("model-*.npz"))
    for listed in (str(other / "model-5"), "../other/model-5"):
        (mine / "checkpoint").write_text(
            f'model_checkpoint_path: "{listed}"\n'
            f'all_model_checkpoint_paths: "{other / "model-4"}"\n'
            f'all_model_checkpoint_paths: "{listed}"\n')
        refused = train(mine, "digits", "--cpu-towers", "1", "--steps", "9", "--resume",
                        "--checkpoint-every", "1", "--keep-checkpoints", "2")
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and "outside --checkpoint-dir" in refused.stderr
    assert sorted(path.name for path in other.glob("model-*.npz")) == kept


@pytest.mark.skipif(not os.path.exists("/proc/sys/kernel/pid_max"), reason="Linux's pid_max")
def test_a_finished_run_removes_the_temporaries_of_killed_writes(tmp_path):
    """A write killed mid-way leaves its hidden temporary (.NAME.tmp-PID-HEX);
    the resumed run that finishes removes those whose process is gone, and
    leaves a live process's (issue 32, item 9)."""
    directory = tmp_path / "ck"
    assert train(directory, *RUN, "--cpu-towers", "1", "--steps", "5",
                 "--schedule-steps", "9").returncode == 0
    no_process = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1   # never a pid
    dead = directory / f".model-7.npz.tmp-{no_process}-0badc0de"
    dead.write_bytes(b"half a checkpoint")
    alive = directory / f".checkpoint.tmp-{os.getpid()}-feedf00d"
    alive.write_bytes(b"being written")
    done = train(directory, "digits", "--cpu-towers", "1", "--steps", "9", "--resume")
    assert done.returncode == 0, done.stderr
    assert not dead.exists() and alive.exists()


def test_a_second_run_in_a_busy_directory_refuses_and_a_killed_runs_lock_is_taken_over(
        tmp_path):
    """Two runs in one --checkpoint-dir used to both write and leave a mixed
    state file (issue 32, item 2): the second now refuses at start, naming the
    first's pid and host; after the first is SIGKILLed its lock is stale and
    --resume goes on."""
    directory = tmp_path / "ck"
    line = [*PYTHON, "train", *RUN, "--cpu-towers", "1", "--steps", "100000",
            "--checkpoint-dir", str(directory)]
    first = subprocess.Popen(line, env=environment(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(directory.glob("model-*.npz")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (directory / ".lock").exists(), "the first run never took the lock"
        for extra in ([], ["--resume"]):
            second = train(directory, *RUN, "--cpu-towers", "1", "--steps", "100000", *extra)
            assert second.returncode == 2
            assert second.stderr.count("\n") == 1, second.stderr
            assert f"is in use by another run (pid {first.pid} on " in second.stderr
    finally:
        first.kill()
        first.wait(timeout=60)
    saved = max(int(path.stem.split("-")[1]) for path in directory.glob("model-*.npz"))
    hooked = environment(**{run_control.SELF_SIGNAL_ENV: f"{saved + 2}:SIGTERM"})
    resumed = train(directory, "digits", "--cpu-towers", "1", "--steps", "100000",
                    "--resume", env=hooked)
    assert resumed.returncode == 143, resumed.stderr      # stopped by the hook, not refused
    assert not (directory / ".lock").exists()


def test_resume_refuses_a_changed_option_that_defines_the_run(tmp_path):
    directory = tmp_path / "ck"
    assert train(directory, *RUN, "--cpu-towers", "1", "--steps", "5").returncode == 0
    for option in (["--seed", "4"], ["--batch-size", "32"], ["--precision", "mixed_float16"]):
        refused = train(directory, "digits", "--cpu-towers", "1", "--steps", "9", "--resume",
                        *option)
        assert refused.returncode == 2
        assert f"{option[0]} {option[1]} differs from the checkpoint" in refused.stderr


def test_sigterm_to_the_launcher_stops_both_ranks_at_one_step(tmp_path):
    pytest.importorskip("mpi4py", reason=MPI_MISSING)
    straight_dir, directory, steps = tmp_path / "straight", tmp_path / "ck", 120
    args = [*RUN, "--cpu-towers", "1", "--steps", str(steps)]
    assert train(straight_dir, *args, launch=True).returncode == 0
    line = launch_line([*PYTHON, "train", *args, "--checkpoint-dir", str(directory),
                        "--json-out", str(directory) + ".json"])
    launcher = subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=environment())
    wait_for(directory / "model-23.npz", launcher)
    launcher.send_signal(signal.SIGTERM)
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 143, err
    lines = [line for line in out.splitlines() if line.startswith("interrupted at step")]
    assert len(lines) == 1 and "resume with: towerflow launch -n 2 -- towerflow train" in out
    step = int(lines[0].split()[3])
    written = sorted(int(path.stem.split("-")[1]) for path in directory.glob("model-*.npz"))
    assert written[-1] == step and step not in written[:-1]     # one checkpoint, at step
    assert "timed out" not in err and "Traceback" not in err
    resumed = train(directory, "digits", "--cpu-towers", "1", "--resume", launch=True)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_run(outcome(directory), outcome(straight_dir))


def test_ctrl_c_on_a_terminal_stops_a_launched_run_with_one_checkpoint(tmp_path):
    """Ctrl-C typed on the launcher's terminal: the terminal sends SIGINT to its
    whole foreground process group, not to one process; the ranks still stop
    together, with one checkpoint, and the launcher exits 130."""
    pytest.importorskip("mpi4py", reason=MPI_MISSING)
    directory = tmp_path / "ck"
    line = launch_line([*PYTHON, "train", *RUN, "--cpu-towers", "1", "--steps", "400",
                        "--checkpoint-dir", str(directory)])
    out, returncode = run_on_a_terminal(line, typed_when=directory / "model-23.npz")
    assert returncode == 130, out
    stops = re.findall(r"^(?:\^C)?interrupted at step (\d+) ", out, re.MULTILINE)  # ^C: echo
    assert len(stops) == 1, out
    step = int(stops[0])
    written = sorted(int(path.stem.split("-")[1]) for path in directory.glob("model-*.npz"))
    assert written[-1] == step and step not in written[:-1], out
    assert "Traceback" not in out and "timed out" not in out


def run_on_a_terminal(line, typed_when, seconds=180):
    """Run ``line`` as the foreground job of a new pseudo-terminal and type
    Ctrl-C there once ``typed_when`` exists; (everything it wrote, exit status)."""
    import fcntl
    import pty
    import termios
    controller, terminal = pty.openpty()

    def take_the_terminal():        # in the child: the pty becomes its controlling terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    # NOTE: preexec_fn is unsafe only with threads that hold locks at the fork;
    # the ioctl takes none, and subprocess offers no other way to set a terminal.
    process = subprocess.Popen(line, stdin=terminal, stdout=terminal, stderr=terminal,
                               env=environment(), start_new_session=True,
                               preexec_fn=take_the_terminal)  # noqa: PLW1509
    os.close(terminal)
    written, typed, deadline = [], False, time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not typed and typed_when.exists():
            os.write(controller, b"\x03")
            typed = True
        try:
            chunk = os.read(controller, 65536) if _readable(controller) else b""
        except OSError:                     # the terminal closed: every writer exited
            break
        written.append(chunk)
    os.close(controller)
    process.wait(timeout=30)
    return b"".join(written).decode(errors="replace"), process.returncode


def _readable(descriptor):
    import select
    return bool(select.select([descriptor], [], [], 0.05)[0])


def test_a_signal_to_one_rank_stops_every_rank_at_its_step(tmp_path):
    pytest.importorskip("mpi4py", reason=MPI_MISSING)
    directory = tmp_path / "ck"
    only_rank_1 = environment(**{run_control.SELF_SIGNAL_ENV: "30:SIGTERM:1"},
                              TOWERFLOW_COLLECTIVE_TIMEOUT="20")
    stopped = train(directory, *RUN, "--cpu-towers", "1", "--steps", str(STEPS),
                    env=only_rank_1, launch=True)
    assert "interrupted at step 30 (epoch 2)" in stopped.stdout, stopped.stderr
    assert "Traceback" not in stopped.stderr and "timed out" not in stopped.stderr
    written = sorted(int(path.stem.split("-")[1]) for path in directory.glob("model-*.npz"))
    assert written == [23, 30]                          # rank 0 wrote the stop's checkpoint


def test_a_signal_the_process_inherits_ignored_stays_ignored():
    """A run started with SIGINT ignored (nohup-style, or `cmd &` from a script)
    must keep ignoring it: StopSignals used to install its handler over SIG_IGN,
    so a stray Ctrl-C aimed at the shell stopped the background run (issue 32,
    item 11). SIGTERM, not ignored, is still caught."""
    program = (
        "import os, signal\n"
        "from towerflow.run_control import StopSignals\n"
        "with StopSignals() as signals:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "print(ignored, signals.requested == signal.SIGTERM,\n"
        "      signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n")
    ignoring = f"trap '' INT; exec {shlex.quote(sys.executable)} -c {shlex.quote(program)}"
    done = subprocess.run(["sh", "-c", ignoring], env=environment(), capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.split() == ["True", "True", "True"], done.stdout + done.stderr
