"""The ``towerflow`` command (also ``python -m towerflow``).

    towerflow                      # the help
    towerflow demo                 # a short demonstration of the device model
    towerflow train digits --cpu-towers 2 --json-out result.json
    towerflow devices --json
    towerflow launch -n 2 python train.py --epochs 3
    towerflow launch -H node1:2,node2:2 python train.py   # 4 ranks on 2 hosts
    towerflow bench session_overhead -- --repeats 5   # from a source checkout

Errors print one line; ``--debug`` shows the traceback. Exit status: 0 done,
1 a failure while running (a RuntimeError, an op's error other than
InvalidArgumentError, a lost rank, a file that cannot be written, memory),
2 a usage error (an option, a value, an environment switch, invalid input:
ValueError and InvalidArgumentError, a run that cannot start as asked); a
run stopped by SIGINT/SIGTERM exits 128 + the signal's number (after its
checkpoint).
"""

import argparse
import contextlib
import sys

from . import __version__, cli_bench, cli_train, switches
from .errors import OpError
from .log import logger, set_level

EXIT_FAILURE, EXIT_USAGE = 1, 2


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in _options_of(argv)
    if debug:
        argv.remove("--debug")
    try:
        switches.check()
        with _log_level_kept():
            return _dispatch(argv)
    except OSError as err:
        if debug:
            raise
        return _report_os_error(err)
    except (ValueError, ImportError) as err:     # what was asked cannot be done
        if debug:           # (an InvalidArgumentError is a ValueError: bad input)
            raise
        return _report(err, EXIT_USAGE)
    except (RuntimeError, OpError, MemoryError) as err:      # it failed while running
        if debug:
            raise
        return _report(err, EXIT_FAILURE)


@contextlib.contextmanager
def _log_level_kept():
    """The logger's level as it was once the command is done: --log-level and
    --quiet set it for the command (main() may run inside a program or test)."""
    level = logger.level
    try:
        yield
    finally:
        logger.setLevel(level)


def _report(err, status):
    """One line for ``err`` (unless rank 0 printed it for every rank); ``status``."""
    if not getattr(err, "printed_by_rank_0", False):
        text = str(err) or type(err).__name__      # MemoryError() says nothing
        print(f"towerflow: error: {text}", file=sys.stderr)
    return status


def _options_of(argv):
    """towerflow's own arguments: those before a program or script options
    (after ``--``, or after ``launch``'s program)."""
    return _split_command(argv)[1]


def _report_os_error(err):
    """One line for an OSError: the path and what went wrong, status 1. towerflow's
    own checks raise FileNotFoundError with a message and no path: status 2,
    a usage error."""
    if err.filename is None and isinstance(err, FileNotFoundError):
        print(f"towerflow: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    where = f"{err.filename!r}: " if err.filename is not None else ""
    also = f" (and {err.filename2!r})" if getattr(err, "filename2", None) else ""
    print(f"towerflow: error: {where}{err.strerror or err}{also}", file=sys.stderr)
    return EXIT_FAILURE


def _dispatch(argv):
    command, options = _split_command(argv)
    parser = _parser()
    args = parser.parse_args(options)
    if getattr(args, "log_level", None):
        set_level(args.log_level)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "launch":
        from . import launch
        return launch.launch(args.num_ranks, command or [], timeout=args.timeout,
                             hosts=args.hosts, hostfile=args.hostfile)
    if args.command == "train":
        return cli_train.run_train(args)
    if args.command == "devices":
        return cli_train.run_devices(args)
    if args.command == "bench":
        return cli_bench.run_bench(args, command or [])
    from . import demo
    return demo.main()


def _split_command(argv):
    """(the program or options that are not towerflow's, or None; towerflow's
    own arguments): what follows ``--``, or ``launch``'s program, which may
    come without ``--`` (its first word that is not one of launch's options).

    Example::

        >>> _split_command(["launch", "-n", "2", "python", "t.py", "-v"])
        (['python', 't.py', '-v'], ['launch', '-n', '2'])
    """
    if "--" in argv:
        return argv[argv.index("--") + 1:], argv[:argv.index("--")]
    if argv[:1] == ["launch"]:
        start = _launch_program_start(argv)
        if start is not None:
            return argv[start:], argv[:start]
    return None, argv


_LAUNCH_VALUED = {"-n", "--num-ranks", "--timeout", "--log-level", "-H", "--host",
                  "--hostfile"}   # options taking a value


def _launch_program_start(argv):
    """Where ``launch``'s program starts in ``argv`` (``launch`` first), or None."""
    index = 1
    while index < len(argv):
        word = argv[index]
        if not word.startswith("-"):
            return index
        index += 2 if word in _LAUNCH_VALUED else 1
    return None


class _OneLineErrors(argparse.ArgumentParser):
    """argparse's ``towerflow train: error: ...`` line without the usage block
    above it: a bad value is one line, as every other towerflow error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser():
    common = _common_options()
    parser = _OneLineErrors(prog="towerflow", parents=[common],
                            description="towerflow: data-parallel training with TF1's "
                                        "device model. Exit status: 0 done, 1 a failure "
                                        "while running, 2 a usage error.")
    parser.add_argument("--version", action="version", version=f"towerflow {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("demo", parents=[common],
                        help="a short demonstration of the device model on logical CPUs")
    launch = commands.add_parser(
        "launch", parents=[common],
        help="run a program on N MPI ranks: towerflow launch -n 2 python t.py")
    launch.add_argument("-n", "--num-ranks", type=cli_train.positive_int, default=None,
                        help="how many ranks (processes) to start (required on this "
                             "host; with -H or --hostfile, default: one per slot)")
    hosts = launch.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--host", dest="hosts", metavar="HOST:SLOTS,...", default=None,
                       help="run on these hosts, started over ssh by Open MPI, e.g. "
                            "node1:2,node2:2 (a host without :SLOTS has one slot); -n may "
                            "not exceed the slots (default: this host only)")
    hosts.add_argument("--hostfile", metavar="FILE", default=None,
                       help="run on the hosts of an Open MPI hostfile, a line 'HOST "
                            "slots=N' per host (default: this host only)")
    launch.add_argument("--timeout", type=cli_train.positive_seconds, default=None,
                        help="seconds a collective waits for its peers (default 60)")
    launch.add_argument("program", nargs="?", metavar="PROGRAM ...",
                        help="the program and its arguments (after -- if it begins "
                             "with a dash)")
    cli_train.add_train_parser(commands, [common])
    cli_bench.add_bench_parser(commands, [common])
    return parser


def _common_options():
    """Options every command takes, before or after its name."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", choices=switches.LOG_LEVELS, default=argparse.SUPPRESS,
                        help="the least severe log lines shown (default: info, or "
                             "TOWERFLOW_LOG_LEVEL); train's --quiet means warning")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an error instead of one line")
    return common


if __name__ == "__main__":
    sys.exit(main())
