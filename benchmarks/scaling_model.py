"""Scaling on paper: predicted step time and scaling efficiency of data-parallel
training on 1 to 4,096 GPUs (8 per node, NVLink inside a node, InfiniBand
between nodes), for the cifar10 recipe's network, ResNet-50 and Inception V3, as
a table, JSON and a PNG plot, beside published Horovod and Goyal et al. figures.

    python benchmarks/scaling_model.py [--out benchmarks/results/scaling_model]
        [--cifar-batch 256] [--resnet-batch 128] [--inception-batch 128] [--bucket-mb 4]

It is a model, not a measurement. What it counts and what it assumes:

- Counted from towerflow graphs: per-layer forward and backward FLOPs (the
  Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter and MatMul ops that the
  variables' gradients need, in the graph tf.gradients builds) and parameter
  bytes. The cifar10 network is the recipe's own (towerflow.recipes.cifar10);
  ResNet-50 v1.5, ResNet-101 and Inception V3 are built with tf.layers in
  scaling_networks.py.
- Counted by towerflow's own bucketing: gradient buckets are
  towerflow.parallel.buckets.plan_buckets over the gradients in the order the
  backward pass produces them.
- Assumed: the GPU compute rate (peak x utilisation), the all-reduce
  latencies and bus bandwidths (each Cluster's sources say where each comes
  from: H100's in scaling_cost.py, the published runs' below),
  that compute runs at the same rate with or without concurrent all-reduces,
  and that nothing else (input pipeline, stragglers, optimizer update, elementwise
  layers beyond what the utilisation absorbs) costs time.

All-reduce of n bytes, alpha-beta model (alpha: latency per step, B: bus
bandwidth in NCCL's sense, so that NCCL's measured busBw can be used as B):

    ring over p ranks:  2(p-1) alpha + 2(p-1)/p * n/B   (Patarasuk & Yuan 2009)
    tree over p ranks:  2 ceil(log2 p) alpha + 2 n/B     (pipelined double binary
                                                          tree, Sanders et al. 2009;
                                                          NCCL 2.4's inter-node tree)

Across nodes the all-reduce is hierarchical, as Horovod's hierarchical
all-reduce: a reduce-scatter over NVLink inside each node, an all-reduce of each
GPU's 1/g shard between nodes (ring or tree, each GPU on its own NIC rail, so
the node's g shards share the node's network bandwidth), an all-gather over
NVLink; each bucket takes the faster of ring and tree, as NCCL's tuner does.

Step time: forward + backward at the compute rate, plus the all-reduces either
after the whole backward pass (no overlap) or bucket by bucket as soon as a
bucket's last gradient exists, one all-reduce at a time in bucket order
(overlap). Efficiency at p GPUs, fixed batch per GPU (weak scaling): step time
of the baseline (1 GPU, or the published baseline) over the step time at p.

These formulas are computed in scaling_cost.py; this script counts the networks,
sets up the published comparisons and writes the report.

The plot needs matplotlib (``pip install 'towerflow[plot]'``); without it the
table and JSON are still written.
"""

import argparse
import dataclasses
import json
import os
import platform
import time

from scaling_cost import (
    H100,
    TARGET_EFFICIENCY,
    Cluster,
    allreduce_time,
    batch_below_target,
    efficiency,
    faster_algorithm,
    gradient_buckets,
    step_time,
)
from scaling_networks import NETWORKS

import towerflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
GPU_COUNTS = tuple(2 ** k for k in range(13))          # 1 .. 4,096
MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer's share of a training step, per sample."""
    name: str
    forward_flops: int
    backward_flops: int
    variables: tuple             # its trainable variables (their gradients are bucketed)

    @property
    def parameters(self):
        return sum(v.shape.num_elements() for v in self.variables)


@dataclasses.dataclass(frozen=True)
class Profile:
    """Per-layer FLOPs and gradients of a network, layers in forward order."""
    name: str
    layers: tuple

    @property
    def forward_flops(self):
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def backward_flops(self):
        return sum(layer.backward_flops for layer in self.layers)

    @property
    def parameters(self):
        return sum(layer.parameters for layer in self.layers)

    @property
    def gradient_bytes(self):
        return sum(v.shape.num_elements() * v.dtype.size
                   for layer in self.layers for v in layer.variables)


# ----------------------------------------------------------------------------
# Per-layer FLOPs from the graph

def op_flops(op):
    """FLOPs (2 x multiply-adds) of one convolution or matrix product op of a
    batch-1 graph; 0 for every other op (elementwise ops are left to the
    utilisation)."""
    if op.type in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
        return _conv_flops(op)
    if op.type == "MatMul":
        a = op.inputs[0].shape.as_list()
        inner = a[0] if op.attrs.get("transpose_a") else a[-1]
        rows, columns = op.outputs[0].shape.as_list()
        return 2 * rows * columns * inner
    return 0


def _conv_flops(op):
    """Every one of the three convolutions of a layer costs as many multiply-adds
    as the forward one: one per output element per filter tap and input channel."""
    if op.type == "Conv2D":
        out_elements = op.outputs[0].shape.num_elements()
        kh, kw, in_channels, _ = op.inputs[1].shape.as_list()
    else:           # the output gradient (out_backprop) is the last input of both
        out_elements = op.inputs[-1].shape.num_elements()
        filter_shape = op.attrs.get("filter_shape") or op.inputs[1].shape.as_list()
        kh, kw, in_channels, _ = filter_shape
    return 2 * out_elements * kh * kw * in_channels


def profile_network(name, build_logits=None, input_shape=None):
    """Build the network on one sample, its gradients with tf.gradients, and
    count per layer the FLOPs of the forward ops and of the backward ops the
    variables' gradients need (the ops a Session would run)."""
    if build_logits is None:
        build_logits, input_shape = NETWORKS[name]
    graph = tf.Graph()
    with graph.as_default():
        images = tf.placeholder(tf.float32, (1,) + tuple(input_shape))
        loss = tf.reduce_sum(build_logits(images))
        forward_ops = list(graph.get_operations())
        variables = tf.trainable_variables()
        gradients = tf.gradients(loss, variables)
    needed = _ancestors([grad.op for grad in gradients])
    backward_ops = [op for op in graph.get_operations()[len(forward_ops):] if op in needed]
    return Profile(name, _layers(forward_ops, backward_ops, variables))


def _ancestors(ops):
    seen, stack = set(), list(ops)
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(t.op for t in op.inputs)
            stack.extend(op.control_inputs)
    return seen


def _layers(forward_ops, backward_ops, variables):
    """Layers named by their ops' scope (``conv2d_3/Conv2D`` and
    ``conv2d_3/kernel`` are layer ``conv2d_3``), in the order the forward pass
    creates them; a gradient op belongs to the forward op it is colocated with."""
    order = {op: index for index, op in enumerate(forward_ops)}
    found = {}

    def layer(scope, position):
        entry = found.setdefault(scope, {"at": position, "forward": 0, "backward": 0,
                                         "variables": []})
        entry["at"] = min(entry["at"], position)
        return entry

    for var in variables:
        layer(_scope(var.op), order[var.op])["variables"].append(var)
    for op in forward_ops:
        if op_flops(op):
            layer(_scope(op), order[op])["forward"] += op_flops(op)
    for op in backward_ops:
        if op_flops(op):
            forward = op.attrs["_colocate_with"]
            layer(_scope(forward), order[forward])["backward"] += op_flops(op)
    return tuple(Layer(scope, entry["forward"], entry["backward"], tuple(entry["variables"]))
                 for scope, entry in sorted(found.items(), key=lambda item: item[1]["at"]))


def _scope(op):
    return op.name.rsplit("/", 1)[0] if "/" in op.name else op.name




# ----------------------------------------------------------------------------
# The published figures and the clusters they ran on

def goyal_cluster(resnet50):
    """Goyal et al. 2017: Big Basin servers, 8 P100 (SXM2, NVLink), one Mellanox
    ConnectX-4 50 Gbit Ethernet NIC per server. Their own figure: a P100's
    backward pass of ResNet-50 takes 120 ms for 32 images, which sets the
    utilisation (fp32 peak 10.6 TFLOP/s)."""
    peak = 10.6e12
    utilisation = resnet50.backward_flops * 32 / 0.120 / peak
    return Cluster(
        name="Goyal et al.: 8 x P100 (NVLink) per server, 50 Gbit Ethernet",
        peak_flops=peak, utilisation=utilisation, gpus_per_node=8,
        intra_bus_bw=66e9, inter_node_bw=6.0e9,
        sources=(
            ("hardware: Goyal et al., 'Accurate, Large Minibatch SGD: Training ImageNet in "
             "1 Hour' (arXiv:1706.02677), section 5: Big Basin, 8 P100 with NVLink, "
             "ConnectX-4 50 Gbit Ethernet"),
            (f"utilisation {utilisation:.2f}: their 120 ms backward pass for 32 images on a "
             "P100 (fp32 peak 10.6 TFLOP/s), with this script's backward FLOP count"),
            ("NVLink (assumed): 66 GB/s, a P100's 4 NVLink 1 links x 20 GB/s at the 82 % NCCL "
             "reaches on H100's NVLink"),
            ("network (assumed): 6.0 GB/s, 96 % of 50 Gb/s (NCCL's maintainers count 24 GB/s "
             "per 200 Gb/s NIC, NVIDIA/nccl-tests issue #119); their Gloo over TCP may do "
             "less"),
            ("latencies: NCCL's model (they used Gloo's recursive halving and doubling "
             "between servers; the bandwidth term is the same)")))


def horovod_cluster(p100):
    """Horovod's benchmark: 128 servers with 4 Pascal GPUs each, RoCE-capable
    25 Gbit/s network (horovod docs/benchmarks)."""
    return Cluster(
        name="Horovod: 4 x Pascal (P100 PCIe assumed) per server, 25 Gbit/s RoCE",
        peak_flops=9.3e12, utilisation=p100.utilisation, gpus_per_node=4,
        intra_bus_bw=10e9, inter_node_bw=3.0e9,
        sources=(
            ("hardware: Horovod's docs (docs/benchmarks): '128 servers with 4 Pascal GPUs "
             "each connected by RoCE-capable 25 Gbit/s network'; 90 % scaling efficiency "
             "for Inception V3 and ResNet-101, 68 % for VGG-16, at 512 GPUs"),
            ("GPU (assumed): P100 PCIe, fp32 peak 9.3 TFLOP/s, the utilisation of Goyal et al.'s "
             "P100"),
            ("PCIe inside a server (assumed): 10 GB/s all-reduce bus bandwidth"),
            ("network (assumed): 3.0 GB/s, 96 % of 25 Gb/s"),
            ("batch 64 per GPU: the tf_cnn_benchmarks command in Horovod's docs; buckets of "
             "64 MB: Horovod's Tensor Fusion threshold")))


def published_comparisons(profiles):
    goyal = goyal_cluster(profiles["resnet50"])
    horovod = horovod_cluster(goyal)
    cases = [
        {"source": "Goyal et al. 2017 (ImageNet in 1 hour)", "network": "resnet50",
         "cluster": goyal, "gpus": 256, "baseline_gpus": 8, "batch": 32,
         "bucket_bytes": 4 * MIB, "published_efficiency": 0.90,
         "published": "~90 % scaling efficiency from 8 to 256 GPUs, batch 8k (32 per GPU)"},
        {"source": "Horovod (Sergeev & Del Balso 2018; horovod docs)", "network": "resnet101",
         "cluster": horovod, "gpus": 512, "baseline_gpus": 1, "batch": 64,
         "bucket_bytes": 64 * MIB, "published_efficiency": 0.90,
         "published": "90 % scaling efficiency at 512 GPUs for ResNet-101 (and Inception V3)"},
        {"source": "Horovod (Sergeev & Del Balso 2018; horovod docs)", "network": "inception3",
         "cluster": horovod, "gpus": 512, "baseline_gpus": 1, "batch": 64,
         "bucket_bytes": 64 * MIB, "published_efficiency": 0.90,
         "published": "90 % scaling efficiency at 512 GPUs for Inception V3 (and ResNet-101)"},
    ]
    for case in cases:
        profile, cluster = profiles[case["network"]], case["cluster"]
        for overlap in (False, True):
            case["model_no_overlap" if not overlap else "model_overlap"] = efficiency(
                profile, case["batch"], case["gpus"], cluster, case["bucket_bytes"], overlap,
                case["baseline_gpus"])
        case["curve"] = [
            {"gpus": gpus, **{mode: efficiency(profile, case["batch"], gpus, cluster,
                                               case["bucket_bytes"], mode == "overlap",
                                               case["baseline_gpus"])
                              for mode in ("no_overlap", "overlap")}}
            for gpus in GPU_COUNTS if case["baseline_gpus"] <= gpus <= case["gpus"]
            and (gpus <= cluster.gpus_per_node or gpus % cluster.gpus_per_node == 0)]
    return cases


# ----------------------------------------------------------------------------
# Table, JSON, plot

def scaling_rows(profile, batch, cluster, bucket_bytes):
    rows = []
    for gpus in GPU_COUNTS:
        compute = (profile.forward_flops + profile.backward_flops) * batch / cluster.rate
        sizes = [nbytes for nbytes, _ in gradient_buckets(profile, bucket_bytes)]
        total_allreduce = sum(allreduce_time(nbytes, gpus, cluster) for nbytes in sizes)
        rows.append({
            "network": profile.name, "gpus": gpus,
            "nodes": max(1, gpus // cluster.gpus_per_node), "batch_per_gpu": batch,
            "compute_ms": 1e3 * compute, "allreduce_ms": 1e3 * total_allreduce,
            "algorithm": faster_algorithm(max(sizes), gpus, cluster),   # of the largest bucket
            "step_ms_no_overlap": 1e3 * step_time(profile, batch, gpus, cluster,
                                                  bucket_bytes, False),
            "step_ms_overlap": 1e3 * step_time(profile, batch, gpus, cluster, bucket_bytes, True),
            "efficiency_no_overlap": efficiency(profile, batch, gpus, cluster, bucket_bytes,
                                                False),
            "efficiency_overlap": efficiency(profile, batch, gpus, cluster, bucket_bytes, True),
            "efficiency_overlap_ring_only": efficiency(profile, batch, gpus, cluster,
                                                       bucket_bytes, True, algorithm="ring"),
            "efficiency_overlap_tree_only": efficiency(profile, batch, gpus, cluster,
                                                       bucket_bytes, True, algorithm="tree"),
        })
    return rows


def network_summary(profile, bucket_bytes):
    return {
        "forward_flops_per_sample": profile.forward_flops,
        "forward_multiply_adds_per_sample": profile.forward_flops // 2,
        "step_flops_per_sample": profile.forward_flops + profile.backward_flops,
        "parameters": profile.parameters,
        "gradient_bytes": profile.gradient_bytes,
        "buckets_bytes": [nbytes for nbytes, _ in gradient_buckets(profile, bucket_bytes)],
        "layers": [{"name": layer.name, "forward_flops": layer.forward_flops,
                    "backward_flops": layer.backward_flops, "parameters": layer.parameters}
                   for layer in profile.layers],
    }


def print_tables(profiles, rows, thresholds, cases):
    for name, profile in profiles.items():
        print(f"{name}: {profile.forward_flops / 2e9:.3f} G multiply-adds forward per sample, "
              f"{profile.parameters:,} parameters ({profile.gradient_bytes / 1e6:.1f} MB of "
              f"float32 gradients), {len(profile.layers)} layers")
    print(f"\n{H100.name}; compute {H100.rate / 1e12:.0f} TFLOP/s per GPU "
          f"({H100.utilisation:.0%} of {H100.peak_flops / 1e12:.0f})")
    print(f"{'network':>10} {'GPUs':>5} {'batch':>5} {'compute ms':>10} {'all-red ms':>10} "
          f"{'inter-node':>13} {'step no-ovl':>11} {'step ovl':>9} {'eff no-ovl':>10} "
          f"{'eff ovl':>8}")
    for row in rows:
        print(f"{row['network']:>10} {row['gpus']:>5} {row['batch_per_gpu']:>5} "
              f"{row['compute_ms']:>10.2f} {row['allreduce_ms']:>10.2f} {row['algorithm']:>13} "
              f"{row['step_ms_no_overlap']:>11.2f} {row['step_ms_overlap']:>9.2f} "
              f"{row['efficiency_no_overlap']:>10.1%} {row['efficiency_overlap']:>8.1%}")
    print("\nlargest batch per GPU still under 90 % efficiency (0: none):")
    for entry in thresholds:
        print(f"  {entry['network']:>10} on {entry['gpus']:>4} GPUs: no overlap "
              f"{entry['no_overlap']}, overlap {entry['overlap']}")
    print("\nagainst published figures:")
    for case in cases:
        print(f"  {case['source']}: {case['network']} on {case['gpus']} GPUs (vs "
              f"{case['baseline_gpus']}), batch {case['batch']} per GPU: published "
              f"{case['published_efficiency']:.0%}, model {case['model_no_overlap']:.1%} "
              f"without overlap, {case['model_overlap']:.1%} with")


def plot(result, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'towerflow[plot]')")
        return
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    _plot_gpus(axes[0], result)
    _plot_batches(axes[1], result)
    _plot_published(axes[2], result)
    figure.suptitle("towerflow scaling model (a model, not a measurement): "
                    f"{H100.name}, {time.strftime('%Y-%m-%d', time.gmtime())}",
                    fontsize="medium")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    print(f"wrote {path}")


NETWORK_COLOURS = {"cifar10": "tab:blue", "resnet50": "tab:red", "inception3": "tab:orange"}


def _plot_gpus(axes, result):
    colours = NETWORK_COLOURS
    for name, colour in colours.items():
        rows = [row for row in result["rows"] if row["network"] == name]
        gpus = [row["gpus"] for row in rows]
        batch = rows[0]["batch_per_gpu"]
        axes.plot(gpus, [row["efficiency_overlap"] for row in rows], "o-", color=colour,
                  label=f"{name}, batch {batch}/GPU, overlap")
        axes.plot(gpus, [row["efficiency_no_overlap"] for row in rows], "s--", color=colour,
                  label=f"{name}, no overlap", alpha=0.7)
        axes.plot(gpus, [row["efficiency_overlap_ring_only"] for row in rows], ":",
                  color=colour, label=f"{name}, overlap, ring only", alpha=0.7)
    _efficiency_axes(axes, "GPUs (8 per node)", "efficiency vs. GPUs")
    axes.set_xscale("log", base=2)


def _plot_batches(axes, result):
    gpus = result["batch_sweep_gpus"]
    colours = NETWORK_COLOURS
    for name, colour in colours.items():
        sweep = result["batch_sweep"][name]
        batches = [point["batch"] for point in sweep]
        axes.plot(batches, [point["overlap"] for point in sweep], "o-", color=colour,
                  label=f"{name}, overlap")
        axes.plot(batches, [point["no_overlap"] for point in sweep], "s--", color=colour,
                  label=f"{name}, no overlap", alpha=0.7)
    _efficiency_axes(axes, "batch per GPU", f"efficiency vs. batch on {gpus} GPUs")
    axes.set_xscale("log", base=2)


def _plot_published(axes, result):
    colours = ("tab:green", "tab:purple", "tab:brown")
    # Horovod's two networks share one published point: each later star is drawn
    # smaller, so that the earlier one still shows around it
    sizes = (18, 18, 11)
    for case, colour, size in zip(result["published"], colours, sizes):
        gpus = [point["gpus"] for point in case["curve"]]
        label = f"{case['network']} ({case['source'].split(' (')[0]})"
        axes.plot(gpus, [point["overlap"] for point in case["curve"]], "o-", color=colour,
                  label=f"model, overlap: {label}")
        axes.plot(gpus, [point["no_overlap"] for point in case["curve"]], "s--",
                  color=colour, alpha=0.7, label="model, no overlap")
        axes.plot([case["gpus"]], [case["published_efficiency"]], "*", color=colour,
                  markersize=size, markeredgecolor="black", label="published")
    _efficiency_axes(axes, "GPUs", "model against published figures")
    axes.set_xscale("log", base=2)


def _efficiency_axes(axes, xlabel, title):
    axes.axhline(TARGET_EFFICIENCY, color="grey", linewidth=0.6)
    axes.set(xlabel=xlabel, ylabel="scaling efficiency", title=title, ylim=(0, 1.05))
    axes.legend(fontsize="x-small", loc="lower left")
    axes.grid(alpha=0.3)


def run(args):
    profiles = {name: profile_network(name) for name in NETWORKS}
    bucket_bytes = int(args.bucket_mb * MIB)
    batches = {"cifar10": args.cifar_batch, "resnet50": args.resnet_batch,
               "inception3": args.inception_batch}
    rows = [row for name, batch in batches.items()
            for row in scaling_rows(profiles[name], batch, H100, bucket_bytes)]
    thresholds = [{"network": name, "gpus": gpus,
                   **{mode: batch_below_target(profiles[name], gpus, H100, bucket_bytes,
                                               mode == "overlap")
                      for mode in ("no_overlap", "overlap")}}
                  for name in batches for gpus in (64, 512, 4096)]
    sweep_gpus = GPU_COUNTS[-1]
    sweep = {name: [{"batch": batch, **{mode: efficiency(profiles[name], batch, sweep_gpus,
                                                         H100, bucket_bytes,
                                                         mode == "overlap")
                                        for mode in ("no_overlap", "overlap")}}
                    for batch in (2 ** k for k in range(11))]
             for name in batches}
    cases = published_comparisons(profiles)
    print_tables({name: profiles[name] for name in profiles}, rows, thresholds, cases)
    return {
        "benchmark": "scaling_model",
        "note": "a model, not a measurement: FLOPs and parameters are counted from "
                "towerflow graphs, buckets by towerflow's plan_buckets; compute rates, "
                "bandwidths and latencies are assumed (see clusters' sources)",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "bucket_bytes": bucket_bytes,
        "cluster": _cluster_json(H100),
        "networks": {name: network_summary(profile, bucket_bytes)
                     for name, profile in profiles.items()},
        "rows": rows,
        "batch_below_90_percent": thresholds,
        "batch_sweep_gpus": sweep_gpus,
        "batch_sweep": sweep,
        "published": [{**{k: v for k, v in case.items() if k != "cluster"},
                       "cluster": _cluster_json(case["cluster"])} for case in cases],
        "python": platform.python_version(),
    }


def _cluster_json(cluster):
    return {**dataclasses.asdict(cluster), "rate_flops": cluster.rate}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "results", "scaling_model"),
                        help="path without extension: writes OUT.json and OUT.png")
    parser.add_argument("--cifar-batch", type=int, default=256,
                        help="batch per GPU of the cifar10 network (the recipe's default "
                             "batch)")
    parser.add_argument("--resnet-batch", type=int, default=128, help="batch per GPU of ResNet-50")
    parser.add_argument("--inception-batch", type=int, default=128,
                        help="batch per GPU of Inception V3")
    parser.add_argument("--bucket-mb", type=float, default=4.0,
                        help="gradient bucket size in MiB (DataParallel's default 4)")
    args = parser.parse_args(argv)
    result = run(args)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".json", "w") as out:
        json.dump(result, out, indent=2)
    print(f"wrote {args.out}.json")
    plot(result, args.out + ".png")
    return result


if __name__ == "__main__":
    main()
