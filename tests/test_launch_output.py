"""What ``towerflow launch -n 2 -- towerflow train`` prints and records (issue 33,
item 6): one summary line for the job, from rank 0, naming ranks x towers;
the JSON records the world size and the towers in all."""

import json
import subprocess
import sys

import pytest
from launched_jobs import MPI_MISSING, launch_line

pytest.importorskip("mpi4py", reason=MPI_MISSING)
pytest.importorskip("sklearn", reason="the digits recipe needs scikit-learn")


def test_only_rank_zero_prints_the_summary_naming_ranks_and_towers(tmp_path):
    line = launch_line([sys.executable, "-m", "towerflow", "train", "digits", "--cpu-towers",
                        "1", "--steps", "3", "--json-out", str(tmp_path / "run.json")],
                       "--timeout", "60")
    done = subprocess.run(line, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    summaries = [text for text in done.stdout.splitlines() if "samples/s of training" in text]
    assert len(summaries) == 1, done.stdout          # was one a rank, each "on 1 towers"
    assert "samples/s of training" in summaries[0]
    assert " on 2 ranks x 1 tower (/cpu:0 each), " in summaries[0]
    recorded = json.loads((tmp_path / "run.json").read_text())
    assert (recorded["world_size"], recorded["total_towers"], recorded["towers"]) == (2, 2, 1)
