"""Traces (issue 15, item 5): RunOptions/RunMetadata step stats of a traced
Session.run, the Chrome trace of client.timeline.Timeline, the simulated
GPU's event timing, and ``towerflow train --trace``."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from launched_jobs import MPI_MISSING, launch_line

import towerflow as tf
from towerflow import training_trace
from towerflow.client import timeline

FULL_TRACE = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
FEATURES, CLASSES, BATCH = 4, 3, 6


def cpu(index):
    return f"/job:localhost/replica:0/task:0/device:CPU:{index}"


def two_towers(devices=("/cpu:1", "/cpu:2"), all_reduce="cpu"):
    """A 2-tower softmax regression; returns (session, step, feed)."""
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, FEATURES], name="x")
    labels = tf.placeholder(tf.int64, [None], name="labels")

    def tower(inputs):
        images, classes = inputs
        weights = tf.Variable(np.linspace(-1, 1, FEATURES * CLASSES, dtype=np.float32)
                              .reshape(FEATURES, CLASSES), name="w")
        logits = tf.matmul(images, weights)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=classes, logits=logits))
    strategy = tf.parallel.DataParallel(list(devices), all_reduce=all_reduce)
    step = strategy.minimize(tower, (x, labels), tf.train.GradientDescentOptimizer(0.5))
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    feed = {x: np.arange(BATCH * FEATURES, dtype=np.float32).reshape(BATCH, FEATURES) / 10,
            labels: np.arange(BATCH) % CLASSES}
    return sess, step, feed


def traced(sess, fetches, feed):
    metadata = tf.RunMetadata()
    values = sess.run(fetches, feed, options=FULL_TRACE, run_metadata=metadata)
    return values, metadata.step_stats


def nodes_by_name(step_stats):
    return {node.node_name: (dev_stats.device, node)
            for dev_stats in step_stats.dev_stats for node in dev_stats.node_stats}


@pytest.fixture
def three_cpus(no_gpu):
    from conftest import split_cpu
    split_cpu(3)


def test_a_traced_run_has_every_op_of_the_plan_on_its_device(three_cpus):
    sess, step, feed = two_towers()
    before_us = time.time_ns() // 1000
    _, stats = traced(sess, [step.train_op, step.loss], feed)
    after_us = time.time_ns() // 1000
    assert [d.device for d in stats.dev_stats] == [cpu(0), cpu(1), cpu(2)]
    nodes = nodes_by_name(stats)
    plan = next(iter(sess._traced_plans.values()))[0]._plan
    stepped = {op.name for op in plan.ops if op.type not in ("Const", "NoOp")
               and not op.op_def.forwards_input}
    shown = {name.removeprefix("allreduce/") for name in nodes}
    assert stepped <= shown, stepped - shown
    assert nodes["tower_0/MatMul"][0] == cpu(1) and nodes["tower_1/MatMul"][0] == cpu(2)
    for dev_stats in stats.dev_stats:
        starts = [node.all_start_micros for node in dev_stats.node_stats]
        assert starts == sorted(starts)         # one device runs its steps in order
        for node in dev_stats.node_stats:
            assert before_us <= node.all_start_micros
            assert node.all_start_micros + node.all_end_rel_micros <= after_us
            assert 0 <= node.op_start_rel_micros <= node.op_end_rel_micros \
                <= node.all_end_rel_micros


def test_output_sizes_are_the_outputs_dtype_shape_and_bytes(three_cpus):
    sess, step, feed = two_towers()
    _, stats = traced(sess, [step.train_op, step.loss], feed)
    _, matmul = nodes_by_name(stats)["tower_0/MatMul"]
    description = matmul.output[0].tensor_description
    assert description.dtype == 1                                  # DT_FLOAT
    assert [dim.size for dim in description.shape.dim] == [BATCH // 2, CLASSES]
    assert description.allocation_description.requested_bytes == BATCH // 2 * CLASSES * 4
    assert description.allocation_description.allocator_name == "cpu"
    assert matmul.timeline_label == "tower_0/MatMul = MatMul(shard_0, tower_0/w)"
    loss_grad = nodes_by_name(stats)["tower_0/SparseSoftmaxCrossEntropyWithLogits"][1]
    assert [o.tensor_description.allocation_description.requested_bytes
            for o in loss_grad.output] == [BATCH // 2 * 4, BATCH // 2 * CLASSES * 4]


def test_output_dtypes_are_the_graph_tensors_strings_included(no_gpu):
    words = tf.gather(tf.constant([b"a", b"bc"]), [1, 0], name="words")
    with tf.Session() as sess:
        _, stats = traced(sess, words, None)
    description = nodes_by_name(stats)["words"][1].output[0].tensor_description
    assert description.dtype == 7                                  # DT_STRING
    assert [dim.size for dim in description.shape.dim] == [2]


def test_copies_and_the_all_reduce_have_node_stats_of_their_own(three_cpus):
    sess, step, feed = two_towers()
    _, stats = traced(sess, [step.train_op, step.loss], feed)
    nodes = nodes_by_name(stats)
    sums = [name for name in nodes if name.startswith("allreduce/") and "_copy_to_" not in name]
    assert sums and all(nodes[name][0] == cpu(0) for name in sums)   # the /cpu:0 sum
    assert nodes[sums[0]][1].timeline_label.split(" = ")[1].startswith("AllReduceAddN(")
    copies = {(device, name) for name, (device, _) in nodes.items() if "/_copy_to_" in name}
    # each tower's gradient bucket goes to /cpu:0, and the sum comes back
    assert (cpu(0), "tower_0_buckets/pack_bucket/_copy_to_cpu_0") in copies
    assert (cpu(1), f"{sums[0]}/_copy_to_cpu_1") in copies
    assert (cpu(2), f"{sums[0]}/_copy_to_cpu_2") in copies
    label = nodes["tower_0_buckets/pack_bucket/_copy_to_cpu_0"][1].timeline_label
    assert label.endswith("= MEMCPYHtoH(tower_0_buckets/pack_bucket)")


def test_the_untraced_run_is_unchanged_by_tracing(three_cpus):
    results = []
    for trace in (False, True, False):
        sess, step, feed = two_towers()
        losses = []
        for _ in range(3):
            if trace:
                losses.append(traced(sess, [step.train_op, step.loss], feed)[0][1])
            else:
                losses.append(sess.run([step.train_op, step.loss], feed)[1])
        results.append((losses, sess.run(step.replicas[0])))
    for losses, weights in results[1:]:
        assert losses == results[0][0]
        for got, want in zip(weights, results[0][1]):
            np.testing.assert_array_equal(got, want)


def test_tracing_needs_both_options_and_run_metadata(three_cpus):
    sess, step, feed = two_towers()
    metadata = tf.RunMetadata()
    sess.run(step.loss, feed, run_metadata=metadata)        # no trace level: no stats
    assert metadata.step_stats.dev_stats == []
    sess.run(step.loss, feed, options=tf.RunOptions(trace_level=tf.RunOptions.NO_TRACE),
             run_metadata=metadata)
    assert metadata.step_stats.dev_stats == []
    sess.run(step.loss, feed, options=FULL_TRACE)           # nowhere to put them: untraced
    assert sess._traced_plans == {}
    _, first = traced(sess, step.loss, feed)
    sess.run(step.loss, feed, options=FULL_TRACE, run_metadata=metadata)
    assert len(metadata.step_stats.dev_stats) == len(first.dev_stats)   # replaced, not added


def test_run_options_and_metadata_have_tf_names_and_refuse_unknown_fields():
    assert (tf.RunOptions.NO_TRACE, tf.RunOptions.SOFTWARE_TRACE,
            tf.RunOptions.HARDWARE_TRACE, tf.RunOptions.FULL_TRACE) == (0, 1, 2, 3)
    options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE, timeout_in_ms=5000,
                            output_partition_graphs=True)
    assert str(options) == ("trace_level: FULL_TRACE\ntimeout_in_ms: 5000\n"
                            "output_partition_graphs: true\n")
    with pytest.raises(ValueError, match='Protocol message RunOptions has no "trace" field'):
        tf.RunOptions(trace=3)
    metadata = tf.RunMetadata()
    # (protobuf's message: 'no field "stats"' in its C++ version, 'no "stats" field' in upb's)
    with pytest.raises(AttributeError, match='no field "stats"|no "stats" field'):
        metadata.stats = None
    assert str(metadata) == ""


def test_run_metadata_is_tfs_protocol_buffer_and_a_file_writer_stores_it(three_cpus,
                                                                        tmp_path):
    """Issue 33, item 7: RunOptions/RunMetadata/StepStats are TF's messages (as
    tensorboard ships them), so FileWriter.add_run_metadata, as TF's own
    mnist_with_summaries.py calls it, stores a traced run TensorBoard reads."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto import config_pb2
    assert tf.RunMetadata is config_pb2.RunMetadata and tf.RunOptions is config_pb2.RunOptions
    sess, step, feed = two_towers()
    metadata = tf.RunMetadata()
    sess.run([step.train_op, step.loss], feed, options=FULL_TRACE, run_metadata=metadata)
    writer = tf.summary.FileWriter(str(tmp_path), sess.graph)
    writer.add_run_metadata(metadata, "step1", global_step=1)
    with pytest.raises(ValueError, match="^The provided tag was already used for this event "
                                         "type$"):
        writer.add_run_metadata(metadata, "step1", global_step=2)
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert events.Tags()["run_metadata"] == ["step1"]
    stored = events.RunMetadata("step1")
    assert stored == metadata
    assert len(stored.step_stats.dev_stats) == len(metadata.step_stats.dev_stats) >= 2


def test_a_traced_op_on_each_device(op_device):
    tf.reset_default_graph()
    with tf.device(op_device):
        a = tf.placeholder(tf.float32, [2, 3])
        product = tf.matmul(a, tf.ones([3, 5]), name="product")
    with tf.Session() as sess:
        values, stats = traced(sess, product, {a: np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(values, np.full((2, 5), 3.0, np.float32))
    device, node = nodes_by_name(stats)["product"]
    assert device.endswith(op_device.replace("/cpu:", "CPU:").replace("/gpu:", "GPU:"))
    description = node.output[0].tensor_description
    assert [dim.size for dim in description.shape.dim] == [2, 5]
    assert description.allocation_description.requested_bytes == 40


# -- the Chrome trace -----------------------------------------------------------------------


def test_the_timeline_is_a_chrome_trace_with_one_process_per_device(three_cpus):
    sess, step, feed = two_towers()
    _, stats = traced(sess, [step.train_op, step.loss], feed)
    trace = json.loads(timeline.Timeline(stats).generate_chrome_trace_format())
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert sorted(processes.values()) == [f"{cpu(i)} Compute" for i in range(3)]
    ops = [e for e in events if e["ph"] == "X"]
    assert len(ops) == sum(len(d.node_stats) for d in stats.dev_stats)
    for event in ops:
        assert event["pid"] in processes and isinstance(event["ts"], int)
        assert event["dur"] >= 0 and event["args"]["op"] == event["name"]
    names = {e["name"] for e in ops}
    assert "MEMCPYHtoH" in names and "AllReduceAddN" in names and "MatMul" in names
    matmul = next(e for e in ops if e["args"]["name"] == "tower_0/MatMul")
    assert matmul["args"] == {"name": "tower_0/MatMul", "op": "MatMul",
                              "input0": "shard_0", "input1": "tower_0/w"}
    flows = [e for e in events if e["ph"] in "st"]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "t"}
    assert starts and starts.keys() == ends.keys()
    assert any(starts[i]["pid"] != ends[i]["pid"] for i in starts)   # across devices


def test_show_memory_adds_tf_tensor_and_allocator_rows(three_cpus):
    sess, step, feed = two_towers()
    _, stats = traced(sess, [step.train_op, step.loss], feed)
    analysis = timeline.Timeline(stats).analyze_step_stats(show_memory=True)
    events = json.loads(analysis.chrome_trace.to_json())["traceEvents"]
    processes = [e["args"]["name"] for e in events if e["ph"] == "M"]
    assert processes[0] == "Allocators" and f"{cpu(1)} Tensors" in processes
    assert {"N", "O", "D", "C"} <= {e["ph"] for e in events}
    assert analysis.allocator_maximums["cpu"].num_bytes > 0
    no_flows = timeline.Timeline(stats).generate_chrome_trace_format(show_dataflow=False)
    assert not [e for e in json.loads(no_flows)["traceEvents"] if e["ph"] in "st"]


def test_timeline_is_importable_as_tf_does():
    from towerflow.client import timeline as imported
    assert tf.client.timeline is imported and imported.Timeline is timeline.Timeline


# -- GPUs: CUDA events on the streams (the simulated GPU's timing) ------------------------


def test_simulated_events_time_the_work_between_them():
    from towerflow import simgpu
    from towerflow.simgpu.clock import WORK_MICROS
    with simgpu.installed(gpus=1) as cupy:
        stream = cupy.cuda.Stream(non_blocking=True)
        with cupy.cuda.Device(0), stream:
            x = cupy.arange(4.0)
            start = stream.record()
            (x * 2 + 1).sum()                   # three kernels
            end = stream.record()
            with pytest.raises(simgpu.CUDARuntimeError, match="cudaErrorNotReady"):
                cupy.cuda.get_elapsed_time(start, end)      # the host has not waited
            end.synchronize()
            assert cupy.cuda.get_elapsed_time(start, end) == 3 * WORK_MICROS / 1000
            untimed = cupy.cuda.Event(disable_timing=True)
            untimed.record(stream)
            untimed.synchronize()
            with pytest.raises(simgpu.CUDARuntimeError, match="disable_timing"):
                cupy.cuda.get_elapsed_time(start, untimed)


def test_simulated_event_times_follow_the_streams_they_wait_on():
    from towerflow import simgpu
    from towerflow.simgpu.clock import WORK_MICROS
    with simgpu.installed(gpus=1) as cupy, cupy.cuda.Device(0):
        first, second = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        with first:
            begin = first.record()
            x = cupy.arange(4.0) * 2             # two pieces of work on the first stream
            ready = first.record()
        second.wait_event(ready)
        with second:
            (x + 1).sum()
            done = second.record()
        done.synchronize()
        # the second stream's work starts after the first's: 2 + 2 pieces of work
        assert cupy.cuda.get_elapsed_time(begin, done) == 4 * WORK_MICROS / 1000


@pytest.mark.simulated_gpus(2)
def test_gpu_rows_time_kernels_on_their_streams(gpu_backend, no_gpu):
    from towerflow import simgpu
    from towerflow.device import physical
    physical.set_gpu_probe(None)
    sess, step, feed = two_towers(("/gpu:0", "/gpu:1"), all_reduce="nccl")
    for _ in range(2):
        sess.run([step.train_op, step.loss], feed)
    _, stats = traced(sess, [step.train_op, step.loss], feed)
    gpus = [d.device for d in stats.dev_stats]
    assert "/job:localhost/replica:0/task:0/device:GPU:0" in gpus
    assert "/job:localhost/replica:0/task:0/device:GPU:1" in gpus
    nodes = nodes_by_name(stats)
    assert nodes["tower_1/MatMul"][0].endswith("GPU:1")
    if simgpu.is_installed():       # one simulated kernel takes WORK_MICROS
        from towerflow.simgpu.clock import WORK_MICROS
        assert nodes["tower_1/MatMul"][1].all_end_rel_micros == WORK_MICROS
    reduces = [(device, name) for name, (device, _) in nodes.items()
               if name.startswith("allreduce/")]
    assert {device[-5:] for device, _ in reduces} == {"GPU:0", "GPU:1"}
    assert nodes["tower_1/Mean/_copy_to_gpu_0"][1].timeline_label.endswith(
        "= MEMCPYDtoD(tower_1/Mean)")
    trace = json.loads(timeline.Timeline(stats).generate_chrome_trace_format())
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"NcclAllReduceStart", "NcclAllReduceWait"} <= names    # overlapping (the default)


def test_copies_to_and_from_a_gpu_are_timed_on_its_stream(gpu_backend):
    tf.reset_default_graph()
    with tf.device("/cpu:0"):
        a = tf.placeholder(tf.float32, [2, 3])
        doubled = tf.multiply(a, 2.0, name="doubled")
    with tf.device("/gpu:0"):
        product = tf.matmul(doubled, tf.ones([3, 4]), name="product")
    with tf.device("/cpu:0"):
        total = tf.reduce_sum(product, name="total")
    with tf.Session() as sess:
        value, stats = traced(sess, total, {a: np.ones((2, 3), np.float32)})
    assert value == 48.0
    nodes = nodes_by_name(stats)
    to_gpu, from_gpu = nodes["doubled/_copy_to_gpu_0"], nodes["product/_copy_to_cpu_0"]
    assert to_gpu[0].endswith("GPU:0") and "= MEMCPYHtoD(doubled)" in to_gpu[1].timeline_label
    assert from_gpu[0].endswith("GPU:0") and "= MEMCPYDtoH(product)" in from_gpu[1].timeline_label


def test_a_captured_plan_is_traced_op_by_op_and_still_replays(gpu_backend):
    tf.reset_default_graph()
    with tf.device("/gpu:0"):
        a = tf.placeholder(tf.float32, [2, 3])
        result = tf.reduce_sum(tf.nn.relu(a * 2.0 + 1.0), name="result")
    feed = {a: np.ones((2, 3), np.float32)}
    sess = tf.Session()
    for _ in range(3):                        # a warm-up run, then captured
        assert sess.run(result, feed) == 18.0
    captured = next(iter(sess._plans.values()))[0]
    assert captured.captured == 1
    value, stats = traced(sess, result, feed)
    assert value == 18.0
    names = set(nodes_by_name(stats))
    assert {"Mul", "Add", "Relu", "result"} <= names         # fused and captured untraced
    assert sess.run(result, feed) == 18.0 and captured.captured == 1


# -- towerflow train --trace ------------------------------------------------------------------

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def towerflow(*args, cwd, launch=False):
    line = [sys.executable, "-m", "towerflow", *args]
    if launch:
        line = launch_line(line)
    return subprocess.run(line, capture_output=True, text=True, timeout=300, cwd=cwd,
                          check=False, env=dict(os.environ, PYTHONPATH=ROOT))


def trace_rows(path):
    events = json.loads(path.read_text())["traceEvents"]
    processes = [e["args"]["name"] for e in events if e["ph"] == "M"]
    return processes, [e for e in events if e["ph"] == "X"]


def test_train_writes_a_trace_of_a_few_steps(tmp_path):
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
    done = towerflow("train", "digits", "--steps", "6", "--cpu-towers", "2",
                     "--trace", "t.json", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    processes, ops = trace_rows(tmp_path / "t.json")
    assert processes == [f"{cpu(0)} Compute", f"{cpu(1)} Compute"]
    updates = [e for e in ops if e["name"] == "ApplyMomentum"]
    variables = {e["args"]["name"] for e in updates}
    assert len(updates) == 3 * len(variables)              # 3 steps traced by default
    assert any(e["args"]["name"].startswith("allreduce/") for e in ops)
    assert "MEMCPYHtoH" in {e["name"] for e in ops}


def flows(events):
    """Every flow of a trace as (start event, end event), checked to pair up."""
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "t"}
    assert starts.keys() == ends.keys()
    return [(starts[key], ends[key]) for key in starts]


def ops_around(events, flow_end):
    """The ops ('X' events) a flow event may bind to: on its row, around its
    time (more than one where an op ends in the microsecond the next starts)."""
    found = [e for e in events if e["ph"] == "X" and e["pid"] == flow_end["pid"]
             and e["tid"] == flow_end["tid"] and e["ts"] <= flow_end["ts"] <= e["ts"] + e["dur"]]
    assert found, f"flow event {flow_end} is on no op"
    return found


def enclosing_op(events, flow_end, named=None):
    """The op around a flow event, the one ``named`` (its node) if given."""
    found = ops_around(events, flow_end)
    if named is not None:
        found = [e for e in found if e["args"]["name"] == named]
        assert found, f"flow event {flow_end} is not on an op named {named!r}"
    return found[0]


def test_a_trace_of_several_steps_has_flows_only_forward_in_time(tmp_path):
    """Issue 33, item 4: the flows of a multi-step trace join each tensor's
    producer to its consumers of the same step (matched by name across all
    steps, most arrows ended before they started)."""
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
    done = towerflow("train", "digits", "--steps", "6", "--cpu-towers", "2",
                     "--trace", "t.json", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    pairs = flows(events)
    assert len(pairs) >= 3 * 2          # the two towers' gradients, each of 3 steps
    backwards = [(start, end) for start, end in pairs if start["ts"] > end["ts"]]
    assert backwards == []
    for start, end in pairs:    # from the tensor's producer as it ends, to a consumer
        producer = enclosing_op(events, start, named=start["name"].split(":")[0])
        assert start["ts"] == producer["ts"] + producer["dur"]
        consumers = [e for e in ops_around(events, end) if e["ts"] == end["ts"]
                     and start["name"] in e["args"].values()]
        assert consumers, f"the arrow of {start['name']} ends on no op that reads it"


def test_train_writes_tensorboard_files_and_a_trace_in_one_run(tmp_path):
    """The README's command: `towerflow train digits --tensorboard tb --trace t.json`."""
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    done = towerflow("train", "digits", "--steps", "8", "--cpu-towers", "2", "--log-every",
                     "2", "--tensorboard", "tb", "--trace", "t.json", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    processes, _ = trace_rows(tmp_path / "t.json")
    assert processes == [f"{cpu(0)} Compute", f"{cpu(1)} Compute"]
    (run,) = (tmp_path / "tb").iterdir()         # the run's own directory
    events = EventAccumulator(str(run))
    events.Reload()
    assert {"train/loss", "train/accuracy", "train/learning_rate",
            "train/samples_per_sec"} <= set(events.Tags()["scalars"])
    assert [event.step for event in events.Scalars("train/loss")] == [2, 4, 6, 8]


def test_trace_options_are_checked_before_training(tmp_path, capsys):
    (tmp_path / "a_dir").mkdir()
    done = towerflow("train", "digits", "--steps", "2", "--trace", "a_dir", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == "towerflow: error: 'a_dir': --trace is a directory, not a file"
    from towerflow import cli
    assert cli.main(["train", "linear_regression", "--trace", "t.json"]) == 2
    assert "does not use --trace" in capsys.readouterr().err
    assert cli.main(["train", "digits", "--trace-steps", "2"]) == 2
    assert "--trace-steps needs --trace FILE" in capsys.readouterr().err


def test_launch_writes_one_trace_with_a_row_group_per_rank(tmp_path):
    pytest.importorskip("mpi4py", reason=MPI_MISSING)
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
    done = towerflow("train", "digits", "--steps", "5", "--cpu-towers", "1", "--trace",
                     "t.json", "--trace-steps", "2", "--quiet", cwd=tmp_path, launch=True)
    assert done.returncode == 0, done.stderr
    processes, ops = trace_rows(tmp_path / "t.json")
    assert processes == [f"rank {rank} /job:worker/replica:0/task:{rank}/device:CPU:0 Compute"
                         for rank in (0, 1)]
    for pid in (0, 1):
        mine = [e for e in ops if e["pid"] == pid]
        assert len([e for e in mine if e["name"] == "MpiAllReduce"]) >= 2   # 2 steps
    # the ranks' clocks agree: their all-reduces of one step overlap in time
    first = [min((e for e in ops if e["pid"] == pid and e["name"] == "MpiAllReduce"),
                 key=lambda e: e["ts"]) for pid in (0, 1)]
    assert first[0]["ts"] <= first[1]["ts"] + first[1]["dur"] + 1000
    assert first[1]["ts"] <= first[0]["ts"] + first[0]["dur"] + 1000
    # Issue 33, item 4: no arrow joins two processes but a collective's, and
    # those join the ranks' spans of one all-reduce, from the last to join it;
    # an overlapping one's starts, from the other's start to the last's.
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    pairs = flows(events)
    across = [(start, end) for start, end in pairs if start["pid"] != end["pid"]]
    assert across, "the ranks' all-reduces are joined by arrows"
    for start, end in across:
        is_start = start["name"] + "_start" in {e["args"]["name"] for e in ops_around(
            events, start) if e["name"] == "MpiAllReduceStart"}
        op, end_edge = ("MpiAllReduceStart", 0) if is_start else ("MpiAllReduce", 1)
        joined = [e["args"]["name"] for e in ops_around(events, start)
                  if e["name"] == op and e["ts"] == start["ts"]]
        released = [e["args"]["name"] for e in ops_around(events, end)
                    if e["name"] == op and e["ts"] + end_edge * e["dur"] == end["ts"]]
        assert set(joined) & set(released), (start, end)
    assert [pair for pair in pairs if pair[0]["ts"] > pair[1]["ts"]] == []


def test_a_fused_chain_is_traced_op_by_op(three_cpus):
    tf.reset_default_graph()
    images = tf.placeholder(tf.float32, [2, 6, 6, 3])
    filters = tf.constant(np.linspace(-1, 1, 3 * 3 * 3 * 4, dtype=np.float32)
                          .reshape(3, 3, 3, 4))
    conv = tf.nn.conv2d(images, filters, [1, 1, 1, 1], "SAME", name="conv")
    out = tf.nn.relu(tf.nn.bias_add(conv, tf.constant([0.1, 0.2, 0.3, 0.4]), name="bias"),
                     name="relu")
    feed = {images: np.linspace(-1, 1, 2 * 6 * 6 * 3, dtype=np.float32).reshape(2, 6, 6, 3)}
    sess = tf.Session()
    untraced = sess.run(out, feed)
    units = next(iter(sess._plans.values()))[0].units
    assert any("+" in unit.name for unit in units)          # the untraced plan fuses
    value, stats = traced(sess, out, feed)
    np.testing.assert_array_equal(value, untraced)
    assert {"conv", "bias", "relu"} <= set(nodes_by_name(stats))


def test_ranks_clocks_are_aligned_by_the_median_barrier_not_a_late_one():
    # rank 0 left the barriers at 100, 200, 300 µs; this rank's clock runs 40 µs
    # behind, and it was descheduled for 5 ms after the first barrier
    assert training_trace._clock_shift([100, 200, 300], [5060, 160, 260]) == 40
