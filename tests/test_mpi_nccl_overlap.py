"""NCCL between processes (one simulated GPU per MPI rank) overlapping the
backward pass inside the step's CUDA graph (issue 35 item 3): each bucket's
all-reduce is forked to a communication stream, which joins the capture, and
joined back by its wait; the graph replays it on a branch beside the rest of
the backward pass, and the weights are bit-identical without overlap."""

import json
from pathlib import Path

import numpy as np
import pytest
from launched_jobs import MPI_MISSING, run_on_ranks, with_simulated_gpus

pytest.importorskip("mpi4py", reason=MPI_MISSING)
PROGRAM = Path(__file__).parent / "mpi_programs" / "nccl_overlap_ranks.py"
STEPS = 4       # a warm-up run op by op, the capture, then replays


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{overlap: (the ranks' weights, the ranks' facts)}, overlap 1 and 0."""
    out = {}
    for overlap in (1, 0):
        where = tmp_path_factory.mktemp(f"nccl_overlap_{overlap}")
        run_on_ranks(PROGRAM, where, "--overlap", overlap, "--steps", STEPS,
                     env=with_simulated_gpus(2))
        out[overlap] = ([np.load(where / f"rank_{rank}.npz") for rank in (0, 1)],
                        [json.loads((where / f"rank_{rank}.json").read_text())
                         for rank in (0, 1)])
    return out


def test_overlapping_weights_equal_the_blocking_ones_bit_for_bit(runs):
    (overlapped, facts), (blocking, blocking_facts) = runs[1], runs[0]
    for rank in (0, 1):
        assert {"NcclAllReduceStart", "NcclAllReduceWait"} <= set(facts[rank]["op_types"])
        assert "NcclAllReduce" not in facts[rank]["op_types"]
        assert "NcclAllReduceStart" not in blocking_facts[rank]["op_types"]
        assert "NcclAllReduce" in blocking_facts[rank]["op_types"]
        assert len(overlapped[rank].files) == 4     # 2 kernels and 2 biases
        for name in blocking[rank].files:
            assert np.array_equal(overlapped[rank][name], blocking[rank][name]), (rank, name)
            assert np.array_equal(overlapped[rank][name], overlapped[1 - rank][name])
    assert overlapped[0]["arr_2"].shape == (5, 3)     # last/kernel
    assert not np.all(overlapped[0]["arr_2"] == np.float32(-0.2))      # it trained


@pytest.mark.parametrize("overlap", [1, 0])
def test_the_training_step_is_captured(runs, overlap):
    for facts in runs[overlap][1]:
        assert facts["captured"] == 1, facts["reasons"]     # the training step's plan
        assert not [reason for reason in facts["reasons"] if "capture failed" in reason]


def test_the_replayed_all_reduce_runs_on_a_branch_beside_later_backward_kernels(runs):
    for facts in runs[1][1]:
        ran = facts["last_step"]                    # a graph replay
        reduces = [entry for entry in ran if entry[0].startswith("ncclAllReduce")]
        assert len(reduces) == 2 * 4                # a send and a receive per gradient
        communication = {stream for _, stream, *_ in reduces}
        assert len(communication) == 1 and "graph branch" in next(iter(communication))
        compute = [entry for entry in ran if entry[1] not in communication]
        # a send, its receive, and a compute kernel logged after them (queued
        # later in the backward pass) that runs while they do
        overlapped = [
            begin for index, (name, _, begin, _) in enumerate(ran)
            if name == "ncclAllReduce (send)"
            if any(entry in compute and entry[2] < ran[index + 1][3] and begin < entry[3]
                   for entry in ran[index + 2:])]
        assert len(overlapped) >= 2, ran


def test_without_overlap_the_all_reduce_runs_on_the_compute_stream(runs):
    for facts in runs[0][1]:
        ran = facts["last_step"]
        streams = {stream for _, stream, *_ in ran}
        assert len(streams) == 1, streams           # one stream, no branch
        assert any(name.startswith("ncclAllReduce") for name, *_ in ran)
