"""The ``towerflow`` command (also ``python -m towerflow``).

    towerflow                      # a short demonstration of the device model
    towerflow train digits --cpu-towers 2 --json-out result.json
    towerflow devices --json
    towerflow launch -n 2 -- python train.py --epochs 3
    towerflow bench session_overhead -- --repeats 5   # from a source checkout

Errors print one line and exit non-zero; ``--debug`` shows the traceback.
"""

import argparse
import sys

from . import cli_bench, cli_train, switches
from .errors import OpError


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
    try:
        switches.check()
        return _dispatch(argv)
    except OSError as err:
        if debug:
            raise
        return _report_os_error(err)
    except (ValueError, RuntimeError, ImportError, OpError) as err:
        if debug:
            raise
        if not getattr(err, "printed_by_rank_0", False):
            print(f"towerflow: error: {err}", file=sys.stderr)
        return 2


def _report_os_error(err):
    """One line for an OSError: the path and what went wrong, status 1. towerflow's
    own checks raise FileNotFoundError with a message and no path: status 2,
    a usage error."""
    if err.filename is None and isinstance(err, FileNotFoundError):
        print(f"towerflow: error: {err}", file=sys.stderr)
        return 2
    where = f"{err.filename!r}: " if err.filename is not None else ""
    also = f" (and {err.filename2!r})" if getattr(err, "filename2", None) else ""
    print(f"towerflow: error: {where}{err.strerror or err}{also}", file=sys.stderr)
    return 1


def _dispatch(argv):
    command, options = _split_command(argv)
    args = _parser().parse_args(options)
    if args.command == "launch":
        from . import launch
        return launch.launch(args.num_ranks, command or [], timeout=args.timeout)
    if args.command == "train":
        return cli_train.run_train(args)
    if args.command == "devices":
        return cli_train.run_devices(args)
    if args.command == "bench":
        return cli_bench.run_bench(args, command or [])
    from . import demo
    return demo.main()


def _split_command(argv):
    """(what follows '--' (launch's program, bench's options) or None, the options
    before it)."""
    if "--" not in argv:
        return None, argv
    return argv[argv.index("--") + 1:], argv[:argv.index("--")]


class _OneLineErrors(argparse.ArgumentParser):
    """argparse's ``towerflow train: error: ...`` line without the usage block
    above it: a bad value is one line, as every other towerflow error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser():
    parser = _OneLineErrors(prog="towerflow", description="towerflow command line")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("demo", help="the device model on logical CPUs (default)")
    launch = commands.add_parser(
        "launch", help="run a program on N MPI ranks: towerflow launch -n 2 -- python t.py")
    launch.add_argument("-n", "--num-ranks", type=cli_train.positive_int, required=True)
    launch.add_argument("--timeout", type=cli_train.positive_seconds, default=None,
                        help="seconds a collective waits for its peers (default 60)")
    cli_train.add_train_parser(commands)
    cli_bench.add_bench_parser(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
