"""The compiled optimizer updates against NumPy's ufunc chains inside a real
training step, alternated in one process (native_updates.py)::

    python benchmarks/optimizer_updates.py [--model mnist_cnn] [--batch 50] [--rounds 6]

Each round profiles ``--steps`` steps (benchmarks/profile_step.py) with the
compiled updates, then with the chains (CompiledUpdates declining every
update), or the other way round on odd rounds; prints the median step time
and the median time per step of the Apply* ops.
"""

import argparse
import collections
import statistics

import cpu_peers
import profile_step

from towerflow.backends import native_updates


def declined(self, kind, arrays, scalars):
    """CompiledUpdates._apply that leaves every update to the NumPy chain."""
    return False


def measure(model, batch, rounds, steps):
    """{arm: ([step ms per round], {op: [ms per round]})}."""
    compiled = native_updates.CompiledUpdates._apply
    arms = {"numpy": ([], collections.defaultdict(list)),
            "compiled": ([], collections.defaultdict(list))}
    try:
        for index in range(rounds):
            for arm in sorted(arms, reverse=index % 2 == 1):
                native_updates.CompiledUpdates._apply = compiled if arm == "compiled" \
                    else declined
                per_op, op_types, plain = profile_step.profile(model, steps, batch)
                step_ms, op_ms = arms[arm]
                step_ms.append(statistics.median(plain) * 1e3)
                applies = {op: statistics.median(times) * 1e3 for op, times in per_op.items()
                           if op_types[op].startswith("Apply")}
                op_ms["(all Apply* ops)"].append(sum(applies.values()))
                for op, ms in applies.items():
                    op_ms[op].append(ms)
    finally:
        native_updates.CompiledUpdates._apply = compiled
    return arms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mnist_cnn",
                        choices=sorted(cpu_peers.MODELS) + ["cifar10", "mnist_cnn"])
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--ops", type=int, default=4, help="how many of the slowest ops")
    args = parser.parse_args()
    for arm, (step_ms, op_ms) in measure(args.model, args.batch, args.rounds,
                                         args.steps).items():
        print(f"{arm:9s} step {statistics.median(step_ms):8.2f} ms "
              f"(median of {args.rounds} rounds x {args.steps} steps)")
        medians = {op: statistics.median(values) for op, values in op_ms.items()}
        for op, ms in sorted(medians.items(), key=lambda item: -item[1])[:args.ops + 1]:
            print(f"    {op[-56:]:56s} {ms:8.3f} ms")


if __name__ == "__main__":
    main()
