"""tf.train.Saver: resuming is bit-identical (slots, beta powers, global step,
data order); checkpoints are device independent (4 towers -> 1 or 3, one
device -> towers); old files are rotated; writes are atomic; corrupt files
are detected, named, and skipped by restore_latest."""

import os

import numpy as np
import pytest

import towerflow as tf
from towerflow.train.saver import logical_name

FEATURES, CLASSES, BATCH = 5, 3, 12
MOMENTUM = lambda: tf.train.MomentumOptimizer(0.1, 0.9)
ADAM = lambda: tf.train.AdamOptimizer(0.05)


def mlp(inputs, seed=1):
    x, labels = inputs
    init = tf.glorot_uniform_initializer
    hidden = tf.layers.dense(x, 8, activation=tf.nn.relu, kernel_initializer=init(seed=seed))
    logits = tf.layers.dense(hidden, CLASSES, kernel_initializer=init(seed=seed + 1))
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits))


def batches(steps, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((BATCH, FEATURES)).astype(np.float32),
             rng.integers(0, CLASSES, BATCH)) for _ in range(steps)]


class Model:
    """A fresh graph with an MLP, an optimizer and the global step, on one
    device (towers=0, plain minimize) or on ``towers`` logical CPUs."""

    def __init__(self, towers=0, optimizer=MOMENTUM, seed=1, **saver_args):
        tf.reset_default_graph()
        self.x = tf.placeholder(tf.float32, [None, FEATURES])
        self.labels = tf.placeholder(tf.int64, [None])
        self.step = tf.train.get_or_create_global_step()
        if towers == 0:
            self.loss = mlp((self.x, self.labels), seed)
            self.train_op = optimizer().minimize(self.loss, global_step=self.step)
            self.replicas = [tf.trainable_variables()]
        else:
            strategy = tf.parallel.DataParallel([f"/cpu:{i}" for i in range(towers)],
                                                all_reduce="cpu")
            built = strategy.minimize(lambda inputs: mlp(inputs, seed), (self.x, self.labels),
                                      optimizer(), global_step=self.step)
            self.train_op, self.loss, self.replicas = built.train_op, built.loss, built.replicas
        self.saver = tf.train.Saver(**saver_args)
        self.sess = tf.Session()

    def init(self):
        self.sess.run(tf.global_variables_initializer())
        return self

    def train(self, data):
        return [self.sess.run([self.train_op, self.loss], {self.x: x, self.labels: y})[1]
                for x, y in data]

    def values(self):
        """{variable name: value} of every global variable."""
        return {var.op.name: value for var, value in
                zip(tf.global_variables(), self.sess.run(tf.global_variables()))}


def assert_replicas_equal(model):
    values = model.sess.run(model.replicas)
    for replica in values[1:]:
        for first, other in zip(values[0], replica):
            np.testing.assert_array_equal(first, other)


@pytest.mark.parametrize("optimizer, slot_suffixes", [(MOMENTUM, ["Momentum"]),
                                                      (ADAM, ["Adam", "Adam_1"])])
def test_resuming_gives_exactly_the_losses_of_an_uninterrupted_run(tmp_path, optimizer,
                                                                   slot_suffixes):
    data = batches(8)
    uninterrupted = Model(optimizer=optimizer).init().train(data)

    first = Model(optimizer=optimizer).init()
    assert first.train(data[:4]) == uninterrupted[:4]
    saved = first.values()
    path = first.saver.save(first.sess, str(tmp_path / "model"), global_step=first.step)
    # TF's prefix, not the file's name; restore takes it
    assert path == str(tmp_path / "model-4") and os.path.isfile(path + ".npz")

    # A different initial seed and no initializer: everything must come from the file.
    resumed = Model(optimizer=optimizer, seed=7)
    assert resumed.saver.restore(resumed.sess, path) == {}
    assert resumed.values().keys() == saved.keys()
    for name, value in resumed.values().items():
        np.testing.assert_array_equal(value, saved[name], err_msg=name)
    names = {name for name, _ in tf.train.list_variables(path)}
    assert {"global_step", "dense/kernel"} <= names
    assert {f"dense/kernel/{suffix}" for suffix in slot_suffixes} <= names
    if optimizer is ADAM:
        assert tf.train.load_variable(path, "beta1_power") == pytest.approx(0.9 ** 5)  # beta^(t+1)
    assert tf.train.global_step(resumed.sess, resumed.step) == 4
    assert resumed.train(data[4:]) == uninterrupted[4:]   # bit-identical


@pytest.mark.parametrize("saved_towers, restored_towers", [(4, 0), (4, 3), (0, 3)])
def test_checkpoints_move_between_tower_counts(logical_cpus, tmp_path, saved_towers,
                                               restored_towers):
    data = batches(6)
    reference = Model(saved_towers).init().train(data)

    source = Model(saved_towers).init()
    source.train(data[:3])
    path = source.saver.save(source.sess, str(tmp_path / "model"), global_step=source.step)
    saved = {logical_name(name): value for name, value in source.values().items()
             if not name.startswith("tower_") or name.startswith("tower_0/")}
    # One copy per logical variable: as many entries as a one-device model has.
    Model(0)
    single_names = [var.op.name for var in tf.global_variables()]
    assert sorted(name for name, _ in tf.train.list_variables(path)) == sorted(single_names)

    target = Model(restored_towers, seed=5)
    target.saver.restore(target.sess, path)
    restored = target.values()
    assert {logical_name(name) for name in restored} == saved.keys()
    for name, value in restored.items():   # every replica, slots included
        np.testing.assert_array_equal(value, saved[logical_name(name)], err_msg=name)
    # Slots of every replica were restored too: training goes on as in one run.
    np.testing.assert_allclose(target.train(data[3:]), reference[3:], rtol=1e-5)
    assert_replicas_equal(target)
    assert tf.train.global_step(target.sess, target.step) == 6


def test_max_to_keep_deletes_old_checkpoints_and_the_state_file_lists_the_rest(tmp_path):
    model = Model(max_to_keep=2).init()
    paths = []
    for _ in range(4):
        model.train(batches(1))
        paths.append(model.saver.save(model.sess, str(tmp_path / "model"),
                                      global_step=model.step))
    assert paths == [str(tmp_path / f"model-{step}") for step in range(1, 5)]
    assert model.saver.last_checkpoints == paths[2:]
    # Each checkpoint's meta graph (TF's write_meta_graph=True) goes with it.
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-3.meta", "model-3.npz",
                                            "model-4.meta", "model-4.npz"]
    assert tf.train.latest_checkpoint(str(tmp_path)) == paths[3]
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert state.model_checkpoint_path == paths[3]
    assert state.all_model_checkpoint_paths == paths[2:]
    text = (tmp_path / "checkpoint").read_text()
    assert text.startswith('model_checkpoint_path: "model-4"\n'
                           'all_model_checkpoint_paths: "model-3"\n')
    assert tf.train.latest_checkpoint(str(tmp_path / "nothing_here")) is None


@pytest.mark.parametrize("saver_args", [{"max_to_keep": None},
                                        {"max_to_keep": 1, "keep_checkpoint_every_n_hours": 1e-9}])
def test_files_kept_for_good_are_not_deleted_but_only_the_newest_is_listed(tmp_path,
                                                                           saver_args):
    model = Model(**saver_args).init()
    paths = [model.saver.save(model.sess, str(tmp_path / "model"), global_step=step)
             for step in range(3)]
    assert all(os.path.isfile(path + ".npz") for path in paths)
    assert model.saver.last_checkpoints == paths[-1:]
    assert tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths == paths[-1:]


def test_a_resumed_saver_goes_on_rotating_the_files_of_the_previous_run(tmp_path):
    first = Model(max_to_keep=2).init()
    for _ in range(3):
        first.train(batches(1))
        first.saver.save(first.sess, str(tmp_path / "model"), global_step=first.step)
    resumed = Model(max_to_keep=2)
    path, state = resumed.saver.restore_latest(resumed.sess, str(tmp_path))
    assert path == str(tmp_path / "model-3") and state == {}
    resumed.train(batches(1))
    resumed.saver.save(resumed.sess, str(tmp_path / "model"), global_step=resumed.step)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-3.meta", "model-3.npz",
                                            "model-4.meta", "model-4.npz"]


def test_extra_state_round_trip_resumes_the_data_order(tmp_path):
    model = Model().init()
    rng = np.random.default_rng(42)
    order = rng.permutation(10)
    extra = {"epoch": 3, "position": 7, "order": order, "history": [0.5, [1, 2]],
             "rng": rng.bit_generator.state, "mean": np.float32(0.25),
             "weights": np.arange(6, dtype=np.float32).reshape(2, 3), "note": None}
    path = model.saver.save(model.sess, str(tmp_path / "model"), extra_state=extra)
    expected_next = rng.permutation(10)

    restored = Model().saver.restore(tf.Session(), path)
    assert restored.keys() == extra.keys()
    np.testing.assert_array_equal(restored["order"], order)
    assert restored["order"].dtype == order.dtype
    np.testing.assert_array_equal(restored["weights"], extra["weights"])
    assert restored["weights"].dtype == np.float32
    assert (restored["epoch"], restored["position"], restored["mean"]) == (3, 7, 0.25)
    assert restored["history"] == [0.5, [1, 2]] and restored["note"] is None
    resumed_rng = np.random.default_rng()
    resumed_rng.bit_generator.state = restored["rng"]
    np.testing.assert_array_equal(resumed_rng.permutation(10), expected_next)
    assert model.saver.restore_state(path)["epoch"] == 3

    with pytest.raises(TypeError, match=r"extra_state\['bad'\] is a set"):
        model.saver.save(model.sess, str(tmp_path / "other"), extra_state={"bad": {1}})
    assert not (tmp_path / "other.npz").exists()


def corrupt(prefix, how):
    path = prefix + ".npz"     # Saver.save returns TF's prefix; the file adds .npz
    data = bytearray(open(path, "rb").read())
    if how == "truncated":
        data = data[:len(data) * 2 // 3]
    else:
        data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_a_corrupt_newest_checkpoint_is_named_and_the_previous_one_used(tmp_path, capsys, how):
    model = Model().init()
    model.train(batches(2))
    good = model.saver.save(model.sess, str(tmp_path / "model"), global_step=model.step,
                            extra_state={"epoch": 1})
    good_values = model.values()
    model.train(batches(2, seed=1))
    newest = model.saver.save(model.sess, str(tmp_path / "model"), global_step=model.step,
                              extra_state={"epoch": 2})
    corrupt(newest, how)

    fresh = Model().init()
    before = fresh.values()
    with pytest.raises(tf.errors.DataLossError, match="model-4.npz"):
        fresh.saver.restore(fresh.sess, newest)
    for name, value in fresh.values().items():   # nothing was half-restored
        np.testing.assert_array_equal(value, before[name])

    capsys.readouterr()
    assert tf.train.latest_checkpoint(str(tmp_path)) == good
    path, state = fresh.saver.restore_latest(fresh.sess, str(tmp_path))
    assert (path, state) == (good, {"epoch": 1})
    assert "model-4.npz" in capsys.readouterr().err
    for name, value in fresh.values().items():
        np.testing.assert_array_equal(value, good_values[name])

    corrupt(good, how)
    with pytest.raises(tf.errors.DataLossError, match="model-2.npz"):
        fresh.saver.restore_latest(fresh.sess, str(tmp_path))


def test_no_damaged_byte_is_ever_restored_silently(tmp_path):
    model = Model().init()
    path = model.saver.save(model.sess, str(tmp_path / "model")) + ".npz"
    saved, original = model.values(), open(path, "rb").read()
    detected = 0
    for offset in range(0, len(original), max(1, len(original) // 150)):
        damaged = bytearray(original)
        damaged[offset] ^= 0x10
        open(path, "wb").write(bytes(damaged))
        try:
            model.saver.restore(model.sess, path)
        except tf.errors.DataLossError as err:
            assert path in str(err)
            detected += 1
            continue
        for name, value in model.values().items():   # a harmless byte (zip metadata)
            np.testing.assert_array_equal(value, saved[name], err_msg=f"offset {offset}")
    assert detected > 100


def test_restore_latest_of_an_empty_directory_starts_fresh(tmp_path):
    model = Model()
    assert model.saver.restore_latest(model.sess, str(tmp_path)) == (None, {})
    with pytest.raises(ValueError, match="None"):
        model.saver.restore(model.sess, tf.train.latest_checkpoint(str(tmp_path)))
    with pytest.raises(tf.errors.NotFoundError, match="nowhere"):
        model.saver.restore(model.sess, str(tmp_path / "nowhere"))


def test_missing_variables_and_mismatched_shapes_or_dtypes_are_named(tmp_path):
    weight = tf.Variable(np.ones((2, 3), np.float32), name="weight")
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    path = tf.train.Saver().save(sess, str(tmp_path / "small"))

    tf.reset_default_graph()
    tf.Variable(np.ones((2, 3), np.float32), name="weight")
    tf.Variable(0.0, name="bias")
    tf.Variable(0.0, name="scale")
    with pytest.raises(tf.errors.NotFoundError, match="bias, scale not found.*small.npz"):
        tf.train.Saver().restore(tf.Session(), path)

    tf.reset_default_graph()
    tf.Variable(np.ones((2, 4), np.float32), name="weight")
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"'weight' has shape \(2, 4\) in the graph but \(2, 3\)"):
        tf.train.Saver().restore(tf.Session(), path)

    tf.reset_default_graph()
    tf.Variable(np.ones((2, 3), np.float64), name="weight")
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="'weight' is float64 in the graph but float32"):
        tf.train.Saver().restore(tf.Session(), path)
    assert weight is not None


def test_a_crash_while_writing_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    model = Model().init()
    model.train(batches(1))
    previous = model.saver.save(model.sess, str(tmp_path / "model"), global_step=model.step)
    previous_bytes = open(previous + ".npz", "rb").read()
    state_before = (tmp_path / "checkpoint").read_text()
    model.train(batches(1))

    def crash(source, destination):
        raise OSError("simulated crash before the rename")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        model.saver.save(model.sess, str(tmp_path / "model"), global_step=model.step)
    monkeypatch.undo()

    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-1.meta",
                                            "model-1.npz"]  # no temporary
    assert open(previous + ".npz", "rb").read() == previous_bytes
    assert (tmp_path / "checkpoint").read_text() == state_before
    assert tf.train.latest_checkpoint(str(tmp_path)) == previous
    fresh = Model()
    fresh.saver.restore(fresh.sess, previous)
    assert tf.train.global_step(fresh.sess, fresh.step) == 1


def test_saving_into_a_missing_directory_and_an_empty_saver_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="No variables to save"):
        tf.train.Saver()
    model = Model().init()
    with pytest.raises(tf.errors.NotFoundError, match="doesn't exist"):
        model.saver.save(model.sess, str(tmp_path / "missing" / "model"))


def test_tf1_prefixes_save_restore_and_latest_checkpoint(tmp_path):
    model = Model().init()
    model.train(batches(1))
    prefix = model.saver.save(model.sess, str(tmp_path / "model.ckpt"), global_step=7)
    assert prefix == str(tmp_path / "model.ckpt-7")           # TF's prefix, no .npz
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model.ckpt-7.meta",
                                            "model.ckpt-7.npz"]
    assert tf.train.latest_checkpoint(str(tmp_path)) == prefix
    assert tf.train.checkpoint_exists(prefix) and not tf.train.checkpoint_exists(prefix + "0")
    saved = model.values()
    fresh = Model(seed=7)
    fresh.saver.restore(fresh.sess, tf.train.latest_checkpoint(str(tmp_path)))
    for name, value in fresh.values().items():
        np.testing.assert_array_equal(value, saved[name])


def test_state_files_listing_npz_names_still_restore(tmp_path):
    model = Model().init()
    prefix = model.saver.save(model.sess, str(tmp_path / "model"), global_step=3)
    # what earlier versions wrote: the file's name, .npz included
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model-3.npz"\n'
                                         'all_model_checkpoint_paths: "model-3.npz"\n')
    assert tf.train.latest_checkpoint(str(tmp_path)) == prefix
    fresh = Model(max_to_keep=1)
    assert fresh.saver.restore_latest(fresh.sess, str(tmp_path)).path == prefix
    fresh.saver.save(fresh.sess, str(tmp_path / "model"), global_step=4)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "model-4.meta",
                                            "model-4.npz"]   # rotated
