"""The ``mixed_bfloat16`` policy (towerflow/mixed_precision.py): bfloat16
compute on float32 master weights, float32 batch-norm statistics, no loss
scaling; and training with it (``training.fit``, ``towerflow train``).
"""

import json

import numpy as np
import pytest
from test_mixed_precision import batch, small_net

import towerflow as tf
from towerflow import cli, training
from towerflow.recipes import get

U = 2.0 ** -8          # bfloat16's unit roundoff (8 significant bits)


@pytest.fixture
def mixed_bfloat16():
    tf.mixed_precision.set_global_policy("mixed_bfloat16")
    yield
    tf.mixed_precision.set_global_policy(None)


def test_the_policy_computes_in_bfloat16_on_float32_variables_without_loss_scaling():
    policy = tf.mixed_precision.Policy("mixed_bfloat16")
    assert (policy.compute_dtype, policy.variable_dtype) == ("bfloat16", "float32")
    assert policy.loss_scale is None        # TF: loss scaling is for float16 only
    assert repr(policy) == '<Policy "mixed_bfloat16">'


def test_layers_compute_in_bfloat16_and_variables_stay_float32(mixed_bfloat16):
    with tf.Graph().as_default():
        x, labels, hidden, logits, loss = small_net(batch_norm=True)
        assert hidden.dtype is tf.bfloat16 and logits.dtype is tf.bfloat16
        variables = tf.global_variables()
        names = {v.op.name for v in variables}
        assert {"batch_normalization/moving_mean", "conv2d/kernel", "dense/kernel"} <= names
        assert all(v.dtype is tf.float32 for v in variables), \
            [(v.name, v.dtype) for v in variables]
        grads = tf.gradients(loss, tf.trainable_variables())
        assert all(g.dtype is tf.float32 for g in grads)
        updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            images, classes = batch()
            values = sess.run([loss] + grads, {x: images, labels: classes})
            sess.run(updates, {x: images, labels: classes})
            moving = sess.run(tf.global_variables())
        assert all(np.isfinite(value).all() for value in values)
        assert all(value.dtype == np.float32 for value in moving)


def gradients_under(policy):
    tf.mixed_precision.set_global_policy(policy)
    try:
        with tf.Graph().as_default():
            x, labels, _, _, loss = small_net(batch_norm=True)
            variables = tf.trainable_variables()
            grads = tf.gradients(loss, variables)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                images, classes = batch(size=32)
                values = sess.run([loss] + grads, {x: images, labels: classes})
            return dict(zip(["loss"] + [v.op.name for v in variables], values))
    finally:
        tf.mixed_precision.set_global_policy(None)


def test_gradients_under_mixed_bfloat16_are_close_to_float32():
    exact, mixed = gradients_under("float32"), gradients_under("mixed_bfloat16")
    # The longest chain of bfloat16 roundings, to the conv kernel's gradient:
    # forward, the input and kernel casts, conv, bias cast, bias add, batch
    # norm, dense kernel cast, matmul, bias cast, bias add (10); backward, the
    # logits' gradient cast, the dense input gradient, the batch-norm input
    # gradient and the filter gradient (4). Each is off by at most U of its
    # value; relative to a whole gradient's norm they add up to 14 U at most
    # (the network's gradients are not ill-conditioned: no cancellation).
    allowed = 14 * U
    for name, value in exact.items():
        error = np.linalg.norm(mixed[name] - value) / np.linalg.norm(value)
        assert error <= allowed, f"{name}: relative error {error} > {allowed}"
        assert mixed[name].dtype == np.float32


# -- training -----------------------------------------------------------------------------

def digits():
    pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn "
                                          "(pip install 'towerflow[data]')")
    return get("digits")


def built_model(precision):
    recipe = digits()
    splits = recipe.load()
    pipeline = tf.data.Pipeline(splits.train.images, splits.train.labels, 64, seed=0)
    with tf.Graph().as_default(), training._policy(precision):
        model = training._build(recipe, splits, ["/cpu:0"], "auto",
                                {"seed": 0, "precision": precision},
                                pipeline.batches_per_epoch)
        names = {v.op.name for v in tf.global_variables()}
    pipeline.close()
    return model, names


def test_training_scales_the_loss_under_mixed_float16_only(no_gpu):
    bfloat16_model, bfloat16_names = built_model("mixed_bfloat16")
    float16_model, float16_names = built_model("mixed_float16")
    assert "loss_scale" not in bfloat16_model.step.metrics
    assert not any("loss_scale" in name for name in bfloat16_names), bfloat16_names
    assert "loss_scale" in float16_model.step.metrics
    assert "loss_scale" in float16_names


def test_the_cli_trains_with_mixed_bfloat16(tmp_path, no_gpu):
    digits()
    out = tmp_path / "result.json"
    assert cli.main(["train", "digits", "--cpu-towers", "1", "--precision", "mixed_bfloat16",
                     "--steps", "5", "--quiet", "--json-out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["precision"] == "mixed_bfloat16" and result["steps"] == 5
    assert np.isfinite(result["final_loss"])
    assert tf.mixed_precision.global_policy().name == "float32"    # restored afterwards


def test_mixed_bfloat16_digits_reaches_the_float32_accuracy(no_gpu):
    """The acceptance check: same recipe, seed and steps (8 epochs, 184 steps
    of 64) on one CPU tower; the test accuracies within 1 point."""
    accuracy = {}
    for precision in ("float32", "mixed_bfloat16"):
        result = training.fit(digits(), ["/cpu:0"], seed=0, quiet=True,
                              precision=precision)
        assert result["steps"] == 184 and result["precision"] == precision
        accuracy[precision] = result["test_accuracy"]
    assert accuracy["float32"] >= 0.97
    assert abs(accuracy["mixed_bfloat16"] - accuracy["float32"]) <= 0.01, accuracy
