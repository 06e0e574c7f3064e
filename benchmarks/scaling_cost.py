"""The cost model of benchmarks/scaling_model.py: what a cluster is (Cluster, the
H100 cluster the script scales on, NCCL's latencies), the alpha-beta all-reduce
times (ring, tree, hierarchical across nodes), the gradient buckets, and the step
time and efficiency with and without overlap. The formulas and assumptions are
in the script's docstring and docs/guides/scaling-model.md.

It is apart from the script because it is pure arithmetic over a profile (per-
layer FLOPs and gradients, counted in scaling_model.py) and a Cluster: no graph,
no published figures, no report, so that tests/test_scaling_model.py can check
each formula against values worked out by hand."""

import dataclasses
import math

from towerflow.parallel import buckets as towerflow_buckets

TARGET_EFFICIENCY = 0.9

# NCCL's own latency model, src/graph/tuning.cc of recent releases, Simple protocol
# (the one NCCL picks for megabyte buckets): baseLat 8.4 us per call; hwLat per ring
# step 3.4 us over NVLink, 14 us over the network (ring and tree alike).
NCCL_BASE_LATENCY = 8.4e-6
NCCL_NVLINK_STEP = 3.4e-6
NCCL_NET_STEP = 14e-6


@dataclasses.dataclass(frozen=True)
class Cluster:
    """A machine to scale on: what one GPU computes and how GPUs talk."""
    name: str
    peak_flops: float            # dense FLOP/s of the precision trained in
    utilisation: float           # fraction of peak the network's layers reach
    gpus_per_node: int
    intra_bus_bw: float          # bytes/s: NCCL all-reduce bus bandwidth inside a node
    inter_node_bw: float         # bytes/s: one node's network bandwidth, all its NICs
    sources: tuple               # where each number comes from
    base_latency: float = NCCL_BASE_LATENCY
    intra_step_latency: float = NCCL_NVLINK_STEP
    inter_step_latency: float = NCCL_NET_STEP

    @property
    def rate(self):
        return self.peak_flops * self.utilisation


H100 = Cluster(
    name="H100 SXM, 8 per node, NVLink 4 + 8 x 400 Gb/s InfiniBand NDR",
    peak_flops=989e12, utilisation=0.11, gpus_per_node=8,
    intra_bus_bw=370e9, inter_node_bw=8 * 48e9,
    sources=(
        ("peak: H100 SXM dense BF16 tensor-core rate, 989 TFLOP/s (NVIDIA H100 datasheet; "
         "1,979 is with sparsity)"),
        ("utilisation 0.11 (assumed): an A100 trains ResNet-50 at ~2,600 images/s with AMP "
         "(pytorch-image-models issue #1491), 20 % of its 312 TFLOP/s; ResNet-50's batch norm "
         "and ReLU are memory-bound, so an H100 is taken as 3.35/2.04 (HBM bandwidth) times "
         "faster, ~4,300 images/s = 11 % of 989 TFLOP/s"),
        ("NVLink: NCCL ring all-reduce busBw 370 GB/s on 8 H100 (450 GB/s line rate less "
         "~20 % protocol overhead; NCCL's maintainer in NVIDIA/nccl-tests issue #212); "
         "NVLink SHARP's 480 GB/s is not modelled"),
        ("network: 48 GB/s per ConnectX-7 NIC at NDR 400 Gb/s (NVIDIA/nccl-tests issue #267), "
         "one NIC per GPU"),
        ("latencies: NCCL src/graph/tuning.cc, Simple protocol: 8.4 us per call, 3.4 us per "
         "NVLink ring step, 14 us per network step")))


# ----------------------------------------------------------------------------
# All-reduce: alpha-beta model

def ring_allreduce_time(nbytes, ranks, alpha, bus_bw):
    """Ring all-reduce: a reduce-scatter then an all-gather, p-1 steps each, every
    step moving n/p bytes per rank: 2(p-1) alpha + 2(p-1)/p n/B."""
    if ranks == 1:
        return 0.0
    return 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * nbytes / bus_bw


def tree_allreduce_time(nbytes, ranks, alpha, bus_bw):
    """Pipelined (double binary) tree all-reduce: a reduce up and a broadcast down,
    ceil(log2 p) steps each; every rank sends and receives n in each phase:
    2 ceil(log2 p) alpha + 2 n/B."""
    if ranks == 1:
        return 0.0
    return 2 * math.ceil(math.log2(ranks)) * alpha + 2 * nbytes / bus_bw


def ring_phase_time(nbytes, ranks, alpha, bus_bw):
    """A ring reduce-scatter (or all-gather): half a ring all-reduce."""
    return ring_allreduce_time(nbytes, ranks, alpha, bus_bw) / 2


def allreduce_time(nbytes, gpus, cluster, algorithm="best"):
    """Seconds for one all-reduce of ``nbytes`` over ``gpus`` GPUs of ``cluster``:
    a ring over NVLink inside one node; across nodes, reduce-scatter over NVLink,
    an inter-node ``ring`` or ``tree`` all-reduce of the node's data over its
    network, all-gather over NVLink (``best``: the faster of the two)."""
    if algorithm not in ("best", "ring", "tree"):
        raise ValueError(f"algorithm must be 'best', 'ring' or 'tree', got {algorithm!r}")
    if gpus == 1:
        return 0.0
    per_node = min(gpus, cluster.gpus_per_node)
    if gpus % per_node:
        raise ValueError(f"gpus must fill whole nodes of {cluster.gpus_per_node}, got {gpus}")
    nodes = gpus // per_node
    intra = 2 * ring_phase_time(nbytes, per_node, cluster.intra_step_latency,
                                cluster.intra_bus_bw)
    if nodes == 1:
        return cluster.base_latency + intra
    between = {"ring": ring_allreduce_time, "tree": tree_allreduce_time}
    if algorithm == "best":
        inter = min(f(nbytes, nodes, cluster.inter_step_latency, cluster.inter_node_bw)
                    for f in between.values())
    else:
        inter = between[algorithm](nbytes, nodes, cluster.inter_step_latency,
                                   cluster.inter_node_bw)
    return cluster.base_latency + intra + inter


def faster_algorithm(nbytes, gpus, cluster):
    if gpus <= cluster.gpus_per_node:
        return "ring (NVLink)" if gpus > 1 else "-"
    ring, tree = (allreduce_time(nbytes, gpus, cluster, a) for a in ("ring", "tree"))
    return "ring" if ring <= tree else "tree"


# ----------------------------------------------------------------------------
# Step time: compute, buckets, overlap

def gradient_buckets(profile, bucket_bytes):
    """towerflow's buckets over the gradients in the order backward produces them
    (last layer first): per bucket, its bytes and the index (in backward order)
    of the layer whose backward pass completes it."""
    backward = [(position, var) for position, layer in enumerate(reversed(profile.layers))
                for var in layer.variables]
    plan = towerflow_buckets.plan_buckets([var for _, var in backward], bucket_bytes)
    return [(sum(backward[i][1].shape.num_elements() * backward[i][1].dtype.size
                 for i in bucket),
             max(backward[i][0] for i in bucket)) for bucket in plan]


def step_time(profile, batch, gpus, cluster, bucket_bytes, overlap, algorithm="best"):
    """Seconds per training step on each GPU (``batch`` samples per GPU)."""
    forward = profile.forward_flops * batch / cluster.rate
    backward_layers = [layer.backward_flops * batch / cluster.rate
                       for layer in reversed(profile.layers)]
    done = [forward + t for t in _running_sum(backward_layers)]   # end of each layer's backward
    compute_end = done[-1] if done else forward
    end = compute_end if not overlap else forward
    for nbytes, last_layer in gradient_buckets(profile, bucket_bytes):
        ready = done[last_layer] if overlap else compute_end
        end = max(ready, end) + allreduce_time(nbytes, gpus, cluster, algorithm)
    return max(compute_end, end)


def _running_sum(values):
    total, out = 0.0, []
    for value in values:
        total += value
        out.append(total)
    return out


def efficiency(profile, batch, gpus, cluster, bucket_bytes, overlap, baseline_gpus=1,
               algorithm="best"):
    base = step_time(profile, batch, baseline_gpus, cluster, bucket_bytes, overlap, algorithm)
    return base / step_time(profile, batch, gpus, cluster, bucket_bytes, overlap, algorithm)


def batch_below_target(profile, gpus, cluster, bucket_bytes, overlap, largest=1 << 16):
    """The largest per-GPU batch whose efficiency at ``gpus`` is under 90 %
    (0 when even batch 1 reaches it; None when no batch up to ``largest`` does).
    Efficiency grows with the batch: the compute grows, the all-reduces do not."""
    def reaches(batch):
        return efficiency(profile, batch, gpus, cluster, bucket_bytes,
                          overlap) >= TARGET_EFFICIENCY
    if reaches(1):
        return 0
    if not reaches(largest):
        return None
    low, high = 1, largest          # low misses the target, high reaches it
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if reaches(middle) else (middle, high)
    return low
