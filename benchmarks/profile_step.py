"""Where a towerflow training step of a cpu_peers.py model spends its time.

Times every step of the compiled plan (one kernel call each) over many
training steps and prints, per op type and per op, the median time per
training step in ms::

    python benchmarks/profile_step.py [--model cnn] [--steps 30] [--ops 12]
    python benchmarks/profile_step.py --model cifar10 [--batch 64]
    python benchmarks/profile_step.py --model mnist_cnn [--batch 50]

``cifar10`` is the cifar10 recipe's network (benchmarks/gpu_peers.py's
training step, on /cpu:0); ``mnist_cnn`` the classic TF1 MNIST CNN of
benchmarks/mnist_cnn_cpu.py (5x5 convolutions).

Timing each kernel adds a few microseconds per op; the step total printed
first is measured without it. ``cores`` is the op's CPU time over its wall
time (all threads): near 1, it ran on one core while the others waited.
The pool's C threads spin for a while after each kernel (see
towerflow/backends/native_parts.c) and that counts as busy too: run with
TOWERFLOW_C_THREADS=0 to see which ops leave cores idle.
"""

import argparse
import collections
import statistics
import time

import cpu_peers

from towerflow import plan as plan_module


def training_step(model, batch):
    """(run one step on a batch, batches) for a cpu_peers model or the cifar10 network."""
    if model == "cifar10":
        import gpu_peers
        step = gpu_peers.TowerflowStep(batch or 64, "float32", "/cpu:0", cuda_graphs=False)
        return step.run, gpu_peers.make_batches(batch or 64)
    if model == "mnist_cnn":
        import mnist_cnn_cpu
        step = mnist_cnn_cpu.GraphStep(mnist_cnn_cpu.towerflow)
        return step.run, mnist_cnn_cpu.make_batches(batch or 50)
    spec = dict(cpu_peers.MODELS[model])
    spec["batch"] = batch or spec["batch"]
    return cpu_peers.towerflow_step(model, spec), cpu_peers.make_batches(spec)


def profile(model, steps, batch=None):
    """({op name: [seconds per step]}, {op name: op type}, [untimed step seconds])."""
    run_step, batches = training_step(model, batch)
    for warm_up in batches[:3]:
        run_step(warm_up)
    plain = []
    for i in range(steps):
        start = time.perf_counter()
        run_step(batches[i % len(batches)])
        plain.append(time.perf_counter() - start)
    per_op, op_types = collections.defaultdict(list), {}
    original = plan_module.Plan.run
    plan_module.Plan.run = _timed_run(per_op, op_types)
    try:
        for i in range(steps):
            run_step(batches[i % len(batches)])
    finally:
        plan_module.Plan.run = original
    return per_op, op_types, plain


def _timed_run(per_op, op_types):
    def run(plan, feed_values):
        slots = plan.place_feeds(plan.check_feeds(feed_values))
        ops = [detail.op for detail in plan.step_details()]

        def observe(index, step, slots):
            start, cpu_start = time.perf_counter(), time.process_time()
            step(slots)
            wall = time.perf_counter() - start
            # process_time counts every thread: cpu / wall is how many cores the op kept busy
            per_op[ops[index].name].append((wall, time.process_time() - cpu_start))
            op_types[ops[index].name] = ops[index].type
        plan.run_steps_observed(slots, observe)
        return plan.fetch(slots)
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", choices=sorted(cpu_peers.MODELS) + ["cifar10", "mnist_cnn"])
    parser.add_argument("--batch", type=int, default=None,
                        help="batch size (default: the model's own; 64 for cifar10, "
                        "50 for mnist_cnn)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--ops", type=int, default=12, help="how many of the slowest ops")
    args = parser.parse_args()
    per_op, op_types, plain = profile(args.model, args.steps, args.batch)
    print(f"{args.model}: step {statistics.median(plain) * 1e3:.1f} ms (median of "
          f"{args.steps}, untimed)")
    medians = {name: statistics.median(wall for wall, _ in times) * 1e3
               for name, times in per_op.items()}
    cores = {name: sum(cpu for _, cpu in times) / max(sum(wall for wall, _ in times), 1e-9)
             for name, times in per_op.items()}
    by_type = collections.defaultdict(float)
    for name, ms in medians.items():
        by_type[op_types[name]] += ms
    print(f"\n{'op type':36s} {'ms/step':>8s}")
    for op_type, ms in sorted(by_type.items(), key=lambda item: -item[1])[:args.ops]:
        print(f"{op_type:36s} {ms:8.2f}")
    print(f"\n{'op':60s} {'ms/step':>8s} {'cores':>6s}")
    for name, ms in sorted(medians.items(), key=lambda item: -item[1])[:args.ops]:
        print(f"{name[-60:]:60s} {ms:8.2f} {cores[name]:6.2f}")
    print(f"{'sum of the medians of all ops':60s} {sum(medians.values()):8.2f}")
    one_core = sum(ms for name, ms in medians.items() if cores[name] < 1.2)
    print(f"{'of which in ops that kept at most 1.2 cores busy':60s} {one_core:8.2f}")


if __name__ == "__main__":
    main()
