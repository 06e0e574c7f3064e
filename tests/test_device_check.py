"""The device check (benchmarks/gpu_check.sh) run end to end, in its tiny mode,
on the simulated GPU: the steps a lent GPU machine will run, the summary JSON
it will return, its time budget and its file limits (at most 8 files of
16 MiB come back), tested on every commit rather than found wrong on the
one lent run. (Not named test_gpu_*.py: the check runs those files.)"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
BUDGET_S = 110                 # the script's tiny-mode default (GPU_CHECK_BUDGET_S)
MAX_FILES, MAX_BYTES = 8, 16 * 2**20
STEPS = ["install", "versions", "cifar10_data", "gpu_peers", "cifar10_one_gpu",
         "cifar10_two_logical_gpus", "gpu_peers_implicit_gemm", "gpu_backend_tests",
         "gpu_op_tests"]
VERSIONS = ["commit", "gpu", "driver", "cuda_runtime", "cupy", "nccl", "pytorch", "python"]
TORCH = importlib.util.find_spec("torch") is not None


def torch_runs_on_a_gpu():
    """Whether PyTorch is installed with CUDA and finds a GPU (gpu_peers' peer)."""
    if not TORCH:
        return False
    import torch
    return torch.cuda.is_available()

pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                       reason="the device check needs bash and timeout(1)"),
    pytest.mark.skipif(os.environ.get("GPU_CHECK_RUNNING") == "1",
                       reason="inside a device check: it would run itself"),
]


def run_check(tmp_path, simulated_gpus="1"):
    """The tiny check on the simulated GPU: (process, seconds, out folder, temp folder)."""
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(scratch),
           "TOWERFLOW_SIMULATED_GPUS": simulated_gpus}
    start = time.monotonic()
    done = subprocess.run(["bash", str(SCRIPT), "--tiny", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=BUDGET_S + 60, check=False)
    return done, time.monotonic() - start, out, scratch


def untracked_files():
    """The files git sees as new (ignored ones left out); None without git. The check
    writes no tracked file, so a file it leaves in the tree shows here."""
    try:
        done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                              cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError:
        return None
    lines = done.stdout.splitlines() if done.returncode == 0 else None
    return None if lines is None else {line[3:] for line in lines if line.startswith("??")}


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    before = untracked_files()
    done, seconds, out, scratch = run_check(tmp_path_factory.mktemp("gpu_check"))
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    return {"done": done, "seconds": seconds, "out": out, "scratch": scratch,
            "summary": summary, "before": before, "after": untracked_files()}


def test_every_step_passes_within_the_budget(check):
    summary, done = check["summary"], check["done"]
    assert summary is not None, done.stdout + done.stderr
    steps = {step["name"]: step for step in summary["steps"]}
    assert list(steps) == STEPS
    failed = {name: step for name, step in steps.items() if step["status"] != "passed"}
    assert not failed, json.dumps(failed, indent=1)
    assert done.returncode == 0 and summary["ok"] and summary["failed_steps"] == []
    assert check["seconds"] < BUDGET_S and summary["wall_s"] < BUDGET_S
    assert all(step["seconds"] <= step["limit_s"] for step in steps.values())


def test_the_summary_names_every_version_and_pytorch_is_absent_not_failed(check):
    versions = check["summary"]["versions"]
    assert set(VERSIONS) <= set(versions)
    assert versions["gpu"].startswith("Simulated") and versions["cupy"].endswith("+simulated")
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert (versions["pytorch"] == "absent") != TORCH
    assert check["summary"]["install"]["importable"]


def test_the_pytest_steps_report_their_counts(check):
    for step in check["summary"]["steps"]:
        if step["name"].endswith("_tests"):
            counts = step["pytest"]
            assert counts["passed"] > 0 and counts["failed"] == counts["errors"] == 0, step
    op_tests = next(step for step in check["summary"]["steps"] if step["name"] == "gpu_op_tests")
    assert len(op_tests["shards"]) == 2 and op_tests["pytest"]["complete"]


def collected(*options, shard=None):
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'benchmarks'}{os.pathsep}{ROOT}"}
    env.pop("GPU_CHECK_SHARD", None)
    if shard:
        env["GPU_CHECK_SHARD"] = shard
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-p", "gpu_check_shard", *options],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_op_test_shards_split_the_gpu_group_between_them():
    options = ("-m", "gpu", "tests/test_array_ops.py")
    every = collected(*options)
    shards = [collected(*options, shard=f"{index}/3") for index in (1, 2, 3)]
    assert sorted(name for shard in shards for name in shard) == sorted(every)
    assert len(every) > 3
    assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_the_summary_holds_every_measurement(check):
    measured = check["summary"]["measurements"]
    network = measured["recipe_network_vs_pytorch"]
    for name in ("towerflow_cuda_graphs", "towerflow_op_by_op"):
        assert network["samples_per_s"][name] > 0 and network["step_ms"][name] > 0
    assert (network["samples_per_s"]["pytorch_eager"] == "absent") != torch_runs_on_a_gpu()
    host = measured["us_per_step_host_bound"]
    assert host["cuda_graphs"] > 0 and host["op_by_op"] > 0
    one, two = (measured["cifar10_recipe"][name]
                for name in ("cifar10_one_gpu", "cifar10_two_logical_gpus"))
    assert one["samples_per_sec"] > 0 and one["devices"] == ["/gpu:0"]
    assert two["samples_per_sec"] > 0 and two["devices"] == ["/gpu:0", "/gpu:1"]
    paths = measured["conv_paths"]
    assert paths["im2col_samples_per_s"] > 0 and paths["implicit_gemm_samples_per_s"] > 0


def test_at_most_eight_small_files_come_back_and_nothing_lands_elsewhere(check):
    returned = sorted(check["out"].iterdir())
    assert len(returned) <= MAX_FILES and all(path.is_file() for path in returned)
    assert all(path.stat().st_size < MAX_BYTES for path in returned)
    assert sorted(check["summary"]["files"]) == [path.name for path in returned]
    assert list(check["scratch"].iterdir()) == []          # the data and logs are removed
    if check["before"] is not None:
        assert check["after"] - check["before"] == set()    # nothing new in the tree


def test_failing_steps_fail_the_check_and_say_why(tmp_path):
    # A bad TOWERFLOW_SIMULATED_GPUS makes every step that imports towerflow fail
    # (the pytest steps drop it and pass): the check must report, not stop.
    done, _, out, _ = run_check(tmp_path, simulated_gpus="none")
    summary = json.loads((out / "summary.json").read_text())
    failed = set(summary["failed_steps"])
    assert failed == {"install", "versions", "gpu_peers", "cifar10_one_gpu",
                      "cifar10_two_logical_gpus", "gpu_peers_implicit_gemm"}
    assert done.returncode == len(failed) and not summary["ok"]
    step = next(step for step in summary["steps"] if step["name"] == "gpu_peers")
    assert step["status"] == "failed" and "TOWERFLOW_SIMULATED_GPUS" in "\n".join(step["tail"])
    assert summary["measurements"]["recipe_network_vs_pytorch"].startswith("not measured")
    assert set(VERSIONS) <= set(summary["versions"])        # the same keys, saying why
