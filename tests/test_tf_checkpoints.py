"""TensorFlow's own checkpoints (the V2 tensor bundle), both ways.

The fixtures under tests/fixtures/tf_checkpoints were written by real TensorFlow
(make_fixtures.py, tf.compat.v1.train.Saver); their expected.npz holds the values
TensorFlow read back. towerflow restores them, lists and reads them, and writes
the same format: byte for byte what TensorFlow writes for the same tensors."""

import io
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import towerflow as tf
from towerflow.train import sstable, tensor_bundle

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "tf_checkpoints")
DTYPES = os.path.join(FIXTURES, "dtypes", "model.ckpt")
MLP = os.path.join(FIXTURES, "mlp", "model.ckpt-3")
SHARDED = os.path.join(FIXTURES, "sharded", "model.ckpt")


def expected(prefix):
    """``{name: value}`` as TensorFlow read the fixture back."""
    with np.load(os.path.join(os.path.dirname(prefix), "expected.npz")) as npz:
        return {key.replace("|", "/"): npz[key] for key in npz.files}


def assert_same_bits(got, want):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def variables_like(values):
    """A fresh graph with one zero-initialised variable per ``{name: value}``."""
    tf.reset_default_graph()
    return {name: tf.Variable(np.zeros_like(value), name=name)
            for name, value in values.items()}


@pytest.mark.parametrize("prefix", [DTYPES, MLP, SHARDED])
def test_saver_restores_checkpoints_written_by_tensorflow(prefix):
    want = expected(prefix)
    variables = variables_like(want)
    saver = tf.train.Saver()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        saver.restore(sess, prefix)
        for name, var in variables.items():
            assert_same_bits(sess.run(var), want[name])


def test_the_tf_fixtures_cover_dtypes_ranks_and_shards():
    want = expected(DTYPES)
    assert {value.dtype for value in want.values()} >= {
        np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int32, np.int64, bool)}
    assert want["scalar"].shape == () and want["empty"].shape == (0, 3)
    assert os.path.exists(tensor_bundle.data_filename(SHARDED, 1, 2))


def test_a_tensorflow_trained_mlp_predicts_the_same_in_towerflow():
    with np.load(os.path.join(FIXTURES, "mlp", "predictions.npz")) as npz:
        inputs, tf_logits = npz["inputs"], npz["logits"]
    tf.reset_default_graph()
    x = tf.placeholder(tf.float32, [None, 4])
    hidden = tf.layers.dense(x, 8, activation=tf.nn.relu, name="dense")
    logits = tf.layers.dense(hidden, 3, name="dense_1")
    saver = tf.train.Saver(tf.trainable_variables())
    with tf.Session() as sess:
        saver.restore(sess, MLP)
        got = sess.run(logits, {x: inputs})
    reference = np.maximum(inputs.astype(np.float64) @ expected(MLP)["dense/kernel"]
                           + expected(MLP)["dense/bias"], 0)
    reference = reference @ expected(MLP)["dense_1/kernel"] + expected(MLP)["dense_1/bias"]
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, tf_logits, rtol=1e-5, atol=1e-6)


def test_checkpoint_reader_on_a_tensorflow_checkpoint():
    want = expected(MLP)
    reader = tf.train.NewCheckpointReader(MLP)
    assert reader.get_variable_to_shape_map() == {
        name: list(value.shape) for name, value in want.items()}
    assert reader.get_variable_to_dtype_map()["global_step"] == tf.int64
    assert reader.get_variable_to_dtype_map()["dense/kernel/Adam_1"] == tf.float32
    assert reader.has_tensor("beta1_power") and not reader.has_tensor("dense")
    assert_same_bits(reader.get_tensor("dense/kernel/Adam"), want["dense/kernel/Adam"])
    assert int(reader.get_tensor("global_step")) == 3
    np.testing.assert_allclose(reader.get_tensor("beta1_power"), 0.9 ** 4, rtol=1e-6)
    assert b"dense/kernel (DT_FLOAT) [4,8]\n" in reader.debug_string()
    assert b"global_step (DT_INT64) []\n" in reader.debug_string()
    with pytest.raises(tf.errors.NotFoundError, match="Key nothing not found in checkpoint"):
        reader.get_tensor("nothing")


def test_list_and_load_variable_read_both_formats(tmp_path):
    want = expected(DTYPES)
    assert tf.train.list_variables(DTYPES) == sorted(
        (name, list(value.shape)) for name, value in want.items())
    assert_same_bits(tf.train.load_variable(DTYPES, "scope/inner/kernel:0"),
                     want["scope/inner/kernel"])
    directory = os.path.join(tmp_path, "copy")
    shutil.copytree(os.path.dirname(DTYPES), directory)        # the directory's latest
    assert_same_bits(tf.train.load_variable(directory, "int64_vec"), want["int64_vec"])
    variables = variables_like({"w": np.arange(3.0)})
    with tf.Session() as sess:
        variables["w"].load(np.arange(3.0), sess)
        npz_prefix = tf.train.Saver().save(sess, str(tmp_path / "m"))
    assert tf.train.list_variables(npz_prefix) == [("w", [3])]
    assert_same_bits(tf.train.load_variable(npz_prefix, "w"), np.arange(3.0))
    assert tf.train.NewCheckpointReader(npz_prefix).get_variable_to_dtype_map() == {
        "w": tf.float64}


def test_missing_checkpoints_and_keys_raise_tensorflows_errors(tmp_path):
    with pytest.raises(tf.errors.NotFoundError, match="Failed to find any matching files"):
        tf.train.NewCheckpointReader(str(tmp_path / "none"))
    with pytest.raises(tf.errors.NotFoundError, match="Key absent not found in checkpoint"):
        tf.train.load_variable(DTYPES, "absent")
    variables_like({"absent": np.zeros(2, np.float32)})
    with tf.Session() as sess, pytest.raises(tf.errors.NotFoundError, match="absent"):
        tf.train.Saver().restore(sess, DTYPES)


def test_a_corrupt_tensor_is_data_loss_with_tensorflows_message(tmp_path):
    directory = tmp_path / "corrupt"
    shutil.copytree(os.path.dirname(MLP), directory)
    prefix = str(directory / os.path.basename(MLP))
    entry = tensor_bundle.BundleReader(prefix).entries["dense/bias"]
    data_path = Path(tensor_bundle.data_filename(prefix, 0, 1))
    raw = bytearray(data_path.read_bytes())
    raw[entry.offset] ^= 0x01
    data_path.write_bytes(bytes(raw))
    stored = sstable.unmask(entry.crc32c)
    message = f"Checksum does not match: stored {stored:08d} vs. calculated on the restored"
    with pytest.raises(tf.errors.DataLossError, match=message):
        tf.train.NewCheckpointReader(prefix).get_tensor("dense/bias")
    tf.train.NewCheckpointReader(prefix).get_tensor("dense/kernel")   # the others still read
    variables_like(expected(MLP))
    with tf.Session() as sess, pytest.raises(tf.errors.DataLossError, match="Checksum"):
        tf.train.Saver().restore(sess, prefix)


def test_a_damaged_index_is_data_loss(tmp_path):
    directory = tmp_path / "index"
    shutil.copytree(os.path.dirname(DTYPES), directory)
    index = directory / "model.ckpt.index"
    raw = bytearray(index.read_bytes())
    raw[10] ^= 0x20
    index.write_bytes(bytes(raw))
    with pytest.raises(tf.errors.DataLossError, match="block checksum mismatch"):
        tf.train.NewCheckpointReader(str(directory / "model.ckpt"))
    index.write_bytes(bytes(raw[:-1]))
    with pytest.raises(tf.errors.DataLossError, match="bad magic number"):
        tf.train.NewCheckpointReader(str(directory / "model.ckpt"))


def test_towerflow_writes_tensorflows_bytes(tmp_path):
    """The same tensors give the same .index and .data files as TF's Saver."""
    want = expected(DTYPES)
    variables_like(want)
    saver = tf.train.Saver(format="tf")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for var in tf.global_variables():
            var.load(want[var.op.name], sess)
        prefix = saver.save(sess, str(tmp_path / "model.ckpt"))
    assert prefix == str(tmp_path / "model.ckpt")
    for suffix in (".index", ".data-00000-of-00001"):
        with open(prefix + suffix, "rb") as ours, open(DTYPES + suffix, "rb") as theirs:
            assert ours.read() == theirs.read(), suffix
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == prefix


def test_round_trip_in_tf_format_keeps_every_bit(tmp_path):
    rng = np.random.default_rng(5)
    values = {"a/w": rng.standard_normal((3, 5)).astype(np.float32),
              "b": rng.standard_normal(7), "n": rng.integers(-9, 9, (2, 2)),
              "bf": rng.standard_normal(4).astype(tf.bfloat16.as_numpy_dtype),
              "s": np.float32(np.nan)}
    variables = variables_like(values)
    with tf.Session() as sess:
        for name, var in variables.items():
            var.load(values[name], sess)
        prefix = tf.train.Saver(format="tf").save(sess, str(tmp_path / "m"), global_step=7)
    assert prefix == str(tmp_path / "m-7") and tf.train.checkpoint_exists(prefix)
    assert not os.path.exists(prefix + ".npz")
    variables = variables_like(values)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        tf.train.Saver().restore(sess, tf.train.latest_checkpoint(str(tmp_path)))
        for name, var in variables.items():
            assert_same_bits(sess.run(var), values[name])


def test_tf_format_saver_rotates_old_checkpoints_and_refuses_extra_state(tmp_path):
    variables_like({"w": np.zeros(2)})
    saver = tf.train.Saver(max_to_keep=2, format="tf")
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(4):
            saver.save(sess, str(tmp_path / "m"), global_step=step)
        with pytest.raises(ValueError, match="npz format only"):
            saver.save(sess, str(tmp_path / "m"), extra_state={"epoch": 1})
    assert sorted(os.listdir(tmp_path)) == [
        "checkpoint", "m-2.data-00000-of-00001", "m-2.index", "m-2.meta",
        "m-3.data-00000-of-00001", "m-3.index", "m-3.meta"]
    with pytest.raises(ValueError, match="format must be one of"):
        tf.train.Saver(format="h5")


def test_mlp_trained_in_towerflow_predicts_the_same_after_a_tf_format_restore(tmp_path):
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((32, 6)).astype(np.float32)
    labels = (inputs[:, 0] > 0).astype(np.int64)

    def build():
        tf.reset_default_graph()
        x = tf.placeholder(tf.float32, [None, 6])
        hidden = tf.layers.dense(x, 16, activation=tf.nn.tanh, name="dense")
        logits = tf.layers.dense(hidden, 2, name="dense_1")
        loss = tf.losses.sparse_softmax_cross_entropy(labels, logits)
        step = tf.train.get_or_create_global_step()
        train = tf.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
        return x, logits, train

    x, logits, train = build()
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(20):
            sess.run(train, {x: inputs})
        trained = sess.run(logits, {x: inputs})
        prefix = tf.train.Saver(format="tf").save(sess, str(tmp_path / "mlp"), global_step=20)
    assert dict(tf.train.list_variables(prefix))["dense/kernel/Adam_1"] == [6, 16]
    x, logits, train = build()
    with tf.Session() as sess:
        tf.train.Saver().restore(sess, prefix)
        assert_same_bits(sess.run(logits, {x: inputs}), trained)
        assert sess.run(tf.train.get_global_step()) == 20


def test_init_from_checkpoint_sets_initializers(tmp_path):
    want = expected(MLP)
    tf.reset_default_graph()
    with tf.variable_scope("encoder"):
        kernel = tf.get_variable("kernel", [4, 8])
        bias = tf.get_variable("bias", [8])
    other = tf.get_variable("head", [8, 3])
    tf.train.init_from_checkpoint(MLP, {"dense/": "encoder/", "dense_1/kernel": other})
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert_same_bits(sess.run(kernel), want["dense/kernel"])
        assert_same_bits(sess.run(bias), want["dense/bias"])
        assert_same_bits(sess.run(other), want["dense_1/kernel"])
    with pytest.raises(ValueError, match="Shape of variable"):
        tf.train.init_from_checkpoint(MLP, {"dense/bias": other})
    with pytest.raises(ValueError, match="Tensor nope is not found"):
        tf.train.init_from_checkpoint(MLP, {"nope": other})


def test_a_table_of_many_blocks_reads_back(tmp_path):
    """Past 256 KiB TF's table splits into blocks, each indexed by a separator key."""
    items = [(f"var_{index:06d}/kernel".encode(), bytes([index % 251]) * 40)
             for index in range(12000)]
    path = tmp_path / "many.index"
    with open(path, "wb") as stream:
        sstable.write_table(stream, items)
    assert sstable.read_table(str(path)) == items
    with pytest.raises(ValueError, match="sorted"):
        sstable.write_table(io.BytesIO(), items[::-1])


def test_snappy_blocks_decode():
    """Snappy's raw format, from its spec: a literal, then a 1-byte-offset copy
    (overlapping itself) and a 2-byte-offset copy."""
    assert sstable.snappy_uncompress(bytes([12, 0x0C]) + b"abcd" + bytes([0x11, 4])) == \
        b"abcd" * 3
    assert sstable.snappy_uncompress(bytes([9, 0x08]) + b"xyz" + bytes([0x16, 3, 0])) == \
        b"xyz" * 3
    with pytest.raises(tf.errors.DataLossError, match="corrupted compressed block"):
        sstable.snappy_uncompress(bytes([5, 0x11, 9]))
