"""Gradient accumulation (issue 35, item 2): ``DataParallel(...,
accumulation_steps=K)`` and ``towerflow train --accumulate K``. K
micro-batches of B make one update equal to one step on their K * B
examples (float64, to its rounding), ragged micro-batches weighing each
example once; the all-reduce runs once per update, not once per micro-batch;
the global step and the learning-rate schedule count updates; a run resumes
exactly from a checkpoint taken between updates."""

import csv
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import split_cpu
from launched_jobs import run_on_ranks

import towerflow as tf
from towerflow.train.checkpoint_format import read_checkpoint

FEATURES, HIDDEN, CLASSES = 6, 7, 4
EPS64 = np.finfo(np.float64).eps
# float64 runs of a few updates: the two sides sum each update's per-example
# gradients in another order (a few roundings of eps64 per weight and update,
# carried by the optimizer); measured at most 2 eps64 of the largest weight, and
# bounded here by 64 eps64 (1.4e-14), while weighing each micro-batch's mean
# 1/K instead of by its examples is 0.7 off in the ragged test (a red run).
FLOAT64_BOUND = 64 * EPS64


@pytest.fixture(autouse=True)
def four_cpus(no_gpu):
    split_cpu(4)


def mlp(inputs):
    """A float64 MLP whose initial weights are fixed NumPy draws."""
    x, labels = inputs
    draws = np.random.default_rng(11)
    w1 = tf.get_variable("w1", initializer=draws.standard_normal((FEATURES, HIDDEN)) * 0.6)
    b1 = tf.get_variable("b1", initializer=draws.standard_normal(HIDDEN) * 0.1)
    w2 = tf.get_variable("w2", initializer=draws.standard_normal((HIDDEN, CLASSES)) * 0.6)
    b2 = tf.get_variable("b2", initializer=np.zeros(CLASSES))
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))


def momentum_on_a_schedule(global_step):
    """Momentum whose rate halves every 2 steps: the schedule must count updates."""
    return tf.train.MomentumOptimizer(
        tf.train.exponential_decay(0.2, global_step, 2, 0.5, staircase=True), 0.9)


def adam(global_step):
    return tf.train.AdamOptimizer(0.05)


OPTIMIZERS = {"momentum": momentum_on_a_schedule, "adam": adam}


def examples(count, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((count, FEATURES)), rng.integers(0, CLASSES, count)


def placeholders():
    return tf.placeholder(tf.float64, [None, FEATURES]), tf.placeholder(tf.int64, [None])


def one_device(data, update_sizes, make_optimizer):
    """The reference: one device, no strategy, one step per update on all its
    examples. Returns the weights and the global step."""
    tf.reset_default_graph()
    x, labels = placeholders()
    global_step = tf.train.get_or_create_global_step()
    train_op = make_optimizer(global_step).minimize(mlp((x, labels)), global_step=global_step)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for start, stop in spans(update_sizes):
            sess.run(train_op, {x: data[0][start:stop], labels: data[1][start:stop]})
        return sess.run(tf.trainable_variables()), sess.run(global_step)


def accumulating(data, updates, make_optimizer, towers, accumulation_steps,
                 bucket_bytes=4 << 20, all_reduce="cpu", device_kind="cpu", config=None):
    """DataParallel with accumulation; ``updates``: per update, its
    micro-batch sizes (the last micro-batch of each runs train_op, the others
    accumulate_op). Returns tower 0's weights, the global step, the replicas
    (bit-identical) and the step."""
    tf.reset_default_graph()
    x, labels = placeholders()
    global_step = tf.train.get_or_create_global_step()
    strategy = tf.parallel.DataParallel(
        [f"/{device_kind}:{i}" for i in range(towers)], all_reduce=all_reduce,
        bucket_bytes=bucket_bytes, accumulation_steps=accumulation_steps)
    step = strategy.minimize(mlp, (x, labels), make_optimizer(global_step),
                             global_step=global_step)
    micro_sizes = [size for update in updates for size in update]
    last_of_update = np.cumsum([len(update) for update in updates]) - 1
    with tf.Session(config=config) as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        for index, (start, stop) in enumerate(spans(micro_sizes)):
            op = step.train_op if index in last_of_update else step.accumulate_op
            sess.run(op, {x: data[0][start:stop], labels: data[1][start:stop]})
        replicas = sess.run(step.replicas)
        return sess.run(step.variables), sess.run(global_step), replicas, step


def spans(sizes):
    bounds = np.cumsum([0, *sizes])
    return list(itertools.pairwise(bounds))


def relative_difference(ours, reference):
    return max(np.max(np.abs(a - b)) / np.max(np.abs(b)) for a, b in zip(ours, reference))


def assert_replicas_identical(replicas):
    for replica in replicas[1:]:
        for first, other in zip(replicas[0], replica):
            assert np.array_equal(first, other), "replicas drifted apart"


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("towers", [1, 2])
def test_k_micro_batches_of_b_train_like_one_batch_of_k_times_b(towers, optimizer):
    """4 updates of 3 micro-batches of 5 (ragged shards 3 + 2 on 2 towers)
    give the weights of 4 steps on batches of 15, to float64 rounding."""
    data = examples(60)
    reference, reference_step = one_device(data, [15] * 4, OPTIMIZERS[optimizer])
    weights, global_step, replicas, _ = accumulating(data, [[5, 5, 5]] * 4,
                                                     OPTIMIZERS[optimizer], towers, 3)
    assert global_step == reference_step == 4       # the global step counts updates
    assert relative_difference(weights, reference) <= FLOAT64_BOUND
    assert_replicas_identical(replicas)


def test_ragged_micro_batches_weigh_every_example_once():
    """Micro-batches of 5, 1 and 3 examples (the 1 leaves a tower's shard
    empty), then an update ended early after 2 micro-batches of 4 (an epoch's
    end): each update equals one step on its 9 and 8 examples, not a mean of
    micro-batch means."""
    data = examples(17, seed=1)
    reference, _ = one_device(data, [9, 8], momentum_on_a_schedule)
    weights, global_step, replicas, _ = accumulating(data, [[5, 1, 3], [4, 4]],
                                                     momentum_on_a_schedule, 2, 3)
    assert global_step == 2
    assert relative_difference(weights, reference) <= FLOAT64_BOUND
    assert_replicas_identical(replicas)


def collective_counts(step, run, feeds):
    """Per ``Session.run`` of ``run(i)`` (an op per micro-batch), how many of
    the all-reduce's collectives (the communicator's per-bucket sums) ran, from
    the run's step stats."""
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    sums = re.compile(r"(^|/)all_reduce_\w+/sum_\d+$")
    counts = []
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        for index, feed in enumerate(feeds):
            metadata = tf.RunMetadata()
            sess.run(run(index), feed, options=options, run_metadata=metadata)
            counts.append(sum(1 for device in metadata.step_stats.dev_stats
                              for node in device.node_stats if sums.search(node.node_name)))
    return counts


@pytest.mark.parametrize("all_reduce", ["cpu", "local"])
def test_the_all_reduce_runs_once_per_update_not_once_per_micro_batch(all_reduce):
    """With 3 gradient buckets and K = 4, 8 micro-batches run the 3 bucket
    sums twice (at each update's last micro-batch); without accumulation
    every step runs them."""
    x, labels = placeholders()
    data = examples(8 * 6, seed=2)
    feeds = [{x: data[0][start:start + 6], labels: data[1][start:start + 6]}
             for start in range(0, 48, 6)]
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], all_reduce=all_reduce,
                                        bucket_bytes=300, accumulation_steps=4)
    step = strategy.minimize(mlp, (x, labels), tf.train.GradientDescentOptimizer(0.1))
    buckets = len(tf.local_variables()) // 2 - 1        # per tower: buckets + a count
    assert buckets == 3
    assert collective_counts(step, step.op_for, feeds) == [0, 0, 0, 3, 0, 0, 0, 3]
    tf.reset_default_graph()
    x, labels = placeholders()
    feeds = [{x: data[0][start:start + 6], labels: data[1][start:start + 6]}
             for start in range(0, 48, 6)]
    plain = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], all_reduce=all_reduce,
                                     bucket_bytes=300)
    every = plain.minimize(mlp, (x, labels), tf.train.GradientDescentOptimizer(0.1))
    assert collective_counts(every, lambda index: every.train_op, feeds) == [3] * 8


def test_accumulators_are_local_zeroed_after_each_update_and_not_saved(tmp_path):
    x, labels = placeholders()
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], accumulation_steps=2)
    step = strategy.minimize(mlp, (x, labels), tf.train.GradientDescentOptimizer(0.1))
    accumulators = tf.local_variables()
    assert accumulators and not set(accumulators) & set(tf.global_variables())
    feed = dict(zip((x, labels), examples(6, seed=3)))
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        sess.run(step.accumulate_op, feed)
        counts = [value for value in sess.run(accumulators) if value.ndim == 0]
        assert counts == [6.0, 6.0]     # each tower counts the global micro-batch
        sess.run(step.train_op, feed)
        assert all(not np.any(value) for value in sess.run(accumulators))
        path = tf.train.Saver().save(sess, str(tmp_path / "model"))
    saved = read_checkpoint(path).variables
    assert not [name for name in saved if "accumulat" in name]


def test_op_for_picks_train_op_every_kth_micro_batch():
    x, labels = placeholders()
    step = tf.parallel.DataParallel(["/cpu:0"], accumulation_steps=3).minimize(
        mlp, (x, labels), tf.train.GradientDescentOptimizer(0.1))
    ops = [step.op_for(index) for index in range(6)]
    assert ops == [step.accumulate_op, step.accumulate_op, step.train_op] * 2
    assert step.accumulation_steps == 3
    plain = tf.parallel.DataParallel(["/cpu:1"]).minimize(
        mlp, (x, labels), tf.train.GradientDescentOptimizer(0.1))
    assert plain.accumulate_op is None and plain.op_for(0) is plain.train_op


@pytest.mark.parametrize("value", [0, -2, 2.5, True, "2", None])
def test_accumulation_steps_must_be_a_whole_number_of_at_least_one(value):
    with pytest.raises(ValueError, match=re.escape(
            f"accumulation_steps must be a whole number >= 1 (micro-batches per update), "
            f"got {value!r}")):
        tf.parallel.DataParallel(["/cpu:0"], accumulation_steps=value)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_with_loss_scaling_an_update_with_an_overflow_is_skipped_whole():
    """Loss scaling: a micro-batch whose gradients overflow (an inf input) makes
    its whole update a skipped step, weights untouched, accumulators zeroed;
    the next update is then exactly one step on its own examples."""
    data = examples(12, seed=6)
    bad = data[0].copy()
    bad[0, 0] = np.inf
    reference, _ = one_device((data[0][6:], data[1][6:]), [6], lambda step:
                              tf.train.GradientDescentOptimizer(0.5))
    x, labels = placeholders()
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], accumulation_steps=2)
    optimizer = tf.mixed_precision.LossScaleOptimizer(tf.train.GradientDescentOptimizer(0.5))
    step = strategy.minimize(mlp, (x, labels), optimizer)
    micro_batches = [(bad[:3], data[1][:3]), (data[0][3:6], data[1][3:6]),
                     (data[0][6:9], data[1][6:9]), (data[0][9:], data[1][9:])]
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        initial = sess.run(step.variables)
        skipped = []
        for index, (images, classes) in enumerate(micro_batches):
            _, was_skipped = sess.run([step.op_for(index), step.metrics["step_skipped"]],
                                      {x: images, labels: classes})
            skipped.append(bool(was_skipped))
            if index == 1:
                assert all(np.array_equal(a, b)
                           for a, b in zip(sess.run(step.variables), initial))
                assert all(not np.any(value) for value in sess.run(tf.local_variables()))
        weights = sess.run(step.variables)
    assert skipped[1] and not skipped[3]
    assert relative_difference(weights, reference) <= FLOAT64_BOUND


@pytest.mark.simulated_gpus(2)
@pytest.mark.parametrize("all_reduce, cuda_graphs", [("nccl", True), ("local", False)])
def test_accumulation_on_two_gpus_matches_one_device(gpu_backend, all_reduce, cuda_graphs):
    """On two simulated (or real) GPUs, NCCL with the steps captured as CUDA
    graphs (one plan accumulating, one applying), or summed on GPU 0."""
    data = examples(40, seed=4)
    reference, _ = one_device(data, [10] * 4, adam)
    weights, _, replicas, _ = accumulating(
        data, [[4, 6]] * 4, adam, 2, 2, all_reduce=all_reduce, device_kind="gpu",
        config=tf.ConfigProto(cuda_graphs=cuda_graphs))
    assert relative_difference(weights, reference) <= FLOAT64_BOUND
    assert_replicas_identical(replicas)


# -- MPI ranks -----------------------------------------------------------------------------

PROGRAM = Path(__file__).parent / "mpi_programs" / "accumulate_ranks.py"


def test_two_ranks_accumulate_like_one_device_with_one_all_reduce_per_update(tmp_path):
    """2 ranks x 2 towers, K = 3: the weights of one device on the updates'
    batches; each rank's MPI collectives: none while accumulating, one per
    gradient bucket at each update."""
    run_on_ranks(PROGRAM, tmp_path)
    sys.path.insert(0, str(PROGRAM.parent))
    try:
        from accumulate_ranks import MICRO_BATCH, UPDATES, K, data
    finally:
        sys.path.remove(str(PROGRAM.parent))
    reference, _ = one_device(data(), [K * MICRO_BATCH] * UPDATES, adam)
    ranks = [np.load(tmp_path / f"rank_{rank}.npz") for rank in (0, 1)]
    for result in ranks:
        weights = [result[f"arr_{i}"] for i in range(len(reference))]
        assert relative_difference(weights, reference) <= FLOAT64_BOUND
        # 2 buckets, summed once an update; no MPI traffic at all while accumulating
        # (the first update also checks the ranks' bucket shapes: one all-gather)
        assert list(result["collectives_per_micro_batch"]) == [0, 0, 2] * UPDATES
        assert list(result["mpi_calls_per_micro_batch"]) == [0, 0, 3] + [0, 0, 2] * (
            UPDATES - 1)
    for i in range(len(reference)):
        assert np.array_equal(ranks[0][f"arr_{i}"], ranks[1][f"arr_{i}"])


# -- towerflow train --accumulate ----------------------------------------------------------


def towerflow_train(*args):
    done = subprocess.run([sys.executable, "-m", "towerflow", "train", "digits", *args],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def final_weights(directory):
    state = (directory / "checkpoint").read_text()
    name = re.search(r'model_checkpoint_path: "([^"]+)"', state).group(1)
    return read_checkpoint(str(directory / name)).variables


def curve_rows(directory):
    with open(directory / "training_curve.csv", newline="") as source:
        return list(csv.DictReader(source))


EPS32 = float(np.finfo(np.float32).eps)


def within_reordering(ours, reference, reordered, printed=0.0):
    """|ours - reference| at most twice what a mere reordering of the same float32
    sums moves ``reference`` (``reordered``: the run on 1 tower instead of 2),
    plus 4 float32 ulps of its magnitude (where that reordering moved nothing),
    plus ``printed`` (the rounding of values read back from text)."""
    ours, reference, reordered = (np.asarray(v, np.float64) for v in (ours, reference,
                                                                      reordered))
    scale = np.max(np.abs(reference))
    return np.max(np.abs(ours - reference)) <= \
        2 * np.max(np.abs(reordered - reference)) + 4 * EPS32 * scale + printed


def test_cli_accumulate_2_trains_like_a_batch_twice_as_large(tmp_path):
    """`--batch-size 300 --accumulate 2` against `--batch-size 600`, on 2 CPU
    towers, 2 epochs of the 1438 digits: 5 micro-batches an epoch, so 3
    updates of which the last is one micro-batch of 238, as the big run's
    last batch of 238.

    Tolerance: not bit-exact, since the per-example gradients are summed in
    another order (in each tower's kernels over 150 examples twice, against
    300 once); float32 reordering. Its size is measured, not guessed: a
    third run, on 1 tower instead of 2 at batch 600, reorders the same sums
    and is what the towers' equivalence accepts. Every variable (and momentum
    slot), the losses and the accuracies of the accumulating run must stay
    within twice that run's distance to the big run (measured: about equal to
    it, 2e-7 to 7e-4 of a variable's magnitude, the larger for the first
    layer's cancelling bias sums), plus 4 float32 ulps."""
    pytest.importorskip("sklearn", reason="digits needs scikit-learn")
    common = ["--epochs", "2", "--seed", "3"]
    runs = {"accumulated": ["--cpu-towers", "2", "--batch-size", "300", "--accumulate", "2"],
            "big": ["--cpu-towers", "2", "--batch-size", "600"],
            "reordered": ["--cpu-towers", "1", "--batch-size", "600"]}
    summaries, weights, curves = {}, {}, {}
    for name, options in runs.items():
        towerflow_train(*common, *options, "--checkpoint-dir", str(tmp_path / name),
                        "--json-out", str(tmp_path / f"{name}.json"))
        summaries[name] = json.loads((tmp_path / f"{name}.json").read_text())
        weights[name] = final_weights(tmp_path / name)
        curves[name] = curve_rows(tmp_path / name)
    assert [summaries[name]["steps"] for name in runs] == [6, 6, 6]     # 3 updates an epoch
    assert summaries["accumulated"]["accumulate"] == 2
    assert sorted(weights["accumulated"]) == sorted(weights["big"])
    assert weights["accumulated"]["global_step"] == 6
    for name, value in weights["big"].items():
        assert within_reordering(weights["accumulated"][name], value,
                                 weights["reordered"][name]), name
    for key in ("final_loss", "train_loss", "train_accuracy", "test_accuracy"):
        assert within_reordering(*(summaries[name][key] for name in runs)), key
    columns = ("kind", "epoch", "step", "samples")
    assert [[row[c] for c in columns] for row in curves["accumulated"]] == \
        [[row[c] for c in columns] for row in curves["big"]]
    for key in ("loss", "train_accuracy"):      # written with 6 decimals
        values = [[float(row[key]) for row in curves[name]] for name in runs]
        assert within_reordering(*values, printed=1e-6), key


def test_cli_trace_shows_one_all_reduce_per_update(tmp_path):
    """`--trace` of 2 updates of 3 micro-batches: each micro-batch adds to the
    accumulators (6 times), the gradients' one bucket is all-reduced twice."""
    pytest.importorskip("sklearn", reason="digits needs scikit-learn")
    trace = tmp_path / "trace.json"
    towerflow_train("--cpu-towers", "2", "--steps", "4", "--batch-size", "32",
                    "--accumulate", "3", "--trace", str(trace), "--trace-steps", "2",
                    "--quiet")
    ran = [event["args"]["name"] for event in json.loads(trace.read_text())["traceEvents"]
           if event.get("ph") == "X"]
    assert ran.count("tower_0_accumulate/AssignAdd") == 6
    assert ran.count("allreduce/all_reduce_local/sum_0") == 2
    assert not [name for name in ran if re.search(r"all_reduce_local/sum_[1-9]", name)]


def test_cli_accumulate_resumes_exactly_and_is_part_of_the_run(tmp_path, monkeypatch):
    """A run with --accumulate 3 interrupted at update 10 (of 16 an epoch:
    47 micro-batches of 31) and resumed ends with the weights and curve of
    the same run uninterrupted, bit for bit; resuming it with another
    --accumulate is refused."""
    pytest.importorskip("sklearn", reason="digits needs scikit-learn")
    from towerflow import run_control, training
    from towerflow.recipes import get
    devices = ["/cpu:0", "/cpu:1"]
    options = {"batch_size": 31, "accumulate": 3, "epochs": 2, "quiet": True, "log_every": 4}
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    result = training.fit(get("digits"), devices, checkpoint_dir=str(straight), **options)
    assert result["steps"] == 32
    monkeypatch.setenv(run_control.SELF_SIGNAL_ENV, "10:SIGINT")
    with pytest.raises(run_control.Interrupted, match=r"at step 10 \(epoch 1\)"):
        training.fit(get("digits"), devices, checkpoint_dir=str(interrupted), **options)
    monkeypatch.delenv(run_control.SELF_SIGNAL_ENV)
    with pytest.raises(ValueError, match="--accumulate 2 differs from the checkpoint"):
        training.fit(get("digits"), devices, checkpoint_dir=str(interrupted), resume=True,
                     accumulate=2, quiet=True)
    training.fit(get("digits"), devices, checkpoint_dir=str(interrupted), resume=True,
                 quiet=True)
    assert curve_rows(interrupted) == curve_rows(straight)
    ours, theirs = final_weights(interrupted), final_weights(straight)
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        assert np.array_equal(ours[name], theirs[name]), name
