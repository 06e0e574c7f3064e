"""The all-reduce overlapping the backward pass (issue 35 item 3): buckets in
backward order, each bucket's MPI all-reduce started as soon as its gradients
exist and waited for just before the update, bit-identical to the blocking
all-reduce; shown in the trace of a 2-rank run."""

import json
from pathlib import Path

import numpy as np
import pytest
from launched_jobs import run_on_ranks

import towerflow as tf
from towerflow.parallel import buckets, communicators, mpi

PROGRAM = Path(__file__).parent / "mpi_programs" / "overlap_ranks.py"


def test_buckets_in_backward_order_start_with_the_last_tensor():
    with tf.Graph().as_default():
        tensors = [tf.zeros([n]) for n in (4, 2, 2, 8)]       # float32: 16, 8, 8, 32 bytes
        assert buckets.plan_buckets(tensors, 16, backward=True) == [[3], [2, 1], [0]]
        assert buckets.plan_buckets(tensors, 16) == [[0], [1, 2], [3]]


def test_data_parallel_packs_the_last_layers_gradients_first():
    """The first bucket holds the gradients the backward pass makes first (the
    last layer's), so its all-reduce can start while earlier layers' run."""
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 3])

        def tower_fn(inputs):
            hidden = tf.layers.dense(inputs, 5, name="first")
            return tf.reduce_mean(tf.layers.dense(hidden, 2, name="last"))
        tf.parallel.DataParallel(["/cpu:0"], all_reduce="cpu", bucket_bytes=1).minimize(
            tower_fn, x, tf.train.GradientDescentOptimizer(0.1))
        packs = [op for op in tf.get_default_graph().get_operations()
                 if op.type == "PackBucket"]
        shapes = [tuple(op.inputs[0].shape.dims) for op in packs]
    assert shapes == [(2,), (5, 2), (5,), (3, 5)]   # last/bias, last/kernel, first/...


def test_starts_run_as_soon_as_their_input_exists_and_waits_last():
    """The plan runs a start right after its input, ahead of ops made before
    it, and a wait after every op that does not need it."""
    with tf.Graph().as_default() as graph:
        a = tf.constant(1.0)
        unrelated = [tf.add(a, float(i), name=f"unrelated_{i}") for i in range(3)]
        attrs = {"schedule": "early"}
        start = graph.create_op("Identity", [a], attrs, name="start").outputs[0]
        late = graph.create_op("Identity", [start], {"schedule": "late"}, name="wait")
        after = [tf.add(a, 10.0, name="after")]
        from towerflow.plan import _needed_ops
        order = [op.name for op in _needed_ops(unrelated + [late.outputs[0]] + after, [])]
    assert order.index("start") < min(order.index(f"unrelated_{i}") for i in range(3))
    assert order[-1] == "wait"


@pytest.mark.parametrize("value, expected", [("0", False), ("1", True), ("false", False)])
def test_overlap_variable(monkeypatch, value, expected):
    monkeypatch.setenv("TOWERFLOW_OVERLAP_ALLREDUCE", value)
    assert communicators.overlap_enabled() is expected
    assert communicators.overlap_enabled(True) is True


def test_bad_overlap_and_latency_values_are_named(monkeypatch):
    monkeypatch.setenv("TOWERFLOW_OVERLAP_ALLREDUCE", "yes please")
    with pytest.raises(ValueError, match="TOWERFLOW_OVERLAP_ALLREDUCE='yes please'"):
        communicators.overlap_enabled()
    monkeypatch.setenv("TOWERFLOW_INJECT_ALLREDUCE_LATENCY_MS", "-5")
    with pytest.raises(ValueError, match="TOWERFLOW_INJECT_ALLREDUCE_LATENCY_MS='-5'"):
        mpi.injected_latency()
    monkeypatch.setenv("TOWERFLOW_INJECT_ALLREDUCE_LATENCY_MS", "5")
    assert mpi.injected_latency() == 0.005


# -- two real MPI ranks -------------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Rank outputs and the trace, with overlap (1) and without (0)."""
    out = {}
    for overlap in (1, 0):
        where = tmp_path_factory.mktemp(f"overlap_{overlap}")
        run_on_ranks(PROGRAM, where, "--overlap", overlap)
        out[overlap] = where
    return out


def test_weights_are_bit_identical_with_and_without_overlap(runs):
    reference = np.load(runs[0] / "rank_0.npz")
    assert len(reference.files) == 6
    for rank in (0, 1):
        overlapped = np.load(runs[1] / f"rank_{rank}.npz")
        for name in reference.files:
            assert np.array_equal(overlapped[name], reference[name]), (rank, name)


def spans(trace_dir):
    """Per rank: the end (µs) of the backward pass's last op, and the start of
    every all-reduce collective op (start op or blocking all-reduce)."""
    trace = json.loads((trace_dir / "trace.json").read_text())
    ranks = {event["pid"]: event["args"]["name"].split()[1]
             for event in trace["traceEvents"]
             if event.get("ph") == "M" and event.get("name") == "process_name"}
    found = {}
    for event in trace["traceEvents"]:
        if event.get("ph") != "X":
            continue
        mine = found.setdefault(ranks[event["pid"]], {"backward_end": 0, "reduce_starts": []})
        if event["args"]["name"].startswith("tower_0_gradients/"):
            mine["backward_end"] = max(mine["backward_end"], event["ts"] + event["dur"])
        if event["args"]["op"] in ("MpiAllReduceStart", "MpiAllReduce"):
            mine["reduce_starts"].append(event["ts"])
    return found


def test_trace_shows_an_all_reduce_starting_before_the_backward_pass_ends(runs):
    for rank, seen in spans(runs[1]).items():
        assert len(seen["reduce_starts"]) == 4, rank
        assert min(seen["reduce_starts"]) < seen["backward_end"], rank


def test_without_overlap_every_all_reduce_starts_after_the_backward_pass(runs):
    for rank, seen in spans(runs[0]).items():
        assert len(seen["reduce_starts"]) == 4, rank
        assert min(seen["reduce_starts"]) >= seen["backward_end"], rank


def test_trace_joins_each_buckets_starts_across_ranks_and_each_start_to_its_wait(runs):
    """The arrows of the overlapping all-reduce (client/timeline.py): each
    bucket's two start ops joined (toward the rank that started last) and each
    start joined to its own wait; every arrow points forward in time."""
    events = json.loads((runs[1] / "trace.json").read_text())["traceEvents"]
    ops = [e for e in events if e.get("ph") == "X"]
    sources = {e["id"]: e for e in events if e["ph"] == "s"}
    targets = {e["id"]: e for e in events if e["ph"] == "t"}
    assert sources.keys() == targets.keys()
    arrows = [(sources[key], targets[key]) for key in sources]
    assert [pair for pair in arrows if pair[0]["ts"] > pair[1]["ts"]] == []

    def names_at(flow, op, edge):
        """The ``op`` ops on the flow event's row that start (edge 0) or end
        (edge 1) at its time."""
        return {e["args"]["name"] for e in ops if e["pid"] == flow["pid"]
                and e["tid"] == flow["tid"] and e["args"]["op"] == op
                and e["ts"] + edge * e["dur"] == flow["ts"]}
    starts = [e for e in ops if e["args"]["op"] == "MpiAllReduceStart"]
    buckets = {e["args"]["name"] for e in starts}
    assert len(buckets) == 4 and len(starts) == 8
    joined = [names_at(source, "MpiAllReduceStart", 0) & names_at(
        target, "MpiAllReduceStart", 0) for source, target in arrows
        if source["pid"] != target["pid"]]
    assert sorted(name for names in joined for name in names) == sorted(buckets)
    for start in starts:
        waits = [target for source, target in arrows if source["pid"] == start["pid"]
                 and start["args"]["name"] in names_at(source, "MpiAllReduceStart", 1)
                 and source["ts"] == start["ts"] + start["dur"]]
        wanted = start["args"]["name"].removesuffix("_start")
        assert [wanted in names_at(target, "MpiAllReduceWait", 0) for target in waits] == \
            [True], start
