"""The CuPy backend (towerflow/backends/cupy_backend.py).

Without CuPy these skip; with CuPy but no GPU (CI) only the kernel-table and
loading tests run; the rest need a real GPU and are the checklist of a GPU
run (tests skipped here say why)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import towerflow as tf
from towerflow import backends
from towerflow.device import physical, runtime
from towerflow.graph import registry
from test_ops import placement
from test_seed_programs import P1_RESULT, P4_RESULT, VALUES, build_p1


def cupy_backend():
    pytest.importorskip("cupy", reason="the GPU backend needs CuPy "
                                       "(pip install 'towerflow[cuda12]')")
    from towerflow.backends import cupy_backend as module
    return module


@pytest.fixture
def real_gpu(gpu_backend):
    """The CuPy backend on the real GPU, or on the simulated one without it."""
    return gpu_backend


def test_every_numpy_kernel_has_a_cupy_kernel():
    from towerflow.backends import numpy_backend
    module = cupy_backend()
    from towerflow.backends.dataset_kernels import DATASET_HOST_KERNELS
    from towerflow.backends.lookup_kernels import LOOKUP_HOST_KERNELS
    from towerflow.backends.queue_kernels import HOST_ONLY_KERNELS
    # MPI moves host arrays; tf.print writes to a Python stream (CPU only, as TF's);
    # summaries are built on the host, as in TensorFlow; tf.Print and tf.py_func
    # run Python on the host (test_debugging_ops.py)
    host_only = {"MpiAllReduce", "MpiAllReduceStart", "MpiAllReduceWait", "MpiBroadcast",
                 "MpiAllGather", "PrintV2", "Print", "PyFunc",
                 "PyFuncStateless", "EagerPyFunc",
                 "ScalarSummary", "HistogramSummary", "ImageSummary", "TensorSummaryV2",
                 "MergeSummary"}
    host_only |= HOST_ONLY_KERNELS                   # queues, readers, strings: test_queues.py
    host_only |= DATASET_HOST_KERNELS                # tf.data iterators: test_dataset.py
    host_only |= LOOKUP_HOST_KERNELS                 # tf.lookup tables: test_graph_names.py
    # a CPU-only fused chain (its gain is the CPU's cache): GPU plans keep
    # _MaxPoolGradRelu and FusedBatchNormGrad apart (test_gpu_fusion.py)
    host_only |= {"_MaxPoolGradReluBatchNormGrad"}
    # the candidate samplers run on the CPU, as TF's (test_sparse_updates.py)
    host_only |= {"CandidateSampler", "ComputeAccidentalHits"}
    missing = sorted(set(numpy_backend.KERNELS) - set(module.KERNELS) - host_only)
    assert missing == [], f"kernels without a CuPy version: {missing}"


def test_fake_gpus_do_not_load_the_cupy_backend(no_gpu):
    fake_gpus_do_not_load_the_cupy_backend()


def fake_gpus_do_not_load_the_cupy_backend():
    # A test's GPU probe: the placer must not import CuPy kernels for it.
    from conftest import fake_gpu, gpu_registration_kept
    physical.set_gpu_probe(lambda: ([fake_gpu(0)], None))
    assert not physical.gpus_come_from_cupy()
    with gpu_registration_kept():
        registry.unregister_kernels("GPU")
        backends.unregister_backend("GPU")
        with tf.device("/gpu:0"):
            x = tf.constant(1.0) + 1.0
        with pytest.raises(tf.errors.InvalidArgumentError, match="GPU"):
            tf.Session().run(x)
        assert not registry.has_kernel("GPU", "AddV2")
        assert not registry.has_kernel("GPU", "Add")
    physical.set_gpu_probe(None)
    assert physical.gpus_come_from_cupy()


# -- on a GPU -------------------------------------------------------------------------


def test_ops_on_gpu_match_numpy(real_gpu, rng):
    x_value = rng.standard_normal((8, 5, 5, 3)).astype(np.float32)
    w_value = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)

    def model():
        x = tf.constant(x_value)
        y = tf.nn.relu(tf.nn.conv2d(x, tf.constant(w_value), [1, 1, 1, 1], "SAME"))
        y = tf.nn.max_pool(y, [1, 2, 2, 1], [1, 2, 2, 1], "SAME")
        return tf.reduce_sum(tf.nn.softmax(tf.reshape(y, [8, -1])), axis=1)
    with tf.device("/cpu:0"):
        on_cpu = model()
    with tf.device("/gpu:0"):
        on_gpu = model()
    sess = tf.Session()
    cpu_value, gpu_value = sess.run([on_cpu, on_gpu])
    assert isinstance(gpu_value, np.ndarray)
    np.testing.assert_allclose(gpu_value, cpu_value, rtol=1e-5)


def test_a_logical_gpu_enforces_its_memory_limit(real_gpu):
    gpu = tf.config.list_physical_devices("GPU")[0]
    tf.config.set_logical_device_configuration(
        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=64)] * 2)
    with tf.device("/gpu:1"):
        big = tf.zeros([64, 1024, 1024])        # 256 MiB > 64 MiB
    with pytest.raises(tf.errors.ResourceExhaustedError, match=r"GPU:1.*64 MiB"):
        tf.Session().run(big)


def test_arrays_stay_on_their_physical_gpu(real_gpu):
    import cupy
    gpu = next(d for d in runtime.logical_devices() if d.device_type == "GPU")
    device = backends.device_runtime(gpu)
    value = device.to_device(np.arange(6, dtype=np.float32))
    assert isinstance(value, cupy.ndarray) and value.device.id == gpu.gpu.index
    np.testing.assert_array_equal(device.to_host(value), np.arange(6, dtype=np.float32))


def test_cuda_visible_devices_is_respected_in_a_subprocess(real_gpu):
    program = ("import towerflow as tf; "
               "print(len(tf.config.list_physical_devices('GPU')))")
    hidden = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
                            timeout=120)
    assert hidden.returncode == 0, hidden.stderr
    assert hidden.stdout.strip() == "0"


def test_the_cupy_backend_reduces_through_cub():
    cupy_backend()
    from cupy._core import _accelerator
    assert _accelerator.ACCELERATOR_CUB in _accelerator.get_reduction_accelerators()
    assert _accelerator.ACCELERATOR_CUB in _accelerator.get_routine_accelerators()


def test_nccl_members_have_a_gpu_kernel():
    assert "NcclAllReduce" in cupy_backend().KERNELS


def split_gpu(count, memory_limit=1024):
    gpu = tf.config.list_physical_devices("GPU")[0]
    tf.config.set_logical_device_configuration(
        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit)] * count)


def captured_plans(sess):
    from towerflow import plan_capture
    return [plan for plan, _ in sess._plans.values()
            if isinstance(plan, plan_capture.CapturingPlan) and plan.captured]


@pytest.mark.parametrize("cuda_graphs", [False, True], ids=["op_by_op", "cuda_graphs"])
def test_towers_on_four_logical_gpus_match_one_gpu(real_gpu, cuda_graphs):
    from test_parallel import relative_difference, train
    split_gpu(4)
    config = tf.ConfigProto(cuda_graphs=cuda_graphs)
    reference_losses, reference = train(0, 12, device_kind="gpu", config=config)
    losses, params = train(4, 12, all_reduce="local", device_kind="gpu", config=config)
    assert relative_difference(params, reference) <= 1e-5
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-5)


def test_a_single_rank_nccl_communicator_matches_one_gpu(real_gpu):
    from test_parallel import relative_difference, train
    reference_losses, reference = train(0, 12, device_kind="gpu")
    losses, params = train(1, 12, all_reduce="nccl", device_kind="gpu")
    assert relative_difference(params, reference) <= 1e-6
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-6)


def small_cnn_losses(config, steps=6, seed=0):
    tf.reset_default_graph()
    rng = np.random.default_rng(seed)
    data = [(rng.standard_normal((16, 8, 8, 3)).astype(np.float32),
             rng.integers(0, 10, 16)) for _ in range(steps)]
    with tf.device("/gpu:0"):
        x = tf.placeholder(tf.float32, [16, 8, 8, 3])
        labels = tf.placeholder(tf.int64, [16])
        init = tf.glorot_uniform_initializer
        h = tf.layers.conv2d(x, 8, 3, padding="same", activation=tf.nn.relu,
                             kernel_initializer=init(seed=1))
        h = tf.layers.max_pooling2d(h, 2, 2)
        logits = tf.layers.dense(tf.reshape(h, [16, -1]), 10, kernel_initializer=init(seed=2))
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    sess = tf.Session(config=config)
    sess.run(tf.global_variables_initializer())
    losses = [sess.run([loss, train_op], {x: a, labels: b})[0] for a, b in data]
    return np.array(losses), sess


def test_a_captured_cnn_step_matches_op_by_op(real_gpu, capsys):
    captured, sess = small_cnn_losses(tf.ConfigProto(cuda_graphs=True))
    assert "CUDA graphs: not capturing" not in capsys.readouterr().err
    assert len(captured_plans(sess)) == 1
    plain, _ = small_cnn_losses(tf.ConfigProto(cuda_graphs=False))
    np.testing.assert_allclose(captured, plain, rtol=1e-5)
    assert len(set(captured.tolist())) == len(captured)      # each replay saw its batch


def test_dropout_draws_a_new_mask_in_every_replay(real_gpu):
    with tf.device("/gpu:0"):
        y = tf.nn.dropout(tf.ones([64, 64]), rate=0.5, seed=1)
    sess = tf.Session()
    masks = [sess.run(y) != 0 for _ in range(4)]
    assert len(captured_plans(sess)) == 1
    assert all(not np.array_equal(masks[0], mask) for mask in masks[1:])


def test_the_cifar10_recipes_step_is_captured_whole_and_matches_op_by_op(real_gpu, capsys):
    """Towers on two logical GPUs, all-reduce, update, schedule and fed batch-norm
    flag: one CUDA graph, no fallback, the same losses as running op by op."""
    from test_plan_capture import captured_step_plan, run_cifar10_recipe
    sess, captured, _ = run_cifar10_recipe(
        lambda: tf.Session(config=tf.ConfigProto(cuda_graphs=True)))
    assert "CUDA graphs: not capturing" not in capsys.readouterr().err
    plan = captured_step_plan(sess)
    assert plan.captured == 1
    runtime.reset()
    _, plain, _ = run_cifar10_recipe(
        lambda: tf.Session(config=tf.ConfigProto(cuda_graphs=False)))
    np.testing.assert_array_equal(captured, plain)      # the same kernels, in order
    assert len(set(captured.tolist())) == len(captured)      # each replay saw its batch


def test_a_scheduled_loss_scaled_step_with_towers_is_captured_whole(real_gpu, capsys):
    """Loss scaling's gate, a staircase schedule, a fed dropout rate and two
    towers (the second's shard weight selected on the device): one graph; a
    step with an infinite input is skipped in the replay as op by op."""
    from test_parallel import FEATURES, batches
    split_gpu(2)
    fed = batches(8, steps=5)
    fed[2][0][0, 0] = np.inf                                 # a step the gate skips

    def losses(config):
        tf.reset_default_graph()
        x = tf.placeholder(tf.float32, [None, FEATURES])
        labels = tf.placeholder(tf.int64, [None])
        with tf.device("/gpu:0"):
            step = tf.train.get_or_create_global_step()
            rate = tf.train.exponential_decay(0.1, step, 2, 0.5, staircase=True)
            drop = tf.placeholder(tf.float32, [])
        optimizer = tf.mixed_precision.LossScaleOptimizer(
            tf.train.MomentumOptimizer(rate, 0.9))
        parallel = tf.parallel.DataParallel(["/gpu:0", "/gpu:1"], all_reduce="local")
        train = parallel.minimize(lambda inputs: dropout_mlp(inputs, drop), (x, labels),
                                  optimizer, global_step=step)
        sess = tf.Session(config=config)
        sess.run(tf.global_variables_initializer())
        got = [sess.run([train.train_op, train.loss], {x: a, labels: b, drop: 0.25})[1]
               for a, b in fed]
        return np.array(got), sess.run(train.variables), sess
    replayed, replayed_values, sess = losses(tf.ConfigProto(cuda_graphs=True))
    assert "CUDA graphs: not capturing" not in capsys.readouterr().err
    assert len(captured_plans(sess)) == 1 and not np.isfinite(replayed[2])
    runtime.reset()
    split_gpu(2)
    plain, plain_values, _ = losses(tf.ConfigProto(cuda_graphs=False))
    np.testing.assert_array_equal(replayed, plain)
    for got, expected in zip(replayed_values, plain_values):
        np.testing.assert_array_equal(got, expected)


def dropout_mlp(inputs, drop_rate):
    x, labels = inputs
    init = tf.glorot_uniform_initializer
    hidden = tf.layers.dense(x, 8, activation=tf.nn.relu, kernel_initializer=init(seed=1))
    hidden = tf.nn.dropout(hidden, rate=drop_rate, seed=3)
    logits = tf.layers.dense(hidden, 3, kernel_initializer=init(seed=2))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))


def test_a_fed_dropout_rate_is_captured_without_a_host_read(real_gpu, capsys):
    with tf.device("/gpu:0"):
        rate = tf.placeholder(tf.float32, [])
        y = tf.reduce_sum(tf.nn.dropout(tf.ones([1000]), rate=rate, seed=1))
    sess = tf.Session()
    sums = [sess.run(y, {rate: 0.0}) for _ in range(3)]
    assert sums == [1000.0] * 3
    assert "CUDA graphs: not capturing" not in capsys.readouterr().err
    assert len(captured_plans(sess)) == 1


def test_a_step_that_reads_on_the_host_falls_back_and_says_so(real_gpu, capsys, monkeypatch):
    build = real_gpu.build_gpu_kernels

    def with_a_host_read():
        table = build()
        negative = table["Neg"]

        def make(ctx):
            kernel = negative(ctx)
            return lambda x: kernel(x) if bool((abs(x) >= 0).all()) else x   # reads the host
        return {**table, "Neg": make}
    monkeypatch.setattr(real_gpu, "build_gpu_kernels", with_a_host_read)
    with tf.device("/gpu:0"):
        x = tf.placeholder(tf.float32, [4])
        y = tf.reduce_sum(-x)
    sess = tf.Session()
    sums = [sess.run(y, {x: np.ones(4, np.float32)}) for _ in range(3)]
    assert sums == [-4.0] * 3
    assert "capture failed" in capsys.readouterr().err
    assert captured_plans(sess) == []


# -- fused elementwise kernels -----------------------------------------------------------


def nvrtc_or_skip():
    cupy_backend()
    from cupy_backends.cuda.libs import nvrtc
    try:
        nvrtc.getVersion()
    except Exception as err:
        pytest.skip(f"NVRTC is not installed: {err}")
    return nvrtc


def spec_as_cuda(spec, ctype):
    """The kernel's code in a function of its own: every parameter a local of
    ``ctype`` (bools stay bool), T typedef'd to ``ctype``."""
    declarations = []
    for param in (spec.in_params + ", " + spec.out_params).split(","):
        kind, name = param.split()
        declarations.append(f"{'bool' if kind == 'bool' else ctype} {name} = 1;")
    last = spec.out_params.split(",")[-1].split()[1]
    return (f"typedef {ctype} T;\n"
            f'extern "C" __global__ void {spec.name}({ctype}* sink) {{\n'
            + "\n".join(declarations) + "\n" + spec.operation + f"\nsink[0] = {last};\n}}\n")


@pytest.mark.parametrize("ctype", ["float", "double"])
@pytest.mark.parametrize("name", ["MOMENTUM_UPDATE", "ADAM_UPDATE"])
def test_fused_kernels_compile_with_nvrtc(name, ctype):
    nvrtc = nvrtc_or_skip()
    spec = getattr(cupy_backend(), name)
    program = nvrtc.createProgram(spec_as_cuda(spec, ctype), f"{spec.name}.cu", (), ())
    try:
        nvrtc.compileProgram(program, ["-arch=compute_80"])
    except nvrtc.NVRTCError:
        pytest.fail(nvrtc.getProgramLog(program))
    assert spec.name.encode() in nvrtc.getPTX(program)


def test_a_broken_kernel_fails_the_compile_check():
    nvrtc = nvrtc_or_skip()
    module = cupy_backend()
    broken = module.ElementwiseSpec("T grad", "T var", "var = var - undefined_name;", "broken")
    program = nvrtc.createProgram(spec_as_cuda(broken, "float"), "broken.cu", (), ())
    with pytest.raises(nvrtc.NVRTCError):
        nvrtc.compileProgram(program, ["-arch=compute_80"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("optimizer", ["momentum", "nesterov", "adam"])
def test_fused_updates_match_the_ufunc_chain(real_gpu, optimizer, dtype, rng):
    """Three steps of each optimizer on /gpu:0 (fused kernels) against the
    NumPy kernels on /cpu:0."""
    make = {"momentum": lambda: tf.train.MomentumOptimizer(0.1, 0.9),
            "nesterov": lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
            "adam": lambda: tf.train.AdamOptimizer(0.01)}[optimizer]
    start = rng.standard_normal((33, 7)).astype(dtype)
    grads = [rng.standard_normal((33, 7)).astype(dtype) for _ in range(3)]
    results = []
    for device in ("/cpu:0", "/gpu:0"):
        tf.reset_default_graph()
        with tf.device(device):
            var = tf.Variable(start)
            grad = tf.placeholder(tf.as_dtype(dtype), start.shape)
            step = make().apply_gradients([(grad, var)])
        sess = tf.Session(config=tf.ConfigProto(cuda_graphs=False))
        sess.run(tf.global_variables_initializer())
        for value in grads:
            sess.run(step, {grad: value})
        results.append(sess.run(var))
    tolerance = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(results[1], results[0], rtol=tolerance, atol=tolerance)


# -- SEED_PROGRAMS.md on a real GPU -------------------------------------------------------

def test_p1_ops_prefer_the_gpu_and_the_mapping_names_it(real_gpu, capsys):
    c = build_p1()
    value = tf.Session(config=tf.ConfigProto(log_device_placement=True)).run(c)
    np.testing.assert_array_equal(value, P1_RESULT)
    log = capsys.readouterr().err
    assert "Device mapping:" in log and "/job:localhost/replica:0/task:0/device:GPU:0" in log
    assert placement(log)["MatMul"].endswith("device:GPU:0")


def test_p2_pinned_inputs_on_the_cpu_and_matmul_on_the_gpu(real_gpu, capsys):
    with tf.device("/cpu:0"):
        a = tf.constant(VALUES, shape=[2, 3], name="a")
        b = tf.constant(VALUES, shape=[3, 2], name="b")
    c = tf.matmul(a, b)
    value = tf.Session(config=tf.ConfigProto(log_device_placement=True)).run(c)
    np.testing.assert_array_equal(value, P1_RESULT)
    placed = placement(capsys.readouterr().err)
    assert placed["a"].endswith("CPU:0") and placed["MatMul"].endswith("GPU:0")


def test_p3_a_missing_gpu_is_refused_or_softly_placed_on_gpu0(real_gpu, capsys):
    with tf.device("/gpu:7"):
        c = build_p1()
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="Could not satisfy explicit device specification"):
        tf.Session().run(c)
    soft = tf.Session(config=tf.ConfigProto(log_device_placement=True,
                                            allow_soft_placement=True))
    np.testing.assert_array_equal(soft.run(c), P1_RESULT)
    assert placement(capsys.readouterr().err)["MatMul"].endswith("GPU:0")


def test_p4_towers_on_logical_gpus_summed_on_the_cpu(real_gpu, capsys):
    split_gpu(4)
    towers = []
    for device in ["/gpu:2", "/gpu:3"]:
        with tf.device(device):
            towers.append(build_p1())
    with tf.device("/cpu:0"):
        total = tf.add_n(towers)
    value = tf.Session(config=tf.ConfigProto(log_device_placement=True)).run(total)
    np.testing.assert_array_equal(value, P4_RESULT)
    placed = placement(capsys.readouterr().err)
    assert placed["AddN"].endswith("CPU:0")
    assert sorted(device[-5:] for name, device in placed.items()
                  if name.startswith("MatMul")) == ["GPU:2", "GPU:3"]


def test_p7_four_logical_gpus_each_capped_at_their_limit(real_gpu):
    assert tf.test.gpu_device_name() == "/device:GPU:0"
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_visible_devices(gpus[0], "GPU")
    tf.config.experimental.set_virtual_device_configuration(
        gpus[0], [tf.config.experimental.VirtualDeviceConfiguration(memory_limit=1024)] * 4)
    assert len(tf.config.list_logical_devices("GPU")) == 4
    with tf.device("/gpu:3"):
        fits = tf.reduce_sum(tf.ones([64, 1024, 1024]))       # 256 MiB
        too_big = tf.reduce_sum(tf.ones([320, 1024, 1024]))   # 1280 MiB
    sess = tf.Session()
    assert sess.run(fits) == 64 * 1024 * 1024
    with pytest.raises(tf.errors.ResourceExhaustedError, match=r"GPU:3.*1024 MiB"):
        sess.run(too_big)
