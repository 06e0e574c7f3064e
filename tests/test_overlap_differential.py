"""The differential suite of the all-reduce overlapping the backward pass
(fast path 'overlap', TOWERFLOW_OVERLAP_ALLREDUCE; towerflow/fast_paths.py):
the cifar10 recipe's network, trained in float64 with synchronized batch
norm (so towers train like one device on the global batch), with the switch
on and off: bit for bit the same (the same sums in the same order), and
within FLOAT64_RTOL of one device (the plain path). Between 2 MPI ranks (1
and 2 CPU towers each), between 2 and 3 simulated GPUs of one process
(NCCL), and between 2 ranks of one simulated GPU each (NCCL's world); batch
sizes with ragged shards and an empty one. The registry's probes show the
start kernels ran when on and not when off (counted inside the MPI ranks).

Planted faults these tests caught (each reverted): NCCL's start without its
fork event, in one process and across processes (the simulated GPU's race
check: the communication stream read the bucket before the compute stream
wrote it); the MPI start summing a buffer bound at its first call (the first
step's gradients every step); the switch ignored (the probes ran with it off);
NcclAllReduceStart back in plan_capture's host reads (NCCL's world's training
step no longer captured as a CUDA graph).
"""

import collections
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from launched_jobs import run_on_ranks, with_simulated_gpus
from test_differential import (
    FLOAT64_RTOL,
    NETWORKS,
    assert_same_training,
    batches,
    counting_calls,
    one_device_step,
)

import towerflow as tf
from towerflow import fast_paths

pytestmark = pytest.mark.differential

OVERLAP = fast_paths.by_name("overlap")
MPI_PROBE, NCCL_PROBE, NCCL_WORLD_PROBE = fast_paths.probes_of(OVERLAP)
PROGRAM = Path(__file__).parent / "mpi_programs" / "overlap_differential_ranks.py"
SIZE = 8                # 8x8 images: 8, 4, 2 and 1 pixels through the recipe's blocks
STEPS = 2
BATCHES = (3, 7, 29)    # ragged shards on 2, 3 and 4 towers; an empty one at 3 on 4
MPI_TOWERS = (1, 2)     # towers per rank


def train(batch, devices=None, all_reduce=None, steps=STEPS, observe=None):
    """{variable name: (initial, trained)} of the cifar10 network after ``steps``
    of SGD on float64 batches of ``batch`` images: on /cpu:0 alone (no
    ``all_reduce``), or as DataParallel towers on ``devices`` with synchronized
    batch norm and a bucket per gradient (so many all-reduces overlap).
    ``observe``, if given, is called with the Session after the training."""
    build = NETWORKS["cifar10"][0]
    tf.reset_default_graph()
    tf.set_random_seed(7)
    images = tf.placeholder(tf.float64, [None, SIZE, SIZE, 3])
    labels = tf.placeholder(tf.int64, [None])

    def model(inputs):
        logits = build(inputs[0], None)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=inputs[1], logits=logits))
    optimizer = tf.train.GradientDescentOptimizer(0.1)
    if all_reduce:
        strategy = tf.parallel.DataParallel(devices, all_reduce=all_reduce, bucket_bytes=1,
                                            sync_batch_norm=True, timeout=60)
        train_op = strategy.minimize(model, (images, labels), optimizer).train_op
        variables = strategy_variables()
    else:
        train_op, variables = one_device_step(model, (images, labels), optimizer, "/cpu:0")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        set_kernels(sess)
        initial = sess.run(variables)
        for x, y in batches(batch, SIZE, np.float64, steps):
            sess.run(train_op, {images: x, labels: y})
        trained = sess.run(variables)
        if observe is not None:
            observe(sess)
    names = [var.op.name.split("/", 1)[-1] if all_reduce else var.op.name for var in variables]
    return {name: (start, end) for name, start, end in zip(names, initial, trained)}


def set_kernels(sess):
    """Every copy of each kernel set to values drawn from its name: the layers'
    initializers draw by op count, which the towers change."""
    for var in tf.global_variables():
        name = re.sub(r"^tower_\d+/", "", var.op.name)
        if name.endswith("kernel"):
            shape = var.shape.as_list()
            rng = np.random.default_rng(zlib.crc32(name.encode()))
            var.load(rng.standard_normal(shape) / np.sqrt(np.prod(shape[:-1])), sess)


def strategy_variables():
    """Tower 0's variables (its moving statistics included)."""
    return [var for var in tf.global_variables() if var.op.name.startswith("tower_0/")]


def counting_probes(setattr_):
    """{probe: calls}, counted through the overlap's probes; ``setattr_``
    installs a wrapper (monkeypatch.setattr, or setattr in a rank)."""
    calls = collections.Counter()
    for probe in fast_paths.probes_of(OVERLAP):
        owner, attribute = fast_paths.probe_target(probe)
        setattr_(owner, attribute, counting_calls(getattr(owner, attribute), probe, calls))
    return calls


def switched_runs(calls, run):
    """{on: run()} with the overlap switch on and off; checks through the
    probes that it ran exactly when on and returns the probes it ran then."""
    results, ran = {}, set()
    for on in (True, False):
        calls.clear()
        with fast_paths.switched([OVERLAP], on=on):
            results[on] = run()
        if on:
            ran = {probe for probe, count in calls.items() if count}
        else:
            assert not +calls, f"the overlap ran with {OVERLAP.variable}=0: {calls}"
    return results, ran


def assert_bit_identical(overlapped, blocking):
    assert overlapped.keys() == blocking.keys()
    for name, (start, end) in blocking.items():
        np.testing.assert_array_equal(overlapped[name][0], start, err_msg=name)
        np.testing.assert_array_equal(overlapped[name][1], end, err_msg=name)


@pytest.fixture(scope="module")
def one_device():
    """{batch: the plain path's training}: one device on the global batch."""
    return {}


def plain(one_device, batch):
    if batch not in one_device:
        one_device[batch] = train(batch)
    return one_device[batch]


# -- NCCL between simulated GPUs of one process ---------------------------------------


@pytest.mark.simulated_gpus(3)
@pytest.mark.parametrize("towers", [2, 3])
def test_nccl_overlap_trains_like_blocking_and_one_device(gpu_backend, no_gpu, monkeypatch,
                                                          one_device, towers):
    from towerflow.device import physical
    physical.set_gpu_probe(None)
    calls = counting_probes(monkeypatch.setattr)
    devices = [f"/gpu:{index}" for index in range(towers)]
    for batch in BATCHES:
        results, ran = switched_runs(calls, lambda batch=batch: train(batch, devices, "nccl"))
        assert ran == {NCCL_PROBE}, (batch, ran)
        assert_bit_identical(results[True], results[False])
        assert_same_training(results[True], plain(one_device, batch), FLOAT64_RTOL)


# -- between MPI ranks ------------------------------------------------------------------


def load(out, rank, key):
    """The training a rank saved (rank program's save) for ``key``."""
    arrays = np.load(out / f"rank_{rank}_{key}.npz")
    names = sorted({name.rsplit("|", 1)[0] for name in arrays.files})
    return {name: (arrays[f"{name}|start"], arrays[f"{name}|end"]) for name in names}


def check_ranks(out, configurations, one_device, probe):
    """Every rank's training, overlap on and off, of each (towers, batch)."""
    for towers, batch in configurations:
        for rank in (0, 1):
            key = f"{towers}_{batch}"
            overlapped, blocking = load(out, rank, key + "_on"), load(out, rank, key + "_off")
            assert_bit_identical(overlapped, blocking)
            assert_same_training(overlapped, plain(one_device, batch), FLOAT64_RTOL)
            ran = json.loads((out / f"rank_{rank}_{key}_probes.json").read_text())
            assert {name for name, count in ran["on"].items() if count} == {probe}, ran
            assert not any(ran["off"].values()), ran


def test_mpi_overlap_trains_like_blocking_and_one_device(tmp_path, one_device):
    """2 ranks x 1 and 2 CPU towers (2 and 4 shards) in one launch."""
    run_on_ranks(PROGRAM, tmp_path, "--mpi", *MPI_TOWERS, timeout=300)
    check_ranks(tmp_path, [(towers, batch) for towers in MPI_TOWERS for batch in BATCHES],
                one_device, MPI_PROBE)


def test_nccl_world_overlap_trains_like_blocking_and_one_device(tmp_path, one_device):
    """NCCL between 2 ranks of one simulated GPU each (its world's start kernel);
    the training step is captured as a CUDA graph, on and off."""
    run_on_ranks(PROGRAM, tmp_path, "--nccl", timeout=300, env=with_simulated_gpus(2))
    check_ranks(tmp_path, [(1, batch) for batch in BATCHES], one_device, NCCL_WORLD_PROBE)
    for rank in (0, 1):
        for batch in BATCHES:
            capture = json.loads((tmp_path / f"rank_{rank}_1_{batch}_capture.json").read_text())
            for switch in ("on", "off"):        # the training step's plan, as a CUDA graph
                assert capture[switch]["captured"] == 1, (rank, batch, switch, capture)
                assert not [reason for reason in capture[switch]["reasons"]
                            if "capture failed" in reason], capture
