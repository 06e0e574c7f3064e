"""No host reads in a training step's kernels, so a GPU step can be captured
whole as one CUDA graph. The ops run on a fake GPU whose kernels are built
over a NumPy stand-in that is not ``numpy`` (the GPU's code paths) and whose
arrays refuse to be read on the host (tests/host_read_trap.py); every value
must then equal the same graph run on the CPU (the NumPy kernels), bit for
bit. A kernel-level check covers the CPU table too, for the kernels shared
by both (gated updates, batch norm with a fed flag, ScaleOrZero)."""

import types

import numpy as np
import pytest
from conftest import fake_gpu
from host_read_trap import TRAP_KERNELS, HostRead, TrapGpu, trapped, untrapped

import towerflow as tf
from towerflow import backends
from towerflow.backends import kernels
from towerflow.device import physical
from towerflow.graph import registry

HIDE_GPUS = tf.ConfigProto(device_count={"GPU": 0})


@pytest.fixture
def trap_gpu():
    """One fake GPU served by TrapGpu; yields a function that splits it into
    ``count`` logical GPUs."""
    physical.set_gpu_probe(lambda: ([fake_gpu(0)], None))
    registry.register_kernels("GPU", TRAP_KERNELS)
    backends.register_backend("GPU", TrapGpu)

    def split(count):
        gpu = tf.config.list_physical_devices("GPU")[0]
        tf.config.set_logical_device_configuration(
            gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=256)] * count)
    yield split
    registry.unregister_kernels("GPU")
    backends.unregister_backend("GPU")


def run_on_gpu_and_cpu(fetches, feed_dicts, gpu_ops=()):
    """[values per feed dict] on the trap GPU, then on the CPU (GPUs hidden),
    each in a new Session initialised first; checks ``gpu_ops`` ran on the GPU."""
    results = []
    for config in (None, HIDE_GPUS):
        with tf.Session(config=config) as sess:
            if config is None:
                for op in gpu_ops:
                    assert sess._placer.place(op).device_type == "GPU", op.name
            sess.run(tf.global_variables_initializer())
            results.append([sess.run(fetches, feed) for feed in feed_dicts])
    return results


def assert_same(gpu_values, cpu_values):
    gpu_leaves, cpu_leaves = _flat(gpu_values), _flat(cpu_values)
    assert len(gpu_leaves) == len(cpu_leaves)
    for gpu, cpu in zip(gpu_leaves, cpu_leaves):
        np.testing.assert_array_equal(gpu, cpu)


def _flat(values):
    if isinstance(values, (list, tuple)):
        return [leaf for value in values for leaf in _flat(value)]
    return [values]


# -- learning-rate schedules ------------------------------------------------------------

SCHEDULES = {
    "piecewise": lambda s: tf.train.piecewise_constant(s, [3, 7], [1.0, 0.5, 0.1]),
    "exponential_staircase": lambda s: tf.train.exponential_decay(0.1, s, 3, 0.5, True),
    "natural_exp": lambda s: tf.train.natural_exp_decay(0.1, s, 3, 0.5),
    "inverse_time": lambda s: tf.train.inverse_time_decay(0.1, s, 3, 0.5),
    "polynomial_cycle": lambda s: tf.train.polynomial_decay(0.1, s, 4, 0.01, 0.5, cycle=True),
    "warmup_cosine": lambda s: tf.train.linear_warmup(tf.train.cosine_decay(0.1, s, 8), s, 3),
    "one_cycle": lambda s: tf.train.one_cycle(1.0, s, total_steps=10),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedules_run_on_the_gpu_without_reading_the_step(trap_gpu, name):
    step = tf.placeholder(tf.int64, [])
    learning_rate = SCHEDULES[name](step)
    feeds = [{step: value} for value in range(12)]
    gpu, cpu = run_on_gpu_and_cpu(learning_rate, feeds, gpu_ops=[step.op, learning_rate.op])
    assert_same(gpu, cpu)
    assert len(set(cpu)) > 2                           # the rate did change


def test_a_python_schedule_is_the_one_left_reading_the_host(trap_gpu):
    step = tf.train.get_or_create_global_step()
    learning_rate = tf.train.learning_rate_schedule(lambda s: 0.1 / (1 + s), step)
    with tf.Session() as sess:
        sess.run(step.initializer)
        # NOTE: the trap is an AssertionError, no refused input: an InternalError
        with pytest.raises(tf.errors.InternalError, match=r"^HostRead: \.item\(\)(.|\n)*"
                           r"\[\[node LearningRateSchedule "):
            sess.run(learning_rate)


# -- gated updates (loss scaling) -------------------------------------------------------

OPTIMIZERS = {
    "sgd": lambda: tf.train.GradientDescentOptimizer(0.1, weight_decay=0.01),
    "momentum": lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
    "adamw": lambda: tf.train.AdamWOptimizer(0.01, learning_rate=0.1),
    "rmsprop": lambda: tf.train.RMSPropOptimizer(0.1, momentum=0.5, centered=True),
    "adagrad": lambda: tf.train.AdagradOptimizer(0.1),
    "adadelta": lambda: tf.train.AdadeltaOptimizer(1.0),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_loss_scaled_steps_skip_on_the_gpu_without_reading_the_gate(trap_gpu, name):
    step = tf.train.get_or_create_global_step()
    x = tf.placeholder(tf.float32, [4, 3])
    w = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))
    loss = tf.reduce_sum(tf.square(tf.matmul(x, w)))
    opt = tf.mixed_precision.LossScaleOptimizer(OPTIMIZERS[name](), initial_scale=4.0,
                                                growth_steps=2)
    train = opt.minimize(loss, global_step=step)
    state = [w, step, opt.loss_scale] + opt.variables()
    good = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    bad = good.copy()
    bad[1, 2] = np.inf
    feeds = [{x: batch} for batch in (good, bad, good, good, bad)]
    gpu, cpu = run_on_gpu_and_cpu([train, opt.step_skipped, state], feeds,
                                  gpu_ops=[train, w.op])
    assert_same(gpu, cpu)
    assert [values[1] for values in gpu] == [False, True, False, False, True]
    assert gpu[-1][2][1] == 3                          # three steps taken, two skipped


# -- batch norm with a fed training flag -------------------------------------------------


def test_batch_norm_with_a_fed_flag_runs_on_the_gpu_without_reading_it(trap_gpu, rng,
                                                                       monkeypatch):
    # the CPU on its NumPy kernels: the GPU's arithmetic, so the same bits (the
    # CPU's compiled training kernels, which a fed True runs, sum in float64)
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    x = tf.placeholder(tf.float32, [None, 2, 3])
    training = tf.placeholder(tf.bool, [])
    y = tf.layers.batch_normalization(x, momentum=0.5, training=training)
    grads = tf.gradients(tf.reduce_sum(y * y), [x] + tf.trainable_variables())
    updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
    batch = (rng.standard_normal((4, 2, 3)) * 3 + 2).astype(np.float32)
    feeds = [{x: batch, training: flag} for flag in (True, False, True, False)]
    gpu, cpu = run_on_gpu_and_cpu([y, grads, updates, tf.global_variables()], feeds,
                                  gpu_ops=[y.op, grads[0].op])
    assert_same(gpu, cpu)


# -- dropout with a fed rate -------------------------------------------------------------


def test_dropout_with_a_fed_rate_runs_on_the_gpu_without_reading_it(trap_gpu, rng):
    x = tf.placeholder(tf.float32, [20, 30])
    keep_prob = tf.placeholder(tf.float32, [])
    y = tf.nn.dropout(x, keep_prob, seed=3)
    (grad,) = tf.gradients(tf.reduce_sum(y), x)
    value = rng.uniform(1, 2, (20, 30)).astype(np.float32)
    feeds = [{x: value, keep_prob: kept} for kept in (1.0, 0.5, 0.8)]
    gpu, cpu = run_on_gpu_and_cpu([y, grad], feeds, gpu_ops=[y.op])
    assert_same(gpu, cpu)
    np.testing.assert_array_equal(gpu[0][0], value)      # keep_prob 1: untouched


def test_a_fed_keep_prob_of_zero_is_nan_on_the_gpu_and_an_error_on_the_cpu(trap_gpu):
    # TensorFlow checks a fed rate on neither; the CPU check reads the host for free.
    x = tf.ones([3, 4])
    keep_prob = tf.placeholder(tf.float32, [])
    y = tf.nn.dropout(x, keep_prob, seed=1)
    with tf.Session() as sess:
        assert np.isnan(sess.run(y, {keep_prob: 0.0})).all()
    with tf.Session(config=HIDE_GPUS) as sess, \
            pytest.raises(tf.errors.InvalidArgumentError, match=r"\[0, 1\), got 1.0"):
        sess.run(y, {keep_prob: 0.0})


# -- towers: ScaleOrZero on every tower, empty shards included ---------------------------


def test_towers_weigh_their_shards_on_the_gpus_without_reading_the_weights(trap_gpu, rng):
    trap_gpu(3)
    x = tf.placeholder(tf.float32, [None, 3])
    targets = tf.placeholder(tf.float32, [None, 2])

    def tower_fn(inputs):
        images, wanted = inputs
        outputs = tf.layers.dense(images, 2,
                                  kernel_initializer=tf.glorot_uniform_initializer(seed=2))
        return tf.reduce_mean(tf.square(outputs - wanted))

    strategy = tf.parallel.DataParallel(["/gpu:0", "/gpu:1", "/gpu:2"], all_reduce="local")
    step = strategy.minimize(tower_fn, (x, targets), tf.train.MomentumOptimizer(0.1, 0.9))
    images = rng.standard_normal((7, 3)).astype(np.float32)
    wanted = rng.standard_normal((7, 2)).astype(np.float32)
    sizes = (7, 2, 1)                      # 2 and 1 rows leave towers' shards empty
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for size in sizes:
            _, loss, replicas = sess.run([step.train_op, step.loss, step.replicas],
                                         {x: images[:size], targets: wanted[:size]})
            assert np.isfinite(loss)
            for replica in replicas[1:]:
                for got, first in zip(replica, replicas[0]):
                    np.testing.assert_array_equal(got, first)
                    assert np.isfinite(got).all()


# -- sparse softmax cross-entropy ---------------------------------------------------------


def test_sparse_cross_entropy_on_the_gpu_gives_nan_rows_for_bad_labels(trap_gpu):
    # As TensorFlow's GPU kernel: no check (it would read the labels on the host).
    logits = tf.constant([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5], [3.0, 1.0, 0.0]])
    labels = tf.placeholder(tf.int64, [3])
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    (grad,) = tf.gradients(tf.reduce_sum(loss), logits)
    gpu, cpu = run_on_gpu_and_cpu([loss, grad], [{labels: [2, 0, 1]}], gpu_ops=[loss.op])
    assert_same(gpu, cpu)
    with tf.Session() as sess:
        bad_loss, bad_grad = sess.run([loss, grad], {labels: [2, 3, -1]})
    np.testing.assert_array_equal(bad_loss[0], gpu[0][0][0])
    np.testing.assert_array_equal(bad_grad[0], gpu[0][1][0])
    assert np.isnan(bad_loss[1:]).all() and np.isnan(bad_grad[1:]).all()


# -- the kernels themselves, on both tables: equal to their ungated / fixed forms -------

TABLES = {"numpy": kernels.build_kernels(np), "trap": TRAP_KERNELS}


class FakeOp:
    """What a kernel maker takes from its op: a name (and a hashable identity)."""

    def __init__(self, name):
        self.name = name


class Kernels:
    """Kernels of one table sharing one set of per-Session resources (variables)."""

    def __init__(self, table):
        self.table, self.resources = table, {}

    def make(self, name, attrs, output_dtypes=(np.float32,)):
        ctx = types.SimpleNamespace(
            attrs=attrs, op=FakeOp(name),
            output_dtypes=[np.dtype(dtype) for dtype in output_dtypes],
            resource=lambda key, make: self.resources.setdefault(key, make()))
        return self.table[name](ctx)

    def cell(self, name):
        return self.resources.setdefault(("variable", name), kernels.VariableCell())


# (kernel, attrs, slot names, scalar hyperparameters before and after the gradient)
UPDATES = {
    "sgd": ("ApplyGradientDescent", {"weight_decay": 0.01}, (), [0.1], []),
    "nesterov": ("ApplyMomentum", {"weight_decay": 0.0, "use_nesterov": True},
                 ("accum",), [0.1], [0.9]),
    "adamw": ("ApplyAdam", {"weight_decay": 0.01}, ("m", "v"),
              [0.81, 0.998, 0.1, 0.9, 0.999, 1e-8], []),
    "rmsprop": ("ApplyRMSProp", {}, ("ms", "mom"), [0.1, 0.9, 0.5, 1e-10], []),
    "centered_rmsprop": ("ApplyCenteredRMSProp", {}, ("mg", "ms", "mom"),
                         [0.1, 0.9, 0.5, 1e-10], []),
    "adagrad": ("ApplyAdagrad", {}, ("accum",), [0.1], []),
    "adadelta": ("ApplyAdadelta", {}, ("accum", "accum_update"), [1.0, 0.95, 1e-6], []),
}


def flag_for(table):
    """How a bool flag reaches ``table``'s kernels: a trap on the GPU paths; a
    host value the CPU kernels may read (they do, for speed)."""
    return trapped if table is TRAP_KERNELS else np.asarray


def run_update(table, name, gate, grad, start):
    """The variable and slots after one update from ``start`` (gate None:
    the ungated kernel), every array a host-read trap."""
    kernel_name, attrs, slots, before, after = UPDATES[name]
    kernels_ = Kernels(table)
    attrs = {**attrs, "variable": "w", "slots": slots, "gated": gate is not None}
    for cell_name, value in zip(("w",) + slots, start):
        kernels_.cell(cell_name).value = trapped(value.copy())
    inputs = [trapped(np.float32(value)) for value in before] + [trapped(grad)] + \
        [trapped(np.float32(value)) for value in after]
    if gate is not None:    # (the CPU reads its gate on the host: it is a host value there)
        inputs.append(flag_for(table)(np.bool_(gate)))
    kernels_.make(kernel_name, attrs)(*inputs)
    return [untrapped(kernels_.cell(cell_name).value) for cell_name in ("w",) + slots]


@pytest.mark.parametrize("table", sorted(TABLES))
@pytest.mark.parametrize("name", sorted(UPDATES))
def test_a_gated_update_is_the_update_when_open_and_nothing_when_closed(table, name, rng):
    start = [rng.standard_normal((3, 4)).astype(np.float32) for _ in
             range(1 + len(UPDATES[name][2]))]
    start[1:] = [np.abs(slot) for slot in start[1:]]         # Adam's v is >= 0
    if name == "centered_rmsprop":
        start[2] += 10.0                                     # ms > mg^2: a real sqrt
    grad = rng.standard_normal((3, 4)).astype(np.float32)
    ungated = run_update(TABLES[table], name, None, grad, start)
    for got, want in zip(run_update(TABLES[table], name, True, grad, start), ungated):
        np.testing.assert_array_equal(got, want)
    bad_grad = grad.copy()
    bad_grad[1, 2] = np.inf
    for closed_grad in (grad, bad_grad):
        for got, old in zip(run_update(TABLES[table], name, False, closed_grad, start), start):
            np.testing.assert_array_equal(got, old)


def batch_norm_case(rng, rows=6):
    x = (rng.standard_normal((rows, 2, 3)) * 3 + 2).astype(np.float32)
    scale, offset = np.float32([1.5, 0.5, 2.0]), np.float32([0.1, -0.2, 0.3])
    mean, variance = np.float32([0.5, 1.0, 2.0]), np.float32([1.0, 4.0, 9.0])
    return x, scale, offset, mean, variance


@pytest.mark.parametrize("table", sorted(TABLES))
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_with_a_fed_flag_equals_the_fixed_mode(table, training, rng):
    kernels_ = Kernels(TABLES[table])

    def batch_norm(mode, *inputs):
        attrs = {"epsilon": 1e-3, "is_training": mode}
        forward = kernels_.make("FusedBatchNorm", attrs, [np.float32] * 5)
        backward = kernels_.make("FusedBatchNormGrad", attrs, [np.float32] * 3)
        flag = () if mode is not None else (flag_for(TABLES[table])(np.bool_(training)),)
        outputs = forward(*[trapped(value) for value in inputs], *flag)
        grad = trapped(np.cos(untrapped(outputs[0])))
        grads = backward(grad, trapped(inputs[0]), trapped(inputs[1]), outputs[3],
                         outputs[4], *flag)
        return [untrapped(value) for value in outputs + grads]

    inputs = batch_norm_case(rng)
    for fed, fixed in zip(batch_norm(None, *inputs), batch_norm(training, *inputs)):
        np.testing.assert_array_equal(fed, fixed)


def test_batch_norm_with_a_fed_flag_takes_an_empty_batch_in_inference(rng):
    kernels_ = Kernels(TABLES["trap"])
    forward = kernels_.make("FusedBatchNorm", {"epsilon": 1e-3, "is_training": None},
                            [np.float32] * 5)
    x, scale, offset, mean, variance = batch_norm_case(rng, rows=0)
    y, batch_mean, batch_variance, _, _ = forward(
        *[trapped(value) for value in (x, scale, offset, mean, variance)],
        trapped(np.bool_(False)))
    assert untrapped(y).shape == (0, 2, 3)
    np.testing.assert_array_equal(untrapped(batch_mean), mean)
    np.testing.assert_array_equal(untrapped(batch_variance), variance)


@pytest.mark.parametrize("table", sorted(TABLES))
def test_scale_or_zero_selects_zeros_for_a_zero_weight_without_reading_it(table):
    scale_or_zero = Kernels(TABLES[table]).make("ScaleOrZero", {})
    values = np.float32([1.0, np.nan, -2.0])
    np.testing.assert_array_equal(
        untrapped(scale_or_zero(trapped(values), trapped(np.float32(0.5)))), values * 0.5)
    zeros = untrapped(scale_or_zero(trapped(values), trapped(np.float32(0.0))))
    np.testing.assert_array_equal(zeros, [0.0, 0.0, 0.0])
    assert not np.signbit(zeros).any()
    scalar = untrapped(scale_or_zero(trapped(np.float32(np.nan)), trapped(np.float32(0.0))))
    assert scalar == 0.0


def test_the_trap_catches_a_host_read():
    with pytest.raises(HostRead, match=r"bool\(\)"):
        bool(trapped(np.float32(1.0)) > 0)
    with pytest.raises(HostRead, match=r"\.item\(\)"):
        trapped(np.arange(3)).sum().item()
