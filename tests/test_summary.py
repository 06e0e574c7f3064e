"""tf.summary and tf.summary.FileWriter: the event files are read back with
TensorBoard's own reader (EventAccumulator), as TensorBoard reads them."""

import io
import json
import math
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing import event_accumulator as ea

import towerflow as tf
from towerflow.backends.summary_kernels import BUCKET_LIMITS


def read_events(logdir):
    """Everything TensorBoard would show for ``logdir``."""
    accumulator = ea.EventAccumulator(str(logdir), size_guidance=ea.STORE_EVERYTHING_SIZE_GUIDANCE)
    accumulator.Reload()
    return accumulator


def write(logdir, summaries, steps=None):
    """Run ``summaries`` once per step and write each result at its step."""
    with tf.Session() as sess, tf.summary.FileWriter(str(logdir)) as writer:
        for step in steps or [0]:
            writer.add_summary(sess.run(summaries), global_step=step)


def test_scalar_values_and_steps_read_back_by_tensorboard(tmp_path):
    step_value = tf.placeholder(tf.float32, [], name="v")
    merged = tf.summary.merge([tf.summary.scalar("loss", step_value * 2.0)])
    with tf.Session() as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
        for step in (0, 10, 20):
            writer.add_summary(sess.run(merged, {step_value: step / 4}), global_step=step)
    events = read_events(tmp_path).Scalars("loss")
    assert [(event.step, event.value) for event in events] == [(0, 0.0), (10, 5.0), (20, 10.0)]


def test_a_summary_op_returns_serialized_summary_bytes():
    summary = tf.summary.scalar("accuracy", tf.constant(0.25))
    with tf.Session() as sess:
        value = sess.run(summary)
    assert isinstance(value, bytes)
    parsed = tf.Summary.FromString(value)
    assert [(v.tag, v.simple_value) for v in parsed.value] == [("accuracy", 0.25)]
    assert summary.dtype is tf.string and summary.shape.ndims == 0


def test_tags_are_unique_scoped_op_names_and_family_prefixes_them():
    first = tf.summary.scalar("loss", 1.0)
    second = tf.summary.scalar("loss", 2.0)
    with tf.name_scope("tower_0"):
        scoped = tf.summary.scalar("loss", 3.0)
    family = tf.summary.scalar("lr", 0.1, family="train")
    spaced = tf.summary.scalar("bad name!", 4.0)
    with tf.Session() as sess:
        tags = [tf.Summary.FromString(sess.run(s)).value[0].tag
                for s in (first, second, scoped, family, spaced)]
    assert tags == ["loss", "loss_1", "tower_0/loss", "train/train/lr", "bad_name_"]
    assert [s.op.name for s in (first, second, scoped)] == ["loss", "loss_1", "tower_0/loss"]


def test_histogram_counts_each_value_in_tensorflows_default_buckets(tmp_path, rng):
    values = np.concatenate([rng.normal(0, 3, 500), [0.0, 0.0, 1e-13, -7.5]])
    write(tmp_path, tf.summary.histogram("weights", tf.constant(values, tf.float64)))
    histogram = read_events(tmp_path).Histograms("weights")[0].histogram_value
    assert (histogram.min, histogram.max, histogram.num) == (values.min(), values.max(), 504)
    assert histogram.sum == pytest.approx(values.sum(), rel=1e-12)
    assert histogram.sum_squares == pytest.approx(np.sum(values ** 2), rel=1e-12)
    # Reference: a value counts in the first bucket whose limit exceeds it.
    expected = np.zeros(len(BUCKET_LIMITS))
    for value in values:
        expected[np.argmax(BUCKET_LIMITS > value)] += 1
    limits = list(BUCKET_LIMITS)
    written = np.zeros(len(BUCKET_LIMITS))
    for limit, count in zip(histogram.bucket_limit, histogram.bucket):
        written[limits.index(limit)] = count
    np.testing.assert_array_equal(written, expected)
    assert len(histogram.bucket) < 2 * np.count_nonzero(expected) + 2   # empty runs merged
    assert expected[limits.index(1e-12)] == 3      # 0, 0 and 1e-13 count in [0, 1e-12)


def test_histogram_of_nan_is_an_error_naming_the_op():
    values = tf.constant([1.0, np.nan, 2.0])
    summary = tf.summary.histogram("activations", values)
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match="Nan in summary histogram for: activations"):
        sess.run(summary)
    infinite = tf.summary.histogram("grads", tf.constant([np.inf]))
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match="Infinity in summary histogram for: grads"):
        sess.run(infinite)


def decoded(image_event):
    return np.asarray(Image.open(io.BytesIO(image_event.encoded_image_string)))


def test_images_uint8_as_is_floats_scaled_as_tensorflow_does(tmp_path, rng):
    pixels = rng.integers(0, 256, (5, 4, 6, 3), dtype=np.uint8)
    positive = np.array([[[[0.0], [0.5]], [[1.0], [2.0]]]], np.float32)     # max 2
    signed = np.array([[[[-1.0], [0.0]], [[0.5], [0.25]]]], np.float32)     # max |v| 1
    write(tmp_path, tf.summary.merge([
        tf.summary.image("rgb", tf.constant(pixels), max_outputs=3),
        tf.summary.image("positive", tf.constant(positive), max_outputs=1),
        tf.summary.image("signed", tf.constant(signed), max_outputs=1)]))
    events = read_events(tmp_path)
    assert sorted(events.Tags()["images"]) == [
        "positive/image", "rgb/image/0", "rgb/image/1", "rgb/image/2", "signed/image"]
    for index in range(3):
        image = events.Images(f"rgb/image/{index}")[0]
        assert (image.height, image.width) == (4, 6)
        np.testing.assert_array_equal(decoded(image), pixels[index])
    # all >= 0: times 255 / max, truncated; else times 127 / max|v|, plus 128.
    np.testing.assert_array_equal(decoded(events.Images("positive/image")[0]),
                                  [[0, 63], [127, 255]])
    np.testing.assert_array_equal(decoded(events.Images("signed/image")[0]),
                                  [[1, 128], [191, 159]])


def test_image_nonfinite_pixels_are_red_and_rank_is_checked(tmp_path):
    image = np.array([[[[0.0, 0.0, 1.0], [np.nan, 0.0, 0.0]]]], np.float32)
    write(tmp_path, tf.summary.image("bad", tf.constant(image), max_outputs=1))
    np.testing.assert_array_equal(decoded(read_events(tmp_path).Images("bad/image")[0]),
                                  [[[0, 0, 255], [255, 0, 0]]])
    with pytest.raises(ValueError, match="rank 4"):
        tf.summary.image("flat", tf.zeros([4, 4, 3]))


def test_text_summary_read_back_by_the_text_plugin(tmp_path):
    notes = tf.placeholder(tf.string, [2], name="notes_in")
    summary = tf.summary.text("notes", notes)
    with tf.Session() as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
        value = np.array([b"lr halved", "**bold** \u00e9"], dtype=object)
        writer.add_summary(sess.run(summary, {notes: value}), global_step=7)
    events = read_events(tmp_path)
    assert "notes" in events.PluginTagToContent("text")
    tensor = events.Tensors("notes")[0]
    assert tensor.step == 7
    assert list(tensor.tensor_proto.string_val) == [b"lr halved", "**bold** \u00e9".encode()]
    with pytest.raises(ValueError, match="to have dtype string, got tf.float32"):
        tf.summary.text("number", tf.constant(1.0))


def test_merge_all_takes_the_collection_and_collections_arguments():
    assert tf.summary.merge_all() is None
    tf.summary.scalar("a", 1.0)
    tf.summary.scalar("hidden", 2.0, collections=[])
    tf.summary.scalar("mine", 3.0, collections=["custom"])
    tf.summary.histogram("h", [1.0, 2.0])
    assert len(tf.get_collection(tf.GraphKeys.SUMMARIES)) == 2
    with tf.Session() as sess:
        merged = tf.Summary.FromString(sess.run(tf.summary.merge_all()))
        custom = tf.Summary.FromString(sess.run(tf.summary.merge_all(key="custom")))
    assert [value.tag for value in merged.value] == ["a", "h"]
    assert [value.tag for value in custom.value] == ["mine"]


def test_merging_a_tag_twice_is_an_error():
    loss = tf.summary.scalar("loss", 1.0)
    merged = tf.summary.merge([loss, loss])
    with tf.Session() as sess, pytest.raises(tf.errors.InvalidArgumentError,
                                             match="Duplicate tag loss found in summary"):
        sess.run(merged)


def test_scalar_of_a_vector_is_tensorflows_shape_error():
    summary = tf.summary.scalar("loss", tf.constant([1.0, 2.0, 3.0]))
    with tf.Session() as sess, pytest.raises(
            tf.errors.InvalidArgumentError,
            match=r"tags and values not the same shape: \[\] != \[3\] \(tag 'loss'\)"):
        sess.run(summary)
    with pytest.raises(TypeError, match="DataType string not in list of allowed values"):
        tf.summary.scalar("text", tf.placeholder(tf.string, []))


# -- FileWriter as TF programs use it --------------------------------------------------


def test_file_writer_writes_the_graph_for_tensorboards_graph_tab(tmp_path):
    with tf.device("/cpu:0"):
        x = tf.placeholder(tf.float32, [None, 3], name="x")
        w = tf.Variable(tf.ones([3, 2]), name="w")
    with tf.name_scope("layer"):
        y = tf.matmul(x, w, name="y")
    with tf.control_dependencies([y]):
        tf.no_op(name="done")
    with tf.Session() as sess:
        tf.summary.FileWriter(str(tmp_path), sess.graph).close()
    graph = read_events(tmp_path).Graph()
    nodes = {node.name: node for node in graph.node}
    assert {"x", "w", "layer/y", "done"} <= set(nodes)
    assert nodes["layer/y"].op == "MatMul"
    assert nodes["layer/y"].input[0] == "x" and nodes["layer/y"].input[1].startswith("w")
    assert list(nodes["done"].input) == ["^layer/y"]
    assert nodes["x"].device == "/device:CPU:0"
    shape = nodes["layer/y"].attr["_output_shapes"].list.shape[0]
    assert [dim.size for dim in shape.dim] == [-1, 2]


def test_file_writer_like_a_tf1_training_loop(tmp_path):
    """Summaries of a training loop, a hand-made tf.Summary (TF1 programs log
    evaluation results this way), a session log; flush() makes them readable
    before close()."""
    x = tf.Variable(4.0, name="x")
    loss = tf.square(x)
    train = tf.train.GradientDescentOptimizer(0.25).minimize(loss)
    tf.summary.scalar("loss", loss)
    merged = tf.summary.merge_all()
    writer = tf.summary.FileWriter(str(tmp_path), filename_suffix=".run1")
    assert writer.get_logdir() == str(tmp_path)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        writer.add_session_log(tf.SessionLog(status=tf.SessionLog.START), global_step=0)
        for step in range(3):
            summary, _ = sess.run([merged, train])
            writer.add_summary(summary, step)
    evaluation = tf.Summary(value=[tf.Summary.Value(tag="eval/accuracy", simple_value=0.75)])
    writer.add_summary(evaluation, global_step=3)
    writer.flush()
    events = read_events(tmp_path)
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(0, 16.0), (1, 4.0),
                                                                   (2, 1.0)]
    assert [(e.step, e.value) for e in events.Scalars("eval/accuracy")] == [(3, 0.75)]
    writer.close()
    writer.add_summary(evaluation, global_step=4)       # ignored after close, as in TF
    [event_file] = os.listdir(tmp_path)
    assert event_file.startswith("events.out.tfevents.") and event_file.endswith(".run1")
    assert [e.step for e in read_events(tmp_path).Scalars("eval/accuracy")] == [3]
    writer.reopen()                                     # a second file, same directory
    writer.add_event(tf.Event(step=5, summary=evaluation))
    writer.close()
    assert len(os.listdir(tmp_path)) == 2
    assert [e.step for e in read_events(tmp_path).Scalars("eval/accuracy")] == [3, 5]


def test_metadata_is_written_with_a_tags_first_value_only(tmp_path):
    notes = tf.placeholder(tf.string, [], name="notes")
    summary = tf.summary.text("notes", notes)
    from tensorboard.backend.event_processing import event_file_loader
    with tf.Session() as sess, tf.summary.FileWriter(str(tmp_path)) as writer:
        for step in range(2):
            writer.add_summary(sess.run(summary, {notes: np.array(b"x", object)}), step)
    [name] = os.listdir(tmp_path)
    loader = event_file_loader.EventFileLoader(os.path.join(tmp_path, name))
    values = [event.summary.value[0] for event in loader.Load() if event.summary.value]
    assert [value.HasField("metadata") for value in values] == [True, False]


def test_file_writer_cache_shares_one_writer_per_directory(tmp_path):
    first = tf.summary.FileWriterCache.get(str(tmp_path))
    assert tf.summary.FileWriterCache.get(str(tmp_path)) is first
    tf.summary.FileWriterCache.clear()
    assert tf.summary.FileWriterCache.get(str(tmp_path)) is not first
    tf.summary.FileWriterCache.clear()


# -- summaries run on the host, whatever device computed their tensor ------------------


def test_summary_of_a_tensor_computed_on_each_device(op_device):
    with tf.device(op_device):
        values = tf.constant([1.0, 2.0, 4.0]) * 2.0
        total = tf.reduce_sum(values)
    merged = tf.summary.merge([tf.summary.scalar("total", total),
                               tf.summary.histogram("values", values)])
    with tf.Session() as sess:
        summary = tf.Summary.FromString(sess.run(merged))
    assert summary.value[0].simple_value == 14.0
    assert (summary.value[1].histo.num, summary.value[1].histo.max) == (3, 8.0)


def test_summary_pinned_to_a_gpu_needs_soft_placement_as_in_tensorflow(gpu_backend):
    with tf.device("/gpu:0"):
        loss = tf.reduce_mean(tf.constant([1.0, 3.0]))
        summary = tf.summary.scalar("loss", loss)
    with pytest.raises(tf.errors.InvalidArgumentError, match="no supported kernel for GPU"):
        tf.Session().run(summary)
    config = tf.ConfigProto(allow_soft_placement=True)
    with tf.Session(config=config) as sess:
        assert tf.Summary.FromString(sess.run(summary)).value[0].simple_value == 2.0


# -- towerflow train --tensorboard ------------------------------------------------------


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "towerflow", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, check=False,
                          env=dict(os.environ, PYTHONPATH=os.getcwd()))


def test_train_writes_loss_accuracy_learning_rate_and_throughput(tmp_path):
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
    board = tmp_path / "tb"
    done = run_cli("train", "digits", "--cpu-towers", "2", "--steps", "25", "--log-every", "5",
                   "--quiet", "--tensorboard", str(board), "--json-out",
                   str(tmp_path / "run.json"))
    assert done.returncode == 0, done.stderr
    run = json.loads((tmp_path / "run.json").read_text())["tensorboard_run"]
    assert [str(path) for path in board.iterdir()] == [run]
    events = read_events(run)
    rows = {tag: [(event.step, event.value) for event in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}
    for tag in ("train/loss", "train/accuracy", "train/learning_rate",
                "train/samples_per_sec"):
        assert [step for step, _ in rows[tag]] == [5, 10, 15, 20, 25], tag
    losses = [value for _, value in rows["train/loss"]]
    assert 0 < losses[-1] < losses[0] < 3.0             # ln(10) = 2.3 at the start
    assert all(0 <= value <= 1 for _, value in rows["train/accuracy"])
    assert all(value > 0 for _, value in rows["train/samples_per_sec"])
    # digits' schedule: cosine_decay(0.05, step, 25 steps, alpha=0.05) at each row's step
    expected = [0.05 * (0.95 * 0.5 * (1 + math.cos(math.pi * step / 25)) + 0.05)
                for step, _ in rows["train/learning_rate"]]
    assert [value for _, value in rows["train/learning_rate"]] == pytest.approx(expected,
                                                                              rel=1e-6)
    # one whole epoch (23 steps of 64): its means and test accuracy at step 23
    assert [step for step, _ in rows["epoch/test_accuracy"]] == [23]
    assert 0.5 < rows["epoch/test_accuracy"][0][1] <= 1.0
    assert [step for step, _ in rows["epoch/loss"]] == [23]


def test_each_run_logged_to_one_directory_is_a_run_of_its_own(tmp_path):
    """Issue 33, item 5: two runs into one --tensorboard DIR wrote into DIR
    itself, which TensorBoard showed as one run with every step twice."""
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")
    board = tmp_path / "tb"
    for _ in range(2):
        done = run_cli("train", "digits", "--steps", "4", "--log-every", "2", "--quiet",
                       "--tensorboard", str(board))
        assert done.returncode == 0, done.stderr
    runs = sorted(board.iterdir())
    assert len(runs) == 2 and all(re.fullmatch(r"digits-\d{8}-\d{6}(-2)?", run.name)
                                  for run in runs)
    for run in runs:
        assert [event.step for event in read_events(run).Scalars("train/loss")] == [2, 4]


def test_tensorboard_option_is_refused_for_script_recipes(tmp_path):
    done = run_cli("train", "linear_regression", "--tensorboard", str(tmp_path))
    assert done.returncode == 2 and "does not use --tensorboard" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_only_rank_zero_writes_tensorboard_files(tmp_path):
    from towerflow import training, training_rate
    steps = training_rate.StepClock()
    others = types.SimpleNamespace(is_chief=False, learning_rate=0.1)
    assert training._board(None, others, str(tmp_path), steps) is None
    chief = types.SimpleNamespace(is_chief=True, learning_rate=0.1)
    board = training._board(None, chief, str(tmp_path), steps)
    assert board.learning_rate() == 0.1
    board.close()


def test_flush_puts_every_queued_event_on_disk(tmp_path):
    """A burst of events then flush(): all of them are readable at once (the
    writer's background thread has not caught up with a burst by itself)."""
    writer = tf.summary.FileWriter(str(tmp_path), max_queue=5000)
    for step in range(3000):
        value = tf.Summary.Value(tag="burst", simple_value=float(step))
        writer.add_summary(tf.Summary(value=[value]), global_step=step)
    writer.flush()
    assert len(read_events(tmp_path).Scalars("burst")) == 3000
    writer.close()
