"""The float64 differential suite: every fast path (towerflow/fast_paths.py)
against the plain path, on whole networks trained a few steps.

Each network trains with all fast paths off (the plain path: NumPy kernels
only, one thread), all on, and all on but one; towers on /cpu:0../cpu:3
train like one device on the same global batch; batch sizes cross every
cache-block and thread-part boundary. In float64 the paths may differ only
by rounding, far below where a ReLU or a max-pool tie could flip, so the
trained parameters agree to ~1e-12; in float32 single steps are compared.
Probes count calls into each fast path, so a switch that silently does
nothing fails too.

Planted faults this suite caught (each reverted): the Winograd output
transform scaling a ragged last tile's last column by 1 + 1e-9, a cache
block losing its last image, a thread part's filter-gradient sum dropped,
the fused conv's bias added in the first block only, one tower's weight
1e-6 off, the GPU's fused batch norm + ReLU offset 1e-9 off, switches that
do nothing (Winograd's, the thread pool's, the cache blocks', CUDA graphs',
the compiled dense MatMuls'), the blocked GEMM dropping a ragged tile's
earlier inner-dimension blocks, its a panels 1e-9 off at one p, a dense
product's thread part one column short, the data ring's last image of a
batch 1e-6 off and its switch doing nothing, the fused pool + batch-norm
gradient testing each cell of a window's row against the row's first tap;
and one real fault: float64 towers weighed by float32 shard fractions,
~1e-8 off one device (fixed in parallel/replication.py).
"""

import collections
import os

import numpy as np
import pytest
from conftest import split_cpu

import towerflow as tf
from towerflow import data as tf_data
from towerflow import fast_paths, training
from towerflow.backends import (
    aligned_memory,
    conv_blocks,
    cpu_threads,
    native,
    native_updates,
)
from towerflow.recipes.cifar10 import RECIPE
from towerflow.recipes.digits import DigitsRecipe

pytestmark = pytest.mark.differential

CLASSES = 10
STEPS = 3

# Tolerances. float64's unit roundoff is u = 1.1e-16. Two paths that add the
# same products in another order (cache blocks, thread parts, GEMM shapes)
# differ by at most ~K*u relative per sum of K terms (K up to 3*3*128 = 1152
# in a convolution here, in practice ~sqrt(K)*u: rounding errors cancel);
# Winograd's transforms (entries up to 8 in B and A) scale that by ~100, as
# its float32 error of a few 1e-6 (winograd.py) is ~50 float32 roundoffs. So
# every convolution is within ~1e-14 relative, and three SGD steps chain a
# few tens of such errors into the updates: ~1e-13, and a few times more
# where a sum cancels (batch norm's gamma gradient). Measured over this file:
# up to 2.6e-13 for a gamma, 7.8e-14 for everything else. A ReLU or max-pool
# flip (a jump of the size of an activation) is far above 1e-12; the planted
# faults of the module docstring showed up at 1e-11 and more.
FLOAT64_RTOL = 1e-12
# The changes are differences of stored values, each rounded once per step: a
# change far smaller than its variable (Adagrad's accumulator: 0.1 plus a sum
# of squared gradients of 3e-6) is only known to STEPS units in the last place
# of the variable's largest value (there: 1.4e-17, 5e-12 of the change).
VALUE_ULPS = STEPS
# float32 (u = 6e-8), one step: the same chain of <= 14 convolutions forward and
# back at Winograd's few 1e-6 each gives a few 1e-5 in a norm of the updates
# (measured: up to 3.2e-5 for cifar10's batch-norm gamma, 9.7e-6 elsewhere).
FLOAT32_RTOL = 1e-4


# -- networks ------------------------------------------------------------------------


def _weight(rng, shape, dtype):
    fan_in = int(np.prod(shape[:-1]))
    return tf.Variable(rng.standard_normal(shape) / np.sqrt(fan_in), dtype=dtype)


def _conv(x, rng, out_channels, size=3, stride=1, padding="SAME", bias=False, relu=False):
    in_channels = x.shape.dims[-1]
    dtype = x.dtype.base_dtype
    w = _weight(rng, [size, size, in_channels, out_channels], dtype)
    y = tf.nn.conv2d(x, w, [1, stride, stride, 1], padding)
    if bias:     # True: tf.nn.bias_add; "plus": conv2d(x, w) + b, TF1 tutorials' way
        b = tf.Variable(rng.standard_normal(out_channels) * 0.1, dtype=dtype)
        y = y + b if bias == "plus" else tf.nn.bias_add(y, b)
    return tf.nn.relu(y) if relu else y


def _dense(x, rng, hidden=None):
    """Logits; with ``hidden``, through a ReLU layer of that many units first (40:
    wide enough for the compiled GEMM, a ragged panel past 32 columns)."""
    dtype = x.dtype.base_dtype
    if hidden:
        x = tf.nn.relu(tf.matmul(x, _weight(rng, [x.shape.dims[-1], hidden], dtype)))
    return tf.matmul(x, _weight(rng, [x.shape.dims[-1], CLASSES], dtype))


def thresholds_stack(x, rng):
    """14x14x3 in: input channels 3, 15 (< F(4x4, 3x3)'s 16 channels), 16, 17,
    24; Winograd outputs 12 (whole tiles) and 6 (a ragged tile), 3 (< a
    tile: im2col); stride 2; SAME and VALID; bias + ReLU (+ a 2x2 max pool:
    the fused chain, its bias added by `+`); a dense ReLU layer of 40 units (the compiled GEMM, its
    rows or columns in thread parts); no batch norm, so towers equal one device.
    5x5 windows: F(2x2, 5x5) on 6x6 (whole tiles; 28 output channels, not whole
    vectors: NumPy's GEMMs) and on 3x3 (a ragged tile; 24 outputs, whole
    float64 vectors: the compiled GEMMs), 24 input channels (>= its 20)."""
    x = _conv(x, rng, 15, bias=True, relu=True)
    x = _conv(x, rng, 16, bias=True, relu=True)
    x = _conv(x, rng, 17, padding="VALID", bias="plus", relu=True)            # 12x12
    x = tf.nn.max_pool(x, [1, 2, 2, 1], [1, 2, 2, 1], "VALID")               # 6x6
    x = _conv(x, rng, 24, bias=True, relu=True)
    x = _conv(x, rng, 28, size=5, bias=True, relu=True)
    x = _conv(x, rng, 24, stride=2, relu=True)                               # 3x3
    x = _conv(x, rng, 24, size=5, bias=True, relu=True)
    x = _conv(x, rng, 24, bias=True)
    return _dense(tf.reduce_mean(x, axis=[1, 2]), rng, hidden=40)


def residual_stack(x, rng):
    """12x12x3 in: a 5x5 stem, batch norm, residual adds around Winograd
    convolutions (12x12 and a ragged 5x5), a stride-2 VALID convolution, a
    3x3 stride-2 SAME max pool (not tiled: the NumPy pool), a 1x1 shortcut, a
    dense ReLU layer 288 -> 40 (the compiled GEMM across two blocks of its inner
    dimension, a ragged panel of columns, both transposed products)."""
    def bn(y):
        return tf.layers.batch_normalization(y, training=True, momentum=0.9)

    x = tf.nn.relu(bn(_conv(x, rng, 16, size=5)))
    y = tf.nn.relu(bn(_conv(x, rng, 16)))
    x = tf.nn.relu(x + bn(_conv(y, rng, 16)))
    x = _conv(x, rng, 32, stride=2, padding="VALID", bias=True, relu=True)   # 5x5
    x = x + _conv(tf.nn.relu(bn(_conv(x, rng, 32))), rng, 32, bias=True)
    x = tf.nn.max_pool(x, [1, 3, 3, 1], [1, 2, 2, 1], "SAME")                # 3x3
    x = tf.nn.relu(x + _conv(x, rng, 32, size=1))
    return _dense(tf.reshape(x, [-1, 3 * 3 * 32]), rng, hidden=40)


def cifar10_network(x, rng):
    """The cifar10 recipe's logits (batch norm, residual adds, global max pool)
    at 20x20: 20, 10, 5 (a ragged Winograd tile) and 2 (im2col) pixels."""
    del rng    # the recipe's layers draw from the graph seed
    return RECIPE.logits(x, training=True)


NETWORKS = {"thresholds": (thresholds_stack, 14), "residual": (residual_stack, 12),
            "cifar10": (cifar10_network, 20)}


# -- training ------------------------------------------------------------------------


def batches(batch, size, dtype, steps=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, size, size, 3)).astype(dtype),
             rng.integers(0, CLASSES, batch)) for _ in range(steps)]


# The optimizers the networks train with: SGD by default; the compiled updates
# (the 'native' fast path) of the others are checked by
# test_optimizers_train_like_the_plain_path.
OPTIMIZERS = {
    "gd": lambda: tf.train.GradientDescentOptimizer(0.1),
    "gd_decay": lambda: tf.train.GradientDescentOptimizer(0.1, weight_decay=0.01),
    "nesterov": lambda: tf.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True,
                                                   weight_decay=5e-4),   # cifar10's
    "momentum": lambda: tf.train.MomentumOptimizer(0.1, 0.9),
    # NOTE: Adam divides by sqrt(v) + epsilon: a gradient that cancels to near 0
    # (absolute error ~1e-16 from summation order) moves its update by up to
    # that error / epsilon; at 1e-8 that was 1.8e-12 of the largest update.
    "adam": lambda: tf.train.AdamOptimizer(0.01, epsilon=1e-3, weight_decay=0.01),
    "rms_prop": lambda: tf.train.RMSPropOptimizer(0.01, momentum=0.5),
    "adagrad": lambda: tf.train.AdagradOptimizer(0.1),
}


def train(network, batch, dtype=np.float64, steps=STEPS, towers=0, device="/cpu:0",
          optimizer="gd"):
    """{variable name: (initial, trained)} after ``steps`` of ``optimizer`` (a
    key of OPTIMIZERS) on ``network`` (one ``device``; or ``towers`` towers on
    /cpu:0..)."""
    build, size = NETWORKS[network]
    tf.reset_default_graph()
    tf.set_random_seed(7)
    images = tf.placeholder(dtype, [None, size, size, 3])
    labels = tf.placeholder(tf.int64, [None])

    def model(inputs):
        x, y = inputs
        logits = build(x, np.random.default_rng(1))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
    optimizer = OPTIMIZERS[optimizer]()
    if towers:
        strategy = tf.parallel.DataParallel([f"/cpu:{i}" for i in range(towers)],
                                            all_reduce="cpu")
        step = strategy.minimize(model, (images, labels), optimizer)
        train_op, variables = step.train_op, step.replicas[0]
    else:
        train_op, variables = one_device_step(model, (images, labels), optimizer, device)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        initial = sess.run(variables)
        for x, y in batches(batch, size, dtype, steps):
            sess.run(train_op, {images: x, labels: y})
        trained = sess.run(variables)
    names = [var.op.name.split("/", 1)[-1] if towers else var.op.name for var in variables]
    return {name: (start, end) for name, start, end in zip(names, initial, trained)}


def one_device_step(model, inputs, optimizer, device):
    """(train op, variables) of ``model`` on ``device`` alone, its batch-norm
    updates run with the step."""
    with tf.device(device):
        loss = model(inputs)
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train_op = optimizer.minimize(loss)
    return train_op, tf.global_variables()


def assert_same_training(result, expected, rtol, norm=False):
    """Each variable's change in training within ``rtol`` of the largest
    change of that variable (the changes, not the values: an error in the
    updates is not hidden by the size of the initial weights), plus VALUE_ULPS
    units in the last place of the variable's largest value; with ``norm``,
    the changes' Euclidean norms instead of their largest entries."""
    assert result.keys() == expected.keys()
    size = np.linalg.norm if norm else lambda array: np.max(np.abs(array))
    for name, (start, end) in expected.items():
        np.testing.assert_array_equal(result[name][0], start, err_msg=name)
        change, other = end - start, result[name][1] - result[name][0]
        scale = size(change)
        assert scale > 0, f"{name} did not train"
        last_places = VALUE_ULPS * np.spacing(np.max(np.abs(end)))
        if norm:
            last_places *= np.sqrt(end.size)
        error = size(other - change)
        assert error <= rtol * scale + last_places, \
            f"{name}: updates differ by {error / scale:.2e} (relative), more than " \
            f"{rtol:.0e} and {VALUE_ULPS} units in the last place of the values"


# -- switches and probes -------------------------------------------------------------


@pytest.fixture
def splits_small_work(monkeypatch):
    """The CPU pool splits even these small networks' work into parts, so
    thread-part boundaries fall inside small batches (as the `pool` fixture)."""
    for name in ("MIN_PARALLEL_ELEMENTS", "MIN_PARALLEL_FLOPS", "MIN_SPLIT_ROWS",
                 "MIN_PART_FLOPS"):
        monkeypatch.setattr(cpu_threads, name, 1)
    monkeypatch.setattr(native_updates, "MIN_PARALLEL_ELEMENTS", 1)
    monkeypatch.setattr(native_updates, "MIN_COMPILED_ELEMENTS", (0,) * 6)
    from towerflow.backends import numpy_backend
    if numpy_backend.CPU_POOL.workers < 2:
        pytest.skip("the CPU pool has one thread (one CPU or TOWERFLOW_CPU_THREADS=1)")


@pytest.fixture
def probes(monkeypatch, splits_small_work):
    """{probe: calls} counted through every probe of each FastPath (probes_of)."""
    if not native.available():
        pytest.skip("the compiled kernels are not built (or TOWERFLOW_NATIVE=0, "
                    "TOWERFLOW_ISA=generic)")
    calls = collections.Counter()
    for path in fast_paths.FAST_PATHS:
        for probe in fast_paths.probes_of(path):
            owner, attribute = fast_paths.probe_target(probe)
            monkeypatch.setattr(owner, attribute,
                                counting_calls(getattr(owner, attribute), probe, calls))
    return calls


def counting_calls(function, probe, calls):
    """``function``, counting each call in ``calls[probe]``."""
    def counted(*args, **kwargs):
        calls[probe] += 1
        return function(*args, **kwargs)
    return counted


CPU_PATHS, GPU_PATHS = fast_paths.on_device("CPU"), fast_paths.on_device("GPU")
ALL = tuple(path.name for path in CPU_PATHS)      # all off: the CPU's plain path
# What each fast path needs on to run at all (Winograd and cache blocks are
# compiled kernels' paths; the C threads run compiled kernels' parts).
NEEDS = {"winograd": {"native"}, "cache_blocks": {"native"},
         "c_threads": {"native", "cpu_threads"}}


def run_switched(probes, off, *args, **kwargs):
    """train(*args) with the fast paths named in ``off`` off (the others on);
    checks through the probes that each ran exactly when it was on."""
    probes.clear()
    off_paths = [path for path in fast_paths.FAST_PATHS if path.name in off]
    on_paths = [path for path in fast_paths.FAST_PATHS if path.name not in off]
    with fast_paths.switched(on_paths, on=True), fast_paths.switched(off_paths, on=False):
        result = train(*args, **kwargs)
    for path in fast_paths.FAST_PATHS:
        if path.name in off or NEEDS.get(path.name, set()) & set(off):
            for probe in fast_paths.probes_of(path):
                assert probes[probe] == 0, f"{path.name} ran {probe} with {off} off"
    return result


# Probes of kernels that decline on this machine: the compiled GEMMs need AVX-512
# or AVX2 with FMA. The aligned allocator is a module of its own, built only with
# NumPy's headers.
DECLINED = (set() if native.VECTOR_GEMM else {"towerflow.backends.parallel_gemm:_split_gemm"}) | \
    (set() if aligned_memory.built() else {"towerflow.backends.aligned_memory:_Aligned.__enter__"})


def assert_ran(probes, off, paths=CPU_PATHS):
    for path in paths:
        if path.name not in off and not NEEDS.get(path.name, set()) & set(off):
            for probe in set(fast_paths.probes_of(path)) - DECLINED:
                assert probes[probe] > 0, f"{path.name} never ran {probe} with " \
                                          f"{path.variable} on"


# -- the suite -----------------------------------------------------------------------


# A batch per network whose thread parts (2 on 2 cores) each span more than one
# cache block.
CROSSING_BATCH = {"thresholds": 29, "residual": 53, "cifar10": 29}


@pytest.mark.parametrize("network", sorted(NETWORKS))
def test_each_fast_path_trains_like_the_plain_path(probes, network):
    batch = CROSSING_BATCH[network]
    plain = run_switched(probes, ALL, network, batch)
    for off in [()] + [(name,) for name in ALL]:
        result = run_switched(probes, off, network, batch)
        assert_ran(probes, off)
        assert_same_training(result, plain, FLOAT64_RTOL)


@pytest.mark.parametrize("network", ["cifar10", "residual"])
def test_gpu_fast_paths_train_like_the_cpu_plain_path(gpu_backend, probes, network):
    """The GPU backend (the simulated GPU without one) in float64, its fast paths
    (fused batch norm + ReLU, CUDA graphs, implicit-GEMM convolutions) on and
    each off, against the CPU's plain path: the GPU kernels meet the same 1e-12."""
    plain = run_switched(probes, ALL, network, 9)
    for off in [()] + [(path.name,) for path in GPU_PATHS]:
        result = run_switched(probes, off, network, 9, device="/gpu:0")
        assert_ran(probes, off, GPU_PATHS)
        assert_same_training(result, plain, FLOAT64_RTOL)


@pytest.mark.parametrize("optimizer", sorted(set(OPTIMIZERS) - {"gd"}))
def test_optimizers_train_like_the_plain_path(probes, optimizer):
    """The compiled updates of the other optimizers (gradient descent's run in
    every test here), their variables split into thread parts."""
    batch = CROSSING_BATCH["thresholds"]
    plain = run_switched(probes, ALL, "thresholds", batch, optimizer=optimizer)
    for off in [(), ("native",), ("cpu_threads",)]:
        result = run_switched(probes, off, "thresholds", batch, optimizer=optimizer)
        assert_ran(probes, off)
        assert_same_training(result, plain, FLOAT64_RTOL)


# Batch sizes that cross every block boundary. A convolution splits its batch
# into min(N, 4) thread parts (2 threads x 2 parts each, see cpu_threads.py:
# the splits_small_work fixture lowers the size thresholds), or one part with
# the thread pool off, as cpu_threads.split(N, parts) does; each part runs in
# cache blocks of p images, p per layer (conv_blocks._images_per_cache_block:
# 1 MiB / bytes of one image's patches, Winograd tiles or gradient tiles): in
# float64 here p is 2, 4, 6, 7, 12, 14, 18, 22, 23, 24, 25, 28, 36, 37, 57 or
# 67. Each p is crossed by a part of more than p images that ends in a ragged
# block (N % p != 0) and, where 2p <= 70, by one of whole blocks only (36 for
# p = 18, F(2x2, 5x5)'s gradient tiles, with the pool off); 1, 2, 3 and 5 give
# fewer images than parts and uneven parts. The list was chosen greedily from
# these rules; test_batch_sizes_cross_every_boundary recomputes p and checks it.
BATCH_SIZES = (1, 2, 3, 5, 36, 44, 46, 48, 50, 56, 70)


@pytest.mark.parametrize("batch", BATCH_SIZES)
@pytest.mark.parametrize("network", sorted(NETWORKS))
def test_batch_sizes_train_like_the_plain_path(probes, network, batch):
    plain = run_switched(probes, ALL, network, batch, steps=2)
    for off in [(), ("cpu_threads",)]:
        assert_same_training(run_switched(probes, off, network, batch, steps=2), plain,
                             FLOAT64_RTOL)


@pytest.mark.skipif(not native.available(), reason="the convolutions run in cache blocks "
                    "on the compiled kernels, which are not running")
def test_batch_sizes_cross_every_boundary(monkeypatch, splits_small_work):
    images_per_block = set()
    original = conv_blocks._images_per_cache_block

    def recorded(bytes_per_image):
        per_block = original(bytes_per_image)
        images_per_block.add(per_block)
        return per_block
    monkeypatch.setattr(conv_blocks, "_images_per_cache_block", recorded)
    with fast_paths.switched(fast_paths.FAST_PATHS, on=True):
        for network in NETWORKS:
            train(network, 1, steps=1)
    assert images_per_block, "no convolution ran in cache blocks"
    for per_block in sorted(images_per_block):
        kinds = {kind for batch in BATCH_SIZES for kind in _blocks_crossed(batch, per_block)}
        wanted = {"ragged", "whole"} if 2 * per_block <= max(BATCH_SIZES) else {"ragged"}
        assert wanted <= kinds, f"no batch size crosses the blocks of {per_block} images " \
                                f"({wanted - kinds}); add one to BATCH_SIZES"


def _blocks_crossed(batch, per_block):
    """How the parts of ``batch`` images (the CPU pool's thread parts, or 1)
    cross blocks of ``per_block`` images: "ragged" (the last block shorter)
    or "whole"."""
    from towerflow.backends import numpy_backend
    pool = numpy_backend.CPU_POOL
    for parts in (min(batch, pool.workers * pool.parts_per_worker), 1):
        for start, stop in cpu_threads.split(batch, parts):
            if stop - start > per_block:
                yield "ragged" if (stop - start) % per_block else "whole"


@pytest.mark.parametrize("towers", [1, 2, 3, 4])
@pytest.mark.parametrize("batch", [3, 7, 29, 70])
def test_towers_train_like_one_device(probes, towers, batch):
    """Towers on /cpu:0.. on a global batch (ragged shards, an empty one at
    batch 3 on 4 towers) equal one device on it. The thresholds stack has no
    batch norm, whose statistics are per tower."""
    split_cpu()
    one_device = run_switched(probes, (), "thresholds", batch)
    result = run_switched(probes, (), "thresholds", batch, towers=towers)
    assert_same_training(result, one_device, FLOAT64_RTOL)


@pytest.mark.parametrize("network", sorted(NETWORKS))
def test_float32_single_steps_match_the_plain_path(probes, monkeypatch, network):
    """One step each at batch 5, all fast paths on, then the thread pool off
    (one part of 5 images: with 128 KiB blocks it crosses a block boundary).
    Small on purpose: in float32 a ReLU or max-pool near tie flips with a
    chance that grows with the activations' count, even in one step."""
    monkeypatch.setattr(conv_blocks, "_CACHE_BLOCK_BYTES", 1 << 17)
    batch, ran = 5, collections.Counter()
    plain = run_switched(probes, ALL, network, batch, dtype=np.float32, steps=1)
    for off in [(), ("cpu_threads",)]:
        result = run_switched(probes, off, network, batch, dtype=np.float32, steps=1)
        ran.update(probes)
        assert_same_training(result, plain, FLOAT32_RTOL, norm=True)
    assert_ran(ran, ())


# -- the input pipeline's fast path ---------------------------------------------------


class AugmentedDigits(DigitsRecipe):
    """The digits recipe with the cifar10 recipe's augmentation (crop with
    padding, flip, normalisation): all that the data ring makes in place."""

    def pipeline_options(self, train):
        mean, std = tf_data.channel_stats(train.images)
        return {"crop_padding": 2, "flip": True, "mean": mean, "std": std}


@pytest.mark.parametrize("towers", [1, 2])
def test_the_data_ring_trains_like_new_arrays(probes, tmp_path, towers):
    """A recipe trained through fit with its batches made in the ring and made
    as new arrays: the same batches, so the same parameters, bit for bit (a
    ragged last batch of the epoch included: 1,438 = 22 * 64 + 30)."""
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
    split_cpu(towers)
    devices = [f"/cpu:{index}" for index in range(towers)]
    trained = {}
    for on in (True, False):
        probes.clear()
        directory = tmp_path / str(on)
        with fast_paths.switched([fast_paths.by_name("data_ring")], on=on):
            summary = training.fit(AugmentedDigits(), devices, batch_size=64, steps=26,
                                   seed=5, checkpoint_dir=str(directory), quiet=True)
        made_in_ring = probes["towerflow.data.batch_ring:BatchRing.make"]
        assert made_in_ring > 0 if on else made_in_ring == 0
        trained[on] = summary["final_loss"], {
            name: tf.train.load_variable(str(directory), name)
            for name, _ in tf.train.list_variables(str(directory))}
    (loss_ring, ring), (loss_new, new) = trained[True], trained[False]
    assert loss_ring == loss_new
    assert ring.keys() == new.keys() and len(ring) > 4
    for name in ring:
        np.testing.assert_array_equal(ring[name], new[name], err_msg=name)


# -- the registry ----------------------------------------------------------------------


def test_switched_sets_each_variable_and_restores_it(monkeypatch):
    from towerflow.backends import numpy_backend
    monkeypatch.setenv("TOWERFLOW_WINOGRAD", "1")
    monkeypatch.delenv("TOWERFLOW_CACHE_BLOCK_BYTES", raising=False)
    workers = numpy_backend.CPU_POOL.workers
    with fast_paths.switched(fast_paths.FAST_PATHS, on=False):
        assert {path.variable: os.environ[path.variable] for path in fast_paths.FAST_PATHS} \
            == {path.variable: path.off for path in fast_paths.FAST_PATHS}
        assert numpy_backend.CPU_POOL.active_workers == 1
    assert os.environ["TOWERFLOW_WINOGRAD"] == "1"
    assert "TOWERFLOW_CACHE_BLOCK_BYTES" not in os.environ
    assert numpy_backend.CPU_POOL.active_workers == workers


def test_an_unknown_fast_path_is_refused_with_the_names():
    with pytest.raises(ValueError, match=r"no fast path named 'wino'.*'winograd'"):
        fast_paths.by_name("wino")


def test_a_cache_block_size_must_be_a_number_of_bytes(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_CACHE_BLOCK_BYTES", "1MB")
    with pytest.raises(ValueError, match=r"TOWERFLOW_CACHE_BLOCK_BYTES must be a number "
                                         r"of bytes >= 0 .*got '1MB'"):
        conv_blocks._images_per_cache_block(1000)


def test_cache_block_bytes_set_the_images_per_block(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_CACHE_BLOCK_BYTES", str(10_000))
    assert conv_blocks._images_per_cache_block(1000) == 10
    assert conv_blocks._images_per_cache_block(20_000) == 1
    monkeypatch.setenv("TOWERFLOW_CACHE_BLOCK_BYTES", "0")     # no blocks: all at once
    assert conv_blocks._images_per_cache_block(1000) >= 1 << 40


def test_cpu_threads_variable_sizes_the_pool(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_CPU_THREADS", "1")       # the switch's "off"
    assert cpu_threads.cpu_pool().workers == 1
    monkeypatch.setenv("TOWERFLOW_CPU_THREADS", "3")
    assert cpu_threads.cpu_pool().workers == 3
