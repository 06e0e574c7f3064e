"""What benchmarks/scaling_model.py predicts rests on: the alpha-beta all-reduce
formulas (against values worked out by hand), its limits (one GPU costs no
communication; efficiency never rises with more GPUs at a fixed batch per GPU),
FLOP and parameter counts from real graphs (a tiny network counted by hand,
the cifar10 recipe's network, ResNet-50 and Inception V3 against their
published totals), and the script writing its JSON and PNG quickly."""

import itertools
import json
import math
import os
import subprocess
import sys

import pytest

import towerflow as tf

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)

import scaling_cost as cost
import scaling_model as sm

MB = 1e6
GB = 1e9
US = 1e-6


def test_ring_allreduce_is_2_p_minus_1_latencies_and_2_p_minus_1_over_p_of_the_data():
    # 100 MB over 4 ranks at 10 GB/s, 10 us a step: 6 steps, 1.5 x 100 MB / 10 GB/s
    assert cost.ring_allreduce_time(100 * MB, 4, 10 * US, 10 * GB) == pytest.approx(
        6 * 10e-6 + 0.015, rel=1e-12)
    # 2 ranks: each sends half the data twice, n/B in all
    assert cost.ring_allreduce_time(8 * MB, 2, 5 * US, 4 * GB) == pytest.approx(
        2 * 5e-6 + 8e6 / 4e9, rel=1e-12)


def test_tree_allreduce_is_2_log2_p_latencies_and_twice_the_data():
    assert cost.tree_allreduce_time(100 * MB, 8, 10 * US, 10 * GB) == pytest.approx(
        6 * 10e-6 + 0.02, rel=1e-12)
    # a tree over 5 ranks is 3 deep: ceil(log2 5)
    assert cost.tree_allreduce_time(1 * MB, 5, 10 * US, 10 * GB) == pytest.approx(
        6 * 10e-6 + 2e6 / 10e9, rel=1e-12)


def test_ring_wins_on_large_data_over_few_ranks_and_tree_on_small_data_over_many():
    alpha, bus = 14 * US, 384 * GB
    # ring: 3/2 of the data on the wire against the tree's 2
    assert cost.ring_allreduce_time(100 * MB, 4, alpha, bus) < cost.tree_allreduce_time(
        100 * MB, 4, alpha, bus)
    # tree: 18 latencies against the ring's 1,022
    assert cost.tree_allreduce_time(1 * MB, 512, alpha, bus) < cost.ring_allreduce_time(
        1 * MB, 512, alpha, bus)


def small_cluster(**changes):
    values = {"name": "test", "peak_flops": 1e12, "utilisation": 0.5, "gpus_per_node": 4,
              "intra_bus_bw": 100 * GB, "inter_node_bw": 10 * GB, "sources": (),
              "base_latency": 5 * US, "intra_step_latency": 2 * US,
              "inter_step_latency": 20 * US}
    return cost.Cluster(**{**values, **changes})


def test_hierarchical_allreduce_by_hand():
    cluster, n = small_cluster(), 40 * MB
    # 16 GPUs = 4 nodes of 4. Inside a node: reduce-scatter + all-gather, each
    # 3 steps of 2 us and 3/4 of 40 MB at 100 GB/s.
    intra = 2 * (3 * 2e-6 + 0.75 * 40e6 / 100e9)
    ring = 2 * 3 * 20e-6 + 2 * 0.75 * 40e6 / 10e9         # ring over the 4 nodes
    tree = 2 * 2 * 20e-6 + 2 * 40e6 / 10e9                # tree over the 4 nodes
    assert cost.allreduce_time(n, 16, cluster, "ring") == pytest.approx(5e-6 + intra + ring)
    assert cost.allreduce_time(n, 16, cluster, "tree") == pytest.approx(5e-6 + intra + tree)
    assert cost.allreduce_time(n, 16, cluster) == pytest.approx(5e-6 + intra + min(ring, tree))
    # inside one node it is one NVLink ring
    assert cost.allreduce_time(n, 4, cluster) == pytest.approx(
        5e-6 + 2 * 3 * 2e-6 + 1.5 * 40e6 / 100e9)


def test_one_gpu_communicates_nothing():
    cluster = small_cluster()
    assert cost.ring_allreduce_time(100 * MB, 1, 1.0, 1.0) == 0
    assert cost.tree_allreduce_time(100 * MB, 1, 1.0, 1.0) == 0
    assert cost.allreduce_time(100 * MB, 1, cluster) == 0
    profile = sm.profile_network("tiny", tiny_logits, (8, 8, 3))
    compute = (profile.forward_flops + profile.backward_flops) * 32 / cluster.rate
    for overlap in (False, True):
        assert cost.step_time(profile, 32, 1, cluster, 1 << 20, overlap) == pytest.approx(compute)
        assert cost.efficiency(profile, 32, 1, cluster, 1 << 20, overlap) == 1.0


def test_gpus_that_do_not_fill_nodes_are_refused():
    with pytest.raises(ValueError, match="whole nodes of 4, got 6"):
        cost.allreduce_time(MB, 6, small_cluster())
    with pytest.raises(ValueError, match="'best', 'ring' or 'tree', got 'star'"):
        cost.allreduce_time(MB, 16, small_cluster(), "star")


@pytest.fixture(scope="module")
def profiles():
    return {name: sm.profile_network(name) for name in ("cifar10", "resnet50")}


@pytest.mark.parametrize("network", ["cifar10", "resnet50"])
@pytest.mark.parametrize("batch", [1, 32, 256])
def test_efficiency_never_rises_with_more_gpus_at_a_fixed_batch_per_gpu(profiles, network,
                                                                        batch):
    for algorithm in ("ring", "tree", "best"):
        for overlap in (False, True):
            curve = [cost.efficiency(profiles[network], batch, gpus, cost.H100, 4 << 20, overlap,
                                   algorithm=algorithm) for gpus in sm.GPU_COUNTS]
            assert curve[0] == 1.0
            assert all(later <= earlier for earlier, later in itertools.pairwise(curve)), curve


@pytest.mark.parametrize("network", ["cifar10", "resnet50"])
def test_overlap_never_costs_time_and_never_beats_the_compute(profiles, network):
    profile = profiles[network]
    compute = (profile.forward_flops + profile.backward_flops) * 64 / cost.H100.rate
    for gpus in (8, 64, 4096):
        hidden = cost.step_time(profile, 64, gpus, cost.H100, 4 << 20, overlap=True)
        exposed = cost.step_time(profile, 64, gpus, cost.H100, 4 << 20, overlap=False)
        assert compute <= hidden <= exposed


class Gradient:
    """What plan_buckets reads of a gradient: its shape and dtype."""
    def __init__(self, nbytes):
        self.shape, self.dtype = tf.TensorShape([nbytes // 4]), tf.float32


def test_buckets_all_reduce_one_at_a_time_as_soon_as_backward_completes_them():
    cluster = small_cluster(inter_node_bw=1 * GB)      # rate 5e11 FLOP/s
    # two layers of 1 ms forward, 2 ms backward and 4 MB of gradients each
    layers = tuple(sm.Layer(name, int(5e8), int(1e9), (Gradient(4_000_000),))
                   for name in ("first", "last"))
    profile = sm.Profile("hand", layers)
    allreduce = cost.allreduce_time(4_000_000, 16, cluster)
    assert allreduce > 2e-3          # longer than a layer's backward: the buckets queue
    # backward: "last" done at 4 ms, "first" at 6 ms; its bucket waits for the other's
    assert cost.step_time(profile, 1, 16, cluster, 4_000_000, overlap=True) == pytest.approx(
        4e-3 + allreduce + allreduce)
    assert cost.step_time(profile, 1, 16, cluster, 4_000_000, overlap=False) == pytest.approx(
        6e-3 + 2 * allreduce)
    # one bucket for both: ready at 6 ms either way
    assert cost.step_time(profile, 1, 16, cluster, 8_000_000, overlap=True) == pytest.approx(
        6e-3 + cost.allreduce_time(8_000_000, 16, cluster))


def tiny_logits(images):
    y = tf.layers.conv2d(images, 4, 3, strides=2, padding="same", use_bias=False)
    y = tf.layers.batch_normalization(y, training=True)
    y = tf.reduce_mean(tf.nn.relu(y), axis=[1, 2])
    return tf.layers.dense(y, 5)


def test_flops_of_a_tiny_network_counted_by_hand():
    profile = sm.profile_network("tiny", tiny_logits, (8, 8, 3))
    # conv: 4x4 outputs (stride 2, same) x 4 filters x 3x3x3 taps, 2 FLOPs each
    conv = 2 * 4 * 4 * 4 * 3 * 3 * 3
    dense = 2 * 4 * 5
    layers = {layer.name: layer for layer in profile.layers}
    assert list(layers) == ["conv2d", "batch_normalization", "dense"]
    assert (layers["conv2d"].forward_flops, layers["conv2d"].backward_flops) == (conv, conv)
    # the images need no gradient: the convolution's backward is its filter gradient only
    assert (layers["dense"].forward_flops, layers["dense"].backward_flops) == (dense, 2 * dense)
    assert (layers["batch_normalization"].forward_flops,
            layers["batch_normalization"].backward_flops) == (0, 0)
    assert [layer.parameters for layer in profile.layers] == [3 * 3 * 3 * 4, 2 * 4, 4 * 5 + 5]
    assert profile.gradient_bytes == 4 * (108 + 8 + 25)


def conv_flops(out_hw, window, in_channels, out_channels):
    return 2 * out_hw * out_hw * window * window * in_channels * out_channels


def test_cifar10_recipe_network_counted_from_its_graph(profiles):
    stem = conv_flops(32, 3, 3, 32)
    others = [conv_flops(32, 3, 32, 32), conv_flops(16, 3, 32, 32), conv_flops(16, 3, 32, 64),
              conv_flops(8, 3, 64, 64), conv_flops(8, 3, 64, 128), conv_flops(4, 3, 128, 128),
              2 * 128 * 10]
    profile = profiles["cifar10"]
    assert profile.forward_flops == stem + sum(others)
    assert profile.backward_flops == stem + 2 * sum(others)
    kernels = 27 * 32 + 9 * 32 * 32 * 2 + 9 * 32 * 64 + 9 * 64 * 64 + 9 * 64 * 128 \
        + 9 * 128 * 128 + 128 * 10
    batch_norm = 2 * (32 * 3 + 64 * 2 + 128 * 2)
    assert profile.parameters == kernels + batch_norm


def test_resnet50_matches_its_published_size(profiles):
    profile = profiles["resnet50"]
    assert profile.parameters == 25_557_032          # torchvision's resnet50, 25.6 M
    # ~4.1 G multiply-adds per 224x224 image (torchvision: 4.09 G for v1.5)
    assert profile.forward_flops / 2 == pytest.approx(4.09e9, rel=0.005)
    convolutions = [layer for layer in profile.layers if layer.name.startswith("conv2d")]
    assert len(convolutions) == 1 + 3 * 16 + 4       # stem, 16 bottlenecks, 4 projections
    assert profile.layers[-1].parameters == 2048 * 1000 + 1000


def test_inception3_matches_its_published_size():
    profile = sm.profile_network("inception3")           # ~0.2 s to build and count
    # Keras' InceptionV3 with its top: 23,851,784 parameters, of which 34,432 are not
    # trainable: the batch norms' moving mean and variance, 2 per channel. Its batch
    # norms have no gamma (scale=False), so their trainable part is beta, 1 per channel.
    batch_norms = [layer for layer in profile.layers
                   if layer.name.startswith("batch_normalization")]
    assert all(len(layer.variables) == 1 for layer in batch_norms)
    channels = sum(layer.parameters for layer in batch_norms)
    assert profile.parameters == 23_817_352          # Keras' "Trainable params"
    assert profile.parameters + 2 * channels == 23_851_784
    # torchvision's Inception_V3_Weights: 5.713 G multiply-adds per 299x299 image (its
    # "GFLOPS", counted in inference, where the auxiliary head does not run; none is
    # built here), to the last digit it gives
    assert profile.forward_flops / 2 == pytest.approx(5.713e9, abs=0.0005e9)
    convolutions = [layer for layer in profile.layers if layer.name.startswith("conv2d")]
    # stem 5; Mixed_5b-d 3 x 7; Mixed_6a 4; Mixed_6b-e 4 x 10; Mixed_7a 6; Mixed_7b-c 2 x 9
    assert len(convolutions) == 5 + 21 + 4 + 40 + 6 + 18 == 94
    assert profile.layers[-1].parameters == 2048 * 1000 + 1000


def test_buckets_are_towerflows_plan_in_backward_order(profiles):
    profile = profiles["resnet50"]
    planned = cost.gradient_buckets(profile, 4 << 20)
    assert sum(nbytes for nbytes, _ in planned) == profile.gradient_bytes
    # the first bucket: the classifier's kernel, the first gradient the backward pass
    # makes, alone (8 MB, over 4 MiB: a tensor larger than a bucket gets its own)
    assert planned[0] == (4 * 2048 * 1000, 0)
    finished = [layer for _, layer in planned]
    assert finished == sorted(finished) and finished[-1] == len(profile.layers) - 1
    # one bucket for everything: it is complete only when the backward pass is,
    # so overlap hides nothing
    whole = profile.gradient_bytes
    assert len(cost.gradient_buckets(profile, whole)) == 1
    assert cost.step_time(profile, 64, 512, cost.H100, whole, True) == pytest.approx(
        cost.step_time(profile, 64, 512, cost.H100, whole, False))


def test_batch_below_target_is_where_efficiency_crosses_90_percent(profiles):
    profile = profiles["resnet50"]
    for overlap in (False, True):
        batch = cost.batch_below_target(profile, 4096, cost.H100, 4 << 20, overlap)
        assert batch > 0
        assert cost.efficiency(profile, batch, 4096, cost.H100, 4 << 20, overlap) < 0.9
        assert cost.efficiency(profile, batch + 1, 4096, cost.H100, 4 << 20, overlap) >= 0.9


def test_the_script_writes_its_table_json_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "model"
    result = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "scaling_model.py"),
                             "--out", str(out)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert "against published figures" in result.stdout
    written = json.loads((out.with_suffix(".json")).read_text())
    assert (out.with_suffix(".png")).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {row["gpus"] for row in written["rows"]} == {2 ** k for k in range(13)}
    assert {row["network"] for row in written["rows"]} == {"cifar10", "resnet50", "inception3"}
    assert written["networks"]["resnet50"]["parameters"] == 25_557_032
    assert written["networks"]["resnet101"]["parameters"] == 44_549_160
    assert written["networks"]["inception3"]["parameters"] == 23_817_352
    published = {case["network"]: case for case in written["published"]}
    assert published["resnet50"]["gpus"] == 256 and published["resnet101"]["gpus"] == 512
    assert published["inception3"]["gpus"] == 512
    assert published["inception3"]["cluster"] == published["resnet101"]["cluster"]
    for case in published.values():
        assert 0 < case["model_no_overlap"] <= case["model_overlap"] <= 1
    assert all(math.isfinite(row["step_ms_overlap"]) for row in written["rows"])
