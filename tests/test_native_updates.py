"""The optimizers' compiled in-place updates on the CPU
(towerflow/backends/native_updates.py, native_updates.c):
NumPy's kernels' bits in float32 and float64 (no FMA contraction, the same
order of operations), the same bits with any thread split, TF 1.15's formulas
on every device, loss scaling's gated updates, and NumPy's chain wherever the
compiled kernels do not take the arrays."""

import collections

import numpy as np
import pytest

import towerflow as tf
from towerflow.backends import native, native_updates
from towerflow.backends.cpu_threads import SERIAL, WorkerPool

pytestmark = pytest.mark.skipif(not native.available(), reason="compiled kernels not built")

STEPS = 3
OPTIMIZERS = {
    "gd": lambda: tf.train.GradientDescentOptimizer(0.1),
    "momentum": lambda: tf.train.MomentumOptimizer(0.1, 0.9),
    "gd_decay": lambda: tf.train.GradientDescentOptimizer(0.1, weight_decay=0.05),
    "momentum_decay": lambda: tf.train.MomentumOptimizer(0.1, 0.9, weight_decay=0.05),
    "nesterov_decay": lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True,
                                                         weight_decay=5e-4),
    "adam": lambda: tf.train.AdamOptimizer(0.01),
    "adam_decay": lambda: tf.train.AdamOptimizer(0.01, epsilon=1e-3, weight_decay=0.05),
    "rms_prop": lambda: tf.train.RMSPropOptimizer(0.01, decay=0.8, momentum=0.5,
                                                  epsilon=1e-6),
    "adagrad": lambda: tf.train.AdagradOptimizer(0.1),
}


@pytest.fixture
def update_calls(monkeypatch):
    """Counts native.apply_update calls (one per part of a variable's update);
    every variable, however small, updated compiled."""
    monkeypatch.setattr(native_updates, "MIN_COMPILED_ELEMENTS", (0,) * 6)
    calls = collections.Counter()
    compiled = native.apply_update

    def counted(*args):
        calls["parts"] += 1
        return compiled(*args)
    monkeypatch.setattr(native, "apply_update", counted)
    return calls


def gradients(size, dtype, steps=STEPS, seed=1):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(size).astype(dtype) for _ in range(steps)]
    values[0][: size // 3] = 0        # zero gradients too (Adagrad: accum stays put)
    return values


def train(optimizer, size, dtype, device="/cpu:0", steps=STEPS, seed=0):
    """[the variable, then its slots] after ``steps`` updates by ``optimizer``
    (a key of OPTIMIZERS) with fed gradients."""
    tf.reset_default_graph()
    start = np.random.default_rng(seed).standard_normal(size).astype(dtype)
    with tf.device(device):
        var = tf.Variable(start)
        grad = tf.placeholder(tf.as_dtype(dtype), [size])
        opt = OPTIMIZERS[optimizer]()
        step = opt.apply_gradients([(grad, var)])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for value in gradients(size, dtype, steps):
            sess.run(step, {grad: value})
        slots = [opt.get_slot(var, name) for name in sorted(opt.get_slot_names())]
        return sess.run([var] + [slot for slot in slots if slot is not None])


def numpy_and_compiled(monkeypatch, update_calls, *args, **kwargs):
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    plain = train(*args, **kwargs)
    assert update_calls["parts"] == 0
    monkeypatch.setenv("TOWERFLOW_NATIVE", "1")
    compiled = train(*args, **kwargs)
    return plain, compiled


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("size", [1, 33, 1000])
def test_compiled_updates_give_the_numpy_kernels_bits(monkeypatch, update_calls, optimizer,
                                                      dtype, size):
    plain, compiled = numpy_and_compiled(monkeypatch, update_calls, optimizer, size, dtype)
    assert update_calls["parts"] == STEPS
    for expected, got in zip(plain, compiled, strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("optimizer", ["adam", "nesterov_decay", "rms_prop"])
@pytest.mark.parametrize("size", [17, 1000, 4099])
def test_thread_parts_give_the_numpy_kernels_bits(monkeypatch, update_calls, optimizer, size):
    """Every variable split into the CPU pool's parts (whole 64-byte lines,
    the last ragged): parts meet without a gap or an overlap."""
    from towerflow.backends import numpy_backend
    if numpy_backend.CPU_POOL.workers < 2:
        pytest.skip("the CPU pool has one thread")
    monkeypatch.setattr(native_updates, "MIN_PARALLEL_ELEMENTS", 1)
    monkeypatch.setattr("towerflow.backends.cpu_threads.MIN_PARALLEL_ELEMENTS", 1)
    plain, compiled = numpy_and_compiled(monkeypatch, update_calls, optimizer, size,
                                         np.float32)
    assert update_calls["parts"] > STEPS, "no variable was split into parts"
    for expected, got in zip(plain, compiled, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_variable_past_the_thread_threshold_is_split(monkeypatch, update_calls):
    from towerflow.backends import numpy_backend
    if numpy_backend.CPU_POOL.workers < 2:
        pytest.skip("the CPU pool has one thread")
    size = native_updates.MIN_PARALLEL_ELEMENTS + 5
    plain, compiled = numpy_and_compiled(monkeypatch, update_calls, "adam", size,
                                         np.float32)
    assert update_calls["parts"] >= 2 * STEPS
    for expected, got in zip(plain, compiled, strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("parts", [2, 3, 4, 7])
@pytest.mark.parametrize("size", [1, 15, 16, 17, 100, 1001])
def test_any_split_updates_each_element_once(size, parts):
    """The compiled kernel's parts (whole lines of 16 float32 values) cover the
    elements exactly: any split gives the unsplit update's bits."""
    rng = np.random.default_rng(size)
    var, accum, grad = (rng.standard_normal(size).astype(np.float32) for _ in range(3))
    whole, split = (var.copy(), accum.copy()), (var.copy(), accum.copy())
    scalars = (0.1, 0.9, 1.0, 0.0, 0.0)
    native.apply_update(native_updates.NESTEROV, scalars, *whole, None, grad, 0, 1)
    for part in range(parts):
        native.apply_update(native_updates.NESTEROV, scalars, *split, None, grad, part, parts)
    np.testing.assert_array_equal(split[0], whole[0])
    np.testing.assert_array_equal(split[1], whole[1])
    assert not np.array_equal(whole[0], var)


# -- TF 1.15's formulas, on every device -------------------------------------------------


def tf_reference(optimizer, start, grads):
    """TF 1.15's update formulas (its Apply* ops' documentation) in float64,
    weight decay (SGDW / AdamW) shrinking var by 1 - lr * wd first."""
    var = start.astype(np.float64)
    slots = [np.zeros_like(var), np.zeros_like(var)]
    if optimizer == "adagrad":
        slots[0] += 0.1                                       # initial_accumulator_value
    if optimizer == "rms_prop":
        slots[0] += 1                                         # ms starts at 1 in TF 1.15
    for t, grad in enumerate(grads, start=1):
        grad = grad.astype(np.float64)
        var = _tf_step(optimizer, var, slots, grad, t)
    return var


def _tf_step(optimizer, var, slots, grad, t):
    lr, wd = {"gd": (0.1, 0), "gd_decay": (0.1, 0.05), "momentum": (0.1, 0),
              "momentum_decay": (0.1, 0.05),
              "nesterov_decay": (0.1, 5e-4), "adam": (0.01, 0), "adam_decay": (0.01, 0.05),
              "rms_prop": (0.01, 0), "adagrad": (0.1, 0)}[optimizer]
    var = var * (1 - lr * wd)
    if optimizer.startswith("gd"):
        return var - lr * grad
    if optimizer.startswith(("momentum", "nesterov")):
        slots[0] = 0.9 * slots[0] + grad
        step = grad + 0.9 * slots[0] if optimizer.startswith("nesterov") else slots[0]
        return var - lr * step
    if optimizer.startswith("adam"):
        epsilon = 1e-3 if optimizer == "adam_decay" else 1e-8
        lr_t = lr * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        slots[0] = 0.9 * slots[0] + 0.1 * grad
        slots[1] = 0.999 * slots[1] + 0.001 * grad * grad
        return var - lr_t * slots[0] / (np.sqrt(slots[1]) + epsilon)
    if optimizer == "rms_prop":
        slots[0] = 0.8 * slots[0] + 0.2 * grad * grad
        slots[1] = 0.5 * slots[1] + lr * grad / np.sqrt(slots[0] + 1e-6)
        return var - slots[1]
    slots[0] = slots[0] + grad * grad
    return var - lr * grad / np.sqrt(slots[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_updates_follow_tf_formulas_on_every_device(op_device, optimizer, dtype):
    """Compiled on the CPUs (fused on the GPU where it has a kernel). Each step
    rounds each value at most ~12 times in float32 (2^-24 each) on values
    and updates of size ~1: 3 steps stay under 40 * 2^-24 = 2.4e-6."""
    size = 257
    got = train(optimizer, size, dtype, device=op_device)[0]
    start = np.random.default_rng(0).standard_normal(size).astype(dtype)
    expected = tf_reference(optimizer, start, gradients(size, dtype))
    tolerance = 2.4e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


# -- gated updates (loss scaling), and NumPy's chain where not taken -----------------------


@pytest.mark.parametrize("optimizer", ["gd_decay", "nesterov_decay", "adam"])
def test_a_gated_update_runs_compiled_and_a_skipped_one_changes_nothing(
        monkeypatch, update_calls, optimizer):
    def run():
        tf.reset_default_graph()
        w = tf.Variable(np.linspace(-1, 1, 40, dtype=np.float32))
        g = tf.placeholder(tf.float32, [40])
        opt = tf.mixed_precision.LossScaleOptimizer(OPTIMIZERS[optimizer]())
        train_op = opt.minimize(tf.reduce_sum(w * g))
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            states = []
            for value in (np.full(40, 0.5, np.float32), np.full(40, np.inf, np.float32),
                          np.linspace(2, -2, 40, dtype=np.float32)):
                sess.run(train_op, {g: value})
                states.append(sess.run([w] + [v for v in opt.variables()
                                              if "loss_scale" not in v.name]))
            return states
    plain, compiled = _both(monkeypatch, update_calls, run)
    assert update_calls["parts"] == 2                          # the skipped step: none
    for expected, got in zip(plain, compiled, strict=True):
        for a, b in zip(expected, got, strict=True):
            np.testing.assert_array_equal(b, a)
    for before, after in zip(compiled[0], compiled[1], strict=True):   # the inf step
        np.testing.assert_array_equal(after, before)


def _both(monkeypatch, update_calls, run):
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    plain = run()
    assert update_calls["parts"] == 0
    monkeypatch.setenv("TOWERFLOW_NATIVE", "1")
    return plain, run()


def not_taken_cases():
    """(name, var, slot, grad, learning rate): one thing each the compiled
    kernels refuse, everything else float32 and contiguous."""
    def arrays(size=10, dtype=np.float32):
        return [np.linspace(-1, 1, size).astype(dtype) for _ in range(3)]
    var, slot, grad = arrays()
    lr = np.float32(0.1)
    read_only = var.copy()
    read_only.flags.writeable = False
    return {
        "strided var": (arrays(20)[0][::2], slot, grad, lr),
        "float16": (*arrays(dtype=np.float16), np.float16(0.1)),
        "float64 grad": (var, slot, grad.astype(np.float64), lr),
        "float64 learning rate": (var, slot, grad, np.float64(0.1)),
        "Python float learning rate": (var, slot, grad, 0.1),
        "slot of another shape": (var, slot.reshape(2, 5), grad, lr),
        "read-only var": (read_only, slot, grad, lr),
        "a list": (list(var), slot, grad, lr),
    }


@pytest.mark.parametrize("case", sorted(not_taken_cases()))
def test_arrays_the_compiled_kernels_do_not_take_are_left_to_numpy(monkeypatch, case):
    monkeypatch.setattr(native_updates, "MIN_COMPILED_ELEMENTS", (0,) * 6)
    var, slot, grad, lr = not_taken_cases()[case]
    saved = [np.array(value, copy=True) for value in (var, slot, grad)]
    updates = native_updates.CompiledUpdates(SERIAL)
    assert updates.momentum(var, slot, grad, lr, np.float32(0.9), True) is False
    for value, before in zip((var, slot, grad), saved, strict=True):
        np.testing.assert_array_equal(np.asarray(value), before)


@pytest.mark.parametrize("optimizer", ["gd", "momentum", "nesterov_decay", "adagrad"])
def test_small_variables_are_left_to_the_numpy_chain(monkeypatch, optimizer):
    """Where the chain of ufuncs costs less than a compiled call (below
    MIN_COMPILED_ELEMENTS of the update's kind): 10 elements."""
    calls = collections.Counter()
    monkeypatch.setattr(native, "apply_update", lambda *args: calls.update(["parts"]))
    train(optimizer, 10, np.float32)
    assert calls["parts"] == 0


@pytest.mark.parametrize("make", [
    lambda: tf.train.RMSPropOptimizer(0.01, momentum=0.5, centered=True),
    lambda: tf.train.AdadeltaOptimizer(1.0),
], ids=["centered_rms_prop", "adadelta"])
def test_centered_rms_prop_and_adadelta_run_the_numpy_chain(update_calls, make):
    tf.reset_default_graph()
    var = tf.Variable(np.linspace(-1, 1, 64))
    step = make().minimize(tf.reduce_sum(var * var))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        before = sess.run(var)
        sess.run(step)
        assert not np.array_equal(sess.run(var), before)
    assert update_calls["parts"] == 0


def test_native_off_leaves_every_update_to_numpy(monkeypatch):
    monkeypatch.setattr(native_updates, "MIN_COMPILED_ELEMENTS", (0,) * 6)
    monkeypatch.setenv("TOWERFLOW_NATIVE", "0")
    var, grad = np.ones(8, np.float32), np.ones(8, np.float32)
    updates = native_updates.CompiledUpdates(WorkerPool(2))
    assert updates.gradient_descent(var, grad, np.float32(0.5)) is False
    np.testing.assert_array_equal(var, np.ones(8, np.float32))


def test_a_bad_kind_or_part_is_refused_by_name():
    var = np.ones(4, np.float32)
    with pytest.raises(ValueError, match=r"kind 9 \(expected 0\.\.5"):
        native.apply_update(9, (0.1,) * 5, var, None, None, var.copy(), 0, 1)
    with pytest.raises(ValueError, match="part 2 of 2"):
        native.apply_update(native_updates.GRADIENT_DESCENT, (0.1,) * 5, var, None, None,
                            var.copy(), 2, 2)
