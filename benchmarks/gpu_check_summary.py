"""The device check's report (benchmarks/gpu_check.sh).

    python benchmarks/gpu_check_summary.py versions FILE.json
    python benchmarks/gpu_check_summary.py summary WORK_DIR OUT_DIR full|tiny BUDGET_S

``versions`` records the commit, the GPU, driver, CUDA runtime, CuPy, NCCL,
PyTorch and Python versions ("absent" for what is missing). ``summary``
reads the check's work folder (steps.tsv, each step's log, the benchmarks'
JSON) and writes OUT_DIR/summary.json, OUT_DIR/check.log (every log, each
capped) and copies of the benchmarks' JSON: at most six files, all small,
since only 8 files of 16 MiB come back from a lent machine. Its exit status
is the number of steps that did not pass.
"""

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

ABSENT = "absent"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ("install", "versions", "cifar10_data", "gpu_peers", "cifar10_one_gpu",
         "cifar10_two_logical_gpus", "gpu_peers_implicit_gemm", "gpu_backend_tests",
         "gpu_op_tests")
RESULTS = ("gpu_peers.json", "cifar10_one_gpu.json", "cifar10_two_logical_gpus.json",
           "gpu_peers_implicit_gemm.json")
LOG_HEAD, LOG_TAIL = 32 * 1024, 480 * 1024      # of each step's log, in check.log
PYTEST_COUNTS = ("passed", "failed", "skipped", "errors", "deselected")
TIMED_OUT = (124, 137)                           # timeout(1): SIGINT ignored, then KILL
VERSION_KEYS = ("commit", "gpu", "driver", "cuda_runtime", "cupy", "nccl", "pytorch", "python")


# -- versions ------------------------------------------------------------------------


def versions():
    """The versions the check ran with, "absent" where a piece is missing."""
    import numpy
    found = {"commit": _commit(), "python": platform.python_version(),
             "numpy": numpy.__version__}
    found.update(_gpu())
    found.update(_cupy())
    found.update(_torch())
    found["driver"] = _nvidia_smi_driver() or found["driver"]
    return found


def _run(command):
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=20,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _commit():
    """git's HEAD; a lent machine's copy may have no .git: GPU_CHECK_COMMIT then."""
    head = _run(["git", "rev-parse", "HEAD"])
    if head is None:
        return os.environ.get("GPU_CHECK_COMMIT") or ABSENT
    changed = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return head + (" (with uncommitted changes)" if changed else "")


def _nvidia_smi_driver():
    lines = (_run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
             or "").splitlines()
    return lines[0].strip() if lines else None


def _gpu():
    from towerflow import simgpu
    from towerflow.device import physical
    gpus, reason = physical.probe_gpus()
    if not gpus:
        return {"gpu": ABSENT, "gpu_count": 0, "gpu_unavailable_reason": reason}
    return {"gpu": gpus[0].name, "gpu_count": len(gpus), "simulated": simgpu.is_installed(),
            "gpu_memory_gib": round(gpus[0].total_memory / 2**30, 1),
            "compute_capability": ".".join(map(str, gpus[0].compute_capability))}


def _cupy():
    found = dict.fromkeys(("cupy", "cuda_runtime", "driver", "nccl"), ABSENT)
    try:
        import cupy
        import cupy.cuda.nccl  # `import cupy` leaves nccl out
    except Exception as err:  # noqa: BLE001  (missing or broken: say which)
        found["cupy"] = f"{ABSENT} ({type(err).__name__}: {err})"
        return found
    runtime = cupy.cuda.runtime
    found["cupy"] = cupy.__version__
    found["cuda_runtime"] = _cuda_version(runtime.runtimeGetVersion)
    found["driver"] = f"CUDA driver API {_cuda_version(runtime.driverGetVersion)}"
    found["nccl"] = _call(lambda: _nccl_version(cupy.cuda.nccl.get_version()))
    return found


def _cuda_version(getter):
    """12090 -> '12.9'."""
    def formatted():
        code = getter()
        return f"{code // 1000}.{code % 1000 // 10}"
    return _call(formatted)


def _nccl_version(code):
    """23203 -> '2.32.3' (NCCL 2.9 and later: major * 10000 + minor * 100 + patch)."""
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def _call(getter):
    try:
        return getter()
    except Exception as err:  # noqa: BLE001  (a version we cannot read is reported, not fatal)
        return f"{ABSENT} ({type(err).__name__}: {err})"


def _torch():
    try:
        import torch
    except ImportError:
        return {"pytorch": ABSENT, "pytorch_cuda": ABSENT, "cudnn": ABSENT}
    return {"pytorch": torch.__version__, "pytorch_cuda": torch.version.cuda or ABSENT,
            "cudnn": _call(torch.backends.cudnn.version) or ABSENT}


# -- steps ---------------------------------------------------------------------------


def read_steps(work):
    """Each step of STEPS (and any other recorded) with its status and figures."""
    recorded = {}
    with open(os.path.join(work, "steps.tsv")) as table:
        for line in table:
            name, code, start, end, limit = line.rstrip("\n").split("\t")
            recorded[name] = _step(work, name, code, start, end, limit)
    for name in STEPS:
        shards = [key for key in recorded if re.fullmatch(rf"{name}_\d+", key)]
        if shards and name not in recorded:
            recorded[name] = _merged(name, [recorded.pop(key) for key in shards])
    names = list(STEPS) + [name for name in recorded if name not in STEPS]
    return [recorded.get(name) or {"name": name, "status": "not run"} for name in names]


def _merged(name, shards):
    """One step of the shards run at once (gpu_check_shard.py): passed if all passed."""
    failing = [shard["status"] for shard in shards if shard["status"] != "passed"]
    counts = [shard.get("pytest") for shard in shards]
    return {"name": name, "status": failing[0] if failing else "passed",
            "exit_code": max(shard["exit_code"] or 0 for shard in shards),
            "seconds": max(shard["seconds"] for shard in shards),
            "limit_s": max(shard["limit_s"] for shard in shards),
            "pytest": {key: sum((count or {}).get(key, 0) for count in counts)
                       for key in PYTEST_COUNTS} | {"complete": None not in counts},
            "shards": shards}


def _step(work, name, code, start, end, limit):
    if code == "skipped":
        return {"name": name, "status": "skipped (no time left)", "exit_code": None,
                "seconds": 0.0, "limit_s": max(int(limit), 0)}
    code = int(code)
    status = "passed" if code == 0 else "timed out" if code in TIMED_OUT else "failed"
    seconds = _seconds(end) - _seconds(start)
    step = {"name": name, "status": status, "exit_code": code, "seconds": round(seconds, 1),
            "limit_s": int(limit)}
    log = _read_log(work, name)
    if re.search(r"_tests(_\d+)?$", name):           # a pytest step, or one of its shards
        step["pytest"] = pytest_counts(log)
    if status != "passed":
        step["tail"] = log.splitlines()[-20:]
    return step


def _seconds(epoch_text):
    return float(epoch_text.replace(",", "."))      # bash's EPOCHREALTIME follows the locale


def _read_log(work, name):
    path = os.path.join(work, f"{name}.log")
    if not os.path.exists(path):
        return ""
    with open(path, "rb") as log:
        return log.read().decode("utf-8", "replace")


def pytest_counts(log):
    """The counts of pytest's last line, e.g. '3 passed, 1 skipped, 9 deselected in 2.0s'
    (also after an interrupt); None if pytest printed none."""
    for line in reversed(log.splitlines()[-40:]):
        found = re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)\b", line)
        if (found and " in " in line) or "no tests ran" in line:
            counts = dict.fromkeys(PYTEST_COUNTS, 0)
            for number, word in found:
                counts["errors" if word.startswith("error") else word] = int(number)
            return counts
    return None


# -- measurements ----------------------------------------------------------------------


def measurements(work, steps):
    """The figures the check is for, from the benchmarks' JSON."""
    status = {step["name"]: step["status"] for step in steps}
    peers = _load(work, "gpu_peers.json") or {}      # written after each of its tables
    implicit = _load(work, "gpu_peers_implicit_gemm.json") or {}
    return {**_peers_figures(peers, f"not measured: gpu_peers {status['gpu_peers']}"),
            "conv_paths": _conv_paths(peers, implicit) if _both_rates(peers, implicit) else
            f"not measured: gpu_peers {status['gpu_peers']}, gpu_peers_implicit_gemm "
            f"{status['gpu_peers_implicit_gemm']}",
            "cifar10_recipe": {"data": (_load(work, "data.json") or {}).get("cifar10", ABSENT),
                               **{name: _recipe(work, name, status[name])
                                  for name in ("cifar10_one_gpu", "cifar10_two_logical_gpus")}}}


def _peers_figures(peers, missing):
    """gpu_peers.py's three tables, or why each is missing (check.log says more)."""
    p6 = peers.get("p6") or "not measured (--skip-p6: no mnist-small data)"
    return {"recipe_network_vs_pytorch": _throughput(peers)
            if "throughput_samples_per_s" in peers else missing,
            "us_per_step_host_bound": _host_time(peers)
            if "host_us_per_step" in peers else missing,
            "p6": p6 if "p6" in peers else missing}


def _load(work, name):
    try:
        with open(os.path.join(work, name)) as file:
            return json.load(file)
    except (OSError, ValueError):
        return None


def _throughput(peers):
    rates, batch = peers["throughput_samples_per_s"], peers["batch"]
    named = {"towerflow_cuda_graphs": rates.get("towerflow_graphs"),
             "towerflow_op_by_op": rates.get("towerflow_op_by_op"),
             "pytorch_eager": rates.get("pytorch", ABSENT)}
    return {"batch": batch, "precision": peers["precision"], "samples_per_s": named,
            "step_ms": {name: 1e3 * batch / rate if isinstance(rate, float) else rate
                        for name, rate in named.items()},
            "best_towerflow_over_pytorch": rates.get("ratio") or ABSENT}


def _both_rates(*runs):
    return all("throughput_samples_per_s" in run for run in runs)


def _conv_paths(im2col, implicit):
    """The network's samples/s with each GPU convolution path (TOWERFLOW_GPU_CONV)."""
    rates = [run["throughput_samples_per_s"] for run in (im2col, implicit)]
    best = [max(rate["towerflow_graphs"], rate["towerflow_op_by_op"]) for rate in rates]
    return {"batch": implicit["batch"], "im2col_samples_per_s": best[0],
            "implicit_gemm_samples_per_s": best[1],
            "implicit_gemm_over_im2col": best[1] / best[0],
            "implicit_gemm_over_pytorch": rates[1].get("ratio") or ABSENT}


def _host_time(peers):
    times = peers["host_us_per_step"]
    return {"batch": peers.get("host_batch", 32),
            "what": "wall µs per step at a batch small enough that the host bounds the step "
                    "(gpu_peers.py table 2): the host's time a step",
            "cuda_graphs": times.get("towerflow_graphs"),
            "op_by_op": times.get("towerflow_op_by_op"),
            "pytorch_eager": times.get("pytorch", ABSENT)}


def _recipe(work, name, status):
    run = _load(work, f"{name}.json")
    if run is None:
        return f"not measured: {name} {status} (see check.log)"
    keys = ("samples_per_sec", "step_ms", "first_step_seconds", "eval_seconds", "steps",
            "towers", "devices", "all_reduce", "precision")
    return {key: run.get(key) for key in keys}


# -- the returned folder ---------------------------------------------------------------


def write_check_log(work, out, steps):
    """Every step's log in one file, each capped to its head and tail."""
    with open(os.path.join(out, "check.log"), "w") as combined:
        for part in (part for step in steps for part in step.get("shards", [step])):
            log = _read_log(work, part["name"])
            if len(log) > LOG_HEAD + LOG_TAIL:
                log = log[:LOG_HEAD] + "\n[... cut ...]\n" + log[-LOG_TAIL:]
            combined.write(f"==== {part['name']}: {part['status']}, exit "
                           f"{part.get('exit_code')}, {part.get('seconds')} s\n{log}\n")


def copy_results(work, out):
    """The benchmarks' JSON into ``out`` (a stale copy of a missing one removed)."""
    for name in RESULTS:
        target = os.path.join(out, name)
        if os.path.exists(os.path.join(work, name)):
            shutil.copyfile(os.path.join(work, name), target)
        elif os.path.exists(target):
            os.remove(target)


def summary(work, out, size, budget):
    steps = read_steps(work)
    with open(os.path.join(work, "started")) as started:
        wall = time.time() - _seconds(started.read().strip())
    write_check_log(work, out, steps)
    copy_results(work, out)
    failed = [step["name"] for step in steps if step["status"] != "passed"]
    report = {"check": "benchmarks/gpu_check.sh", "size": size, "budget_s": int(budget),
              "wall_s": round(wall, 1), "ok": not failed, "failed_steps": failed,
              "versions": _load(work, "versions.json")
              or dict.fromkeys(VERSION_KEYS, "unknown: the versions step did not pass"),
              "install": _load(work, "install.json") or {"error": "the install step failed"},
              "steps": steps, "measurements": measurements(work, steps),
              "files": ["summary.json", "check.log"] + [name for name in RESULTS
                                                        if os.path.exists(os.path.join(out, name))]}
    with open(os.path.join(out, "summary.json.part"), "w") as file:
        json.dump(report, file, indent=2)
    os.replace(os.path.join(out, "summary.json.part"), os.path.join(out, "summary.json"))
    print(f"summary: {len(steps) - len(failed)} of {len(steps)} steps passed "
          f"({', '.join(failed) or 'none failed'}), {wall:.0f} s; wrote {out}/summary.json")
    return min(len(failed), 99)


def main(argv):
    if len(argv) == 2 and argv[0] == "versions":
        with open(argv[1], "w") as file:
            json.dump(versions(), file, indent=2)
        return 0
    if len(argv) == 5 and argv[0] == "summary":
        return summary(*argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
