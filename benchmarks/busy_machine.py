"""CPU seconds on a busy machine: towerflow and PyTorch eager, quiet and beside
CPU-bound neighbours.

Two training jobs, float32, synthetic data, each run in a fresh child process
(imports, graph building and a few warm-up steps untimed):

- ``mlp``: an MNIST-sized feed-dict MLP, 784-256-10 (ReLU), batch 128,
  momentum SGD, ``--mlp-steps`` steps;
- ``cifar10``: the cifar10 recipe's network and training step at batch
  ``--cifar-batch`` (benchmarks/gpu_peers.py's TowerflowStep and TorchStep, as
  benchmarks/cifar_cpu.py runs them), ``--cifar-steps`` steps.

Each job runs QUIET (nothing else on the machine) and BUSY: beside
``--neighbours`` processes (default: one per core this process may use) that
each spin on the CPU for as long as the child runs. Each child reports the CPU
seconds of the timed steps (user + system, all its threads:
``resource.getrusage(RUSAGE_SELF)``) and their wall seconds; the table gives
both, and busy CPU / quiet CPU. A framework that spins while it waits burns
CPU the neighbours wanted, and its busy CPU seconds grow; one that sleeps
while it waits keeps them close to the quiet ones. The neighbours' own CPU
seconds (summed) are in the JSON.

Both frameworks run at their defaults (towerflow: TOWERFLOW_* unset, a pool
of one thread per usable core; PyTorch: its own thread count), each child
with the environment of this script.

    python benchmarks/busy_machine.py [--jobs mlp,cifar10] [--neighbours N]
        [--rounds 1] [--isa avx2|avx512] [--json benchmarks/results/busy_machine.json]

With ``--rounds`` above 1 each measurement is the median of that many
children (quiet and busy alternating). PyTorch gets "not installed" rows
where it is not installed.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import vector_path

HERE = os.path.dirname(os.path.abspath(__file__))
FRAMEWORKS = ("towerflow", "pytorch")
JOBS = ("mlp", "cifar10")
MLP_SIZES, MLP_BATCH = (784, 256, 10), 128
LEARNING_RATE, MOMENTUM = 0.01, 0.9
WARM_UP_STEPS = 5
NEIGHBOUR = "while True:\n    pass\n"


# -- the children: one job, one framework ---------------------------------------------


def mlp_batches(count=8, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((MLP_BATCH, MLP_SIZES[0]), dtype=np.float32),
             rng.integers(0, MLP_SIZES[-1], MLP_BATCH).astype(np.int64))
            for _ in range(count)]


def towerflow_mlp():
    import towerflow as tf
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(0)
        x = tf.placeholder(tf.float32, (None, MLP_SIZES[0]))
        labels = tf.placeholder(tf.int64, [None])
        hidden = tf.layers.dense(x, MLP_SIZES[1], activation=tf.nn.relu)
        logits = tf.layers.dense(hidden, MLP_SIZES[2])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits))
        train_op = tf.train.MomentumOptimizer(LEARNING_RATE, MOMENTUM).minimize(loss)
        sess = tf.Session(graph=graph)
        sess.run(tf.global_variables_initializer())
    return (lambda batch: sess.run(train_op, {x: batch[0], labels: batch[1]})), mlp_batches()


def torch_mlp(torch):
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(MLP_SIZES[0], MLP_SIZES[1]), nn.ReLU(),
                          nn.Linear(MLP_SIZES[1], MLP_SIZES[2]))
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()

    def step(batch):
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(torch.from_numpy(batch[0])), torch.from_numpy(batch[1])).backward()
        optimizer.step()
    return step, mlp_batches()


def cifar10_step(framework, batch):
    sys.path.insert(0, HERE)
    import gpu_peers
    if framework == "towerflow":
        runner = gpu_peers.TowerflowStep(batch, "float32", "/cpu:0", False)
    else:
        import torch
        runner = gpu_peers.TorchStep(torch, batch, "float32", "cpu")
    return runner.run, gpu_peers.make_batches(batch)


def child(job, framework, steps, cifar_batch):
    """Build the job, warm it up, time ``steps`` steps: {cpu_s, wall_s, ...}."""
    if framework == "pytorch":
        import torch
        threads = torch.get_num_threads()
    else:
        threads = None
    if job == "mlp":
        step, batches = towerflow_mlp() if framework == "towerflow" else torch_mlp(torch)
    else:
        step, batches = cifar10_step(framework, cifar_batch)
    for index in range(WARM_UP_STEPS):
        step(batches[index % len(batches)])
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for index in range(steps):
        step(batches[index % len(batches)])
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    result = {"cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
              "wall_s": wall, "steps": steps,
              "involuntary_switches": after.ru_nivcsw - before.ru_nivcsw,
              "voluntary_switches": after.ru_nvcsw - before.ru_nvcsw,
              "threads": len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task")
              else None}
    if threads is not None:
        result["torch_threads"] = threads
    return result


# -- the parent: children quiet and busy ----------------------------------------------


def start_neighbours(count):
    return [subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) for _ in range(count)]


def stop_neighbours(neighbours):
    """Kill them; their CPU seconds (user + system), summed."""
    total = 0.0
    for process in neighbours:
        process.kill()
    for process in neighbours:
        _, _, usage = os.wait4(process.pid, 0)
        process.returncode = -9
        total += usage.ru_utime + usage.ru_stime
    return total


def run_child(job, framework, args, neighbours):
    """One child's result, run beside ``neighbours`` spinning processes."""
    steps = args.mlp_steps if job == "mlp" else args.cifar_steps
    command = [sys.executable, os.path.abspath(__file__), "--child", job, framework,
               str(steps), str(args.cifar_batch)]
    machine_before, own_before = machine_cpu_s(), os.times()
    spinning = start_neighbours(neighbours)
    try:
        time.sleep(0.2 if neighbours else 0)       # the neighbours up and spinning
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        output = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            raise RuntimeError(f"{' '.join(command)} failed ({process.returncode})")
    finally:
        neighbour_cpu = stop_neighbours(spinning)
    own = sum(os.times()[:2]) - sum(own_before[:2])
    result = json.loads(output.strip().splitlines()[-1])
    result["neighbour_cpu_s"] = neighbour_cpu
    result["child_total_cpu_s"] = usage.ru_utime + usage.ru_stime
    if machine_before is not None:
        result["others_cpu_s"] = max(0.0, machine_cpu_s() - machine_before - own
                                     - neighbour_cpu - result["child_total_cpu_s"])
    return result


def machine_cpu_s():
    """The CPU seconds every process on the machine has used (/proc/stat: user,
    nice, system, irq, softirq, steal); None where there is no /proc/stat. Over a
    child's run, less the child's, the neighbours' and this script's, it is what
    other processes took: a QUIET run beside someone else's build is not quiet."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()[1:]
    except OSError:
        return None
    user, nice, system, _, _, irq, softirq = (int(f) for f in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def installed(framework):
    if framework == "towerflow":
        return True
    probe = subprocess.run([sys.executable, "-c", "import torch"], check=False,
                           capture_output=True)
    return probe.returncode == 0


def measure(job, framework, args):
    samples = {"quiet": [], "busy": []}
    for _ in range(args.rounds):
        samples["quiet"].append(run_child(job, framework, args, 0))
        samples["busy"].append(run_child(job, framework, args, args.neighbours))
    row = {"job": job, "framework": framework, "samples": samples}
    for state, runs in samples.items():
        for key in ("cpu_s", "wall_s", "others_cpu_s"):
            values = [run[key] for run in runs if key in run]
            row[f"{state}_{key}"] = statistics.median(values) if values else None
    row["cpu_ratio"] = row["busy_cpu_s"] / row["quiet_cpu_s"]
    return row


def print_table(rows, neighbours):
    print(f"\nbusy: beside {neighbours} CPU-bound neighbour process(es); CPU s of the timed "
          "steps (all threads), median; others: CPU s other processes took, quiet/busy run")
    print(f"{'job':<8} {'framework':<10} {'quiet CPU s':>11} {'busy CPU s':>10} "
          f"{'ratio':>6} {'quiet wall':>10} {'busy wall':>9} {'others CPU s':>12}")
    for row in rows:
        if row.get("not_installed"):
            print(f"{row['job']:<8} {row['framework']:<10} {'not installed':>11}")
            continue
        print(f"{row['job']:<8} {row['framework']:<10} {row['quiet_cpu_s']:>11.2f} "
              f"{row['busy_cpu_s']:>10.2f} {row['cpu_ratio']:>6.2f} "
              f"{row['quiet_wall_s']:>10.2f} {row['busy_wall_s']:>9.2f} "
              f"{_others(row):>12}")


def _others(row):
    """The CPU seconds other processes took during the quiet and the busy run."""
    if row["quiet_others_cpu_s"] is None:
        return "-"
    return f"{row['quiet_others_cpu_s']:.1f}/{row['busy_others_cpu_s']:.1f}"


def versions():
    import numpy as np
    program = "import torch; print(torch.__version__, torch.get_num_threads())"
    probe = subprocess.run([sys.executable, "-c", program], check=False, capture_output=True,
                           text=True)
    torch = probe.stdout.split() if probe.returncode == 0 else [None, None]
    from towerflow.backends import cpu_threads
    return {"numpy": np.__version__, "torch": torch[0],
            "torch_threads": None if torch[1] is None else int(torch[1]),
            "python": sys.version.split()[0],
            "towerflow_pool_threads": cpu_threads.cpu_pool().workers,
            "environment": {name: value for name, value in sorted(os.environ.items())
                            if name.startswith(("TOWERFLOW_", "OPENBLAS_", "OMP_", "MKL_"))}}


def write_json(path, result):
    """``result`` with the machine (CPU model, vector extensions, cores, compiled
    kernels, switches set, date) as ``path``."""
    from towerflow import training
    from towerflow.device import host
    training.write_json(path, {**result, "machine": host.describe()})
    print(f"wrote {path}")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        job, framework, steps, cifar_batch = sys.argv[2:6]
        print(json.dumps(child(job, framework, int(steps), int(cifar_batch))))
        return
    from towerflow.device import host
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--neighbours", type=int, default=host.usable_cores())
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--mlp-steps", type=int, default=400)
    parser.add_argument("--cifar-steps", type=int, default=20)
    parser.add_argument("--cifar-batch", type=int, default=64)
    parser.add_argument("--json", default=os.path.join(HERE, "results", "busy_machine.json"))
    vector_path.add_argument(parser)
    args = parser.parse_args()
    vector_path.hold(args.isa)          # the children inherit the switches
    rows = []
    for job in args.jobs.split(","):
        for framework in args.frameworks.split(","):
            if not installed(framework):
                rows.append({"job": job, "framework": framework, "not_installed": True})
                continue
            rows.append(measure(job, framework, args))
            print(f"{job} {framework}: CPU s quiet {rows[-1]['quiet_cpu_s']:.2f}, "
                  f"busy {rows[-1]['busy_cpu_s']:.2f}", flush=True)
    print_table(rows, args.neighbours)
    write_json(args.json, {"benchmark": "busy_machine", "unit": "CPU seconds",
                           "neighbours": args.neighbours, "rounds": args.rounds,
                           "mlp": {"sizes": MLP_SIZES, "batch": MLP_BATCH,
                                   "steps": args.mlp_steps},
                           "cifar10": {"batch": args.cifar_batch, "steps": args.cifar_steps},
                           "rows": rows, "versions": versions(),
                           "vector_path": vector_path.record()})


if __name__ == "__main__":
    main()
