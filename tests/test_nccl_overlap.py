"""NCCL's all-reduce overlapping the backward pass (issue 35 item 3): each
bucket's all-reduce runs on a communication stream of each GPU, ordered by
events after the bucket's gradients and before their use, never by the host;
the weights are bit-identical with and without overlap."""

import json

import numpy as np
import pytest

import towerflow as tf

FEATURES, HIDDEN, CLASSES, BATCH = 6, 5, 3, 8


def tower(inputs):
    """The towers' MLP (also tests/mpi_programs/nccl_overlap_ranks.py's)."""
    images, classes = inputs
    hidden = tf.layers.dense(images, HIDDEN, tf.nn.relu, name="first",
                             kernel_initializer=tf.constant_initializer(0.1))
    logits = tf.layers.dense(hidden, CLASSES, name="last",
                             kernel_initializer=tf.constant_initializer(-0.2))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=classes, logits=logits))


def nccl_step(overlap, devices=None, **options):
    """(the DataParallel step of :func:`tower` with all_reduce='nccl' and a
    bucket per gradient, its feed)."""
    x = tf.placeholder(tf.float32, [None, FEATURES], name="x")
    labels = tf.placeholder(tf.int64, [None], name="labels")
    strategy = tf.parallel.DataParallel(devices, all_reduce="nccl", bucket_bytes=1,
                                        overlap=overlap, **options)
    step = strategy.minimize(tower, (x, labels), tf.train.GradientDescentOptimizer(0.5))
    rng = np.random.default_rng(3)
    feed = {x: rng.standard_normal((BATCH, FEATURES)).astype(np.float32),
            labels: np.arange(BATCH) % CLASSES}
    return step, feed


def train(overlap, steps=3, metadata=None):
    """Weights after ``steps`` steps of 2 towers on /gpu:0 and /gpu:1 (NCCL);
    a bucket per gradient, so several all-reduces overlap the backward pass.
    ``metadata``: a RunMetadata to trace the last step into."""
    tf.reset_default_graph()
    step, feed = nccl_step(overlap, ["/gpu:0", "/gpu:1"])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for done in range(steps):
            trace = {}
            if metadata is not None and done == steps - 1:
                trace = {"options": tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
                         "run_metadata": metadata}
            sess.run(step.train_op, feed, **trace)
        weights = [v for v in tf.global_variables() if "first" in v.name or "last" in v.name]
        return dict(zip([v.name for v in weights], sess.run(weights))), \
            tf.get_default_graph()


@pytest.mark.simulated_gpus(2)
def test_overlapping_nccl_weights_equal_the_blocking_ones_bit_for_bit(gpu_backend, no_gpu):
    from towerflow.device import physical
    physical.set_gpu_probe(None)
    overlapped, graph = train(overlap=True)
    types = {op.type for op in graph.get_operations()}
    assert {"NcclAllReduceStart", "NcclAllReduceWait"} <= types
    assert "NcclAllReduce" not in types
    blocking, graph = train(overlap=False)
    assert "NcclAllReduceStart" not in {op.type for op in graph.get_operations()}
    assert sorted(overlapped) == sorted(blocking)
    assert len(overlapped) == 2 * 4         # each tower's copy of 2 kernels and 2 biases
    for name, value in blocking.items():
        np.testing.assert_array_equal(overlapped[name], value)
    for name in ("first/kernel:0", "first/bias:0", "last/kernel:0", "last/bias:0"):
        np.testing.assert_array_equal(overlapped["tower_0/" + name], overlapped["tower_1/" + name])
    assert not np.all(overlapped["tower_0/last/kernel:0"] == np.float32(-0.2))   # it trained


def gpu0_work(monkeypatch, overlap):
    """(name, stream key, start, end) of every kernel and copy GPU 0's streams
    ran in one training step, in the simulated GPU's time (micros)."""
    from towerflow.simgpu import work
    from towerflow.simgpu.clock import WORK_MICROS
    ran = []
    execute = work.Work.execute

    def logged(self, stream):
        result = execute(self, stream)
        if stream.device_id == 0:
            ran.append((self.name, stream.key, stream.clock.micros - WORK_MICROS,
                        stream.clock.micros))
        return result
    monkeypatch.setattr(work.Work, "execute", logged)
    train(overlap, steps=1)
    return ran


@pytest.mark.simulated_gpus(2)
def test_the_all_reduce_runs_on_its_own_stream_beside_the_backward_kernels(
        gpu_backend, no_gpu, monkeypatch):
    from towerflow import simgpu
    from towerflow.device import physical
    if not simgpu.is_installed():
        pytest.skip("the simulated GPU's clock times the streams")
    physical.set_gpu_probe(None)
    ran = gpu0_work(monkeypatch, overlap=True)
    reduces = [entry for entry in ran if entry[0].startswith("ncclAllReduce")]
    streams = {key for _, key, *_ in ran}
    communication = {key for _, key, *_ in reduces}
    assert len(communication) == 1 and len(streams) >= 2    # its own stream
    compute = [entry for entry in ran if entry[1] not in communication]
    # a bucket's all-reduce (its send and receive) runs while kernels queued on
    # the compute stream after it (the rest of the backward pass) run
    overlapped = [
        (name, begin) for index, (name, _, begin, end) in enumerate(ran)
        if name == "ncclAllReduce (send)"
        if any(entry in compute and entry[2] < ran[index + 1][3] and begin < entry[3]
               for entry in ran[index + 2:])]
    assert len(overlapped) >= 2, ran

    blocking = gpu0_work(monkeypatch, overlap=False)    # on the compute stream
    kernels = {key for name, key, *_ in blocking if not name.startswith("ncclAllReduce")}
    assert {key for name, key, *_ in blocking if name.startswith("ncclAllReduce")} <= kernels


@pytest.mark.simulated_gpus(2)
def test_the_trace_joins_each_buckets_towers_and_each_start_to_its_wait(gpu_backend, no_gpu):
    """client/timeline.py: a bucket's start ops on the two GPUs are joined
    (toward the one that started last), each start to its own wait."""
    from towerflow.client import timeline
    from towerflow.device import physical
    physical.set_gpu_probe(None)
    metadata = tf.RunMetadata()
    train(overlap=True, steps=2, metadata=metadata)
    events = json.loads(timeline.Timeline(metadata.step_stats).generate_chrome_trace_format())
    events = events["traceEvents"]
    ops = [((e["pid"], e["tid"], e["ts"], e["ts"] + e["dur"]), e["args"]["name"])
           for e in events if e["ph"] == "X" and e["args"]["op"].startswith("NcclAllReduce")]
    sources = {e["id"]: e for e in events if e["ph"] == "s"}
    targets = {e["id"]: e for e in events if e["ph"] == "t"}
    assert sources.keys() == targets.keys()

    def names_at(flow, edge):       # the all-reduce ops starting (0) or ending (1) there
        return {name for place, name in ops
                if place[:2] == (flow["pid"], flow["tid"]) and place[2 + edge] == flow["ts"]}
    joined, waited = [], []
    for key, source in sources.items():
        target = targets[key]
        if not source["name"].startswith("allreduce/"):
            continue        # a tensor's arrow: GPU and host clocks may disagree
        assert source["ts"] <= target["ts"], (source, target)
        if source["pid"] != target["pid"]:
            joined.append((names_at(source, 0), names_at(target, 0)))
        else:
            waited.append((names_at(source, 1), names_at(target, 0)))
    # NOTE: a start or wait enqueues no kernel on the compute stream: it takes
    # 0 µs there and may share its µs with another, hence "in", not "==".
    buckets = {f"allreduce/all_reduce_nccl/sum_{index}" for index in range(4)}
    assert sorted(bucket for bucket in buckets for first, last in joined
                  if {f"{bucket}_0_start", f"{bucket}_1_start"} <= first | last) == \
        sorted(buckets)
    assert len(joined) == 4
    pairs = {(f"{bucket}_{tower}_start", f"{bucket}_{tower}")
             for bucket in buckets for tower in (0, 1)}
    assert {(start, wait) for starts, waits in waited for start in starts
            for wait in waits if (start, wait) in pairs} == pairs
