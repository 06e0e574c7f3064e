"""What handing a kernel's parts to the CPU pool costs: one compiled kernel
(batch norm's apply over rows, float32, 64 channels) on the calling thread
alone, then split in two parts through the pool's Python threads
(``WorkerPool.run``: each part's Python takes the GIL on its thread) and
through its C threads (``WorkerPool.run_compiled``: the parts' calls are
recorded, then run without the GIL; see towerflow/backends/native_parts.c).

    python benchmarks/pool_handoff.py [--calls 2000] [--json FILE]

Back to back, the C threads are still spinning from the last call; after a
2 ms pause they have gone to sleep and must be woken, as the Python threads
always are. Each part does the whole kernel on its own rows, so two parts
that truly overlap take the time of one: the overhead column is the split
run's time minus the time of one part alone. Prints a table (medians, µs)
and writes JSON (default: benchmarks/results/pool_handoff.json).
"""

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

from towerflow.backends import cpu_threads, native

CHANNELS = 64
PAUSE_S = 0.002


def rows_kernel(rows):
    """call(part): batch norm's apply over ``rows`` rows of part ``part``'s arrays."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((rows, CHANNELS)).astype(np.float32) for _ in range(2)]
    ys = [np.empty_like(x) for x in xs]
    coefficients = rng.standard_normal((3, CHANNELS)).astype(np.float32)

    def call(part):
        native.batch_norm_apply((rows, CHANNELS, 0, rows), xs[part], coefficients, ys[part],
                                False)
    return call


def median_us(run, calls, pause):
    samples = []
    for _ in range(calls):
        if pause:
            time.sleep(pause)
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def measure(rows, calls, pause):
    call = rows_kernel(rows)
    pool = cpu_threads.WorkerPool(2)
    ways = {"one part, caller": lambda: call(0),
            "two parts, Python threads": lambda: pool.run(call, 2),
            "two parts, C threads": lambda: pool.run_compiled(call, 2)}
    for run in ways.values():      # warm: starts the threads
        for _ in range(20):
            run()
    times = {name: median_us(run, calls, pause) for name, run in ways.items()}
    alone = times["one part, caller"]
    return {name: {"us": value, "overhead_us": value - alone} for name, value in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                       "pool_handoff.json"))
    args = parser.parse_args()
    if not native.available():
        raise SystemExit("pool_handoff: the compiled kernels are not built (or TOWERFLOW_NATIVE=0)")
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("pool_handoff: needs 2 CPUs or more")
    results = []
    print(f"{'rows':>7} {'pause':>6}  {'way':<27} {'median us':>10} {'overhead us':>12}")
    for rows in (256, 4096, 32768):
        for pause in (0.0, PAUSE_S):
            for name, value in measure(rows, args.calls if not pause else args.calls // 4,
                                       pause).items():
                print(f"{rows:>7} {pause * 1e3:>4.0f}ms  {name:<27} {value['us']:>10.1f} "
                      f"{value['overhead_us']:>12.1f}")
                results.append({"rows": rows, "pause_ms": pause * 1e3, "way": name, **value})
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as out:
        json.dump({"machine": platform.platform(), "cpus": len(os.sched_getaffinity(0)),
                   "channels": CHANNELS, "results": results}, out, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
