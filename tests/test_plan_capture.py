"""CUDA-graph capture of step plans (towerflow/plan_capture.py), on a machine
without a GPU: a fake GPU served by the NumPy kernels stands in for CuPy and
models what a graph does. Capturing runs nothing (a kernel that cannot be
captured fails then); a replay runs the captured steps again on the captured
buffers, so fed values must be copied into the graph's own inputs.

The real capture (CupyDevice.capture_steps) is checked on a GPU in
test_gpu_backend.py."""

import contextlib
import itertools

import numpy as np
import pytest

import towerflow as tf
from towerflow import backends, data, plan_capture, training
from towerflow.backends import kernels, numpy_backend
from towerflow.device import physical
from towerflow.graph import registry
from towerflow.recipes import cifar10
from conftest import fake_gpu, gpu_registration_kept
from host_read_trap import TRAP_KERNELS, TrapGpu

RECORD = {"seed": 0, "precision": "float32"}     # what training._build reads of a run


class CaptureUnsupported(RuntimeError):
    """What CUDA raises when a captured kernel waits for the device."""


class FakeCapturingGpu(numpy_backend.NumpyDevice):
    """A GPU runtime whose 'graph' is the recorded step function."""

    cells = staticmethod(lambda: [])     # the test session's variable cells
    fails_in = set()                     # op types that cannot be captured
    captures = replays = 0
    table = numpy_backend.KERNELS

    def __init__(self, logical_device):
        super().__init__(logical_device)
        self.capture_group = logical_device.gpu.index
        self.capturing = False
        self.kernels = _FailingWhileCaptured(self.table, self)

    @staticmethod
    def to_device(host_value):      # a device buffer of its own, as on a GPU
        return np.array(host_value, copy=True)

    def capture_steps(self, runtimes, run):
        # Nothing runs while a graph is captured: run the steps to find a failing
        # one, then put every variable back as it was.
        saved = [(cell, cell.value.copy()) for cell in FakeCapturingGpu.cells()
                 if cell.value is not None]
        for runtime in runtimes:
            runtime.capturing = True
        try:
            run()
        finally:
            for runtime in runtimes:
                runtime.capturing = False
            for cell, value in saved:
                if cell.value.shape == value.shape:
                    cell.value[...] = value
        FakeCapturingGpu.captures += 1
        return FakeReplayer(run)


class TrapCapturingGpu(FakeCapturingGpu):
    """FakeCapturingGpu on the GPU's code paths, with arrays that refuse to be
    read on the host (tests/host_read_trap.py): a host read fails the step."""

    table = TRAP_KERNELS
    to_device = staticmethod(TrapGpu.to_device)
    to_host = staticmethod(TrapGpu.to_host)
    copy_from = staticmethod(TrapGpu.copy_from)


class FakeReplayer:
    def __init__(self, run):
        self._run = run

    @staticmethod
    def stage(buffer, host_value):
        buffer[...] = host_value

    def replay(self):
        FakeCapturingGpu.replays += 1
        self._run()


class _FailingWhileCaptured:
    def __init__(self, table, runtime):
        self._table, self._runtime = table, runtime

    def get(self, name, default=None):
        make = self._table.get(name)
        if make is None:
            return default

        def make_checked(ctx):
            kernel, runtime = make(ctx), self._runtime

            def run(*args):
                if runtime.capturing and ctx.op.type in FakeCapturingGpu.fails_in:
                    raise CaptureUnsupported("operation not permitted when stream is capturing")
                return kernel(*args)
            return run
        return make_checked

    def __contains__(self, name):
        return name in self._table


@contextlib.contextmanager
def faked_capturing_gpu(monkeypatch):
    """What the fake_capturing_gpu fixture runs."""
    with gpu_registration_kept():
        physical.set_gpu_probe(lambda: ([fake_gpu(0)], None))
        registry.register_kernels("GPU", numpy_backend.KERNELS)
        backends.register_backend("GPU", FakeCapturingGpu)
        monkeypatch.setattr(FakeCapturingGpu, "fails_in", set())
        monkeypatch.setattr(FakeCapturingGpu, "captures", 0)
        monkeypatch.setattr(FakeCapturingGpu, "replays", 0)
        monkeypatch.delenv("TOWERFLOW_CUDA_GRAPHS", raising=False)
        yield


@pytest.fixture
def fake_capturing_gpu(monkeypatch):
    with faked_capturing_gpu(monkeypatch):
        yield


def session(config=None):
    sess = tf.Session(config=config)
    FakeCapturingGpu.cells = staticmethod(plan_capture.session_cells(sess._state))
    return sess


def batches(steps, rows=8, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((rows, 3)).astype(np.float32),
             rng.standard_normal((rows, 1)).astype(np.float32)) for _ in range(steps)]


def linear_model(device="/gpu:0", learning_rate=0.1, rows=8):
    with tf.device(device):
        x = tf.placeholder(tf.float32, [rows, 3])
        y = tf.placeholder(tf.float32, [rows, 1])
        w = tf.Variable(tf.ones([3, 1]))
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        train = tf.train.GradientDescentOptimizer(learning_rate).minimize(loss)
    return x, y, w, loss, train


def train_losses(sess, model, data):
    x, y, w, loss, train = model
    sess.run(tf.global_variables_initializer())
    losses = [sess.run([loss, train], {x: bx, y: by})[0] for bx, by in data]
    return np.array(losses), sess.run(w)


def test_a_captured_training_loop_matches_running_op_by_op(fake_capturing_gpu):
    data = batches(6)
    model = linear_model()
    replayed = train_losses(session(), model, data)
    assert (FakeCapturingGpu.captures, FakeCapturingGpu.replays) == (1, 5)
    plain = train_losses(session(tf.ConfigProto(cuda_graphs=False)), model, data)
    assert FakeCapturingGpu.captures == 1                 # cuda_graphs=False: none
    np.testing.assert_array_equal(replayed[0], plain[0])  # each replay saw its batch
    np.testing.assert_array_equal(replayed[1], plain[1])
    assert len(set(replayed[0].tolist())) == 6


def test_the_environment_variable_turns_capture_off(fake_capturing_gpu, monkeypatch):
    monkeypatch.setenv("TOWERFLOW_CUDA_GRAPHS", "0")
    train_losses(session(), linear_model(), batches(4))
    assert FakeCapturingGpu.captures == 0


def test_each_fed_shape_gets_its_own_graph_up_to_a_limit(fake_capturing_gpu, capsys):
    with tf.device("/gpu:0"):
        x = tf.placeholder(tf.float32, [None, 2])
        total = tf.reduce_sum(x * 2.0)
    sess = session()
    rows = list(range(1, plan_capture.MAX_GRAPHS_PER_PLAN + 3))
    for _ in range(2):
        for count in rows:
            value = np.full((count, 2), count, np.float32)
            assert sess.run(total, {x: value}) == 4 * count * count
    assert FakeCapturingGpu.captures == plan_capture.MAX_GRAPHS_PER_PLAN
    assert f"more than {plan_capture.MAX_GRAPHS_PER_PLAN} signatures" in capsys.readouterr().err


def test_a_plan_with_a_host_read_runs_op_by_op_and_says_why(fake_capturing_gpu, capsys):
    with tf.device("/gpu:0"):
        step = tf.train.get_or_create_global_step()
        rate = tf.train.learning_rate_schedule(lambda s: 0.1 * 0.5 ** (s / 10), step)
        x, y, w, loss, _ = linear_model(learning_rate=rate)
        train = tf.train.GradientDescentOptimizer(rate).minimize(loss, global_step=step)
    losses, _ = train_losses(session(), (x, y, w, loss, train), batches(4))
    assert FakeCapturingGpu.captures == 0
    assert "(LearningRateSchedule) calls a Python function on each step's value" \
        in capsys.readouterr().err
    assert np.all(np.isfinite(losses))


def test_a_scheduled_loss_scaled_step_is_captured_whole(fake_capturing_gpu, capsys):
    # The schedule and loss scaling's gate are device ops: nothing reads the host.
    with tf.device("/gpu:0"):
        step = tf.train.get_or_create_global_step()
        rate = tf.train.exponential_decay(0.1, step, 2, 0.5, staircase=True)
        x, y, w, loss, _ = linear_model()
        opt = tf.mixed_precision.LossScaleOptimizer(tf.train.MomentumOptimizer(rate, 0.9))
        train = opt.minimize(loss, global_step=step)
    fed = batches(5)
    fed[2][0][0, 0] = np.inf                           # a step the gate skips
    model = (x, y, w, loss, train)
    replayed = train_losses(session(), model, fed)
    assert (FakeCapturingGpu.captures, FakeCapturingGpu.replays) == (1, 4)
    assert "CUDA graphs: not capturing" not in capsys.readouterr().err
    assert not np.isfinite(replayed[0][2])
    plain = train_losses(session(tf.ConfigProto(cuda_graphs=False)), model, fed)
    np.testing.assert_array_equal(replayed[0], plain[0])
    np.testing.assert_array_equal(replayed[1], plain[1])


def test_a_step_on_the_cpu_keeps_the_plan_op_by_op(fake_capturing_gpu, capsys):
    x, y, w, loss, train = linear_model()
    with tf.device("/cpu:0"):
        doubled = loss * 2.0
    sess = session()
    sess.run(tf.global_variables_initializer())
    for bx, by in batches(3):
        sess.run([doubled, train], {x: bx, y: by})
    assert FakeCapturingGpu.captures == 0
    assert "runs on /job:localhost/replica:0/task:0/device:CPU:0, outside the GPU" \
        in capsys.readouterr().err


def test_a_failed_capture_runs_the_step_once_op_by_op(fake_capturing_gpu, capsys):
    FakeCapturingGpu.fails_in = {"MatMul"}
    data = batches(4)
    model = linear_model()
    failed = train_losses(session(), model, data)
    assert ("capture failed: CaptureUnsupported: operation not permitted when stream is "
            "capturing [[node MatMul (op: MatMul) ]]" in capsys.readouterr().err)
    assert FakeCapturingGpu.replays == 0
    plain = train_losses(session(tf.ConfigProto(cuda_graphs=False)), model, data)
    np.testing.assert_array_equal(failed[0], plain[0])    # no step applied twice
    np.testing.assert_array_equal(failed[1], plain[1])


def test_a_variable_in_a_new_buffer_is_captured_again(fake_capturing_gpu):
    with tf.device("/gpu:0"):
        v = tf.Variable(tf.zeros([2]), validate_shape=False)
        bump = tf.assign_add(v, tf.ones_like(v))
        reset = tf.assign(v, tf.zeros([3]), validate_shape=False)
    sess = session()
    sess.run(tf.global_variables_initializer())
    for _ in range(3):
        sess.run(bump.op)
    assert FakeCapturingGpu.captures == 1
    sess.run(reset)                                    # a new, bigger buffer
    for _ in range(2):
        sess.run(bump.op)
    assert FakeCapturingGpu.captures == 2
    np.testing.assert_array_equal(sess.run(v), [2, 2, 2])


def test_an_error_in_the_step_itself_still_surfaces(fake_capturing_gpu):
    x, y, w, loss, train = linear_model()
    sess = session()
    with pytest.raises(tf.errors.FailedPreconditionError, match="uninitialized"):
        for bx, by in batches(2):
            sess.run(train, {x: bx, y: by})


def test_plans_on_the_cpu_are_not_wrapped(no_gpu):
    x = tf.placeholder(tf.float32, [2])
    sess = tf.Session()
    sess.run(x * 2, {x: [1, 2]})
    (plan, _), = sess._plans.values()
    assert not isinstance(plan, plan_capture.CapturingPlan)


def test_variable_cells_are_what_a_session_keeps(fake_capturing_gpu):
    v = tf.Variable(1.0)
    sess = session()
    sess.run(v.initializer)
    cells = plan_capture.session_cells(sess._state)()
    assert len(cells) == 1 and isinstance(cells[0], kernels.VariableCell)


def run_cifar10_recipe(make_session, epochs=2):
    """Towers on two logical GPUs of GPU 0, the all-reduce, the update and the
    recipe's schedule, as `towerflow train cifar10` builds and runs them (small
    images): (session, losses, model)."""
    gpu = tf.config.list_physical_devices("GPU")[0]
    tf.config.set_logical_device_configuration(
        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=256)] * 2)
    rng = np.random.default_rng(0)
    train = data.Split(rng.integers(0, 256, (24, 8, 8, 3)).astype(np.uint8),
                       rng.integers(0, 10, 24).astype(np.int64))
    splits = data.Splits(train, train, [str(label) for label in range(10)])
    recipe = cifar10.RECIPE
    pipeline = data.Pipeline(*train, batch_size=8, seed=0, **recipe.pipeline_options(train))
    graph = tf.Graph()
    losses = []
    with graph.as_default():
        model = training._build(recipe, splits, ["/gpu:0", "/gpu:1"], "auto", RECORD,
                                pipeline.batches_per_epoch * epochs)
        fetches = [model.step.train_op, model.step.loss, model.step.metrics["accuracy"]]
        sess = make_session()
        sess.run(tf.global_variables_initializer())
        batches = itertools.chain(*(pipeline.epoch() for _ in range(epochs)))
        for images, labels in batches:
            feed = {model.images: images, model.labels: labels, model.training: True}
            losses.append(sess.run(fetches, feed)[1])
    return sess, np.array(losses), model


def captured_step_plan(sess):
    (plan, _), = [entry for entry in sess._plans.values()
                  if getattr(entry[0], "captured", 0)]       # the training step's
    return plan


def test_the_cifar10_recipes_training_step_is_captured_whole(fake_capturing_gpu, capsys):
    """The recipe's step on the GPU's code paths with every host read trapped."""
    registry.register_kernels("GPU", TRAP_KERNELS)
    backends.register_backend("GPU", TrapCapturingGpu)
    sess, _, model = run_cifar10_recipe(session)
    with sess.graph.as_default():
        plan = captured_step_plan(sess)
        assert plan_capture.static_reason(plan._plan, plan._runtimes) is None
        assert (FakeCapturingGpu.captures, FakeCapturingGpu.replays) == (1, 5)
        assert sess.run(model.global_step) == 6
    assert "CUDA graphs: not capturing" not in capsys.readouterr().err


def test_a_reshape_to_a_run_time_shape_runs_op_by_op_and_each_run_sees_its_shape(
        fake_capturing_gpu, capsys):
    """reshape(x, tf.shape(y)) reads the shape on the host, which a CUDA graph
    cannot replay: every run must reshape to that run's fed shape."""
    with tf.device("/gpu:0"):
        x = tf.placeholder(tf.float32, [None])
        like = tf.placeholder(tf.float32, [None, None])
        reshaped = tf.reshape(x * 2.0, tf.shape(like))
    with session() as sess:
        for rows, cols in [(2, 3), (3, 2), (1, 6), (6, 1)]:
            value = sess.run(reshaped, {x: np.arange(6, dtype=np.float32),
                                        like: np.zeros((rows, cols), np.float32)})
            np.testing.assert_array_equal(value, 2 * np.arange(6).reshape(rows, cols))
    assert FakeCapturingGpu.captures == 0
    assert "(DynamicReshape) reads its target shape on the host" in capsys.readouterr().err
