"""The NCCL member kernels against a stand-in of cupy.cuda.nccl (no GPU here):
ranks' calls are grouped, each on its own buffers, summing with NCCL's codes."""

import types

import numpy as np
import pytest

import towerflow as tf
from towerflow.parallel import nccl


class FakeNccl:
    """Records the calls a real cupy.cuda.nccl would receive."""

    def __init__(self):
        self.calls = []
        fake = self

        class NcclCommunicator:
            @staticmethod
            def initAll(device_ids):
                fake.calls.append(("initAll", tuple(device_ids)))
                return [FakeCommunicator(fake, rank) for rank in range(len(device_ids))]

        self.NcclCommunicator = NcclCommunicator

    def groupStart(self):
        self.calls.append(("groupStart",))

    def groupEnd(self):
        self.calls.append(("groupEnd",))


class FakeCommunicator:
    def __init__(self, fake, rank):
        self.fake, self.rank = fake, rank

    def allReduce(self, send, receive, count, dtype, op, stream):
        self.fake.calls.append(("allReduce", self.rank, count, dtype, op))


class FakeArray(np.ndarray):
    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


fake_xp = types.SimpleNamespace(
    empty_like=lambda x: np.empty_like(x).view(FakeArray),
    cuda=types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=0)))


def test_members_issue_one_group_of_all_ranks():
    x = tf.placeholder(tf.float32, [4])
    members = nccl.all_reduce_members([tf.identity(x), tf.identity(x)], [0, 1],
                                      tf.get_default_graph())
    fake, resources = FakeNccl(), {}

    def resource(key, make):   # as a Session does: made once per key
        if key not in resources:
            resources[key] = make()
        return resources[key]

    kernels = [nccl.make_member_kernel(
        types.SimpleNamespace(attrs=m.op.attrs, output_dtypes=[np.dtype(np.float32)],
                              resource=resource), fake, fake_xp) for m in members]
    for kernel in kernels:
        kernel(np.ones(4, np.float32).view(FakeArray))
    assert fake.calls == [("initAll", (0, 1)), ("groupStart",),
                          ("allReduce", 0, 4, nccl.NCCL_DTYPES["float32"], nccl.NCCL_SUM),
                          ("allReduce", 1, 4, nccl.NCCL_DTYPES["float32"], nccl.NCCL_SUM),
                          ("groupEnd",)]


def test_two_towers_on_one_gpu_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="all_reduce='local'"):
        nccl.NcclGroup(FakeNccl(), (0, 0))


def test_member_ops_are_consecutive_and_on_their_towers():
    split = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        split, [tf.config.LogicalDeviceConfiguration()] * 2)
    values = []
    for index in range(2):
        with tf.device(f"/cpu:{index}"):
            values.append(tf.identity(tf.constant([1.0, 2.0])))
    members = nccl.all_reduce_members(values, [0, 1], tf.get_default_graph())
    ids = [m.op._id for m in members]
    assert ids == list(range(ids[0], ids[0] + 2))
    assert [m.op.colocation_root for m in members] == [v.op for v in values]


def test_nccl_is_refused_for_cpu_towers_with_the_alternatives():
    with pytest.raises(ValueError, match="needs every tower on a GPU.*'cpu' or 'local'"):
        tf.parallel.DataParallel(["/cpu:0"], all_reduce="nccl")


def test_nccl_is_refused_for_logical_gpus_of_one_card(fake_gpus):
    fake_gpus(1)
    gpu = tf.config.list_physical_devices("GPU")[0]
    tf.config.set_logical_device_configuration(
        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=1024)] * 2)
    with pytest.raises(ValueError, match="distinct physical GPUs.*use 'local'"):
        tf.parallel.DataParallel(["/gpu:0", "/gpu:1"], all_reduce="nccl")
    assert tf.parallel.choose(["/gpu:0", "/gpu:1"]).name == "local"


def test_auto_picks_nccl_for_distinct_gpus(fake_gpus):
    fake_gpus(2)
    assert tf.parallel.choose(["/gpu:0", "/gpu:1"]).name == "nccl"


def test_processes_join_one_nccl_world_through_an_mpi_broadcast():
    calls = []

    class Nccl:
        @staticmethod
        def get_unique_id():
            return b"id-from-rank-0"

        @staticmethod
        def NcclCommunicator(nranks, unique_id, rank):
            calls.append((nranks, unique_id, rank))
            return "communicator"

    class Comm:
        def bcast(self, value, root):
            calls.append(("bcast", value, root))
            return b"id-from-rank-0"

    for rank in (0, 1):
        world = types.SimpleNamespace(rank=rank, size=2, comm=Comm())
        assert nccl.join_across_processes(Nccl, world, device_id=rank) == ("communicator", rank)
    assert calls == [("bcast", b"id-from-rank-0", 0), (2, b"id-from-rank-0", 0),
                     ("bcast", None, 0), (2, b"id-from-rank-0", 1)]
