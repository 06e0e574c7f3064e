"""``towerflow bench``: run the benchmark scripts of a source checkout
(benchmarks/*.py beside the towerflow package), each with this Python.

    towerflow bench --list
    towerflow bench                                # cpu_peers and session_overhead
    towerflow bench session_overhead -- --repeats 5
"""

import ast
import os
import subprocess
import sys

DEFAULT = ("cpu_peers", "session_overhead")


def add_bench_parser(commands, parents=()):
    bench = commands.add_parser(
        "bench", parents=list(parents),
        help="run benchmarks/ of a source checkout: towerflow bench [NAME ...] "
             "[-- options for the scripts]")
    bench.add_argument("names", nargs="*", metavar="NAME",
                       help=f"benchmark scripts (default: {' '.join(DEFAULT)})")
    bench.add_argument("--list", action="store_true", help="list the benchmarks and exit")


def run_bench(args, extra):
    """Run the named benchmarks with ``extra`` options; 1 if one failed.

    Example::

        >>> run_bench(argparse.Namespace(names=["session_overhead"], list=False), ["--help"])
        0
    """
    directory = benchmarks_dir()
    scripts = available(directory)
    if args.list:
        for name, path in scripts.items():
            print(f"{name:<20} {_summary(path)}")
        return 0
    names = args.names or [name for name in DEFAULT if name in scripts]
    unknown = [name for name in names if name not in scripts]
    if unknown:
        raise ValueError(f"unknown benchmark {', '.join(map(repr, unknown))}; "
                         f"the benchmarks are: {', '.join(scripts)}")
    failed = [name for name in names if _run(scripts[name], extra) != 0]
    if failed:
        print(f"towerflow: error: benchmark {', '.join(failed)} failed", file=sys.stderr)
        return 1
    return 0


def benchmarks_dir():
    """benchmarks/ of the checkout this towerflow was imported from; an error
    when towerflow was installed from a wheel (which has no benchmarks)."""
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    directory = os.path.join(checkout, "benchmarks")
    # NOTE: site-packages may hold some other project's benchmarks/; a checkout
    # also has pyproject.toml
    if not (os.path.isdir(directory)
            and os.path.isfile(os.path.join(checkout, "pyproject.toml"))):
        raise FileNotFoundError("the benchmarks run from a source checkout of towerflow "
                                f"(none at {checkout}): clone the repository, "
                                "`pip install -e .` and run `towerflow bench` there")
    return directory


def available(directory):
    """{name: path} of the benchmark scripts, sorted by name."""
    return {name[:-len(".py")]: os.path.join(directory, name)
            for name in sorted(os.listdir(directory))
            if name.endswith(".py") and not name.startswith("_")}


def _run(path, extra):
    print(f"== {os.path.basename(path)} {' '.join(extra)}".rstrip(), flush=True)
    env = dict(os.environ)
    # the scripts import the towerflow of this checkout, whatever is installed
    checkout = os.path.dirname(os.path.dirname(path))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, path, *extra], env=env, check=False).returncode


def _summary(path):
    """The first paragraph of the script's docstring, on one line."""
    with open(path, encoding="utf-8") as source:
        doc = ast.get_docstring(ast.parse(source.read())) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())
