"""A name TF 1.15 has and towerflow lacks, in any of towerflow's TF1
namespaces, raises ``AttributeError: towerflow has no tf.<namespace>.<name>
(not implemented; see the TF1 compatibility page)``: never Python's message
naming an internal module, and hasattr() stays False."""

import pytest

import towerflow as tf

# TF 1.15 names towerflow does not have, a few per namespace.
MISSING = {
    "tf": ["keras", "estimator", "saved_model", "distribute", "feature_column", "lite",
           "TensorArray", "scan", "foldl", "make_template", "string_join"],
    "tf.nn": ["ctc_loss", "conv3d", "raw_rnn", "max_pool_with_argmax"],
    "tf.nn.rnn_cell": ["ResidualWrapper", "DeviceWrapper"],
    "tf.layers": ["conv3d", "max_pooling3d", "separable_conv1d"],
    "tf.losses": ["mean_pairwise_squared_error"],
    "tf.train": ["Server", "ClusterSpec", "SyncReplicasOptimizer", "replica_device_setter"],
    "tf.image": ["decode_gif", "rot90", "rgb_to_grayscale"],
    "tf.data": ["Options"],
    "tf.data.experimental": ["parallel_interleave", "map_and_batch"],
    "tf.summary": ["audio", "summary_iterator"],
    "tf.metrics": ["auc", "mean_iou"],
    "tf.io": ["parse_sequence_example", "serialize_tensor", "decode_gif"],
    "tf.io.gfile": ["GFile_typo"],
    "tf.gfile": ["FastGFile_typo"],
    "tf.compat": ["v2", "forward_compatible"],
    "tf.logging": ["set_verbosity_typo"],
    "tf.app": ["main"],
    "tf.debugging": ["assert_shapes"],
    "tf.errors": ["raise_exception_on_not_ok_status"],
    "tf.config": ["threading", "optimizer"],
    "tf.config.experimental": ["enable_mlir_bridge"],
    "tf.test": ["TestCase", "main"],
    "tf.initializers": ["orthogonal", "glorot_uniform"],
    "tf.random": ["gamma", "poisson"],
    "tf.client": ["session"],
    "tf.contrib.layers": ["layer_norm", "embed_sequence"],
    "tf.contrib.rnn": ["LayerNormBasicLSTMCell", "AttentionCellWrapper"],
    "tf.contrib.framework": ["get_variables_to_restore"],
}


def _namespace(dotted):
    namespace = tf
    for part in dotted.split(".")[1:]:
        namespace = getattr(namespace, part)
    return namespace


@pytest.mark.parametrize("namespace,name", [(namespace, name) for namespace, names
                                            in MISSING.items() for name in names])
def test_a_missing_name_says_so(namespace, name):
    module = _namespace(namespace)
    assert not hasattr(module, name)
    with pytest.raises(AttributeError) as error:
        getattr(module, name)
    assert str(error.value) == (f"towerflow has no {namespace}.{name} (not implemented; "
                                "see the TF1 compatibility page)")


def test_tf_compat_v1_is_towerflow_so_its_missing_names_are_tfs():
    with pytest.raises(AttributeError, match=r"^towerflow has no tf.nn.ctc_loss \(not"):
        tf.compat.v1.nn.ctc_loss  # noqa: B018


def test_a_name_that_is_not_tfs_at_all_says_the_same():
    with pytest.raises(AttributeError, match=r"^towerflow has no tf.layers.dence \(not "):
        tf.layers.dence  # noqa: B018


def test_present_names_are_untouched():
    assert tf.nn.relu is not None and tf.random.normal is tf.random_normal
    assert tf.data.experimental.AUTOTUNE is not None
    assert tf.initializers.he_normal is not None
    assert getattr(tf.nn, "ctc_loss", "default") == "default"
    from towerflow.train import saver  # a submodule still imports through __getattr__
    assert saver.Saver is tf.train.Saver
