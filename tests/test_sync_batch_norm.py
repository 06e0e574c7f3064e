"""Synchronized batch norm: N towers on a global batch B give what one device
gives on B (forward output, loss, gradients, updated weights and moving
statistics) in float64, with equal, ragged and empty shards, on logical-CPU
towers and simulated GPUs; tests/test_mpi.py-style ranks in
test_two_mpi_ranks_match_one_device. Without synchronization the towers
normalise with their own shard's statistics and differ."""

import collections
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import release_gpu_backend, split_cpu, use_gpu_backend
from launched_jobs import run_on_ranks

import towerflow as tf

SHAPE, FILTERS, CLASSES = (5, 5, 2), 4, 3
STEPS, LEARNING_RATE, MOMENTUM = 3, 0.5, 0.9
# float64 rounding: a statistic sums at most 12 x 5 x 5 = 300 values (worst-case
# relative error 300 eps = 7e-14), and three steps compound a few such errors;
# the towers without synchronization are 1e-2 or more away.
TOLERANCE = 1e-12

Result = collections.namedtuple("Result", "outputs losses gradients variables")


def small_cnn(inputs, synchronized, outputs=None):
    """conv (no bias) + batch norm + relu + dense; BN's outputs go to ``outputs``."""
    images, labels = inputs
    init = tf.glorot_uniform_initializer
    y = tf.layers.conv2d(images, FILTERS, 3, padding="same", use_bias=False,
                         kernel_initializer=init(seed=1))
    y = tf.layers.batch_normalization(y, training=True, momentum=MOMENTUM,
                                      synchronized=synchronized)
    if outputs is not None:
        outputs.append(y)
    logits = tf.layers.dense(tf.layers.flatten(tf.nn.relu(y)), CLASSES,
                             kernel_initializer=init(seed=2))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))


def batches(batch, steps=STEPS, seed=0):
    """float64 images with a mean of 1.5 (so the statistics matter), labels."""
    rng = np.random.default_rng(seed)
    return [(1.5 + rng.standard_normal((batch,) + SHAPE), rng.integers(0, CLASSES, batch))
            for _ in range(steps)]


def build(towers, synchronized=True, strategy_option=False, devices=None, all_reduce="cpu"):
    """The graph: towers=0 is one device without DataParallel (a plain batch norm).
    Returns (placeholders, train op, loss, BN outputs in batch order, variables)."""
    tf.reset_default_graph()
    images = tf.placeholder(tf.float64, (None,) + SHAPE)
    labels = tf.placeholder(tf.int64, [None])
    outputs = []
    optimizer = tf.train.GradientDescentOptimizer(LEARNING_RATE)
    if towers == 0:
        loss = small_cnn((images, labels), False, outputs)
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = optimizer.minimize(loss)
        return (images, labels), train_op, loss, outputs[0], tf.global_variables()
    strategy = tf.parallel.DataParallel(devices or [f"/cpu:{i}" for i in range(towers)],
                                        all_reduce=all_reduce,
                                        sync_batch_norm=strategy_option)
    step = strategy.minimize(lambda shard: small_cnn(shard, synchronized, outputs),
                             (images, labels), optimizer)
    variables = [[v for v in tf.global_variables() if v.name.startswith(f"tower_{i}/")]
                 for i in range(len(outputs))]
    return (images, labels), step.train_op, step.loss, tf.concat(outputs, 0), variables


def train(towers, batch, **options):
    """Train STEPS steps; the BN output of the first step, the losses, the first
    step's gradients ((before - after) / rate, with SGD) and the final variables
    (replica 0's; every replica is checked to be bit-identical when synchronized)."""
    (images, labels), train_op, loss, output, variables = build(towers, **options)
    replicas = variables if towers else [variables]
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    initial = sess.run(replicas[0])
    losses, outputs = [], None
    for step, (x, y) in enumerate(batches(batch)):
        feed = {images: x, labels: y}
        if step == 0:
            outputs = sess.run(output, feed)
        losses.append(sess.run([train_op, loss], feed)[1])
        if step == 0:
            after = sess.run(replicas[0])
            gradients = [(a - b) / LEARNING_RATE for a, b in zip(initial, after)]
        values = sess.run(replicas)
        # replicas bit-identical: the moving statistics too when synchronized
        for replica in values[1:] if options.get("synchronized", True) else ():
            assert all(np.array_equal(a, b) for a, b in zip(values[0], replica))
    return Result(outputs, np.array(losses), gradients, values[0])


def difference(ours, reference):
    """The largest difference between two fields (an array or a list of arrays),
    relative to the reference's scale (at least 1)."""
    pairs = zip(ours, reference) if isinstance(reference, list) else [(ours, reference)]
    return max(float(np.max(np.abs(a - b), initial=0.0)) /
               max(float(np.max(np.abs(b), initial=0.0)), 1.0) for a, b in pairs)


@pytest.fixture(autouse=True)
def four_cpus(no_gpu):
    split_cpu(4)


SHARDS = [(2, 12), (3, 12), (2, 7), (3, 7), (3, 2)]     # equal, ragged, empty (1, 1, 0)
SHARD_IDS = ["2x6", "3x4", "2-ragged", "3-ragged", "3-one-empty"]


@pytest.mark.parametrize("towers, batch", SHARDS, ids=SHARD_IDS)
def test_synchronized_towers_match_one_device_on_the_global_batch(towers, batch):
    reference = train(0, batch)
    synchronized = train(towers, batch, synchronized=True)
    for field in Result._fields:
        assert difference(getattr(synchronized, field), getattr(reference, field)) \
            <= TOLERANCE, field
    assert np.all(np.isfinite(synchronized.losses))


@pytest.mark.parametrize("towers, batch", [(2, 12), (3, 7)], ids=["2x6", "3-ragged"])
def test_without_synchronization_the_towers_differ_from_one_device(towers, batch):
    """The same comparison with each tower's own statistics fails: the check
    above is not vacuous."""
    reference = train(0, batch)
    per_tower = train(towers, batch, synchronized=False)
    assert difference(per_tower.outputs, reference.outputs) > 1e-2
    assert difference(per_tower.variables, reference.variables) > 1e-3


def test_the_data_parallel_option_synchronizes_every_batch_norm():
    reference = train(0, 7)
    option = train(3, 7, synchronized=False, strategy_option=True)
    assert difference(option.variables, reference.variables) <= TOLERANCE
    assert difference(option.outputs, reference.outputs) <= TOLERANCE


def test_moving_statistics_follow_the_global_batch():
    """After one step from zero mean and unit variance with momentum 0.9, the
    moving mean is 0.1 x the global batch mean of the conv output and the
    moving variance 0.9 + 0.1 x its unbiased variance (NumPy float64)."""
    x, y = batches(7, steps=1)[0]
    (images, labels), train_op, _, _, variables = build(3)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    kernel = sess.run(variables[0][0])                  # tower_0/conv2d/kernel
    conv = sess.run(_conv_output(), {images: x})
    sess.run(train_op, {images: x, labels: y})
    named = {v.name.split("/", 1)[1]: v for v in variables[1]}   # tower 1's replicas
    mean, var = sess.run([named["batch_normalization/moving_mean:0"],
                          named["batch_normalization/moving_variance:0"]])
    flat = conv.reshape(-1, FILTERS)
    np.testing.assert_allclose(mean, 0.1 * flat.mean(axis=0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(var, 0.9 + 0.1 * flat.var(axis=0, ddof=1), rtol=1e-12)
    assert kernel.shape == (3, 3, SHAPE[2], FILTERS)


def _conv_output():
    """The three towers' conv outputs, in batch order."""
    graph = tf.get_default_graph()
    return tf.concat([graph.get_tensor_by_name(f"tower_{i}/conv2d/Conv2D:0")
                      for i in range(3)], 0)


def test_one_device_without_data_parallel_is_a_plain_batch_norm():
    """TF's SyncBatchNormalization without a strategy: the batch's own statistics."""
    x = np.random.default_rng(2).standard_normal((6, 3, 3, 2)) * 2 + 1
    feed = tf.placeholder(tf.float64, x.shape)
    synced = tf.layers.batch_normalization(feed, training=True, synchronized=True,
                                           name="synced")
    plain = tf.layers.batch_normalization(feed, training=True, name="plain")
    gradients = [tf.gradients(tf.reduce_sum(tf.sin(y)), feed)[0] for y in (synced, plain)]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        ours, theirs, our_grad, their_grad = sess.run([synced, plain] + gradients, {feed: x})
    expected = (x - x.mean(axis=(0, 1, 2))) / np.sqrt(x.var(axis=(0, 1, 2)) + 1e-3)
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(our_grad, their_grad, rtol=1e-10, atol=1e-12)


def test_inference_uses_the_moving_statistics_without_an_all_reduce():
    images = tf.placeholder(tf.float64, [None, 4])

    def tower_fn(shard):
        y = tf.layers.batch_normalization(shard, training=False, synchronized=True)
        return tf.reduce_mean(tf.layers.dense(y, 1))
    tf.parallel.DataParallel(["/cpu:0", "/cpu:1"]).minimize(
        tower_fn, images, tf.train.GradientDescentOptimizer(0.1))
    types = {op.type for op in tf.get_default_graph().get_operations()}
    assert "CrossTowerSum" not in types and "FusedBatchNorm" in types


def test_a_training_flag_tensor_selects_global_or_moving_statistics():
    """``training`` a bool tensor (as towerflow train's): true normalises with the
    global statistics, false with the moving ones (and updates nothing)."""
    images = tf.placeholder(tf.float64, [None, 4])
    training = tf.placeholder_with_default(False, [])
    outputs = []

    def tower_fn(shard):
        y = tf.layers.batch_normalization(shard, training=training, synchronized=True,
                                          moving_mean_initializer=tf.constant_initializer(2.0))
        outputs.append(y)
        return tf.reduce_mean(y * y)
    step = tf.parallel.DataParallel(["/cpu:0", "/cpu:1"]).minimize(
        tower_fn, images, tf.train.GradientDescentOptimizer(0.0))
    x = np.random.default_rng(4).standard_normal((5, 4)) + 3
    output = tf.concat(outputs, 0)
    moving_mean = next(v for v in tf.global_variables() if "tower_1/" in v.name
                       and v.name.endswith("moving_mean:0"))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        inferred = sess.run(output, {images: x})
        sess.run(step.train_op, {images: x})                        # training off
        unchanged = sess.run(moving_mean)
        trained = sess.run(output, {images: x, training: True})
    np.testing.assert_allclose(inferred, (x - 2.0) / np.sqrt(1 + 1e-3), rtol=1e-12)
    np.testing.assert_allclose(unchanged, 2.0)
    np.testing.assert_allclose(trained, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3),
                               rtol=1e-12, atol=1e-13)


def test_towers_that_build_different_synchronized_layers_are_refused():
    images = tf.placeholder(tf.float64, [None, 4])
    calls = []

    def uneven(shard):
        calls.append(1)
        for _ in calls:
            shard = tf.layers.batch_normalization(shard, training=True, synchronized=True)
        return tf.reduce_mean(shard)
    with pytest.raises(ValueError, match=r"the towers built \[1, 2\] synchronized"):
        tf.parallel.DataParallel(["/cpu:0", "/cpu:1"]).minimize(
            uneven, images, tf.train.GradientDescentOptimizer(0.1))


def test_synchronized_must_be_a_python_bool():
    with pytest.raises(TypeError, match="synchronized must be a Python bool, got 'yes'"):
        tf.layers.BatchNormalization(synchronized="yes")


def test_a_graph_edit_that_breaks_creation_order_is_sorted_back():
    """Operation._update_input (TF's private edit) then Graph._sort_topologically:
    the op that now reads a later tensor runs after it."""
    a = tf.constant(1.0)
    reader = tf.identity(a)
    doubled = reader * 2.0
    later = tf.constant(5.0)
    reader.op._update_input(0, later)
    tf.get_default_graph()._sort_topologically()
    order = [op.name for op in tf.get_default_graph().get_operations()]
    assert order.index(later.op.name) < order.index(reader.op.name) < \
        order.index(doubled.op.name)
    with tf.Session() as sess:
        assert sess.run(doubled) == 10.0
    with pytest.raises(ValueError, match="cannot replace it by"):
        reader.op._update_input(0, tf.constant([1.0, 2.0]))


# -- simulated GPUs --------------------------------------------------------------------


@pytest.fixture
def two_simulated_gpus(monkeypatch):
    """Two simulated GPUs (towerflow.simgpu) serving the CuPy backend, even
    beside a real GPU (a machine may have one only)."""
    from towerflow.device import physical
    use_gpu_backend(2, monkeypatch, simulated=True)
    physical.set_gpu_probe(None)
    yield
    release_gpu_backend()


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [12, 7, 1], ids=["equal", "ragged", "one-empty"])
def test_synchronized_gpu_towers_match_one_device(two_simulated_gpus, batch):
    """Two GPU towers summing with NCCL (the simulator's, which enforces CUDA's
    rules: it caught NCCL members the graph order had split apart)."""
    reference = train(0, batch)
    on_gpus = train(2, batch, devices=["/gpu:0", "/gpu:1"], all_reduce="nccl")
    for field in Result._fields:
        assert difference(getattr(on_gpus, field), getattr(reference, field)) <= TOLERANCE, \
            field


# -- MPI ranks -------------------------------------------------------------------------

PROGRAM = Path(__file__).parent / "mpi_programs" / "sync_batch_norm_ranks.py"


@pytest.mark.parametrize("towers_per_rank", [1, 2])
def test_two_mpi_ranks_match_one_device(tmp_path, towers_per_rank):
    """``towerflow launch -n 2``: 2 ranks x 1 or 2 towers on batches of 12
    (equal), 7 (ragged) and 3 (with 2 towers a rank, one shard empty)."""
    run_on_ranks(PROGRAM, tmp_path, towers_per_rank, timeout=300)
    for batch in (12, 7, 3):
        reference = train(0, batch)
        ranks = [np.load(tmp_path / f"batch_{batch}_rank_{rank}.npz") for rank in (0, 1)]
        for saved in ranks:
            start, end = saved["shard"]         # the rank's part of the batch
            result = Result(saved["outputs"], saved["losses"],
                            [saved[f"gradient_{i}"] for i in range(len(reference.gradients))],
                            [saved[f"variable_{i}"] for i in range(len(reference.variables))])
            expected = reference._replace(outputs=reference.outputs[start:end])
            for field in Result._fields:
                assert difference(getattr(result, field), getattr(expected, field)) \
                    <= TOLERANCE, (batch, field)
        for key in ranks[0].files:
            if key.startswith("variable_"):     # the ranks end bit-identical
                assert np.array_equal(ranks[0][key], ranks[1][key])


# -- towerflow train --sync-batch-norm ---------------------------------------------------


def test_cli_sync_batch_norm_trains_the_cifar10_recipe_like_one_device(tmp_path,
                                                                       monkeypatch):
    """The real entry point on the cifar10 recipe (seven batch norms) with
    stand-in images: one step on 2 towers with --sync-batch-norm saves the
    moving statistics one tower saves (the pipeline's global batch does not
    depend on the towers); without the flag they follow each half-batch.

    NOTE: one device is compared with the same flag: the recipe's unseeded
    initializers draw from the graph's op count (as TF's), which the
    synchronized layers' extra ops change."""
    from towerflow import cli
    stand_in_cifar10(monkeypatch)

    def statistics(name, *options):
        out = tmp_path / name
        assert cli.main(["train", "cifar10", "--data-dir", str(tmp_path), "--batch-size",
                         "15", "--steps", "1", "--quiet", "--checkpoint-dir", str(out),
                         "--json-out", str(out / "run.json"), *options]) == 0
        run = json.loads((out / "run.json").read_text())
        assert run["sync_batch_norm"] == ("--sync-batch-norm" in options)
        return moving_statistics(out)
    one_tower = statistics("one", "--devices", "/cpu:0", "--sync-batch-norm")
    synced = statistics("synced", "--devices", "/cpu:0,/cpu:1", "--sync-batch-norm")
    assert len(one_tower) == 14
    # float32: a statistic sums up to 15 x 32 x 32 = 15,360 values
    assert worst(synced, one_tower) <= 1e-4
    plain_one = statistics("plain-one", "--devices", "/cpu:0")
    per_tower = statistics("per-tower", "--devices", "/cpu:0,/cpu:1")
    assert worst(per_tower, plain_one) > 1e-2


def stand_in_cifar10(monkeypatch):
    """The cifar10 recipe (seven batch norms) on 40 random stand-in images."""
    from towerflow import data
    from towerflow.recipes import get
    recipe = get("cifar10")
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, 40)
    splits = data.Splits(data.Split(images[:30], labels[:30]),
                         data.Split(images[30:], labels[30:]), list("abcdefghij"))
    monkeypatch.setattr(recipe, "load", lambda data_dir=None: splits)
    return recipe


def moving_statistics(directory):
    """{name: value} of the moving means and variances of a checkpoint directory."""
    reader = tf.train.load_checkpoint(str(directory))
    return {key: reader.get_tensor(key) for key, _ in tf.train.list_variables(str(directory))
            if key.endswith(("moving_mean", "moving_variance"))}


def worst(ours, reference):
    """The largest difference of two {name: array}, relative to each array's scale."""
    return max(float(np.max(np.abs(ours[key] - value))) / max(float(np.max(np.abs(value))),
                                                                 1e-3)
               for key, value in reference.items())


def test_cli_help_names_the_option_and_its_default(capsys):
    from towerflow import cli
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--sync-batch-norm" in help_text
    assert "default: each tower's own shard" in help_text
