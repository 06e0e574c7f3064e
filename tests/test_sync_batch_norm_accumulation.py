"""Synchronized batch norm with gradient accumulation (``DataParallel(...,
sync_batch_norm=True, accumulation_steps=K)``, ``towerflow train
--sync-batch-norm --accumulate K``), as PyTorch's SyncBatchNorm under DDP's
``no_sync``: every micro-batch's forward all-reduces its statistics, so each
micro-batch is normalised with the statistics of its *global* micro-batch and
the moving statistics move once per micro-batch; the gradients are still
all-reduced once per update. N towers (2 and 3 logical CPUs, ragged and empty
shards; 2 simulated GPUs with NCCL; 2 MPI ranks) equal one device with a plain
batch norm running the same global micro-batches and accumulating their
gradients by hand, in float64."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import split_cpu
from launched_jobs import run_on_ranks
from test_sync_batch_norm import (
    SHAPE,
    batches,
    difference,
    moving_statistics,
    small_cnn,
    stand_in_cifar10,
    worst,
)

import towerflow as tf

K, UPDATES, LEARNING_RATE = 2, 3, 0.5
# float64 rounding, as tests/test_sync_batch_norm.py's TOLERANCE: a statistic
# sums at most 12 x 5 x 5 = 300 values (worst-case relative error 300 eps =
# 7e-14), the accumulated gradients add K = 2 per-example sums in another order
# (a few eps more), and 3 updates of 2 micro-batches compound a few such
# errors; the towers without synchronization are 1e-2 or more away.
TOLERANCE = 1e-12


@pytest.fixture(autouse=True)
def four_cpus(no_gpu):
    split_cpu(4)


def micro_batches(micro_batch, seed=0):
    """UPDATES x K global micro-batches of ``micro_batch`` examples."""
    return batches(micro_batch, steps=UPDATES * K, seed=seed)


def placeholders():
    return tf.placeholder(tf.float64, (None,) + SHAPE), tf.placeholder(tf.int64, [None])


def one_device(micro_batch):
    """The reference: one device, a plain batch norm, no DataParallel. Each
    micro-batch runs the backward pass and the moving-statistics updates; its
    mean gradient times its examples is summed in NumPy, and each update
    applies the sum over the update's examples. Returns every global
    variable (weights and moving statistics)."""
    tf.reset_default_graph()
    images, labels = placeholders()
    loss = small_cnn((images, labels), False)
    variables = tf.trainable_variables()
    gradients = tf.gradients(loss, variables)
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    means = [tf.placeholder(tf.float64, v.shape) for v in variables]
    apply = tf.train.GradientDescentOptimizer(LEARNING_RATE).apply_gradients(
        list(zip(means, variables)))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        data = micro_batches(micro_batch)
        for update in range(UPDATES):
            sums, examples = [np.zeros(v.shape.as_list()) for v in variables], 0
            for x, y in data[update * K:(update + 1) * K]:
                grads, _ = sess.run([gradients, updates], {images: x, labels: y})
                sums = [total + len(x) * grad for total, grad in zip(sums, grads)]
                examples += len(x)
            sess.run(apply, dict(zip(means, [total / examples for total in sums])))
        return sess.run(tf.global_variables())


def accumulating(towers, micro_batch, synchronized=True, devices=None, all_reduce="cpu",
                 config=None):
    """``towers`` towers with (or without) sync_batch_norm and accumulation_steps=K
    on the same micro-batches. Returns every replica's global variables."""
    tf.reset_default_graph()
    images, labels = placeholders()
    devices = devices or [f"/cpu:{i}" for i in range(towers)]
    strategy = tf.parallel.DataParallel(devices, all_reduce=all_reduce,
                                        sync_batch_norm=synchronized, accumulation_steps=K)
    step = strategy.minimize(lambda shard: small_cnn(shard, False), (images, labels),
                             tf.train.GradientDescentOptimizer(LEARNING_RATE))
    replicas = [[v for v in tf.global_variables() if v.name.startswith(f"tower_{i}/")]
                for i in range(len(devices))]
    with tf.Session(config=config) as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        for index, (x, y) in enumerate(micro_batches(micro_batch)):
            sess.run(step.op_for(index), {images: x, labels: y})
        return sess.run(replicas)


def assert_bit_identical(replicas):
    for replica in replicas[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(replicas[0], replica)), \
            "replicas (weights or moving statistics) drifted apart"


SHARDS = [(2, 12), (3, 12), (2, 7), (3, 7), (3, 2)]     # equal, ragged, empty (1, 1, 0)
SHARD_IDS = ["2x6", "3x4", "2-ragged", "3-ragged", "3-one-empty"]


@pytest.mark.parametrize("towers, micro_batch", SHARDS, ids=SHARD_IDS)
def test_synchronized_accumulating_towers_match_one_device(towers, micro_batch):
    """Weights and moving statistics after 3 updates of 2 micro-batches."""
    reference = one_device(micro_batch)
    replicas = accumulating(towers, micro_batch)
    assert len(replicas[0]) == len(reference) == 7      # with moving mean and variance
    assert difference(replicas[0], reference) <= TOLERANCE
    assert_bit_identical(replicas)


@pytest.mark.parametrize("towers, micro_batch", [(2, 12), (3, 7)], ids=["2x6", "3-ragged"])
def test_without_synchronization_the_accumulating_towers_differ(towers, micro_batch):
    """Each tower's own statistics: the comparison above can tell."""
    reference = one_device(micro_batch)
    per_tower = accumulating(towers, micro_batch, synchronized=False)
    assert difference(per_tower[0], reference) > 1e-2


SUMS = re.compile(r"all_reduce_\w+/sum_\d+$")      # a communicator's sum, any scope
KINDS = {"statistics": "sync_batch_norm/", "statistics_gradients": "sync_batch_norm_gradients/"}


def kind_of(node_name):
    """Which all-reduce a collective serves: a batch norm's statistics, their
    gradients, or (None) the gradient buckets."""
    return next((kind for kind, scope in KINDS.items() if scope in node_name), None)


def count_collectives(metadata):
    """{kind: the communicator's sums of that kind} in a run's step stats."""
    counts = dict.fromkeys([*KINDS, None], 0)
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            if SUMS.search(node.node_name):
                counts[kind_of(node.node_name)] += 1
    return counts


def collective_counts(step, feeds):
    """Per micro-batch (``step.op_for(i)``), count_collectives of its run."""
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
    counts = []
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        for index, feed in enumerate(feeds):
            metadata = tf.RunMetadata()
            sess.run(step.op_for(index), feed, options=options, run_metadata=metadata)
            counts.append(count_collectives(metadata))
    return counts


@pytest.mark.parametrize("all_reduce", ["cpu", "local"])
def test_statistics_are_all_reduced_every_micro_batch_gradients_once_an_update(all_reduce):
    """4 micro-batches, K = 2, one batch norm: each micro-batch sums its
    statistics (forward) and their gradients (backward) once; the gradients'
    one bucket is summed at each update's last micro-batch only."""
    images, labels = placeholders()
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], all_reduce=all_reduce,
                                        sync_batch_norm=True, accumulation_steps=K)
    step = strategy.minimize(lambda shard: small_cnn(shard, False), (images, labels),
                             tf.train.GradientDescentOptimizer(LEARNING_RATE))
    feeds = [{images: x, labels: y} for x, y in batches(6, steps=4)]
    counts = collective_counts(step, feeds)
    assert [c["statistics"] for c in counts] == [1] * 4
    assert [c["statistics_gradients"] for c in counts] == [1] * 4
    assert [c[None] for c in counts] == [0, 1] * 2


@pytest.mark.simulated_gpus(2)
@pytest.mark.parametrize("micro_batch", [12, 7, 1], ids=["equal", "ragged", "one-empty"])
def test_synchronized_accumulation_on_two_gpus_matches_one_device(gpu_backend, micro_batch):
    """Two GPU towers summing with NCCL, the steps captured as CUDA graphs (one
    plan accumulating, one applying)."""
    reference = one_device(micro_batch)
    replicas = accumulating(2, micro_batch, devices=["/gpu:0", "/gpu:1"], all_reduce="nccl",
                            config=tf.ConfigProto(cuda_graphs=True))
    assert difference(replicas[0], reference) <= TOLERANCE
    assert_bit_identical(replicas)


# -- MPI ranks -------------------------------------------------------------------------

PROGRAM = Path(__file__).parent / "mpi_programs" / "sync_accumulate_ranks.py"


def test_two_mpi_ranks_with_two_towers_each_match_one_device(tmp_path):
    """``towerflow launch -n 2``: 2 ranks x 2 towers, micro-batches of 12
    (equal), 7 (ragged) and 3 (one shard empty); each micro-batch all-reduces
    the statistics and their gradients between the ranks, each update the
    gradients' one bucket."""
    run_on_ranks(PROGRAM, tmp_path, timeout=300)
    for micro_batch in (12, 7, 3):
        reference = one_device(micro_batch)
        ranks = [np.load(tmp_path / f"micro_batch_{micro_batch}_rank_{rank}.npz")
                 for rank in (0, 1)]
        for saved in ranks:
            values = [saved[f"variable_{i}"] for i in range(len(reference))]
            assert difference(values, reference) <= TOLERANCE, micro_batch
            assert list(saved["statistics_sums"]) == [1] * (UPDATES * K)
            assert list(saved["statistics_gradient_sums"]) == [1] * (UPDATES * K)
            assert list(saved["gradient_sums"]) == [0, 1] * UPDATES
        for key in ranks[0].files:
            if key.startswith("variable_"):     # the ranks end bit-identical
                assert np.array_equal(ranks[0][key], ranks[1][key])


# -- towerflow train --sync-batch-norm --accumulate -------------------------------------


def test_cli_sync_batch_norm_with_accumulate_trains_like_one_device(tmp_path, monkeypatch):
    """`towerflow train cifar10 --sync-batch-norm --accumulate 2` on 2 towers:
    one update of 2 micro-batches saves the moving statistics of the same run
    on one tower (the global micro-batches do not depend on the towers), and
    the run records both options; without the flag they follow each tower's
    half of each micro-batch.

    NOTE: one device runs with the same flags: the recipe's unseeded
    initializers draw from the graph's op count (see test_sync_batch_norm)."""
    from towerflow import cli
    stand_in_cifar10(monkeypatch)

    def run(name, devices, *flags):
        out = tmp_path / name
        assert cli.main(["train", "cifar10", "--data-dir", str(tmp_path), "--batch-size",
                         "6", "--steps", "1", "--accumulate", "2", *flags,
                         "--devices", devices, "--quiet", "--checkpoint-dir", str(out),
                         "--json-out", str(out / "run.json")]) == 0
        summary = json.loads((out / "run.json").read_text())
        assert summary["sync_batch_norm"] == bool(flags) and summary["accumulate"] == 2
        return moving_statistics(out)
    one_tower = run("one", "/cpu:0", "--sync-batch-norm")
    synced = run("synced", "/cpu:0,/cpu:1", "--sync-batch-norm")
    assert len(one_tower) == 14 and sorted(synced) == sorted(one_tower)
    # float32, as test_sync_batch_norm's CLI test (its bound): a statistic sums
    # 6 x 32 x 32 values, and within one update every micro-batch sees the
    # initial weights, so nothing compounds
    assert worst(synced, one_tower) <= 1e-4
    assert worst(run("per-tower", "/cpu:0,/cpu:1"), run("plain-one", "/cpu:0")) > 1e-2


def test_cli_sync_batch_norm_with_accumulate_resumes_exactly(tmp_path, monkeypatch):
    """Interrupted after update 2 of 4 and resumed (with --sync-batch-norm
    again, a device option): the weights and moving statistics of the same
    run uninterrupted, bit for bit."""
    from test_gradient_accumulation import final_weights

    from towerflow import run_control, training
    recipe = stand_in_cifar10(monkeypatch)
    devices = ["/cpu:0", "/cpu:1"]
    options = {"batch_size": 6, "accumulate": 2, "steps": 4, "quiet": True,
               "sync_batch_norm": True}
    straight, interrupted = tmp_path / "straight", tmp_path / "interrupted"
    assert training.fit(recipe, devices, checkpoint_dir=str(straight), **options)["steps"] == 4
    monkeypatch.setenv(run_control.SELF_SIGNAL_ENV, "2:SIGINT")
    with pytest.raises(run_control.Interrupted, match=r"at step 2"):
        training.fit(recipe, devices, checkpoint_dir=str(interrupted), **options)
    monkeypatch.delenv(run_control.SELF_SIGNAL_ENV)
    training.fit(recipe, devices, checkpoint_dir=str(interrupted), resume=True, quiet=True,
                 sync_batch_norm=True)
    ours, theirs = final_weights(interrupted), final_weights(straight)
    assert sorted(ours) == sorted(theirs)
    assert len([name for name in theirs if name.endswith("moving_mean")]) == 7
    for name in theirs:
        assert np.array_equal(ours[name], theirs[name]), name


# -- float16 with a loss scale -----------------------------------------------------------

# 2 towers x 32 examples, one global micro-batch B = 64; a fixed loss scale S.
# The linear branch's float16 backward (below) peaks at its kernel gradient,
# S x seed x (the shard's mean of x, at most 3): with the seed n_i / B = 1/2
# that is at most 3 S = 6144, but with the seed n_i = 32 it is about 2 S x 32
# = 131072 > 65504 (float16's largest): inf, and the update is skipped.
HALF_TOWERS, HALF_BATCH, HALF_SCALE, HALF_RATE = 2, 64, 2.0 ** 11, 0.01
HALF_U = 2.0 ** -11             # float16's unit roundoff


def half_micro_batches():
    """K micro-batches whose inputs are small integers (exact in float16)."""
    rng = np.random.default_rng(3)
    return [(rng.integers(1, 4, (HALF_BATCH, 4)).astype(np.float32),
             rng.integers(-1, 2, (HALF_BATCH, 3)).astype(np.float32)) for _ in range(K)]


def half_tower(shard):
    """A linear branch whose float16 backward is exact (integer inputs, power-of-
    two seeds), plus a synchronized batch norm branch."""
    x, target = shard
    linear = tf.layers.dense(x, 1, use_bias=False, name="linear",
                             kernel_initializer=tf.constant_initializer(0.25))
    hidden = tf.layers.dense(x, 3, use_bias=False, name="hidden",
                             kernel_initializer=tf.glorot_uniform_initializer(seed=1))
    normal = tf.layers.batch_normalization(hidden, training=True)
    return tf.reduce_mean(tf.cast(linear, tf.float32)) + \
        tf.reduce_mean(tf.cast(normal, tf.float32) * target)


def one_half_update(policy):
    """One update (K micro-batches) of 2 synchronized towers under ``policy``
    (mixed_float16: a fixed loss scale). Returns (tower 0's variables by name
    before and after, whether the update was skipped)."""
    tf.reset_default_graph()
    tf.mixed_precision.set_global_policy(policy)
    try:
        x, target = tf.placeholder(tf.float32, [None, 4]), tf.placeholder(tf.float32, [None, 3])
        optimizer = tf.train.GradientDescentOptimizer(HALF_RATE)
        if policy == "mixed_float16":
            optimizer = tf.mixed_precision.LossScaleOptimizer(
                optimizer, dynamic=False, initial_scale=HALF_SCALE)
        strategy = tf.parallel.DataParallel([f"/cpu:{i}" for i in range(HALF_TOWERS)],
                                            all_reduce="cpu", sync_batch_norm=True,
                                            accumulation_steps=K)
        step = strategy.minimize(half_tower, (x, target), optimizer)
    finally:
        tf.mixed_precision.set_global_policy(None)
    variables = [v for v in tf.global_variables() if v.name.startswith("tower_0/")]
    skipped = step.metrics.get("step_skipped", tf.constant(False))
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        before = sess.run(variables)
        for index, (images, targets) in enumerate(half_micro_batches()):
            ran = sess.run([step.op_for(index), skipped], {x: images, target: targets})
        after = sess.run(variables)
    names = [v.name for v in variables]
    return dict(zip(names, before)), dict(zip(names, after)), ran[1]


def test_float16_loss_scaling_with_synchronized_accumulation_keeps_its_headroom():
    """The loss scale's float16 backward runs at S x n_i / B, never S x n_i: with
    S = 2^11 and n_i = 32 the update is applied (not skipped) and follows float32.

    The linear kernel's float16 gradient is exact (S x (n_i / B) / n_i = 32 times
    sums of integers <= 96), so it matches float32 to float32 rounding (a few
    float32 ulps of the update). The batch-norm branch's kernel is read in
    float16 (1 rounding), its 4-term products (4 more) and its gradient
    (1 rounding, then a 32-term float16 sum: 32): each variable (the moving
    statistics too, from the same float16 forward) within 64 float16 unit
    roundoffs of its largest change."""
    start, half, skipped = one_half_update("mixed_float16")
    _, full, _ = one_half_update("float32")
    assert not skipped
    assert all(np.isfinite(value).all() for value in half.values())
    linear = "tower_0/linear/kernel:0"
    np.testing.assert_allclose(half[linear] - start[linear], full[linear] - start[linear],
                               rtol=1e-5)
    assert np.abs(half[linear] - start[linear]).min() > 0       # moved
    for name in full:
        largest = np.abs(full[name] - start[name]).max()
        assert np.abs(half[name] - full[name]).max() <= 64 * HALF_U * largest, name
