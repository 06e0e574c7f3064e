"""--json-out's speed figures count training only: ``samples_per_sec`` and
``step_ms`` over the training steps after the first, with the evaluation
(``eval_seconds``) and the first step (``first_step_seconds``) apart; the
printed summary line says the same."""

import time

import pytest

from towerflow import cli_train, training, training_evaluation, training_rate
from towerflow.recipes import get

pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn "
                                      "(pip install 'towerflow[data]')")

EVALUATION, FIRST_STEP = 1000.0, 500.0     # seconds the fake clock jumps


@pytest.fixture
def slow_clock(monkeypatch):
    """The training clock, made to jump EVALUATION seconds in each evaluation and
    FIRST_STEP seconds at the end of the first step."""
    offset, first_step = [0.0], []
    monkeypatch.setattr(training_rate, "clock", lambda: time.perf_counter() + offset[0])
    evaluate, step_done = training_evaluation.evaluate, training_rate.StepClock.step_done

    def slow_evaluate(*args):
        offset[0] += EVALUATION
        return evaluate(*args)

    def first_step_slow(self, *args):
        if not first_step:
            first_step.append(True)
            offset[0] += FIRST_STEP
        return step_done(self, *args)
    monkeypatch.setattr(training_evaluation, "evaluate", slow_evaluate)
    monkeypatch.setattr(training_rate.StepClock, "step_done", first_step_slow)


def test_samples_per_sec_leaves_out_evaluation_and_the_first_step(slow_clock, no_gpu):
    # 30 steps of 64: epoch 1 (23 steps) ends with an evaluation, the run's end
    # with another
    result = training.fit(get("digits"), ["/cpu:0"], batch_size=64, steps=30, quiet=True)
    assert result["eval_seconds"] >= 2 * EVALUATION
    assert result["first_step_seconds"] >= FIRST_STEP
    training_seconds = result["wall_seconds"] - result["eval_seconds"] - \
        result["first_step_seconds"]
    assert 0 < training_seconds < EVALUATION
    counted = 28 * 64      # at least: 29 steps after the first, one of them ragged
    assert result["samples_per_sec"] >= counted / training_seconds
    assert result["step_ms"] / 1000 <= training_seconds


def test_tensorboard_samples_per_sec_leaves_out_evaluation(slow_clock, no_gpu, tmp_path):
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    # rows of 10 steps; epoch 1 (23 steps) ends with a 1000 s evaluation
    result = training.fit(get("digits"), ["/cpu:0"], batch_size=64, steps=40, quiet=True,
                          log_every=10, tensorboard=str(tmp_path))
    events = ea.EventAccumulator(result["tensorboard_run"])
    events.Reload()
    rates = {event.step: event.value for event in events.Scalars("train/samples_per_sec")}
    assert sorted(rates) == [10, 20, 30, 40]
    # 10 steps of 64 in well under 1000 s each row; the first row holds the
    # first step's 500 s
    assert rates[10] < 640 / FIRST_STEP
    assert all(rates[step] > 640 / EVALUATION for step in (20, 30, 40))


def test_a_run_of_one_step_counts_that_step(no_gpu):
    result = training.fit(get("digits"), ["/cpu:0"], batch_size=64, steps=1, quiet=True)
    assert result["samples_per_sec"] == pytest.approx(64 / result["first_step_seconds"])
    assert result["step_ms"] == pytest.approx(1000 * result["first_step_seconds"])


def test_the_summary_line_shows_the_json_figures():
    result = {"recipe": "cifar10", "test_accuracy": 0.4583, "samples_per_sec": 491.4,
              "step_ms": 521.2, "towers": 1, "devices": ["/cpu:0"], "wall_seconds": 37.08,
              "eval_seconds": 11.35}
    assert cli_train.summary_line(result) == (
        "cifar10: test accuracy 0.4583, 491 samples/s of training (median step 521 ms) "
        "on 1 tower (/cpu:0), 37.1 s in all (11.3 s of evaluation)")
    launched = dict(result, towers=2, devices=["/cpu:0", "/cpu:1"], world_size=2)
    assert "on 2 ranks x 2 towers (/cpu:0, /cpu:1 each), 37.1 s" in \
        cli_train.summary_line(launched)


def test_step_clock_medians_and_rate_leave_out_the_first_step(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(training_rate, "clock", lambda: now[0])
    steps = training_rate.StepClock()
    steps.resume()
    for seconds, samples in [(9.0, 10), (1.0, 10), (3.0, 10), (2.0, 4)]:
        now[0] += seconds
        steps.step_done(samples)
    now[0] += 100.0                      # a checkpoint: not a step
    steps.resume()
    now[0] += 2.0
    steps.step_done(10)
    assert steps.summary() == {"samples_per_sec": 34 / 8.0, "step_ms": 2000.0,
                               "first_step_seconds": 9.0}
