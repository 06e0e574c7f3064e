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
    ascontiguousarray=lambda x: x,          # the fed arrays are contiguous
    cuda=types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=0)))


def member_kernels(members, fake):
    """The members' kernels as one Session makes them (resources made once per key)."""
    resources = {}

    def resource(key, make):
        if key not in resources:
            resources[key] = make()
        return resources[key]
    return [nccl.make_member_kernel(
        types.SimpleNamespace(attrs=m.op.attrs, output_dtypes=[np.dtype(np.float32)],
                              resource=resource), fake, fake_xp) for m in members]


def test_members_issue_one_group_of_all_ranks():
    x = tf.placeholder(tf.float32, [4])
    members = nccl.all_reduce_members([tf.identity(x), tf.identity(x)], [0, 1],
                                      tf.get_default_graph())
    fake = FakeNccl()
    kernels = member_kernels(members, fake)
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
    rank_0_id = bytes(range(128))       # NCCL_UNIQUE_ID_BYTES, as CuPy 14 returns

    class Nccl:
        @staticmethod
        def get_unique_id():
            return rank_0_id

        @staticmethod
        def NcclCommunicator(nranks, unique_id, rank):
            calls.append((nranks, unique_id, rank))
            return "communicator"

    class World:        # MpiWorld.broadcast: rank 0's array, with a deadline
        def __init__(self, rank):
            self.rank, self.size = rank, 2

        def broadcast(self, array, what, timeout):
            calls.append(("broadcast", self.rank, len(array), what, timeout))
            return np.frombuffer(rank_0_id, np.uint8)

    for rank in (0, 1):
        assert nccl.join_across_processes(Nccl, World(rank), timeout=7.0) == "communicator"
    what = "broadcast of the NCCL unique id"
    assert calls == [("broadcast", 0, 128, what, 7.0), (2, rank_0_id, 0),
                     ("broadcast", 1, 128, what, 7.0), (2, rank_0_id, 1)]


# -- multi-process launches: each rank binds its local GPU ------------------------------

def launched_as(monkeypatch, local_rank, world_size, local_size=None):
    """The environment Open MPI's mpiexec gives a rank (every rank on this
    host unless ``local_size`` says how many are)."""
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", str(world_size))
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", str(local_rank))
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", str(local_rank))
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", str(local_size or world_size))


def bound_gpus():
    """The physical GPUs behind this process's logical GPUs, by index."""
    from towerflow.device import runtime
    return [device.gpu.index for device in runtime.logical_devices()
            if device.device_type == "GPU"]


@pytest.mark.parametrize("local_rank, world_size, gpus, bound", [
    (1, 2, 2, [1]), (0, 2, 2, [0]), (2, 3, 2, [0]), (0, 1, 2, [0, 1])],
    ids=["rank1-of-2", "rank0-of-2", "rank2-shares-gpu0", "one-rank-keeps-all"])
def test_a_launched_rank_sees_only_the_gpu_of_its_local_rank(
        fake_gpus, monkeypatch, local_rank, world_size, gpus, bound):
    launched_as(monkeypatch, local_rank, world_size)
    fake_gpus(gpus)
    visible = [device.name for device in tf.config.get_visible_devices("GPU")]
    assert visible == [f"/physical_device:GPU:{index}" for index in bound]
    assert bound_gpus() == bound
    assert tf.parallel.default_devices() == [f"/gpu:{i}" for i in range(len(bound))]


def test_one_rank_per_host_keeps_every_gpu_of_its_host(fake_gpus, monkeypatch):
    launched_as(monkeypatch, 0, world_size=2, local_size=1)     # 2 hosts, 1 rank each
    fake_gpus(4)
    assert bound_gpus() == [0, 1, 2, 3]


def test_set_visible_devices_overrides_the_binding(fake_gpus, monkeypatch):
    launched_as(monkeypatch, 1, 2)
    fake_gpus(2)
    tf.config.set_visible_devices(tf.config.list_physical_devices("GPU"), "GPU")
    assert bound_gpus() == [0, 1]


def test_nccl_across_processes_refuses_several_towers_per_rank(fake_gpus, monkeypatch):
    launched_as(monkeypatch, 0, 2)
    fake_gpus(2)
    tf.config.set_visible_devices(tf.config.list_physical_devices("GPU"), "GPU")
    with pytest.raises(ValueError, match=r"one GPU tower per rank, got 2 towers.*'mpi'"):
        tf.parallel.DataParallel(["/gpu:0", "/gpu:1"], all_reduce="nccl")


# -- the simulated cupy.cuda.nccl, as CuPy 14 has it ------------------------------------

def test_simulated_unique_ids_are_bytes_and_communicators_refuse_tuples():
    from towerflow import simgpu
    with simgpu.installed(gpus=1) as cupy:
        from cupy.cuda import nccl as nccl_module    # as CuPy: not loaded by `import cupy`
        unique_id = nccl_module.get_unique_id()
        assert isinstance(unique_id, bytes) and len(unique_id) == 128
        assert nccl_module.available
        with pytest.raises(TypeError, match="expected bytes, got tuple"):
            nccl_module.NcclCommunicator(1, tuple(unique_id), 0)
        with pytest.raises(nccl_module.NcclError, match="rank 1 is not in"):
            nccl_module.NcclCommunicator(1, unique_id, 1)
        alone = nccl_module.NcclCommunicator(1, unique_id, 0)
        x = cupy.arange(4, dtype=cupy.float32)
        out = cupy.empty_like(x)
        alone.allReduce(x.data.ptr, out.data.ptr, 4, nccl_module.NCCL_FLOAT32,
                        nccl_module.NCCL_SUM, cupy.cuda.get_current_stream().ptr)
        assert out.get().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_simulated_nccl_refuses_two_ranks_on_one_gpu_in_nccls_words():
    from towerflow.simgpu import nccl as simulated
    uid = bytes(128)
    joined = [(uid, 0, "host", "0000:1E:00.0"), (uid, 1, "host", "0000:1E:00.0")]
    with pytest.raises(simulated.NcclError,
                       match="Duplicate GPU detected : rank 1 and rank 0 both on CUDA "
                             "device 1e000"):
        simulated._check_rendezvous(joined, 0)
    other_host = [(uid, 0, "a", "0000:1E:00.0"), (uid, 1, "b", "0000:1E:00.0")]
    simulated._check_rendezvous(other_host, 0)       # one GPU each on two hosts


def test_nccl_without_the_library_is_refused_with_the_install():
    x = tf.placeholder(tf.float32, [4])
    member = nccl.all_reduce_members([tf.identity(x)], [0], tf.get_default_graph())[0]
    missing = types.SimpleNamespace(available=False)    # cupy.cuda.nccl without libnccl
    ctx = types.SimpleNamespace(attrs=member.op.attrs, output_dtypes=[np.dtype(np.float32)],
                                resource=None)
    with pytest.raises(tf.errors.UnavailableError, match="pip install nvidia-nccl-cu12"):
        nccl.make_member_kernel(ctx, missing, fake_xp)


class SlowNccl(FakeNccl):
    """A stand-in whose groupStart takes a while, so two threads' groups
    would interleave unless they take turns."""

    def groupStart(self):
        import time
        super().groupStart()
        time.sleep(0.05)


def test_sessions_sharing_a_clique_issue_their_groups_one_at_a_time():
    """Sessions share a group's communicators (shared_group): two Sessions
    on two threads must not interleave their group calls, which NCCL needs
    issued in one order per communicator."""
    import threading
    x = tf.placeholder(tf.float32, [4])
    members = nccl.all_reduce_members([tf.identity(x), tf.identity(x)], [0, 1],
                                      tf.get_default_graph())
    fake, ready = SlowNccl(), threading.Barrier(2)

    def session_step():
        kernels = member_kernels(members, fake)     # its own resources, the clique shared
        kernels[0](np.ones(4, np.float32).view(FakeArray))
        ready.wait()
        kernels[1](np.ones(4, np.float32).view(FakeArray))
    threads = [threading.Thread(target=session_step) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    group_calls = [call[0] for call in fake.calls if call[0] != "initAll"]
    assert group_calls == ["groupStart", "allReduce", "allReduce", "groupEnd"] * 2
