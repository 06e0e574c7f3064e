"""``towerflow train`` and ``towerflow devices``: the argument handling, kept
apart from the training loop (towerflow/training.py)."""

import argparse
import json
import os
import shlex
import sys
import time

from .device import DeviceSpec, host, runtime
from .run_record import option_flag


def positive_int(text):
    """argparse type: an integer >= 1 (argparse names the option in its error).

    Example::

        >>> positive_int("64")
        64
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a whole "
                                         "number >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid value {value}: expected a whole "
                                         "number >= 1")
    return value


def positive_seconds(text):
    """argparse type: a positive finite number of seconds.

    Example::

        >>> positive_seconds("2.5")
        2.5
    """
    from .parallel.mpi import checked_timeout
    try:
        return checked_timeout(text, f"invalid value {text!r}")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_train_parser(commands, parents=()):
    train = commands.add_parser("train", parents=list(parents),
                                help="train a recipe: towerflow train digits")
    from .recipes import NAMES
    train.add_argument("recipe", help=f"the recipe to train: {', '.join(NAMES)}")
    where = train.add_mutually_exclusive_group()
    where.add_argument("--devices", help="comma-separated towers, e.g. /gpu:0,/gpu:1 "
                                         "(default: every GPU, else the CPU's cores)")
    where.add_argument("--towers", type=positive_int,
                       help="the first N GPUs (or logical CPUs) (default: all of them)")
    where.add_argument("--cpu-towers", type=positive_int,
                       help="N logical CPUs as towers, sharing the cores (default: none)")
    train.add_argument("--all-reduce", default="auto",
                       choices=["auto", "cpu", "local", "nccl", "mpi"],
                       help="how the towers' gradients are summed (default auto: NCCL "
                            "between GPUs, MPI between ranks, else on the host)")
    train.add_argument("--sync-batch-norm", action="store_true",
                       help="normalise every batch norm with the statistics of the global "
                            "batch (with --accumulate: of each micro-batch) across all "
                            "towers and ranks (one all-reduce per layer and micro-batch; "
                            "default: each tower's own shard)")
    train.add_argument("--precision", default=None,
                       choices=["float32", "mixed_float16", "mixed_bfloat16"],
                       help="mixed_float16: float16 compute, float32 weights, loss scaling; "
                            "mixed_bfloat16: bfloat16 compute, float32 weights, no scaling "
                            "(default float32)")
    train.add_argument("--batch-size", type=positive_int,
                       help="the global batch (with --accumulate: each micro-batch), "
                            "split across the towers (default: the recipe's)")
    train.add_argument("--accumulate", type=positive_int, metavar="K",
                       help="gradient accumulation: each update (step) is K micro-batches "
                            "of --batch-size, all-reduced once and equal to one update on "
                            "a batch K times larger; an epoch's last update takes the "
                            "micro-batches left (default 1: no accumulation)")
    train.add_argument("--epochs", type=positive_int,
                       help="the run's total length in epochs (default: the recipe's)")
    train.add_argument("--steps", type=positive_int, help="the run's total length in steps "
                                                          "(with --epochs: the smaller; "
                                                          "default: by --epochs)")
    train.add_argument("--schedule-steps", type=positive_int, metavar="STEPS",
                       help="the learning-rate schedule spans STEPS steps (default: the "
                            "run's length); such a run can be resumed to any --steps")
    train.add_argument("--seed", type=int, default=None,
                       help="the seed of the weights and the data order (default 0)")
    train.add_argument("--data-dir", help="the recipe's data files (cifar10 needs it; "
                                          "default: the data a package ships, e.g. "
                                          "scikit-learn's digits)")
    train.add_argument("--checkpoint-dir",
                       help="write checkpoints, the training curve and the run's options "
                            "here (default: none)")
    train.add_argument("--resume", action="store_true",
                       help="continue the run of --checkpoint-dir to its end")
    train.add_argument("--extend", action="store_true",
                       help="with --resume: continue to a new --steps/--epochs")
    train.add_argument("--checkpoint-every", type=positive_int, metavar="STEPS",
                       help="checkpoint every STEPS steps (default: each epoch's end)")
    train.add_argument("--checkpoint-secs", type=positive_seconds, metavar="SECONDS",
                       help="checkpoint every SECONDS seconds (default: no clock)")
    train.add_argument("--keep-checkpoints", type=positive_int, default=3, metavar="K",
                       help="keep the last K checkpoints (default 3)")
    train.add_argument("--log-device-placement", action="store_true",
                       help="log the device of every op, as TF's ConfigProto option")
    train.add_argument("--json-out", metavar="FILE",
                       help="write the run's summary (accuracy, speed, devices) as JSON "
                            "to FILE (default: none)")
    train.add_argument("--log-every", type=int, metavar="STEPS",
                       help="a training-curve row every STEPS steps (default: about 50 "
                            "rows a run)")
    train.add_argument("--trace", metavar="FILE",
                       help="write a Chrome trace (Perfetto, chrome://tracing) of a few "
                            "training steps to FILE (default: none)")
    train.add_argument("--trace-steps", type=positive_int, metavar="N",
                       help="with --trace: trace N steps from the run's second (default 3)")
    train.add_argument("--tensorboard", metavar="DIR",
                       help="write the training curves (loss, accuracy, learning rate, "
                            "samples/s) as TensorBoard event files in a new run directory "
                            "in DIR (default: none)")
    train.add_argument("--quiet", action="store_true",
                       help="no progress bars or summary line; log warnings only")
    devices = commands.add_parser("devices", parents=list(parents),
                                  help="the devices towerflow sees, and why no GPU is "
                                       "usable if none is")
    devices.add_argument("--json", action="store_true",
                         help="print the report as JSON")


def run_train(args):
    from . import recipes, run_control, run_record, training
    if args.quiet and getattr(args, "log_level", None) is None:
        from .log import set_level
        set_level("warning")        # --quiet: warnings and errors only
    recipe = recipes.get(args.recipe)
    if args.log_every is not None:
        from .curves import check_log_every
        check_log_every(args.log_every)
    if args.trace_steps is not None and not args.trace:
        raise ValueError("--trace-steps needs --trace FILE (where to write the trace)")
    if args.data_dir and not os.path.isdir(args.data_dir):
        raise FileNotFoundError(f"--data-dir {args.data_dir!r} is not a directory")
    if getattr(recipe, "kind", None) == "script":
        return run_script(recipe, args)
    devices = choose_devices(args)
    try:
        result = training.fit(recipe, devices, **_fit_options(args))
    except run_record.RunAlreadyFinished as finished:
        if _is_rank_zero():
            print(f"towerflow: {finished}")
        return 0
    except run_control.Interrupted as stop:
        _report_interrupt(stop, args)
        return stop.exit_code
    except run_control.StopNow as stop:
        print(f"towerflow: {stop}; no checkpoint written", file=sys.stderr)
        return 128 + stop.signum
    if not args.quiet and _is_rank_zero():      # one summary for the job, not one a rank
        print(summary_line(result))
    return 0


def summary_line(result):
    """The line ``towerflow train`` prints at the end: the figures of --json-out.

    >>> summary_line(result)
    'cifar10: test accuracy 0.4583, 491 samples/s of training (median step 521 ms) on 1
    tower (/cpu:0), 37.1 s in all (11.4 s of evaluation)'

    Under ``towerflow launch -n 2``: ``... on 2 ranks x 1 tower (/cpu:0 each) ...``;
    with ``--accumulate 2``: ``(median step 1040 ms, 2 micro-batches a step)``.
    """
    accumulate = result.get("accumulate", 1)
    micro = f", {accumulate} micro-batches a step" if accumulate > 1 else ""
    step = f" (median step {result['step_ms']:.0f} ms{micro})" if result["step_ms"] else ""
    towers = f"{result['towers']} tower" + ("" if result["towers"] == 1 else "s")
    devices = ", ".join(result["devices"])
    ranks = result.get("world_size", 1)
    where = f"{ranks} ranks x {towers} ({devices} each)" if ranks > 1 else \
        f"{towers} ({devices})"
    return (f"{result['recipe']}: test accuracy {result['test_accuracy']:.4f}, "
            f"{result['samples_per_sec']:.0f} samples/s of training{step} on {where}, "
            f"{result['wall_seconds']:.1f} s in all ({result['eval_seconds']:.1f} s of "
            f"evaluation)")


def _fit_options(args):
    names = ("all_reduce", "batch_size", "epochs", "steps", "precision", "seed", "data_dir",
             "checkpoint_dir", "resume", "extend", "checkpoint_every", "checkpoint_secs",
             "keep_checkpoints", "log_device_placement", "quiet", "json_out", "log_every",
             "schedule_steps", "trace", "trace_steps",
             "tensorboard", "sync_batch_norm", "accumulate")
    return {name: getattr(args, name) for name in names}


# What a resumed run needs to be told again (the rest comes from the checkpoint).
_RESUME_OPTIONS = ("devices", "towers", "cpu_towers", "all_reduce", "sync_batch_norm",
                   "data_dir", "checkpoint_dir", "checkpoint_every", "checkpoint_secs",
                   "keep_checkpoints", "json_out", "quiet", "tensorboard")


def _report_interrupt(stop, args):
    """One line (rank 0): where the run stopped, and the command that resumes it."""
    if not _is_rank_zero():
        return
    if stop.checkpoint is None:
        print(f"{stop}; no --checkpoint-dir, so nothing was saved", flush=True)
        return
    print(f"{stop}; resume with: {resume_command(args)}", flush=True)


def resume_command(args):
    """The command line that resumes the run of ``args``.

    >>> resume_command(args)    # towerflow train digits --cpu-towers 2 --steps 60 ...
    'towerflow train digits --cpu-towers 2 --checkpoint-dir ck --resume'
    """
    words = ["towerflow", "train", args.recipe]
    for name in _RESUME_OPTIONS:
        value, unset = getattr(args, name), _UNSET.get(name)
        if value is not None and value != unset and value is not False:
            words += [option_flag(name)] if value is True else [option_flag(name), str(value)]
    ranks = _world_size()
    prefix = [f"towerflow launch -n {ranks} --"] if ranks > 1 else []
    return " ".join(prefix + [shlex.quote(word) for word in words] + ["--resume"])


def _world_size():
    from .parallel import mpi
    return mpi.world_size_from_environment()


def _is_rank_zero():
    from .parallel import mpi
    return mpi.rank_from_environment() == 0


# The options of `towerflow train` a script recipe may decline, with their values
# when not given (--seed, --json-out and --quiet apply to every recipe).
_UNSET = {"devices": None, "towers": None, "cpu_towers": None, "all_reduce": "auto",
          "batch_size": None, "epochs": None, "steps": None, "data_dir": None,
          "checkpoint_dir": None, "resume": False, "log_device_placement": False,
          "precision": None, "extend": False, "checkpoint_every": None,
          "checkpoint_secs": None, "keep_checkpoints": 3, "log_every": None,
          "schedule_steps": None, "trace": None, "trace_steps": None,
          "tensorboard": None, "sync_batch_norm": False, "accumulate": None}


def run_script(recipe, args):
    """Run a script recipe: a program of its own (``recipe.run(args) -> dict``),
    not a classifier trained by training.fit.

    Example::

        >>> run_script(recipes.get("linear_regression"), args)   # args.steps = 2000
        0
    """
    _check_script_options(recipe, args)
    from .training import check_output_paths
    check_output_paths(json_out=args.json_out)      # before the run, not after it
    if args.seed is None:
        args.seed = 0
    start = time.perf_counter()
    result = {"recipe": recipe.name, **recipe.run(args)}
    result.setdefault("wall_seconds", time.perf_counter() - start)
    if args.json_out:
        from .training import write_json
        write_json(args.json_out, result)
    if not args.quiet:
        print(recipe.summary(result))
    return 0


def _check_script_options(recipe, args):
    """Refuse options the recipe would ignore: ignoring them would mislead."""
    given = [name for name, unset in _UNSET.items() if getattr(args, name) != unset]
    declined = [name for name in given if name not in recipe.flags]
    if declined:
        taken = ", ".join(option_flag(name) for name in recipe.flags) or "none"
        raise ValueError(f"recipe {recipe.name!r} does not use "
                         f"{', '.join(option_flag(name) for name in declined)} "
                         f"(its options: {taken}, --seed, --json-out, --quiet)")
    if args.steps is not None and args.epochs is not None:
        raise ValueError(f"recipe {recipe.name!r} takes --steps or --epochs, not both")


def choose_devices(args):
    """The tower devices of ``towerflow train`` (logical CPUs are split here)."""
    if args.cpu_towers is not None:
        return _split_cpu(args.cpu_towers)
    if args.devices is not None:
        names = [name.strip() for name in args.devices.split(",") if name.strip()]
        if not names:       # '' used to mean the defaults, silently
            raise ValueError(f"--devices {args.devices!r}: expected comma-separated "
                             "devices, e.g. /cpu:0,/cpu:1")
        return _existing(names)
    gpus = [d for d in runtime.peek_logical_devices() if d.device_type == "GPU"]
    if gpus:
        count = args.towers or len(gpus)
        if count > len(gpus):
            raise ValueError(f"--towers {count}: only {len(gpus)} GPUs are visible")
        return [f"/gpu:{d.index}" for d in gpus[:count]]
    return _split_cpu(args.towers or os.cpu_count() or 1)


def _split_cpu(count):
    from . import config
    cpu = config.list_physical_devices("CPU")[0]
    if count > 1:
        config.set_logical_device_configuration(
            cpu, [config.LogicalDeviceConfiguration()] * count)
    return [f"/cpu:{index}" for index in range(count)]


def _existing(names):
    devices = runtime.peek_logical_devices()
    for name in names:
        spec = DeviceSpec.from_string(name)
        if spec.device_type is None or not any(spec.matches(d.spec) for d in devices):
            listed = ", ".join(d.short_name for d in devices)
            raise ValueError(f"device {name!r} does not exist; the devices are: {listed}")
    return names


def run_devices(args):
    report = devices_report()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for device in report["devices"]:
        where = ""
        if device["device_type"] == "GPU":
            where = (f"  physical GPU {device['physical_gpu']} ({device['gpu_name']}, "
                     f"pci {device['pci_bus_id']})")
        print(f"{device['name']:<46} memory limit {device['memory_limit'] / 2**20:>9.0f} MB"
              f"{where}")
    if report["gpu_unavailable_reason"]:
        print(f"no GPU is usable: {report['gpu_unavailable_reason']}")
    _print_host(report["host"])
    print("versions: " + ", ".join(f"{key} {value}" for key, value in
                                   report["versions"].items()))
    return 0


def _print_host(host):
    cpu, compiled = host["cpu"], host["compiled_kernels"]
    print(f"cpu: {cpu['model']}, {cpu['usable_cores']} of {cpu['online_cores']} cores usable, "
          f"vector extensions: {', '.join(cpu['vector_extensions']) or 'none'}")
    if not compiled["running"]:
        print(f"compiled kernels: not running: {compiled['reason']}")
    else:
        gemm = {"avx512": "AVX-512", "avx2": "AVX2 + FMA"}[compiled["gemm_path"]] \
            if compiled["vector_gemm"] else \
            f"not running: {compiled['vector_gemm_reason']}"
        print(f"compiled kernels: running; compiled GEMM: {gemm}")
    print("switches set: " + (", ".join(f"{name}={value}" for name, value in
                                       host["switches"].items()) or "none"))


def devices_report():
    """The logical devices, why no GPU is usable (if so), the host (CPU,
    compiled kernels, switches set: device.host.describe) and library versions."""
    devices = [{"name": d.name, "device_type": d.device_type, "index": d.index,
                "memory_limit": d.memory_limit,
                "physical_gpu": d.gpu.index if d.gpu else None,
                "gpu_name": d.gpu.name if d.gpu else None,
                "pci_bus_id": d.gpu.pci_bus_id if d.gpu else None}
               for d in runtime.peek_logical_devices()]
    return {"devices": devices, "gpu_unavailable_reason": runtime.gpu_unavailable_reason(),
            "host": host.describe(), "versions": _versions()}


def _versions():
    import numpy
    found = {"towerflow": _own_version(), "numpy": numpy.__version__}
    try:
        import cupy.cuda.nccl  # also binds cupy; `import cupy` leaves out nccl
        found["cupy"] = cupy.__version__
        found["cuda_runtime"] = _call(lambda: cupy.cuda.runtime.runtimeGetVersion())
        found["nccl"] = _call(lambda: cupy.cuda.nccl.get_version())
    except Exception:  # noqa: BLE001 - CuPy missing or broken: devices_report says why
        found["cupy"] = None
    return found


def _call(getter):
    try:
        return getter()
    except Exception:  # noqa: BLE001 - a version a broken library cannot tell
        return None


def _own_version():
    from . import __version__
    return __version__
