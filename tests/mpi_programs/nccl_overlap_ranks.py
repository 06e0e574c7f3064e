"""Run by tests/test_mpi_nccl_overlap.py under `towerflow launch -n 2` on the
simulated GPUs: every rank trains a small MLP on its one GPU with
all_reduce='nccl' between the processes, a bucket per gradient, with or
without the all-reduce overlapping the backward pass, and logs the kernels
and copies its GPU ran in the last step (a CUDA graph's replay).

    python nccl_overlap_ranks.py OUT_DIR --overlap 1|0 [--steps N]

Writes OUT_DIR/rank_<r>.npz (final variables) and OUT_DIR/rank_<r>.json (the
op types, how many graphs the Session's plans captured, the reasons logged
for not capturing, the last step's log: [name, stream, begin, end] in the
simulated GPU's microseconds).
"""

import json
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared model
from overlap_ranks import overlap_arguments
from test_nccl_overlap import nccl_step

import towerflow as tf
from towerflow import plan_capture
from towerflow.parallel.mpi import rank_from_environment
from towerflow.simgpu import work
from towerflow.simgpu.clock import WORK_MICROS


class Reasons(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        if "CUDA graphs" in record.getMessage():
            self.messages.append(record.getMessage())


def captured_plans(sess, fed_only=False):
    """How many graphs the Session's plans captured (with ``fed_only``, only
    the plans run with a feed: a training step's, not a read of variables)."""
    return sum(plan.captured for (_, fed), (plan, _) in sess._plans.items()
               if isinstance(plan, plan_capture.CapturingPlan) and (fed or not fed_only))


def logged_run(sess, fetch, feed):
    """Runs one step, returning what its GPU's streams ran (a graph replay's
    branches included)."""
    ran, execute = [], work.Work.execute

    def logged(self, stream):
        result = execute(self, stream)
        ran.append([self.name, stream.key, stream.clock.micros - WORK_MICROS,
                    stream.clock.micros])
        return result
    work.Work.execute = logged
    try:
        sess.run(fetch, feed)
    finally:
        work.Work.execute = execute
    return ran


def main():
    args = overlap_arguments()
    reasons = Reasons()
    logging.getLogger("towerflow").addHandler(reasons)
    logging.getLogger("towerflow").setLevel(logging.INFO)
    step, feed = nccl_step(bool(args.overlap), timeout=60)     # one tower: this rank's GPU
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(args.steps - 1):
            sess.run(step.train_op, feed)
        last_step = logged_run(sess, step.train_op, feed)
        captured = captured_plans(sess)
        values = sess.run(step.variables)
    out = Path(args.out)
    rank = rank_from_environment()
    np.savez(out / f"rank_{rank}.npz", *values)
    facts = {"op_types": sorted({op.type for op in tf.get_default_graph().get_operations()}),
             "captured": captured, "reasons": reasons.messages, "last_step": last_step}
    (out / f"rank_{rank}.json").write_text(json.dumps(facts))


if __name__ == "__main__":
    main()
