"""Kernels of the MPI collectives (host arrays). The world is looked up when a
plan is compiled, so importing towerflow never starts MPI; an op's ``world``
attr picks it (MPI's for the towers, towerflow.horovod's for hvd's ops)."""

import numpy as np


def build_collective_kernels():
    """The collective kernel table (NumPy arrays on the host)."""
    def collective(kind, method):
        def make(ctx):
            world, what = _world(ctx.attrs.get("world")), f"{kind} '{ctx.op.name}'"
            timeout, signature = ctx.attrs["timeout"], ctx.attrs["signature"]
            extra = {"root": ctx.attrs["root_rank"]} if "root_rank" in ctx.attrs else {}
            checked = []

            def run(x):
                # NOTE: ranks compare what they will exchange before the first
                # exchange: MPI itself would fail obscurely or not at all.
                if signature is not None and not checked:
                    world.check_signature(signature, what, timeout)
                    checked.append(True)
                return getattr(world, method)(np.asarray(x), what, timeout, **extra)
            return run
        return make

    def start(ctx):
        run = collective("all-reduce", "all_reduce_start")(ctx)

        def launch(x):
            return np.array(run(x), dtype=object)   # the future, as a variant scalar
        return launch

    def wait(ctx):
        def result(handle):
            return handle.item().result()
        return result

    return {"MpiAllReduce": collective("all-reduce", "all_reduce"),
            "MpiAllReduceStart": start,
            "MpiAllReduceWait": wait,
            "MpiBroadcast": collective("broadcast", "broadcast"),
            "MpiAllGather": collective("all-gather", "all_gather_rows")}


def _world(name):
    from ..parallel import mpi
    return mpi.world_named(name)
