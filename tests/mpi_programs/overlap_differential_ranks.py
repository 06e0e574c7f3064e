"""Run by tests/test_overlap_differential.py under `towerflow launch -n 2`:
every rank trains the cifar10 network of that test on the same global
batches, with the all-reduce overlapping the backward pass on and off
(fast_paths' switch), counting the overlap's probes in this process.

    python overlap_differential_ranks.py OUT_DIR --mpi TOWERS... | --nccl

--mpi: TOWERS CPU towers a rank, all_reduce='mpi'; --nccl: one tower on the
rank's simulated GPU, all_reduce='nccl' (NCCL's world of the ranks). Writes,
per towers T, batch B and switch S (on, off), OUT_DIR/rank_<r>_<T>_<B>_<S>.npz
(each variable's initial and trained value, as ``name|start``, ``name|end``),
OUT_DIR/rank_<r>_<T>_<B>_probes.json ({S: {probe: calls}}) and
OUT_DIR/rank_<r>_<T>_<B>_capture.json ({S: {"captured": the graphs the
training step's plan captured, "reasons": the reasons logged for not
capturing}}).
"""

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared model
from conftest import split_cpu
from nccl_overlap_ranks import Reasons, captured_plans
from test_overlap_differential import BATCHES, OVERLAP, counting_probes, train

from towerflow import fast_paths
from towerflow.parallel.mpi import rank_from_environment


def train_counting_captures(batch, devices, all_reduce):
    """train's result, and how many graphs its training step's plan captured."""
    captured = []
    result = train(batch, devices, all_reduce,
                   observe=lambda sess: captured.append(captured_plans(sess, fed_only=True)))
    return result, captured[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--mpi", type=int, nargs="+", metavar="TOWERS")
    parser.add_argument("--nccl", action="store_true")
    args = parser.parse_args()
    out, rank = Path(args.out), rank_from_environment()
    calls = counting_probes(setattr)
    reasons = Reasons()
    logging.getLogger("towerflow").addHandler(reasons)
    logging.getLogger("towerflow").setLevel(logging.INFO)
    if args.mpi:
        split_cpu(max(args.mpi))
    for towers in args.mpi or [1]:
        devices = [f"/cpu:{index}" for index in range(towers)] if args.mpi else None
        for batch in BATCHES:
            key, ran, capture = f"rank_{rank}_{towers}_{batch}", {}, {}
            for switch in ("on", "off"):
                calls.clear()
                reasons.messages = []
                with fast_paths.switched([OVERLAP], on=switch == "on"):
                    result, captured = train_counting_captures(
                        batch, devices, "mpi" if args.mpi else "nccl")
                capture[switch] = {"captured": captured, "reasons": reasons.messages}
                ran[switch] = dict(calls)
                np.savez(out / f"{key}_{switch}.npz",
                         **{f"{name}|{part}": value for name, (start, end) in result.items()
                            for part, value in (("start", start), ("end", end))})
            (out / f"{key}_probes.json").write_text(json.dumps(ran))
            (out / f"{key}_capture.json").write_text(json.dumps(capture))

if __name__ == "__main__":
    main()
