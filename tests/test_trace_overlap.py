"""The trace of an all-reduce that overlaps the backward pass (start and wait
ops, parallel/mpi_ops.py and parallel/nccl.py): each bucket's start ops joined
across towers or ranks to the one that started last, and each start joined to
its own wait; blocking collectives keep their arrows, and a blocking NCCL
all-reduce's members are joined though their names differ. Step stats made
here, so every time is known; tests/test_allreduce_overlap.py and
tests/test_nccl_overlap.py check real traces."""

import json

from towerflow.client import timeline
from towerflow.step_stats import DeviceStepStats, NodeExecStats, NodeOutput, StepStats

MPI = "allreduce/all_reduce_mpi/"
NCCL = "allreduce/all_reduce_nccl/"


def node(name, op, inputs, start, duration):
    return NodeExecStats(node_name=name, all_start_micros=start,
                         all_end_rel_micros=duration, output=[NodeOutput(slot=0)],
                         timeline_label=f"{name} = {op}({', '.join(inputs)})")


def mpi_rank(rank, starts, waits_at):
    """One rank's step: backward ops, each bucket's start (at ``starts``) and,
    after the backward pass, the waits from ``waits_at`` on."""
    nodes = [node("grad_1", "MatMul", [], 0, 5)]
    for bucket, start in enumerate(starts):
        nodes.append(node(f"{MPI}sum_{bucket}_start", "MpiAllReduceStart",
                          [f"grad_{bucket + 1}"], start, 2))
        nodes.append(node(f"grad_{bucket + 2}", "MatMul", [], start + 3, 10))
    for bucket in range(len(starts)):
        nodes.append(node(f"{MPI}sum_{bucket}", "MpiAllReduceWait",
                          [f"{MPI}sum_{bucket}_start"], waits_at + 4 * bucket, 3))
    device = f"rank {rank} /job:worker/replica:0/task:{rank}/device:CPU:0"
    stats = StepStats(dev_stats=[DeviceStepStats(device=device, node_stats=nodes)])
    return timeline.TracedRun(stats, step=1, rank=rank)


def trace_of(runs):
    text = timeline.Timeline.of_runs(runs).generate_chrome_trace_format()
    return json.loads(text)["traceEvents"]


def arrows(events):
    """Every flow as ((pid, µs, op node) of its start, the same of its end),
    checked to pair up by id and to bind to an op that starts or ends there."""
    ops = [e for e in events if e["ph"] == "X"]

    def at(event):
        (op,) = [o["args"]["name"] for o in ops if o["pid"] == event["pid"]
                 and o["tid"] == event["tid"] and event["ts"] in (o["ts"], o["ts"] + o["dur"])]
        return event["pid"], event["ts"], op
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "t"}
    assert starts.keys() == ends.keys() and starts
    return [(at(starts[key]), at(ends[key])) for key in starts]


def test_each_start_has_an_arrow_to_its_own_wait():
    # rank 1 starts bucket 0 last (15 > 10), rank 0 bucket 1 (32 > 29)
    events = trace_of([mpi_rank(0, [10, 32], 60), mpi_rank(1, [15, 29], 62)])
    pairs = arrows(events)
    to_waits = [(source, target) for source, target in pairs if target[2].endswith(
        ("sum_0", "sum_1"))]
    assert sorted(to_waits) == [
        ((0, 12, f"{MPI}sum_0_start"), (0, 60, f"{MPI}sum_0")),
        ((0, 34, f"{MPI}sum_1_start"), (0, 64, f"{MPI}sum_1")),
        ((1, 17, f"{MPI}sum_0_start"), (1, 62, f"{MPI}sum_0")),
        ((1, 31, f"{MPI}sum_1_start"), (1, 66, f"{MPI}sum_1"))]
    assert all(source[1] <= target[1] for source, target in pairs)      # none backwards


def test_a_buckets_starts_are_joined_across_ranks_to_the_last_and_no_other():
    events = trace_of([mpi_rank(0, [10, 32], 60), mpi_rank(1, [15, 29], 62)])
    across = [(source, target) for source, target in arrows(events)
              if source[0] != target[0]]
    assert sorted(across) == [
        ((0, 10, f"{MPI}sum_0_start"), (1, 15, f"{MPI}sum_0_start")),
        ((1, 29, f"{MPI}sum_1_start"), (0, 32, f"{MPI}sum_1_start"))]
    names = {e["id"]: e["name"] for e in events if e["ph"] == "s"}
    assert {names[key] for key in names} >= {f"{MPI}sum_0", f"{MPI}sum_1"}


def test_one_rank_alone_has_no_arrow_between_starts():
    pairs = arrows(trace_of([mpi_rank(0, [10, 32], 60)]))
    assert all(target[2] in (f"{MPI}sum_0", f"{MPI}sum_1") for _, target in pairs)


def nccl_tower(tower, starts, waits_at):
    """One GPU tower of a process: its member of each NCCL bucket, started at
    ``starts``, with backward kernels between, waited for from ``waits_at``."""
    nodes = []
    for bucket, start in enumerate(starts):
        nodes.append(node(f"tower_{tower}/grad_{bucket}", "MatMul", [], start - 10, 9))
        nodes.append(node(f"{NCCL}sum_{bucket}_{tower}_start", "NcclAllReduceStart",
                          [f"tower_{tower}/grad_{bucket}"], start, 1))
    for bucket in range(len(starts)):
        nodes.append(node(f"{NCCL}sum_{bucket}_{tower}", "NcclAllReduceWait",
                          [f"{NCCL}sum_{bucket}_{tower}_start"], waits_at + 2 * bucket, 1))
    device = f"/job:localhost/replica:0/task:0/device:GPU:{tower}"
    return DeviceStepStats(device=device, node_stats=nodes)


def test_an_nccl_buckets_towers_are_joined_to_the_tower_that_started_last():
    # 11 buckets: bucket 1 (sum_1_<tower>_start) is not bucket 10's (sum_10_<tower>_start)
    starts = [[20 + 20 * bucket + tower * (-1) ** bucket for bucket in range(11)]
              for tower in (0, 1)]
    stats = StepStats(dev_stats=[nccl_tower(tower, starts[tower], 300) for tower in (0, 1)])
    events = trace_of([timeline.TracedRun(stats)])
    pairs = arrows(events)
    across = [(source, target) for source, target in pairs if source[0] != target[0]]
    expected = []
    for bucket in range(11):
        first, last = (0, 1) if bucket % 2 == 0 else (1, 0)
        expected.append(((first, starts[first][bucket], f"{NCCL}sum_{bucket}_{first}_start"),
                         (last, starts[last][bucket], f"{NCCL}sum_{bucket}_{last}_start")))
    assert sorted(across) == sorted(expected)
    waits = [pair for pair in pairs if pair[0][0] == pair[1][0]]
    assert sorted(waits) == sorted(
        ((tower, starts[tower][bucket] + 1, f"{NCCL}sum_{bucket}_{tower}_start"),
         (tower, 300 + 2 * bucket, f"{NCCL}sum_{bucket}_{tower}"))
        for tower in (0, 1) for bucket in range(11))


def test_a_blocking_all_reduce_keeps_its_arrow_from_the_last_rank_to_join():
    def rank(number, start, end):
        nodes = [node(f"{MPI}sum_0", "MpiAllReduce", [], start, end - start)]
        stats = StepStats(dev_stats=[DeviceStepStats(device=f"rank {number} CPU:0",
                                                     node_stats=nodes)])
        return timeline.TracedRun(stats, rank=number)
    pairs = arrows(trace_of([rank(0, 10, 50), rank(1, 40, 51)]))
    assert pairs == [((1, 40, f"{MPI}sum_0"), (0, 50, f"{MPI}sum_0"))]


def nccl_rank(rank, starts):
    """One process's GPU in an NCCL world (parallel/nccl.py's world members,
    ``<bucket>_rank_<rank>_start``), its buckets started at ``starts``."""
    nodes = []
    for bucket, start in enumerate(starts):
        member = f"{NCCL}sum_{bucket}_rank_{rank}"
        nodes.append(node(f"{member}_start", "NcclAllReduceStart", [], start, 1))
        nodes.append(node(member, "NcclAllReduceWait", [f"{member}_start"], 200 + 5 * bucket, 1))
    device = f"rank {rank} /job:worker/replica:0/task:{rank}/device:GPU:0"
    stats = StepStats(dev_stats=[DeviceStepStats(device=device, node_stats=nodes)])
    return timeline.TracedRun(stats, step=1, rank=rank)


def test_an_nccl_worlds_buckets_are_joined_across_processes_bucket_by_bucket():
    events = trace_of([nccl_rank(0, [10, 40]), nccl_rank(1, [12, 30])])
    across = [(source, target) for source, target in arrows(events) if source[0] != target[0]]
    assert sorted(across) == [
        ((0, 10, f"{NCCL}sum_0_rank_0_start"), (1, 12, f"{NCCL}sum_0_rank_1_start")),
        ((1, 30, f"{NCCL}sum_1_rank_1_start"), (0, 40, f"{NCCL}sum_1_rank_0_start"))]
    assert flow_names(events, across) == [f"{NCCL}sum_0", f"{NCCL}sum_1"]    # the buckets'


def flow_names(events, pairs):
    """The names of the flows (arrows) from the sources of ``pairs``, sorted."""
    sources = {(source[0], source[1]) for source, _ in pairs}
    return sorted(e["name"] for e in events if e["ph"] == "s" and (e["pid"], e["ts"]) in sources)


def blocking_nccl_device(device, names_and_spans):
    nodes = [node(name, "NcclAllReduce", [], start, end - start)
             for name, (start, end) in names_and_spans.items()]
    return DeviceStepStats(device=device, node_stats=nodes)


def test_blocking_nccl_members_on_one_process_gpus_are_joined_to_the_last_to_run():
    # tower 1 runs bucket 1's member last, tower 0 bucket 10's: sum_1_* is not sum_10_*
    gpus = [blocking_nccl_device(f"/job:localhost/replica:0/task:0/device:GPU:{tower}",
                                 {f"{NCCL}sum_1_{tower}": (10 + 5 * tower, 12 + 5 * tower),
                                  f"{NCCL}sum_10_{tower}": (40 - 5 * tower, 42 - 5 * tower)})
            for tower in (0, 1)]
    pairs = arrows(trace_of([timeline.TracedRun(StepStats(dev_stats=gpus))]))
    assert sorted(pairs) == [((0, 10, f"{NCCL}sum_1_0"), (1, 15, f"{NCCL}sum_1_1")),
                             ((1, 35, f"{NCCL}sum_10_1"), (0, 40, f"{NCCL}sum_10_0"))]


def test_blocking_nccl_members_across_processes_are_joined_as_other_collectives():
    def rank(number, start, end):
        device = f"rank {number} /job:worker/replica:0/task:{number}/device:GPU:0"
        stats = StepStats(dev_stats=[blocking_nccl_device(
            device, {f"{NCCL}sum_0_rank_{number}": (start, end)})])
        return timeline.TracedRun(stats, rank=number)
    events = trace_of([rank(0, 10, 50), rank(1, 40, 51)])
    pairs = arrows(events)
    assert pairs == [((1, 40, f"{NCCL}sum_0_rank_1"), (0, 50, f"{NCCL}sum_0_rank_0"))]
    assert flow_names(events, pairs) == [f"{NCCL}sum_0"]
