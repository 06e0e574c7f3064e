"""The GPU batch-norm fusion chains (towerflow/fusion.py) and the TF32
switch (towerflow/backends/cupy_tf32.py), without a GPU.

A reference GPU stands in for CuPy: a NumPy runtime whose kernel table is
the GPU's (cupy_conv.gpu_kernels over kernels.build_kernels), its CUDA
kernels run by their NumPy references. Whole training steps of the cifar10
recipe's network on it match /cpu:0, with fusion on and off."""

import os
import sys

import numpy as np
import pytest
from conftest import fake_gpu
from test_gpu_backend import real_gpu  # noqa: F401  (the fixture)
from test_parallel import relative_difference

import towerflow as tf
from towerflow import backends, fusion, plan
from towerflow.backends import cupy_conv, cupy_tf32, kernels, numpy_backend
from towerflow.device import physical
from towerflow.graph import registry

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))

REFERENCE_GPU_KERNELS = kernels.build_kernels(np)
REFERENCE_GPU_KERNELS.update(cupy_conv.gpu_kernels(np, REFERENCE_GPU_KERNELS,
                                                   cupy_conv.ReferenceLauncher()))


class ReferenceGpu(numpy_backend.NumpyDevice):
    """A 'GPU' with the GPU's kernel table, its CUDA kernels run by their references."""

    kernels = REFERENCE_GPU_KERNELS


@pytest.fixture
def reference_gpu():
    physical.set_gpu_probe(lambda: ([fake_gpu(0)], None))
    registry.register_kernels("GPU", REFERENCE_GPU_KERNELS)
    backends.register_backend("GPU", ReferenceGpu)
    yield
    registry.unregister_kernels("GPU")
    backends.unregister_backend("GPU")


def cifar_units(kernel_names, batch=4):
    from gpu_traffic import step_units
    return step_units(batch, kernel_names)


def unit_types(units):
    return [unit.type for unit in units]


def test_gpu_plans_fuse_batch_norm_with_its_relu_and_their_gradients():
    types = unit_types(cifar_units(set(REFERENCE_GPU_KERNELS)))
    assert types.count("_FusedBatchNormRelu") == 7
    assert "FusedBatchNorm" not in types and "Relu" not in types
    # three ReluGrads join their MaxPoolGrad (the pooled gradient is smaller)
    assert types.count("_ReluGradBatchNormGrad") == 4 and types.count("_MaxPoolGradRelu") == 3
    assert types.count("FusedBatchNormGrad") == 3 and "ReluGrad" not in types


def test_cpu_plans_fuse_the_batch_norm_chains_and_the_pools_after_them():
    """The NumPy backend has the chains' kernels too (native_batch_norm.py),
    takes each block's MaxPool into its batch norm + ReLU, and each pool's
    masked gradient into the batch-norm gradient after it (batch_norm_pool.py)."""
    names = set(numpy_backend.KERNELS)
    assert set(cupy_conv.FUSED_KERNELS) <= names
    types = unit_types(cifar_units(names))
    assert types.count("_FusedBatchNormReluPool") == 3 and types.count("_FusedBatchNormRelu") == 4
    assert not {"FusedBatchNorm", "Relu", "MaxPool", "ReluGrad"} & set(types)
    assert types.count("_ReluGradBatchNormGrad") == 4
    assert types.count("_MaxPoolGradReluBatchNormGrad") == 3
    assert not {"_MaxPoolGradRelu", "FusedBatchNormGrad", "MaxPoolGrad"} & set(types)


def test_the_fused_batch_norm_runs_where_the_batch_norm_ran():
    """The moving-average updates, which read the statistics, come between
    the FusedBatchNorm and its Relu in the graph's order: the fused op
    stands where the FusedBatchNorm stood, before them."""
    from gpu_traffic import gpu_units, step_ops
    ops, targets, feeds = step_ops(4)
    units = gpu_units(ops, targets, feeds, set(REFERENCE_GPU_KERNELS))
    fused = next(unit for unit in units if unit.type == "_FusedBatchNormRelu")
    batch_norm, relu = fused.members
    updates = [op for op in ops if set(op.inputs) & set(batch_norm.outputs[1:3])]
    assert all(ops.index(batch_norm) < ops.index(op) < ops.index(relu) for op in updates)
    assert all(units.index(fused) < units.index(op) for op in updates)


def batch_norm_relu_units(relu_waits_for_statistics):
    scale, offset = tf.ones([3]), tf.zeros([3])
    x = tf.placeholder(tf.float32, [4, 3])
    y, mean, _ = tf.nn.fused_batch_norm(x, scale, offset, is_training=True)
    later = tf.identity(mean * 2.0)
    waits = [later] if relu_waits_for_statistics else []
    with tf.control_dependencies(waits):
        relu = tf.nn.relu(y)
    targets = [relu, later]
    return unit_types(fusion.fuse(plan._needed_ops(targets, [x]), targets, [x],
                                  lambda op: "GPU",
                                  lambda device: set(REFERENCE_GPU_KERNELS)))


def test_a_relu_that_waits_for_a_later_op_is_not_fused_early():
    assert "_FusedBatchNormRelu" in batch_norm_relu_units(False)
    types = batch_norm_relu_units(True)
    assert "_FusedBatchNormRelu" not in types and "Relu" in types


def train_cifar(device, batch, steps=2, seed=0):
    """(losses, every variable) after ``steps`` steps of the recipe's network."""
    from gpu_peers import build_training_step
    graph, x, labels, loss, train_op, _, init = build_training_step(batch, "float32", device)
    rng = np.random.default_rng(seed)
    with graph.as_default():
        sess = tf.Session(graph=graph)
        sess.run(init)
        losses = [sess.run([train_op, loss], {
            x: rng.standard_normal((batch, 32, 32, 3)).astype(np.float32),
            labels: rng.integers(0, 10, batch)})[1] for _ in range(steps)]
        return np.array(losses), sess.run(tf.global_variables()), sess


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("batch", [1, 3])
def test_training_on_the_gpu_kernels_matches_the_cpu(reference_gpu, monkeypatch, batch, fused):
    """Same parameters up to float32 reordering (the budget test_parallel
    allows towers), batch-norm statistics included: a batch of 1 gives the
    last layer 16 rows per channel, a batch of 3 ends the first layers'
    partial sums inside a block. The CPU runs im2col GEMMs too: its Winograd
    path (on where the compiled kernels are built) rounds differently."""
    monkeypatch.setenv("TOWERFLOW_FUSION", "1" if fused else "0")
    monkeypatch.setenv("TOWERFLOW_WINOGRAD", "0")
    cpu_losses, cpu_values, _ = train_cifar("/cpu:0", batch)
    gpu_losses, gpu_values, sess = train_cifar("/gpu:0", batch)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-5)
    assert relative_difference(gpu_values, cpu_values) <= 1e-5
    types = {unit.type for plan_, _ in sess._plans.values() for unit in plan_.units}
    assert ("_FusedBatchNormRelu" in types) == fused


def train_cifar_from(device, batch, initial=None, steps=2, seed=0):
    """train_cifar from ``initial`` variable values (None: its own initializers;
    a GPU's random draws differ from NumPy's); also returns the start values."""
    from gpu_peers import build_training_step
    graph, x, labels, loss, train_op, _, init = build_training_step(batch, "float32", device)
    rng = np.random.default_rng(seed)
    with graph.as_default():
        sess = tf.Session(graph=graph)
        sess.run(init)
        variables = tf.global_variables()
        if initial is None:
            initial = sess.run(variables)
        else:
            sess.run([tf.assign(var, value) for var, value in zip(variables, initial)])
        losses = [sess.run([train_op, loss], {
            x: rng.standard_normal((batch, 32, 32, 3)).astype(np.float32),
            labels: rng.integers(0, 10, batch)})[1] for _ in range(steps)]
        return np.array(losses), sess.run(variables), sess, initial


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_training_on_the_gpu_backend_matches_the_cpu(gpu_backend, monkeypatch, fused):
    """The real GPU backend (on the simulated GPU without one: its RawKernels
    run by their references, its ElementwiseKernels by their C code) trains
    the recipe's network from the same start as the CPU does, up to float32
    reordering."""
    monkeypatch.setenv("TOWERFLOW_FUSION", "1" if fused else "0")
    monkeypatch.setenv("TOWERFLOW_WINOGRAD", "0")
    cpu_losses, cpu_values, _, start = train_cifar_from("/cpu:0", 3)
    gpu_losses, gpu_values, sess, _ = train_cifar_from("/gpu:0", 3, start)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-5)
    assert relative_difference(gpu_values, cpu_values) <= 1e-5
    plans = [getattr(plan_, "_plan", plan_) for plan_, _ in sess._plans.values()]
    types = {unit.type for plan_ in plans for unit in plan_.units}
    assert ("_FusedBatchNormRelu" in types) == fused


# -- TF32 --------------------------------------------------------------------------------


class FakeLinalg:
    COMPUTE_TYPE_DEFAULT, COMPUTE_TYPE_TF32 = 1, 7

    def __init__(self):
        self.calls = []

    def set_compute_type(self, dtype, compute_type):
        self.calls.append((np.dtype(dtype), compute_type))


class FakeDevice:
    def __init__(self, capability):
        self.compute_capability = capability


@pytest.fixture
def no_gpus_seen(monkeypatch):
    monkeypatch.setattr(cupy_tf32, "_capabilities", set())


@pytest.mark.parametrize("switch, capability, expected", [
    (None, "90", "COMPUTE_TYPE_TF32"), ("1", "80", "COMPUTE_TYPE_TF32"),
    ("0", "90", "COMPUTE_TYPE_DEFAULT"), (" 0 ", "90", "COMPUTE_TYPE_DEFAULT"),
    (None, "75", "COMPUTE_TYPE_DEFAULT")])
def test_tf32_follows_the_switch_and_the_gpu(no_gpus_seen, switch, capability, expected):
    environ = {} if switch is None else {"TOWERFLOW_TF32": switch}
    linalg = FakeLinalg()
    assert cupy_tf32.configure(FakeDevice(capability), linalg, environ) == expected
    assert linalg.calls == [(np.dtype(np.float32), getattr(FakeLinalg, expected))]


def test_one_gpu_without_tf32_keeps_every_gpu_in_float32(no_gpus_seen):
    linalg = FakeLinalg()
    cupy_tf32.configure(FakeDevice("75"), linalg, {})
    assert cupy_tf32.configure(FakeDevice("90"), linalg, {}) == "COMPUTE_TYPE_DEFAULT"


def test_the_switch_is_read_each_time_a_gpu_is_opened(no_gpus_seen):
    linalg = FakeLinalg()
    assert cupy_tf32.configure(FakeDevice("90"), linalg, {}) == "COMPUTE_TYPE_TF32"
    assert cupy_tf32.configure(FakeDevice("90"), linalg, {"TOWERFLOW_TF32": "0"}) == \
        "COMPUTE_TYPE_DEFAULT"


def test_cupy_has_the_compute_types_towerflow_sets():
    pytest.importorskip("cupy")
    from cupy._core import _routines_linalg as linalg
    assert callable(linalg.set_compute_type) and callable(linalg.get_compute_type)
    assert linalg.compute_type_to_str(linalg.COMPUTE_TYPE_TF32) == "COMPUTE_TYPE_TF32"
    assert linalg.compute_type_to_str(linalg.COMPUTE_TYPE_DEFAULT) == "COMPUTE_TYPE_DEFAULT"


def test_the_test_suite_compares_gpus_with_numpy_in_full_float32():
    assert os.environ.get("TOWERFLOW_TF32") == "0"      # set by conftest.py


@pytest.mark.gpu
def test_opening_a_gpu_sets_cupys_float32_compute_type(real_gpu, monkeypatch):  # noqa: F811
    import cupy
    from cupy._core import _routines_linalg as linalg

    from towerflow.device import runtime
    monkeypatch.setattr(cupy_tf32, "_capabilities", set())
    gpu = next(d for d in runtime.logical_devices() if d.device_type == "GPU")
    capability = int(cupy.cuda.Device(gpu.gpu.index).compute_capability)
    for switch, expected in (("1", capability >= 80), ("0", False)):
        monkeypatch.setenv("TOWERFLOW_TF32", switch)
        cupy_tf32._capabilities.clear()
        real_gpu.CupyDevice(gpu)
        assert (linalg.get_compute_type(np.float32) == linalg.COMPUTE_TYPE_TF32) == expected

