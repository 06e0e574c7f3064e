"""Towers on logical CPUs: N towers on a global batch B train exactly like one
device on B; replicas stay bit-identical; reductions are deterministic."""

import numpy as np
import pytest

import towerflow as tf
from conftest import split_cpu
from towerflow.parallel import buckets
from towerflow.parallel.sharding import shard_bounds

FEATURES, CLASSES, STEPS = 5, 3, 20


def mlp(inputs, dropout=False):
    x, labels = inputs
    init = tf.glorot_uniform_initializer
    hidden = tf.layers.dense(x, 8, activation=tf.nn.relu, kernel_initializer=init(seed=1))
    if dropout:
        hidden = tf.nn.dropout(hidden, rate=0.5, seed=3)
    logits = tf.layers.dense(hidden, CLASSES, kernel_initializer=init(seed=2))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))
    correct = tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32)
    return loss, {"accuracy": tf.reduce_mean(correct)}


def batches(batch, steps=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, FEATURES)).astype(np.float32),
             rng.integers(0, CLASSES, batch)) for _ in range(steps)]


def train(towers, batch, optimizer=lambda: tf.train.MomentumOptimizer(0.1, 0.9),
          all_reduce="cpu", bucket_bytes=4 << 20, check_replicas=True, data=None,
          device_kind="cpu", config=None):
    """Train; returns (losses, final variables of replica 0). towers=0: no
    strategy, on /{device_kind}:0; else towers on /{device_kind}:0, 1, ..."""
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, FEATURES])
    labels = tf.placeholder(tf.int64, [None])
    if towers == 0:
        with tf.device(f"/{device_kind}:0"):
            loss, _ = mlp((x, labels))
            train_op = optimizer().minimize(loss)
        replicas = [tf.trainable_variables()]
    else:
        strategy = tf.parallel.DataParallel([f"/{device_kind}:{i}" for i in range(towers)],
                                            all_reduce=all_reduce, bucket_bytes=bucket_bytes)
        step = strategy.minimize(mlp, (x, labels), optimizer())
        train_op, loss, replicas = step.train_op, step.loss, step.replicas
    sess = tf.Session(config=config)
    sess.run(tf.global_variables_initializer())
    losses = []
    for images, classes in data or batches(batch):
        losses.append(sess.run([train_op, loss], {x: images, labels: classes})[1])
        if check_replicas:
            assert_replicas_identical(sess.run(replicas))
    return losses, sess.run(replicas[0])


def assert_replicas_identical(values):
    for replica in values[1:]:
        for first, other in zip(values[0], replica):
            assert np.array_equal(first, other), "replicas drifted apart"


def relative_difference(ours, reference):
    return max(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12)
               for a, b in zip(ours, reference))


@pytest.fixture(autouse=True)
def four_cpus(no_gpu):
    split_cpu(4)


@pytest.mark.parametrize("batch", [12, 10, 7])
@pytest.mark.parametrize("towers", [1, 2, 3, 4])
def test_towers_match_one_device_on_the_global_batch(towers, batch):
    reference_losses, reference = train(0, batch)
    losses, params = train(towers, batch)
    assert relative_difference(params, reference) <= 1e-5
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-5)


def test_more_towers_than_examples_leaves_empty_shards_harmless():
    reference_losses, reference = train(0, 3)
    losses, params = train(4, 3)
    assert all(np.isfinite(losses))
    assert relative_difference(params, reference) <= 1e-5


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_each_tower_weighs_its_shard_by_its_exact_fraction(dtype):
    """The global loss over 3 towers on 7 examples (shards 3, 2, 2) is the mean
    of the 7 per-example losses, to the loss dtype's rounding: each tower's
    weight n_i / 7 is made in that dtype (a float32 weight cast to float64 is
    ~1e-8 off, and float64 towers drifted that far from one device)."""
    values = tf.placeholder(dtype, [None])
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1", "/cpu:2"])

    def mean_loss(shard):
        return tf.reduce_mean(shard * tf.Variable(tf.ones([], dtype)))
    step = strategy.minimize(mean_loss, values, tf.train.GradientDescentOptimizer(0.0))
    examples = np.random.default_rng(3).uniform(1, 2, 7).astype(dtype.as_numpy_dtype)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        loss = sess.run(step.loss, {values: examples})
    assert loss.dtype == dtype.as_numpy_dtype
    # a few roundings of the loss dtype (3 means, 3 weights, 2 adds), not float32's
    roundoff = np.finfo(dtype.as_numpy_dtype).eps
    assert abs(loss - examples.astype(np.float64).mean()) <= 8 * roundoff * loss


def test_same_seed_gives_bit_identical_runs_and_cpu_local_agree():
    first = train(3, 10)
    again = train(3, 10)
    local = train(3, 10, all_reduce="local")
    for a, b in zip(first[1], again[1]):
        assert np.array_equal(a, b)
    assert first[0] == again[0]
    assert relative_difference(local[1], first[1]) <= 1e-6


def test_small_buckets_change_nothing():
    _, one_bucket = train(2, 8, check_replicas=False)
    _, many = train(2, 8, bucket_bytes=64, check_replicas=False)
    for a, b in zip(one_bucket, many):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("make", [
    lambda: tf.train.GradientDescentOptimizer(0.1),
    lambda: tf.train.AdamOptimizer(0.01),
    lambda: tf.train.AdamWOptimizer(0.01, learning_rate=0.01),
], ids=["sgd", "adam", "adamw"])
def test_every_optimizer_trains_towers_like_one_device(make):
    _, reference = train(0, 9, optimizer=make)
    _, params = train(3, 9, optimizer=make)
    assert relative_difference(params, reference) <= 1e-5


def test_global_loss_and_metrics_are_global_batch_means():
    x = tf.placeholder(tf.float32, [None, FEATURES])
    labels = tf.placeholder(tf.int64, [None])
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1", "/cpu:2"])
    step = strategy.minimize(mlp, (x, labels), tf.train.GradientDescentOptimizer(0.0))
    single_loss, single_metrics = mlp((x, labels))   # same seeds: same initial weights
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    images, classes = batches(10, steps=1)[0]
    feed = {x: images, labels: classes}
    ours = sess.run([step.loss, step.metrics["accuracy"]], feed)
    theirs = sess.run([single_loss, single_metrics["accuracy"]], feed)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_each_tower_runs_on_its_device(capsys):
    x = tf.placeholder(tf.float32, [None, FEATURES])
    labels = tf.placeholder(tf.int64, [None])
    strategy = tf.parallel.DataParallel(["/cpu:1", "/cpu:2"], all_reduce="cpu")
    step = strategy.minimize(mlp, (x, labels), tf.train.MomentumOptimizer(0.1, 0.9))
    sess = tf.Session(config=tf.ConfigProto(log_device_placement=True))
    sess.run(tf.global_variables_initializer())
    images, classes = batches(6, steps=1)[0]
    sess.run(step.train_op, {x: images, labels: classes})
    placements = dict(line.split(": ", 1) for line in capsys.readouterr().err.splitlines()
                      if ": /job" in line)
    for name, device in placements.items():
        for tower, expected in (("tower_0", "CPU:1"), ("tower_1", "CPU:2")):
            if name.startswith(tower + "/") or name.startswith(tower + "_gradients/"):
                assert device.endswith(expected), (name, device)
    assert placements["all_reduce_cpu/sum_0"].endswith("CPU:0")


def test_dropout_draws_a_different_seeded_stream_per_tower():
    tf.set_random_seed(5)
    x = tf.placeholder(tf.float32, [None, FEATURES])
    labels = tf.placeholder(tf.int64, [None])
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"])
    step = strategy.minimize(lambda inputs: mlp(inputs, dropout=True), (x, labels),
                             tf.train.GradientDescentOptimizer(0.1))
    images = np.ones((4, FEATURES), np.float32)   # both shards identical
    feed = {x: images, labels: np.zeros(4, np.int64)}
    runs = []
    for _ in range(2):
        sess = tf.Session()
        sess.run(tf.global_variables_initializer())
        runs.append(sess.run(step.tower_losses, feed))
    assert runs[0][0] != runs[0][1]          # different streams per tower
    assert runs[0] == runs[1]                # seeded: the same in a new session


def test_tower_fn_that_builds_different_variables_is_refused():
    x = tf.placeholder(tf.float32, [None, FEATURES])
    calls = []

    def uneven(shard):
        calls.append(1)
        return tf.reduce_mean(tf.layers.dense(shard, len(calls)))

    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"])
    with pytest.raises(ValueError, match="same variables on every call"):
        strategy.minimize(uneven, x, tf.train.GradientDescentOptimizer(0.1))


def test_unknown_all_reduce_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="'auto', 'cpu', 'local', 'nccl', 'mpi'"):
        tf.parallel.DataParallel(["/cpu:0"], all_reduce="ring")


@pytest.mark.parametrize("batch", range(0, 9))
@pytest.mark.parametrize("shards", [1, 2, 3, 4])
def test_shards_cover_every_example_once(batch, shards):
    pieces = [shard_bounds(batch, shards, i) for i in range(shards)]
    covered = [i for start, end in pieces for i in range(start, end)]
    assert covered == list(range(batch))
    sizes = [end - start for start, end in pieces]
    assert max(sizes) - min(sizes) <= 1


def test_bucket_plan_keeps_order_and_respects_the_size():
    tensors = [tf.zeros([n]) for n in (10, 10, 30, 5, 1)]   # float32: 4 bytes each
    plan = buckets.plan_buckets(tensors, bucket_bytes=80)
    assert plan == [[0, 1], [2], [3, 4]]
    assert [i for bucket in plan for i in bucket] == list(range(len(tensors)))


def batch_norm_model(inputs):
    x, labels = inputs
    normalised = tf.layers.batch_normalization(x, training=True, momentum=0.99)
    logits = tf.layers.dense(normalised, CLASSES,
                             kernel_initializer=tf.glorot_uniform_initializer(seed=2))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))


@pytest.mark.parametrize("sync", [False, True])
def test_batch_norm_statistics_per_tower_or_synchronised(sync):
    x = tf.placeholder(tf.float32, [None, FEATURES])
    labels = tf.placeholder(tf.int64, [None])
    strategy = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"], sync_statistics=sync)
    step = strategy.minimize(batch_norm_model, (x, labels),
                             tf.train.GradientDescentOptimizer(0.1))
    moving_means = [next(v for v in tf.global_variables()
                         if v.name == f"tower_{i}/batch_normalization/moving_mean:0")
                    for i in (0, 1)]
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    images, classes = batches(8, steps=1)[0]
    sess.run(step.train_op, {x: images, labels: classes})
    tower_0, tower_1 = sess.run(moving_means)
    shard_means = [images[:4].mean(axis=0), images[4:].mean(axis=0)]
    if sync:   # every replica holds the mean of the towers' updates
        assert np.array_equal(tower_0, tower_1)
        np.testing.assert_allclose(tower_0, 0.01 * images.mean(axis=0), rtol=1e-5)
    else:      # each tower's statistics follow its own shard
        np.testing.assert_allclose(tower_0, 0.01 * shard_means[0], rtol=1e-5)
        np.testing.assert_allclose(tower_1, 0.01 * shard_means[1], rtol=1e-5)
